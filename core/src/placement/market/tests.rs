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
        limits: GpuLimits::power_only(Range { min: 100, max: 400 }),
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
    .in_region(EU, 1)
}

fn need(gpus: u8, gib: u16, regions: Regions<'static>) -> Need<'static> {
    Need {
        gpu_count: gpus,
        gib_per_gpu: gib,
        accepted_classes: 0b1,
        price: 1_000,
        latest_start: 1_000,
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

fn demands(needs: &[Need]) -> Vec<(Demand, u32)> {
    needs.iter().map(|n| (Demand::from(n), 1)).collect()
}

fn caching(seats: &[usize]) -> Affinity<'_> {
    Affinity {
        caching: seats,
        profile: None,
    }
}

/// A lease on GPUs `gpus` (a mask) with no proof yet.
fn tenant(gpus: u16, gib_per_gpu: u16) -> Tenant {
    Tenant {
        gpus,
        gib_per_gpu,
        profile: None,
    }
}

fn seat<'a>(id: u8, cost: u64, offer: &'a Offer, leases: &'a [Tenant]) -> Seat<'a> {
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
    let leases = [[tenant(1, 38)], [tenant(1, 52)]];
    let seats = [
        seat(1, 10, &offers[0], &leases[0]),
        seat(2, 20, &offers[1], &leases[1]),
    ];
    let mut placer = Placer::new(&seats, &demands(&workload));
    let chosen = placer.choose(&need(1, 26, Regions::Any), &offers, Affinity::default());
    assert_eq!(
        chosen,
        Some(Chosen {
            machine: 1,
            gpus: vec![0]
        })
    );
}

/// After the policy's machine, the others that fit take turns one grace period apart, in
/// tie-break order (the cheaper electricity, then the lower id); a machine that does not fit
/// has no turn, and every machine computes the same turns.
#[test]
fn the_machines_that_fit_take_turns_in_tie_break_order() {
    let workload = vec![need(1, GIB, Regions::Any); 4];
    // Electricity: seat 3 cheapest, then 0, then 2, then 1; seat 2 has no free GPU.
    let offers = [
        offer(&[GIB], 64_000),
        offer(&[GIB], 64_000),
        offer(&[0], 64_000),
        offer(&[GIB], 64_000),
    ];
    let none: [Tenant; 0] = [];
    let seats = [
        seat(1, 20, &offers[0], &none),
        seat(2, 40, &offers[1], &none),
        seat(3, 30, &offers[2], &none),
        seat(4, 10, &offers[3], &none),
    ];
    let mut placer = Placer::new(&seats, &demands(&workload));
    let bid = need(1, GIB, Regions::Any);
    let chosen = placer.choose(&bid, &offers, Affinity::default()).unwrap();
    let turns: Vec<Option<u32>> = (0..4)
        .map(|m| placer.turn(&bid, &offers, chosen.machine, m))
        .collect();
    let mut expected = vec![None; 4];
    let others: Vec<usize> = [3, 0, 1]
        .into_iter()
        .filter(|&m| m != chosen.machine)
        .collect();
    for (i, &m) in others.iter().enumerate() {
        expected[m] = Some(i as u32 + 1);
    }
    assert_eq!(turns, expected, "chosen {}", chosen.machine);
    assert_eq!(turns[2], None, "no free GPU: no turn");
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
    assert_eq!(
        placer
            .choose(&whole, &offers, Affinity::default())
            .unwrap()
            .machine,
        2
    );
    // Machine 1 caches the image: at the same standing it wins.
    assert_eq!(
        placer
            .choose(&whole, &offers, caching(&[1]))
            .unwrap()
            .machine,
        1
    );
    // A bid that accepts only us-east (all three are in eu-west) fits nowhere.
    static ONLY_US: [Region; 1] = [US];
    assert_eq!(
        placer.choose(
            &need(1, GIB, Regions::of(&ONLY_US)),
            &offers,
            Affinity::default()
        ),
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
    assert_eq!(
        placer
            .choose(&whole, &paused, Affinity::default())
            .unwrap()
            .machine,
        0
    );
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
        .choose(&need(9, GIB, Regions::Any), &offers, Affinity::default())
        .unwrap();
    assert_eq!(chosen.machine, 1);
    assert_eq!(chosen.gpus.len(), 9);
}

/// A measured lease: `pct` % SM utilisation on GPUs `gpus`, `gib` GiB on each.
fn measured(gpus: u16, gib: u16, pct: u16) -> Tenant {
    Tenant {
        profile: Some(busy(pct)),
        ..tenant(gpus, gib)
    }
}

fn busy(pct: u16) -> Profile {
    Profile {
        sm_util_bps: pct * 100,
    }
}

fn profiled(profile: Profile) -> Affinity<'static> {
    Affinity {
        caching: &[],
        profile: Some(profile),
    }
}

/// Two machines with one GPU each, half held: machine 0's tenant is busy (95 %), machine
/// 1's light (20 %), and machine 0 has the cheaper electricity. A busy bid goes next to the
/// light tenant; a light bid, or one whose image is not measured, goes by the packing and
/// the electricity. An unmeasured tenant clashes with nothing.
#[test]
fn a_shared_gpu_goes_to_a_bid_that_gets_along_with_its_tenants() {
    let workload = vec![need(1, GIB / 2, Regions::Any); 8];
    let offers = [offer(&[GIB / 2], 64_000), offer(&[GIB / 2], 64_000)];
    let leases = [[measured(1, GIB / 2, 95)], [measured(1, GIB / 2, 20)]];
    let seats = [
        seat(1, 10, &offers[0], &leases[0]),
        seat(2, 20, &offers[1], &leases[1]),
    ];
    let mut placer = Placer::new(&seats, &demands(&workload));
    let half = need(1, GIB / 2, Regions::Any);
    let on = |placer: &mut Placer, a: Affinity| placer.choose(&half, &offers, a).unwrap();
    assert_eq!(on(&mut placer, profiled(busy(90))).machine, 1);
    assert_eq!(on(&mut placer, profiled(busy(20))).machine, 0);
    assert_eq!(on(&mut placer, Affinity::default()).machine, 0);
    // Every place clashes: the bid still goes where the packing puts it.
    let both_busy = [[measured(1, GIB / 2, 95)], [measured(1, GIB / 2, 95)]];
    let seats = [
        seat(1, 10, &offers[0], &both_busy[0]),
        seat(2, 20, &offers[1], &both_busy[1]),
    ];
    let mut placer = Placer::new(&seats, &demands(&workload));
    assert_eq!(on(&mut placer, profiled(busy(90))).machine, 0);
    // Machine 0's tenant has no proof yet.
    let unmeasured = [[tenant(1, GIB / 2)], [measured(1, GIB / 2, 20)]];
    let seats = [
        seat(1, 10, &offers[0], &unmeasured[0]),
        seat(2, 20, &offers[1], &unmeasured[1]),
    ];
    let mut placer = Placer::new(&seats, &demands(&workload));
    assert_eq!(on(&mut placer, profiled(busy(90))).machine, 0);
}

/// On a machine whose GPU 0 holds a busy tenant and GPU 1 a light one, a busy bid takes
/// GPU 1 rather than an empty GPU elsewhere.
#[test]
fn a_busy_bid_takes_the_gpu_of_the_light_tenant() {
    let workload = vec![need(1, GIB / 2, Regions::Any); 8];
    let offers = [offer(&[GIB / 2, GIB / 2], 64_000), offer(&[GIB], 64_000)];
    let leases = [
        vec![measured(0b01, GIB / 2, 95), measured(0b10, GIB / 2, 20)],
        vec![],
    ];
    let seats = [
        seat(1, 10, &offers[0], &leases[0]),
        seat(2, 10, &offers[1], &leases[1]),
    ];
    let mut placer = Placer::new(&seats, &demands(&workload));
    let chosen = placer.choose(&need(1, GIB / 2, Regions::Any), &offers, profiled(busy(90)));
    assert_eq!(
        chosen,
        Some(Chosen {
            machine: 0,
            gpus: vec![1]
        })
    );
}

type State = Vec<(u64, Offer, Vec<Tenant>)>;

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
        bids in prop::collection::vec((1u8..4, 1u16..=GIB, 1u32..16, prop::option::of(0u16..=100)), 1..24),
    ) {
        let mut offers: Vec<Offer> = machines.iter().map(|(free, cpu, _)| offer(free, cpu * 1_000)).collect();
        let mut leases: Vec<Vec<Tenant>> = vec![Vec::new(); offers.len()];
        let costs: Vec<u64> = machines.iter().map(|m| m.2).collect();
        let needs: Vec<Need> = bids.iter().map(|&(n, gib, cpu, _)| {
            let mut need = need(n, if n == 1 { gib } else { GIB }, Regions::Any);
            need.room.host.cpu_milli = cpu * 1_000;
            need
        }).collect();
        let seats = |offers: &[Offer], leases: &[Vec<Tenant>]| -> State {
            offers.iter().zip(leases).zip(&costs).map(|((o, l), &c)| (c, o.clone(), l.clone())).collect()
        };
        for (need, &(.., pct)) in needs.iter().zip(&bids) {
            let fits_somewhere = offers.iter().any(|o| o.fit(need).is_ok());
            // Learnt afresh from the market as it is now, as the agents do.
            let state = seats(&offers, &leases);
            let affinity = Affinity { caching: &[], profile: pct.map(busy) };
            let chosen = Placer::new(&view(&state), &demands(&needs)).choose(need, &offers, affinity);
            prop_assert_eq!(chosen.is_some(), fits_somewhere);
            let Some(chosen) = chosen else { continue };
            let o = &offers[chosen.machine];
            prop_assert_eq!(o.check_choice(need, &chosen.gpus), Ok(()));
            // A one-GPU bid shares with co-tenants it gets along with whenever some GPU
            // the fit rule accepts has such co-tenants.
            let along = |m: usize, g: u8| pct.is_none_or(|p| leases[m].iter().all(|t| {
                t.gpus >> g & 1 == 0 || t.profile.is_none_or(|q| InterferenceModel::MARKET.get_along(&busy(p), &q))
            }));
            if need.gpu_count == 1 {
                let could = (0..offers.len()).any(|m| (0..offers[m].gpus().len() as u8)
                    .any(|g| along(m, g) && offers[m].check_choice(need, &[g]).is_ok()));
                prop_assert_eq!(along(chosen.machine, chosen.gpus[0]), could);
            }
            // The lease starts: its GPUs lose the GiB, the host its CPU.
            let mut gpus = o.gpus().to_vec();
            for &g in &chosen.gpus {
                gpus[g as usize].free_gib -= need.gib_per_gpu;
            }
            let mut free = o.host_free();
            free.cpu_milli -= need.room.host.cpu_milli;
            offers[chosen.machine] = Offer::new(gpus, true, o.room(), free, 0, 0, [0; 8]).in_region(EU, 1);
            let mask = chosen.gpus.iter().fold(0u16, |m, &g| m | 1 << g);
            leases[chosen.machine].push(Tenant { profile: pct.map(busy), ..tenant(mask, need.gib_per_gpu) });
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A placer kept across changes, each changed machine updated in place (`Placer::update`),
    /// chooses as one built afresh from the market as it is then with the same workload: a
    /// lease starting or ending moves one seat, and every index of the policy follows it. Now
    /// and then it learns the workload again (`Placer::relearn`: the bids so far, one of them
    /// counted as many), and chooses as one built afresh with that workload.
    #[test]
    fn a_placer_updated_in_place_chooses_as_one_built_afresh(
        machines in prop::collection::vec((prop::collection::vec(0u16..=GIB, 1..9), 0u32..64, 0u64..4), 1..8),
        bids in prop::collection::vec((1u8..4, 1u16..=GIB, 1u32..16, prop::option::of(0u16..=100), any::<bool>()), 1..24),
    ) {
        let mut offers: Vec<Offer> = machines.iter().map(|(free, cpu, _)| offer(free, cpu * 1_000)).collect();
        let mut leases: Vec<Vec<Tenant>> = vec![Vec::new(); offers.len()];
        let costs: Vec<u64> = machines.iter().map(|m| m.2).collect();
        let needs: Vec<Need> = bids.iter().map(|&(n, gib, cpu, ..)| {
            let mut need = need(n, if n == 1 { gib } else { GIB }, Regions::Any);
            need.room.host.cpu_milli = cpu * 1_000;
            need
        }).collect();
        let state = |offers: &[Offer], leases: &[Vec<Tenant>]| -> State {
            offers.iter().zip(leases).zip(&costs).map(|((o, l), &c)| (c, o.clone(), l.clone())).collect()
        };
        let mut workload = demands(&needs);
        let mut kept = Placer::new(&view(&state(&offers, &leases)), &workload);
        for (k, (need, &(.., pct, ends))) in needs.iter().zip(&bids).enumerate() {
            let affinity = Affinity { caching: &[], profile: pct.map(busy) };
            let now = state(&offers, &leases);
            if k % 3 == 2 {
                workload = demands(&needs[..k]);
                workload[0].1 = k as u32;
                kept.relearn(&view(&now), &workload);
            }
            let afresh = Placer::new(&view(&now), &workload).choose(need, &offers, affinity);
            prop_assert_eq!(&kept.choose(need, &offers, affinity), &afresh);
            let Some(chosen) = afresh else { continue };
            // The lease starts (and, for some, ends again at once): its GPUs lose the GiB,
            // the host its CPU.
            let (m, o) = (chosen.machine, &offers[chosen.machine]);
            let mut gpus = o.gpus().to_vec();
            let mut free = o.host_free();
            if !ends {
                for &g in &chosen.gpus {
                    gpus[g as usize].free_gib -= need.gib_per_gpu;
                }
                free.cpu_milli -= need.room.host.cpu_milli;
                let mask = chosen.gpus.iter().fold(0u16, |m, &g| m | 1 << g);
                leases[m].push(Tenant { profile: pct.map(busy), ..tenant(mask, need.gib_per_gpu) });
            } else if let Some(t) = leases[m].pop() {
                for g in (0..gpus.len()).filter(|g| t.gpus >> g & 1 == 1) {
                    gpus[g].free_gib += t.gib_per_gpu;
                }
            }
            offers[m] = Offer::new(gpus, true, o.room(), free, 0, 0, [0; 8]).in_region(EU, 1);
            let now = state(&offers, &leases);
            prop_assert!(kept.update(m, &view(&now)[m]));
        }
    }
}

/// A seat whose electricity cost changed, or that the policy can no longer describe, is not
/// updated in place: the policy must be built again.
#[test]
fn a_seat_that_moves_in_the_order_or_leaves_the_policy_is_not_updated_in_place() {
    let offers = [offer(&[GIB], 8_000), offer(&[GIB, GIB], 8_000)];
    let seats = [seat(1, 10, &offers[0], &[]), seat(2, 20, &offers[1], &[])];
    let mut placer = Placer::new(&seats, &[]);
    assert!(placer.update(0, &seats[0]));
    assert!(!placer.update(0, &seat(1, 30, &offers[0], &[])));
    // A GPU of a model no seat had when the policy was built.
    let mut other = gpu(GIB, 0);
    other.class = 1;
    let unknown = Offer::new(
        vec![other],
        true,
        offers[0].room(),
        offers[0].host_free(),
        0,
        0,
        [0; 8],
    );
    assert!(!placer.update(0, &seat(1, 10, &unknown, &[])));
    assert!(!placer.update(2, &seats[0]));
}
