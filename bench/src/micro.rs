//! `gpu-market-bench micro`: nanoseconds per call of the core's hot functions, on one core.
//! Inputs vary per iteration (from a cheap counter) and results go through `black_box`, so
//! the compiler can neither hoist nor drop the work.

use std::hint::black_box;
use std::time::Instant;

use gpu_market_core::placement::{explain, Cluster, ModelId, ModelSet, Node, Pod};
use gpu_market_core::pricing::{demand_bps, reserve_price};
use gpu_market_core::score::{aged_score, base_score, Inputs, Weights};

/// Runs `f(i)` for `i in 0..iters` and returns ns per call.
fn time(iters: u64, mut f: impl FnMut(u64) -> u64) -> f64 {
    let mut acc = 0u64;
    for i in 0..iters / 10 {
        acc = acc.wrapping_add(f(black_box(i)));
    }
    let start = Instant::now();
    for i in 0..iters {
        acc = acc.wrapping_add(f(black_box(i)));
    }
    let ns = start.elapsed().as_nanos() as f64 / iters as f64;
    black_box(acc);
    ns
}

pub fn main() -> Result<(), String> {
    let start = Instant::now();
    let mut rows: Vec<(&str, u64, f64)> = Vec::new();

    const N: u64 = 20_000_000;
    rows.push((
        "base_score + aged_score",
        N,
        time(N, |i| {
            let inputs = Inputs {
                stake: i & 0xffff,
                stake_bound: 50_000,
                urgency_premium: i & 0xfff,
                urgency_bound: 4_096,
                spend_per_hour: (i & 0xfffff) * 80,
                spend_bound: 8 * 80 * 1_000,
            };
            aged_score(base_score(Weights::DEFAULT, &inputs), 10, i & 0x3f, 3_000)
        }),
    ));
    rows.push((
        "demand_bps + reserve_price",
        N,
        time(N, |i| {
            let d = demand_bps(i & 0x3ff, 500, 20_000);
            reserve_price(2_000_000 + (i & 0xffff), d, 2_500, 8_000 + (i & 0xfff)).unwrap_or(0)
        }),
    ));

    let mut node = Node::new(128_000, 1 << 20, ModelId(1), 8, 4).map_err(|e| e.to_string())?;
    let share = Pod::new(4_000, 16_384, 1, 300, ModelSet::ANY).map_err(|e| e.to_string())?;
    node.allocate(&share, 0b0000_0001)
        .map_err(|e| e.to_string())?;
    let shapes: Vec<Pod> = [
        (1u8, 500u16),
        (1, 1_000),
        (2, 1_000),
        (4, 1_000),
        (8, 1_000),
    ]
    .iter()
    .map(|&(n, m)| Pod::new(8_000, 32_768, n, m, ModelSet::ANY).map_err(|e| e.to_string()))
    .collect::<Result<_, _>>()?;
    rows.push((
        "Node::feasible (8 GPUs, 5 shapes)",
        N,
        time(N, |i| node.feasible(&shapes[(i % 5) as usize]) as u64),
    ));

    // A cluster of 1,250 such nodes: the explanation scans all of them.
    let cluster = Cluster::in_order(vec![node.clone(); 1_250]).map_err(|e| e.to_string())?;
    const M: u64 = 20_000;
    rows.push((
        "explain (1,250 nodes)",
        M,
        time(M, |i| {
            explain(&cluster, &shapes[(i % 5) as usize]).fits as u64
        }),
    ));

    println!("| operation | iterations | ns/op |");
    println!("|---|---:|---:|");
    for (name, iters, ns) in rows {
        println!("| {name} | {iters} | {ns:.1} |");
    }
    println!("\nwall time {:.2} s", start.elapsed().as_secs_f64());
    Ok(())
}
