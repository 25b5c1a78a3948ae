//! The reconcile loop, in the kube-rs manner: each tick observes the chain, the containers and
//! the GPUs, [`plan`]s the actions that bring them in line (a pure function that never waits),
//! and executes them; container work that can take long runs beside the loop as per-lease jobs
//! (`jobs`), whose results the next tick takes.
//!
//! Each backend fails alone: while the cluster does not answer, containers are metered and
//! intervals closed; while the engine does not answer, or a GPU cannot be read, proofs still go
//! out. Crash safety comes from the order of the steps and the state file: a proof is closed and
//! saved before it is submitted, and dropped once the chain's next interval passes it, so a kill
//! at any point neither loses a proven interval nor sends one twice; containers are found again
//! by their lease label; a lease is forgotten only once the chain shows it closed. Stopping the
//! agent leaves its leases running (a restart takes them back); draining them is the operator's
//! explicit `drain`.

mod execute;
mod jobs;
mod observe;
mod plan;
mod power;
mod probe;
mod ready;
mod senders;
mod tenancy;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

pub use self::plan::PRUNES_PER_TICK;
pub use self::plan::{plan, Action, ChainObserved, Observed, ObservedContainer, ObservedGpu};
use crate::chain::{Chain, ChainError, Key, NetworkView};
use crate::config::{ContainerLimits, ImageBudget, RegistryAuth};
use crate::gpu::mps::Mps;
use crate::gpu::watchdog::Watchdog;
use crate::gpu::{GpuBackend, GpuError, GpuInfo, Sample};
use crate::metrics::Metrics;
use crate::runtime::{ContainerRuntime, RuntimeError};
use crate::state::{AgentState, StateError, StateFile};

/// How many open bids one tick looks at.
pub const BIDS_CONSIDERED: usize = 32;

/// What the reconciler needs besides its three backends.
#[derive(Debug, Clone)]
pub struct ReconcilerConfig {
    pub data_dir: PathBuf,
    pub electricity_cost_per_kwh: u64,
    pub heartbeat_interval: Duration,
    /// How often the pay the proofs accrued is claimed.
    pub claim_interval: Duration,
    /// How long a bid the market's packing policy gives another machine waits for it.
    pub placement_grace: Duration,
    pub container: ContainerLimits,
    pub images: ImageBudget,
    pub registries: BTreeMap<String, RegistryAuth>,
    /// The agent's keypair: sealed lease environments are opened with it.
    pub env_key: Arc<solana_keypair::Keypair>,
    /// The host's NVIDIA MPS daemon, which confines leases that share a GPU to their slices;
    /// without it such leases are refused (`gpu::isolation`).
    pub mps: Option<Mps>,
    /// How long a lease's scratch volume and logs stay for its client after it ends.
    pub retention: Duration,
    /// The most memory, in bytes, the scratch volumes of ended leases may hold together: over
    /// it the oldest go before their retention ends (`retention::sweep`).
    pub retained_scratch_bytes: u64,
    /// Whether a GPU no lease uses runs at its least power limit rather than its default.
    pub park_idle_gpus: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum TickError {
    #[error("the cluster clock has not been read yet: {0}")]
    NoClock(ChainError),
    #[error(transparent)]
    State(#[from] StateError),
}

#[derive(Debug, thiserror::Error)]
enum ActionError {
    #[error(transparent)]
    Chain(#[from] ChainError),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error(transparent)]
    Gpu(#[from] GpuError),
    #[error("lease {0} is not on chain")]
    NotListed(Key),
    #[error(transparent)]
    State(#[from] StateError),
}

pub struct Reconciler {
    chain: Arc<dyn Chain>,
    runtime: Arc<dyn ContainerRuntime>,
    gpus: Arc<Watchdog>,
    gpu_infos: Vec<GpuInfo>,
    config: ReconcilerConfig,
    state_file: StateFile,
    /// The state as last saved, less its readings ([`AgentState::without_readings`]).
    saved: AgentState,
    state: AgentState,
    metrics: Arc<Metrics>,
    /// The last cluster clock reading and when it was taken.
    clock: Option<(i64, Instant)>,
    last_heartbeat: Option<i64>,
    /// Proofs landed since the last look at the chain: they were the machine's heartbeat.
    proofs_landed: bool,
    /// While a round of proofs is on its way: the last heartbeat before it. The round counts as
    /// the heartbeat from when it is sent (no heartbeat goes beside it while it confirms); if
    /// none of its proofs lands, the heartbeat is due again from this.
    heartbeat_before_round: Option<Option<i64>>,
    /// When the agent last claimed the machine's pay.
    last_claim: Option<i64>,
    /// How long a heartbeat keeps the machine in the market's packing policy, as the books last
    /// said: the agent heartbeats at least every two thirds of it, whatever `heartbeat_interval`
    /// says.
    alive_secs: Option<i64>,
    /// Each GPU's last good reading: a failed read meters with it.
    last_samples: BTreeMap<u32, Sample>,
    /// Each running lease's last container CPU reading (ns) and when it was taken.
    cpu_readings: BTreeMap<Key, (u64, Instant)>,
    cpu_probe: probe::CpuProbe,
    jobs: jobs::Jobs,
    /// Containers readied while their lease's `allocate` confirms, by lease.
    readied: BTreeMap<Key, ready::Ready>,
    senders: senders::Senders,
    /// How the shared GPUs' readings were split among their leases.
    tenancy: tenancy::Tenancy,
    /// The machine account's network declaration as last read: new leases' containers get it.
    network: NetworkView,
    /// The image digests the machine account advertises as cached, as last read: the image
    /// store's collection keeps them.
    cached_images: Vec<[u8; 32]>,
    /// Expired bids whose pruning was refused (e.g. another keeper pruned them first): not
    /// tried again, so they do not hold up the others.
    unprunable: BTreeSet<Key>,
    /// Since when (chain time) each open bid the packing policy gives another machine has been
    /// seen so: it is this machine's once it has waited the grace period.
    waiting: BTreeMap<Key, i64>,
    /// Open bids whose `allocate` failed, held back from allocation for a growing while: a
    /// refusal that repeats (a transaction the cluster will not take) is not sent in a loop.
    held_back: BTreeMap<Key, Backoff>,
    /// Leases whose container work failed lately, left alone (their windows still proven)
    /// until their wait is over: an engine that fails at once is not called in a loop.
    container_backoff: BTreeMap<Key, Backoff>,
    /// Whether the machine account, as last read, declares the GPUs this host has.
    gpus_as_declared: bool,
    /// The GPU fault watcher's events (`gpu::faults::watch`), the fatal faults taken from them
    /// (by GPU), and whether the chain has been told (the machine paused).
    faults: tokio::sync::mpsc::UnboundedReceiver<crate::gpu::GpuFault>,
    faulted: BTreeMap<u32, crate::gpu::GpuFault>,
    fault_reported: bool,
    /// Auto power's controller of each GPU of the leases that opted in, by (lease, GPU), and
    /// the leases on which a lowered limit did not take (the stated one holds).
    auto_powers: BTreeMap<(Key, u8), crate::gpu::dvfs::AutoPower>,
    auto_power_off: BTreeSet<Key>,
    /// The monotonic clock auto power's readings are timed by.
    epoch: Instant,
    /// When each lease's GPUs were last read into its record ([`METER_PERIOD`]).
    metered: BTreeMap<Key, Instant>,
}

/// How long a tick waits after a chain notification for the ones that follow it.
pub const DEBOUNCE: Duration = Duration::from_millis(20);

/// The least time between two readings of a lease's GPUs into its record: the loop wakes on
/// every notification and finished job, and readings bunched closer would let a power
/// transient fill the window a sustained peak averages (`gpu_market_core::lease::
/// SUSTAINED_READINGS` readings: at least that many seconds) and weigh on the interval's mean
/// utilisation.
pub const METER_PERIOD: Duration = Duration::from_secs(1);

/// Something that failed `failures` times in a row: not tried again before `until` (chain time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Backoff {
    failures: u32,
    until: i64,
}

impl Backoff {
    /// One more failure at `now`: the wait starts at `first` seconds and doubles with each
    /// failure, up to `most`.
    fn failed(before: Option<Backoff>, now: i64, (first, most): (i64, i64)) -> Backoff {
        let failures = before.map_or(1, |b| b.failures.saturating_add(1));
        let wait = first.saturating_mul(1 << (failures - 1).min(16)).min(most);
        Backoff {
            failures,
            until: now.saturating_add(wait),
        }
    }
}

/// A refused `allocate`: 5 s, doubling to 5 minutes.
const ALLOCATE_BACKOFF: (i64, i64) = (5, 300);
/// Container work (a stop, a clean-up) the engine failed at once: 2 s, doubling to a minute.
const CONTAINER_BACKOFF: (i64, i64) = (2, 60);

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    /// Stopped without draining: the leases keep running, and the next start takes them back.
    Stopped { running: usize },
    /// Drained: every lease stopped, finally proven and ended.
    Drained,
    /// The drain deadline passed with leases still in the state file; the next start (or
    /// drain) finishes them.
    DeadlinePassed { left: Vec<Key> },
}

impl Reconciler {
    /// A reconciler that continues from the state file under `config.data_dir`.
    pub fn new(
        chain: Arc<dyn Chain>,
        runtime: Arc<dyn ContainerRuntime>,
        gpus: Arc<dyn GpuBackend>,
        config: ReconcilerConfig,
        metrics: Arc<Metrics>,
    ) -> Result<Self, StateError> {
        let state_file = StateFile::new(&config.data_dir);
        let mut state = state_file.load()?;
        let saved = state.without_readings();
        for (lease, record) in state.leases.iter_mut() {
            let path = crate::readings::path(&config.data_dir, lease);
            let replayed = crate::readings::replay(&path, record);
            if replayed > 0 {
                tracing::info!(%lease, replayed, "readings taken since the last save replayed from the lease's journal");
            }
        }
        for lease in crate::evidence::move_old_logs(&config.data_dir) {
            tracing::info!(%lease, "moved the lease's power logs into its retained folder");
        }
        // What a killed agent was preparing for leases it never recorded: kept for the
        // retention, then deleted.
        let live = state.leases.keys().copied().collect();
        for lease in crate::retention::end_unknown(&config.data_dir, &live) {
            tracing::info!(%lease, "files prepared for a lease this agent does not run: deleted after the retention");
        }
        // The MPS daemons of leases it no longer runs (a killed agent leaves them running).
        if let Some(mps) = &config.mps {
            for lease in crate::gpu::mps::sweep(mps, &live) {
                tracing::info!(%lease, "stopped the MPS daemon of a lease this agent does not run");
            }
        }
        if config.mps.is_none() {
            tracing::warn!(
                "no NVIDIA MPS configured (gpu.mps_control): a lease cannot be confined \
                 to a GiB slice of a GPU, so the machine's GPUs go whole (the agent tells the \
                 chain, set_whole_gpus, before it takes a bid): one lease per GPU"
            );
        }
        // Every driver call on a thread of its GPU: a hung driver is reported, not waited on.
        let gpus = Arc::new(Watchdog::new(gpus));
        Ok(Reconciler {
            chain,
            runtime,
            faults: crate::gpu::faults::watch(gpus.clone()),
            gpu_infos: gpus.gpus(),
            gpus,
            config,
            state_file,
            state,
            saved,
            metrics,
            clock: None,
            last_heartbeat: None,
            proofs_landed: false,
            heartbeat_before_round: None,
            last_claim: None,
            alive_secs: None,
            last_samples: BTreeMap::new(),
            cpu_readings: BTreeMap::new(),
            cpu_probe: probe::CpuProbe::default(),
            jobs: jobs::Jobs::default(),
            readied: BTreeMap::new(),
            senders: senders::Senders::default(),
            tenancy: tenancy::Tenancy::default(),
            network: NetworkView::default(),
            cached_images: Vec::new(),
            unprunable: BTreeSet::new(),
            waiting: BTreeMap::new(),
            held_back: BTreeMap::new(),
            container_backoff: BTreeMap::new(),
            gpus_as_declared: true,
            faulted: BTreeMap::new(),
            fault_reported: false,
            auto_powers: BTreeMap::new(),
            auto_power_off: BTreeSet::new(),
            epoch: Instant::now(),
            metered: BTreeMap::new(),
        })
    }

    pub fn state(&self) -> &AgentState {
        &self.state
    }

    /// The leases whose files the agent uses: those on record, and those being readied.
    fn live_leases(&self) -> BTreeSet<Key> {
        let readied = self.readied.keys().copied();
        let jobs = self.jobs.busy().into_iter();
        self.state
            .leases
            .keys()
            .copied()
            .chain(readied)
            .chain(jobs)
            .collect()
    }

    /// One round: take the results of the container jobs that finished, observe, plan, execute;
    /// returns the actions planned. Proof submissions (all leases side by side), lease ends, the
    /// heartbeat and bid pruning run after the rest, so that a new allocation or a lease's start
    /// does not wait behind them.
    pub async fn tick(&mut self, draining: bool) -> Result<Vec<Action>, TickError> {
        self.take_finished_jobs().await?;
        self.take_finished_sends().await?;
        let observed = self.observe(draining).await?;
        if let Some(c) = &observed.chain {
            self.network = c.machine.network.clone();
            self.cached_images = c.machine.cached_images.clone();
        }
        let actions = plan(&observed);
        self.execute_plan(&actions, &observed).await?;
        let running = self
            .state
            .leases
            .values()
            .filter(|r| r.container_id.is_some() && r.exit_code.is_none())
            .count();
        self.metrics.set_leases_running(running as u64);
        self.metrics.set_rpc_requests(self.chain.requests_sent());
        let data_dir = self.config.data_dir.clone();
        let keep = crate::retention::Keep {
            period: self.config.retention,
            scratch_bytes: self.config.retained_scratch_bytes,
        };
        let live = self.live_leases();
        // Unmounts and deletions: on a blocking thread.
        let swept = crate::off_runtime(move || {
            crate::retention::sweep(&data_dir, keep, SystemTime::now(), &live)
        });
        for (lease, why) in swept.await {
            match why {
                crate::retention::Swept::Ended => {
                    tracing::info!(%lease, "the lease's retention ended: its scratch volume and logs are deleted")
                }
                crate::retention::Swept::OverBudget => {
                    tracing::warn!(%lease, "the scratch volumes of ended leases hold more memory than [network] retained_scratch_mib: this one, the oldest, is deleted before its retention ends")
                }
            }
        }
        let owing = self.state.leases.len() as u64;
        let health = self.metrics.health();
        let unix_now = crate::metrics::unix_now();
        health.leases_needing_proofs(owing, unix_now);
        if let Some(c) = &observed.chain {
            // Half an interval before the closest lease's client could call the host silent,
            // on this machine's clock: a round goes one interval before it (a proof spans the
            // silence window less one interval), so half that interval is a round that is
            // late, not one on its way.
            let prove_by = c
                .leases
                .iter()
                .filter_map(|l| Some(l.reclaimable_from()? - l.interval_secs as i64 / 2))
                .min()
                .map(|by| unix_now.saturating_add(by.saturating_sub(observed.now)));
            health.prove_by(prove_by);
        }
        health.gpus_hung(&self.gpus.hung());
        health.ticked(unix_now);
        Ok(actions)
    }

    /// Saves the state when more than its readings changed since the last save (they are in
    /// each lease's journal, `crate::readings`), on a blocking thread: its fsyncs never hold up
    /// the runtime's other work (`/healthz`, the websocket feed, the lease API, the firewall's
    /// guard). Then the journals of the intervals this save closed are cleared.
    async fn save(&mut self) -> Result<(), StateError> {
        let durable = self.state.without_readings();
        if durable == self.saved {
            return Ok(());
        }
        self.state_file.save(&self.state).await?;
        let closed: Vec<std::path::PathBuf> = durable
            .leases
            .iter()
            .filter(|(k, r)| {
                self.saved
                    .leases
                    .get(k)
                    .is_some_and(|was| was.open_interval != r.open_interval)
            })
            .map(|(k, _)| crate::readings::path(&self.config.data_dir, k))
            .collect();
        self.saved = durable;
        if !closed.is_empty() {
            crate::off_runtime(move || {
                for path in closed {
                    if let Err(e) = crate::readings::clear(&path) {
                        tracing::warn!(path = %path.display(), error = %e, "cannot clear a closed interval's readings");
                    }
                }
            })
            .await;
        }
        Ok(())
    }

    /// Adds `reading` to `lease`'s journal, on a blocking thread; a failure is logged (the
    /// reading stays in the state, saved at the next change).
    async fn journal(&self, lease: Key, reading: crate::state::Reading) {
        let path = crate::readings::path(&self.config.data_dir, &lease);
        let written = crate::off_runtime(move || crate::readings::append(&path, &reading)).await;
        if let Err(e) = written {
            tracing::warn!(%lease, error = %e, "cannot journal a reading");
        }
    }

    /// The cluster's clock now, from the last reading advanced locally.
    fn chain_now(&self) -> Option<i64> {
        self.clock
            .map(|(then, at)| chain_time(then, at, Instant::now()))
    }

    /// Ticks every `poll`, and at once whenever `wake` is notified (a chain event), until
    /// `shutdown` completes (the leases keep running: a restart or an upgrade takes them back) or
    /// `drain` does: then drains within `drain_deadline`: containers stopped, final proofs
    /// submitted, leases ended, GPUs reset.
    pub async fn run(
        mut self,
        poll: Duration,
        drain_deadline: Duration,
        wake: Arc<tokio::sync::Notify>,
        shutdown: impl Future<Output = ()>,
        drain: impl Future<Output = ()>,
    ) -> RunOutcome {
        let mut ticker = tokio::time::interval(poll);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        tokio::pin!(drain);
        loop {
            tokio::select! {
                _ = &mut shutdown => {
                    let running = self.state.leases.len();
                    tracing::info!(leases = running, "stopping without draining; the leases keep running");
                    return RunOutcome::Stopped { running };
                }
                _ = &mut drain => break,
                _ = ticker.tick() => {}
                _ = wake.notified() => {
                    // One transaction notifies each account it wrote (the bid, the book, the
                    // machine, the lease), one after another: one tick for them all.
                    tokio::time::sleep(DEBOUNCE).await;
                    let _ = tokio::time::timeout(Duration::ZERO, wake.notified()).await;
                    ticker.reset();
                }
                _ = self.jobs.one_finished() => {}
                _ = self.senders.one_finished() => {}
            }
            let began = Instant::now();
            if let Err(e) = self.tick(false).await {
                tracing::warn!(error = %e, "tick failed");
            }
            self.metrics.observe_tick(began.elapsed());
        }
        self.drain(poll, drain_deadline).await
    }

    async fn drain(mut self, poll: Duration, deadline: Duration) -> RunOutcome {
        tracing::info!(leases = self.state.leases.len(), "draining");
        let poll = poll.min(Duration::from_secs(1));
        let drained = tokio::time::timeout(deadline, async {
            loop {
                if let Err(e) = self.tick(true).await {
                    tracing::warn!(error = %e, "drain tick failed");
                }
                if self.state.leases.is_empty() {
                    return;
                }
                tokio::time::sleep(poll).await;
            }
        })
        .await;
        match drained {
            Ok(()) => {
                tracing::info!("drained");
                RunOutcome::Drained
            }
            Err(_) => {
                let left: Vec<Key> = self.state.leases.keys().copied().collect();
                tracing::warn!(
                    ?left,
                    "drain deadline passed; the state file keeps the rest"
                );
                RunOutcome::DeadlinePassed { left }
            }
        }
    }
}

/// The cluster time at `at`, given that it read `then` at `read_at`.
fn chain_time(then: i64, read_at: Instant, at: Instant) -> i64 {
    if at >= read_at {
        then + (at - read_at).as_secs() as i64
    } else {
        then - (read_at - at).as_secs() as i64
    }
}

/// Where a lease's container logs are kept.
pub fn logs_path(data_dir: &Path, lease: &Key) -> PathBuf {
    data_dir.join("logs").join(format!("{lease}.log"))
}

#[cfg(test)]
mod tests;
