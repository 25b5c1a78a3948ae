//! The market the scenarios run against, two ways: [`FakeChain`] (the in-memory fake the
//! reconcile loop's unit tests use) and [`program::ProgramMarket`] (the agent's real
//! `SolanaChain` over JSON-RPC to the program's SBF build in LiteSVM). Both hold the same
//! machine, take the same bids and move the same clocks, so a scenario that passes on one and
//! fails on the other shows where the fake drifted from the program.

pub mod program;
pub mod reconciler;

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use gpu_market::state::{GpuSpec, OverclockTerms};
use gpu_market_agent::chain::fake::FakeChain;
use gpu_market_agent::chain::{BidKind, BidView, Chain, GpuView, Key, NetworkView};
use gpu_market_core::fit::{Host, Region, Room};

/// The cluster clock when a scenario starts.
/// On the grid of the tests' billing intervals (`interval_window`): a lease started at `T0` has
/// whole windows.
pub const T0: i64 = 1_699_999_980;
/// The CPU and memory the scenarios' machine gives its leases in all.
pub const MACHINE_HOST: Host = Host {
    cpu_milli: 8_000,
    memory_mib: 16_384,
};
/// The scenarios' machine's region.
pub const MACHINE_REGION: Region = *b"eu-central\0\0\0\0\0\0";
/// The region of a second machine, where a scenario adds one.
pub const OTHER_REGION: Region = *b"us-east\0\0\0\0\0\0\0\0\0";
/// The market's billing interval.
pub const INTERVAL: u32 = 60;
pub use crate::support::TOKEN;
/// What the machine's owner declares electricity costs, per kWh.
pub const ELECTRICITY_COST: u64 = TOKEN / 5;
/// How long a bid may wait to start before its deadline (well within the queue's aging cap).
pub const WAIT_SECS: i64 = 120;
/// The market's idle rule in the scenarios: idle proofs in a row that end a lease (the
/// threshold is the markets' default `idle_utilisation_bps`).
pub const IDLE_END_INTERVALS: u16 = 4;
/// An image reference and digest the bids ask for.
pub const IMAGE: &str = "127.0.0.1:5000/gpu-market/worker:v1";
pub const IMAGE_DIGEST: [u8; 32] = [7; 32];

/// The machine every scenario runs on: 2 GPUs of class 0 in one topology group, 24 GiB each
/// (the agent's on-chain tests' machine).
pub fn machine_gpus() -> Vec<GpuSpec> {
    crate::support::gpus(2)
}

/// A bid as a client asks for it, whichever market takes it.
#[derive(Debug, Clone)]
pub struct BidSpec {
    pub kind: BidKind,
    pub gpu_count: u8,
    pub gib_per_gpu: u16,
    pub power_limit_w: u16,
    /// Per GPU-hour (queue) or per GPU-day (spot).
    pub price: u64,
    pub max_duration_secs: u32,
    /// How long after placement the bid may still start.
    pub wait_secs: i64,
    /// Container ports its lease publishes.
    pub ports: Vec<u16>,
    /// CPU and memory its lease holds on the machine.
    pub host: Host,
    /// The regions whose machines may run it (none: any).
    pub regions: Vec<Region>,
    /// The digest of its image (of [`IMAGE`]'s reference: the recording runtime pulls any).
    pub image_digest: [u8; 32],
    /// The hash of its sealed environment (zeroes: none).
    pub env_hash: [u8; 32],
}

impl BidSpec {
    /// A queue bid for `gpu_count` GPUs × 8 GiB at 300 W, [`crate::support::PRICE`] per
    /// GPU-hour, for `intervals` billing intervals.
    pub fn queue(gpu_count: u8, intervals: u32) -> Self {
        BidSpec {
            kind: BidKind::Queue,
            gpu_count,
            gib_per_gpu: 8,
            power_limit_w: 300,
            price: crate::support::PRICE,
            max_duration_secs: intervals * INTERVAL,
            wait_secs: WAIT_SECS,
            ports: Vec::new(),
            host: Host::default(),
            regions: Vec::new(),
            image_digest: IMAGE_DIGEST,
            env_hash: [0; 32],
        }
    }

    /// A spot bid on the machine for `gpu_count` whole GPUs (24 GiB) at 300 W, `per_day` per
    /// GPU-day, for `intervals` billing intervals.
    pub fn spot(gpu_count: u8, intervals: u32, per_day: u64) -> Self {
        BidSpec {
            kind: BidKind::Spot,
            gib_per_gpu: 24,
            price: per_day,
            ..Self::queue(gpu_count, intervals)
        }
    }

    /// The bid's overclock terms, one for every GPU.
    pub fn overclock(&self) -> OverclockTerms {
        OverclockTerms {
            power_limit_w: self.power_limit_w,
            ..Default::default()
        }
    }

    /// The deadline of the bid placed at `now`: it may start until `wait_secs` from now.
    pub fn deadline(&self, now: i64) -> i64 {
        now + self.wait_secs + self.max_duration_secs as i64
    }
}

/// A market with the scenarios' machine, seen through the agent's [`Chain`].
#[async_trait]
pub trait MarketUnderTest: Send + Sync {
    /// The chain as the machine's agent sees it.
    fn chain(&self) -> Arc<dyn Chain>;
    /// A new client places `spec`; returns the bid's key.
    async fn place_bid(&self, spec: &BidSpec) -> Key;
    /// Moves the cluster clock and tokio's (paused) clock `secs` seconds on.
    async fn advance(&self, secs: u64);
    /// Whether the client of `lease` may reclaim its escrow now, slashing the host for its
    /// silence (`Lease::reclaimable`); `false` once the lease is closed.
    async fn reclaimable(&self, lease: Key) -> bool;
}

/// The in-memory fake, with the machine's GPUs as [`machine_gpus`] declares them.
pub struct FakeMarket {
    chain: Arc<FakeChain>,
    /// The last bid's number: bids and clients get keys from it.
    bids: AtomicU8,
}

impl FakeMarket {
    pub fn start() -> Self {
        let gpus = machine_gpus()
            .iter()
            .map(|g| {
                let view = GpuView {
                    uuid: g.uuid,
                    class: g.class,
                    memory_gib: g.memory_gib,
                    topology_group: g.topology_group,
                };
                (view, g.limits())
            })
            .collect();
        let chain = FakeChain::new(gpus, INTERVAL, T0);
        chain.set_electricity_cost(ELECTRICITY_COST);
        chain.set_region(MACHINE_REGION);
        chain.set_network(NetworkView {
            room: Room {
                host: MACHINE_HOST,
                ..Room::default()
            },
            ..NetworkView::default()
        });
        let p = crate::support::params();
        chain.set_idle_rule(p.idle_utilisation_bps, IDLE_END_INTERVALS);
        FakeMarket {
            chain: Arc::new(chain),
            bids: AtomicU8::new(0),
        }
    }
}

#[async_trait]
impl MarketUnderTest for FakeMarket {
    fn chain(&self) -> Arc<dyn Chain> {
        self.chain.clone()
    }

    async fn place_bid(&self, spec: &BidSpec) -> Key {
        let n = self.bids.fetch_add(1, Ordering::Relaxed) + 1;
        let key = Key([n; 32]);
        self.chain.place_bid(BidView {
            gang: None,
            key,
            client: Key([n.wrapping_add(128); 32]),
            kind: spec.kind,
            gpu_count: spec.gpu_count,
            gib_per_gpu: spec.gib_per_gpu,
            accepted_classes: 1,
            gpus: None,
            fits_if_ended: Vec::new(),
            elsewhere: None,
            overclock: vec![spec.overclock().to_core(); spec.gpu_count as usize],
            price: spec.price,
            max_duration_secs: spec.max_duration_secs,
            deadline: spec.deadline(self.chain.clock()),
            latest_start: self.chain.clock() + spec.wait_secs,
            image_ref: IMAGE.into(),
            image_digest: spec.image_digest,
            env_hash: spec.env_hash,
            room: gpu_market_agent::chain::RoomAsked {
                ports: spec.ports.clone(),
                scratch_gib: 0,
                host: spec.host,
            },
            regions: spec.regions.clone(),
            auto_power: None,
        });
        key
    }

    async fn advance(&self, secs: u64) {
        tokio::time::advance(Duration::from_secs(secs)).await;
    }

    async fn reclaimable(&self, lease: Key) -> bool {
        self.chain.reclaimable().contains(&lease)
    }
}
