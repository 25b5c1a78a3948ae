//! A market program in memory, for tests: one machine, its bids and leases, and the rules the
//! agent must respect (the market's fit rule for allocations and preemptions, with no better
//! bid left waiting; the proof interval order and hash chain; when a lease may end; when a bid
//! may be pruned; a lease keeps the billing interval it started with when the market changes its).
//! Its clock follows tokio's, so a paused test clock drives it. It has no host floor, reserve
//! prices or stakes: every price passes and no client is capped.

use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use gpu_market_core::fit::{Fits, GpuOffer, Need, Offer, Terms, GPU_CLASSES};
use gpu_market_core::lease::{interval_index, interval_window, UsageProof};
use gpu_market_core::overclock::GpuLimits;
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use super::{
    proof_hash, BidKind, BidView, Chain, ChainError, GpuView, Key, LeaseView, MachineStatus,
    MachineView, OpenBids,
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
    gpus: Vec<(GpuView, GpuLimits)>,
    status: MachineStatus,
    /// Open bids in placement order; see [`Inner::book`] for their rank.
    bids: Vec<BidView>,
    leases: Vec<LeaseView>,
    accepted: Vec<AcceptedProof>,
    ended: Vec<Key>,
    rebids: Vec<(Key, Key, i64)>,
    pruned: Vec<Key>,
    heartbeats: u32,
    outage: bool,
    lose_next_response: bool,
    submit_calls: u32,
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
                gpus,
                status: MachineStatus::Active,
                bids: Vec::new(),
                leases: Vec::new(),
                accepted: Vec::new(),
                ended: Vec::new(),
                rebids: Vec::new(),
                pruned: Vec::new(),
                heartbeats: 0,
                outage: false,
                lose_next_response: false,
                submit_calls: 0,
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

    /// The market's billing interval becomes `secs`, as `apply_market_update` sets it: leases
    /// allocated from now on are proven every `secs`; running leases keep the interval they
    /// started with (`Lease.rules`).
    pub fn set_interval(&self, secs: u32) {
        self.lock().interval_secs = secs;
    }

    /// Whether `bid` still waits in its book.
    pub fn is_open(&self, bid: Key) -> bool {
        self.lock().bids.iter().any(|b| b.key == bid)
    }

    /// While on, every call fails as an unreachable cluster would.
    pub fn set_outage(&self, on: bool) {
        self.lock().outage = on;
    }

    /// The next state-changing call lands but its answer is lost (reported as unreachable).
    pub fn lose_next_response(&self) {
        self.lock().lose_next_response = true;
    }

    pub fn accepted(&self) -> Vec<AcceptedProof> {
        self.lock().accepted.clone()
    }
    pub fn ended(&self) -> Vec<Key> {
        self.lock().ended.clone()
    }
    /// `(lease, better bid, stop_at)` of each rebid.
    pub fn rebids(&self) -> Vec<(Key, Key, i64)> {
        self.lock().rebids.clone()
    }
    /// The bids pruned, in order.
    pub fn pruned(&self) -> Vec<Key> {
        self.lock().pruned.clone()
    }
    pub fn heartbeats(&self) -> u32 {
        self.lock().heartbeats
    }
    pub fn submit_calls(&self) -> u32 {
        self.lock().submit_calls
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
}

impl Inner {
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

    /// The answer to a state-changing call that landed.
    fn answer<T>(&mut self, v: T) -> Result<T, ChainError> {
        if std::mem::take(&mut self.lose_next_response) {
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
                free[i as usize] -= l.gib_per_gpu;
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
                        free_gib -= l.gib_per_gpu;
                        running = Some(l.settings[i]);
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
        Offer::new(gpus, active, self.now(), 0, [0; GPU_CLASSES])
    }

    /// The open bids of `kind`'s book, best first: queue bids in placement order, spot bids by
    /// price per day, highest first (the program ranks them by the host's profit, which orders
    /// them alike for bids asking the same power), then placement order.
    fn book(&self, kind: BidKind) -> Vec<&BidView> {
        let mut book: Vec<&BidView> = self.bids.iter().filter(|b| b.kind == kind).collect();
        if kind == BidKind::Spot {
            book.sort_by_key(|b| std::cmp::Reverse(b.price));
        }
        book
    }

    /// Running spot leases another spot bid may outbid.
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
        deadline: bid.deadline,
        terms: Terms::of(&bid.settings),
    }
}

fn rejected(op: &'static str, reason: impl Into<String>) -> ChainError {
    ChainError::Rejected {
        op,
        reason: reason.into(),
    }
}

#[async_trait]
impl Chain for FakeChain {
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
        })
    }

    async fn leases(&self) -> Result<Vec<LeaseView>, ChainError> {
        let s = self.lock();
        s.reachable()?;
        Ok(s.leases.clone())
    }

    async fn best_open_bids(&self, limit: usize) -> Result<OpenBids, ChainError> {
        let s = self.lock();
        s.reachable()?;
        let now = s.now();
        let offer = s.offer(None);
        let mut out = OpenBids::default();
        // Queue bids outrank spot bids.
        for kind in [BidKind::Queue, BidKind::Spot] {
            for b in s.book(kind) {
                if now >= b.deadline {
                    out.expired.push(b.key);
                    continue;
                }
                let gpus = offer.fit(&need(b)).ok().map(|c| c.gpus().to_vec());
                let fits_if_ended: Vec<Key> = match (&gpus, kind) {
                    (None, BidKind::Spot) => s
                        .preemptible()
                        .filter(|l| s.offer(Some(l.key)).fit(&need(b)).is_ok())
                        .map(|l| l.key)
                        .collect(),
                    _ => Vec::new(),
                };
                if gpus.is_some() || !fits_if_ended.is_empty() {
                    out.bids.push(BidView {
                        gpus,
                        fits_if_ended,
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
        let mut s = self.lock();
        s.reachable()?;
        let pos = s
            .bids
            .iter()
            .position(|b| b.key == bid)
            .ok_or_else(|| rejected("allocate", "the bid is not open"))?;
        let b = s.bids[pos].clone();
        let offer = s.offer(None);
        offer
            .check_choice(&need(&b), gpu_indices)
            .map_err(|e| rejected("allocate", format!("{e:?}")))?;
        if let Some(better) = s
            .book(b.kind)
            .into_iter()
            .take_while(|o| o.key != bid)
            .find(|o| offer.fits(&need(o)) == Fits::Yes)
        {
            return Err(rejected(
                "allocate",
                format!("a better bid fits: {}", better.key),
            ));
        }
        let now = s.now();
        let key = Key(Sha256::digest([b"lease".as_slice(), &bid.0].concat()).into());
        s.bids.remove(pos);
        let lease = LeaseView {
            key,
            bid,
            client: b.client,
            kind: b.kind,
            price: b.price,
            gpu_indices: gpu_indices.to_vec(),
            gib_per_gpu: b.gib_per_gpu,
            settings: b.settings.clone(),
            image_ref: b.image_ref,
            image_digest: b.image_digest,
            env_hash: b.env_hash,
            started_at: now,
            ends_at: (now + b.max_duration_secs as i64).min(b.deadline),
            stop_at: None,
            interval_secs: s.interval_secs,
            next_interval: 0,
            proof_hash: [0; 32],
        };
        s.leases.push(lease);
        s.answer(key)
    }

    async fn rebid(&self, lease: Key, better_bid: Key) -> Result<(), ChainError> {
        let mut s = self.lock();
        s.reachable()?;
        let now = s.now();
        let challenger = s
            .bids
            .iter()
            .find(|b| b.key == better_bid && b.kind == BidKind::Spot)
            .ok_or_else(|| rejected("rebid", "the better bid is not an open spot bid"))?;
        if s.offer(Some(lease)).fit(&need(challenger)).is_err() {
            return Err(rejected(
                "rebid",
                "the better bid does not fit the lease's GPUs",
            ));
        }
        let l = s
            .leases
            .iter_mut()
            .find(|l| l.key == lease)
            .ok_or_else(|| rejected("rebid", "no such lease"))?;
        if l.kind != BidKind::Spot || l.stop_at.is_some() {
            return Err(rejected("rebid", "not a running spot lease"));
        }
        let next = interval_index(l.started_at, l.interval_secs, now) + 1;
        let stop_at = l.started_at + next as i64 * l.interval_secs as i64;
        l.stop_at = Some(stop_at);
        s.rebids.push((lease, better_bid, stop_at));
        s.answer(())
    }

    async fn submit_usage(
        &self,
        lease: Key,
        proof: &UsageProof,
        prev_hash: [u8; 32],
    ) -> Result<[u8; 32], ChainError> {
        let mut s = self.lock();
        s.submit_calls += 1;
        s.reachable()?;
        let now = s.now();
        let l = s
            .leases
            .iter_mut()
            .find(|l| l.key == lease)
            .ok_or_else(|| rejected("submit_usage", "no such lease"))?;
        if proof.interval != l.next_interval {
            return Err(rejected(
                "submit_usage",
                format!(
                    "interval {} is not the next ({})",
                    proof.interval, l.next_interval
                ),
            ));
        }
        if prev_hash != l.proof_hash {
            return Err(rejected("submit_usage", "the previous hash does not chain"));
        }
        if proof.peak_power_w.len() != l.gpu_indices.len() {
            return Err(rejected("submit_usage", "one peak power per GPU"));
        }
        let window = interval_window(l.started_at, l.interval_secs, proof.interval, l.stop())
            .ok_or_else(|| rejected("submit_usage", "the interval is past the lease's stop"))?;
        if window.1 > now && proof.exit_code.is_none() {
            return Err(rejected("submit_usage", "the interval has not ended"));
        }
        let hash = proof_hash(&lease, proof, &prev_hash);
        l.next_interval += 1;
        l.proof_hash = hash;
        s.accepted.push(AcceptedProof {
            lease,
            proof: proof.clone(),
            window,
            hash,
        });
        s.answer(hash)
    }

    async fn end_lease(&self, lease: Key) -> Result<(), ChainError> {
        let mut s = self.lock();
        s.reachable()?;
        let now = s.now();
        let pos = s
            .leases
            .iter()
            .position(|l| l.key == lease)
            .ok_or_else(|| rejected("end_lease", "no such lease"))?;
        let l = &s.leases[pos];
        let exited = s
            .accepted
            .iter()
            .rev()
            .find(|a| a.lease == lease)
            .is_some_and(|a| a.proof.exit_code.is_some());
        let all_proven = now >= l.stop()
            && interval_window(l.started_at, l.interval_secs, l.next_interval, l.stop()).is_none();
        if !exited && !all_proven {
            return Err(rejected("end_lease", "the lease still has unproven time"));
        }
        s.leases.remove(pos);
        s.ended.push(lease);
        s.answer(())
    }

    async fn heartbeat(&self) -> Result<(), ChainError> {
        let mut s = self.lock();
        s.reachable()?;
        s.heartbeats += 1;
        s.answer(())
    }

    async fn prune_bid(&self, bid: Key) -> Result<(), ChainError> {
        let mut s = self.lock();
        s.reachable()?;
        let now = s.now();
        let pos = s
            .bids
            .iter()
            .position(|b| b.key == bid)
            .ok_or_else(|| rejected("prune_bid", "the bid is not open"))?;
        if now < s.bids[pos].deadline {
            return Err(rejected("prune_bid", "the bid has not expired"));
        }
        s.bids.remove(pos);
        s.pruned.push(bid);
        s.answer(())
    }
}
