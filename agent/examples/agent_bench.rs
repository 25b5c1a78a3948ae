//! The agent's latency and memory, on the real parts (local validator, Docker engine, registry;
//! SIMULATED GPUs): how long from a bid's placement being confirmed on chain to its container
//! running (image already cached), and the agent's resident memory idle and with 8 leases.
//!
//! `cargo build --release -p gpu-market-agent && cargo run -p gpu-market-agent --example
//! agent_bench` (needs `scripts/engine.sh start` and its env, and the program's SBF build). The
//! agent measured is the release build (`target/release/gpu-market-agent`, or
//! `$GPU_MARKET_AGENT_BIN`); this harness only drives it. Prints a table.

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use gpu_market::pda;
use gpu_market_agent::docker::DockerEngine;
use gpu_market_agent::runtime::pinned_reference;
use support::*;

const LEASES: usize = 8;

/// Resident and peak resident memory of `pid`, in KiB.
fn rss_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let live = live_market(LEASES as u8).await;
    let dir = tempfile::tempdir().unwrap();
    let config = Agent::write_config(&live, dir.path(), LEASES);
    let (image, digest) = worker_image();
    let engine = DockerEngine::connect(&engine_env("DOCKER_HOST"), "bench")
        .await
        .unwrap();
    engine
        .pull(&pinned_reference(&image, &digest).unwrap())
        .await
        .expect("cache the worker image");
    let mut clients = Vec::new();
    for _ in 0..LEASES {
        clients.push(live.client(100 * TOKEN, 0).await.unwrap());
    }

    let agent = Agent::start(&config);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let idle = rss_kib(agent.pid());

    let docker = docker().await;
    let mut latencies = Vec::new();
    for (i, client) in clients.iter().enumerate() {
        let now = live.cluster.now().await.unwrap();
        let mut args = queue_bid(i as u64 + 1, 600, now);
        args.gib_per_gpu = 24;
        let bid = live.place(client, args).await.unwrap();
        let placed = Instant::now();
        let lease = pda::lease(&bid).0;
        loop {
            if containers_of(&docker, &lease)
                .await
                .iter()
                .any(|(_, running)| *running)
            {
                break;
            }
            assert!(
                placed.elapsed() < Duration::from_secs(60),
                "lease {i} not running within 60 s; agent log:\n{}",
                agent.log()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        latencies.push(placed.elapsed());
    }
    tokio::time::sleep(Duration::from_secs(2 * INTERVAL as u64)).await;
    let busy = rss_kib(agent.pid());

    let mut sorted = latencies.clone();
    sorted.sort();
    let ms = |d: Duration| format!("{:.0} ms", d.as_secs_f64() * 1e3);
    println!("| measure | value | goal |");
    println!("|---|---|---|");
    println!(
        "| bid confirmed → container running, p50 ({} leases, image cached) | {} | ≤ 1 s |",
        LEASES,
        ms(percentile(&sorted, 50))
    );
    println!(
        "| bid confirmed → container running, max | {} | |",
        ms(*sorted.last().unwrap())
    );
    println!(
        "| agent RSS idle (peak) | {:.1} MiB ({:.1}) | ≤ 30 MiB |",
        idle.0 as f64 / 1024.0,
        idle.1 as f64 / 1024.0
    );
    println!(
        "| agent RSS with {LEASES} leases (peak) | {:.1} MiB ({:.1}) | ≤ 30 MiB |",
        busy.0 as f64 / 1024.0,
        busy.1 as f64 / 1024.0
    );
    println!(
        "latencies: {:?}",
        latencies.iter().map(|d| ms(*d)).collect::<Vec<_>>()
    );
    // The leases run for 10 minutes: the drain stops them early, proves what ran and ends them
    // (or leaves the rest to the next start when its deadline passes).
    let drain = Instant::now();
    let (status, _) = agent.terminate();
    println!(
        "SIGTERM drain of {LEASES} leases: {} after {:.1} s",
        if status.success() {
            "finished"
        } else {
            "deadline passed"
        },
        drain.elapsed().as_secs_f64()
    );
}
