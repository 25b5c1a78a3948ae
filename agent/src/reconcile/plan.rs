//! What one tick observed, and [`plan`]: the pure function from it to the actions that bring the
//! machine in line with what the chain says should run. The plan never waits: slow container
//! work it asks for runs beside the loop (see `jobs`), and a lease with such work in flight is
//! left alone until it is done.

use std::collections::{BTreeMap, BTreeSet};

use gpu_market_core::lease::{exit, interval_window, spot_profit_per_day};
use gpu_market_core::overclock::OverclockTerms;

use super::jobs::Readying;
use crate::chain::{BidKind, BidView, Key, LeaseView, MachineStatus, MachineView, ReservationDuty};
use crate::gpu::Sample;
use crate::runtime::ContainerState;
use crate::state::{AgentState, LeaseRecord};

/// How many expired bids one tick prunes at most (side by side, after the proofs).
pub const PRUNES_PER_TICK: usize = 3;

/// Everything one tick decides from.
#[derive(Debug, Clone)]
pub struct Observed {
    /// The cluster's clock (or, while it is unreachable, the last reading advanced locally).
    pub now: i64,
    /// `None` while the cluster is unreachable.
    pub chain: Option<ChainObserved>,
    /// `None` while the container engine is unreachable.
    pub containers: Option<Vec<ObservedContainer>>,
    pub gpus: Vec<ObservedGpu>,
    pub local: AgentState,
    /// Leases with container work (a start, a stop, a clean-up) under way beside the loop.
    pub busy: BTreeSet<Key>,
    /// Of those, the leases whose container is being readied, with what each has had so far.
    pub readying: BTreeMap<Key, Readying>,
    /// Containers created while their lease's `allocate` confirmed, by lease: not started
    /// until the lease is on chain.
    pub readied: BTreeMap<Key, String>,
    pub draining: bool,
    pub heartbeat_due: bool,
    /// The machine's proofs accrued pay nobody claimed for `claim_interval`.
    pub claim_due: bool,
    pub electricity_cost_per_kwh: u64,
    /// Since when (chain time) each open bid the packing policy gives another machine has been
    /// seen so.
    pub waiting: BTreeMap<Key, i64>,
    /// How long such a bid waits for its machine before this one takes it.
    pub grace_secs: i64,
    /// Bids whose `allocate` failed lately, held back for a while (growing with each failure).
    pub held_back: BTreeSet<Key>,
    /// GPUs with a fatal fault since the agent started, with its Xid: their leases end, the
    /// machine takes nothing new, and they are left as they are.
    pub faulted: BTreeMap<u32, u64>,
    /// Whether the chain has been told of the fault (the machine is paused).
    pub fault_reported: bool,
    /// Leases whose processes hold more of a GPU they share than their slice: they stop.
    pub over_slice: BTreeSet<Key>,
    /// Whether the machine account declares the GPUs this host has (`gpu::check_identity`),
    /// as last read: a machine that does not takes no bid.
    pub gpus_as_declared: bool,
    /// Whether this host confines a lease to a GiB slice of a GPU (it has NVIDIA MPS): where
    /// it does not, the machine account must say that its GPUs go whole (`set_whole_gpus`)
    /// before it takes a bid.
    pub confines_slices: bool,
}

#[derive(Debug, Clone)]
pub struct ChainObserved {
    pub machine: MachineView,
    pub leases: Vec<LeaseView>,
    /// Leases the agent knows that the chain shows closed. A lease merely missing from the
    /// listing (a lagging node, an account that failed to decode) is not here, and not gone.
    pub closed: BTreeSet<Key>,
    pub bids: Vec<BidView>,
    /// Expired bids in the machine's books.
    pub expired: Vec<Key>,
    /// What the books say this machine should do about reservations.
    pub reservation: Option<ReservationDuty>,
}

impl ChainObserved {
    /// Whether a lease (`lease`, or a bid's about to start) on the machine GPUs `gpu_indices`
    /// has them alone, whatever its slice: the machine's GPUs go whole, and no other lease
    /// holds one of them (one started before they did may).
    pub fn alone(&self, lease: Key, gpu_indices: &[u8]) -> bool {
        self.machine.whole_gpus
            && !self
                .leases
                .iter()
                .any(|l| l.key != lease && l.gpu_indices.iter().any(|g| gpu_indices.contains(g)))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedContainer {
    pub id: String,
    pub lease: Option<Key>,
    pub state: ContainerState,
    /// The host ports given its published ports, in its lease's order.
    pub host_ports: Vec<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObservedGpu {
    pub index: u32,
    /// `None` when the read-back failed this tick.
    pub applied: Option<OverclockTerms>,
    /// What the GPU is set to while no lease uses it ([`crate::reconcile::Reconciler::idle`]).
    pub idle: OverclockTerms,
    /// The latest good reading (a failed read keeps the one before).
    pub sample: Sample,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// A managed container no lease accounts for: stop and remove it (beside the loop).
    RemoveContainer {
        id: String,
    },
    /// A running container of a lease the agent has no container id for: take it back.
    Adopt {
        lease: Key,
        id: String,
    },
    /// Apply the lease's settings (refusing it if they do not take), then open its environment,
    /// pull and run beside the loop.
    Start {
        lease: Key,
    },
    /// A lease the chain lists that the agent cannot start now (its container is being readied,
    /// the engine does not answer, or the agent drains): recorded, so that its windows are
    /// proven, empty, while its container does not run, and its client can never call the
    /// host silent.
    Record {
        lease: Key,
    },
    /// The lease's container is still being readied when the lease may wait no longer
    /// (`Planner::overdue`): the readying ends, and the lease with `exit_code`, what it lacked.
    Cancel {
        lease: Key,
        exit_code: i32,
    },
    /// Add this tick's GPU readings to the open interval.
    Meter {
        lease: Key,
    },
    /// The open interval's window ended: close it into a proof.
    CloseEnded {
        lease: Key,
    },
    /// The container finished (or could not run): close the last interval early with
    /// `exit_code`.
    Finish {
        lease: Key,
        exit_code: i32,
    },
    /// Stop the container (its lease's stop time came, or the agent drains), beside the loop.
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
    /// Another part of the lease's gang has settled: the gang no longer runs whole, so this
    /// part is told to stop on chain now (its stop is then carried out as any other's).
    LeaveGang {
        lease: Key,
    },
    /// The lease is its gang's first part and its container runs: record on chain the host
    /// port of its first published port, where the other parts reach it.
    Rendezvous {
        lease: Key,
        port: u16,
    },
    /// The chain shows the lease closed: clean up locally.
    Forget {
        lease: Key,
    },
    /// A bid that fits only once this spot lease ends wants its GPUs: the chain stops the lease
    /// at once for a queue bid (queue leases outrank spot leases), at its next interval
    /// boundary for a more profitable spot bid.
    Preempt {
        lease: Key,
        better_bid: Key,
    },
    /// Tell the chain a GPU failed: it pauses the machine.
    ReportFault {
        gpu: u8,
        xid: u32,
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
    /// Hold this machine's GPUs for the waiting queue bid (EASY backfilling).
    Reserve {
        bid: Key,
    },
    /// Hold GPUs of these machines (this one first) for the waiting gang bid.
    ReserveGang {
        bid: Key,
        parts: Vec<Key>,
    },
    /// Clear this machine's reservation, which holds nothing any more.
    Unreserve,
    /// Tell the chain whether this machine's GPUs go whole (its host cannot confine a slice).
    SetWholeGpus {
        whole: bool,
    },
    /// No lease uses this GPU but its settings are not its idle ones: reset it, and park it.
    ResetGpu {
        index: u32,
    },
    Heartbeat,
    /// Pay the host what the machine's proofs accrued.
    ClaimPay,
}

/// The actions that bring what was observed in line with what the chain says should run: a
/// composition of one planner per concern.
pub fn plan(o: &Observed) -> Vec<Action> {
    let mut p = Planner::new(o);
    p.stray_containers();
    for (key, r) in &o.local.leases {
        p.local_lease(*key, r);
    }
    if let Some(chain) = &o.chain {
        p.new_leases(chain);
        p.report_fault();
        // A host that cannot confine a slice has its GPUs go whole, and takes no bid until the
        // chain says so (the program would put a second lease on a GPU it cannot share).
        let whole = !o.confines_slices;
        if chain.machine.whole_gpus != whole {
            p.actions.push(Action::SetWholeGpus { whole });
        }
        if !o.draining
            && chain.machine.status == MachineStatus::Active
            && o.faulted.is_empty()
            && o.gpus_as_declared
            && chain.machine.whole_gpus == whole
        {
            let taken = p.allocate_fitting(chain);
            p.preemptions(chain, taken);
        }
        if !o.draining {
            p.prune(chain);
            p.reserve(chain);
        }
        p.reset_gpus(chain);
        // A round of proofs sent in the same tick is the heartbeat (the program records one
        // with it): the heartbeat then goes unsent; if the proofs fail, it is due again at the
        // next tick.
        if o.heartbeat_due {
            p.actions.push(Action::Heartbeat);
        }
        if o.claim_due {
            p.actions.push(Action::ClaimPay);
        }
    }
    p.actions
}

struct Planner<'a> {
    o: &'a Observed,
    listed: Option<BTreeMap<Key, &'a LeaseView>>,
    actions: Vec<Action>,
}

impl<'a> Planner<'a> {
    fn new(o: &'a Observed) -> Self {
        let listed = o
            .chain
            .as_ref()
            .map(|c| c.leases.iter().map(|l| (l.key, l)).collect());
        Planner {
            o,
            listed,
            actions: Vec::new(),
        }
    }

    fn push(&mut self, a: Action) {
        self.actions.push(a);
    }

    fn container_of(&self, lease: &Key) -> Option<&'a ObservedContainer> {
        self.o
            .containers
            .as_ref()?
            .iter()
            .find(|c| c.lease == Some(*lease))
    }

    fn closed(&self, lease: &Key) -> bool {
        self.o
            .chain
            .as_ref()
            .is_some_and(|c| c.closed.contains(lease))
    }

    /// Managed containers no lease accounts for: no lease label, a second container for a lease
    /// that has one, a container of a lease the chain shows closed, or one created but never
    /// started for a lease that has no container yet (a start cut short) and that was not
    /// readied for a lease whose `allocate` is under way.
    fn stray_containers(&mut self) {
        let Some(containers) = &self.o.containers else {
            return;
        };
        for c in containers {
            let stray = match c.lease {
                None => true,
                Some(l) if self.o.busy.contains(&l) => false,
                Some(l) => match self.o.local.leases.get(&l) {
                    Some(r) => match &r.container_id {
                        Some(id) => *id != c.id,
                        None => {
                            c.state == ContainerState::Created
                                && self.o.readied.get(&l) != Some(&c.id)
                        }
                    },
                    None if self.o.readied.get(&l) == Some(&c.id) => self.closed(&l),
                    None => self.closed(&l) || c.state == ContainerState::Created,
                },
            };
            if stray {
                self.push(Action::RemoveContainer { id: c.id.clone() });
            }
        }
    }

    /// One lease the agent runs or ran: its container, its metering, its proofs, its end.
    fn local_lease(&mut self, lease: Key, r: &LeaseRecord) {
        if self.closed(&lease) {
            if !self.o.busy.contains(&lease) {
                self.push(Action::Forget { lease });
            }
            return;
        }
        // `None` while the cluster is unreachable or its listing omitted the lease: the work
        // that needs no chain goes on.
        let view = self.listed.as_ref().and_then(|m| m.get(&lease).copied());
        let closes = if self.o.busy.contains(&lease) {
            // Container work under way (readying: the environment, the pull, the engine; or a
            // stop): the windows still close as they end, empty while nothing runs, and are
            // proven, so that no wait of the agent's makes the host silent.
            let closes = self.close_ended(lease, r);
            if let Some(exit_code) = self.overdue(lease, r, view) {
                self.push(Action::Cancel { lease, exit_code });
            }
            closes
        } else if r.exit_code.is_none() {
            self.container(lease, r, view)
        } else {
            // Finished, but the lease's last windows still end (a container that exited after
            // the stop was decided): close them as they end.
            self.close_ended(lease, r)
        };
        let Some(view) = view else { return };
        if view.gang_broken && view.stop_at.is_none() {
            self.push(Action::LeaveGang { lease });
        }
        if closes || !r.pending.is_empty() {
            self.push(Action::Submit { lease });
        } else if !self.o.busy.contains(&lease)
            && (r.exit_code.is_some() || (self.o.now >= view.stop() && r.all_closed()))
        {
            self.push(Action::End { lease });
        }
    }

    /// Whether `lease`'s container, still being readied, may be waited for no longer, and if so
    /// the exit code of what it lacks: at the lease's stop; and for its sealed environment, one
    /// billing interval before its client could call the host silent (`silence_intervals`
    /// after the allocation; its windows are proven empty meanwhile). The image may take the
    /// host's whole pull budget: the windows are proven while it pulls.
    fn overdue(&self, lease: Key, r: &LeaseRecord, view: Option<&LeaseView>) -> Option<i32> {
        let readying = self.o.readying.get(&lease)?;
        if r.container_id.is_some() || r.exit_code.is_some() {
            return None;
        }
        if self.o.now >= r.stop {
            return Some(readying.lacking());
        }
        let view = view?;
        let waits = view.silence_intervals.saturating_sub(1) as i64 * view.interval_secs as i64;
        (!readying.env && self.o.now >= r.started_at.saturating_add(waits))
            .then_some(exit::ENVIRONMENT_UNAVAILABLE)
    }

    fn close_ended(&mut self, lease: Key, r: &LeaseRecord) -> bool {
        let ended = window_ended(r, self.o.now);
        if ended {
            self.push(Action::CloseEnded { lease });
        }
        ended
    }

    /// The first fatal GPU fault, until the chain has it.
    fn report_fault(&mut self) {
        if let (Some((&gpu, &xid)), false) = (self.o.faulted.iter().next(), self.o.fault_reported) {
            self.push(Action::ReportFault {
                gpu: u8::try_from(gpu).unwrap_or(u8::MAX),
                xid: u32::try_from(xid).unwrap_or(u32::MAX),
            });
        }
    }

    /// A lease whose container has not finished; returns whether an interval closes.
    fn container(&mut self, lease: Key, r: &LeaseRecord, view: Option<&LeaseView>) -> bool {
        if r.gpu_indices
            .iter()
            .any(|&g| self.o.faulted.contains_key(&(g as u32)))
        {
            // A GPU of the lease failed: its final proof closes now (nothing after the fault is
            // billed) and its container stops.
            let closes = self.finish(lease, exit::GPU_FAULT);
            if r.container_id.is_some() {
                self.push(Action::Stop { lease });
            }
            return closes;
        }
        if self.o.over_slice.contains(&lease) {
            // It holds its co-tenants' memory of a shared GPU: its final proof closes now and
            // its container stops.
            let closes = self.finish(lease, exit::OVER_SLICE);
            if r.container_id.is_some() {
                self.push(Action::Stop { lease });
            }
            return closes;
        }
        let stopped = self.o.now >= r.stop;
        let Some(containers) = &self.o.containers else {
            // The engine does not answer: a running lease is metered and proven all the same,
            // one not started yet proven empty.
            if r.container_id.is_some() {
                self.push(Action::Meter { lease });
            }
            return self.close_ended(lease, r);
        };
        let Some(id) = &r.container_id else {
            return match self.container_of(&lease) {
                Some(c) if c.state == ContainerState::Running && view.is_some() => {
                    self.push(Action::Adopt {
                        lease,
                        id: c.id.clone(),
                    });
                    false
                }
                // Never started (a drain, or a stop that came first): prove the windows empty
                // so the lease can end.
                _ if self.o.draining || stopped => self.finish(lease, exit::CONTAINER_LOST),
                // Its container readied while it waited (for `allocate`, or as a recorded lease):
                // only the start is left.
                Some(c) if self.o.readied.get(&lease) == Some(&c.id) && view.is_some() => {
                    self.push(Action::Start { lease });
                    self.close_ended(lease, r)
                }
                // Not started yet: its windows are proven empty meanwhile.
                Some(_) => self.close_ended(lease, r),
                None => {
                    if view.is_some_and(|v| !awaits_rendezvous(v)) {
                        self.push(Action::Start { lease });
                    }
                    self.close_ended(lease, r)
                }
            };
        };
        let listed = containers.iter().find(|c| c.id == *id);
        if let (Some(c), Some(view)) = (listed, view) {
            let first = view
                .gang
                .as_ref()
                .filter(|g| g.part == 0 && g.rendezvous.is_none());
            if let (Some(_), Some(&port)) = (first, c.host_ports.first()) {
                if c.state == ContainerState::Running {
                    self.push(Action::Rendezvous { lease, port });
                }
            }
        }
        match listed.map(|c| c.state) {
            Some(ContainerState::Running) => {
                self.push(Action::Meter { lease });
                if self.o.draining || stopped {
                    // Whatever becomes of the chain transactions, the container does not
                    // outlive its lease.
                    self.push(Action::Stop { lease });
                }
                self.close_ended(lease, r)
            }
            Some(ContainerState::Created) => false,
            Some(ContainerState::Exited { code }) => {
                self.finish(lease, code.clamp(i32::MIN as i64, i32::MAX as i64) as i32)
            }
            None => self.finish(lease, exit::CONTAINER_LOST),
        }
    }

    fn finish(&mut self, lease: Key, exit_code: i32) -> bool {
        self.push(Action::Finish { lease, exit_code });
        true
    }

    /// Leases the chain lists that the agent has no record of: take back their containers, or
    /// start them (record them, once past their stop). One that cannot start now (its
    /// container still being readied, the engine down, a drain) is recorded: from its
    /// allocation on, every lease's windows are proven, run or not.
    fn new_leases(&mut self, chain: &ChainObserved) {
        for l in &chain.leases {
            if self.o.local.leases.contains_key(&l.key) {
                continue;
            }
            let lease = l.key;
            if self.o.busy.contains(&lease) {
                self.push(Action::Record { lease });
                continue;
            }
            match self.container_of(&lease) {
                Some(c) if c.state == ContainerState::Running => self.push(Action::Adopt {
                    lease,
                    id: c.id.clone(),
                }),
                // A container nobody readied: removed as a stray, then started afresh.
                Some(c) if self.o.readied.get(&lease) != Some(&c.id) => {
                    self.push(Action::Record { lease })
                }
                // Past its stop too: the start then only records the lease, which is proven
                // (empty, or with why it could not run) and ended.
                _ if self.o.containers.is_some() && !self.o.draining && !awaits_rendezvous(l) => {
                    self.push(Action::Start { lease })
                }
                _ => self.push(Action::Record { lease }),
            }
        }
    }

    /// Allocates each bid the fit rule gave GPUs, in [`allocation_order`], on exactly those
    /// GPUs; returns the bids allocated. The fit rule chose each bid's GPUs on the machine as
    /// observed, so once a bid's GPUs overlap those of a bid allocated before it in this tick,
    /// it and every bid after it wait for the next tick, which observes the machine again: a bid
    /// ranked below must not start before one ranked above that still fits. A bid the market's
    /// packing policy gives another machine is left to it for the grace period (`waiting`).
    fn allocate_fitting(&mut self, chain: &ChainObserved) -> BTreeSet<Key> {
        let mut taken = 0u16;
        let mut allocated = BTreeSet::new();
        for bid in allocation_order(&chain.bids, self.o.electricity_cost_per_kwh) {
            let Some(gpus) = &bid.gpus else {
                continue;
            };
            if self.o.held_back.contains(&bid.key) {
                // Its `allocate` failed lately: it waits out its back-off, and the bids ranked
                // below with it (`allocate` refuses them while it fits).
                break;
            }
            if self.left_elsewhere(bid) {
                // The bids ranked below wait too, since `allocate` refuses one while a better
                // bid fits this machine.
                break;
            }
            let mask = gpus.iter().fold(0u16, |m, &g| m | 1 << g);
            if mask & taken != 0 {
                break;
            }
            taken |= mask;
            allocated.insert(bid.key);
            self.push(Action::Allocate {
                bid: bid.key,
                gpu_indices: gpus.clone(),
            });
        }
        allocated
    }

    /// Whether the packing policy gives `bid` another machine and this one leaves it to that
    /// machine, and to the machines whose turn comes before this one's, a grace period each.
    fn left_elsewhere(&self, bid: &BidView) -> bool {
        bid.elsewhere.is_some_and(|elsewhere| {
            let since = self.o.waiting.get(&bid.key).copied().unwrap_or(self.o.now);
            let wait = self.o.grace_secs.saturating_mul(elsewhere.turn as i64);
            self.o.now < since.saturating_add(wait)
        })
    }

    /// The preemptions of running spot leases, each lease stopped at most once and each bid
    /// promised at most once (`promised`: the bids allocated this tick): first the queue rule,
    /// then the spot rule on the leases left.
    fn preemptions(&mut self, chain: &ChainObserved, mut promised: BTreeSet<Key>) {
        let mut stopping = BTreeSet::new();
        self.queue_rule(chain, &mut promised, &mut stopping);
        self.spot_rule(chain, promised, &stopping);
    }

    /// Whether `l` is a running spot lease (its container up) not told to stop yet, nor in
    /// `stopping`: one a preemption may stop.
    fn preemptible(&self, l: &LeaseView, stopping: &BTreeSet<Key>) -> bool {
        let running = self
            .o
            .local
            .leases
            .get(&l.key)
            .is_some_and(|r| r.exit_code.is_none() && r.container_id.is_some());
        l.kind == BidKind::Spot && l.stop_at.is_none() && running && !stopping.contains(&l.key)
    }

    /// The queue rule: queue leases outrank spot leases, so an open queue bid that fits only
    /// once a running spot lease ends (by the fit rule, as the chain lists it) stops that lease
    /// at once. The queue bids go in the chain's ranking order, best first; each stops, of the
    /// leases whose end lets it fit, the one that earns the host least.
    fn queue_rule(
        &mut self,
        chain: &ChainObserved,
        promised: &mut BTreeSet<Key>,
        stopping: &mut BTreeSet<Key>,
    ) {
        let cost = self.o.electricity_cost_per_kwh;
        for b in chain.bids.iter().filter(|b| b.kind == BidKind::Queue) {
            // A bid the packing policy places on another machine that fits it now (an idle
            // one) is left to it: stopping a lease here for it would end the lease for nothing.
            if promised.contains(&b.key) || self.left_elsewhere(b) {
                continue;
            }
            let lease = chain
                .leases
                .iter()
                .filter(|l| self.preemptible(l, stopping) && b.fits_if_ended.contains(&l.key))
                .min_by_key(|l| lease_profit(l, cost))
                .map(|l| l.key);
            if let Some(lease) = lease {
                promised.insert(b.key);
                stopping.insert(lease);
                self.push(Action::Preempt {
                    lease,
                    better_bid: b.key,
                });
            }
        }
    }

    /// The spot rule: a running spot lease (not in `stopping`) whose end would let a more
    /// profitable open spot bid fit (by the fit rule) is told to stop at its next interval
    /// boundary, for the most profitable such bid not `promised`.
    fn spot_rule(
        &mut self,
        chain: &ChainObserved,
        mut promised: BTreeSet<Key>,
        stopping: &BTreeSet<Key>,
    ) {
        let cost = self.o.electricity_cost_per_kwh;
        let leases: Vec<&LeaseView> = chain
            .leases
            .iter()
            .filter(|l| self.preemptible(l, stopping))
            .collect();
        for l in leases {
            let current = lease_profit(l, cost);
            let better = chain
                .bids
                .iter()
                .filter(|b| {
                    b.kind == BidKind::Spot
                        && !promised.contains(&b.key)
                        && b.fits_if_ended.contains(&l.key)
                })
                .map(|b| (b, bid_profit(b, cost)))
                .filter(|(_, p)| *p > current)
                .max_by_key(|(_, p)| *p);
            if let Some((b, _)) = better {
                promised.insert(b.key);
                self.push(Action::Preempt {
                    lease: l.key,
                    better_bid: b.key,
                });
            }
        }
    }

    fn reserve(&mut self, chain: &ChainObserved) {
        match &chain.reservation {
            Some(ReservationDuty::Reserve(bid)) => self.push(Action::Reserve { bid: *bid }),
            Some(ReservationDuty::ReserveGang { bid, parts }) => self.push(Action::ReserveGang {
                bid: *bid,
                parts: parts.clone(),
            }),
            Some(ReservationDuty::Clear) => self.push(Action::Unreserve),
            None => {}
        }
    }

    fn prune(&mut self, chain: &ChainObserved) {
        for &bid in chain.expired.iter().take(PRUNES_PER_TICK) {
            self.push(Action::Prune { bid });
        }
    }

    /// GPUs no lease uses whose settings are not their idle ones.
    fn reset_gpus(&mut self, chain: &ChainObserved) {
        let used: BTreeSet<u32> = chain
            .leases
            .iter()
            .map(|l| &l.gpu_indices)
            .chain(self.o.local.leases.values().map(|r| &r.gpu_indices))
            .flatten()
            .map(|&i| i as u32)
            .collect();
        for g in &self.o.gpus {
            if !used.contains(&g.index)
                && !self.o.faulted.contains_key(&g.index)
                && g.applied.is_some_and(|a| a != g.idle)
            {
                self.push(Action::ResetGpu { index: g.index });
            }
        }
    }
}

/// Whether `lease` is a gang's part other than the first whose first part has not recorded its
/// rendezvous yet: its container starts once it has, told where to reach the first part.
fn awaits_rendezvous(lease: &LeaseView) -> bool {
    lease
        .gang
        .as_ref()
        .is_some_and(|g| g.part > 0 && g.rendezvous.is_none())
}

fn window_ended(r: &LeaseRecord, now: i64) -> bool {
    interval_window(r.started_at, r.interval_secs, r.open_interval, r.stop)
        .is_some_and(|(_, to)| to <= now)
}

/// A spot price's profit per day for the host at `power_w` in all (GigaSPOT's rule).
fn spot_profit(price: u64, gpus: usize, power_w: u64, electricity_cost_per_kwh: u64) -> u64 {
    spot_profit_per_day(price, gpus as u64, power_w, electricity_cost_per_kwh).unwrap_or(0)
}

/// What a running spot lease earns the host per day, after the electricity its GPUs may draw.
fn lease_profit(l: &LeaseView, electricity_cost_per_kwh: u64) -> u64 {
    let power: u64 = l.overclock.iter().map(|s| s.power_limit_w as u64).sum();
    spot_profit(
        l.price,
        l.gpu_indices.len(),
        power,
        electricity_cost_per_kwh,
    )
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
