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
//! Units: the policy counts a GPU as 1 000 milli. A machine's GPU of `G` GiB holds a bid's `g`
//! GiB as ⌊1 000·g/G⌋ milli (a whole GPU when `g ≥ G`) and has ⌊1 000·free/G⌋ milli free. A
//! model is a (class, GiB) pair; a machine is of its first GPU's model (the fit rule still
//! checks every GPU). A machine the policy cannot describe (more than 8 GPUs, or beyond the
//! 32nd model of the market) is only reached by the fall-back.

use std::collections::BTreeSet;

use super::cluster::Cluster;
use super::frag::FragModel;
use super::plan::PackingPlan;
use super::policy::{Planned, Standing};
use super::types::{bits, GpuMask, ModelId, ModelSet, Node, Pod, MAX_GPUS_PER_NODE, MILLI_PER_GPU};
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
    /// Its running leases: each one's GPUs (a mask) and GiB on each of them.
    pub leases: &'a [(u16, u16)],
}

/// One bid of the market's workload, as the policy learns its typical pods and packing plan
/// from it: an open bid, or a running lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
}

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
    /// The policy over `seats`, its typical pods and plan learned from `workload` (the market's
    /// open bids and running leases).
    pub fn new(seats: &[Seat], workload: &[Demand]) -> Placer {
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
        };
        let reference: Vec<Pod> = workload.iter().flat_map(|n| placer.pods(n)).collect();
        placer.policy = Planned::new(
            FragModel::from_pods(&reference, COVERAGE_PCT),
            PackingPlan::from_pods(&reference),
        );
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
        for (i, seat) in seats.iter().enumerate() {
            placer.set_leases(i, seat);
        }
        placer
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
        let gpus = seat.offer.gpus();
        let mut sizes: Vec<Vec<u16>> = vec![Vec::new(); gpus.len()];
        let mut off_plan = 0u16;
        for &(mask, gib) in seat.leases {
            let one = mask.count_ones() == 1;
            for g in (0..gpus.len()).filter(|g| mask >> g & 1 == 1) {
                let m = milli(gib, gpus[g].memory_gib);
                if m == MILLI_PER_GPU {
                    continue;
                }
                match one {
                    true => sizes[g].push(m),
                    false => off_plan |= 1 << g,
                }
            }
        }
        let mut pods = [None; MAX_GPUS_PER_NODE];
        for (g, s) in sizes.iter().enumerate() {
            if off_plan >> g & 1 == 0 {
                pods[g] = self.policy.gpu_pods(s);
            }
        }
        self.policy.set_gpu_pods(&self.cluster, n, pods);
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
    /// `allocate` would check), `caching` the seats that cache the bid's image. `None`: no
    /// machine's fit rule accepts it.
    pub fn choose(&mut self, need: &Need, offers: &[Offer], caching: &[usize]) -> Option<Chosen> {
        // (standing, caches the image, minus the tie-break position, seat, GPUs).
        let mut best: Option<(Standing, bool, i64, Chosen)> = None;
        for pod in self.pods(&need.into()) {
            let Some(found) = self.best_for(&pod, need, offers, caching) else {
                continue;
            };
            if best
                .as_ref()
                .is_none_or(|b| (found.0, found.1, found.2) > (b.0, b.1, b.2))
            {
                best = Some(found);
            }
        }
        if let Some((.., chosen)) = best {
            return Some(chosen);
        }
        // Nothing the policy describes takes it: the first machine in tie-break order that fits.
        self.order.iter().find_map(|&m| {
            let choice = offers.get(m)?.fit(need).ok()?;
            Some(Chosen {
                machine: m,
                gpus: choice.gpus().to_vec(),
            })
        })
    }

    /// The best placement of `pod` (one of `need`'s) whose machine's fit rule accepts `need`,
    /// preferring, at the same standing, a machine in `caching`.
    fn best_for(
        &mut self,
        pod: &Pod,
        need: &Need,
        offers: &[Offer],
        caching: &[usize],
    ) -> Option<(Standing, bool, i64, Chosen)> {
        let (seat_of, cluster) = (&self.seat_of, &self.cluster);
        let accept = |node: usize, mask: GpuMask| -> Option<Chosen> {
            let machine = seat_of[node];
            let offer = offers.get(machine)?;
            let gpus: Vec<u8> = bits(mask).map(|g| g as u8).collect();
            if gpus.len() == need.gpu_count as usize && offer.check_choice(need, &gpus).is_ok() {
                return Some(Chosen { machine, gpus });
            }
            let choice = offer.fit(need).ok()?;
            Some(Chosen {
                machine,
                gpus: choice.gpus().to_vec(),
            })
        };
        let (standing, first) = self
            .policy
            .ranked(cluster, pod)
            .find_map(|(s, at)| Some((s, accept(at.node as usize, at.gpus)?)))?;
        let position = |c: &Chosen| -(cluster.rank(self.node_of[c.machine].unwrap_or(0)) as i64);
        let mut pick = (
            standing,
            caching.contains(&first.machine),
            position(&first),
            first,
        );
        if pick.1 {
            return Some(pick);
        }
        for &m in caching {
            let Some(n) = self.node_of.get(m).copied().flatten() else {
                continue;
            };
            let Some((s, mask)) = self.policy.standing_of(cluster, pod, n) else {
                continue;
            };
            if s != standing {
                continue;
            }
            if let Some(c) = accept(n, mask) {
                let p = position(&c);
                if !pick.1 || p > pick.2 {
                    pick = (s, true, p, c);
                }
            }
        }
        Some(pick)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fit::{GpuOffer, Host, Region, Regions, Room, Terms};
    use crate::overclock::{GpuLimits, OverclockTerms, Range};
    use proptest::prelude::*;

    const GIB: u16 = 80;
    const EU: Region = *b"eu-west\0\0\0\0\0\0\0\0\0";
    const US: Region = *b"us-east\0\0\0\0\0\0\0\0\0";

    fn gpu(free_gib: u16, group: u8) -> GpuOffer {
        GpuOffer {
            class: 0,
            topology_group: group,
            memory_gib: GIB,
            free_gib,
            limits: GpuLimits {
                power_w: Range { min: 100, max: 400 },
                core_lock_mhz: Range { min: 0, max: 0 },
                mem_lock_mhz: Range { min: 0, max: 0 },
                core_offset_mhz: Range { min: 0, max: 0 },
                mem_offset_mhz: Range { min: 0, max: 0 },
            },
            running: None,
        }
    }

    /// A machine with `free` GiB left on each GPU (one topology group), 64 CPUs and 256 GiB.
    fn offer(free: &[u16], cpu_free: u32) -> Offer {
        Offer::new(
            free.iter().map(|&f| gpu(f, 0)).collect(),
            true,
            Room {
                ports: 4,
                scratch_gib: 64,
                host: Host {
                    cpu_milli: 64_000,
                    memory_mib: 262_144,
                },
            },
            Host {
                cpu_milli: cpu_free,
                memory_mib: 262_144,
            },
            0,
            0,
            [0; 8],
        )
        .in_region(EU)
    }

    fn need(gpus: u8, gib: u16, regions: Regions<'static>) -> Need<'static> {
        Need {
            gpu_count: gpus,
            gib_per_gpu: gib,
            accepted_classes: 0b1,
            price: 1_000,
            deadline: 1_000,
            terms: Terms::Uniform(OverclockTerms {
                power_limit_w: 300,
                ..OverclockTerms::default()
            }),
            room: Room {
                ports: 0,
                scratch_gib: 0,
                host: Host {
                    cpu_milli: 4_000,
                    memory_mib: 1_024,
                },
            },
            regions,
        }
    }

    fn demands(needs: &[Need]) -> Vec<Demand> {
        needs.iter().map(Demand::from).collect()
    }

    fn seat<'a>(id: u8, cost: u64, offer: &'a Offer, leases: &'a [(u16, u16)]) -> Seat<'a> {
        Seat {
            id: [id; 32],
            electricity_cost_per_kwh: cost,
            offer,
            leases,
        }
    }

    /// The plan's test through the market: a workload of 52 GiB bids (650 milli) with one 26
    /// (325) and one 38 (475). Machine 0 holds a 38, machine 1 a 52; a 26 fits both, and joins
    /// the 52 (the plan's pair) though machine 0 ranks first on electricity.
    #[test]
    fn a_bid_goes_where_the_packing_plan_completes_a_gpu() {
        let mut workload = vec![need(1, 52, Regions::Any); 100];
        workload.extend([need(1, 26, Regions::Any), need(1, 38, Regions::Any)]);
        let offers = [offer(&[GIB - 38], 60_000), offer(&[GIB - 52], 60_000)];
        let leases = [[(1u16, 38u16)], [(1, 52)]];
        let seats = [
            seat(1, 10, &offers[0], &leases[0]),
            seat(2, 20, &offers[1], &leases[1]),
        ];
        let mut placer = Placer::new(&seats, &demands(&workload));
        let chosen = placer.choose(&need(1, 26, Regions::Any), &offers, &[]);
        assert_eq!(
            chosen,
            Some(Chosen {
                machine: 1,
                gpus: vec![0]
            })
        );
    }

    #[test]
    fn the_fit_rule_decides_and_ties_go_to_the_image_then_to_cheap_electricity() {
        let workload = vec![need(1, GIB, Regions::Any); 4];
        let offers = [
            offer(&[GIB, GIB], 64_000),
            offer(&[GIB, GIB], 64_000),
            offer(&[GIB, GIB], 64_000),
        ];
        // Machine 2 is cheapest, then 0, then 1.
        let seats = [
            seat(1, 20, &offers[0], &[]),
            seat(2, 30, &offers[1], &[]),
            seat(3, 10, &offers[2], &[]),
        ];
        let mut placer = Placer::new(&seats, &demands(&workload));
        let whole = need(1, GIB, Regions::Any);
        assert_eq!(placer.choose(&whole, &offers, &[]).unwrap().machine, 2);
        // Machine 1 caches the image: at the same standing it wins.
        assert_eq!(placer.choose(&whole, &offers, &[1]).unwrap().machine, 1);
        // A bid that accepts only us-east (all three are in eu-west) fits nowhere.
        static ONLY_US: [Region; 1] = [US];
        assert_eq!(
            placer.choose(&need(1, GIB, Regions::of(&ONLY_US)), &offers, &[]),
            None
        );
        // A paused machine is passed over, though the policy ranks it first.
        let mut paused = offers.clone();
        paused[2] = Offer::new(
            offers[2].gpus().to_vec(),
            false,
            offers[2].room(),
            offers[2].host_free(),
            0,
            0,
            [0; 8],
        );
        assert_eq!(placer.choose(&whole, &paused, &[]).unwrap().machine, 0);
    }

    #[test]
    fn a_machine_the_policy_cannot_describe_still_takes_what_fits_nowhere_else() {
        let workload = vec![need(1, GIB, Regions::Any)];
        // Ten GPUs: beyond the policy's eight.
        let big = offer(&[GIB; 10], 64_000);
        let small = offer(&[0, 0], 64_000);
        let offers = [small, big];
        let seats = [seat(1, 0, &offers[0], &[]), seat(2, 0, &offers[1], &[])];
        let mut placer = Placer::new(&seats, &demands(&workload));
        let chosen = placer
            .choose(&need(9, GIB, Regions::Any), &offers, &[])
            .unwrap();
        assert_eq!(chosen.machine, 1);
        assert_eq!(chosen.gpus.len(), 9);
    }

    type State = Vec<(u64, Offer, Vec<(u16, u16)>)>;

    fn view(s: &State) -> Vec<Seat<'_>> {
        s.iter()
            .enumerate()
            .map(|(i, (c, o, l))| seat(i as u8, *c, o, l))
            .collect()
    }

    proptest! {
        /// A bid's GiB fit a GPU's free GiB exactly when its milli fit the GPU's free milli.
        #[test]
        fn milli_fit_exactly_when_gib_fit(of in 1u16..=1_000, a in 1u16..=1_000, b in 0u16..=1_000) {
            let (gib, free) = (a.min(of), b.min(of));
            prop_assert_eq!(milli(gib, of) <= free_milli(free, of), gib <= free);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// The placer, learnt afresh from the machines and their leases as each bid comes,
        /// finds a machine exactly when some machine's fit rule accepts the bid, and the GPUs
        /// it gives pass the check `allocate` makes.
        #[test]
        fn the_choice_fits_and_only_fails_when_nothing_fits(
            machines in prop::collection::vec((prop::collection::vec(0u16..=GIB, 1..9), 0u32..64, 0u64..4), 1..8),
            bids in prop::collection::vec((1u8..4, 1u16..=GIB, 1u32..16), 1..24),
        ) {
            let mut offers: Vec<Offer> = machines.iter().map(|(free, cpu, _)| offer(free, cpu * 1_000)).collect();
            let mut leases: Vec<Vec<(u16, u16)>> = vec![Vec::new(); offers.len()];
            let costs: Vec<u64> = machines.iter().map(|m| m.2).collect();
            let needs: Vec<Need> = bids.iter().map(|&(n, gib, cpu)| {
                let mut need = need(n, if n == 1 { gib } else { GIB }, Regions::Any);
                need.room.host.cpu_milli = cpu * 1_000;
                need
            }).collect();
            let seats = |offers: &[Offer], leases: &[Vec<(u16, u16)>]| -> State {
                offers.iter().zip(leases).zip(&costs).map(|((o, l), &c)| (c, o.clone(), l.clone())).collect()
            };
            for need in &needs {
                let fits_somewhere = offers.iter().any(|o| o.fit(need).is_ok());
                // Learnt afresh from the market as it is now, as the agents do.
                let state = seats(&offers, &leases);
                let chosen = Placer::new(&view(&state), &demands(&needs)).choose(need, &offers, &[]);
                prop_assert_eq!(chosen.is_some(), fits_somewhere);
                let Some(chosen) = chosen else { continue };
                let o = &offers[chosen.machine];
                prop_assert_eq!(o.check_choice(need, &chosen.gpus), Ok(()));
                // The lease starts: its GPUs lose the GiB, the host its CPU.
                let mut gpus = o.gpus().to_vec();
                for &g in &chosen.gpus {
                    gpus[g as usize].free_gib -= need.gib_per_gpu;
                }
                let mut free = o.host_free();
                free.cpu_milli -= need.room.host.cpu_milli;
                offers[chosen.machine] = Offer::new(gpus, true, o.room(), free, 0, 0, [0; 8]).in_region(EU);
                let mask = chosen.gpus.iter().fold(0u16, |m, &g| m | 1 << g);
                leases[chosen.machine].push((mask, need.gib_per_gpu));
            }
        }
    }
}
