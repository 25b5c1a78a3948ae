//! The reconcile loop, in the kube-rs manner: each tick observes the chain, the containers and
//! the GPUs, [`plan`]s the actions that bring them in line (a pure function), and executes them.
//!
//! Crash safety comes from the order of the steps and the state file: a proof is closed and
//! saved before it is submitted, and dropped once the chain's next interval passes it, so a
//! kill at any point neither loses a proven interval nor sends one twice; containers are found
//! again by their lease label, and ones whose lease the chain no longer lists are removed; GPUs
//! that no lease uses are reset.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use gpu_market_core::lease::spot_profit_per_day;
use gpu_market_core::overclock::Settings;
use tokio::time::Instant;

use crate::chain::{
    BidKind, BidView, Chain, ChainError, Key, LeaseView, MachineStatus, MachineView,
};
use crate::config::{ContainerLimits, RegistryAuth, RegistryPassword};
use crate::env::load_env;
use crate::gpu::{apply_and_verify, GpuBackend, GpuError, GpuInfo, Sample};
use crate::metrics::Metrics;
use crate::runtime::{
    pinned_reference, registry_host, ContainerRuntime, ContainerSpec, ContainerState, Credentials,
    RuntimeError, LABEL_LEASE,
};
use crate::state::{AgentState, LeaseRecord, StateError, StateFile};

/// The exit code a final proof carries when the agent refused a lease because its GPU settings
/// did not take.
pub const EXIT_SETTINGS_REFUSED: i32 = -1;
/// The exit code a final proof carries when the container vanished (removed behind the agent's
/// back) or never started before a drain.
pub const EXIT_CONTAINER_LOST: i32 = -2;
/// How many open bids one tick looks at.
pub const BIDS_CONSIDERED: usize = 32;
/// How many expired bids one tick prunes at most (side by side, after the proofs).
pub const PRUNES_PER_TICK: usize = 3;

/// Everything one tick decides from.
#[derive(Debug, Clone)]
pub struct Observed {
    /// The cluster's clock (or, while it is unreachable, the last reading advanced locally).
    pub now: i64,
    /// `None` while the cluster is unreachable.
    pub chain: Option<ChainObserved>,
    pub containers: Vec<ObservedContainer>,
    pub gpus: Vec<ObservedGpu>,
    pub local: AgentState,
    pub draining: bool,
    pub heartbeat_due: bool,
    pub electricity_cost_per_kwh: u64,
}

#[derive(Debug, Clone)]
pub struct ChainObserved {
    pub machine: MachineView,
    pub leases: Vec<LeaseView>,
    pub bids: Vec<BidView>,
    /// Expired bids in the machine's books.
    pub expired: Vec<Key>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedContainer {
    pub id: String,
    pub lease: Option<Key>,
    pub state: ContainerState,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedGpu {
    pub index: u32,
    pub applied: Settings,
    pub defaults: Settings,
    pub sample: Sample,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// A managed container with no lease the agent knows: stop and remove it.
    RemoveContainer {
        id: String,
    },
    /// A running container of a lease the agent has no container id for: take it back.
    Adopt {
        lease: Key,
        id: String,
    },
    /// Apply the lease's settings (refusing it if they do not take), pull, run.
    Start {
        lease: Key,
    },
    /// Add this tick's GPU readings to the open interval.
    Meter {
        lease: Key,
    },
    /// The open interval's window ended: close it into a proof.
    CloseEnded {
        lease: Key,
    },
    /// The container finished: close the last interval early with its exit code.
    Finish {
        lease: Key,
        exit_code: i32,
    },
    /// Stop the container (draining).
    Stop {
        lease: Key,
    },
    /// Submit the closed proofs the chain has not accepted, oldest first.
    Submit {
        lease: Key,
    },
    /// Everything is proven: end the lease on chain, then clean up.
    End {
        lease: Key,
    },
    /// The chain no longer lists the lease: clean up locally.
    Forget {
        lease: Key,
    },
    /// A more profitable spot bid wants this spot lease's GPUs.
    Rebid {
        lease: Key,
        better_bid: Key,
    },
    /// Start `bid` on the GPUs the market's fit rule gave it.
    Allocate {
        bid: Key,
        gpu_indices: Vec<u8>,
    },
    /// Remove an expired bid from its book (its client is refunded).
    Prune {
        bid: Key,
    },
    /// No lease uses this GPU but its settings are not the defaults.
    ResetGpu {
        index: u32,
    },
    Heartbeat,
}

/// The actions that bring what was observed in line with what the chain says should run.
pub fn plan(o: &Observed) -> Vec<Action> {
    let mut actions = Vec::new();
    let chain_leases: Option<BTreeMap<Key, &LeaseView>> = o
        .chain
        .as_ref()
        .map(|c| c.leases.iter().map(|l| (l.key, l)).collect());
    let listed = |k: &Key| chain_leases.as_ref().map(|m| m.contains_key(k));
    let container_of = |lease: &Key| o.containers.iter().find(|c| c.lease == Some(*lease));

    for c in &o.containers {
        let stray = match c.lease {
            None => true,
            Some(l) => match o.local.leases.get(&l) {
                // A second container for a lease that already has one.
                Some(r) => r.container_id.as_ref().is_some_and(|id| *id != c.id),
                None => listed(&l) == Some(false),
            },
        };
        if stray {
            actions.push(Action::RemoveContainer { id: c.id.clone() });
        }
    }

    for (key, r) in &o.local.leases {
        let lease = *key;
        let view = chain_leases.as_ref().map(|m| m.get(key).copied());
        if view == Some(None) {
            actions.push(Action::Forget { lease });
            continue;
        }
        let view = view.flatten();
        let mut closes = false;
        if r.exit_code.is_none() {
            let container = r
                .container_id
                .as_ref()
                .and_then(|id| o.containers.iter().find(|c| c.id == *id));
            match (&r.container_id, container) {
                (None, _) => match container_of(key) {
                    Some(c) if o.chain.is_some() => actions.push(Action::Adopt {
                        lease,
                        id: c.id.clone(),
                    }),
                    Some(_) => {}
                    // Never started (a drain, or a pull that failed until the stop): prove
                    // the windows empty so the lease can end.
                    None if o.draining || view.is_some_and(|v| o.now >= v.stop()) => {
                        actions.push(Action::Finish {
                            lease,
                            exit_code: EXIT_CONTAINER_LOST,
                        });
                        closes = true;
                    }
                    None => {
                        if view.is_some_and(|v| o.now < v.stop()) {
                            actions.push(Action::Start { lease });
                        }
                    }
                },
                (Some(_), Some(c)) => match c.state {
                    ContainerState::Running => {
                        actions.push(Action::Meter { lease });
                        if window_ended(r, o.now) {
                            actions.push(Action::CloseEnded { lease });
                            closes = true;
                        }
                        if o.draining {
                            actions.push(Action::Stop { lease });
                        }
                    }
                    ContainerState::Exited { code } => {
                        actions.push(Action::Finish {
                            lease,
                            exit_code: code.clamp(i32::MIN as i64, i32::MAX as i64) as i32,
                        });
                        closes = true;
                    }
                },
                (Some(_), None) => {
                    actions.push(Action::Finish {
                        lease,
                        exit_code: EXIT_CONTAINER_LOST,
                    });
                    closes = true;
                }
            }
        } else if window_ended(r, o.now) {
            // Finished, but the lease's last windows still end (a container that exited after
            // the stop was decided): close them as they end.
            actions.push(Action::CloseEnded { lease });
            closes = true;
        }
        let Some(view) = view else { continue };
        if closes || !r.pending.is_empty() {
            actions.push(Action::Submit { lease });
        } else if r.exit_code.is_some() || (o.now >= view.stop() && r.all_closed()) {
            actions.push(Action::End { lease });
        }
    }

    let Some(chain) = &o.chain else {
        return actions;
    };
    for l in &chain.leases {
        if o.local.leases.contains_key(&l.key) {
            continue;
        }
        match container_of(&l.key) {
            Some(c) => actions.push(Action::Adopt {
                lease: l.key,
                id: c.id.clone(),
            }),
            None if !o.draining && o.now < l.stop() => actions.push(Action::Start { lease: l.key }),
            None => {}
        }
    }

    if !o.draining && chain.machine.status == MachineStatus::Active {
        let taken = allocate_fitting(&chain.bids, o.electricity_cost_per_kwh, &mut actions);
        spot_rule(o, chain, &taken, &mut actions);
    }
    if !o.draining {
        for &bid in chain.expired.iter().take(PRUNES_PER_TICK) {
            actions.push(Action::Prune { bid });
        }
    }

    let used: BTreeSet<u32> = chain
        .leases
        .iter()
        .flat_map(|l| l.gpu_indices.iter().map(|&i| i as u32))
        .chain(
            o.local
                .leases
                .values()
                .flat_map(|r| r.gpu_indices.iter().map(|&i| i as u32)),
        )
        .collect();
    for g in &o.gpus {
        if !used.contains(&g.index) && g.applied != g.defaults {
            actions.push(Action::ResetGpu { index: g.index });
        }
    }
    if o.heartbeat_due {
        actions.push(Action::Heartbeat);
    }
    actions
}

fn window_ended(r: &LeaseRecord, now: i64) -> bool {
    gpu_market_core::lease::interval_window(r.started_at, r.interval_secs, r.open_interval, r.stop)
        .is_some_and(|(_, to)| to <= now)
}

/// Allocates each bid the fit rule gave GPUs, in [`allocation_order`], on exactly those GPUs;
/// returns the bids allocated. The fit rule chose each bid's GPUs on the machine as observed, so
/// once a bid's GPUs overlap those of a bid allocated before it in this tick, it and every bid
/// after it wait for the next tick, which observes the machine again (the allocation's own
/// account change wakes it): a bid ranked below must not start before one ranked above that
/// still fits.
fn allocate_fitting(
    bids: &[BidView],
    electricity_cost_per_kwh: u64,
    actions: &mut Vec<Action>,
) -> BTreeSet<Key> {
    let mut taken = 0u16;
    let mut allocated = BTreeSet::new();
    for bid in allocation_order(bids, electricity_cost_per_kwh) {
        let Some(gpus) = &bid.gpus else {
            continue;
        };
        let mask = gpus.iter().fold(0u16, |m, &g| m | 1 << g);
        if mask & taken != 0 {
            break;
        }
        taken |= mask;
        allocated.insert(bid.key);
        actions.push(Action::Allocate {
            bid: bid.key,
            gpu_indices: gpus.clone(),
        });
    }
    allocated
}

/// A spot price's profit per day for the host at `power_w` in all (GigaSPOT's rule).
fn spot_profit(price: u64, gpus: usize, power_w: u64, electricity_cost_per_kwh: u64) -> u64 {
    spot_profit_per_day(price, gpus as u64, power_w, electricity_cost_per_kwh).unwrap_or(0)
}

fn bid_profit(b: &BidView, electricity_cost_per_kwh: u64) -> u64 {
    spot_profit(
        b.price,
        b.gpu_count as usize,
        b.power_w(),
        electricity_cost_per_kwh,
    )
}

/// The order allocation tries bids in: the chain's ranking, except that the spot bids, in the
/// places spot bids hold, come most profitable first (the most profitable spot bid wins).
fn allocation_order(bids: &[BidView], electricity_cost_per_kwh: u64) -> Vec<&BidView> {
    let mut spot: Vec<&BidView> = bids.iter().filter(|b| b.kind == BidKind::Spot).collect();
    spot.sort_by_key(|b| std::cmp::Reverse(bid_profit(b, electricity_cost_per_kwh)));
    let mut spot = spot.into_iter();
    bids.iter()
        .map(|b| match b.kind {
            BidKind::Spot => spot.next().expect("as many spot bids as spot places"),
            BidKind::Queue => b,
        })
        .collect()
}

/// The spot rule: a running spot lease whose end would let a more profitable open spot bid fit
/// (by the fit rule) is told to stop at its next interval boundary.
fn spot_rule(
    o: &Observed,
    chain: &ChainObserved,
    taken: &BTreeSet<Key>,
    actions: &mut Vec<Action>,
) {
    let mut promised = taken.clone();
    for l in &chain.leases {
        let running = o
            .local
            .leases
            .get(&l.key)
            .is_some_and(|r| r.exit_code.is_none() && r.container_id.is_some());
        if l.kind != BidKind::Spot || l.stop_at.is_some() || !running {
            continue;
        }
        let power: u64 = l.settings.iter().map(|s| s.power_limit_w as u64).sum();
        let current = spot_profit(
            l.price,
            l.gpu_indices.len(),
            power,
            o.electricity_cost_per_kwh,
        );
        let better = chain
            .bids
            .iter()
            .filter(|b| {
                b.kind == BidKind::Spot
                    && !promised.contains(&b.key)
                    && b.fits_if_ended.contains(&l.key)
            })
            .map(|b| (b, bid_profit(b, o.electricity_cost_per_kwh)))
            .filter(|(_, p)| *p > current)
            .max_by_key(|(_, p)| *p);
        if let Some((b, _)) = better {
            promised.insert(b.key);
            actions.push(Action::Rebid {
                lease: l.key,
                better_bid: b.key,
            });
        }
    }
}

/// What the reconciler needs besides its three backends.
#[derive(Debug, Clone)]
pub struct ReconcilerConfig {
    pub data_dir: PathBuf,
    pub electricity_cost_per_kwh: u64,
    pub heartbeat_interval: Duration,
    pub container: ContainerLimits,
    pub registries: BTreeMap<String, RegistryAuth>,
    /// The agent's keypair: sealed lease environments are opened with it.
    pub env_key: Arc<solana_keypair::Keypair>,
}

#[derive(Debug, thiserror::Error)]
pub enum TickError {
    #[error("the cluster clock has not been read yet: {0}")]
    NoClock(ChainError),
    #[error("listing containers: {0}")]
    Runtime(#[from] RuntimeError),
    #[error("reading the GPUs: {0}")]
    Gpu(#[from] GpuError),
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
    #[error(transparent)]
    Env(#[from] crate::env::EnvError),
    #[error("the registry password file {path}: {source}")]
    Password {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("lease {0} is not on chain")]
    NotListed(Key),
    #[error(transparent)]
    State(#[from] StateError),
}

pub struct Reconciler {
    chain: Arc<dyn Chain>,
    runtime: Arc<dyn ContainerRuntime>,
    gpus: Arc<dyn GpuBackend>,
    gpu_infos: Vec<GpuInfo>,
    config: ReconcilerConfig,
    state_file: StateFile,
    state: AgentState,
    metrics: Arc<Metrics>,
    /// The last cluster clock reading and when it was taken.
    clock: Option<(i64, Instant)>,
    last_heartbeat: Option<i64>,
    /// Each running lease's last container CPU reading (ns) and when it was taken.
    cpu_readings: BTreeMap<Key, (u64, Instant)>,
    /// Container CPU readings taken off the tick.
    cpu_probe: CpuProbe,
    /// Expired bids whose pruning was refused (e.g. their client holds no token account for
    /// the refund): not tried again, so they do not hold up the others.
    unprunable: BTreeSet<Key>,
}

/// Reads the CPU use of the leases' containers in the background. The engine answers a stats
/// request only at its next collection (up to a second); read one lease after the other inside
/// the tick, they delayed every allocation and start by about half a second per running lease.
/// The tick hands the probe the containers to read and uses the latest readings it has.
#[derive(Default)]
struct CpuProbe {
    /// Container id → cumulative CPU nanoseconds and when they were read.
    latest: Arc<std::sync::Mutex<BTreeMap<String, (u64, Instant)>>>,
    /// The round under way, if any: one at a time.
    round: Option<tokio::task::JoinHandle<()>>,
}

impl CpuProbe {
    /// Starts a round reading `ids` side by side, unless the last one is still under way.
    fn refresh(&mut self, runtime: &Arc<dyn ContainerRuntime>, ids: Vec<String>) {
        if ids.is_empty() || self.round.as_ref().is_some_and(|r| !r.is_finished()) {
            return;
        }
        let (runtime, latest) = (runtime.clone(), self.latest.clone());
        self.round = Some(tokio::spawn(async move {
            let reads = ids.into_iter().map(|id| {
                let runtime = runtime.clone();
                async move { (runtime.cpu_usage_ns(&id).await, id) }
            });
            for (read, id) in futures_util::future::join_all(reads).await {
                if let Ok(ns) = read {
                    latest
                        .lock()
                        .expect("probe lock")
                        .insert(id, (ns, Instant::now()));
                }
            }
        }));
    }

    /// The latest reading of container `id`.
    fn latest(&self, id: &str) -> Option<(u64, Instant)> {
        self.latest.lock().expect("probe lock").get(id).copied()
    }

    fn forget(&self, id: &str) {
        self.latest.lock().expect("probe lock").remove(id);
    }
}

impl std::fmt::Debug for CpuProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuProbe").finish_non_exhaustive()
    }
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
        let state = state_file.load()?;
        Ok(Reconciler {
            chain,
            runtime,
            gpu_infos: gpus.gpus(),
            gpus,
            config,
            state_file,
            state,
            metrics,
            clock: None,
            last_heartbeat: None,
            cpu_readings: BTreeMap::new(),
            cpu_probe: CpuProbe::default(),
            unprunable: BTreeSet::new(),
        })
    }

    pub fn state(&self) -> &AgentState {
        &self.state
    }

    /// One observe, plan, execute round; returns the actions it planned. Proof submissions,
    /// lease ends, the heartbeat and bid pruning (one confirmed transaction each, and never late
    /// by much: proofs cover windows) run after the rest, so that a new allocation or a lease's
    /// start does not wait behind them; the leases' proofs go out side by side, and so do the
    /// prunes, last.
    pub async fn tick(&mut self, draining: bool) -> Result<Vec<Action>, TickError> {
        let observed = self.observe(draining).await?;
        let actions = plan(&observed);
        let prunes: Vec<Key> = actions
            .iter()
            .filter_map(|a| match a {
                Action::Prune { bid } => Some(*bid),
                _ => None,
            })
            .collect();
        // Proof submissions (all leases side by side), then lease ends and the heartbeat, run
        // after the rest.
        let (submits, rest): (Vec<&Action>, Vec<&Action>) = actions
            .iter()
            .filter(|a| !matches!(a, Action::Prune { .. }))
            .partition(|a| matches!(a, Action::Submit { .. }));
        let (later, first): (Vec<&Action>, Vec<&Action>) = rest
            .into_iter()
            .partition(|a| matches!(a, Action::End { .. } | Action::Heartbeat));
        self.execute_all(&first, &observed).await?;
        let metered: Vec<String> = actions
            .iter()
            .filter_map(|a| match a {
                Action::Meter { lease } => self.state.leases.get(lease)?.container_id.clone(),
                _ => None,
            })
            .collect();
        self.cpu_probe.refresh(&self.runtime, metered);
        let submits: Vec<Key> = submits
            .iter()
            .filter_map(|a| match a {
                Action::Submit { lease } => Some(*lease),
                _ => None,
            })
            .collect();
        self.submit_all(&submits, &observed).await?;
        self.execute_all(&later, &observed).await?;
        self.prune_all(&prunes).await;
        let running = self
            .state
            .leases
            .values()
            .filter(|r| r.container_id.is_some() && r.exit_code.is_none())
            .count();
        self.metrics
            .leases_running
            .store(running as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(actions)
    }

    /// Executes `actions` in order; a failed one is logged and retried next tick, except a
    /// state-file failure, which ends the tick.
    async fn execute_all(&mut self, actions: &[&Action], o: &Observed) -> Result<(), TickError> {
        for &action in actions {
            if let Err(e) = self.execute(action, o).await {
                if let ActionError::State(e) = e {
                    return Err(TickError::State(e));
                }
                tracing::warn!(?action, error = %e, "action failed; retried next tick");
            }
        }
        Ok(())
    }

    fn chain_error(&self, e: &ChainError) {
        Metrics::inc(&self.metrics.rpc_errors);
        if e.is_transient() {
            tracing::warn!(error = %e, "chain call failed: the cluster did not answer");
        } else {
            tracing::warn!(error = %e, "chain call refused");
        }
    }

    /// Prunes the expired bids `bids` side by side; one that fails (another keeper may have
    /// pruned it first) is only logged: the next look at the books tells. One refused is not
    /// tried again.
    async fn prune_all(&mut self, bids: &[Key]) {
        let jobs = bids.iter().map(|&bid| {
            let chain = self.chain.clone();
            async move { (bid, chain.prune_bid(bid).await) }
        });
        for (bid, result) in futures_util::future::join_all(jobs).await {
            match result {
                Ok(()) => tracing::info!(%bid, "pruned an expired bid"),
                Err(e) => {
                    self.chain_error(&e);
                    tracing::warn!(%bid, error = %e, "pruning an expired bid failed");
                    if !e.is_transient() {
                        self.unprunable.insert(bid);
                    }
                }
            }
        }
    }

    async fn observe(&mut self, draining: bool) -> Result<Observed, TickError> {
        let chain = self.observe_chain().await;
        let now = match (&chain, self.clock) {
            (Ok((now, _)), _) => *now,
            (Err(_), Some((then, at))) => then + at.elapsed().as_secs() as i64,
            (Err(e), None) => return Err(TickError::NoClock(e.clone())),
        };
        let chain = match chain {
            Ok((now, view)) => {
                self.clock = Some((now, Instant::now()));
                self.follow_stops(&view.leases)?;
                Some(view)
            }
            Err(e) => {
                self.chain_error(&e);
                None
            }
        };
        let mut containers = Vec::new();
        for c in self.runtime.managed().await? {
            let state = match self.runtime.state(&c.id).await {
                Ok(s) => s,
                // Removed between the listing and now.
                Err(RuntimeError::NoSuchContainer(_)) => continue,
                Err(e) => return Err(e.into()),
            };
            containers.push(ObservedContainer {
                id: c.id,
                lease: c.lease,
                state,
            });
        }
        let mut gpus = Vec::new();
        for info in &self.gpu_infos {
            gpus.push(ObservedGpu {
                index: info.index,
                applied: self.gpus.read_back(info.index)?,
                defaults: info.defaults(),
                sample: self.gpus.sample(info.index)?,
            });
        }
        self.metrics
            .set_gpus(gpus.iter().map(|g| (g.index, g.sample)).collect());
        let heartbeat_due = chain.is_some()
            && self
                .last_heartbeat
                .is_none_or(|t| now - t >= self.config.heartbeat_interval.as_secs() as i64);
        Ok(Observed {
            now,
            chain,
            containers,
            gpus,
            local: self.state.clone(),
            draining,
            heartbeat_due,
            electricity_cost_per_kwh: self.config.electricity_cost_per_kwh,
        })
    }

    async fn observe_chain(&self) -> Result<(i64, ChainObserved), ChainError> {
        let now = self.chain.now().await?;
        let machine = self.chain.machine().await?;
        let leases = self.chain.leases().await?;
        let open = self.chain.best_open_bids(BIDS_CONSIDERED).await?;
        Ok((
            now,
            ChainObserved {
                machine,
                leases,
                bids: open.bids,
                expired: open
                    .expired
                    .into_iter()
                    .filter(|k| !self.unprunable.contains(k))
                    .collect(),
            },
        ))
    }

    /// Takes each lease's stop from the chain (a spot preemption moves it earlier).
    fn follow_stops(&mut self, leases: &[LeaseView]) -> Result<(), StateError> {
        let mut changed = false;
        for l in leases {
            if let Some(r) = self.state.leases.get_mut(&l.key) {
                changed |= r.stop != l.stop();
                r.stop = l.stop();
            }
        }
        if changed {
            self.save()?;
        }
        Ok(())
    }

    fn save(&self) -> Result<(), StateError> {
        self.state_file.save(&self.state)
    }

    fn samples(o: &Observed, gpu_indices: &[u8]) -> Vec<Sample> {
        gpu_indices
            .iter()
            .map(|&i| {
                o.gpus
                    .iter()
                    .find(|g| g.index == i as u32)
                    .map(|g| g.sample)
                    .unwrap_or_default()
            })
            .collect()
    }

    fn view(o: &Observed, lease: Key) -> Result<&LeaseView, ActionError> {
        o.chain
            .as_ref()
            .and_then(|c| c.leases.iter().find(|l| l.key == lease))
            .ok_or(ActionError::NotListed(lease))
    }

    fn record(&mut self, lease: Key) -> &mut LeaseRecord {
        self.state
            .leases
            .get_mut(&lease)
            .expect("the plan names leases the state has")
    }

    async fn execute(&mut self, action: &Action, o: &Observed) -> Result<(), ActionError> {
        match action {
            Action::RemoveContainer { id } => {
                tracing::info!(container = %id, "removing a container no lease accounts for");
                self.stop_and_remove(id).await?;
            }
            Action::Adopt { lease, id } => {
                let view = Self::view(o, *lease)?;
                let samples = Self::samples(o, &view.gpu_indices);
                let record = self
                    .state
                    .leases
                    .entry(*lease)
                    .or_insert_with(|| LeaseRecord::new(view, &samples));
                record.container_id = Some(id.clone());
                record.running_since.get_or_insert(o.now);
                self.save()?;
                tracing::info!(%lease, container = %id, "adopted a running container");
                if let Err(e) = self.verify_settings(view) {
                    tracing::warn!(%lease, error = %e, "settings no longer hold; stopping the lease");
                    self.runtime
                        .stop(id, self.config.container.stop_grace)
                        .await?;
                }
            }
            Action::Start { lease } => self.start(*lease, o).await?,
            Action::Meter { lease } => {
                let samples = Self::samples(o, &self.record(*lease).gpu_indices.clone());
                self.record(*lease).record_sample(&samples);
                self.observe_workload(*lease);
            }
            Action::CloseEnded { lease } => {
                let samples = Self::samples(o, &self.record(*lease).gpu_indices.clone());
                let closed = self.record(*lease).close_ended(o.now, &samples);
                self.save()?;
                tracing::info!(%lease, closed, "closed ended intervals");
            }
            Action::Finish { lease, exit_code } => {
                let samples = Self::samples(o, &self.record(*lease).gpu_indices.clone());
                self.record(*lease).close_final(o.now, &samples, *exit_code);
                self.save()?;
                tracing::info!(%lease, exit_code, "container finished; final proof closed");
            }
            Action::Stop { lease } => {
                if let Some(id) = self.record(*lease).container_id.clone() {
                    self.runtime
                        .stop(&id, self.config.container.stop_grace)
                        .await?;
                }
            }
            Action::Submit { lease } => self.submit_all(&[*lease], o).await?,
            Action::End { lease } => {
                self.chain
                    .end_lease(*lease)
                    .await
                    .inspect_err(|e| self.chain_error(e))?;
                tracing::info!(%lease, "lease ended");
                self.clean_up(*lease).await?;
            }
            Action::Forget { lease } => {
                tracing::info!(%lease, "the chain no longer lists the lease; cleaning up");
                self.clean_up(*lease).await?;
            }
            Action::Rebid { lease, better_bid } => {
                self.chain
                    .rebid(*lease, *better_bid)
                    .await
                    .inspect_err(|e| self.chain_error(e))?;
                tracing::info!(%lease, %better_bid, "spot lease preempted at its next boundary");
            }
            Action::Prune { bid } => self.prune_all(&[*bid]).await,
            Action::Allocate { bid, gpu_indices } => {
                let lease = self
                    .chain
                    .allocate(*bid, gpu_indices)
                    .await
                    .inspect_err(|e| self.chain_error(e))?;
                tracing::info!(%bid, %lease, ?gpu_indices, "allocated");
            }
            Action::ResetGpu { index } => {
                self.gpus.reset(*index)?;
                tracing::info!(gpu = index, "reset a GPU no lease uses");
            }
            Action::Heartbeat => {
                self.chain
                    .heartbeat()
                    .await
                    .inspect_err(|e| self.chain_error(e))?;
                self.last_heartbeat = Some(o.now);
            }
        }
        Ok(())
    }

    fn verify_settings(&self, view: &LeaseView) -> Result<(), GpuError> {
        for (&i, s) in view.gpu_indices.iter().zip(&view.settings) {
            apply_and_verify(self.gpus.as_ref(), i as u32, s)?;
        }
        Ok(())
    }

    /// Tells the GPU backend how busy the lease's container kept its CPU share between the
    /// probe's last two readings (the SIMULATED backend's load; real GPUs ignore it).
    fn observe_workload(&mut self, lease: Key) {
        let record = self.record(lease);
        let (Some(id), gpus) = (record.container_id.clone(), record.gpu_indices.clone()) else {
            return;
        };
        let Some((cpu_ns, now)) = self.cpu_probe.latest(&id) else {
            return;
        };
        if self
            .cpu_readings
            .get(&lease)
            .is_some_and(|&(_, at)| at >= now)
        {
            return;
        }
        if let Some((last_ns, at)) = self.cpu_readings.insert(lease, (cpu_ns, now)) {
            let share_ns = (now - at).as_nanos()
                * gpus.len() as u128
                * self.config.container.millicpus_per_gpu as u128
                / 1_000;
            let used = cpu_ns.saturating_sub(last_ns) as u128;
            if let Some(permille) = (used * 1_000).checked_div(share_ns) {
                for &g in &gpus {
                    self.gpus
                        .observe_workload(g as u32, permille.min(1_000) as u16);
                }
            }
        }
    }

    async fn start(&mut self, lease: Key, o: &Observed) -> Result<(), ActionError> {
        let view = Self::view(o, lease)?;
        let samples = Self::samples(o, &view.gpu_indices);
        self.state
            .leases
            .entry(lease)
            .or_insert_with(|| LeaseRecord::new(view, &samples));
        self.save()?;
        if let Err(e) = self.verify_settings(view) {
            tracing::warn!(%lease, error = %e, "GPU settings did not take; refusing the lease");
            self.reset_gpus(lease)?;
            self.record(lease)
                .close_final(o.now, &samples, EXIT_SETTINGS_REFUSED);
            self.save()?;
            return Ok(());
        }
        let env = load_env(&self.config.data_dir, &view.env_hash, &self.config.env_key)?;
        let credentials = self.credentials(&view.image_ref)?;
        self.runtime
            .pull(&view.image_ref, &view.image_digest, credentials.as_ref())
            .await?;
        let n = view.gpu_indices.len() as i64;
        let limits = self.config.container;
        let spec = ContainerSpec {
            name: None,
            image: pinned_reference(&view.image_ref, &view.image_digest)?,
            cmd: None,
            env,
            labels: [(LABEL_LEASE.to_string(), lease.to_string())].into(),
            memory_bytes: Some((n * limits.memory_mib_per_gpu as i64) << 20),
            nano_cpus: Some(n * limits.millicpus_per_gpu as i64 * 1_000_000),
            pids_limit: Some(limits.pids_limit),
            gpu_indices: view.gpu_indices.iter().map(|&i| i as u32).collect(),
        };
        let id = self.runtime.run(&spec).await?;
        let record = self.record(lease);
        record.container_id = Some(id.clone());
        record.running_since = Some(o.now);
        record.baseline_energy_mj = samples.iter().map(|s| s.energy_mj).collect();
        self.save()?;
        tracing::info!(%lease, container = %id, gpus = ?view.gpu_indices, "lease started");
        Ok(())
    }

    fn credentials(&self, image_ref: &str) -> Result<Option<Credentials>, ActionError> {
        let Some(auth) = self.config.registries.get(registry_host(image_ref)) else {
            return Ok(None);
        };
        let password = match &auth.password {
            RegistryPassword::Inline(p) => p.clone(),
            RegistryPassword::File(path) => std::fs::read_to_string(path)
                .map_err(|source| ActionError::Password {
                    path: path.clone(),
                    source,
                })?
                .trim_end()
                .to_string(),
        };
        Ok(Some(Credentials {
            username: auth.username.clone(),
            password,
        }))
    }

    /// Submits the closed proofs of `leases`, oldest first within a lease and the leases side by
    /// side (each proof is one confirmed transaction: one lease's chain must not wait for
    /// another's). Proofs the chain already has are dropped first; each accepted proof is saved as
    /// soon as the round ends. A lease whose submission failed is retried next tick.
    async fn submit_all(&mut self, leases: &[Key], o: &Observed) -> Result<(), StateError> {
        let mut jobs = Vec::new();
        for &lease in leases {
            let Ok(view) = Self::view(o, lease) else {
                continue;
            };
            let (next, prev) = (view.next_interval, view.proof_hash);
            // Proofs the chain already has (their answer was lost, or the agent died before
            // saving).
            let record = self.record(lease);
            while record.pending.first().is_some_and(|p| p.interval < next) {
                record.accept_oldest(prev);
            }
            jobs.push((lease, prev, record.pending.clone()));
        }
        self.save()?;
        let rounds = jobs.into_iter().map(|(lease, mut prev, pending)| {
            let chain = self.chain.clone();
            async move {
                let mut accepted = Vec::new();
                for p in pending {
                    match chain.submit_usage(lease, &p.proof(), prev).await {
                        Ok(hash) => {
                            accepted.push((p, hash));
                            prev = hash;
                        }
                        Err(e) => return (lease, accepted, Some(e)),
                    }
                }
                (lease, accepted, None)
            }
        });
        for (lease, accepted, failed) in futures_util::future::join_all(rounds).await {
            for (p, hash) in accepted {
                Metrics::inc(&self.metrics.proofs_sent);
                self.record(lease).accept_oldest(hash);
                tracing::info!(%lease, interval = p.interval, window = ?p.window, "proof accepted");
            }
            if let Some(e) = failed {
                Metrics::inc(&self.metrics.proofs_failed);
                self.chain_error(&e);
                tracing::warn!(%lease, error = %e, "proof submission failed; retried next tick");
            }
        }
        self.save()
    }

    async fn stop_and_remove(&self, id: &str) -> Result<(), RuntimeError> {
        match self
            .runtime
            .stop(id, self.config.container.stop_grace)
            .await
        {
            Ok(()) | Err(RuntimeError::NoSuchContainer(_)) => {}
            Err(e) => return Err(e),
        }
        match self.runtime.remove(id).await {
            Ok(()) | Err(RuntimeError::NoSuchContainer(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Keeps the container's logs, removes it, resets the lease's GPUs and forgets the lease.
    async fn clean_up(&mut self, lease: Key) -> Result<(), ActionError> {
        self.cpu_readings.remove(&lease);
        if let Some(id) = self.record(lease).container_id.clone() {
            self.cpu_probe.forget(&id);
            let logs = logs_path(&self.config.data_dir, &lease);
            let saved = async {
                tokio::fs::create_dir_all(logs.parent().expect("logs folder"))
                    .await
                    .map_err(|source| RuntimeError::Logs {
                        path: logs.clone(),
                        source,
                    })?;
                self.runtime.save_logs(&id, &logs).await
            };
            if let Err(e) = saved.await {
                tracing::warn!(%lease, error = %e, "could not keep the container's logs");
            }
            self.stop_and_remove(&id).await?;
        }
        self.reset_gpus(lease)?;
        self.state.leases.remove(&lease);
        self.save()?;
        Ok(())
    }

    /// Resets the lease's GPUs that no other lease of this agent uses.
    fn reset_gpus(&self, lease: Key) -> Result<(), GpuError> {
        let record = &self.state.leases[&lease];
        for &i in &record.gpu_indices {
            let shared =
                self.state.leases.iter().any(|(k, r)| {
                    *k != lease && r.exit_code.is_none() && r.gpu_indices.contains(&i)
                });
            if !shared {
                self.gpus.reset(i as u32)?;
            }
        }
        Ok(())
    }

    /// Ticks every `poll`, and at once whenever `wake` is notified (a chain event), until
    /// `shutdown` completes; then drains within `drain_deadline`: containers stopped, final
    /// proofs submitted, leases ended, GPUs reset.
    pub async fn run(
        mut self,
        poll: Duration,
        drain_deadline: Duration,
        wake: Arc<tokio::sync::Notify>,
        shutdown: impl Future<Output = ()>,
    ) -> DrainOutcome {
        let mut ticker = tokio::time::interval(poll);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                _ = ticker.tick() => {}
                _ = wake.notified() => ticker.reset(),
            }
            if let Err(e) = self.tick(false).await {
                tracing::warn!(error = %e, "tick failed");
            }
        }
        tracing::info!(leases = self.state.leases.len(), "draining");
        let poll = poll.min(Duration::from_secs(1));
        let drained = tokio::time::timeout(drain_deadline, async {
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
                DrainOutcome::Drained
            }
            Err(_) => {
                let left: Vec<Key> = self.state.leases.keys().copied().collect();
                tracing::warn!(
                    ?left,
                    "drain deadline passed; the state file keeps the rest"
                );
                DrainOutcome::DeadlinePassed { left }
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DrainOutcome {
    Drained,
    /// Leases still in the state file; the next start finishes them.
    DeadlinePassed {
        left: Vec<Key>,
    },
}

/// Where a lease's container logs are kept.
pub fn logs_path(data_dir: &Path, lease: &Key) -> PathBuf {
    data_dir.join("logs").join(format!("{lease}.log"))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use gpu_market_core::overclock::{GpuLimits, Range};
    use tempfile::TempDir;

    use super::*;
    use crate::chain::fake::FakeChain;
    use crate::chain::{proof_hash, GpuView};
    use crate::config::SimulatedGpuConfig;
    use crate::gpu::simulated::{SimulatedGpu, TokioTime};
    use crate::runtime::recording::{Call, RecordingRuntime, EXIT_SIGTERM};

    const T0: i64 = 1_700_000_000;
    const INTERVAL: u32 = 60;
    const POLL: u64 = 5;

    struct Harness {
        chain: Arc<FakeChain>,
        runtime: Arc<RecordingRuntime>,
        gpus: Arc<SimulatedGpu>,
        metrics: Arc<Metrics>,
        dir: TempDir,
        env_key: Arc<solana_keypair::Keypair>,
    }

    fn gpu_config(topology_group: u8) -> SimulatedGpuConfig {
        SimulatedGpuConfig {
            class: 0,
            memory_gib: 80,
            topology_group,
            limits: GpuLimits {
                power_w: Range { min: 100, max: 400 },
                core_lock_mhz: Range {
                    min: 300,
                    max: 1_800,
                },
                mem_lock_mhz: Range { min: 0, max: 0 },
                core_offset_mhz: Range { min: 0, max: 0 },
                mem_offset_mhz: Range { min: 0, max: 0 },
            },
            default_power_w: 300,
        }
    }

    impl Harness {
        fn new(groups: &[u8]) -> Self {
            Self::with(groups.iter().map(|&g| gpu_config(g)).collect())
        }

        /// A machine of the simulated GPUs `configs`, declared on the fake chain as they are.
        fn with(configs: Vec<SimulatedGpuConfig>) -> Self {
            let gpus = configs
                .iter()
                .map(|c| {
                    let view = GpuView {
                        class: c.class,
                        memory_gib: c.memory_gib,
                        topology_group: c.topology_group,
                    };
                    (view, c.limits)
                })
                .collect();
            Harness {
                chain: Arc::new(FakeChain::new(gpus, INTERVAL, T0)),
                runtime: Arc::new(RecordingRuntime::new()),
                gpus: Arc::new(SimulatedGpu::new(&configs, Arc::new(TokioTime::new()))),
                metrics: Arc::new(Metrics::default()),
                dir: tempfile::tempdir().unwrap(),
                env_key: Arc::new(solana_keypair::Keypair::new()),
            }
        }

        /// A reconciler continuing from the state file: a fresh start, or a restart.
        fn reconciler(&self) -> Reconciler {
            Reconciler::new(
                self.chain.clone(),
                self.runtime.clone(),
                self.gpus.clone(),
                ReconcilerConfig {
                    data_dir: self.dir.path().to_path_buf(),
                    electricity_cost_per_kwh: 500,
                    heartbeat_interval: Duration::from_secs(60),
                    container: ContainerLimits {
                        memory_mib_per_gpu: 1_024,
                        millicpus_per_gpu: 2_000,
                        pids_limit: 512,
                        stop_grace: Duration::from_secs(10),
                    },
                    registries: BTreeMap::new(),
                    env_key: self.env_key.clone(),
                },
                self.metrics.clone(),
            )
            .unwrap()
        }

        fn running(&self) -> Vec<(String, ContainerSpec)> {
            self.runtime
                .containers()
                .into_iter()
                .filter(|(_, c)| c.state == ContainerState::Running)
                .map(|(id, c)| (id, c.spec))
                .collect()
        }

        fn applied(&self, index: u32) -> Settings {
            self.gpus.read_back(index).unwrap()
        }
    }

    fn power(w: u16) -> Settings {
        Settings {
            power_limit_w: w,
            ..Default::default()
        }
    }

    fn bid(n: u8, kind: BidKind, gpu_count: u8, price: u64, settings: Settings) -> BidView {
        BidView {
            key: Key([n; 32]),
            client: Key([200; 32]),
            kind,
            gpu_count,
            gib_per_gpu: 80,
            accepted_classes: 1,
            gpus: None,
            fits_if_ended: Vec::new(),
            settings: vec![settings; gpu_count as usize],
            price,
            max_duration_secs: 3_600,
            deadline: T0 + 86_400,
            image_ref: "127.0.0.1:5000/gpu-market/train:v1".into(),
            image_digest: [n; 32],
            env_hash: [0; 32],
        }
    }

    /// Advances the clock by `secs` in poll steps, ticking after each; returns every action.
    async fn run_for(r: &mut Reconciler, secs: u64) -> Vec<Action> {
        let mut all = Vec::new();
        for _ in 0..secs / POLL {
            tokio::time::advance(Duration::from_secs(POLL)).await;
            all.extend(r.tick(false).await.unwrap());
        }
        all
    }

    /// Allocates `b` on a fresh machine and starts it: one tick to allocate, one to start
    /// (5 s after the lease's start).
    async fn allocated_and_started(h: &Harness, b: BidView) -> (Reconciler, LeaseView) {
        h.chain.place_bid(b.clone());
        let mut r = h.reconciler();
        r.tick(false).await.unwrap();
        let lease = h.chain.lease_of_bid(b.key).expect("allocated");
        run_for(&mut r, POLL).await;
        assert_eq!(h.running().len(), 1, "started");
        (r, lease)
    }

    /// The accepted proofs' intervals, and a check that their hashes chain from zero.
    fn proven_intervals(h: &Harness, lease: Key) -> Vec<u32> {
        let mut prev = [0; 32];
        h.chain
            .accepted()
            .into_iter()
            .filter(|a| a.lease == lease)
            .map(|a| {
                assert_eq!(a.hash, proof_hash(&lease, &a.proof, &prev), "hash chain");
                prev = a.hash;
                a.proof.interval
            })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_free_machine_allocates_within_one_topology_group_and_runs_exactly_those_gpus() {
        // GPU 0 alone in group 0; GPUs 1-3 share group 1.
        let h = Harness::new(&[0, 1, 1, 1]);
        let mut b = bid(1, BidKind::Queue, 2, 1_000, power(250));
        b.env_hash = crate::env::place_sealed(h.dir.path(), "TOKEN=secret\n", &h.env_key);
        h.chain.place_bid(b.clone());
        let mut r = h.reconciler();

        let actions = r.tick(false).await.unwrap();
        assert!(
            actions.contains(&Action::Allocate {
                bid: b.key,
                gpu_indices: vec![1, 2]
            }),
            "{actions:?}"
        );
        assert!(actions.contains(&Action::Heartbeat));
        let lease = h.chain.lease_of_bid(b.key).unwrap();
        assert_eq!(lease.gpu_indices, vec![1, 2]);

        let actions = run_for(&mut r, POLL).await;
        assert!(actions.contains(&Action::Start { lease: lease.key }));
        let running = h.running();
        assert_eq!(running.len(), 1);
        let spec = &running[0].1;
        assert_eq!(spec.gpu_indices, vec![1, 2]);
        assert_eq!(spec.labels[LABEL_LEASE], lease.key.to_string());
        assert_eq!(spec.env, vec![("TOKEN".to_string(), "secret".to_string())]);
        assert_eq!(spec.memory_bytes, Some((2 * 1_024) << 20));
        let pinned = format!("127.0.0.1:5000/gpu-market/train@sha256:{}", "01".repeat(32));
        assert_eq!(spec.image, pinned);
        assert!(h.runtime.calls().contains(&Call::Pull {
            reference: pinned,
            username: None
        }));
        assert_eq!(h.applied(1), power(250));
        assert_eq!(h.applied(2), power(250));
        assert_eq!(h.applied(0), power(300), "untouched");
        assert_eq!(
            h.chain.machine().await.unwrap().free_gib,
            vec![80, 0, 0, 80]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn one_proof_per_interval_with_the_lease_windows_and_a_hash_chain() {
        let h = Harness::new(&[0, 0]);
        let (mut r, lease) =
            allocated_and_started(&h, bid(1, BidKind::Queue, 2, 1_000, power(250))).await;
        // SIMULATED GPU: the load follows the container's CPU, here 80 % of its 2 × 2 CPUs.
        let (id, _) = h.running().pop().unwrap();
        h.runtime.set_cpu_rate(&id, 3_200);
        run_for(&mut r, 3 * INTERVAL as u64).await;

        assert_eq!(proven_intervals(&h, lease.key), vec![0, 1, 2]);
        assert_eq!(h.chain.submit_calls(), 3, "no proof sent twice");
        let accepted = h.chain.accepted();
        let start = lease.started_at;
        for (k, a) in accepted.iter().enumerate() {
            let from = start + k as i64 * INTERVAL as i64;
            assert_eq!(a.window, (from, from + INTERVAL as i64));
            assert_eq!(a.proof.exit_code, None);
            assert_eq!(a.proof.peak_power_w.len(), 2);
            assert!(a.proof.energy_j > 0);
        }
        // The container started 5 s into the first interval.
        assert_eq!(accepted[0].proof.gpu_seconds, 2 * 55);
        assert_eq!(accepted[1].proof.gpu_seconds, 2 * 60);
        // 80 % load between 50 W idle and the 250 W limit: 210 W; 2 GPUs for 60 s.
        assert_eq!(accepted[1].proof.avg_utilisation_bps, 8_000);
        assert_eq!(accepted[1].proof.peak_power_w, vec![210, 210]);
        let energy = accepted[1].proof.energy_j;
        assert!(
            (2 * 210 * 60 - 2 * 210 * 5..=2 * 210 * 60 + 2 * 210 * 5).contains(&energy),
            "{energy}"
        );
        assert_eq!(h.chain.lease(lease.key).unwrap().next_interval, 3);
        assert_eq!(r.state().leases[&lease.key].last_proven, Some(2));
        assert_eq!(
            h.metrics
                .proofs_sent
                .load(std::sync::atomic::Ordering::Relaxed),
            3
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_market_update_leaves_a_running_lease_on_the_interval_it_started_with() {
        let h = Harness::new(&[0, 0]);
        let (mut r, old) =
            allocated_and_started(&h, bid(1, BidKind::Queue, 1, 1_000, power(250))).await;
        run_for(&mut r, INTERVAL as u64).await;
        // The market's interval halves: the running lease keeps 60 s, a new one gets 30 s.
        h.chain.set_interval(INTERVAL / 2);
        h.chain
            .place_bid(bid(2, BidKind::Queue, 1, 1_000, power(250)));
        run_for(&mut r, 3 * INTERVAL as u64).await;
        let new = h.chain.lease_of_bid(Key([2; 32])).expect("allocated");
        assert_eq!(new.interval_secs, INTERVAL / 2);

        let windows = |lease: &LeaseView| -> Vec<(i64, i64)> {
            h.chain
                .accepted()
                .into_iter()
                .filter(|a| a.lease == lease.key)
                .map(|a| a.window)
                .collect()
        };
        let expected = |lease: &LeaseView, n: usize| -> Vec<(i64, i64)> {
            let secs = lease.interval_secs as i64;
            (0..n as i64)
                .map(|k| {
                    (
                        lease.started_at + k * secs,
                        lease.started_at + (k + 1) * secs,
                    )
                })
                .collect()
        };
        assert_eq!(proven_intervals(&h, old.key), vec![0, 1, 2, 3]);
        assert_eq!(
            windows(&old),
            expected(&old, 4),
            "proven every 60 s throughout"
        );
        let proven = windows(&new);
        assert!(proven.len() >= 5, "{proven:?}");
        assert_eq!(proven, expected(&new, proven.len()), "proven every 30 s");
        assert_eq!(h.chain.lease(old.key).unwrap().interval_secs, INTERVAL);
        assert_eq!(r.state().leases[&old.key].interval_secs, INTERVAL);
    }

    #[tokio::test(start_paused = true)]
    async fn the_simulated_load_follows_the_containers_cpu_share_read_off_the_tick() {
        let h = Harness::new(&[0]);
        let (mut r, lease) =
            allocated_and_started(&h, bid(1, BidKind::Queue, 1, 1_000, power(250))).await;
        let (id, _) = h.running().pop().unwrap();
        h.runtime.set_cpu_rate(&id, 2_000);
        // The engine answers a CPU reading only at its next collection, here 3 s away: the
        // tick meters without waiting for it.
        h.runtime.set_stats_delay(Duration::from_secs(3));
        let before = Instant::now();
        let actions = r.tick(false).await.unwrap();
        assert!(actions.contains(&Action::Meter { lease: lease.key }));
        assert!(
            before.elapsed() < Duration::from_secs(3),
            "the tick waited for the reading: {:?}",
            before.elapsed()
        );
        run_for(&mut r, 2 * INTERVAL as u64).await;
        h.runtime.set_cpu_rate(&id, 0);
        run_for(&mut r, 2 * INTERVAL as u64).await;
        let proofs: Vec<u16> = h
            .chain
            .accepted()
            .iter()
            .filter(|a| a.lease == lease.key)
            .map(|a| a.proof.avg_utilisation_bps)
            .collect();
        assert_eq!(proofs.len(), 4);
        assert_eq!(proofs[1], 10_000, "a container using its whole share: busy");
        assert_eq!(proofs[3], 0, "a sleeping container: idle");
    }

    #[tokio::test(start_paused = true)]
    async fn a_more_profitable_spot_bid_preempts_a_spot_lease_at_its_next_boundary() {
        let h = Harness::new(&[0, 0]);
        let (mut r, lease) =
            allocated_and_started(&h, bid(1, BidKind::Spot, 2, 10_000, power(300))).await;
        let better = bid(2, BidKind::Spot, 2, 20_000, power(300));
        let worse = bid(3, BidKind::Spot, 2, 9_000, power(300));
        h.chain.place_bid(worse.clone());
        h.chain.place_bid(better.clone());

        let actions = run_for(&mut r, POLL).await;
        assert!(
            actions.contains(&Action::Rebid {
                lease: lease.key,
                better_bid: better.key
            }),
            "{actions:?}"
        );
        let boundary = lease.started_at + INTERVAL as i64;
        assert_eq!(h.chain.rebids(), vec![(lease.key, better.key, boundary)]);
        run_for(&mut r, 20).await;
        assert_eq!(h.chain.rebids().len(), 1, "told once");

        // Past the boundary: the last window is proven, the lease ends, the better bid runs.
        run_for(&mut r, INTERVAL as u64).await;
        assert_eq!(proven_intervals(&h, lease.key), vec![0]);
        assert_eq!(h.chain.accepted()[0].window, (lease.started_at, boundary));
        assert_eq!(h.chain.ended(), vec![lease.key]);
        let next = h
            .chain
            .lease_of_bid(better.key)
            .expect("the better bid was allocated");
        let running = h.running();
        assert_eq!(running.len(), 1);
        assert_eq!(running[0].1.labels[LABEL_LEASE], next.key.to_string());
        assert!(h.chain.lease_of_bid(worse.key).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_crashed_container_gets_a_final_proof_with_its_exit_code_and_the_lease_ends() {
        let h = Harness::new(&[0, 0]);
        let (mut r, lease) =
            allocated_and_started(&h, bid(1, BidKind::Queue, 1, 1_000, power(250))).await;
        let gpu = lease.gpu_indices[0] as u32;
        run_for(&mut r, 70).await;
        assert_eq!(proven_intervals(&h, lease.key), vec![0]);
        let (id, _) = h.running().pop().unwrap();
        h.runtime.exit(&id, 3);
        let crashed_at = h.chain.clock();

        let actions = run_for(&mut r, POLL).await;
        assert!(actions.contains(&Action::Finish {
            lease: lease.key,
            exit_code: 3
        }));
        run_for(&mut r, POLL).await;
        assert_eq!(proven_intervals(&h, lease.key), vec![0, 1]);
        let last = h.chain.accepted().pop().unwrap();
        assert_eq!(last.proof.exit_code, Some(3));
        let from = lease.started_at + INTERVAL as i64;
        assert_eq!(last.window, (from, from + INTERVAL as i64));
        assert_eq!(
            last.proof.gpu_seconds,
            (crashed_at + POLL as i64 - from) as u64
        );
        assert_eq!(h.chain.ended(), vec![lease.key]);
        assert!(h.runtime.containers().is_empty(), "container removed");
        assert!(logs_path(h.dir.path(), &lease.key).exists(), "logs kept");
        assert_eq!(h.applied(gpu), power(300), "GPU reset");
        assert!(r.state().leases.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn an_rpc_outage_loses_no_proof_and_a_lost_answer_duplicates_none() {
        let h = Harness::new(&[0, 0]);
        let (mut r, lease) =
            allocated_and_started(&h, bid(1, BidKind::Queue, 2, 1_000, power(250))).await;
        run_for(&mut r, 25).await;
        h.chain.set_outage(true);
        // Two boundaries pass while the cluster is unreachable.
        run_for(&mut r, 2 * INTERVAL as u64).await;
        assert!(proven_intervals(&h, lease.key).is_empty());
        let pending: Vec<u32> = r.state().leases[&lease.key]
            .pending
            .iter()
            .map(|p| p.interval)
            .collect();
        assert_eq!(pending, vec![0, 1], "closed locally on time");

        h.chain.set_outage(false);
        // The first proof lands but its answer is lost.
        h.chain.lose_next_response();
        run_for(&mut r, POLL).await;
        assert_eq!(proven_intervals(&h, lease.key), vec![0]);
        run_for(&mut r, POLL).await;
        assert_eq!(proven_intervals(&h, lease.key), vec![0, 1]);
        assert_eq!(h.chain.submit_calls(), 2, "proof 0 was not sent again");
        let windows: Vec<_> = h.chain.accepted().iter().map(|a| a.window).collect();
        let s = lease.started_at;
        assert_eq!(windows, vec![(s, s + 60), (s + 60, s + 120)]);
        assert!(
            h.metrics
                .rpc_errors
                .load(std::sync::atomic::Ordering::Relaxed)
                > 0
        );
        assert!(
            h.metrics
                .proofs_failed
                .load(std::sync::atomic::Ordering::Relaxed)
                > 0
        );
        run_for(&mut r, INTERVAL as u64).await;
        assert_eq!(proven_intervals(&h, lease.key), vec![0, 1, 2]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_restart_mid_lease_continues_from_the_state_file_without_duplicates_or_orphans() {
        let h = Harness::new(&[0, 0, 0]);
        let (mut r, lease) =
            allocated_and_started(&h, bid(1, BidKind::Queue, 1, 1_000, power(250))).await;
        let (id, _) = h.running().pop().unwrap();
        // Boundary 1: the proof lands, its answer is lost, and the agent is killed before
        // hearing more: the state file still lists the proof as pending.
        run_for(&mut r, 50).await;
        h.chain.lose_next_response();
        run_for(&mut r, POLL).await;
        assert_eq!(proven_intervals(&h, lease.key), vec![0]);
        drop(r);

        // While it was down: a container of a lease the chain no longer has, and a GPU left
        // overclocked by nobody.
        let orphan = h
            .runtime
            .run(&ContainerSpec {
                labels: [(LABEL_LEASE.to_string(), Key([77; 32]).to_string())].into(),
                ..Default::default()
            })
            .await
            .unwrap();
        h.gpus.apply(2, &power(390)).unwrap();

        let mut r = h.reconciler();
        assert_eq!(r.state().leases[&lease.key].pending.len(), 1);
        run_for(&mut r, 2 * INTERVAL as u64).await;
        assert_eq!(proven_intervals(&h, lease.key), vec![0, 1, 2]);
        assert_eq!(h.chain.submit_calls(), 3, "proof 0 was not sent twice");
        let running = h.running();
        assert_eq!(running.len(), 1);
        assert_eq!(
            running[0].0, id,
            "the lease's container was kept, not restarted"
        );
        assert!(
            !h.runtime.containers().contains_key(&orphan),
            "orphan removed"
        );
        assert_eq!(h.applied(2), power(300), "stray overclock reset");
        assert_eq!(
            h.applied(lease.gpu_indices[0] as u32),
            power(250),
            "lease GPU kept"
        );
        let runs = h
            .runtime
            .calls()
            .iter()
            .filter(|c| matches!(c, Call::Run { .. }))
            .count();
        assert_eq!(runs, 2, "the lease's run and the orphan's, nothing more");
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_whose_settings_do_not_take_is_refused_and_ended() {
        let h = Harness::new(&[0, 1, 1]);
        h.gpus.stick_power_limit(0).unwrap();
        let b = bid(1, BidKind::Queue, 1, 1_000, power(250));
        h.chain.place_bid(b.clone());
        let mut r = h.reconciler();
        r.tick(false).await.unwrap();
        let lease = h.chain.lease_of_bid(b.key).unwrap();
        assert_eq!(lease.gpu_indices, vec![0], "the smallest group that fits");
        run_for(&mut r, 3 * POLL).await;

        assert!(h.runtime.containers().is_empty(), "nothing ran");
        assert!(!h
            .runtime
            .calls()
            .iter()
            .any(|c| matches!(c, Call::Pull { .. } | Call::Run { .. })));
        let proofs = h.chain.accepted();
        assert_eq!(proofs.len(), 1);
        assert_eq!(proofs[0].proof.exit_code, Some(EXIT_SETTINGS_REFUSED));
        assert_eq!(proofs[0].proof.gpu_seconds, 0);
        assert_eq!(proofs[0].proof.energy_j, 0);
        assert_eq!(h.chain.ended(), vec![lease.key]);
        assert_eq!(h.applied(0), power(300));
        assert!(r.state().leases.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn sigterm_drains_final_proofs_stopped_containers_and_reset_gpus() {
        let h = Harness::new(&[0, 0]);
        let (r, lease) =
            allocated_and_started(&h, bid(1, BidKind::Queue, 2, 1_000, power(250))).await;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let daemon = tokio::spawn(r.run(
            Duration::from_secs(POLL),
            Duration::from_secs(30),
            Default::default(),
            async {
                stopped.await.ok();
            },
        ));
        tokio::time::sleep(Duration::from_secs(90)).await;
        stop.send(()).unwrap();
        assert_eq!(daemon.await.unwrap(), DrainOutcome::Drained);

        assert_eq!(proven_intervals(&h, lease.key), vec![0, 1]);
        let last = h.chain.accepted().pop().unwrap();
        assert_eq!(last.proof.exit_code, Some(EXIT_SIGTERM as i32));
        assert_eq!(h.chain.ended(), vec![lease.key]);
        assert!(h.runtime.calls().contains(&Call::Stop {
            id: "container-1".into(),
            grace: Duration::from_secs(10)
        }));
        assert!(h.runtime.containers().is_empty());
        assert_eq!(h.applied(0), power(300));
        assert_eq!(h.applied(1), power(300));
        assert!(StateFile::new(h.dir.path())
            .load()
            .unwrap()
            .leases
            .is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_drain_during_an_outage_stops_at_the_deadline_and_the_next_start_finishes() {
        let h = Harness::new(&[0, 0]);
        let (r, lease) =
            allocated_and_started(&h, bid(1, BidKind::Queue, 1, 1_000, power(250))).await;
        h.chain.set_outage(true);
        let outcome = r
            .run(
                Duration::from_secs(POLL),
                Duration::from_secs(20),
                Default::default(),
                async { tokio::time::sleep(Duration::from_secs(30)).await },
            )
            .await;
        assert_eq!(
            outcome,
            DrainOutcome::DeadlinePassed {
                left: vec![lease.key]
            }
        );
        assert!(h.running().is_empty(), "the container was stopped anyway");
        let saved = StateFile::new(h.dir.path()).load().unwrap();
        assert_eq!(
            saved.leases[&lease.key].pending[0].exit_code,
            Some(EXIT_SIGTERM as i32)
        );

        h.chain.set_outage(false);
        let mut r = h.reconciler();
        run_for(&mut r, 2 * POLL).await;
        assert_eq!(proven_intervals(&h, lease.key), vec![0]);
        assert_eq!(h.chain.ended(), vec![lease.key]);
        assert!(r.state().leases.is_empty());
    }

    fn observed(chain: Option<ChainObserved>, local: AgentState) -> Observed {
        Observed {
            now: T0,
            chain,
            containers: Vec::new(),
            gpus: Vec::new(),
            local,
            draining: false,
            heartbeat_due: true,
            electricity_cost_per_kwh: 500,
        }
    }

    fn machine(groups: &[u8], free_gib: Vec<u16>) -> MachineView {
        MachineView {
            gpus: groups
                .iter()
                .map(|&g| GpuView {
                    class: 0,
                    memory_gib: 80,
                    topology_group: g,
                })
                .collect(),
            free_gib,
            status: MachineStatus::Active,
        }
    }

    /// A queue lease of GPU 0 (80 GiB at 250 W) running over `started_at..ends_at`.
    fn one_gpu_lease(started_at: i64, ends_at: i64) -> LeaseView {
        LeaseView {
            key: Key([9; 32]),
            bid: Key([8; 32]),
            client: Key([7; 32]),
            kind: BidKind::Queue,
            price: 1,
            gpu_indices: vec![0],
            gib_per_gpu: 80,
            settings: vec![power(250)],
            image_ref: "r/i:1".into(),
            image_digest: [0; 32],
            env_hash: [0; 32],
            started_at,
            ends_at,
            stop_at: None,
            interval_secs: INTERVAL,
            next_interval: 0,
            proof_hash: [0; 32],
        }
    }

    /// The bids and GPUs of the allocations among `actions`.
    fn allocations(actions: &[Action]) -> Vec<(Key, Vec<u8>)> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Allocate { bid, gpu_indices } => Some((*bid, gpu_indices.clone())),
                _ => None,
            })
            .collect()
    }

    #[tokio::test(start_paused = true)]
    async fn gpus_are_shared_in_slices_only_with_equal_settings() {
        let h = Harness::new(&[0]);
        let mut running = bid(9, BidKind::Queue, 1, 1_000, power(250));
        running.gib_per_gpu = 40;
        let (mut r, _) = allocated_and_started(&h, running).await;
        let mut other = bid(2, BidKind::Queue, 1, 1_000, power(200));
        other.gib_per_gpu = 40;
        let mut same = bid(1, BidKind::Queue, 1, 1_000, power(250));
        same.gib_per_gpu = 40;
        h.chain.place_bid(other.clone());
        h.chain.place_bid(same.clone());
        let actions = run_for(&mut r, POLL).await;
        assert_eq!(allocations(&actions), vec![(same.key, vec![0])]);
        assert!(h.chain.is_open(other.key), "other terms never share a GPU");
    }

    #[tokio::test(start_paused = true)]
    async fn a_bid_with_per_gpu_terms_runs_each_term_on_the_gpu_the_fit_rule_gives_it() {
        // GPU 0 takes 100-200 W, GPU 1 takes 300-400 W.
        let mut low = gpu_config(0);
        low.limits.power_w = Range { min: 100, max: 200 };
        low.default_power_w = 150;
        let mut high = gpu_config(0);
        high.limits.power_w = Range { min: 300, max: 400 };
        high.default_power_w = 350;
        let h = Harness::with(vec![low, high]);
        let mut b = bid(1, BidKind::Queue, 2, 1_000, power(350));
        b.settings = vec![power(350), power(120)];
        h.chain.place_bid(b.clone());
        // The GPUs in index order (what the agent's own copy of the rule proposed) are refused:
        // 350 W is out of GPU 0's range.
        let refused = h.chain.allocate(b.key, &[0, 1]).await;
        assert!(
            matches!(refused, Err(ChainError::Rejected { .. })),
            "{refused:?}"
        );
        assert!(
            h.chain.is_open(b.key),
            "a refused allocation changes nothing"
        );

        let mut r = h.reconciler();
        let actions = r.tick(false).await.unwrap();
        assert_eq!(allocations(&actions), vec![(b.key, vec![1, 0])]);
        let lease = h.chain.lease_of_bid(b.key).expect("allocated");
        assert_eq!(lease.gpu_indices, vec![1, 0]);
        run_for(&mut r, POLL).await;
        let running = h.running();
        assert_eq!(running.len(), 1);
        assert_eq!(running[0].1.gpu_indices, vec![1, 0]);
        assert_eq!(
            h.applied(1),
            power(350),
            "the bid's GPU 0 terms on machine GPU 1"
        );
        assert_eq!(
            h.applied(0),
            power(120),
            "the bid's GPU 1 terms on machine GPU 0"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn bids_the_fit_rule_gave_the_same_gpu_are_allocated_one_tick_after_the_other() {
        let h = Harness::new(&[0, 0]);
        let a = bid(1, BidKind::Queue, 1, 1_000, power(250));
        let b = bid(2, BidKind::Queue, 1, 1_000, power(300));
        h.chain.place_bid(a.clone());
        h.chain.place_bid(b.clone());
        let mut r = h.reconciler();
        // Both are given GPU 0 on the machine as observed: the second waits for the next look.
        let first = r.tick(false).await.unwrap();
        assert_eq!(allocations(&first), vec![(a.key, vec![0])]);
        let second = r.tick(false).await.unwrap();
        assert_eq!(allocations(&second), vec![(b.key, vec![1])]);
        assert_eq!(h.chain.lease_of_bid(b.key).unwrap().gpu_indices, vec![1]);
    }

    #[test]
    fn the_plan_allocates_the_fit_rules_gpus_until_two_choices_overlap() {
        let given = |n: u8, gpus: Vec<u8>| BidView {
            gpus: Some(gpus),
            ..bid(n, BidKind::Queue, 1, 1, power(250))
        };
        let chain = ChainObserved {
            machine: machine(&[0, 0, 0], vec![80; 3]),
            leases: Vec::new(),
            bids: vec![
                given(1, vec![2]),
                given(2, vec![0]),
                given(3, vec![0]),
                given(4, vec![1]),
            ],
            expired: Vec::new(),
        };
        let actions = plan(&observed(Some(chain), AgentState::default()));
        assert_eq!(
            allocations(&actions),
            vec![(Key([1; 32]), vec![2]), (Key([2; 32]), vec![0])],
            "bid 4 must not start before bid 3, which may still fit elsewhere"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn expired_bids_are_pruned_a_few_a_tick_without_holding_up_the_proofs() {
        let h = Harness::new(&[0]);
        let (mut r, lease) =
            allocated_and_started(&h, bid(1, BidKind::Queue, 1, 1_000, power(250))).await;
        // Five bids whose deadline is the lease's first boundary, and one that lasts; none fits
        // while the lease holds the GPU.
        let boundary = lease.started_at + INTERVAL as i64;
        let expiring: Vec<BidView> = (10..15)
            .map(|n| BidView {
                deadline: boundary,
                ..bid(n, BidKind::Queue, 1, 1_000, power(250))
            })
            .collect();
        let lasting = bid(20, BidKind::Queue, 1, 1_000, power(250));
        for b in expiring.iter().chain([&lasting]) {
            h.chain.place_bid(b.clone());
        }
        let refused = h.chain.prune_bid(lasting.key).await;
        assert!(matches!(refused, Err(ChainError::Rejected { .. })));

        run_for(&mut r, (boundary - h.chain.clock()) as u64 - POLL).await;
        assert!(
            h.chain.pruned().is_empty(),
            "nothing pruned before the deadline"
        );
        // The boundary: the interval's proof and the first prunes in the same tick.
        let actions = run_for(&mut r, POLL).await;
        let prunes: Vec<Key> = actions
            .iter()
            .filter_map(|a| match a {
                Action::Prune { bid } => Some(*bid),
                _ => None,
            })
            .collect();
        let keys: Vec<Key> = expiring.iter().map(|b| b.key).collect();
        assert_eq!(prunes, keys[..PRUNES_PER_TICK]);
        assert!(actions.contains(&Action::Submit { lease: lease.key }));
        assert_eq!(proven_intervals(&h, lease.key), vec![0]);
        assert_eq!(h.chain.pruned(), keys[..PRUNES_PER_TICK]);
        run_for(&mut r, POLL).await;
        assert_eq!(h.chain.pruned(), keys, "the rest on the next tick");
        assert!(h.chain.is_open(lasting.key));
        run_for(&mut r, POLL).await;
        assert_eq!(h.chain.pruned().len(), keys.len(), "each pruned once");
    }

    #[test]
    fn a_lease_that_never_started_before_its_stop_is_proven_empty_and_ended() {
        let h_lease = one_gpu_lease(T0 - 120, T0 - 10);
        let mut local = AgentState::default();
        local.leases.insert(
            h_lease.key,
            LeaseRecord::new(&h_lease, &[Sample::default()]),
        );
        let chain = ChainObserved {
            machine: machine(&[0], vec![0]),
            leases: vec![h_lease.clone()],
            bids: Vec::new(),
            expired: Vec::new(),
        };
        let mut o = observed(Some(chain), local.clone());
        o.heartbeat_due = false;
        assert_eq!(
            plan(&o),
            vec![
                Action::Finish {
                    lease: h_lease.key,
                    exit_code: EXIT_CONTAINER_LOST
                },
                Action::Submit { lease: h_lease.key }
            ]
        );
        let record = local.leases.get_mut(&h_lease.key).unwrap();
        record.close_final(T0, &[Sample::default()], EXIT_CONTAINER_LOST);
        let gpu_seconds: Vec<u64> = record.pending.iter().map(|p| p.gpu_seconds).collect();
        assert_eq!(gpu_seconds, vec![0, 0], "both windows, nothing used");
    }

    #[test]
    fn without_the_cluster_the_plan_touches_nothing_on_chain() {
        let lease = one_gpu_lease(T0 - 120, T0 + 600);
        let mut record = LeaseRecord::new(&lease, &[Sample::default()]);
        record.container_id = Some("c".into());
        let mut local = AgentState::default();
        local.leases.insert(lease.key, record);
        let mut o = observed(None, local);
        o.heartbeat_due = false;
        o.containers.push(ObservedContainer {
            id: "c".into(),
            lease: Some(lease.key),
            state: ContainerState::Running,
        });
        o.containers.push(ObservedContainer {
            id: "stray".into(),
            lease: Some(Key([1; 32])),
            state: ContainerState::Running,
        });
        assert_eq!(
            plan(&o),
            vec![
                Action::Meter { lease: lease.key },
                Action::CloseEnded { lease: lease.key }
            ],
            "meters and closes locally; no submit, no orphan removal without the chain's word"
        );
    }
}
