//! The agent's latency, memory and RPC load, on the real parts (local validator, Docker engine,
//! registry; SIMULATED GPUs): how long from a bid's placement being confirmed on chain to its
//! container running (image already cached) while `AGENT_BENCH_LEASES` leases (8 by default;
//! 64 share the 8 GPUs in 3-GiB slices) run, with `AGENT_BENCH_BOOK` unservable bids (0 by
//! default; at most 4,088: the book holds 4,096, and the leases' own bids, from clients without
//! stake, must find room) ranked above them in the queue book; the agent's resident memory idle and
//! with every lease; the JSON-RPC requests it sends per minute idle and busy (its
//! `gpu_market_agent_rpc_requests_total`); and the `drain` of every lease. The leases run the
//! `worker` image, which keeps its CPU share busy (the simulated GPUs' load follows it), or with
//! `AGENT_BENCH_WORKLOAD=idler` the `idler` image, which sleeps: 64 busy workers at their share
//! ask for more CPU than a 2-core machine has. Each GPU's CPU share is 0.05 CPU, or
//! `AGENT_BENCH_MILLICPUS` thousandths of a CPU. With `AGENT_BENCH_MACHINES=2` a second host's
//! machine of the same GPUs, terms and electricity joins the market with its own agent: the
//! packing policy each agent runs decides which machine takes each bid, and the leases share
//! both machines' 16 GPUs; each agent's memory and requests are reported. With
//! `AGENT_BENCH_MARKET=1000` the market has that many machines in all: the others (8 GPUs of a
//! class the bench's bids do not ask for, 100 a host) heartbeat at the agent's default period
//! from the bench, so that each agent's packing policy reads, and its feed follows, a market of
//! that size. Each agent's JSON-RPC bytes and its websocket notification bytes per minute are
//! reported beside its requests. `AGENT_BENCH_INTERVAL_SECS=60` bills every 60 s (the
//! recommended interval) instead of the tests' 4 s, with the agent's default heartbeat and the
//! README's 5 s poll.
//!
//! `cargo build --release -p gpu-market-agent && cargo run --release -p gpu-market-agent
//! --example agent_bench` (needs `scripts/engine.sh start` and its env, and the program's SBF
//! build). The agent measured is the release build (`target/release/gpu-market-agent`, or
//! `$GPU_MARKET_AGENT_BIN`); this harness only drives it. Prints a table.

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bollard::query_parameters::EventsOptions;
use futures_util::StreamExt;
use gpu_market::pda;
use gpu_market_agent::docker::DockerEngine;
use gpu_market_agent::runtime::{pinned_reference, LABEL_LEASE};
use gpu_market_tests::live::LiveMarket;
use solana_signer::Signer;
use support::*;

/// The machine's GPUs, 24 GiB each.
const GPUS: u8 = 8;

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .map(|v| v.parse().unwrap_or_else(|_| panic!("{name}: not a number")))
        .unwrap_or(default)
}

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

/// The agent's JSON-RPC requests, JSON-RPC bytes and websocket notification bytes so far, from
/// its `/metrics`.
fn rpc_traffic(metrics: &str) -> [u64; 3] {
    let mut socket = std::net::TcpStream::connect(metrics).expect("the agent's /metrics");
    socket
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: bench\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    socket.read_to_string(&mut text).unwrap();
    ["rpc_requests", "rpc_bytes", "websocket_bytes"].map(|name| {
        let prefix = format!("gpu_market_agent_{name}_total ");
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|v| v.trim().parse().ok())
            // An agent from before the byte counters (a comparison run): 0.
            .unwrap_or(0)
    })
}

/// Each agent's requests, JSON-RPC bytes and websocket bytes per minute over the next `secs`
/// seconds.
async fn rpc_per_minute(metrics: &[String], secs: u64) -> Vec<[f64; 3]> {
    let before: Vec<[u64; 3]> = metrics.iter().map(|m| rpc_traffic(m)).collect();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    metrics
        .iter()
        .zip(before)
        .map(|(m, b)| {
            let now = rpc_traffic(m);
            [0, 1, 2].map(|i| (now[i] - b[i]) as f64 * 60.0 / secs as f64)
        })
        .collect()
}

/// `count` more machines in the market (8 GPUs of class 2 each, which the bench's bids do not
/// accept, in the first machine's region; 100 a host, each host staked for their bonds), all
/// with one agent key that heartbeats each of them every `heartbeat` from a task of the bench,
/// spread evenly, as their agents would.
async fn more_machines(live: &LiveMarket, count: usize, heartbeat: Duration) {
    use futures_util::stream::{self, StreamExt as _};
    use gpu_market_sdk::instructions::{Heartbeat, RegisterMachine};
    const PER_HOST: usize = 100;
    let first: gpu_market::state::Machine = live.cluster.account(&live.machine).await.unwrap();
    let bond = live.market_state().await.unwrap().params.min_host_stake;
    // One SOL pays 200,000 heartbeats' fees.
    let agent = Arc::new(live.cluster.wallet(1).await.unwrap());
    let started = Instant::now();
    let mut machines = Vec::new();
    for host in 0..count.div_ceil(PER_HOST) {
        let n = PER_HOST.min(count - host * PER_HOST);
        // Its 2 SOL pay each registration's rent (about 0.015 SOL) and fee.
        let owner = live.client(n as u64 * bond, n as u64 * bond).await.unwrap();
        let registered: Vec<solana_pubkey::Pubkey> = stream::iter(0..n as u64)
            .map(|id| {
                let register = RegisterMachine {
                    owner: &owner.key,
                    market: live.market,
                    id,
                    terms: gpu_market::state::MachineTerms {
                        agent: agent.pubkey(),
                        region: first.region,
                        gpus: gpus(GPUS)
                            .into_iter()
                            .map(|g| gpu_market::state::GpuSpec { class: 2, ..g })
                            .collect(),
                        price_floor_per_gpu_hour: first.price_floor_per_gpu_hour,
                        electricity_cost_per_kwh: first.electricity_cost_per_kwh,
                        network: first.network.clone(),
                        cpu_milli: first.cpu_milli,
                        memory_mib: first.memory_mib,
                    },
                };
                async move {
                    live.cluster
                        .run(&register)
                        .await
                        .expect("a machine registers");
                    register.machine()
                }
            })
            .buffer_unordered(32)
            .collect()
            .await;
        machines.extend(registered);
    }
    println!(
        "{count} more machines registered in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    // The agent key pays its heartbeats' fees, sent without waiting for each to confirm.
    let rpc = Arc::new(solana_rpc_client::nonblocking::rpc_client::RpcClient::new(
        live.cluster.rpc_url.clone(),
    ));
    tokio::spawn(async move {
        use gpu_market_sdk::instructions::ClientInstruction;
        let gap = heartbeat / machines.len() as u32;
        let mut next = tokio::time::Instant::now();
        for machine in machines.iter().cycle() {
            next += gap;
            tokio::time::sleep_until(next).await;
            let (rpc, agent, machine) = (rpc.clone(), agent.clone(), *machine);
            tokio::spawn(async move {
                let beat = Heartbeat {
                    agent: agent.as_ref(),
                    machine,
                };
                let sent = async {
                    let blockhash = rpc.get_latest_blockhash().await?;
                    let tx = solana_transaction::Transaction::new_signed_with_payer(
                        &[beat.instruction()],
                        Some(&agent.pubkey()),
                        &[agent.as_ref()],
                        blockhash,
                    );
                    rpc.send_transaction(&tx).await
                };
                if let Err(e) = sent.await {
                    eprintln!("heartbeat of {machine}: {e}");
                }
            });
        }
    });
}

/// Numbers of each agent, `/`-separated.
fn each<T>(values: &[T], show: impl Fn(&T) -> String) -> String {
    values.iter().map(show).collect::<Vec<_>>().join(" / ")
}

/// Sets the configuration's `key` to `value`; `None` leaves it to the agent's default.
fn set(config: &std::path::Path, key: &str, value: Option<usize>) {
    let prefix = format!("{key} = ");
    let text: String = std::fs::read_to_string(config)
        .unwrap()
        .lines()
        .filter_map(|l| match (l.starts_with(&prefix), value) {
            (true, Some(v)) => Some(format!("{prefix}{v}\n")),
            (true, None) => None,
            (false, _) => Some(format!("{l}\n")),
        })
        .collect();
    std::fs::write(config, text).unwrap();
}

/// A second host's machine of `GPUS` GPUs on the same terms as the market's, and its agent's
/// configuration in `dir`.
async fn second_machine(live: &LiveMarket, dir: &std::path::Path) -> std::path::PathBuf {
    let first: gpu_market::state::Machine = live.cluster.account(&live.machine).await.unwrap();
    let host = live.client(10 * TOKEN, 10 * TOKEN).await.unwrap();
    let agent = live.cluster.wallet(10).await.unwrap();
    let (machine, _) = live
        .register_machine(&host.key, agent.pubkey(), |t| {
            t.gpus = gpus(GPUS);
            t.region = first.region;
            t.price_floor_per_gpu_hour = first.price_floor_per_gpu_hour;
            t.electricity_cost_per_kwh = first.electricity_cost_per_kwh;
        })
        .await
        .expect("the second machine");
    Agent::write_config_for(live, dir, GPUS as usize, &agent, &machine)
}

fn unix_nanos(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_nanos() as i64
}

/// The engine's start time (Unix ns) of each lease's container, by lease, as its events come.
fn container_starts(docker: bollard::Docker) -> Arc<Mutex<HashMap<String, i64>>> {
    let started = Arc::new(Mutex::new(HashMap::new()));
    let filters = HashMap::from([
        ("type".to_string(), vec!["container".to_string()]),
        ("event".to_string(), vec!["start".to_string()]),
    ]);
    // From a second before: a start while the stream connects is not missed.
    let since = (unix_nanos(SystemTime::now()) / 1_000_000_000 - 1).to_string();
    let options = EventsOptions {
        since: Some(since),
        filters: Some(filters),
        ..Default::default()
    };
    let into = started.clone();
    tokio::spawn(async move {
        let mut events = docker.events(Some(options));
        while let Some(Ok(e)) = events.next().await {
            let lease = e
                .actor
                .and_then(|a| a.attributes?.get(LABEL_LEASE).cloned());
            if let (Some(lease), Some(at)) = (lease, e.time_nano) {
                into.lock().unwrap().entry(lease).or_insert(at);
            }
        }
    });
    started
}

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let leases = env_number("AGENT_BENCH_LEASES", 8);
    let book = env_number("AGENT_BENCH_BOOK", 0);
    let machines = env_number("AGENT_BENCH_MACHINES", 1);
    let market_machines = env_number("AGENT_BENCH_MARKET", machines);
    assert!(
        market_machines >= machines,
        "AGENT_BENCH_MARKET: at least AGENT_BENCH_MACHINES"
    );
    assert!(
        machines == 1 || machines == 2,
        "AGENT_BENCH_MACHINES: 1 or 2"
    );
    let all_gpus = GPUS as usize * machines;
    // Up to one lease a GPU, or as many on every GPU.
    assert!((leases <= all_gpus || leases.is_multiple_of(all_gpus)) && leases <= 8 * all_gpus);
    let gib = 24 / leases.div_ceil(all_gpus) as u16;
    let interval = env_number("AGENT_BENCH_INTERVAL_SECS", support::INTERVAL as usize) as u32;
    let mut params = support::params();
    params.billing_interval_secs = interval;
    let live = LiveMarket::start(params, gpus(GPUS), 10 * TOKEN, TOKEN / 10, TOKEN / 5)
        .await
        .expect("a market with a registered machine on a local validator");
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let mut configs = vec![Agent::write_config(&live, dirs[0].path(), GPUS as usize)];
    if machines == 2 {
        configs.push(second_machine(&live, dirs[1].path()).await);
    }
    // 0.05 CPU per GPU by default (what BENCHMARKS.md's first tables ran with); a small quota
    // also throttles the runtime's own set-up inside a starting container (about 0.3 s more per
    // start at 0.05 CPU), and a host gives whole CPUs.
    let millicpus = env_number("AGENT_BENCH_MILLICPUS", 50);
    for c in &configs {
        set(c, "millicpus_per_gpu", Some(millicpus));
        if interval != support::INTERVAL {
            // At another pace than the tests' market, the agent's default heartbeat and the
            // README's poll.
            set(c, "heartbeat_interval_secs", None);
            set(c, "billing_poll_interval_secs", Some(5));
        }
    }
    let metrics: Vec<String> = configs.iter().map(|c| Agent::metrics_address(c)).collect();
    if market_machines > machines {
        let heartbeat = Duration::from_secs(gpu_market_agent::config::DEFAULT_HEARTBEAT_SECS);
        more_machines(&live, market_machines - machines, heartbeat).await;
    }
    let workload = std::env::var("AGENT_BENCH_WORKLOAD").unwrap_or_else(|_| "worker".into());
    let (image, digest) = seeded_image(&workload.to_uppercase());
    let engine = DockerEngine::connect(&engine_env("DOCKER_HOST"), "bench")
        .await
        .unwrap();
    engine
        .pull(&pinned_reference(&image, &digest).unwrap())
        .await
        .expect("cache the workload's image");
    let now = live.cluster.now().await.unwrap();
    if book > 0 {
        // Tokens for every bid's escrow, SOL for every bid account's and book slot's rent
        // (about 4.8 mSOL).
        let staked = live
            .client((1_000 + 5 * book as u64) * TOKEN, 500 * TOKEN)
            .await
            .unwrap();
        let rent_sol = (book as u64 * 5_000_000).div_ceil(1_000_000_000);
        live.cluster
            .fund(&staked.key.pubkey(), rent_sol)
            .await
            .unwrap();
        // Short bids: placing thousands takes minutes, and a deadline must leave a bid its
        // duration.
        // Their witness is an attacker's machine, paused once they are placed.
        let (attacker, witness) = attacker_witness(&live).await;
        // Every kind but one GPU more than the machine's 8: the witness has 8.
        let bids: Vec<_> = unservable(0..2 * book as u64, 60, now + QUEUE_WAIT_SECS, GPUS)
            .into_iter()
            .filter(|b| b.gpu_count <= GPUS)
            .take(book)
            .collect();
        place_all(&live, &staked, witness, bids).await;
        live.set_status(
            &attacker.key,
            witness,
            gpu_market::state::MachineStatus::Paused,
        )
        .await
        .unwrap();
    }
    // Eight clients (the validator's faucet funds no more), each with up to 8 leases.
    let mut clients = Vec::new();
    for _ in 0..leases.min(8) {
        clients.push(live.client(100 * TOKEN, 0).await.unwrap());
    }

    let agents: Vec<Agent> = configs.iter().map(|c| Agent::start(c)).collect();
    tokio::time::sleep(Duration::from_secs(10)).await;
    for (agent, address) in agents.iter().zip(&metrics) {
        if std::net::TcpStream::connect(address).is_err() {
            panic!("an agent serves no /metrics; its log:\n{}", agent.log());
        }
    }
    let idle: Vec<(u64, u64)> = agents.iter().map(|a| rss_kib(a.pid())).collect();
    // Two billing intervals at least: a round of proofs goes every two.
    let window = 30.max(2 * interval as u64);
    let idle_rpc = rpc_per_minute(&metrics, window).await;

    // When each lease's container started, by the engine's own clock: its `start` events,
    // which cost the engine nothing (polling its container list would slow its starts).
    let started = container_starts(docker().await);
    let mut latencies = Vec::new();
    for (i, client) in clients.iter().cycle().take(leases).enumerate() {
        let now = live.cluster.now().await.unwrap();
        let mut args = queue_bid(600, now);
        args.gib_per_gpu = gib;
        (args.image_ref, args.image_digest) = (image.clone(), digest);
        let bid = live.place(client, args).await.unwrap();
        let confirmed = unix_nanos(SystemTime::now());
        let placed = Instant::now();
        let lease = pda::lease(&bid).0.to_string();
        let at = loop {
            if let Some(&at) = started.lock().unwrap().get(&lease) {
                break at;
            }
            assert!(
                placed.elapsed() < Duration::from_secs(60),
                "lease {i} not running within 60 s; agents' logs:\n{}",
                each(&agents, |a| a.log())
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        latencies.push(Duration::from_nanos((at - confirmed).max(0) as u64));
    }
    let busy_rpc = rpc_per_minute(&metrics, window).await;
    let busy: Vec<(u64, u64)> = agents.iter().map(|a| rss_kib(a.pid())).collect();
    // What each save writes (twice fsynced): the agent's state file with every lease.
    let state_bytes: Vec<u64> = dirs[..machines]
        .iter()
        .map(|d| std::fs::metadata(d.path().join("data/state.json")).map_or(0, |m| m.len()))
        .collect();

    let mut sorted = latencies.clone();
    sorted.sort();
    let ms = |d: Duration| format!("{:.0} ms", d.as_secs_f64() * 1e3);
    let mib = |kib: u64| kib as f64 / 1024.0;
    let on = match machines {
        1 => "one machine".to_string(),
        n => format!("{n} machines, numbers per agent"),
    };
    let on = match market_machines > machines {
        true => format!("{on}, {market_machines} machines in the market"),
        false => on,
    };
    println!(
        "| measure ({leases} leases running {workload} at {millicpus} millicpus per GPU, {book} unservable bids above, {on}) | value | goal |"
    );
    println!("|---|---|---|");
    println!(
        "| bid confirmed → container running, p50 (image cached) | {} | ≤ 0.8 s |",
        ms(percentile(&sorted, 50))
    );
    println!(
        "| bid confirmed → container running, p90 / max | {} / {} | |",
        ms(percentile(&sorted, 90)),
        ms(*sorted.last().unwrap())
    );
    let rss = |r: &(u64, u64)| format!("{:.1} MiB ({:.1})", mib(r.0), mib(r.1));
    println!(
        "| agent RSS idle (peak) | {} | ≤ 30 MiB |",
        each(&idle, rss)
    );
    println!(
        "| agent RSS with {leases} leases (peak) | {} | ≤ 30 MiB |",
        each(&busy, rss)
    );
    println!(
        "| agent state file with {leases} leases | {} | reported |",
        each(&state_bytes, |b| format!("{:.1} KiB", *b as f64 / 1024.0))
    );
    let rate = |i: usize| move |r: &[f64; 3]| format!("{:.0}", r[i]);
    let kib = |i: usize| move |r: &[f64; 3]| format!("{:.0} KiB", r[i] / 1024.0);
    for (when, rpc) in [
        ("idle", &idle_rpc),
        (&*format!("{leases} leases"), &busy_rpc),
    ] {
        println!(
            "| JSON-RPC requests per minute, {when} | {} | reported |",
            each(rpc, rate(0))
        );
        println!(
            "| JSON-RPC bytes per minute, {when} | {} | reported |",
            each(rpc, kib(1))
        );
        println!(
            "| websocket notification bytes per minute, {when} | {} | reported |",
            each(rpc, kib(2))
        );
    }
    println!(
        "latencies: {:?}",
        latencies.iter().map(|d| ms(*d)).collect::<Vec<_>>()
    );
    // Where the time goes: the agents' own timestamps for the steps of each start.
    for (n, agent) in agents.iter().enumerate() {
        for line in agent.log().lines().filter(|l| {
            ["allocated", "starting the lease's", "lease started"]
                .iter()
                .any(|step| l.contains(step))
        }) {
            println!("agent {n}: {line}");
        }
    }
    // The leases run for 10 minutes: the operators' drain stops them early, proves what ran
    // and ends them (or leaves the rest to the next start when its deadline passes).
    for (n, (agent, config)) in agents.into_iter().zip(&configs).enumerate() {
        let drain = Instant::now();
        let (verb, status, _) = agent.drain(config);
        println!(
            "drain of agent {n}'s leases: {} after {:.1} s ({})",
            if verb.status.success() && status.success() {
                "finished"
            } else {
                "deadline passed"
            },
            drain.elapsed().as_secs_f64(),
            String::from_utf8_lossy(&verb.stdout).trim()
        );
    }
}
