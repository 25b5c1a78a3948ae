//! `gpu-market-bench batching`: smart batching in the market's machine choice.
//!
//! Jobs of Lucid's measured pairs (`traces/lucid/`) arrive at a market of 32 machines × 4 GPUs
//! of 32 GiB, each job a one-GPU bid for half a GPU, so that a shared GPU holds a pair. Each bid
//! is seated by `gpu_market_core::placement::Placer`, the packing policy every agent runs (built
//! afresh for each bid from the machines' offers and running leases, as `MarketPlacement` does),
//! twice over: with the job's profile (its image measured, as the market learns it from proofs)
//! and without (smart batching off). Every pair formed is judged by what Lucid *measured* for
//! the two jobs together, not by the model: whether both kept at least 0.8 of their speed alone,
//! and their mean speed. Pairs Lucid never measured are counted apart. Loads are the share of
//! the market's half-GPU slots the arrivals would fill at once.

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use gpu_market_core::colocate::{Profile, MIN_SPEED};
use gpu_market_core::fit::{GpuOffer, Host, Need, Offer, Regions, Room, Terms};
use gpu_market_core::overclock::{GpuLimits, OverclockTerms, Range};
use gpu_market_core::placement::{Affinity, Demand, Placer, Seat, SplitMix64, Tenant};

use crate::colocate::{load, Key};

const MACHINES: usize = 32;
const GPUS: usize = 4;
const GPU_GIB: u16 = 32;
const BID_GIB: u16 = GPU_GIB / 2;
/// Mean job duration, in time steps (uniform in 1..=2·mean).
const MEAN_DURATION: u64 = 40;
const ARRIVALS: usize = 8_000;
const SEEDS: [u64; 4] = [1, 2, 3, 4];
const LOADS_PCT: [u64; 3] = [80, 95, 110];

/// Lucid's jobs and what each pair measured.
struct Jobs {
    profiles: Vec<Profile>,
    /// (job, neighbour) → the job's measured speed beside the neighbour.
    speed: HashMap<(usize, usize), f64>,
}

fn jobs(traces: &Path) -> Result<Jobs, String> {
    let pairs = load(traces)?;
    let mut index: HashMap<Key, usize> = HashMap::new();
    let mut profiles = Vec::new();
    let mut id = |k: &Key, p: Profile| {
        *index.entry(k.clone()).or_insert_with(|| {
            profiles.push(p);
            profiles.len() - 1
        })
    };
    let mut speed = HashMap::new();
    for p in &pairs {
        let (a, b) = (id(&p.jobs[0], p.a), id(&p.jobs[1], p.b));
        speed.insert((a, b), p.speed[0]);
        speed.insert((b, a), p.speed[1]);
    }
    Ok(Jobs { profiles, speed })
}

/// The bids' terms: one GPU at 300 W.
const TERMS: OverclockTerms = OverclockTerms {
    power_limit_w: 300,
    core_lock_mhz: None,
    mem_lock_mhz: None,
    core_offset_mhz: None,
    mem_offset_mhz: None,
};

fn need() -> Need<'static> {
    let none = Host {
        cpu_milli: 0,
        memory_mib: 0,
    };
    Need {
        gpu_count: 1,
        gib_per_gpu: BID_GIB,
        accepted_classes: 1,
        price: 1,
        latest_start: i64::MAX,
        terms: Terms::Uniform(TERMS),
        room: Room {
            ports: 0,
            scratch_gib: 0,
            host: none,
        },
        regions: Regions::Any,
    }
}

/// A machine whose GPUs have `free` GiB each, as the fit rule sees it.
fn offer(free: &[u16]) -> Offer {
    let gpus = free
        .iter()
        .map(|&free_gib| GpuOffer {
            class: 0,
            topology_group: 0,
            memory_gib: GPU_GIB,
            free_gib,
            limits: GpuLimits::power_only(Range { min: 100, max: 400 }),
            running: (free_gib < GPU_GIB).then_some(TERMS),
        })
        .collect();
    let host = Host {
        cpu_milli: 64_000,
        memory_mib: 262_144,
    };
    let room = Room {
        ports: 4,
        scratch_gib: 64,
        host,
    };
    Offer::new(gpus, true, room, host, 0, 0, [0; 8])
}

/// A job running: its machine, GPU, Lucid job and end.
struct Running {
    machine: usize,
    gpu: u8,
    job: usize,
    ends: u64,
}

#[derive(Default)]
struct Outcome {
    arrived: usize,
    placed: usize,
    pairs: usize,
    measured: usize,
    both_keep: usize,
    speed_sum: f64,
}

/// One run: `ARRIVALS` jobs at `load_pct`, seated with their profiles when `smart`.
fn run(jobs: &Jobs, load_pct: u64, seed: u64, smart: bool) -> Outcome {
    let mut rng = SplitMix64::new(seed);
    let slots = (MACHINES * GPUS * 2) as u64;
    // Arrivals per step, in thousandths, for the load asked.
    let rate_milli = load_pct * slots * 1_000 / 100 / MEAN_DURATION;
    let (need, mut out) = (need(), Outcome::default());
    let mut running: Vec<Running> = Vec::new();
    let mut step = 0u64;
    while out.arrived < ARRIVALS {
        step += 1;
        running.retain(|r| r.ends > step);
        let arrivals = (step * rate_milli / 1_000 - (step - 1) * rate_milli / 1_000) as usize;
        for _ in 0..arrivals.min(ARRIVALS - out.arrived) {
            out.arrived += 1;
            let job = rng.below(jobs.profiles.len() as u64) as usize;
            let ends = step + 1 + rng.below(2 * MEAN_DURATION);
            let mut free = vec![[GPU_GIB; GPUS]; MACHINES];
            let mut tenants: Vec<Vec<Tenant>> = vec![Vec::new(); MACHINES];
            for r in &running {
                free[r.machine][r.gpu as usize] -= BID_GIB;
                tenants[r.machine].push(Tenant {
                    gpus: 1 << r.gpu,
                    gib_per_gpu: BID_GIB,
                    profile: Some(jobs.profiles[r.job]),
                });
            }
            let offers: Vec<Offer> = free.iter().map(|f| offer(f)).collect();
            let seats: Vec<Seat> = (0..MACHINES)
                .map(|m| Seat {
                    id: [m as u8; 32],
                    electricity_cost_per_kwh: 0,
                    offer: &offers[m],
                    leases: &tenants[m],
                })
                .collect();
            let workload = [
                (
                    Demand::running(1, BID_GIB, need.room.host),
                    running.len() as u32,
                ),
                (Demand::from(&need), 1),
            ];
            let affinity = Affinity {
                caching: &[],
                profile: smart.then_some(jobs.profiles[job]),
            };
            let Some(chosen) = Placer::new(&seats, &workload).choose(&need, &offers, affinity)
            else {
                continue;
            };
            out.placed += 1;
            let (machine, gpu) = (chosen.machine, chosen.gpus[0]);
            if let Some(other) = running
                .iter()
                .find(|r| r.machine == machine && r.gpu == gpu)
            {
                out.pairs += 1;
                let measured = (
                    jobs.speed.get(&(job, other.job)),
                    jobs.speed.get(&(other.job, job)),
                );
                if let (Some(&a), Some(&b)) = measured {
                    out.measured += 1;
                    out.both_keep += (a >= MIN_SPEED && b >= MIN_SPEED) as usize;
                    out.speed_sum += a.min(1.0) + b.min(1.0);
                }
            }
            running.push(Running {
                machine,
                gpu,
                job,
                ends,
            });
        }
    }
    out
}

pub fn main(traces: &Path) -> Result<(), String> {
    let start = Instant::now();
    let jobs = jobs(traces)?;
    println!(
        "lucid: {} jobs, {} measured (job, neighbour) speeds; {MACHINES} machines × {GPUS} GPUs \
         of {GPU_GIB} GiB, bids for {BID_GIB} GiB, {ARRIVALS} arrivals per run, seeds {SEEDS:?}\n",
        jobs.profiles.len(),
        jobs.speed.len()
    );
    println!("| load % | smart batching | placed % | pairs formed | of them measured | both keep ≥ {MIN_SPEED} % (seeds) | mean speed in a pair |");
    println!("|---:|---|---:|---:|---:|---:|---:|");
    for load_pct in LOADS_PCT {
        for smart in [false, true] {
            let runs: Vec<Outcome> = SEEDS
                .iter()
                .map(|&seed| run(&jobs, load_pct, seed, smart))
                .collect();
            let sum = |f: fn(&Outcome) -> usize| runs.iter().map(f).sum::<usize>();
            let keep: Vec<f64> = runs
                .iter()
                .map(|o| 100.0 * o.both_keep as f64 / o.measured.max(1) as f64)
                .collect();
            let (lo, hi) = keep
                .iter()
                .fold((f64::MAX, f64::MIN), |(lo, hi), &k| (lo.min(k), hi.max(k)));
            let speed: f64 = runs.iter().map(|o| o.speed_sum).sum();
            println!(
                "| {load_pct} | {} | {:.2} | {} | {} | {:.1} ({lo:.1}–{hi:.1}) | {:.3} |",
                if smart { "on" } else { "off" },
                100.0 * sum(|o| o.placed) as f64 / sum(|o| o.arrived) as f64,
                sum(|o| o.pairs),
                sum(|o| o.measured),
                100.0 * sum(|o| o.both_keep) as f64 / sum(|o| o.measured).max(1) as f64,
                speed / (2 * sum(|o| o.measured)).max(1) as f64,
            );
        }
    }
    println!("\nwall time {:.1} s", start.elapsed().as_secs_f64());
    Ok(())
}
