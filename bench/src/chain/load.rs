//! One market's transactions on a cluster: jobs of a real trace, scaled to a market of
//! `machines` 8-GPU machines kept fully leased, turned into the transactions the market's parties
//! send, and those into compute units per 400 ms slot for the block and for each market-wide
//! account, from the measured [`Costs`].
//!
//! Each job is a queue bid: `place_bid` when it arrives, `allocate` as soon as an agent can see
//! the bid (the market is kept full, so a job starts as one ends; agents read the chain at
//! confirmed commitment, [`CONFIRMED_SLOTS`] after the slot the bid landed in), `end_lease`
//! when it ends. Every machine sends one proof round
//! every `span` intervals (its leases in one `submit_usage`), which also keeps it alive (no
//! heartbeat), and claims its pay once per claim interval. The trace is copied as many times as
//! the market has GPUs over the trace's cluster, each copy at its own phase, and its arrivals
//! are stretched or squeezed until the jobs' GPU-seconds fill the market exactly: arrivals per
//! second are then the market's GPUs over the mean GPU-seconds of a job, whatever the trace's own
//! load was. Durations stay as the trace has them (leases of hours).

use std::collections::HashMap;
use std::path::Path;

use super::measure::{Costs, Sample, Shared};
use crate::{philly, trace};

/// GPUs per machine of the modelled market.
pub const GPUS_PER_MACHINE: u32 = 8;
/// Seconds per slot: the cluster's target (`solana_clock::DEFAULT_MS_PER_SLOT`).
pub const SLOT_SECS: f64 = solana_clock::DEFAULT_MS_PER_SLOT as f64 / 1_000.0;

/// Slots from the one a transaction lands in to the one in which an agent, woken by the
/// account's notification at confirmed commitment, can answer it: the cluster's optimistic
/// confirmation takes about two slots.
pub const CONFIRMED_SLOTS: u64 = 2;

pub struct Job {
    pub gpus: u32,
    /// Seconds from the trace's start.
    pub arrival: f64,
    pub duration: f64,
}

pub struct Trace {
    pub name: &'static str,
    /// GPUs of the trace's cluster.
    pub gpus: u32,
    /// Jobs of one machine's GPUs at most, by arrival.
    pub jobs: Vec<Job>,
    /// Jobs left out: more GPUs than one machine has (gang leases are not built) or no GPU.
    pub left_out: usize,
}

impl Trace {
    /// Gavel's Philly-derived jobs: arrival and run time on V100s.
    pub fn philly(traces: &Path) -> Result<Trace, String> {
        let w = philly::load(traces)?;
        let all = w.jobs.len();
        let jobs: Vec<Job> = w
            .jobs
            .iter()
            .filter(|j| j.gpus <= GPUS_PER_MACHINE)
            .map(|j| Job {
                gpus: j.gpus,
                arrival: j.arrival,
                duration: j.work,
            })
            .collect();
        Ok(Trace {
            name: "Philly",
            gpus: w.gpus,
            left_out: all - jobs.len(),
            jobs,
        })
    }

    /// Alibaba's openb pods that ask for GPUs: creation to deletion. A pod sharing a GPU
    /// (`gpu_milli` < 1000) leases a whole one here.
    pub fn openb(traces: &Path) -> Result<Trace, String> {
        let dir = traces.join("alibaba-gpu-v2023");
        let nodes = trace::read_csv(&dir.join("openb_node_list_gpu_node.csv"))?;
        let gpus = nodes
            .iter()
            .map(|r| trace::num::<u32>(r, "gpu"))
            .sum::<Result<u32, String>>()?;
        let pods = trace::read_csv(&dir.join("openb_pod_list_default.csv"))?;
        let mut jobs = Vec::new();
        for p in &pods {
            let n: u32 = trace::num(p, "num_gpu")?;
            let created: f64 = trace::num(p, "creation_time")?;
            let deleted: f64 = trace::num(p, "deletion_time")?;
            if (1..=GPUS_PER_MACHINE).contains(&n) && deleted > created {
                jobs.push(Job {
                    gpus: n,
                    arrival: created,
                    duration: deleted - created,
                });
            }
        }
        jobs.sort_by(|a, b| a.arrival.total_cmp(&b.arrival));
        Ok(Trace {
            name: "openb",
            gpus,
            left_out: pods.len() - jobs.len(),
            jobs,
        })
    }
}

/// The market's parameters that set its traffic.
#[derive(Clone, Copy)]
pub struct Market {
    pub machines: u64,
    /// Billing interval, seconds.
    pub interval_secs: f64,
    /// Intervals one proof round covers (the agent's `proof_span`).
    pub span: f64,
    /// Seconds between a machine's pay claims.
    pub claim_secs: f64,
}

/// Which instructions the jobs' bids cost.
pub enum Mix {
    /// The book holds the waiting bids only.
    Honest,
    /// An attacker keeps the book full of bids no machine serves, ranked above every honest
    /// bid, of the shape that costs a busy machine most to turn away: each honest bid evicts the
    /// worst entry to get in, and each allocation is preceded by the machine's walk of the
    /// 4,095 entries above (`walk_book`, one transaction after the other: each lands when the
    /// last is confirmed), which writes the machine alone.
    FullBook,
}

/// Compute units per slot (as [`Units`] counts them): the block's and each market-wide
/// account's.
pub struct Load {
    /// Jobs (bids) per second.
    pub jobs_per_sec: f64,
    /// Leases per machine in the proof round the model charges.
    pub round_leases: usize,
    /// Mean units per slot of the block, by [`Shared::ALL`].
    pub mean: [f64; 4],
    /// Units of the busiest slot, by [`Shared::ALL`].
    pub busiest: [f64; 4],
    pub block_mean: f64,
    pub block_busiest: f64,
}

/// Which of a transaction's costs counts against the limits.
#[derive(Clone, Copy)]
pub enum Units {
    /// What the leader reserves while it packs the transaction (its compute-unit limit).
    Reserved,
    /// What the block is charged once it ran (the units it used): the leader's cost tracker
    /// replaces the reservation with this.
    Charged,
}

impl Units {
    fn of(self, s: &Sample) -> f64 {
        match self {
            Units::Reserved => s.reserved as f64,
            Units::Charged => s.charged as f64,
        }
    }
}

/// Adds `s`'s units to `slot`'s tallies.
fn charge(slot: &mut [f64; 5], s: &Sample, units: Units) {
    for (i, shared) in Shared::ALL.iter().enumerate() {
        if s.writes_shared(*shared) {
            slot[i] += units.of(s);
        }
    }
    slot[4] += units.of(s);
}

pub fn simulate(trace: &Trace, market: Market, costs: &Costs, mix: &Mix, units: Units) -> Load {
    let (place, walks, allocate) = match mix {
        Mix::Honest => (&costs.place_bid, &[][..], &costs.allocate),
        Mix::FullBook => (
            &costs.place_evicting,
            &costs.walk_deep[..],
            &costs.allocate_deep,
        ),
    };
    let capacity = market.machines as f64 * GPUS_PER_MACHINE as f64;
    let first = trace.jobs.first().map_or(0.0, |j| j.arrival);
    // The trace repeats with the period of its arrivals plus one mean gap: its last job does
    // not land on its first.
    let last = trace.jobs.last().map_or(0.0, |j| j.arrival);
    let span = (last - first) * (1.0 + 1.0 / trace.jobs.len().max(1) as f64);
    let gpu_secs: f64 = trace.jobs.iter().map(|j| j.gpus as f64 * j.duration).sum();
    let copies = (capacity / trace.gpus as f64).ceil().max(1.0) as u64;
    // Arrivals × stretch: the copies' GPU-seconds over the stretched span fill the market.
    let stretch = copies as f64 * gpu_secs / (capacity * span);
    let mut slots: HashMap<u64, [f64; 5]> = HashMap::new();
    let slot_of = |t: f64| (t / SLOT_SECS) as u64;
    for copy in 0..copies {
        // Phases spread by the golden ratio: no two copies arrive together by construction.
        let phase = (copy as f64 * 0.618_033_988_749_895).fract() * span;
        for j in &trace.jobs {
            let at = ((j.arrival - first + phase) % span) * stretch;
            charge(slots.entry(slot_of(at)).or_default(), place, units);
            // The agent's walk, then its allocation, each once the last is confirmed.
            for (k, s) in walks.iter().chain([allocate]).enumerate() {
                let slot = slot_of(at) + CONFIRMED_SLOTS * (k as u64 + 1);
                charge(slots.entry(slot).or_default(), s, units);
            }
            charge(
                slots.entry(slot_of(at + j.duration)).or_default(),
                &costs.end_lease,
                units,
            );
        }
    }
    let jobs = copies as f64 * trace.jobs.len() as f64;
    let horizon = span * stretch;
    let total_slots = (horizon / SLOT_SECS).max(1.0);
    // Steady parts: a round per machine every `span` intervals and a claim per claim interval,
    // spread evenly over the slots (each machine keeps its own phase).
    let mean_gpus = gpu_secs
        / trace
            .jobs
            .iter()
            .map(|j| j.duration)
            .sum::<f64>()
            .max(f64::MIN_POSITIVE);
    let round_leases = (GPUS_PER_MACHINE as f64 / mean_gpus)
        .round()
        .clamp(1.0, GPUS_PER_MACHINE as f64) as usize;
    let round = costs.round(round_leases);
    let per_slot = |every_secs: f64| market.machines as f64 * SLOT_SECS / every_secs;
    let mut steady = [0.0; 5];
    for (s, rate) in [
        (round, per_slot(market.interval_secs * market.span)),
        (&costs.claim_pay, per_slot(market.claim_secs)),
    ] {
        let mut one = [0.0; 5];
        charge(&mut one, s, units);
        for (acc, u) in steady.iter_mut().zip(one) {
            *acc += u * rate;
        }
    }
    let mut mean = [0.0; 5];
    let mut busiest = [0.0f64; 5];
    for slot in slots.values() {
        for i in 0..5 {
            mean[i] += slot[i];
            busiest[i] = busiest[i].max(slot[i] + steady[i]);
        }
    }
    for i in 0..5 {
        mean[i] = mean[i] / total_slots + steady[i];
        busiest[i] = busiest[i].max(steady[i]);
    }
    Load {
        jobs_per_sec: jobs / horizon,
        round_leases,
        mean: [mean[0], mean[1], mean[2], mean[3]],
        busiest: [busiest[0], busiest[1], busiest[2], busiest[3]],
        block_mean: mean[4],
        block_busiest: busiest[4],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A transaction of `units` (reserved twice that) writing `shared`.
    fn sample(units: u64, shared: &[Shared]) -> Sample {
        Sample {
            units,
            reserved: 2 * units,
            charged: units,
            bytes: 500,
            locks: 8,
            shared: shared.to_vec(),
            writes: shared.len() + 2,
        }
    }

    /// Bids write the book and the market, settlements and claims the market and the vault,
    /// rounds nothing market-wide.
    fn costs() -> Costs {
        let bid = sample(1_000, &[Shared::Market, Shared::QueueBook]);
        let settle = sample(100, &[Shared::Market, Shared::PaymentVault]);
        let round = sample(10, &[]);
        Costs {
            place_bid: bid.clone(),
            allocate: bid.clone(),
            rounds: [round.clone(), round.clone(), round.clone(), round],
            heartbeat: sample(1, &[]),
            claim_pay: settle.clone(),
            end_lease: settle,
            cancel_bid: bid.clone(),
            place_deep: bid.clone(),
            walk_deep: vec![sample(1_000_000, &[]); 3],
            allocate_deep: sample(50_000, &[Shared::Market, Shared::QueueBook]),
            place_evicting: bid,
            attacker_gpus: 0,
        }
    }

    /// One 1-GPU job of 100 s every 1,000 s on an 80-GPU cluster (0.125 % loaded), which the
    /// 80-GPU market takes as one copy, arrivals squeezed to 1.26 s apart.
    fn sparse() -> Trace {
        Trace {
            name: "sparse",
            gpus: 80,
            jobs: (0..100)
                .map(|i| Job {
                    gpus: 1,
                    arrival: 1_000.0 * i as f64,
                    duration: 100.0,
                })
                .collect(),
            left_out: 0,
        }
    }

    const MARKET: Market = Market {
        machines: 10,
        interval_secs: 60.0,
        span: 2.0,
        claim_secs: 3_600.0,
    };

    #[test]
    fn the_jobs_fill_the_market_whatever_the_traces_own_load() {
        let l = simulate(&sparse(), MARKET, &costs(), &Mix::Honest, Units::Charged);
        // 80 GPUs over 100 GPU-seconds a job.
        assert!((l.jobs_per_sec - 0.8).abs() < 0.01, "{}", l.jobs_per_sec);
        // One lease a machine's round: every job takes one GPU of eight.
        assert_eq!(l.round_leases, 8);
    }

    #[test]
    fn an_allocation_lands_apart_from_its_placement_and_rounds_write_nothing_shared() {
        let l = simulate(&sparse(), MARKET, &costs(), &Mix::Honest, Units::Charged);
        let book = Shared::ALL
            .iter()
            .position(|s| *s == Shared::QueueBook)
            .unwrap();
        let vault = Shared::ALL
            .iter()
            .position(|s| *s == Shared::PaymentVault)
            .unwrap();
        // Arrivals three or four slots apart: a placement and its allocation (two slots later)
        // never share a slot, nor do two jobs' bids.
        assert_eq!(l.busiest[book], 1_000.0);
        // The vault: settlements, and claims spread over the slots.
        assert!(l.busiest[vault] >= 100.0 && l.busiest[vault] < 200.0);
        assert!(l.block_busiest > l.busiest[book]);
    }

    #[test]
    fn an_attacker_s_full_book_charges_every_allocation_its_walk_and_reserves_more() {
        let c = costs();
        // The market: an allocation below the full book, perhaps beside a placement, a
        // settlement and the claims; the machine's walks before it write nothing shared, but
        // take their share of the block.
        let full = simulate(&sparse(), MARKET, &c, &Mix::FullBook, Units::Charged);
        assert!(
            (50_000.0..51_200.0).contains(&full.busiest[0]),
            "{}",
            full.busiest[0]
        );
        assert!(full.block_busiest >= 1_000_000.0, "{}", full.block_busiest);
        let reserved = simulate(&sparse(), MARKET, &c, &Mix::FullBook, Units::Reserved);
        assert!(
            (100_000.0..102_400.0).contains(&reserved.busiest[0]),
            "{}",
            reserved.busiest[0]
        );
    }
}
