//! What the agent needs from the market program, in the agent's own types.
//!
//! [`solana::SolanaChain`] reads the program's accounts over JSON-RPC and translates them into
//! these views; the reconcile loop sees only [`Chain`]. [`fake::FakeChain`] plays the program's
//! rules in memory for unit tests.

pub mod fake;
pub mod fees;
pub mod mirror;
mod placement;
pub mod solana;
pub mod traffic;
mod walk;
pub mod watch;

use std::fmt;
use std::str::FromStr;

use async_trait::async_trait;
use gpu_market::errors::MarketError;
use gpu_market_core::lease::UsageProof;
use gpu_market_core::overclock::OverclockTerms;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An account address: 32 bytes, shown in base58 as Solana shows it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Key(pub [u8; 32]);

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyError {
    #[error("not base58: {0}")]
    Base58(String),
    #[error("{0} bytes instead of 32")]
    Length(usize),
}

impl FromStr for Key {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bytes = bs58::decode(s)
            .into_vec()
            .map_err(|e| KeyError::Base58(e.to_string()))?;
        let len = bytes.len();
        bytes.try_into().map(Key).map_err(|_| KeyError::Length(len))
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&bs58::encode(self.0).into_string())
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({self})")
    }
}

impl Serialize for Key {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MachineStatus {
    Active,
    Paused,
    Retired,
}

/// One GPU as the machine account declares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuView {
    /// The GPU's UUID as the machine declares it: the GPU the agent must drive at this index.
    pub uuid: [u8; 16],
    pub class: u8,
    pub memory_gib: u16,
    pub topology_group: u8,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineView {
    pub gpus: Vec<GpuView>,
    /// GiB not yet allocated to a lease, per GPU (GPUs are sold in GiB slices).
    pub free_gib: Vec<u16>,
    pub status: MachineStatus,
    /// What the machine declares of its leases' network and room.
    pub network: NetworkView,
    /// The image digests it advertises as cached: kept in the store whatever it holds.
    pub cached_images: Vec<[u8; 32]>,
    /// The host's pay its proofs accrued and nobody claimed yet.
    pub unclaimed_pay: u64,
    /// Its GPUs go whole: no GPU holding a lease is given to another (`set_whole_gpus`).
    pub whole_gpus: bool,
}

/// Where a lease's container may connect to, as the machine account declares it (the
/// program's `Egress`, with its allow-list).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum EgressView {
    /// Loopback only.
    #[default]
    None,
    /// Only these IPv4 networks (address, prefix length).
    AllowList(Vec<(std::net::Ipv4Addr, u8)>),
    /// Any public address.
    Open,
}

/// The machine account's network declaration, as the agent applies it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkView {
    pub egress: EgressView,
    /// The most ports and scratch it gives one lease, and the CPU and memory of all its leases.
    pub room: gpu_market_core::fit::Room,
}

/// What a bid's lease holds besides GPUs: the container ports it publishes, the GiB of its
/// scratch volume, and the CPU and memory the machine holds for it (0: the machine gives none;
/// the agent's per-GPU default applies).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoomAsked {
    pub ports: Vec<u16>,
    pub scratch_gib: u16,
    pub host: gpu_market_core::fit::Host,
}

impl RoomAsked {
    /// As the fit rule counts it.
    pub fn room(&self) -> gpu_market_core::fit::Room {
        gpu_market_core::fit::Room {
            ports: self.ports.len() as u8,
            scratch_gib: self.scratch_gib,
            host: self.host,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BidKind {
    /// Priced per GPU-hour, ranked by score, runs on any matching machine.
    Queue,
    /// Priced per GPU-day for one machine; the most profitable one wins each interval.
    Spot,
}

/// A lease's place in a gang: one bid on several machines at once, one lease each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gang {
    /// This lease's part (0: the first, whose machine the others reach).
    pub part: u8,
    pub parts: u8,
    /// The public address of each part's machine (its `network.host`), by part; empty for a
    /// part whose lease is gone.
    pub hosts: Vec<String>,
    /// The bid's first container port: what the first part's rendezvous listens on.
    pub port: u16,
    /// The host port the first part's agent published [`Gang::port`] on
    /// (`Chain::set_rendezvous`), where the other parts reach it; `None` until recorded.
    pub rendezvous: Option<u16>,
}

impl Gang {
    /// The public address of the first part's machine: the rendezvous (`MASTER_ADDR`).
    pub fn first_host(&self) -> &str {
        self.hosts.first().map_or("", String::as_str)
    }

    /// The port this part reaches the first part's rendezvous at: the first part its own
    /// container port; the others the host port it was published on (0 until recorded).
    pub fn master_port(&self) -> u16 {
        match self.part {
            0 => self.port,
            _ => self.rendezvous.unwrap_or(0),
        }
    }
}

/// A lease on this machine: a bid that was allocated GPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseView {
    pub key: Key,
    pub bid: Key,
    pub client: Key,
    pub kind: BidKind,
    /// Per GPU-hour (queue) or per GPU-day (spot), in payment-token base units.
    pub price: u64,
    /// Machine GPU indices, in the lease's GPU order.
    pub gpu_indices: Vec<u8>,
    pub gib_per_gpu: u16,
    /// The settings of each GPU, in the lease's GPU order.
    pub overclock: Vec<OverclockTerms>,
    pub image_ref: String,
    pub image_digest: [u8; 32],
    pub env_hash: [u8; 32],
    /// The ports it publishes and its scratch volume.
    pub room: RoomAsked,
    /// The bid's auto power tolerance (bps of throughput), where it opted in.
    pub auto_power: Option<u16>,
    pub started_at: i64,
    pub ends_at: i64,
    /// Set when the lease was told to stop early (a spot preemption).
    pub stop_at: Option<i64>,
    pub interval_secs: u32,
    /// The lease's silence rule: `silence_intervals` billing intervals after its last proven
    /// second, its client may reclaim the escrow and slash the host.
    pub silence_intervals: u16,
    /// The interval index the next proof must carry.
    pub next_interval: u32,
    /// The chain hash of the last accepted proof (zeroes before the first).
    pub proof_hash: [u8; 32],
    /// Its place in its gang, for a part of a gang bid's.
    pub gang: Option<Gang>,
    /// Another part of its gang has settled: the gang no longer runs whole, and this part
    /// stops (anyone may stop it).
    pub gang_broken: bool,
}

/// What a bid or lease runs: its image and its sealed environment (the bid's, on chain).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Workload<'a> {
    pub bid: Key,
    /// The bid's client: the one key the agent's API serves the lease to.
    pub client: Key,
    /// The ports it publishes and its scratch volume.
    pub room: &'a RoomAsked,
    pub image_ref: &'a str,
    pub image_digest: &'a [u8; 32],
    pub env_hash: &'a [u8; 32],
    /// Its place in its gang, for a part of a gang bid's.
    pub gang: Option<&'a Gang>,
}

impl BidView {
    pub fn workload(&self) -> Workload<'_> {
        Workload {
            bid: self.key,
            client: self.client,
            room: &self.room,
            image_ref: &self.image_ref,
            image_digest: &self.image_digest,
            env_hash: &self.env_hash,
            gang: self.gang.as_ref(),
        }
    }

    /// The sum of the power limits asked, in W.
    pub fn power_w(&self) -> u64 {
        self.overclock.iter().map(|s| s.power_limit_w as u64).sum()
    }
}

impl LeaseView {
    pub fn workload(&self) -> Workload<'_> {
        Workload {
            bid: self.bid,
            client: self.client,
            room: &self.room,
            image_ref: &self.image_ref,
            image_digest: &self.image_digest,
            env_hash: &self.env_hash,
            gang: self.gang.as_ref(),
        }
    }

    /// When the lease stops: its end, or the earlier stop it was told.
    pub fn stop(&self) -> i64 {
        self.stop_at.map_or(self.ends_at, |s| s.min(self.ends_at))
    }

    /// From when its client may reclaim the escrow and slash the host, unless a proof lands
    /// first (`Lease::silent_from`: `silence_intervals` after the last proven second); `None`
    /// once every payable second is proven.
    pub fn reclaimable_from(&self) -> Option<i64> {
        let interval = self.interval_secs as i64;
        let proven_until = match self.next_interval.checked_sub(1) {
            None => self.started_at,
            Some(last) => gpu_market_core::lease::interval_window(
                self.started_at,
                self.interval_secs,
                last,
                self.stop(),
            )
            .map_or(self.stop(), |(_, to)| to),
        };
        (proven_until < self.stop()).then(|| {
            proven_until.saturating_add(interval.saturating_mul(self.silence_intervals as i64))
        })
    }
}

/// Where the market's packing policy gives a bid that fits this machine, and when this
/// machine's turn to take it comes if that machine does not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elsewhere {
    pub machine: Key,
    /// Grace periods to wait: this machine's place among the others the bid fits, in the
    /// policy's tie-break order (1: first after the policy's machine), so that exactly one
    /// machine takes the bid at a time.
    pub turn: u32,
}

/// An open bid this machine could take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BidView {
    pub key: Key,
    pub client: Key,
    pub kind: BidKind,
    pub gpu_count: u8,
    pub gib_per_gpu: u16,
    /// Bit `c` set: GPU class `c` is accepted.
    pub accepted_classes: u8,
    /// The machine GPUs the market's fit rule (`gpu_market_core::fit`) gives the bid on the
    /// machine as it is now, `gpus[i]` serving the bid's GPU `i`: exactly what `allocate`
    /// accepts. `None` for a bid that fits only once a running spot lease ends. Where the
    /// market's packing policy gives the bid this machine, the GPUs the policy chose.
    pub gpus: Option<Vec<u8>>,
    /// The machine the market's packing policy (`gpu_market_core::placement::Placer`) gives
    /// the bid, when the bid fits here now but the policy prefers another machine: this one
    /// takes it only once it has waited its turn.
    pub elsewhere: Option<Elsewhere>,
    /// For a bid that does not fit now: the running spot leases of this machine (not told to
    /// stop yet) whose end would let it fit (what `preempt` checks of a challenger; a spot bid
    /// must also pay the host more than the lease).
    pub fits_if_ended: Vec<Key>,
    /// The settings asked of each of the bid's GPUs, in the bid's GPU order.
    pub overclock: Vec<OverclockTerms>,
    /// Per GPU-hour (queue) or per GPU-day (spot).
    pub price: u64,
    pub max_duration_secs: u32,
    /// The latest end of its run.
    pub deadline: i64,
    /// The latest time it may start (its deadline less the shortest run its client accepts):
    /// after it, anyone may prune it.
    pub latest_start: i64,
    pub image_ref: String,
    pub image_digest: [u8; 32],
    pub env_hash: [u8; 32],
    /// Its auto power tolerance (bps of throughput), where it opted in.
    pub auto_power: Option<u16>,
    /// The ports its lease publishes and its scratch volume.
    pub room: RoomAsked,
    /// The regions whose machines may run it (none: any).
    pub regions: Vec<gpu_market_core::fit::Region>,
    /// For a gang bid this machine starts (the packing policy gives it the first part): the
    /// place its lease takes in the gang.
    pub gang: Option<Gang>,
}

/// What one look at the machine's books finds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenBids {
    /// Bids the machine may take now, or once a spot lease ends, best ranked first.
    pub bids: Vec<BidView>,
    /// Bids in the books whose latest start has passed: anyone may prune them (refunding their
    /// clients), and they only lengthen the books.
    pub expired: Vec<Key>,
    /// How long a heartbeat keeps this machine in the market's packing policy
    /// (`gpu_market_sdk::placement::alive_secs`); `None` where the chain does not say.
    pub alive_secs: Option<i64>,
    /// What this machine should do about reservations (EASY backfilling), if anything.
    pub reservation: Option<ReservationDuty>,
    /// Gang bids that fit this machine now and that this look did not ask the packing policy
    /// about: its [`GANG_PLACEMENTS`] were spent on gangs ranked above them.
    pub gangs_left: usize,
}

/// The most gang bids one look at the books asks the packing policy to place. A gang bid
/// that fits this machine is listed only where the policy gives this machine its first part,
/// so, unlike a single bid, asking about one may list nothing: a queue of gangs that fit a few
/// machines but can never be placed whole would otherwise have each look on those machines
/// place every one of them (8 ms and 0.7 MiB of shape index each, at 10,000 machines). The
/// gangs ranked below wait for a later look, as the ones above start or leave; single bids
/// below are considered as before.
pub const GANG_PLACEMENTS: usize = 16;

/// A machine's part in the market's reservations (`reserve`, `reserve_gang`, `unreserve`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReservationDuty {
    /// Hold this machine's GPUs for the queue bid: the best waiting one that fits no machine
    /// now and no machine holds, which this machine can start the soonest.
    Reserve(Key),
    /// Hold GPUs of each of `parts` (this machine first) for the gang bid, all from the time
    /// every part fits: the machines that can start a part of it soonest.
    ReserveGang { bid: Key, parts: Vec<Key> },
    /// Clear this machine's reservation: its bid started, left or moved on, or it lapsed.
    Clear,
}

#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ChainError {
    /// The cluster could not be reached or did not answer in time; the call may or may not have
    /// landed. Retry after observing again.
    #[error("the cluster is unreachable: {0}")]
    Unavailable(String),
    /// The program, or the cluster's checks of the transaction (its size, signatures, fee
    /// payer), refused the call as it stood. `code` is the program's error code
    /// (`gpu_market::errors::MarketError`) when the program itself refused.
    #[error("{op} was refused: {reason}")]
    Rejected {
        op: &'static str,
        reason: String,
        code: Option<u32>,
    },
}

impl ChainError {
    /// A refusal of `op` that is not the program's own (a read, the node's checks).
    pub fn rejected(op: &'static str, reason: impl Into<String>) -> Self {
        ChainError::Rejected {
            op,
            reason: reason.into(),
            code: None,
        }
    }

    pub fn is_transient(&self) -> bool {
        matches!(self, ChainError::Unavailable(_))
    }

    /// Whether the program refused the call with `error`.
    pub fn refused_with(&self, error: MarketError) -> bool {
        matches!(self, ChainError::Rejected { code: Some(c), .. } if *c == u32::from(error))
    }
}

/// The market program as the agent of one machine sees it.
#[async_trait]
pub trait Chain: Send + Sync {
    /// The cluster's clock, unix seconds.
    async fn now(&self) -> Result<i64, ChainError>;
    async fn machine(&self) -> Result<MachineView, ChainError>;
    /// The leases running on this machine.
    async fn leases(&self) -> Result<Vec<LeaseView>, ChainError>;
    /// Which of `leases` the chain shows closed (settled): their accounts are gone at a
    /// commitment no fork can undo. A lease a listing omitted is gone only when this says so: a
    /// lagging node, or an account that fails to decode, is not a closed lease.
    async fn closed_leases(&self, leases: &[Key]) -> Result<Vec<Key>, ChainError>;
    /// Up to `limit` open bids this machine could take (queue bids and its own spot bids), best
    /// ranked first, each with the GPUs the fit rule gives it; and up to `limit` expired bids
    /// of those books.
    async fn best_open_bids(&self, limit: usize) -> Result<OpenBids, ChainError>;
    /// The key the lease of `bid` gets once allocated: known before `allocate` is sent, so that
    /// its container can be made ready while it confirms.
    fn lease_key(&self, bid: Key) -> Key;
    /// Allocates `gpu_indices` of this machine to `bid`; returns the new lease's key (its
    /// [`lease_key`](Self::lease_key)).
    async fn allocate(&self, bid: Key, gpu_indices: &[u8]) -> Result<Key, ChainError>;
    /// Stops a spot lease in favour of `better_bid`, which must fit the GPUs it frees: at the
    /// lease's next interval boundary for a spot bid that pays the host more, at once for a
    /// queue bid.
    async fn preempt(&self, lease: Key, better_bid: Key) -> Result<(), ChainError>;
    /// Submits proofs of this machine's leases, one interval each (a lease listed twice
    /// proves two intervals, in order), in as few transactions as fit: one `submit_usage`
    /// signature for the machine, however many leases it runs. The proofs of one transaction
    /// land together or not at all; where they take several, a failure may follow ones that
    /// landed (the next look at the leases tells). Intervals may be skipped (never paid), never
    /// proven twice or out of order. A proof waits for its window's end, except a final one
    /// (with an exit code): its window is clipped at the cluster clock, and the lease stops at
    /// the window's end. Pay accrues to the machine ([`Chain::claim_pay`]).
    async fn submit_usage(&self, proofs: &[(Key, UsageProof)]) -> Result<(), ChainError>;
    /// Pays the machine's owner what its proofs accrued.
    async fn claim_pay(&self) -> Result<(), ChainError>;
    /// Ends a lease: the agent is a party to it, so it stops at the cluster clock (if it runs
    /// on), and settles (closes) once every payable second up to its stop is proven: at once
    /// when it is, else at a later call after the last proofs.
    async fn end_lease(&self, lease: Key) -> Result<(), ChainError>;
    async fn heartbeat(&self) -> Result<(), ChainError>;
    /// Reports a fatal fault of the machine's GPU `gpu` (Xid `xid`): the program pauses the
    /// machine and keeps the fault for its owner.
    async fn report_fault(&self, gpu: u8, xid: u32) -> Result<(), ChainError>;
    /// Records, for the first part `lease` of a gang, the host port `port` its first published
    /// port got: where the gang's other parts reach it (`set_rendezvous`, once).
    async fn set_rendezvous(&self, lease: Key, port: u16) -> Result<(), ChainError>;
    /// Removes a bid whose latest start has passed from its book, refunding its client.
    async fn prune_bid(&self, bid: Key) -> Result<(), ChainError>;
    /// Holds this machine's GPUs for waiting queue bid `bid` (`reserve`).
    async fn reserve(&self, bid: Key) -> Result<(), ChainError>;
    /// Holds GPUs of each machine of `parts` for waiting gang bid `bid` (`reserve_gang`).
    async fn reserve_gang(&self, bid: Key, parts: &[Key]) -> Result<(), ChainError>;
    /// Clears this machine's reservation, which holds nothing any more (`unreserve`).
    async fn unreserve(&self) -> Result<(), ChainError>;
    /// Says whether this machine's GPUs go whole: its host cannot confine a lease to a GiB
    /// slice (`set_whole_gpus`).
    async fn set_whole_gpus(&self, whole: bool) -> Result<(), ChainError>;
    /// The copy of `bid`'s environment sealed to this machine's agent key, as the bid's client
    /// stored it (`seal_env`); `None` while there is none.
    async fn sealed_env(&self, bid: Key) -> Result<Option<Vec<u8>>, ChainError>;
    /// JSON-RPC requests sent so far (what a public RPC provider counts); 0 for a chain that is
    /// not reached over JSON-RPC.
    fn requests_sent(&self) -> u64 {
        0
    }
}

/// The chain hash of `proof` following `prev_hash`: sha256 of the core's preimage.
pub fn proof_hash(lease: &Key, proof: &UsageProof, prev_hash: &[u8; 32]) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    Sha256::digest(proof.chain_preimage(&lease.0, prev_hash)).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_through_base58_and_json() {
        let k = Key([7; 32]);
        let s = k.to_string();
        assert_eq!(s.parse::<Key>().unwrap(), k);
        let json = serde_json::to_string(&k).unwrap();
        assert_eq!(json, format!("\"{s}\""));
        assert_eq!(serde_json::from_str::<Key>(&json).unwrap(), k);
        assert!(matches!("abc".parse::<Key>(), Err(KeyError::Length(_))));
        assert!(matches!("0OIl".parse::<Key>(), Err(KeyError::Base58(_))));
    }

    #[test]
    fn the_proof_hash_binds_the_previous_hash() {
        let p = UsageProof {
            interval: 0,
            intervals: 1,
            gpu_seconds: 60,
            energy_j: 100,
            avg_utilisation_bps: 5_000,
            peak_power_w: vec![300],
            exit_code: None,
            samples_hash: [0; 32],
            energy_saved_j: 0,
        };
        let a = proof_hash(&Key([1; 32]), &p, &[0; 32]);
        // The readings it committed to are part of it.
        let other_log = UsageProof {
            samples_hash: [1; 32],
            ..p.clone()
        };
        assert_ne!(proof_hash(&Key([1; 32]), &other_log, &[0; 32]), a);
        assert_ne!(a, proof_hash(&Key([1; 32]), &p, &[1; 32]));
        assert_ne!(a, proof_hash(&Key([2; 32]), &p, &[0; 32]));
        assert_eq!(a, proof_hash(&Key([1; 32]), &p, &[0; 32]));
    }
}
