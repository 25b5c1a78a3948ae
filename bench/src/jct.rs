//! `gpu-market-bench jct`: job completion time on the Philly-derived traces.
//!
//! All 15 virtual clusters' traces are replayed together on the cluster of `cluster_specs.json`
//! (500 V100s), every trace starting at time 0. Event-driven: the state changes only when a job
//! arrives or finishes, and the policy is asked to schedule after each such event. A job needs
//! all its GPUs at once (gang), and runs `total_steps / throughput` seconds on them.
//!
//! Each virtual cluster is one tenant with a stake tier, assigned deterministically: the
//! `i`-th virtual cluster by name gets tier `i mod 4` (stake 0, 1, 2 or 3 of a bound of 3).
//!
//! Policies:
//! - **FIFO**: by arrival, strictly (the first job that does not fit blocks the queue), as
//!   YARN's FIFO scheduler.
//! - **FIFO+backfill**: by arrival, EASY backfilling (see below): shows how much of the gain is
//!   backfilling alone.
//! - **SRF**: shortest remaining time first, preemptive: after every event the jobs with the
//!   least remaining work run, greedily, and the others are paused (free of cost here).
//! - **market**: the market's book. Non-preemptive (a lease runs to its end). Bids are ordered
//!   by [`aged_score`] of [`base_score`] (ties: arrival order), with EASY backfilling: the best
//!   bid that does not fit reserves the earliest time enough GPUs free up, and bids behind it
//!   may start only if they end before then or use GPUs the reservation does not need.
//!   The score's inputs: S from the tenant's stake tier; U from an urgency premium, which no
//!   Philly job pays (0); C from the spend per hour, GPUs × one price per GPU-hour, against a
//!   bound of one 8-GPU node; aging 10 bps per hour waited, capped at the market default's
//!   3 000 bps. Run with the default weights (0.4/0.3/0.3), with [`TUNED`] weights, and blind
//!   to stake (the control for the tier ratio).
//! - **the program's book** (ours, the ranking the market runs): the same base score and
//!   backfilling, bids ranked by the key `place_bid` stores (`Market::rank_key` of a market
//!   opened with the recommended parameters: aging 10 points per 60 s interval, and each bid's
//!   `score::duration_handicap`, which ranks it as if placed `min(3 × duration, 144 h)` later).
//!
//! Requested durations are exact (the replay knows the run time), as SRF assumes too.

use std::path::Path;
use std::time::Instant;

use gpu_market_core::score::{aged_score, base_score, Inputs, Weights};

use gpu_market::state::{Market, MarketParams};

use crate::market_jct::{self, Order, Played};
use crate::philly::{self, Job, Workload};
use crate::replay;

const TIERS: usize = 4;
/// Every job pays the same price per GPU-hour; C saturates at one 8-GPU node.
const PRICE_PER_GPU_HOUR: u64 = 1_000;
const SPEND_BOUND: u64 = 8 * PRICE_PER_GPU_HOUR;
/// The market default's aging cap (bps).
const AGING_CAP_BPS: u64 = 3_000;
/// Aging is counted per billing interval.
const INTERVAL_S: f64 = 3_600.0;
/// Aging per interval (bps).
const AGING_BPS: u64 = 10;
/// Weights for job completion time: stake 0.1, urgency 0.9, no complexity term (C rewards
/// big jobs, which is what raises the average JCT under the default weights).
const TUNED: Weights = Weights {
    stake_bps: 1_000,
    urgency_bps: 9_000,
    complexity_bps: 0,
};

#[derive(Clone, Copy)]
enum Policy {
    Fifo,
    FifoBackfill,
    Srf,
    Market {
        weights: Weights,
        aging_bps: u64,
    },
    /// The queue book's ranking as the program computes it at `place_bid`
    /// (`Market::rank_key`: aging and the duration handicap), for a market opened with the
    /// recommended parameters.
    Program,
}

impl Policy {
    fn name(&self) -> String {
        match self {
            Policy::Fifo => "FIFO".into(),
            Policy::FifoBackfill => "FIFO+backfill".into(),
            Policy::Srf => "SRF (preemptive)".into(),
            Policy::Market { weights, aging_bps } => format!(
                "market {}/{}/{}, aging {aging_bps}/h",
                weights.stake_bps, weights.urgency_bps, weights.complexity_bps
            ),
            Policy::Program => {
                let m = replay::market();
                let p = m.params;
                format!(
                    "the program's book ({}/{}/{}, aging {} per {} s, duration handicap)",
                    p.weights_bps[0],
                    p.weights_bps[1],
                    p.weights_bps[2],
                    p.aging_per_interval,
                    m.clock_secs
                )
            }
        }
    }

    /// Higher runs first; equal keys go in arrival order.
    fn key(&self, job: &Job, tier: usize, remaining: f64, now: f64) -> f64 {
        match *self {
            Policy::Fifo | Policy::FifoBackfill => 0.0,
            Policy::Srf => -remaining,
            Policy::Market { weights, aging_bps } => {
                let waited = ((now - job.arrival) / INTERVAL_S) as u64;
                let base = market_score(weights, job, tier);
                aged_score(base, aging_bps, waited, AGING_CAP_BPS) as f64
            }
            Policy::Program => {
                let market = replay::market();
                let base = market_score(market.params.weights(), job, tier);
                let duration = job.work.ceil().min(u32::MAX as f64) as u32;
                // Keys stay below 2⁵³ (aging × 2³²): exact in an f64.
                market.rank_key(base, job.arrival as i64, duration) as f64
            }
        }
    }

    fn discipline(&self) -> Discipline {
        match self {
            Policy::Fifo => Discipline::Strict,
            Policy::Srf => Discipline::Preemptive,
            Policy::FifoBackfill | Policy::Market { .. } | Policy::Program => Discipline::Backfill,
        }
    }
}

/// A patient market: the recommended parameters, but one point of aging per interval up to the
/// whole score (an aging cap of 100 %), so that a bid may wait 10,000 intervals (6.9 days at
/// 60 s; the program allows 7 days at most).
fn patient_market() -> Market {
    let params = MarketParams {
        aging_per_interval: 1,
        aging_cap_bps: 10_000,
        ..replay::market().params
    };
    assert!(params.validate().is_ok(), "a market the program opens");
    Market::opening(params)
}

/// The market's base score of a waiting job (see the module comment for the inputs).
fn market_score(weights: Weights, job: &Job, tier: usize) -> u64 {
    let inputs = Inputs {
        stake: tier as u64,
        stake_bound: (TIERS - 1) as u64,
        urgency_premium: 0,
        urgency_bound: 1,
        spend_per_hour: job.gpus as u64 * PRICE_PER_GPU_HOUR,
        spend_bound: SPEND_BOUND,
    };
    base_score(weights, &inputs)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Discipline {
    Strict,
    Backfill,
    Preemptive,
}

struct Outcome {
    name: String,
    /// Completion time of each job (by index).
    finish: Vec<f64>,
    busy_gpu_s: f64,
    wall_s: f64,
}

/// Jobs finish when less than this much work (seconds) is left: float noise.
const EPS: f64 = 1e-6;

fn simulate(w: &Workload, tier: &[usize], policy: Policy) -> Outcome {
    let start = Instant::now();
    let jobs = &w.jobs;
    let n = jobs.len();
    let mut remaining: Vec<f64> = jobs.iter().map(|j| j.work).collect();
    let mut finish = vec![f64::NAN; n];
    let (mut waiting, mut running): (Vec<usize>, Vec<usize>) = (Vec::new(), Vec::new());
    let mut free = w.gpus;
    let (mut now, mut next, mut busy_gpu_s) = (0.0f64, 0usize, 0.0f64);
    let discipline = policy.discipline();
    loop {
        let next_arrival = jobs.get(next).map(|j| j.arrival);
        let next_done = running
            .iter()
            .map(|&i| now + remaining[i])
            .min_by(f64::total_cmp);
        let t = match (next_arrival, next_done) {
            (Some(a), Some(d)) => a.min(d),
            (Some(a), None) => a,
            (None, Some(d)) => d,
            (None, None) => break,
        };
        let dt = t - now;
        for &i in &running {
            remaining[i] -= dt;
            busy_gpu_s += jobs[i].gpus as f64 * dt;
        }
        now = t;
        running.retain(|&i| {
            if remaining[i] <= EPS {
                finish[i] = now;
                free += jobs[i].gpus;
                false
            } else {
                true
            }
        });
        while next < n && jobs[next].arrival <= now {
            waiting.push(next);
            next += 1;
        }

        if discipline == Discipline::Preemptive {
            waiting.append(&mut running);
            free = w.gpus;
        }
        let key = |i: usize| policy.key(&jobs[i], tier[jobs[i].vc], remaining[i], now);
        let mut order: Vec<(f64, usize)> = waiting.iter().map(|&i| (key(i), i)).collect();
        order.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        waiting.clear();
        // EASY backfilling: (shadow time, GPUs spare at it) once the first bid is blocked.
        let mut reservation: Option<(f64, u32)> = None;
        let mut blocked = false;
        for (_, i) in order {
            let g = jobs[i].gpus;
            let start_now = match discipline {
                Discipline::Preemptive => g <= free,
                Discipline::Strict => !blocked && g <= free,
                Discipline::Backfill => match reservation {
                    None if g <= free => true,
                    None => {
                        reservation = Some(shadow(&running, &remaining, jobs, now, free, g));
                        false
                    }
                    Some((shadow_t, ref mut spare)) => {
                        if g > free {
                            false
                        } else if now + remaining[i] <= shadow_t {
                            true
                        } else if g <= *spare {
                            *spare -= g;
                            true
                        } else {
                            false
                        }
                    }
                },
            };
            if start_now {
                free -= g;
                running.push(i);
            } else {
                blocked = true;
                waiting.push(i);
            }
        }
    }
    Outcome {
        name: policy.name(),
        finish,
        busy_gpu_s,
        wall_s: start.elapsed().as_secs_f64(),
    }
}

/// When `need` GPUs will be free if the running jobs end as requested, and how many GPUs beyond
/// `need` will be free then.
fn shadow(
    running: &[usize],
    remaining: &[f64],
    jobs: &[Job],
    now: f64,
    free: u32,
    need: u32,
) -> (f64, u32) {
    let mut ends: Vec<(f64, u32)> = running
        .iter()
        .map(|&i| (now + remaining[i], jobs[i].gpus))
        .collect();
    ends.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut avail = free;
    for (t, g) in ends {
        avail += g;
        if avail >= need {
            return (t, avail - need);
        }
    }
    // More GPUs than the cluster has: never; nothing may use the reservation's GPUs.
    (f64::INFINITY, 0)
}

/// The `p`-th percentile (nearest rank) of `v`, sorted in place.
fn percentile(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

struct Summary {
    avg_jct_h: f64,
    p50_wait_h: f64,
    p99_wait_h: f64,
    util_pct: f64,
    makespan_h: f64,
    p99_wait_tier_h: [f64; TIERS],
}

fn summarise(w: &Workload, tier: &[usize], o: &Outcome) -> Summary {
    let h = |s: f64| s / 3_600.0;
    let jct: Vec<f64> = w
        .jobs
        .iter()
        .zip(&o.finish)
        .map(|(j, f)| f - j.arrival)
        .collect();
    // Queueing delay: time not running (for a non-preemptive policy, start − arrival).
    let mut wait: Vec<f64> = w
        .jobs
        .iter()
        .zip(&jct)
        .map(|(j, c)| (c - j.work).max(0.0))
        .collect();
    let first = w.jobs.first().map_or(0.0, |j| j.arrival);
    let makespan = o.finish.iter().copied().fold(0.0, f64::max) - first;
    let mut p99_wait_tier_h = [0.0; TIERS];
    for (t, p) in p99_wait_tier_h.iter_mut().enumerate() {
        let mut v: Vec<f64> = w
            .jobs
            .iter()
            .zip(&wait)
            .filter(|(j, _)| tier[j.vc] == t)
            .map(|(_, &x)| x)
            .collect();
        *p = h(percentile(&mut v, 99.0));
    }
    Summary {
        avg_jct_h: h(jct.iter().sum::<f64>() / jct.len().max(1) as f64),
        p50_wait_h: h(percentile(&mut wait, 50.0)),
        p99_wait_h: h(percentile(&mut wait, 99.0)),
        util_pct: 100.0 * o.busy_gpu_s / (w.gpus as f64 * makespan),
        makespan_h: h(makespan),
        p99_wait_tier_h,
    }
}

fn header() {
    print!("| policy | avg JCT (h) | p50 queueing (h) | p99 queueing (h) | GPU util % | makespan (h) |");
    for t in 0..TIERS {
        print!(" p99 wait tier {t} (h) |");
    }
    println!(" tier 0 / tier 3 | wall time |");
    print!("|---|---:|---:|---:|---:|---:|");
    for _ in 0..TIERS {
        print!("---:|");
    }
    println!("---:|---:|");
}

fn row(o: &Outcome, s: &Summary) {
    print!(
        "| {} | {:.2} | {:.2} | {:.2} | {:.1} | {:.0} |",
        o.name, s.avg_jct_h, s.p50_wait_h, s.p99_wait_h, s.util_pct, s.makespan_h
    );
    for v in s.p99_wait_tier_h {
        print!(" {v:.2} |");
    }
    println!(
        " {:.2} | {:.2} s |",
        s.p99_wait_tier_h[0] / s.p99_wait_tier_h[TIERS - 1],
        o.wall_s
    );
}

/// Tier of each virtual cluster under rotation `r`: the `i`-th by name gets `(i + r) mod 4`.
fn tiers(w: &Workload, r: usize) -> Vec<usize> {
    (0..w.vcs.len()).map(|i| (i + r) % TIERS).collect()
}

pub fn main(traces: &Path) -> Result<(), String> {
    let w = philly::load(traces)?;
    let tier = tiers(&w, 0);
    let demand_gpu_h: f64 = w.jobs.iter().map(|j| j.gpus as f64 * j.work).sum::<f64>() / 3_600.0;
    println!(
        "philly-gavel: {} virtual clusters, {} jobs ({} with a throughput scaled from fewer GPUs), \
         {} V100s, {:.0} GPU-hours of work, last arrival at {:.0} h",
        w.vcs.len(),
        w.jobs.len(),
        w.derived,
        w.gpus,
        demand_gpu_h,
        w.jobs.last().map_or(0.0, |j| j.arrival / 3_600.0)
    );
    for t in 0..TIERS {
        let names: Vec<&str> = (0..w.vcs.len())
            .filter(|&i| tier[i] == t)
            .map(|i| w.vcs[i].as_str())
            .collect();
        let jobs = w.jobs.iter().filter(|j| tier[j.vc] == t).count();
        println!("tier {t} (stake {t}/3): {jobs} jobs, {}", names.join(" "));
    }
    println!();

    let market = |weights, aging_bps| Policy::Market { weights, aging_bps };
    let blind = Weights {
        stake_bps: 0,
        urgency_bps: 10_000,
        complexity_bps: 0,
    };
    let policies = [
        Policy::Fifo,
        Policy::FifoBackfill,
        Policy::Srf,
        market(Weights::DEFAULT, AGING_BPS),
        market(TUNED, AGING_BPS),
        // The control: the same policy blind to stake, to tell the stake's effect on the tier
        // ratio from the effect of each tier's workload mix.
        market(blind, AGING_BPS),
        Policy::Program,
    ];
    /// Where ours (the program's book) is in `policies`.
    const OURS: usize = 6;
    header();
    let mut results = Vec::new();
    for p in policies {
        let o = simulate(&w, &tier, p);
        let s = summarise(&w, &tier, &o);
        row(&o, &s);
        results.push(s);
    }

    println!(
        "\nStake fairness, p99 wait of tier 0 ÷ tier 3, with the tiers rotated over the virtual \
         clusters (rotation r: the i-th cluster by name gets tier (i + r) mod 4), so that every \
         cluster's workload is seen at every tier:\n"
    );
    println!("| policy | r = 0 | r = 1 | r = 2 | r = 3 | worst | avg JCT ÷ FIFO (r = 0) |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let mut worst_ours = f64::NAN;
    for (k, p) in policies.into_iter().enumerate() {
        let mut ratios = Vec::new();
        for r in 0..TIERS {
            let tier = tiers(&w, r);
            let s = summarise(&w, &tier, &simulate(&w, &tier, p));
            ratios.push(s.p99_wait_tier_h[0] / s.p99_wait_tier_h[TIERS - 1]);
        }
        let worst = ratios.iter().copied().fold(0.0, f64::max);
        let jct = results[k].avg_jct_h / results[0].avg_jct_h;
        print!("| {} |", p.name());
        for v in &ratios {
            print!(" {v:.2} |");
        }
        println!(" {worst:.2} | {jct:.3} |");
        if k == OURS {
            worst_ours = worst;
        }
    }
    let jct = results[OURS].avg_jct_h / results[0].avg_jct_h;
    println!(
        "\nGoal for the market ({}): avg JCT ≤ 0.5 × FIFO: {jct:.3} ({}); lowest tier's p99 \
             wait ≤ 2 × highest's in every rotation: worst {worst_ours:.2} ({})",
        policies[OURS].name(),
        if jct <= 0.5 { "met" } else { "NOT met" },
        if worst_ours <= 2.0 { "met" } else { "NOT met" }
    );
    through_the_program(&w, &replay::market());
    through_the_program(&w, &patient_market());
    Ok(())
}

/// Each job's wait (start − arrival, h) and JCT (h) in a replay; `None`: never served.
type Served = Vec<Option<(f64, f64)>>;

/// The served jobs' wait and JCT, by job, of a replay.
fn served(w: &Workload, p: &Played) -> Served {
    w.jobs
        .iter()
        .zip(&p.finish)
        .map(|(j, f)| {
            f.map(|f| {
                (
                    (f - j.arrival - j.work).max(0.0) / 3_600.0,
                    (f - j.arrival) / 3_600.0,
                )
            })
        })
        .collect()
}

/// The second table: the replay through the program's own functions (`market_jct`), and its
/// goals: average JCT ≤ 0.5 × FIFO's (over the jobs both serve), the lowest stake tier's p99
/// wait ≤ 2 × the highest's in every rotation, and no job FIFO with reservations serves left to
/// expire.
fn through_the_program(w: &Workload, m: &Market) {
    let orders = [
        Order::Fifo,
        Order::FifoReserving {
            reservations: usize::MAX,
        },
        Order::Program { reservations: 1 },
        Order::Program {
            reservations: usize::MAX,
        },
    ];
    let servable = (0..w.jobs.len())
        .filter(|&j| market_jct::servable(w, j))
        .count();
    println!(
        "\nThrough the program's functions, a market of aging {} per {} s up to {} bps: \
         {servable} of {} jobs, those of more than 8 GPUs as gangs of 8-GPU machines; deadlines at \
         the market's longest wait ({:.1} h) after arrival.\n",
        m.params.aging_per_interval,
        m.clock_secs,
        m.params.aging_cap_bps,
        w.jobs.len(),
        m.max_wait_secs() as f64 / 3_600.0
    );
    let gangs = w.jobs.iter().filter(|j| j.gpus > 8).count();
    println!("| policy | served | expired | gangs (of {gangs}) served | avg JCT (h) | p50 wait (h) | p99 wait (h) | p99 wait tier 0 (h) | p99 wait tier 3 (h) | worst tier 0 / tier 3 (4 rotations) | wall time |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut runs: Vec<(Served, f64)> = Vec::new();
    for order in orders {
        let mut worst = 0.0f64;
        let mut first = None;
        for r in 0..TIERS {
            let tier = tiers(w, r);
            let base = |j: usize| market_score(m.params.weights(), &w.jobs[j], tier[w.jobs[j].vc]);
            let p = market_jct::play(w, m.params, base, order);
            let s = served(w, &p);
            let p99_of = |t: usize| {
                let mut v: Vec<f64> = s
                    .iter()
                    .zip(&w.jobs)
                    .filter(|(_, j)| tier[j.vc] == t)
                    .filter_map(|(x, _)| x.map(|(wait, _)| wait))
                    .collect();
                percentile(&mut v, 99.0)
            };
            let (t0, t3) = (p99_of(0), p99_of(TIERS - 1));
            worst = worst.max(t0 / t3);
            if r == 0 {
                first = Some((p, s, t0, t3));
            }
        }
        let Some((p, s, t0, t3)) = first else {
            continue;
        };
        let done: Vec<(f64, f64)> = s.iter().flatten().copied().collect();
        let gangs_served = s
            .iter()
            .zip(&w.jobs)
            .filter(|(x, j)| x.is_some() && j.gpus > 8)
            .count();
        let mut waits: Vec<f64> = done.iter().map(|(wait, _)| *wait).collect();
        let avg = done.iter().map(|(_, jct)| jct).sum::<f64>() / done.len().max(1) as f64;
        println!(
            "| {} | {} | {} | {gangs_served} | {avg:.2} | {:.2} | {:.2} | {t0:.2} | {t3:.2} | {worst:.2} | {:.1} s |",
            p.name,
            done.len(),
            servable - done.len(),
            percentile(&mut waits, 50.0),
            percentile(&mut waits, 99.0),
            p.wall_s
        );
        runs.push((s, worst));
    }
    // Goals, for the market with a reservation per machine against FIFO and FIFO with
    // reservations, on the jobs both serve.
    let (fifo, fifo_reserving, (ours, worst)) = (&runs[0].0, &runs[1].0, &runs[3]);
    let both: Vec<(f64, f64, f64)> = fifo
        .iter()
        .zip(ours)
        .zip(&w.jobs)
        .filter_map(|((a, b), j)| Some((a.as_ref()?.1, b.as_ref()?.1, j.work / 3_600.0)))
        .collect();
    let sum = |f: fn(&(f64, f64, f64)) -> f64| both.iter().map(f).sum::<f64>();
    let ratio = sum(|x| x.1) / sum(|x| x.0);
    // No order finishes a job before its run: the JCT's floor on these jobs.
    let floor = sum(|x| x.2) / sum(|x| x.0);
    let lost = fifo_reserving
        .iter()
        .zip(ours)
        .filter(|(a, b)| a.is_some() && b.is_none())
        .count();
    println!(
        "\nThe market ({}) against FIFO on the {} jobs both serve: avg JCT × {ratio:.3} (goal ≤ 0.5: {}; \
         their run times alone are × {floor:.3}); jobs FIFO with reservations serves that expire \
         unserved in the market: {lost} (goal 0: {}); worst tier 0 / tier 3 p99 wait {worst:.2} \
         (goal ≤ 2: {})",
        orders[3].name(),
        both.len(),
        if ratio <= 0.5 { "met" } else { "NOT met" },
        if lost == 0 { "met" } else { "NOT met" },
        if *worst <= 2.0 { "met" } else { "NOT met" }
    );
}
