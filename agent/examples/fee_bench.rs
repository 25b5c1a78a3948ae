//! Signature fees per GPU-hour of a fully leased machine, from the agent's own loop: the
//! daemon's `Reconciler::run` (its planning, its proof rounds, heartbeats and claims) drives a
//! machine whose GPUs are all leased, at the recommended 60 s billing interval and the agent's
//! default heartbeat and claim intervals, for an hour of tokio's paused clock after the leases
//! started. The chain is `FakeChain` (FAKE: it counts the transactions the agent sends and
//! checks them as the program does), the container engine the recording runtime and the GPUs
//! SIMULATED. Fees are 5,000 lamports a signature (each of these transactions has one: the
//! agent's); no priority fee (`max_priority_fee_micro_lamports = 0`).
//!
//! `cargo run --release -p gpu-market-agent --example fee_bench`. Prints a table.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use gpu_market_agent::chain::fake::FakeChain;
use gpu_market_agent::chain::{BidKind, BidView, GpuView, Key, RoomAsked};
use gpu_market_agent::config::{ContainerLimits, ImageBudget, SimulatedGpuConfig};
use gpu_market_agent::gpu::simulated::{uuid, SimulatedGpu, TokioTime};
use gpu_market_agent::metrics::Metrics;
use gpu_market_agent::reconcile::{Reconciler, ReconcilerConfig};
use gpu_market_agent::runtime::recording::RecordingRuntime;
use gpu_market_core::overclock::{GpuLimits, OverclockTerms, Range};
use gpu_market_sdk::budget::LAMPORTS_PER_SIGNATURE;

/// The recommended billing interval.
const INTERVAL: u32 = 60;
/// On the interval grid.
const T0: i64 = 1_699_999_980;
/// How long the machine runs fully leased, measured.
const HOUR: u64 = 3_600;

fn gpu(topology_group: u8) -> SimulatedGpuConfig {
    SimulatedGpuConfig {
        class: 0,
        memory_gib: 80,
        topology_group,
        limits: GpuLimits {
            power_w: Range { min: 100, max: 400 },
            core_lock_mhz: Range {
                min: 300,
                max: 1_800,
            },
            mem_lock_mhz: Range { min: 0, max: 0 },
            core_offset_mhz: Range { min: 0, max: 0 },
            mem_offset_mhz: Range { min: 0, max: 0 },
        },
        default_power_w: 300,
    }
}

/// A queue bid `n` for `gpus` whole GPUs, running for `hours`.
fn bid(n: u8, gpus: u8, hours: u32) -> BidView {
    BidView {
        gang: None,
        key: Key([n; 32]),
        client: Key([200; 32]),
        kind: BidKind::Queue,
        gpu_count: gpus,
        gib_per_gpu: 80,
        accepted_classes: 1,
        gpus: None,
        fits_if_ended: Vec::new(),
        elsewhere: None,
        overclock: vec![
            OverclockTerms {
                power_limit_w: 250,
                ..Default::default()
            };
            gpus as usize
        ],
        price: 1_000,
        max_duration_secs: hours * 3_600,
        deadline: T0 + 86_400,
        latest_start: T0 + 86_400 - (hours * 3_600) as i64,
        image_ref: "127.0.0.1:5000/gpu-market/train:v1".into(),
        image_digest: [n; 32],
        env_hash: [0; 32],
        room: RoomAsked::default(),
        regions: Vec::new(),
        auto_power: None,
    }
}

/// What the agent sent in the measured hour, by kind.
struct Sent {
    proofs: u32,
    heartbeats: u32,
    claims: u32,
}

/// How many leases of `lease_gpus` GPUs fill `machine_gpus` (none when `lease_gpus` is 0: the
/// machine is listed and nobody rents it).
fn lease_count(machine_gpus: u8, lease_gpus: u8) -> u8 {
    machine_gpus.checked_div(lease_gpus).unwrap_or(0)
}

/// A machine of `machine_gpus` GPUs fully leased by leases of `lease_gpus` each (lasting longer
/// than the run), or not leased at all (`lease_gpus` 0): the transactions its agent sends in
/// the hour after they all started.
async fn run(machine_gpus: u8, lease_gpus: u8) -> Sent {
    let configs: Vec<SimulatedGpuConfig> = (0..machine_gpus).map(|i| gpu(i / 4)).collect();
    let views = configs
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let view = GpuView {
                uuid: uuid(i as u16),
                class: c.class,
                memory_gib: c.memory_gib,
                topology_group: c.topology_group,
            };
            (view, c.limits)
        })
        .collect();
    let chain = Arc::new(FakeChain::new(views, INTERVAL, T0));
    for n in 0..lease_count(machine_gpus, lease_gpus) {
        chain.place_bid(bid(n + 1, lease_gpus, 4));
    }
    let dir = tempfile::tempdir().unwrap();
    let defaults = ImageBudget::default();
    let reconciler = Reconciler::new(
        chain.clone(),
        Arc::new(RecordingRuntime::new()),
        Arc::new(SimulatedGpu::new(&configs, Arc::new(TokioTime::new()))),
        ReconcilerConfig {
            data_dir: dir.path().to_path_buf(),
            electricity_cost_per_kwh: 0,
            // The agent's defaults (`gpu_market_agent::config`).
            heartbeat_interval: Duration::from_secs(
                gpu_market_agent::config::DEFAULT_HEARTBEAT_SECS,
            ),
            claim_interval: Duration::from_secs(
                gpu_market_agent::config::DEFAULT_CLAIM_INTERVAL_SECS,
            ),
            placement_grace: Duration::from_secs(gpu_market_core::placement::GRACE_SECS),
            container: ContainerLimits {
                memory_mib_per_gpu: 1_024,
                millicpus_per_gpu: 2_000,
                pids_limit: 512,
                stop_grace: Duration::from_secs(10),
                sandbox: Default::default(),
            },
            images: defaults,
            registries: BTreeMap::new(),
            env_key: Arc::new(solana_keypair::Keypair::new()),
            mps: None,
            retention: Duration::from_secs(3_600),
            retained_scratch_bytes: gpu_market_agent::config::DEFAULT_RETAINED_SCRATCH_MIB << 20,
            park_idle_gpus: true,
        },
        Arc::new(Metrics::default()),
    )
    .unwrap();
    // The daemon's loop at its default 5 s poll, until the clock has run the warm-up (every
    // lease allocated and started, the first round of proofs sent and its pay claimed, as the
    // agent claims at once what was never claimed) and the measured hour.
    let warm_up = Duration::from_secs(3 * INTERVAL as u64);
    let measured = Arc::new(std::sync::Mutex::new(None));
    let mark = measured.clone();
    let watcher = chain.clone();
    let stop = async move {
        tokio::time::sleep(warm_up).await;
        *mark.lock().unwrap() = Some((
            watcher.submit_calls(),
            watcher.heartbeats(),
            watcher.claims(),
        ));
        tokio::time::sleep(Duration::from_secs(HOUR)).await;
    };
    reconciler
        .run(
            Duration::from_secs(5),
            Duration::from_secs(60),
            Arc::new(tokio::sync::Notify::new()),
            stop,
            std::future::pending(),
        )
        .await;
    let (proofs, heartbeats, claims) = measured.lock().unwrap().expect("the warm-up ended");
    let leases = lease_count(machine_gpus, lease_gpus);
    let running = (1..=leases)
        .filter(|&n| chain.lease_of_bid(Key([n; 32])).is_some())
        .count();
    assert_eq!(running, leases as usize, "every lease ran the whole hour");
    Sent {
        proofs: chain.submit_calls() - proofs,
        heartbeats: chain.heartbeats() - heartbeats,
        claims: chain.claims() - claims,
    }
}

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() {
    println!(
        "| machine | leases | proof transactions / h | heartbeats / h | claims / h | lamports / GPU-hour |"
    );
    println!("|---|---|---:|---:|---:|---:|");
    for (machine_gpus, lease_gpus) in [(8, 1), (8, 2), (8, 4), (8, 8), (1, 1), (8, 0)] {
        let sent = run(machine_gpus, lease_gpus).await;
        let signatures = (sent.proofs + sent.heartbeats + sent.claims) as u64;
        let per_gpu_hour = signatures * LAMPORTS_PER_SIGNATURE / machine_gpus as u64;
        println!(
            "| {machine_gpus} GPUs | {} × {lease_gpus} GPU | {} | {} | {} | {} |",
            lease_count(machine_gpus, lease_gpus),
            sent.proofs,
            sent.heartbeats,
            sent.claims,
            per_gpu_hour
        );
    }
}
