//! The market's machine choice: which machine should take a bid, computed from public chain
//! state alone so that every agent reaches the same answer without talking to the others.
//!
//! Each machine is a [`Node`] of the packing policy ([`Planned`]: FGD steered by a packing
//! plan), built from its [`Offer`], what the market's fit rule sees of it; the policy's typical
//! pods and packing plan are learned from the market's workload (its open bids and running
//! leases). A bid goes to the machine of the best standing where the fit rule accepts it; among
//! machines of equal standing, to one that caches the bid's image (data affinity), then to the
//! cheaper electricity, then to the lowest machine id. On that machine it takes the GPUs the
//! policy chose when the fit rule accepts them, else the fit rule's own. A bid no machine of the
//! policy can take goes to the first machine, in that same order, whose fit rule accepts it.
//!
//! Smart batching: where the bid's profile is known (its image runs in the market), a place
//! whose GPUs' co-tenants the co-location model ([`InterferenceModel::MARKET`]) predicts to
//! clash with it (either would keep less than [`MIN_SPEED`] of its speed alone) comes after
//! every place where they get along. On a machine whose policy GPU clashes, a one-GPU bid may
//! take another GPU the fit rule accepts whose co-tenants get along (the tightest). Co-tenants
//! with no proof yet, and bids of an image not yet measured, clash with nothing.
//!
//! Units: the policy counts a GPU as 1 000 milli. A machine's GPU of `G` GiB holds a bid's `g`
//! GiB as ⌊1 000·g/G⌋ milli (a whole GPU when `g ≥ G`) and has ⌊1 000·free/G⌋ milli free. A
//! model is a (class, GiB) pair; a machine is of its first GPU's model (the fit rule still
//! checks every GPU). A machine the policy cannot describe (more than 8 GPUs, or beyond the
//! 32nd model of the market) is only reached by the fall-back.

use std::collections::{BTreeSet, HashMap};

use super::cluster::Cluster;
use super::frag::FragModel;
use super::plan::{GpuPods, PackingPlan};
use super::policy::{Planned, Standing};
use super::types::{bits, GpuMask, ModelId, ModelSet, Node, Pod, MAX_GPUS_PER_NODE, MILLI_PER_GPU};
#[cfg(doc)]
use crate::colocate::MIN_SPEED;
use crate::colocate::{InterferenceModel, Profile};
use crate::fit::{Host, Need, Offer};

/// How long, by default, a bid the policy gives one machine waits for it before any other
/// machine whose fit rule accepts it may take it: an agent that is down or behind must not
/// strand a bid (agent setting `placement_grace_secs`).
pub const GRACE_SECS: u64 = 10;

/// Share of the workload's bids whose shapes become typical pods (FGD's 95 %).
const COVERAGE_PCT: u32 = 95;
/// The most models the policy tells apart ([`ModelSet`] is a 32-bit set).
const MAX_MODELS: usize = 32;

/// One machine of the market as the chain shows it.
#[derive(Debug, Clone, Copy)]
pub struct Seat<'a> {
    /// The machine account's address: the last tie-break.
    pub id: [u8; 32],
    /// The host's declared electricity cost: the cheaper wins among equals.
    pub electricity_cost_per_kwh: u64,
    /// What the fit rule sees of the machine now.
    pub offer: &'a Offer,
    /// Its running leases.
    pub leases: &'a [Tenant],
}

/// A running lease of a machine, as the policy sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tenant {
    /// Its GPUs on the machine, as a mask.
    pub gpus: u16,
    pub gib_per_gpu: u16,
    /// What its proofs measured (`None` before the first).
    pub profile: Option<Profile>,
}

/// What the choice weighs besides packing: data affinity and co-tenants.
#[derive(Debug, Clone, Copy, Default)]
pub struct Affinity<'a> {
    /// The seats that cache the bid's image.
    pub caching: &'a [usize],
    /// The bid's profile, where its image has been measured in the market.
    pub profile: Option<Profile>,
}

/// One bid of the market's workload, as the policy learns its typical pods and packing plan
/// from it: an open bid, or a running lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Demand {
    pub gpu_count: u8,
    pub gib_per_gpu: u16,
    /// Bit `c` set: GPU class `c` is accepted.
    pub accepted_classes: u8,
    pub host: Host,
}

impl Demand {
    /// A running lease's: its GPUs, GiB and host, any class (the lease account does not keep
    /// the classes its bid accepted).
    pub fn running(gpu_count: u8, gib_per_gpu: u16, host: Host) -> Demand {
        Demand {
            gpu_count,
            gib_per_gpu,
            accepted_classes: u8::MAX,
            host,
        }
    }
}

impl From<&Need<'_>> for Demand {
    /// An open bid's.
    fn from(need: &Need) -> Demand {
        Demand {
            gpu_count: need.gpu_count,
            gib_per_gpu: need.gib_per_gpu,
            accepted_classes: need.accepted_classes,
            host: need.room.host,
        }
    }
}

/// Where a bid should go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chosen {
    /// The machine, as an index into the seats [`Placer::new`] was given.
    pub machine: usize,
    /// The GPUs it takes there, in the bid's GPU order (what `allocate` is sent).
    pub gpus: Vec<u8>,
}

/// The packing policy over a market's machines.
#[derive(Debug, Clone)]
pub struct Placer {
    cluster: Cluster,
    policy: Planned,
    /// The (class, GiB) pair of each model id.
    models: Vec<(u8, u16)>,
    /// Each seat's node, where the policy describes it.
    node_of: Vec<Option<usize>>,
    /// Each node's seat.
    seat_of: Vec<usize>,
    /// Seats in tie-break order: the cheaper electricity, then the lowest id.
    order: Vec<usize>,
    /// Each seat's running leases with a measured profile: their GPUs (a mask) and profile.
    profiled: Vec<Vec<(u16, Profile)>>,
    /// Each seat's electricity cost, which its place in `order` follows.
    cost: Vec<u64>,
}

/// A seat's running leases with a measured profile: their GPUs (a mask) and profile.
fn profiled_of(seat: &Seat) -> Vec<(u16, Profile)> {
    seat.leases
        .iter()
        .filter_map(|t| Some((t.gpus, t.profile?)))
        .collect()
}

/// A candidate place: whether its co-tenants get along with the bid, its standing, whether it
/// caches the bid's image, minus its tie-break position; better compares greater.
type Rank = (bool, Standing, bool, i64);

/// ⌊1 000·gib/of⌋ milli of a GPU of `of` GiB (at least 1, at most a whole GPU): the same
/// rounding for what a bid asks and what a GPU has free, so that for GPUs of up to 1 000 GiB a
/// bid fits a GPU in the policy's units exactly when its GiB fit.
fn milli(gib: u16, of: u16) -> u16 {
    if of == 0 || gib >= of {
        return MILLI_PER_GPU;
    }
    ((gib as u32 * MILLI_PER_GPU as u32 / of as u32) as u16).max(1)
}

/// The milli a GPU of `of` GiB has free with `free` GiB free.
fn free_milli(free: u16, of: u16) -> u16 {
    match of {
        0 => 0,
        _ => (free.min(of) as u32 * MILLI_PER_GPU as u32 / of as u32) as u16,
    }
}

/// GPUs in a row that share a topology group, when every group is such a run of one size;
/// else all the GPUs (no topology).
fn group_width(offer: &Offer) -> u8 {
    let gpus = offer.gpus();
    let mut runs: Vec<usize> = Vec::new();
    for (i, g) in gpus.iter().enumerate() {
        match runs.last_mut() {
            Some(n) if gpus[i - 1].topology_group == g.topology_group => *n += 1,
            _ => runs.push(1),
        }
    }
    let labels: BTreeSet<u8> = gpus.iter().map(|g| g.topology_group).collect();
    match runs.first() {
        Some(&w) if runs.len() == labels.len() && runs.iter().all(|&r| r == w) => w as u8,
        _ => gpus.len() as u8,
    }
}

impl Placer {
    /// How many request shapes the policy holds an index of ([`Planned::shapes_indexed`]).
    pub fn shapes_indexed(&self) -> usize {
        self.policy.shapes_indexed()
    }

    /// The policy over `seats`, its typical pods and plan learned from `workload` (the market's
    /// open bids and running leases, each with how many of the market have it: see
    /// [`counted`](super::counted)).
    pub fn new(seats: &[Seat], workload: &[(Demand, u32)]) -> Placer {
        let mut models: Vec<(u8, u16)> = seats
            .iter()
            .filter_map(|s| s.offer.gpus().first().map(|g| (g.class, g.memory_gib)))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        models.truncate(MAX_MODELS);
        let mut order: Vec<usize> = (0..seats.len()).collect();
        order.sort_by_key(|&i| (seats[i].electricity_cost_per_kwh, seats[i].id));
        let mut rank_of = vec![0u32; seats.len()];
        for (r, &i) in order.iter().enumerate() {
            rank_of[i] = r as u32;
        }
        let mut placer = Placer {
            cluster: Cluster::in_order(Vec::new()).expect("no nodes"),
            policy: Planned::new(FragModel::from_pods(&[], 0), PackingPlan::from_pods(&[])),
            models,
            node_of: vec![None; seats.len()],
            seat_of: Vec::new(),
            order,
            profiled: seats.iter().map(profiled_of).collect(),
            cost: seats.iter().map(|s| s.electricity_cost_per_kwh).collect(),
        };
        let (mut nodes, mut ranks) = (Vec::new(), Vec::new());
        for (i, seat) in seats.iter().enumerate() {
            if let Some(node) = placer.node(seat.offer) {
                placer.node_of[i] = Some(nodes.len());
                placer.seat_of.push(i);
                nodes.push(node);
                ranks.push(rank_of[i]);
            }
        }
        placer.cluster = Cluster::new(nodes, ranks).expect("one rank per node");
        placer.relearn(seats, workload);
        placer
    }

    /// Learns the typical pods and plan again from `workload`, over the same `seats` (as they
    /// are now, each change given to [`Placer::update`]): the policy is then the one
    /// [`Placer::new`] would build, at the cost of the learning and one pass over the seats'
    /// leases (no node is made again).
    pub fn relearn(&mut self, seats: &[Seat], workload: &[(Demand, u32)]) {
        // A market's demands repeat (46,000 leases of 10,000 machines come in a few hundred
        // shapes): each distinct one's pods are made once.
        let mut shapes: HashMap<Demand, u32> = HashMap::new();
        for &(n, count) in workload.iter().filter(|(_, count)| *count > 0) {
            let c = shapes.entry(n).or_default();
            *c = c.saturating_add(count);
        }
        let reference: Vec<(Pod, u32)> = shapes
            .into_iter()
            .flat_map(|(n, count)| self.pods(&n).into_iter().map(move |p| (p, count)))
            .collect();
        self.policy.relearn(
            FragModel::from_counted(&reference, COVERAGE_PCT),
            PackingPlan::from_counted(&reference),
        );
        for (i, seat) in seats.iter().enumerate() {
            self.set_leases(i, seat);
        }
    }

    /// Seat `i` is now `seat` (its machine or its leases changed since the policy was built):
    /// its node, its GPUs' sharing pods and its profiled leases follow, every index of the
    /// policy with them, at the cost of one node's. `false` where that cannot be done in place
    /// and the policy must be built again ([`Placer::new`]): a seat the policy describes that it
    /// no longer could or the other way round (e.g. GPUs of a model it has not seen), or whose
    /// electricity cost moved its place in the tie-break order. What the policy learned of the
    /// workload stays as it was.
    pub fn update(&mut self, i: usize, seat: &Seat) -> bool {
        if self.cost.get(i) != Some(&seat.electricity_cost_per_kwh) {
            return false;
        }
        self.profiled[i] = profiled_of(seat);
        match (self.node_of[i], self.node(seat.offer)) {
            (Some(n), Some(node)) => {
                let pods = self.gpu_pods(seat);
                // Most changes (a heartbeat, a proof) leave the node and its GPUs' pods as they
                // were: nothing to index again.
                if self.cluster.nodes()[n] != node || self.policy.pods_of(n) != Some(&pods) {
                    self.cluster.set_node(n, node);
                    self.policy.set_gpu_pods(&self.cluster, n, pods);
                }
                true
            }
            (None, None) => true,
            _ => false,
        }
    }

    /// The model of a GPU of `class` with `gib` GiB.
    fn model(&self, class: u8, gib: u16) -> Option<ModelId> {
        let i = self.models.iter().position(|&m| m == (class, gib))?;
        Some(ModelId(i as u8))
    }

    /// The policy's node for a machine offering `offer`, if it can describe it.
    fn node(&self, offer: &Offer) -> Option<Node> {
        let gpus = offer.gpus();
        if gpus.len() > MAX_GPUS_PER_NODE {
            return None;
        }
        let model = match gpus.first() {
            Some(g) => self.model(g.class, g.memory_gib)?,
            None => ModelId(0),
        };
        let (room, free) = (offer.room().host, offer.host_free());
        let node = Node::new(
            room.cpu_milli,
            room.memory_mib,
            model,
            gpus.len() as u8,
            group_width(offer),
        )
        .ok()?;
        let gpu_free: Vec<u16> = gpus
            .iter()
            .map(|g| free_milli(g.free_gib, g.memory_gib))
            .collect();
        node.holding(free.cpu_milli, free.memory_mib, &gpu_free)
            .ok()
    }

    /// Tells the policy which sharing pods each GPU of seat `machine` holds.
    fn set_leases(&mut self, machine: usize, seat: &Seat) {
        let Some(n) = self.node_of[machine] else {
            return;
        };
        let pods = self.gpu_pods(seat);
        self.policy.set_gpu_pods(&self.cluster, n, pods);
    }

    /// The sharing pods each GPU of `seat` holds, as the policy plans them (`None`: off plan).
    fn gpu_pods(&self, seat: &Seat) -> [Option<GpuPods>; MAX_GPUS_PER_NODE] {
        let gpus = seat.offer.gpus();
        let mut pods = [Some(GpuPods::EMPTY); MAX_GPUS_PER_NODE];
        for &Tenant {
            gpus: mask,
            gib_per_gpu: gib,
            ..
        } in seat.leases
        {
            let one = mask.count_ones() == 1;
            for g in (0..gpus.len().min(MAX_GPUS_PER_NODE)).filter(|g| mask >> g & 1 == 1) {
                let m = milli(gib, gpus[g].memory_gib);
                if m == MILLI_PER_GPU {
                    continue;
                }
                // A GPU shared by a lease of several GPUs, or by more pods than a plan holds,
                // is off plan.
                pods[g] = pods[g].filter(|_| one).and_then(|p| p.with(m));
            }
        }
        pods.map(|p| p.filter(|p| self.policy.on_plan(p)))
    }

    /// The policy's pods for `need`: one per GPU size of the accepted models (its GiB in milli
    /// of that size), or one CPU-only pod.
    fn pods(&self, need: &Demand) -> Vec<Pod> {
        let host = need.host;
        if need.gpu_count == 0 {
            return Pod::new(host.cpu_milli, host.memory_mib, 0, 0, ModelSet::ANY)
                .into_iter()
                .collect();
        }
        let sizes: BTreeSet<u16> = self.models.iter().map(|&(_, gib)| gib).collect();
        let mut pods = Vec::new();
        for size in sizes {
            let mut spec = None;
            for (id, &(class, gib)) in self.models.iter().enumerate() {
                if gib == size && class < 8 && need.accepted_classes >> class & 1 == 1 {
                    spec = spec.unwrap_or(ModelSet::ANY).with(ModelId(id as u8));
                }
            }
            let Some(spec) = spec else { continue };
            // Several GPUs each take whole ones in the policy's eyes.
            let per_gpu = match need.gpu_count {
                1 => milli(need.gib_per_gpu, size),
                _ => MILLI_PER_GPU,
            };
            if let Ok(pod) = Pod::new(
                host.cpu_milli,
                host.memory_mib,
                need.gpu_count,
                per_gpu,
                spec,
            ) {
                pods.push(pod);
            }
        }
        pods
    }

    /// Where `need` should go: `offers[i]` is seat `i`'s offer for the bid's kind (what
    /// `allocate` would check); `affinity` the seats caching the bid's image and its profile.
    /// `None`: no machine's fit rule accepts it.
    pub fn choose(&mut self, need: &Need, offers: &[Offer], affinity: Affinity) -> Option<Chosen> {
        let mut best: Option<(Rank, Chosen)> = None;
        for pod in self.pods(&need.into()) {
            let Some(found) = self.best_for(&pod, need, offers, affinity) else {
                continue;
            };
            if best.as_ref().is_none_or(|b| found.0 > b.0) {
                best = Some(found);
            }
        }
        if let Some((_, chosen)) = best {
            return Some(chosen);
        }
        // Nothing the policy describes takes it: the first machine in tie-break order that fits,
        // one whose co-tenants get along first.
        let near = Neighbours {
            profiled: &self.profiled,
            profile: affinity.profile,
        };
        let mut clashing = None;
        for chosen in self.fitting(need, offers) {
            if near.along(chosen.machine, mask_of(&chosen.gpus)) {
                return Some(chosen);
            }
            clashing.get_or_insert(chosen);
        }
        clashing
    }

    /// The machines whose fit rule accepts `need`, in tie-break order.
    fn fitting<'o>(
        &'o self,
        need: &'o Need,
        offers: &'o [Offer],
    ) -> impl Iterator<Item = Chosen> + 'o {
        self.order.iter().filter_map(move |&m| {
            let choice = offers.get(m)?.fit(need).ok()?;
            Some(Chosen {
                machine: m,
                gpus: choice.gpus().to_vec(),
            })
        })
    }

    /// When seat `machine`, whose fit rule accepts `need` but which is not `chosen` (the
    /// policy's machine for it), may take the bid: after `turn` grace periods. The chosen machine
    /// has the first; the others that fit follow one grace period apart, in tie-break order, so
    /// that when the chosen machine does not take a bid exactly one machine takes it next (no
    /// race in which all but one pull the image for nothing). `None`: the seat does not fit.
    pub fn turn(
        &self,
        need: &Need,
        offers: &[Offer],
        chosen: usize,
        machine: usize,
    ) -> Option<u32> {
        self.fitting(need, offers)
            .filter(|c| c.machine != chosen)
            .position(|c| c.machine == machine)
            .map(|i| i as u32 + 1)
    }

    /// The best placement of `pod` (one of `need`'s) whose machine's fit rule accepts `need`:
    /// co-tenants that get along first, then the standing, then, at the same standing, a
    /// machine caching the image.
    fn best_for(
        &mut self,
        pod: &Pod,
        need: &Need,
        offers: &[Offer],
        affinity: Affinity,
    ) -> Option<(Rank, Chosen)> {
        // The ranked places down to the first whose co-tenants get along: a place ranked below
        // it, even on other GPUs of its machine, stands no better.
        let mut ahead: Vec<(Standing, usize, GpuMask)> = Vec::new();
        let near = Neighbours {
            profiled: &self.profiled,
            profile: affinity.profile,
        };
        for (s, at) in self.policy.ranked(&self.cluster, pod) {
            let node = at.node as usize;
            let Some(c) = accept(&self.seat_of, offers, need, node, at.gpus) else {
                continue;
            };
            ahead.push((s, node, at.gpus));
            if near.along(c.machine, mask_of(&c.gpus)) {
                break;
            }
        }
        // And the machines caching the image, which win at the same standing.
        ahead.extend(affinity.caching.iter().filter_map(|&m| {
            let n = self.node_of.get(m).copied().flatten()?;
            let (s, mask) = self.policy.standing_of(&self.cluster, pod, n)?;
            Some((s, n, mask))
        }));
        let mut pick: Option<(Rank, Chosen)> = None;
        for at in ahead {
            let Some((along, s, c)) = self.place(pod, need, offers, affinity.profile, at) else {
                continue;
            };
            let position = -(self.cluster.rank(at.1) as i64);
            let rank = (along, s, affinity.caching.contains(&c.machine), position);
            if pick.as_ref().is_none_or(|p| rank > p.0) {
                pick = Some((rank, c));
            }
        }
        pick
    }

    /// A node's place for `pod`, where the policy gives it standing `s` on GPUs `mask` (`at`:
    /// standing, node, GPUs): the GPUs `allocate` would be sent, whether their co-tenants get
    /// along with a bid of `profile`, and the standing. Where they do not and `pod` shares a GPU,
    /// the node's best place on GPUs whose co-tenants do, when there is one (at its own, lower,
    /// standing).
    fn place(
        &mut self,
        pod: &Pod,
        need: &Need,
        offers: &[Offer],
        profile: Option<Profile>,
        at: (Standing, usize, GpuMask),
    ) -> Option<(bool, Standing, Chosen)> {
        let (s, node, mask) = at;
        let near = Neighbours {
            profiled: &self.profiled,
            profile,
        };
        let c = accept(&self.seat_of, offers, need, node, mask)?;
        if near.along(c.machine, mask_of(&c.gpus)) {
            return Some((true, s, c));
        }
        if pod.is_sharing() {
            // A node the policy describes has at most 8 GPUs.
            let avoid = GpuMask::try_from(near.clashing(c.machine)).unwrap_or(GpuMask::MAX);
            let other = self
                .policy
                .standing_avoiding(&self.cluster, pod, node, avoid)
                .and_then(|(s, mask)| Some((s, accept(&self.seat_of, offers, need, node, mask)?)));
            if let Some((s, other)) = other {
                if near.along(other.machine, mask_of(&other.gpus)) {
                    return Some((true, s, other));
                }
            }
        }
        Some((false, s, c))
    }
}

/// GPUs `gpus` as a mask.
fn mask_of(gpus: &[u8]) -> u16 {
    gpus.iter().fold(0u16, |m, &g| m | 1 << g)
}

/// The GPUs `need` gets on node `node` (of seat `seat_of[node]`) where the policy chose GPUs
/// `mask`: those, when the machine's fit rule accepts them (the check `allocate` makes), else
/// the fit rule's own; `None` when the fit rule refuses the bid there.
fn accept(
    seat_of: &[usize],
    offers: &[Offer],
    need: &Need,
    node: usize,
    mask: GpuMask,
) -> Option<Chosen> {
    let machine = *seat_of.get(node)?;
    let offer = offers.get(machine)?;
    let gpus: Vec<u8> = bits(mask).map(|g| g as u8).collect();
    if gpus.len() == need.gpu_count as usize && offer.check_choice(need, &gpus).is_ok() {
        return Some(Chosen { machine, gpus });
    }
    Some(Chosen {
        machine,
        gpus: offer.fit(need).ok()?.gpus().to_vec(),
    })
}

/// A bid's profile beside the measured co-tenants of every machine.
struct Neighbours<'a> {
    profiled: &'a [Vec<(u16, Profile)>],
    profile: Option<Profile>,
}

impl Neighbours<'_> {
    /// The GPUs of `machine` with a co-tenant the bid would clash with.
    fn clashing(&self, machine: usize) -> u16 {
        let Some(p) = self.profile else {
            return 0;
        };
        self.profiled.get(machine).map_or(0, |tenants| {
            tenants
                .iter()
                .filter(|(_, t)| !InterferenceModel::MARKET.get_along(&p, t))
                .fold(0, |m, (gpus, _)| m | gpus)
        })
    }

    /// Whether the bid gets along with every measured co-tenant of GPUs `mask` of `machine`.
    fn along(&self, machine: usize, mask: u16) -> bool {
        self.clashing(machine) & mask == 0
    }
}

#[cfg(test)]
mod tests;
