//! The FGD protocol (see shared/notes/fgd-protocol.md): pods arrive one by one, never leave,
//! and a pod that fits nowhere is dropped. After each arrival the allocated and the arrived GPU
//! milli are recorded; the curve is read off them the way the peer's analysis scripts do.

use std::path::Path;
use std::time::Instant;

use gpu_market_core::placement::{
    BestFit, Cluster, Fgd, FragModel, PackingPlan, Planned, Pod, Policy, Random, SplitMix64,
};

use crate::trace::{self, Trace};

/// Arrived share of capacity, in %, at which the allocation ratio is reported.
pub(crate) const POINTS: [u32; 12] = [50, 70, 80, 85, 88, 90, 92, 95, 100, 110, 120, 130];

/// The peer's seed-42 results (alloc % at 100 % and 130 % arrived).
const PEER: [(&str, f64, f64); 3] = [
    ("Random", 86.17, 87.26),
    ("BestFit", 92.94, 93.13),
    ("FGD", 95.14, 95.29),
];

struct Run {
    name: String,
    curve: Vec<Option<f64>>,
    frag_ratio: f64,
    placed: usize,
    failed: usize,
    wall_s: f64,
}

/// Tie-break rank permutations, and other arrival orders, tried besides the peer's: to tell a
/// policy's gain from the luck of its ties and of one order.
const VARIANTS: u64 = 4;

/// Builds a policy in its initial state from the workload's typical pods and packing plan.
type MakePolicy = fn(&FragModel, &PackingPlan) -> Box<dyn Policy>;

/// A seeded permutation of `0..n` (Fisher–Yates): node ranks for ties.
fn permuted_ranks(n: usize, seed: u64) -> Vec<u32> {
    let mut rng = SplitMix64::new(seed);
    let mut ranks: Vec<u32> = (0..n as u32).collect();
    for i in (1..n).rev() {
        ranks.swap(i, rng.below(i as u64 + 1) as usize);
    }
    ranks
}

/// Another arrival order made the way the peer inflates its workload: the original pods
/// shuffled, then copies drawn at random while the arrived GPU milli stays within 130 % of
/// `capacity`. Our RNG, not the peer's, so these are new orders, not its seeds 43..51.
pub(crate) fn resampled_arrivals(original: &[Pod], capacity: u64, seed: u64) -> Vec<Pod> {
    let mut rng = SplitMix64::new(seed);
    let mut pods = original.to_vec();
    for i in (1..pods.len()).rev() {
        pods.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let limit = capacity * 130 / 100;
    let mut arrived: u64 = pods.iter().map(|p| p.total_gpu_milli() as u64).sum();
    while !original.is_empty() {
        let copy = original[rng.below(original.len() as u64) as usize];
        arrived += copy.total_gpu_milli() as u64;
        if arrived > limit {
            break;
        }
        pods.push(copy);
    }
    pods
}

fn run(
    trace: &Trace,
    arrivals: &[Pod],
    rank: &[u32],
    frag: &FragModel,
    policy: &mut dyn Policy,
) -> Result<Run, String> {
    let mut cluster =
        Cluster::new(trace.nodes.clone(), rank.to_vec()).map_err(|e| e.to_string())?;
    let total = cluster.total_gpu_milli();
    let mut records = Vec::with_capacity(arrivals.len());
    let (mut arrived, mut allocated, mut placed, mut failed) = (0u64, 0u64, 0, 0);
    let start = Instant::now();
    for pod in arrivals {
        arrived += pod.total_gpu_milli() as u64;
        match cluster
            .place(policy, pod)
            .map_err(|e| format!("{}: {e}", policy.name()))?
        {
            Some(_) => {
                allocated += pod.total_gpu_milli() as u64;
                placed += 1;
            }
            None => failed += 1,
        }
        records.push((arrived, allocated));
    }
    let wall_s = start.elapsed().as_secs_f64();
    debug_assert_eq!(allocated, cluster.allocated_gpu_milli());

    let (mut fragmented, mut idle) = (0u128, 0u128);
    for n in cluster.nodes() {
        fragmented += frag.node_frag(n.cpu_free(), n.model(), n.gpu_free()) as u128;
        idle += n.idle_gpu_milli() as u128 * frag.weight() as u128;
    }
    Ok(Run {
        name: policy.name().to_string(),
        curve: curve(&records, total),
        frag_ratio: 100.0 * fragmented as f64 / idle.max(1) as f64,
        placed,
        failed,
        wall_s,
    })
}

/// The peer's reading (experiments/analysis/merge_alloc_discrete): every record whose arrived
/// share rounds to `x` % counts, and the allocation % (rounded to 2 places) is averaged over
/// them; with none, the records within `x ± 1` are used.
pub(crate) fn curve(records: &[(u64, u64)], total: u64) -> Vec<Option<f64>> {
    let pct = |v: u64| 100.0 * v as f64 / total as f64;
    let rows: Vec<(f64, f64)> = records
        .iter()
        .map(|&(arr, all)| {
            (
                pct(arr).round_ties_even(),
                (pct(all) * 100.0).round() / 100.0,
            )
        })
        .collect();
    let mean = |lo: f64, hi: f64| {
        let sel: Vec<f64> = rows
            .iter()
            .filter(|r| r.0 >= lo && r.0 <= hi)
            .map(|r| r.1)
            .collect();
        (!sel.is_empty()).then(|| sel.iter().sum::<f64>() / sel.len() as f64)
    };
    POINTS
        .iter()
        .map(|&x| {
            let x = x as f64;
            mean(x, x)
                .or_else(|| mean(x - 1.0, x + 1.0))
                .map(|v| (v * 100.0).round() / 100.0)
        })
        .collect()
}

/// Random, BestFit, FGD and FGD with the packing plan on the trace's arrivals and ranks.
fn policy_runs(trace: &Trace) -> Result<Vec<Run>, String> {
    let frag = FragModel::from_pods(&trace.original, 95);
    let plan = PackingPlan::from_pods(&trace.original);
    let mut policies: Vec<Box<dyn Policy>> = vec![
        Box::new(Random::new(42)),
        Box::new(BestFit::new(128_000, 8_000)),
        Box::new(Fgd::new(frag.clone())),
        Box::new(Planned::new(frag.clone(), plan)),
    ];
    policies
        .iter_mut()
        .map(|p| run(trace, &trace.arrivals, &trace.rank, &frag, p.as_mut()))
        .collect()
}

/// An allocation curve: the allocation % at each of [`POINTS`].
pub(crate) type Curve = Vec<Option<f64>>;

/// Each policy's name and allocation curve on the trace's arrivals.
pub(crate) fn policy_curves(trace: &Trace) -> Result<Vec<(String, Curve)>, String> {
    Ok(policy_runs(trace)?
        .into_iter()
        .map(|r| (r.name, r.curve))
        .collect())
}

pub fn main(traces: &Path) -> Result<(), String> {
    let trace = trace::load(traces)?;
    if let Some(&last) = trace.arrival_cum_gpu_milli.last() {
        let ours: u64 = trace
            .arrivals
            .iter()
            .map(|p| p.total_gpu_milli() as u64)
            .sum();
        if ours != last {
            return Err(format!(
                "arrived GPU milli {ours} != the trace's cum_gpu_milli {last}"
            ));
        }
    }
    let runs = policy_runs(&trace)?;
    let frag = FragModel::from_pods(&trace.original, 95);
    let plan = PackingPlan::from_pods(&trace.original);
    let total_gpus: u64 = trace.nodes.iter().map(|n| n.num_gpus() as u64).sum();
    println!(
        "openb: {} nodes, {} GPUs, {} original pods ({} typical shapes cover {} of them), {} arrivals\n",
        trace.nodes.len(),
        total_gpus,
        trace.original.len(),
        frag.typical().len(),
        frag.weight(),
        trace.arrivals.len()
    );

    print!("| policy |");
    for x in POINTS {
        print!(" {x}% |");
    }
    println!(" frag % at end | placed | failed | wall time |");
    print!("|---|");
    for _ in POINTS {
        print!("---:|");
    }
    println!("---:|---:|---:|---:|");
    for r in &runs {
        print!("| {} |", r.name);
        for v in &r.curve {
            match v {
                Some(v) => print!(" {v:.2} |"),
                None => print!(" - |"),
            }
        }
        println!(
            " {:.2} | {} | {} | {:.3} s |",
            r.frag_ratio, r.placed, r.failed, r.wall_s
        );
    }

    println!(
        "\nGPU allocation % at 130 % arrived with the tie-break ranks permuted (seeds \
         1..={VARIANTS}), and on other arrival orders made the peer's way (originals shuffled, \
         then resampled to 130 %; seeds 1..={VARIANTS}, with ranks permuted by seed + 100):\n"
    );
    print!("| policy |");
    for s in 1..=VARIANTS {
        print!(" ranks {s} |");
    }
    for s in 1..=VARIANTS {
        print!(" order {s} |");
    }
    println!(" mean | peer's order and ranks |");
    print!("|---|");
    for _ in 0..=2 * VARIANTS {
        print!("---:|");
    }
    println!("---:|");
    let last = POINTS.len() - 1;
    let capacity: u64 = trace
        .nodes
        .iter()
        .map(|n| n.num_gpus() as u64 * 1_000)
        .sum();
    let mut variants: Vec<(Vec<Pod>, Vec<u32>)> = (1..=VARIANTS)
        .map(|s| (trace.arrivals.clone(), permuted_ranks(trace.nodes.len(), s)))
        .collect();
    variants.extend((1..=VARIANTS).map(|s| {
        (
            resampled_arrivals(&trace.original, capacity, s),
            permuted_ranks(trace.nodes.len(), s + 100),
        )
    }));
    // Fresh policy state for every run.
    let fragmentation_policies: [MakePolicy; 2] = [
        |f, _| Box::new(Fgd::new(f.clone())),
        |f, p| Box::new(Planned::new(f.clone(), p.clone())),
    ];
    for make in fragmentation_policies {
        let name = make(&frag, &plan).name().to_string();
        print!("| {name} |");
        let mut sum = 0.0;
        for (arrivals, rank) in &variants {
            let v = run(&trace, arrivals, rank, &frag, make(&frag, &plan).as_mut())?.curve[last]
                .unwrap_or(f64::NAN);
            sum += v;
            print!(" {v:.2} |");
        }
        let peer = runs
            .iter()
            .find(|r| r.name == name)
            .and_then(|r| r.curve[last])
            .unwrap_or(f64::NAN);
        println!(" {:.2} | {peer:.2} |", sum / variants.len() as f64);
    }

    println!("\nAgainst the peer (seed 42), GPU allocation % at 100 % / 130 % arrived:\n");
    println!("| policy | ours 100% | peer 100% | Δ | ours 130% | peer 130% | Δ |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let at = |r: &Run, x: u32| {
        POINTS
            .iter()
            .position(|&p| p == x)
            .and_then(|i| r.curve[i])
            .unwrap_or(f64::NAN)
    };
    for (name, p100, p130) in PEER {
        if let Some(r) = runs.iter().find(|r| r.name == name) {
            let (o100, o130) = (at(r, 100), at(r, 130));
            println!(
                "| {name} | {o100:.2} | {p100:.2} | {:+.2} | {o130:.2} | {p130:.2} | {:+.2} |",
                o100 - p100,
                o130 - p130
            );
        }
    }
    Ok(())
}
