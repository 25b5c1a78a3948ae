//! A market program in memory, for tests: one machine, its bids and leases, and the rules the
//! agent must respect (the market's fit rule for allocations and preemptions, with no better
//! bid left waiting; spot bids ranked by the host's profit; the proof interval order, windows
//! and hash chain; when a lease stops and when it settles; when a bid may be pruned; a lease
//! keeps the billing interval it started with when the market changes its; the market's idle
//! rule, once set with [`FakeChain::set_idle_rule`]).
//!
//! These rules are checked against the program's, not only written down: the scenario list
//! `agent/tests/scenarios.rs` runs each scenario against this fake and against the agent's
//! `SolanaChain` over the program's SBF build in LiteSVM, asserting the same outcomes. A rule
//! changed here or in the program without the other fails there; a rule the list does not
//! exercise is a rule to add to it before relying on it here.
//!
//! Its clock follows tokio's, so a paused test clock drives it. It has no host floor, reserve
//! prices, stakes or escrow: every price passes, no client is capped, and a preempted spot bid
//! always has escrow left to go back to its book (which never fills).

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use gpu_market::errors::MarketError;
use gpu_market_core::fit::{
    GpuOffer, Host, Need, Offer, Region, Regions, Terms, GPU_CLASSES, REGION_LEN,
};
use gpu_market_core::lease::{
    idle_end_within, idle_streak, interval_end, span_window, spot_profit_per_day, UsageProof,
};
use gpu_market_core::overclock::GpuLimits;
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use super::{
    proof_hash, BidKind, BidView, Chain, ChainError, GpuView, Key, LeaseView, MachineStatus,
    MachineView, NetworkView, OpenBids, ReservationDuty,
};

/// A proof the fake accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptedProof {
    pub lease: Key,
    pub proof: UsageProof,
    /// The window the proof's interval covers, as the program computes it.
    pub window: (i64, i64),
    pub hash: [u8; 32],
}

pub struct FakeChain {
    inner: Mutex<Inner>,
}

struct Inner {
    epoch: Instant,
    base_unix: i64,
    /// The market's billing interval now: what a lease allocated now keeps.
    interval_secs: u32,
    /// The market's silence rule now (intervals after the last proven second from which the
    /// client may reclaim the escrow and slash the host): what a lease allocated now keeps.
    silence_intervals: u16,
    /// Leases whose escrow was reclaimed for the host's silence, in order.
    reclaimed: Vec<Key>,
    /// What the machine's owner declares electricity costs, per kWh.
    electricity_cost_per_kwh: u64,
    gpus: Vec<(GpuView, GpuLimits)>,
    status: MachineStatus,
    /// What the machine declares of its leases' network and room (none until set).
    network: NetworkView,
    /// The machine's region label (none until set).
    region: Region,
    /// Open bids in placement order; see [`Inner::book`] for their rank.
    bids: Vec<BidView>,
    /// The bids that became leases, as they were placed.
    taken: Vec<BidView>,
    leases: Vec<LeaseView>,
    /// Leases stopped by a preemption: their bids go back to their books when they settle.
    preempted: Vec<Key>,
    accepted: Vec<AcceptedProof>,
    ended: Vec<Key>,
    preemptions: Vec<(Key, Key, i64)>,
    pruned: Vec<Key>,
    /// What the fake's books say of reservations (a test sets it); the reservations sent and
    /// cleared (`None`), in order.
    reservation_duty: Option<ReservationDuty>,
    reservations: Vec<Option<Key>>,
    /// Environments the bids' clients stored sealed to the agent's key.
    sealed_envs: Vec<(Key, Vec<u8>)>,
    /// The market's idle rule: (utilisation under which a proof is idle, in bps; idle proofs in
    /// a row that end a lease). `None`: never.
    idle_rule: Option<(u16, u16)>,
    /// Each lease's idle proofs in a row.
    idle_streaks: Vec<(Key, u16)>,
    heartbeats: u32,
    /// The faults the agent reported (GPU, Xid), in order.
    faults: Vec<(u8, u32)>,
    outage: bool,
    /// Leases the listing omits, as a lagging node's would, though they run.
    hidden: Vec<Key>,
    lose_next_proof_answer: bool,
    /// How long an `allocate` takes to confirm.
    allocate_latency: Duration,
    submit_latency: Duration,
    /// The next `allocate` is refused (as when another host took the bid first).
    refuse_next_allocate: bool,
    /// Every `allocate` is refused (as a cluster refuses a transaction too large).
    refuse_allocates: bool,
    allocate_calls: u32,
    /// The books cannot be read (an RPC node that refuses `getProgramAccounts`), the rest can.
    books_unreadable: bool,
    /// What the books say of the market's silence window (`OpenBids::alive_secs`).
    alive_secs: Option<i64>,
    submit_calls: u32,
    /// Pay accrued and not claimed: one unit per accepted proof (the fake does not price).
    unclaimed_pay: u64,
    /// The machine's GPUs go whole (`set_whole_gpus`): no GPU holding a lease takes another.
    whole_gpus: bool,
    claims: u32,
    /// Proofs of these leases are refused with this error (a fault injected by tests).
    refused_leases: Vec<(Key, MarketError)>,
}

impl FakeChain {
    /// A machine with `gpus` (as declared, with their overclock limits) whose leases are proven
    /// every `interval_secs`; the cluster clock reads `base_unix` now and advances with tokio's
    /// clock.
    pub fn new(gpus: Vec<(GpuView, GpuLimits)>, interval_secs: u32, base_unix: i64) -> Self {
        FakeChain {
            inner: Mutex::new(Inner {
                epoch: Instant::now(),
                base_unix,
                interval_secs,
                silence_intervals: gpu_market::state::MarketParams::recommended(
                    interval_secs,
                    0,
                    0,
                )
                .silence_intervals,
                reclaimed: Vec::new(),
                electricity_cost_per_kwh: 0,
                gpus,
                status: MachineStatus::Active,
                network: NetworkView::default(),
                region: [0; REGION_LEN],
                bids: Vec::new(),
                taken: Vec::new(),
                leases: Vec::new(),
                preempted: Vec::new(),
                accepted: Vec::new(),
                ended: Vec::new(),
                preemptions: Vec::new(),
                pruned: Vec::new(),
                reservation_duty: None,
                reservations: Vec::new(),
                sealed_envs: Vec::new(),
                idle_rule: None,
                idle_streaks: Vec::new(),
                heartbeats: 0,
                faults: Vec::new(),
                outage: false,
                hidden: Vec::new(),
                lose_next_proof_answer: false,
                allocate_latency: Duration::ZERO,
                submit_latency: Duration::ZERO,
                refuse_next_allocate: false,
                refuse_allocates: false,
                allocate_calls: 0,
                books_unreadable: false,
                alive_secs: None,
                submit_calls: 0,
                unclaimed_pay: 0,
                whole_gpus: false,
                claims: 0,
                refused_leases: Vec::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().expect("fake chain lock")
    }

    /// Places an open bid (ranked as [`Inner::book`] says). What the chain computes for the
    /// agent (`gpus`, `fits_if_ended`) is ignored.
    pub fn place_bid(&self, bid: BidView) {
        self.lock().bids.push(bid);
    }

    /// The machine's region, as its owner sets it with `update_machine`.
    pub fn set_region(&self, region: Region) {
        self.lock().region = region;
    }

    /// The machine's network declaration, as its owner sets it with `update_machine`.
    pub fn set_network(&self, network: NetworkView) {
        self.lock().network = network;
    }

    /// The market's billing interval becomes `secs`, as `apply_market_update` sets it: leases
    /// allocated from now on are proven every `secs`; running leases keep the interval they
    /// started with (`Lease.rules`).
    pub fn set_interval(&self, secs: u32) {
        self.lock().interval_secs = secs;
    }

    /// The machine's electricity cost per kWh (0 until set), as its owner declares it: the
    /// program ranks spot bids by the host's profit after it.
    pub fn set_electricity_cost(&self, per_kwh: u64) {
        self.lock().electricity_cost_per_kwh = per_kwh;
    }

    /// Whether `bid` still waits in its book.
    pub fn is_open(&self, bid: Key) -> bool {
        self.lock().bids.iter().any(|b| b.key == bid)
    }

    /// While on, every call fails as an unreachable cluster would.
    pub fn set_outage(&self, on: bool) {
        self.lock().outage = on;
    }

    /// The market's idle rule, as the program applies it: a lease whose proofs show less than
    /// `utilisation_bps` for `end_intervals` proofs in a row stops at the end of the last.
    /// The machine account now declares `uuid` for GPU `index` (a `host update`).
    pub fn set_gpu_uuid(&self, index: usize, uuid: [u8; 16]) {
        self.lock().gpus[index].0.uuid = uuid;
    }

    /// Whether the cluster is unreachable (`set_outage`).
    pub fn is_down(&self) -> bool {
        self.lock().outage
    }

    pub fn set_idle_rule(&self, utilisation_bps: u16, end_intervals: u16) {
        self.lock().idle_rule = Some((utilisation_bps, end_intervals));
    }

    /// Stores `bid`'s environment sealed to the agent's key, as its client's `seal_env` does.
    pub fn store_sealed_env(&self, bid: Key, sealed: Vec<u8>) {
        self.lock().sealed_envs.push((bid, sealed));
    }

    /// From now on the lease listing omits `lease` (`true`), as a lagging RPC node's or one that
    /// fails to decode it would, or shows it again (`false`).
    pub fn hide_lease(&self, lease: Key, hidden: bool) {
        let mut s = self.lock();
        s.hidden.retain(|k| *k != lease);
        if hidden {
            s.hidden.push(lease);
        }
    }

    /// As the program's `extend_lease`, sent by the lease's client: `lease` runs `secs` longer.
    pub fn extend_lease(&self, lease: Key, secs: i64) {
        let mut s = self.lock();
        let pos = s.lease_pos(lease).expect("a running lease");
        s.leases[pos].ends_at += secs;
    }

    /// The next proof lands but its answer is lost (reported as unreachable).
    pub fn lose_next_proof_answer(&self) {
        self.lock().lose_next_proof_answer = true;
    }

    /// From now on a `submit_usage` confirms `latency` after it is sent (a cluster's
    /// confirmation).
    pub fn set_submit_latency(&self, latency: Duration) {
        self.lock().submit_latency = latency;
    }

    /// From now on an `allocate` confirms `latency` after it is sent (a cluster's slot).
    pub fn set_allocate_latency(&self, latency: Duration) {
        self.lock().allocate_latency = latency;
    }

    /// The next `allocate` is refused once it would have confirmed, as when another host's
    /// took the bid first.
    /// From now on (`true`) every `allocate` is refused, as a cluster refuses a transaction too
    /// large to send.
    pub fn refuse_allocates(&self, on: bool) {
        self.lock().refuse_allocates = on;
    }
    pub fn allocate_calls(&self) -> u32 {
        self.lock().allocate_calls
    }
    /// From now on (`true`) the books cannot be read, while the machine and its leases can.
    pub fn set_books_unreadable(&self, on: bool) {
        self.lock().books_unreadable = on;
    }
    pub fn set_alive_secs(&self, secs: i64) {
        self.lock().alive_secs = Some(secs);
    }
    pub fn refuse_next_allocate(&self) {
        self.lock().refuse_next_allocate = true;
    }

    pub fn accepted(&self) -> Vec<AcceptedProof> {
        self.lock().accepted.clone()
    }
    pub fn ended(&self) -> Vec<Key> {
        self.lock().ended.clone()
    }
    /// `(lease, better bid, stop_at)` of each preemption.
    pub fn preemptions(&self) -> Vec<(Key, Key, i64)> {
        self.lock().preemptions.clone()
    }
    /// Makes the books say this machine should reserve (or clear its reservation).
    pub fn set_reservation_duty(&self, duty: Option<ReservationDuty>) {
        self.lock().reservation_duty = duty;
    }

    /// Whether the agent said the machine's GPUs go whole (`set_whole_gpus`).
    pub fn whole_gpus(&self) -> bool {
        self.lock().whole_gpus
    }

    /// The reservations the agent sent (`Some(bid)`) and cleared (`None`), in order.
    pub fn reservations(&self) -> Vec<Option<Key>> {
        self.lock().reservations.clone()
    }

    /// The bids pruned, in order.
    pub fn pruned(&self) -> Vec<Key> {
        self.lock().pruned.clone()
    }
    /// The faults the agent reported (GPU, Xid), in order.
    pub fn faults(&self) -> Vec<(u8, u32)> {
        self.lock().faults.clone()
    }

    pub fn heartbeats(&self) -> u32 {
        self.lock().heartbeats
    }
    /// `submit_usage` transactions sent (one proves several leases).
    pub fn submit_calls(&self) -> u32 {
        self.lock().submit_calls
    }
    /// Every proof of `lease` from now on is refused with `error`.
    pub fn refuse_proofs_of(&self, lease: Key, error: MarketError) {
        self.lock().refused_leases.push((lease, error));
    }
    /// `lease`'s proofs are judged by the program's rules again.
    pub fn accept_proofs_of(&self, lease: Key) {
        self.lock().refused_leases.retain(|(k, _)| *k != lease);
    }
    /// `claim_pay`s that landed.
    pub fn claims(&self) -> u32 {
        self.lock().claims
    }
    pub fn lease(&self, key: Key) -> Option<LeaseView> {
        self.lock().leases.iter().find(|l| l.key == key).cloned()
    }
    pub fn lease_of_bid(&self, bid: Key) -> Option<LeaseView> {
        self.lock().leases.iter().find(|l| l.bid == bid).cloned()
    }
    pub fn clock(&self) -> i64 {
        self.lock().now()
    }

    /// The leases whose client may reclaim the escrow now, slashing the host
    /// (`Lease::reclaimable`): time is left unproven, and none was proven for the lease's
    /// silence window.
    pub fn reclaimable(&self) -> Vec<Key> {
        let s = self.lock();
        let now = s.now();
        s.leases
            .iter()
            .filter(|l| s.reclaimable(l, now))
            .map(|l| l.key)
            .collect()
    }

    /// The leases reclaimed so far.
    pub fn reclaimed(&self) -> Vec<Key> {
        self.lock().reclaimed.clone()
    }

    /// As the program's `reclaim_escrow`, sent by the lease's client with `refund` (no
    /// failover): refused while the host is not silent; otherwise the lease stops at what is
    /// proven and settles, and its bid closes.
    pub fn reclaim_escrow(&self, lease: Key) -> Result<(), ChainError> {
        let mut s = self.lock();
        s.reachable()?;
        let now = s.now();
        let pos = s.lease_pos(lease)?;
        let l = &s.leases[pos];
        let op = "reclaim_escrow";
        if s.proven_until(l) >= l.stop() {
            return Err(refused(op, MarketError::NothingToReclaim));
        }
        if !s.reclaimable(l, now) {
            return Err(refused(op, MarketError::HostNotSilent));
        }
        let proven = s.proven_until(l);
        s.leases[pos].stop_at = Some(proven);
        s.reclaimed.push(lease);
        s.settle(pos, now);
        Ok(())
    }
}

impl Inner {
    /// `lease`'s idle streak before its next proof.
    fn idle_streak_of(&self, lease: Key) -> u16 {
        self.idle_streaks
            .iter()
            .find(|(k, _)| *k == lease)
            .map_or(0, |(_, n)| *n)
    }

    /// Counts `proof` in `lease`'s idle streak; whether the market's idle rule ends the lease
    /// with it (the program's `idle_streak`, and a final proof is never idle-ended).
    fn idle_ended(&mut self, lease: Key, proof: &UsageProof) -> bool {
        let Some((threshold, end)) = self.idle_rule else {
            return false;
        };
        let streak = match self.idle_streaks.iter_mut().find(|(k, _)| *k == lease) {
            Some((_, n)) => n,
            None => {
                self.idle_streaks.push((lease, 0));
                &mut self.idle_streaks.last_mut().expect("just pushed").1
            }
        };
        *streak = idle_streak(
            *streak,
            proof.avg_utilisation_bps,
            threshold,
            proof.intervals,
        );
        end > 0 && *streak >= end && proof.exit_code.is_none()
    }

    fn now(&self) -> i64 {
        self.base_unix + self.epoch.elapsed().as_secs() as i64
    }

    fn reachable(&self) -> Result<(), ChainError> {
        if self.outage {
            Err(ChainError::Unavailable(
                "connection refused (fake outage)".into(),
            ))
        } else {
            Ok(())
        }
    }

    /// One proof of `lease`, as the program checks and applies it.
    fn prove(&mut self, lease: Key, proof: &UsageProof) -> Result<(), ChainError> {
        let now = self.now();
        let pos = self.lease_pos(lease)?;
        let l = &self.leases[pos];
        // The program's checks, in its order, with its errors.
        let op = "submit_usage";
        if let Some((_, e)) = self.refused_leases.iter().find(|(k, _)| *k == lease) {
            return Err(refused(op, *e));
        }
        if proof.interval < l.next_interval {
            return Err(refused(op, MarketError::StaleInterval));
        }
        if proof.peak_power_w.len() != l.gpu_indices.len() {
            return Err(refused(op, MarketError::BadProofGpuCount));
        }
        if proof.intervals == 0 {
            return Err(refused(op, MarketError::EmptyProofSpan));
        }
        let stop = match proof.exit_code {
            Some(_) => l.stop().min(now),
            None => l.stop(),
        };
        let window = span_window(
            l.started_at,
            l.interval_secs,
            proof.interval,
            proof.intervals,
            stop,
        )
        .ok_or_else(|| match proof.exit_code {
            Some(_) if now < l.stop() => refused(op, MarketError::IntervalNotOver),
            _ => refused(op, MarketError::IntervalAfterStop),
        })?;
        if window.1 > now {
            return Err(refused(op, MarketError::IntervalNotOver));
        }
        // As the program: an idle span past the idle rule's end is proven up to there.
        let (threshold, end) = self.idle_rule.unwrap_or((0, 0));
        let cut = idle_end_within(
            self.idle_streak_of(lease),
            proof.avg_utilisation_bps,
            threshold,
            end,
            proof.intervals,
        )
        .filter(|_| proof.exit_code.is_none())
        .and_then(|n| span_window(l.started_at, l.interval_secs, proof.interval, n, stop));
        let window = cut.map_or(window, |c| (window.0, c.1));
        let hash = proof_hash(&lease, proof, &l.proof_hash);
        let idle_ended = self.idle_ended(lease, proof);
        let l = &mut self.leases[pos];
        l.next_interval = proof.interval + proof.intervals as u32;
        l.proof_hash = hash;
        if proof.exit_code.is_some() || idle_ended {
            request_stop(l, window.1, window.1);
        }
        self.accepted.push(AcceptedProof {
            lease,
            proof: proof.clone(),
            window,
            hash,
        });
        Ok(())
    }

    /// The answer to a proof that landed.
    fn proof_answer<T>(&mut self, v: T) -> Result<T, ChainError> {
        if std::mem::take(&mut self.lose_next_proof_answer) {
            Err(ChainError::Unavailable(
                "timed out waiting for confirmation (fake)".into(),
            ))
        } else {
            Ok(v)
        }
    }

    fn free_gib(&self) -> Vec<u16> {
        let mut free: Vec<u16> = self.gpus.iter().map(|(g, _)| g.memory_gib).collect();
        for l in &self.leases {
            for &i in &l.gpu_indices {
                free[i as usize] = match self.whole_gpus {
                    true => 0,
                    false => free[i as usize] - l.gib_per_gpu,
                };
            }
        }
        free
    }

    /// The machine's offer now, as `Machine::offer` builds it, with the GPUs of the lease
    /// `ended` (if any) counted free.
    fn offer(&self, ended: Option<Key>) -> Offer {
        let gpus = self
            .gpus
            .iter()
            .enumerate()
            .map(|(g, (view, limits))| {
                let mut free_gib = view.memory_gib;
                let mut running = None;
                for l in self.leases.iter().filter(|l| Some(l.key) != ended) {
                    if let Some(i) = l.gpu_indices.iter().position(|&x| x as usize == g) {
                        free_gib = match self.whole_gpus {
                            true => 0,
                            false => free_gib - l.gib_per_gpu,
                        };
                        running = Some(l.overclock[i]);
                    }
                }
                GpuOffer {
                    class: view.class,
                    topology_group: view.topology_group,
                    memory_gib: view.memory_gib,
                    free_gib,
                    limits: *limits,
                    running,
                }
            })
            .collect();
        let active = self.status == MachineStatus::Active;
        let held =
            self.leases
                .iter()
                .filter(|l| Some(l.key) != ended)
                .fold(Host::default(), |h, l| {
                    h.checked_add(l.room.host).unwrap_or(Host {
                        cpu_milli: u32::MAX,
                        memory_mib: u32::MAX,
                    })
                });
        Offer::new(
            gpus,
            active,
            self.network.room,
            self.network.room.host.less(held),
            self.now(),
            0,
            [0; GPU_CLASSES],
        )
        // Its bids keep their labels (`Regions::Listed`): no market table, no bit.
        .in_region(self.region, 0)
    }

    /// The open bids of `kind`'s book, best first: queue bids in placement order, spot bids by
    /// the host's profit ([`Inner::profit`]), highest first, then placement order.
    fn book(&self, kind: BidKind) -> Vec<&BidView> {
        let mut book: Vec<&BidView> = self.bids.iter().filter(|b| b.kind == kind).collect();
        if kind == BidKind::Spot {
            book.sort_by_key(|b| std::cmp::Reverse(self.profit(b)));
        }
        book
    }

    /// A spot bid's profit per day for the host after electricity, as `Bid::spot_profit`.
    fn profit(&self, b: &BidView) -> u64 {
        spot_profit_per_day(
            b.price,
            b.gpu_count as u64,
            b.power_w(),
            self.electricity_cost_per_kwh,
        )
        .unwrap_or(0)
    }

    /// The end of `l`'s last proven window (its start before the first proof).
    fn proven_until(&self, l: &LeaseView) -> i64 {
        self.accepted
            .iter()
            .rev()
            .find(|a| a.lease == l.key)
            .map_or(l.started_at, |a| a.window.1)
    }

    /// `Lease::reclaimable`: time left unproven, and `silence_intervals` intervals since the
    /// last proven second.
    fn reclaimable(&self, l: &LeaseView, now: i64) -> bool {
        let proven = self.proven_until(l);
        let silent_from = proven + l.interval_secs as i64 * l.silence_intervals as i64;
        proven < l.stop() && now >= silent_from
    }

    fn lease_pos(&self, lease: Key) -> Result<usize, ChainError> {
        self.leases
            .iter()
            .position(|l| l.key == lease)
            .ok_or_else(|| missing("lease", lease))
    }

    /// Settles `pos`, a lease whose time is all proven: its GPUs are free, and the bid of a
    /// preempted one goes back to its book while it may still start (any other closes).
    fn settle(&mut self, pos: usize, now: i64) {
        let l = self.leases.remove(pos);
        let preempted = self.preempted.contains(&l.key);
        if let Some(i) = self.taken.iter().position(|b| b.key == l.bid) {
            let bid = self.taken.remove(i);
            if preempted && now <= bid.latest_start {
                self.bids.push(bid);
            }
        }
        self.preempted.retain(|k| *k != l.key);
        self.ended.push(l.key);
    }

    /// Running spot leases not told to stop yet: those `preempt` may stop.
    fn preemptible(&self) -> impl Iterator<Item = &LeaseView> {
        self.leases
            .iter()
            .filter(|l| l.kind == BidKind::Spot && l.stop_at.is_none())
    }
}

/// What the fit rule needs of `bid`.
fn need(bid: &BidView) -> Need<'_> {
    Need {
        gpu_count: bid.gpu_count,
        gib_per_gpu: bid.gib_per_gpu,
        accepted_classes: bid.accepted_classes,
        price: bid.price,
        latest_start: bid.latest_start,
        terms: Terms::of(&bid.overclock),
        room: bid.room.room(),
        regions: Regions::of(&bid.regions),
    }
}

fn rejected(op: &'static str, reason: impl Into<String>) -> ChainError {
    ChainError::rejected(op, reason)
}

/// The program's refusal of `op` with `error`, as `SolanaChain` reports it.
fn refused(op: &'static str, error: MarketError) -> ChainError {
    ChainError::Rejected {
        op,
        reason: error.to_string(),
        code: Some(error.into()),
    }
}

/// A call on an account that is gone: refused by the read before it, as `SolanaChain` reads.
fn missing(what: &str, key: Key) -> ChainError {
    rejected("read", format!("no {what} account at {key}"))
}

/// Asks `l` to stop at `at`, never later than an earlier request nor before `proven_until`
/// (`Lease::request_stop`).
fn request_stop(l: &mut LeaseView, at: i64, proven_until: i64) {
    let at = at.max(proven_until);
    l.stop_at = Some(l.stop_at.map_or(at, |s| s.min(at)));
}

#[async_trait]
impl Chain for FakeChain {
    fn lease_key(&self, bid: Key) -> Key {
        Key(Sha256::digest([b"lease".as_slice(), &bid.0].concat()).into())
    }

    async fn now(&self) -> Result<i64, ChainError> {
        let s = self.lock();
        s.reachable()?;
        Ok(s.now())
    }

    async fn machine(&self) -> Result<MachineView, ChainError> {
        let s = self.lock();
        s.reachable()?;
        Ok(MachineView {
            gpus: s.gpus.iter().map(|(g, _)| *g).collect(),
            free_gib: s.free_gib(),
            status: s.status,
            network: s.network.clone(),
            cached_images: Vec::new(),
            unclaimed_pay: s.unclaimed_pay,
            whole_gpus: s.whole_gpus,
        })
    }

    async fn leases(&self) -> Result<Vec<LeaseView>, ChainError> {
        let s = self.lock();
        s.reachable()?;
        Ok(s.leases
            .iter()
            .filter(|l| !s.hidden.contains(&l.key))
            .cloned()
            .collect())
    }

    async fn closed_leases(&self, leases: &[Key]) -> Result<Vec<Key>, ChainError> {
        let s = self.lock();
        s.reachable()?;
        Ok(leases
            .iter()
            .filter(|k| !s.leases.iter().any(|l| l.key == **k))
            .copied()
            .collect())
    }

    async fn best_open_bids(&self, limit: usize) -> Result<OpenBids, ChainError> {
        let s = self.lock();
        s.reachable()?;
        if s.books_unreadable {
            return Err(ChainError::Unavailable(
                "getProgramAccounts refused (fake)".into(),
            ));
        }
        let now = s.now();
        let offer = s.offer(None);
        let mut out = OpenBids {
            alive_secs: s.alive_secs,
            reservation: s.reservation_duty.clone(),
            ..OpenBids::default()
        };
        // Queue bids outrank spot bids.
        for kind in [BidKind::Queue, BidKind::Spot] {
            for b in s.book(kind) {
                if now > b.latest_start {
                    out.expired.push(b.key);
                    continue;
                }
                let gpus = offer.fit(&need(b)).ok().map(|c| c.gpus().to_vec());
                // A bid of either book that does not fit now may once a spot lease ends.
                let fits_if_ended: Vec<Key> = match &gpus {
                    None => s
                        .preemptible()
                        .filter(|l| s.offer(Some(l.key)).fit(&need(b)).is_ok())
                        .map(|l| l.key)
                        .collect(),
                    Some(_) => Vec::new(),
                };
                if gpus.is_some() || !fits_if_ended.is_empty() {
                    out.bids.push(BidView {
                        gpus,
                        fits_if_ended,
                        // FAKE: no packing policy runs here; a test marks a bid the policy
                        // would give another machine (`BidView::elsewhere`) when it places it.
                        ..b.clone()
                    });
                }
            }
        }
        out.bids.truncate(limit);
        out.expired.truncate(limit);
        Ok(out)
    }

    async fn allocate(&self, bid: Key, gpu_indices: &[u8]) -> Result<Key, ChainError> {
        let latency = self.lock().allocate_latency;
        tokio::time::sleep(latency).await;
        let mut s = self.lock();
        s.reachable()?;
        s.allocate_calls += 1;
        if s.refuse_allocates {
            return Err(rejected("allocate", "transaction too large (fake)"));
        }
        if std::mem::take(&mut s.refuse_next_allocate) {
            return Err(rejected("allocate", "the bid is running"));
        }
        let Some(pos) = s.bids.iter().position(|b| b.key == bid) else {
            return Err(match s.taken.iter().any(|b| b.key == bid) {
                true => rejected("allocate", "the bid is running"),
                false => missing("bid", bid),
            });
        };
        let b = s.bids[pos].clone();
        let offer = s.offer(None);
        offer
            .check_choice(&need(&b), gpu_indices)
            .map_err(|e| rejected("allocate", format!("{e:?}")))?;
        if let Some(better) = s
            .book(b.kind)
            .into_iter()
            .take_while(|o| o.key != bid)
            .find(|o| offer.fits(&need(o)))
        {
            return Err(rejected(
                "allocate",
                format!("a better bid fits: {}", better.key),
            ));
        }
        let now = s.now();
        let key = self.lease_key(bid);
        s.bids.remove(pos);
        let lease = LeaseView {
            gang: None,
            gang_broken: false,
            key,
            bid,
            client: b.client,
            kind: b.kind,
            price: b.price,
            gpu_indices: gpu_indices.to_vec(),
            gib_per_gpu: b.gib_per_gpu,
            overclock: b.overclock.clone(),
            image_ref: b.image_ref.clone(),
            image_digest: b.image_digest,
            env_hash: b.env_hash,
            room: b.room.clone(),
            auto_power: b.auto_power,
            started_at: now,
            ends_at: gpu_market_core::lease::run_end(now, b.max_duration_secs as u64, b.deadline)
                .expect("a lease end within i64"),
            stop_at: None,
            interval_secs: s.interval_secs,
            silence_intervals: s.silence_intervals,
            next_interval: 0,
            proof_hash: [0; 32],
        };
        s.taken.push(b);
        s.leases.push(lease);
        Ok(key)
    }

    /// As `Preempt::preempt`: the lease must be a spot lease not told to stop yet, and the
    /// challenger an open bid that fits the machine with the lease's GPUs counted free. A queue
    /// bid (queue leases outrank spot leases) stops the lease now; a spot bid that pays the
    /// host more stops it at its next interval boundary. The stop is never before what is
    /// proven (`Lease::request_stop`).
    async fn preempt(&self, lease: Key, better_bid: Key) -> Result<(), ChainError> {
        let mut s = self.lock();
        s.reachable()?;
        let now = s.now();
        let pos = s.lease_pos(lease)?;
        let challenger = match s.bids.iter().find(|b| b.key == better_bid) {
            Some(b) => b.clone(),
            None if s.taken.iter().any(|b| b.key == better_bid) => {
                return Err(rejected("preempt", "the better bid is running"))
            }
            None => return Err(missing("bid", better_bid)),
        };
        let l = &s.leases[pos];
        if l.kind != BidKind::Spot {
            return Err(rejected("preempt", "not a spot lease"));
        }
        if l.stop_at.is_some() {
            return Err(rejected("preempt", "the lease is already stopping"));
        }
        if s.offer(Some(lease)).fit(&need(&challenger)).is_err() {
            return Err(rejected(
                "preempt",
                "the better bid does not fit the lease's GPUs",
            ));
        }
        let stop_at = match challenger.kind {
            BidKind::Queue => now,
            BidKind::Spot => {
                let running = s.taken.iter().find(|b| b.key == l.bid);
                if running.is_some_and(|r| s.profit(&challenger) <= s.profit(r)) {
                    return Err(rejected("preempt", "the bid does not pay the host more"));
                }
                interval_end(l.started_at, l.interval_secs, now).expect("a time in range")
            }
        };
        let proven = s.proven_until(l);
        request_stop(&mut s.leases[pos], stop_at, proven);
        s.preempted.push(lease);
        s.preemptions.push((lease, better_bid, stop_at));
        Ok(())
    }

    /// Intervals may be skipped (never paid), never proven twice or out of order. A proof
    /// waits for its window's end, except a final one (with an exit code): its window is
    /// clipped at the clock. A final proof stops the lease at its window's end. All the proofs
    /// land, or none (one transaction: the fake never splits).
    async fn submit_usage(&self, proofs: &[(Key, UsageProof)]) -> Result<(), ChainError> {
        let latency = self.lock().submit_latency;
        tokio::time::sleep(latency).await;
        let mut s = self.lock();
        s.submit_calls += 1;
        s.reachable()?;
        let before = (s.leases.clone(), s.accepted.len(), s.idle_streaks.clone());
        for (lease, proof) in proofs {
            if let Err(e) = s.prove(*lease, proof) {
                (s.leases, s.idle_streaks) = (before.0, before.2);
                s.accepted.truncate(before.1);
                return Err(e);
            }
        }
        s.unclaimed_pay += proofs.len() as u64;
        s.proof_answer(())
    }

    async fn claim_pay(&self) -> Result<(), ChainError> {
        let mut s = self.lock();
        s.reachable()?;
        s.unclaimed_pay = 0;
        s.claims += 1;
        Ok(())
    }

    /// The agent is a party to the lease: it stops now, and settles once every payable second
    /// is proven (at once, when it is).
    async fn end_lease(&self, lease: Key) -> Result<(), ChainError> {
        let mut s = self.lock();
        s.reachable()?;
        let now = s.now();
        let pos = s.lease_pos(lease)?;
        let proven = s.proven_until(&s.leases[pos]);
        request_stop(&mut s.leases[pos], now, proven);
        if proven >= s.leases[pos].stop() {
            s.settle(pos, now);
        }
        Ok(())
    }

    async fn heartbeat(&self) -> Result<(), ChainError> {
        let mut s = self.lock();
        s.reachable()?;
        s.heartbeats += 1;
        Ok(())
    }

    /// As the program: the machine is paused and the fault kept.
    async fn report_fault(&self, gpu: u8, xid: u32) -> Result<(), ChainError> {
        let mut s = self.lock();
        s.reachable()?;
        s.status = MachineStatus::Paused;
        s.faults.push((gpu, xid));
        Ok(())
    }

    async fn reserve(&self, bid: Key) -> Result<(), ChainError> {
        let mut s = self.lock();
        s.reachable()?;
        if s.reservation_duty != Some(ReservationDuty::Reserve(bid)) {
            return Err(rejected("reserve", "the books hold no such duty"));
        }
        s.reservation_duty = None;
        s.reservations.push(Some(bid));
        Ok(())
    }

    async fn reserve_gang(&self, bid: Key, parts: &[Key]) -> Result<(), ChainError> {
        let mut s = self.lock();
        s.reachable()?;
        let duty = ReservationDuty::ReserveGang {
            bid,
            parts: parts.to_vec(),
        };
        if s.reservation_duty.as_ref() != Some(&duty) {
            return Err(rejected("reserve_gang", "the books hold no such duty"));
        }
        s.reservation_duty = None;
        s.reservations.push(Some(bid));
        Ok(())
    }

    async fn set_whole_gpus(&self, whole: bool) -> Result<(), ChainError> {
        let mut s = self.lock();
        s.reachable()?;
        s.whole_gpus = whole;
        Ok(())
    }

    async fn unreserve(&self) -> Result<(), ChainError> {
        let mut s = self.lock();
        s.reachable()?;
        if s.reservation_duty != Some(ReservationDuty::Clear) {
            return Err(rejected("unreserve", "the reservation holds"));
        }
        s.reservation_duty = None;
        s.reservations.push(None);
        Ok(())
    }

    async fn set_rendezvous(&self, lease: Key, port: u16) -> Result<(), ChainError> {
        let mut s = self.lock();
        s.reachable()?;
        let Some(l) = s.leases.iter_mut().find(|l| l.key == lease) else {
            return Err(missing("lease", lease));
        };
        match l.gang.as_mut() {
            Some(g) if g.part == 0 && g.rendezvous.is_none() && port != 0 => {
                g.rendezvous = Some(port);
                Ok(())
            }
            _ => Err(rejected(
                "set_rendezvous",
                "not a gang's first part, or its rendezvous is set",
            )),
        }
    }

    async fn prune_bid(&self, bid: Key) -> Result<(), ChainError> {
        let mut s = self.lock();
        s.reachable()?;
        let now = s.now();
        let Some(pos) = s.bids.iter().position(|b| b.key == bid) else {
            return Err(match s.taken.iter().any(|b| b.key == bid) {
                true => rejected("prune_bid", "the bid is running"),
                false => missing("bid", bid),
            });
        };
        if now <= s.bids[pos].latest_start {
            return Err(rejected("prune_bid", "the bid has not expired"));
        }
        s.bids.remove(pos);
        s.pruned.push(bid);
        Ok(())
    }

    async fn sealed_env(&self, bid: Key) -> Result<Option<Vec<u8>>, ChainError> {
        let s = self.lock();
        s.reachable()?;
        Ok(s.sealed_envs
            .iter()
            .find(|(b, _)| *b == bid)
            .map(|(_, sealed)| sealed.clone()))
    }
}
