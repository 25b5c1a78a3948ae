use std::time::Duration;

use gpu_market_core::lease::exit;
use gpu_market_core::overclock::{GpuLimits, Range};
use tempfile::TempDir;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use gpu_market_core::overclock::OverclockTerms;
use tokio::time::Instant;

use super::senders::{Fate, Senders};
use super::*;
use crate::chain::fake::FakeChain;
use crate::chain::{proof_hash, GpuView, ReservationDuty};
use crate::chain::{BidKind, BidView, Chain, Elsewhere, LeaseView, MachineStatus, MachineView};
use crate::config::{ContainerLimits, ImageBudget, SimulatedGpuConfig};
use crate::gpu::mps::Mps;
use crate::gpu::simulated::{SimulatedGpu, TokioTime};
use crate::gpu::{GpuBackend, Sample};
use crate::runtime::recording::{Call, RecordingRuntime, EXIT_SIGTERM};
use crate::runtime::{ContainerSpec, ContainerState, LABEL_LEASE};
use crate::state::{LeaseRecord, StateFile};
use gpu_market::errors::MarketError;

/// On the grid of 60 s billing intervals (`interval_window`): a lease started at `T0` has whole
/// windows.
const T0: i64 = 1_699_999_980;
const INTERVAL: u32 = 60;
const POLL: u64 = 5;

/// The agent's default pull budget (`[images] pull_timeout_secs`), which the tests run at.
fn pull_timeout_secs() -> i64 {
    ImageBudget::default().pull_timeout.as_secs() as i64
}

struct Harness {
    chain: Arc<FakeChain>,
    runtime: Arc<RecordingRuntime>,
    gpus: Arc<SimulatedGpu>,
    metrics: Arc<Metrics>,
    dir: TempDir,
    env_key: Arc<solana_keypair::Keypair>,
    /// The host's MPS (the SIMULATED control program, `gpu::mps::simulated`): there by default,
    /// so that leases may share GPUs.
    mps: Option<Mps>,
}

impl Drop for Harness {
    /// The daemons of the shared leases the test left running.
    fn drop(&mut self) {
        if let Some(mps) = &self.mps {
            crate::gpu::mps::sweep(mps, &Default::default());
        }
    }
}

fn gpu_config(topology_group: u8) -> SimulatedGpuConfig {
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

impl Harness {
    fn new(groups: &[u8]) -> Self {
        Self::with(groups.iter().map(|&g| gpu_config(g)).collect())
    }

    /// A machine of the simulated GPUs `configs`, declared on the fake chain as they are.
    fn with(configs: Vec<SimulatedGpuConfig>) -> Self {
        let gpus = configs
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let view = GpuView {
                    uuid: crate::gpu::simulated::uuid(i as u16),
                    class: c.class,
                    memory_gib: c.memory_gib,
                    topology_group: c.topology_group,
                };
                (view, c.limits)
            })
            .collect();
        let dir = tempfile::tempdir().unwrap();
        Harness {
            chain: Arc::new(FakeChain::new(gpus, INTERVAL, T0)),
            runtime: Arc::new(RecordingRuntime::new()),
            gpus: Arc::new(SimulatedGpu::new(&configs, Arc::new(TokioTime::new()))),
            metrics: Arc::new(Metrics::default()),
            mps: Some(crate::gpu::mps::simulated(&dir.path().join("mps"))),
            dir,
            env_key: Arc::new(solana_keypair::Keypair::new()),
        }
    }

    /// A reconciler continuing from the state file: a fresh start, or a restart.
    /// Stores `text` as `bid`'s environment sealed to the agent's key, as its client's
    /// `bid place --env` does; returns the hash the bid carries.
    fn seal_env(&self, bid: Key, text: &str) -> [u8; 32] {
        use solana_signer::Signer;
        let env = gpu_market_sdk::envelope::Environment::new(
            text.as_bytes(),
            &solana_keypair::Keypair::new(),
        )
        .unwrap();
        let sealed = env.seal_to(&self.env_key.pubkey()).expect("a curve point");
        self.chain.store_sealed_env(bid, sealed);
        env.hash()
    }

    fn reconciler(&self) -> Reconciler {
        Reconciler::new(
            self.chain.clone(),
            self.runtime.clone(),
            self.gpus.clone(),
            ReconcilerConfig {
                data_dir: self.dir.path().to_path_buf(),
                electricity_cost_per_kwh: 500,
                heartbeat_interval: Duration::from_secs(crate::config::DEFAULT_HEARTBEAT_SECS),
                claim_interval: Duration::from_secs(crate::config::DEFAULT_CLAIM_INTERVAL_SECS),
                placement_grace: Duration::from_secs(gpu_market_core::placement::GRACE_SECS),
                container: ContainerLimits {
                    memory_mib_per_gpu: 1_024,
                    millicpus_per_gpu: 2_000,
                    pids_limit: 512,
                    stop_grace: Duration::from_secs(10),
                    sandbox: Default::default(),
                },
                images: ImageBudget::default(),
                registries: BTreeMap::new(),
                env_key: self.env_key.clone(),
                mps: self.mps.clone(),
                retention: Duration::from_secs(3_600),
                retained_scratch_bytes: crate::config::DEFAULT_RETAINED_SCRATCH_MIB << 20,
                park_idle_gpus: true,
            },
            self.metrics.clone(),
        )
        .unwrap()
    }

    fn running(&self) -> Vec<(String, ContainerSpec)> {
        self.runtime
            .containers()
            .into_iter()
            .filter(|(_, c)| c.state == ContainerState::Running)
            .map(|(id, c)| (id, c.spec))
            .collect()
    }

    /// Advances the clock by `secs` in poll steps, ticking after each; returns every action. As
    /// the daemon's loop does, a container job that finishes wakes another tick at once. After
    /// every tick, no lease may be reclaimable: whatever the agent waits for, each of its
    /// leases is proven within its silence window, so no client can slash the host. (While the
    /// fake cluster is down nobody's transaction lands, the client's reclaim neither.)
    async fn run_for(&self, r: &mut Reconciler, secs: u64) -> Vec<Action> {
        let mut all = Vec::new();
        for _ in 0..secs / POLL {
            tokio::time::advance(Duration::from_secs(POLL)).await;
            all.extend(r.tick(false).await.unwrap());
            all.extend(settle(r).await);
            let silent = self.chain.reclaimable();
            assert!(
                silent.is_empty() || self.chain.is_down(),
                "reclaimable, the host slashable: {silent:?}"
            );
        }
        all
    }

    fn applied(&self, index: u32) -> OverclockTerms {
        self.gpus.read_back(index).unwrap()
    }
}

/// A GPU no lease uses: parked at its least power limit (`[gpu] park_idle`, on by default).
fn parked() -> OverclockTerms {
    power(100)
}

fn power(w: u16) -> OverclockTerms {
    OverclockTerms {
        power_limit_w: w,
        ..Default::default()
    }
}

fn bid(n: u8, kind: BidKind, gpu_count: u8, price: u64, settings: OverclockTerms) -> BidView {
    BidView {
        gang: None,
        key: Key([n; 32]),
        client: Key([200; 32]),
        kind,
        gpu_count,
        gib_per_gpu: 80,
        accepted_classes: 1,
        gpus: None,
        fits_if_ended: Vec::new(),
        elsewhere: None,
        overclock: vec![settings; gpu_count as usize],
        price,
        max_duration_secs: 3_600,
        deadline: T0 + 86_400,
        latest_start: T0 + 86_400 - 3_600,
        image_ref: "127.0.0.1:5000/gpu-market/train:v1".into(),
        image_digest: [n; 32],
        env_hash: [0; 32],
        room: crate::chain::RoomAsked::default(),
        regions: Vec::new(),
        auto_power: None,
    }
}

/// Lets the container jobs under way run (a few milliseconds of real time for the file work
/// they hand to blocking threads; a job that stalls stays under way), ticking again while one
/// has finished.
async fn settle(r: &mut Reconciler) -> Vec<Action> {
    let mut all = Vec::new();
    for round in 0.. {
        // The daemon ticks again at once when a job ends: a tick that keeps starting jobs that
        // end at once spins, hammering the engine or the cluster.
        assert!(
            round < 100,
            "a busy loop: every tick starts a job that ends at once"
        );
        // 50 ms of real time, and up to 2 s while jobs wait on blocking threads (a shared
        // lease's MPS daemon starts as a few processes).
        for waited in 0..2_000 {
            tokio::task::yield_now().await;
            let blocked = crate::off_runtime_calls() > 0;
            if !blocked && (waited >= 50 || r.jobs.all_finished() && r.senders.all_finished()) {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        if !(r.jobs.any_finished() || r.senders.any_finished()) {
            return all;
        }
        all.extend(r.tick(false).await.unwrap());
    }
    all
}

async fn allocated_and_started(h: &Harness, b: BidView) -> (Reconciler, LeaseView) {
    h.chain.place_bid(b.clone());
    let mut r = h.reconciler();
    r.tick(false).await.unwrap();
    let lease = h.chain.lease_of_bid(b.key).expect("allocated");
    h.run_for(&mut r, POLL).await;
    assert_eq!(h.running().len(), 1, "started");
    (r, lease)
}

/// The accepted proofs' intervals, and a check that their hashes chain from zero.
fn proven_intervals(h: &Harness, lease: Key) -> Vec<u32> {
    let mut prev = [0; 32];
    h.chain
        .accepted()
        .into_iter()
        .filter(|a| a.lease == lease)
        .flat_map(|a| {
            assert_eq!(a.hash, proof_hash(&lease, &a.proof, &prev), "hash chain");
            prev = a.hash;
            a.proof.interval..a.proof.interval + a.proof.intervals as u32
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_free_machine_allocates_within_one_topology_group_and_runs_exactly_those_gpus() {
    // GPU 0 alone in group 0; GPUs 1-3 share group 1.
    let h = Harness::new(&[0, 1, 1, 1]);
    let mut b = bid(1, BidKind::Queue, 2, 1_000, power(250));
    // The client's own rendezvous port overrides the launch default (`gpu::launch`).
    b.env_hash = h.seal_env(b.key, "TOKEN=secret\nMASTER_PORT=12345\n");
    h.chain.place_bid(b.clone());
    let mut r = h.reconciler();

    let actions = r.tick(false).await.unwrap();
    assert!(
        actions.contains(&Action::Allocate {
            bid: b.key,
            gpu_indices: vec![1, 2]
        }),
        "{actions:?}"
    );
    assert!(actions.contains(&Action::Heartbeat));
    let lease = h.chain.lease_of_bid(b.key).unwrap();
    assert_eq!(lease.gpu_indices, vec![1, 2]);

    let actions = h.run_for(&mut r, POLL).await;
    assert!(actions.contains(&Action::Start { lease: lease.key }));
    let running = h.running();
    assert_eq!(running.len(), 1);
    let spec = &running[0].1;
    assert_eq!(spec.gpu_indices, vec![1, 2]);
    assert_eq!(spec.labels[LABEL_LEASE], lease.key.to_string());
    let mut want = crate::gpu::launch::launch_env(&[1, 2], &h.gpus.gpus(), None);
    want.retain(|(k, _)| k != "MASTER_PORT");
    want.push(("TOKEN".to_string(), "secret".to_string()));
    want.push(("MASTER_PORT".to_string(), "12345".to_string()));
    assert_eq!(spec.env, want);
    let env = |k: &str| {
        spec.env
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(env("WORLD_SIZE").as_deref(), Some("2"));
    assert_eq!(env("GPU_MARKET_GPU_GROUPS").as_deref(), Some("1,1"));
    assert_eq!(spec.memory_bytes, Some((2 * 1_024) << 20));
    let pinned = format!("127.0.0.1:5000/gpu-market/train@sha256:{}", "01".repeat(32));
    assert_eq!(spec.image, pinned);
    assert!(h.runtime.calls().contains(&Call::Pull {
        reference: pinned,
        username: None
    }));
    assert_eq!(h.applied(1), power(250));
    assert_eq!(h.applied(2), power(250));
    assert_eq!(h.applied(0), parked(), "idle: parked");
    assert_eq!(
        h.chain.machine().await.unwrap().free_gib,
        vec![80, 0, 0, 80]
    );
}

#[tokio::test(start_paused = true)]
async fn one_proof_every_two_intervals_with_the_lease_windows_and_a_hash_chain() {
    let h = Harness::new(&[0, 0]);
    let (mut r, lease) =
        allocated_and_started(&h, bid(1, BidKind::Queue, 2, 1_000, power(250))).await;
    // SIMULATED GPU: the load follows the container's CPU, here 80 % of its 2 × 2 CPUs.
    let (id, _) = h.running().pop().unwrap();
    h.runtime.set_cpu_rate(&id, 3_200);
    // The recommended silence window (3 intervals) leaves a proof two intervals.
    assert_eq!(lease.silence_intervals, 3);
    h.run_for(&mut r, 3 * INTERVAL as u64).await;
    assert_eq!(
        proven_intervals(&h, lease.key),
        vec![0, 1],
        "interval 2 waits for 3"
    );
    h.run_for(&mut r, INTERVAL as u64).await;
    assert_eq!(proven_intervals(&h, lease.key), vec![0, 1, 2, 3]);
    assert_eq!(h.chain.submit_calls(), 2, "no proof sent twice");
    let accepted = h.chain.accepted();
    let start = lease.started_at;
    let span = 2 * INTERVAL as i64;
    for (k, a) in accepted.iter().enumerate() {
        let from = start + k as i64 * span;
        assert_eq!(a.proof.intervals, 2);
        assert_eq!(a.window, (from, from + span));
        assert_eq!(a.proof.exit_code, None);
        assert_eq!(a.proof.peak_power_w.len(), 2);
        assert!(a.proof.energy_j > 0);
    }
    // The container started 5 s into the first interval.
    assert_eq!(accepted[0].proof.gpu_seconds, 2 * 115);
    assert_eq!(accepted[1].proof.gpu_seconds, 2 * 120);
    // 80 % load between 50 W idle and the 250 W limit: 210 W; 2 GPUs for 120 s.
    assert_eq!(accepted[1].proof.avg_utilisation_bps, 8_000);
    assert_eq!(accepted[1].proof.peak_power_w, vec![210, 210]);
    let energy = accepted[1].proof.energy_j;
    assert!(
        (2 * 210 * 120 - 2 * 210 * 5..=2 * 210 * 120 + 2 * 210 * 5).contains(&energy),
        "{energy}"
    );
    assert_eq!(h.chain.lease(lease.key).unwrap().next_interval, 4);
    assert_eq!(r.state().leases[&lease.key].last_proven, Some(3));
    assert_eq!(h.metrics.proofs_accepted(), 2);
}

#[tokio::test(start_paused = true)]
async fn each_proofs_power_log_is_kept_where_the_container_reads_it_and_matches_the_proof() {
    let h = Harness::new(&[0]);
    let (mut r, lease) =
        allocated_and_started(&h, bid(1, BidKind::Queue, 1, 1_000, power(250))).await;
    let (id, spec) = h.running().pop().unwrap();
    let dir = crate::evidence::lease_dir(h.dir.path(), &lease.key);
    assert!(
        spec.binds.contains(&crate::runtime::BindMount {
            host: dir.clone(),
            container: crate::evidence::CONTAINER_PATH.into(),
            read_only: true,
        }),
        "{:?}",
        spec.binds
    );
    h.runtime.set_cpu_rate(&id, 1_600);
    h.run_for(&mut r, 4 * INTERVAL as u64).await;
    let accepted = h.chain.accepted();
    assert_eq!(accepted.len(), 2, "two proofs of two intervals");
    for a in &accepted {
        let k = a.proof.interval;
        let file = std::fs::read(dir.join(format!("{k}.json"))).expect("the interval's log");
        let e: gpu_market_sdk::evidence::IntervalEvidence = serde_json::from_slice(&file).unwrap();
        assert_eq!((e.lease, e.interval), (lease.key.to_string(), k));
        assert_eq!(
            gpu_market_sdk::evidence::samples_hash(&e.log),
            a.proof.samples_hash
        );
        assert_eq!(e.log.peak_power_w(), a.proof.peak_power_w, "interval {k}");
        assert!(!e.log.gpus[0].readings_mw.is_empty());
    }
    // The second proof's log (intervals 2 and 3) carries in the first's last readings.
    assert!(
        !dir.join("1.json").exists(),
        "interval 1 is in the first proof's log"
    );
    let second: gpu_market_sdk::evidence::IntervalEvidence =
        serde_json::from_slice(&std::fs::read(dir.join("2.json")).unwrap()).unwrap();
    assert_eq!(
        second.log.gpus[0].carried_mw.len(),
        gpu_market_core::lease::SUSTAINED_READINGS
    );
}

#[tokio::test(start_paused = true)]
async fn a_market_update_leaves_a_running_lease_on_the_interval_it_started_with() {
    let h = Harness::new(&[0, 0]);
    let (mut r, old) =
        allocated_and_started(&h, bid(1, BidKind::Queue, 1, 1_000, power(250))).await;
    h.run_for(&mut r, INTERVAL as u64).await;
    // The market's interval halves: the running lease keeps 60 s, a new one gets 30 s.
    h.chain.set_interval(INTERVAL / 2);
    h.chain
        .place_bid(bid(2, BidKind::Queue, 1, 1_000, power(250)));
    h.run_for(&mut r, 3 * INTERVAL as u64).await;
    let new = h.chain.lease_of_bid(Key([2; 32])).expect("allocated");
    assert_eq!(new.interval_secs, INTERVAL / 2);

    // Each proof's window is its span on the grid of the lease's own interval: from its
    // start to the next multiple, then whole ones, one after the other.
    let windows = |lease: &LeaseView| -> Vec<(i64, i64)> {
        let proofs: Vec<_> = h
            .chain
            .accepted()
            .into_iter()
            .filter(|a| a.lease == lease.key)
            .collect();
        let mut at = lease.started_at;
        for a in &proofs {
            let span = gpu_market_core::lease::span_window(
                lease.started_at,
                lease.interval_secs,
                a.proof.interval,
                a.proof.intervals,
                lease.stop(),
            );
            assert_eq!(Some(a.window), span);
            assert_eq!(a.window.0, at, "no gap, no overlap");
            assert_eq!(a.window.1 % lease.interval_secs as i64, 0, "on the grid");
            at = a.window.1;
        }
        proofs.iter().map(|a| a.window).collect()
    };
    assert_eq!(proven_intervals(&h, old.key), vec![0, 1, 2, 3]);
    assert_eq!(
        windows(&old).last().unwrap().1,
        old.started_at + 4 * INTERVAL as i64,
        "proven on its 60 s grid throughout"
    );
    windows(&new);
    let proven = proven_intervals(&h, new.key);
    assert!(proven.len() >= 5, "{proven:?}");
    assert_eq!(proven, (0..proven.len() as u32).collect::<Vec<_>>());
    assert_eq!(h.chain.lease(old.key).unwrap().interval_secs, INTERVAL);
    assert_eq!(r.state().leases[&old.key].interval_secs, INTERVAL);
}

#[tokio::test(start_paused = true)]
async fn the_simulated_load_follows_the_containers_cpu_share_read_off_the_tick() {
    let h = Harness::new(&[0]);
    let (mut r, lease) =
        allocated_and_started(&h, bid(1, BidKind::Queue, 1, 1_000, power(250))).await;
    let (id, _) = h.running().pop().unwrap();
    h.runtime.set_cpu_rate(&id, 2_000);
    // The engine answers a CPU reading only at its next collection, here 3 s away: the
    // tick meters without waiting for it.
    h.runtime.set_stats_delay(Duration::from_secs(3));
    let before = Instant::now();
    let actions = r.tick(false).await.unwrap();
    assert!(actions.contains(&Action::Meter { lease: lease.key }));
    assert!(
        before.elapsed() < Duration::from_secs(3),
        "the tick waited for the reading: {:?}",
        before.elapsed()
    );
    h.run_for(&mut r, 4 * INTERVAL as u64).await;
    h.runtime.set_cpu_rate(&id, 0);
    h.run_for(&mut r, 4 * INTERVAL as u64).await;
    let proofs: Vec<u16> = h
        .chain
        .accepted()
        .iter()
        .filter(|a| a.lease == lease.key)
        .map(|a| a.proof.avg_utilisation_bps)
        .collect();
    assert_eq!(proofs.len(), 4, "of two intervals each");
    assert_eq!(proofs[1], 10_000, "a container using its whole share: busy");
    assert_eq!(proofs[3], 0, "a sleeping container: idle");
}

#[tokio::test(start_paused = true)]
async fn a_more_profitable_spot_bid_preempts_a_spot_lease_at_its_next_boundary() {
    let h = Harness::new(&[0, 0]);
    let (mut r, lease) =
        allocated_and_started(&h, bid(1, BidKind::Spot, 2, 10_000, power(300))).await;
    let better = bid(2, BidKind::Spot, 2, 20_000, power(300));
    let worse = bid(3, BidKind::Spot, 2, 9_000, power(300));
    h.chain.place_bid(worse.clone());
    h.chain.place_bid(better.clone());

    let actions = h.run_for(&mut r, POLL).await;
    assert!(
        actions.contains(&Action::Preempt {
            lease: lease.key,
            better_bid: better.key
        }),
        "{actions:?}"
    );
    let boundary = lease.started_at + INTERVAL as i64;
    assert_eq!(
        h.chain.preemptions(),
        vec![(lease.key, better.key, boundary)]
    );
    h.run_for(&mut r, 20).await;
    assert_eq!(h.chain.preemptions().len(), 1, "told once");

    // Past the boundary: the last window is proven, the lease ends, the better bid runs.
    h.run_for(&mut r, INTERVAL as u64).await;
    assert_eq!(proven_intervals(&h, lease.key), vec![0]);
    assert_eq!(h.chain.accepted()[0].window, (lease.started_at, boundary));
    assert_eq!(h.chain.ended(), vec![lease.key]);
    let next = h
        .chain
        .lease_of_bid(better.key)
        .expect("the better bid was allocated");
    let running = h.running();
    assert_eq!(running.len(), 1);
    assert_eq!(running[0].1.labels[LABEL_LEASE], next.key.to_string());
    assert!(h.chain.lease_of_bid(worse.key).is_none());
}

#[tokio::test(start_paused = true)]
async fn a_crashed_container_gets_a_final_proof_with_its_exit_code_and_the_lease_ends() {
    let h = Harness::new(&[0, 0]);
    let (mut r, lease) =
        allocated_and_started(&h, bid(1, BidKind::Queue, 1, 1_000, power(250))).await;
    let gpu = lease.gpu_indices[0] as u32;
    h.run_for(&mut r, 2 * INTERVAL as u64 + 10).await;
    assert_eq!(proven_intervals(&h, lease.key), vec![0, 1]);
    let (id, _) = h.running().pop().unwrap();
    h.runtime.exit(&id, 3);
    let crashed_at = h.chain.clock();

    let actions = h.run_for(&mut r, POLL).await;
    assert!(actions.contains(&Action::Finish {
        lease: lease.key,
        exit_code: 3
    }));
    // A final proof goes at once, whatever span it would have waited for.
    h.run_for(&mut r, POLL).await;
    assert_eq!(proven_intervals(&h, lease.key), vec![0, 1, 2]);
    let last = h.chain.accepted().pop().unwrap();
    assert_eq!(last.proof.exit_code, Some(3));
    let from = lease.started_at + 2 * INTERVAL as i64;
    // The final proof ends the lease at the clock (the program clips its window).
    assert_eq!(last.window, (from, crashed_at + POLL as i64));
    assert_eq!(
        last.proof.gpu_seconds,
        (crashed_at + POLL as i64 - from) as u64
    );
    assert_eq!(h.chain.ended(), vec![lease.key]);
    assert!(h.runtime.containers().is_empty(), "container removed");
    assert!(logs_path(h.dir.path(), &lease.key).exists(), "logs kept");
    assert_eq!(h.applied(gpu), parked(), "GPU reset and parked");
    assert!(r.state().leases.is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_rpc_outage_loses_no_proof_and_a_lost_answer_duplicates_none() {
    let h = Harness::new(&[0, 0]);
    let (mut r, lease) =
        allocated_and_started(&h, bid(1, BidKind::Queue, 2, 1_000, power(250))).await;
    h.run_for(&mut r, 25).await;
    h.chain.set_outage(true);
    // Two boundaries pass while the cluster is unreachable.
    h.run_for(&mut r, 2 * INTERVAL as u64).await;
    assert!(proven_intervals(&h, lease.key).is_empty());
    let pending: Vec<u32> = r.state().leases[&lease.key]
        .pending
        .iter()
        .map(|p| p.interval)
        .collect();
    assert_eq!(pending, vec![0, 1], "closed locally on time");

    h.chain.set_outage(false);
    // The two intervals go as one proof, which lands but whose answer is lost: the next look
    // at the chain drops it, and it is not sent again.
    h.chain.lose_next_proof_answer();
    h.run_for(&mut r, POLL).await;
    assert_eq!(proven_intervals(&h, lease.key), vec![0, 1]);
    h.run_for(&mut r, POLL).await;
    assert_eq!(h.chain.submit_calls(), 1, "no proof sent twice");
    assert!(r.state().leases[&lease.key].pending.is_empty());
    let windows: Vec<_> = h.chain.accepted().iter().map(|a| a.window).collect();
    let s = lease.started_at;
    assert_eq!(windows, vec![(s, s + 120)]);
    assert!(
        h.metrics
            .rpc_errors_of(crate::metrics::RpcErrorKind::Unavailable)
            > 0
    );
    assert!(h.metrics.proofs_failed() > 0);
    h.run_for(&mut r, 2 * INTERVAL as u64).await;
    assert_eq!(proven_intervals(&h, lease.key), vec![0, 1, 2, 3]);
}

/// A proof the program can never accept (here: the lease stopped before its interval, as when
/// proofs refused for a while reach the chain together and an earlier one ends the lease by the
/// market's idle rule) is sent once and dropped, and the lease still ends; a failure that may
/// pass is sent again with a growing back-off.
#[tokio::test(start_paused = true)]
async fn a_proof_refused_for_good_is_sent_once_and_the_lease_still_ends() {
    let h = Harness::new(&[0]);
    // Two idle intervals in a row end a lease; the container here never loads its GPU.
    h.chain.set_idle_rule(1_000, 2);
    // Started half an interval in: its first window is 30 s, so its silence window (3 × 60 s
    // from its start) outlasts the close of interval 2.
    tokio::time::advance(Duration::from_secs(INTERVAL as u64 / 2)).await;
    let (mut r, lease) =
        allocated_and_started(&h, bid(1, BidKind::Queue, 1, 1_000, power(250))).await;
    // Refused for a while, for a reason that may pass: sent, and sent again.
    h.chain
        .refuse_proofs_of(lease.key, MarketError::IntervalNotOver);
    h.run_for(&mut r, 2 * INTERVAL as u64 + 40).await;
    let pending: Vec<(u32, u16)> = r.state().leases[&lease.key]
        .pending
        .iter()
        .map(|p| (p.interval, p.intervals))
        .collect();
    assert_eq!(
        pending,
        vec![(0, 2), (2, 1)],
        "sent and refused, so never joined again"
    );
    let calls = h.chain.submit_calls();
    h.chain.accept_proofs_of(lease.key);
    h.run_for(&mut r, 3 * INTERVAL as u64).await;
    assert_eq!(
        proven_intervals(&h, lease.key),
        vec![0, 1],
        "the idle proof ended the lease at the end of interval 1"
    );
    assert_eq!(
        h.chain.submit_calls() - calls,
        2,
        "proof 0-1 landed, proof 2 was refused once and never sent again"
    );
    assert!(
        h.chain.ended().contains(&lease.key) || h.chain.lease(lease.key).is_none(),
        "the lease was ended"
    );
    assert!(h.running().is_empty(), "its container stopped");
    assert!(!r.state().leases.contains_key(&lease.key), "and forgotten");
}

/// Idle intervals proven together end the lease where the market's idle rule says, not at the
/// end of their proof: the client pays no idle interval more than proofs of one interval each
/// would have made it pay.
#[tokio::test(start_paused = true)]
async fn an_idle_span_ends_its_lease_where_the_idle_rule_says() {
    let h = Harness::new(&[0]);
    h.chain.set_idle_rule(1_000, 1);
    let (mut r, lease) =
        allocated_and_started(&h, bid(1, BidKind::Queue, 1, 1_000, power(250))).await;
    // Unreachable for three intervals: they go as one proof.
    h.chain.set_outage(true);
    h.run_for(&mut r, 3 * INTERVAL as u64).await;
    h.chain.set_outage(false);
    h.run_for(&mut r, 2 * INTERVAL as u64).await;
    let accepted = h.chain.accepted();
    assert_eq!(accepted.len(), 1);
    assert_eq!(accepted[0].proof.intervals, 3);
    let end = lease.started_at + INTERVAL as i64;
    assert_eq!(
        accepted[0].window,
        (lease.started_at, end),
        "proven to interval 0's end"
    );
    assert!(h.chain.ended().contains(&lease.key) || h.chain.lease(lease.key).is_none());
}

#[test]
fn only_refusals_that_can_change_are_retried() {
    let refused = |e: MarketError| ChainError::Rejected {
        op: "submit_usage",
        reason: e.to_string(),
        code: Some(e.into()),
    };
    assert_eq!(Fate::of(&refused(MarketError::StaleInterval)), Fate::Drop);
    assert_eq!(
        Fate::of(&refused(MarketError::IntervalAfterStop)),
        Fate::DropFromHere
    );
    for e in [
        MarketError::ProofAccountsMismatch,
        MarketError::IntervalNotOver,
    ] {
        assert_eq!(Fate::of(&refused(e)), Fate::Retry, "{e}");
    }
    assert_eq!(
        Fate::of(&ChainError::Unavailable("timed out".into())),
        Fate::Retry
    );
    let mut senders = Senders::default();
    let lease = Key([9; 32]);
    let waits: Vec<u64> = (0..7).map(|_| senders.back_off(lease).as_secs()).collect();
    assert_eq!(waits, vec![0, 1, 2, 4, 8, 16, 16]);
    assert!(senders.is_sending(&lease), "backing off");
    senders.clear_backoff(&lease);
    assert!(!senders.is_sending(&lease));
}

#[tokio::test(start_paused = true)]
async fn a_restart_mid_lease_continues_from_the_state_file_without_duplicates_or_orphans() {
    let h = Harness::new(&[0, 0, 0]);
    let (mut r, lease) =
        allocated_and_started(&h, bid(1, BidKind::Queue, 1, 1_000, power(250))).await;
    let (id, _) = h.running().pop().unwrap();
    // Boundary 2: the proof of intervals 0 and 1 lands, its answer is lost, and the agent is
    // killed before hearing more: the state file still lists the proof as pending.
    h.run_for(&mut r, INTERVAL as u64 + 50).await;
    h.chain.lose_next_proof_answer();
    tokio::time::advance(Duration::from_secs(POLL)).await;
    r.tick(false).await.unwrap();
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    assert_eq!(proven_intervals(&h, lease.key), vec![0, 1]);
    drop(r);

    // While it was down: a container of a lease the chain no longer has, and a GPU left
    // overclocked by nobody.
    let orphan = h
        .runtime
        .run(&ContainerSpec {
            labels: [(LABEL_LEASE.to_string(), Key([77; 32]).to_string())].into(),
            ..Default::default()
        })
        .await
        .unwrap();
    h.gpus.apply(2, &power(390)).unwrap();

    let mut r = h.reconciler();
    assert_eq!(r.state().leases[&lease.key].pending.len(), 1);
    h.run_for(&mut r, 2 * INTERVAL as u64).await;
    assert_eq!(proven_intervals(&h, lease.key), vec![0, 1, 2, 3]);
    assert_eq!(h.chain.submit_calls(), 2, "proof 0-1 was not sent twice");
    let running = h.running();
    assert_eq!(running.len(), 1);
    assert_eq!(
        running[0].0, id,
        "the lease's container was kept, not restarted"
    );
    assert!(
        !h.runtime.containers().contains_key(&orphan),
        "orphan removed"
    );
    assert_eq!(h.applied(2), parked(), "stray overclock reset, GPU parked");
    assert_eq!(
        h.applied(lease.gpu_indices[0] as u32),
        power(250),
        "lease GPU kept"
    );
    let runs = h
        .runtime
        .calls()
        .iter()
        .filter(|c| matches!(c, Call::Start { .. }))
        .count();
    assert_eq!(runs, 2, "the lease's run and the orphan's, nothing more");
}

#[tokio::test(start_paused = true)]
async fn a_lease_whose_settings_do_not_take_is_refused_and_ended() {
    let h = Harness::new(&[0, 1, 1]);
    h.gpus.stick_power_limit(0).unwrap();
    let b = bid(1, BidKind::Queue, 1, 1_000, power(250));
    h.chain.place_bid(b.clone());
    let mut r = h.reconciler();
    r.tick(false).await.unwrap();
    let lease = h.chain.lease_of_bid(b.key).unwrap();
    assert_eq!(lease.gpu_indices, vec![0], "the smallest group that fits");
    h.run_for(&mut r, 3 * POLL).await;

    assert!(
        h.runtime.containers().is_empty(),
        "the container readied while allocate confirmed is removed"
    );
    assert!(
        !h.runtime
            .calls()
            .iter()
            .any(|c| matches!(c, Call::Start { .. })),
        "nothing ran"
    );
    let proofs = h.chain.accepted();
    assert_eq!(proofs.len(), 1);
    assert_eq!(proofs[0].proof.exit_code, Some(exit::SETTINGS_REFUSED));
    assert_eq!(proofs[0].proof.gpu_seconds, 0);
    assert_eq!(proofs[0].proof.energy_j, 0);
    assert_eq!(h.chain.ended(), vec![lease.key]);
    assert_eq!(h.applied(0), power(300));
    assert!(r.state().leases.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_burst_of_notifications_makes_one_tick() {
    let h = Harness::new(&[0]);
    let r = h.reconciler();
    let wake = Arc::new(tokio::sync::Notify::new());
    let ticks = |h: &Harness| {
        let text = h.metrics.render(crate::metrics::unix_now());
        text.lines()
            .find_map(|l| l.strip_prefix("gpu_market_agent_tick_seconds_count "))
            .map(|n| n.trim().parse::<u64>().unwrap())
            .unwrap_or(0)
    };
    let daemon = tokio::spawn(r.run(
        Duration::from_secs(POLL),
        Duration::from_secs(30),
        wake.clone(),
        std::future::pending(),
        std::future::pending(),
    ));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = ticks(&h);
    // A transaction's four accounts notified within a few milliseconds: before, a tick for
    // the first and another for those that came while it ran.
    for _ in 0..4 {
        wake.notify_one();
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(ticks(&h) - before, 1);
    daemon.abort();
}

#[tokio::test(start_paused = true)]
async fn sigterm_leaves_the_leases_running_and_the_restarted_agent_proves_them_on() {
    let h = Harness::new(&[0, 0]);
    let (r, lease) = allocated_and_started(&h, bid(1, BidKind::Queue, 2, 1_000, power(250))).await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let daemon = tokio::spawn(r.run(
        Duration::from_secs(POLL),
        Duration::from_secs(30),
        Default::default(),
        async {
            stopped.await.ok();
        },
        std::future::pending(),
    ));
    tokio::time::sleep(Duration::from_secs(70)).await;
    stop.send(()).unwrap();
    assert_eq!(daemon.await.unwrap(), RunOutcome::Stopped { running: 1 });
    let (id, _) = h.running().pop().expect("the container still runs");
    assert!(h.chain.ended().is_empty(), "the lease was not ended");
    assert_eq!(h.applied(0), power(250), "its settings hold");

    // An upgrade later, the new agent takes the lease back and proves it on.
    tokio::time::advance(Duration::from_secs(20)).await;
    let mut r = h.reconciler();
    h.run_for(&mut r, 3 * INTERVAL as u64).await;
    assert_eq!(proven_intervals(&h, lease.key), vec![0, 1, 2, 3]);
    assert_eq!(h.running().pop().map(|(i, _)| i), Some(id), "not restarted");
    assert!(!h
        .runtime
        .calls()
        .iter()
        .any(|c| matches!(c, Call::Stop { .. })));
}

#[tokio::test(start_paused = true)]
async fn drain_stops_the_containers_sends_final_proofs_ends_the_leases_and_resets_gpus() {
    let h = Harness::new(&[0, 0]);
    let (r, lease) = allocated_and_started(&h, bid(1, BidKind::Queue, 2, 1_000, power(250))).await;
    let daemon = tokio::spawn(r.run(
        Duration::from_secs(POLL),
        Duration::from_secs(30),
        Default::default(),
        std::future::pending(),
        tokio::time::sleep(Duration::from_secs(90)),
    ));
    assert_eq!(daemon.await.unwrap(), RunOutcome::Drained);

    assert_eq!(proven_intervals(&h, lease.key), vec![0, 1]);
    let last = h.chain.accepted().pop().unwrap();
    assert_eq!(last.proof.exit_code, Some(EXIT_SIGTERM as i32));
    assert_eq!(h.chain.ended(), vec![lease.key]);
    assert!(h.runtime.calls().contains(&Call::Stop {
        id: "container-1".into(),
        grace: Duration::from_secs(10)
    }));
    assert!(h.runtime.containers().is_empty());
    assert_eq!(h.applied(0), parked());
    assert_eq!(h.applied(1), parked());
    assert!(StateFile::new(h.dir.path())
        .load()
        .unwrap()
        .leases
        .is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_drain_during_an_outage_stops_at_the_deadline_and_the_next_start_finishes() {
    let h = Harness::new(&[0, 0]);
    let (r, lease) = allocated_and_started(&h, bid(1, BidKind::Queue, 1, 1_000, power(250))).await;
    h.chain.set_outage(true);
    let outcome = r
        .run(
            Duration::from_secs(POLL),
            Duration::from_secs(20),
            Default::default(),
            std::future::pending(),
            tokio::time::sleep(Duration::from_secs(30)),
        )
        .await;
    assert_eq!(
        outcome,
        RunOutcome::DeadlinePassed {
            left: vec![lease.key]
        }
    );
    assert!(h.running().is_empty(), "the container was stopped anyway");
    let saved = StateFile::new(h.dir.path()).load().unwrap();
    assert_eq!(
        saved.leases[&lease.key].pending[0].exit_code,
        Some(EXIT_SIGTERM as i32)
    );

    h.chain.set_outage(false);
    let mut r = h.reconciler();
    h.run_for(&mut r, 2 * POLL).await;
    assert_eq!(proven_intervals(&h, lease.key), vec![0]);
    assert_eq!(h.chain.ended(), vec![lease.key]);
    assert!(r.state().leases.is_empty());
}

fn observed(chain: Option<ChainObserved>, local: AgentState) -> Observed {
    Observed {
        now: T0,
        chain,
        containers: Some(Vec::new()),
        gpus: Vec::new(),
        local,
        busy: BTreeSet::new(),
        readying: BTreeMap::new(),
        readied: BTreeMap::new(),
        draining: false,
        heartbeat_due: true,
        claim_due: false,
        electricity_cost_per_kwh: 500,
        waiting: BTreeMap::new(),
        grace_secs: 10,
        held_back: BTreeSet::new(),
        faulted: BTreeMap::new(),
        fault_reported: false,
        over_slice: BTreeSet::new(),
        gpus_as_declared: true,
        confines_slices: true,
    }
}

fn machine(groups: &[u8], free_gib: Vec<u16>) -> MachineView {
    MachineView {
        gpus: groups
            .iter()
            .map(|&g| GpuView {
                uuid: [0; 16],
                class: 0,
                memory_gib: 80,
                topology_group: g,
            })
            .collect(),
        free_gib,
        status: MachineStatus::Active,
        network: crate::chain::NetworkView::default(),
        cached_images: Vec::new(),
        unclaimed_pay: 0,
        whole_gpus: false,
    }
}

/// A queue lease of GPU 0 (80 GiB at 250 W) running over `started_at..ends_at`.
fn one_gpu_lease(started_at: i64, ends_at: i64) -> LeaseView {
    LeaseView {
        gang: None,
        gang_broken: false,
        key: Key([9; 32]),
        bid: Key([8; 32]),
        client: Key([7; 32]),
        kind: BidKind::Queue,
        price: 1,
        gpu_indices: vec![0],
        gib_per_gpu: 80,
        overclock: vec![power(250)],
        image_ref: "r/i:1".into(),
        image_digest: [0; 32],
        env_hash: [0; 32],
        room: crate::chain::RoomAsked::default(),
        started_at,
        ends_at,
        stop_at: None,
        interval_secs: INTERVAL,
        silence_intervals: 3,
        next_interval: 0,
        proof_hash: [0; 32],
        auto_power: None,
    }
}

/// The bids and GPUs of the allocations among `actions`.
fn allocations(actions: &[Action]) -> Vec<(Key, Vec<u8>)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Allocate { bid, gpu_indices } => Some((*bid, gpu_indices.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn gpus_are_shared_in_slices_only_with_equal_settings() {
    let h = Harness::new(&[0]);
    let mut running = bid(9, BidKind::Queue, 1, 1_000, power(250));
    running.gib_per_gpu = 40;
    let (mut r, _) = allocated_and_started(&h, running).await;
    let mut other = bid(2, BidKind::Queue, 1, 1_000, power(200));
    other.gib_per_gpu = 40;
    let mut same = bid(1, BidKind::Queue, 1, 1_000, power(250));
    same.gib_per_gpu = 40;
    h.chain.place_bid(other.clone());
    h.chain.place_bid(same.clone());
    let actions = h.run_for(&mut r, POLL).await;
    assert_eq!(allocations(&actions), vec![(same.key, vec![0])]);
    assert!(h.chain.is_open(other.key), "other terms never share a GPU");
}

#[tokio::test(start_paused = true)]
async fn a_bid_with_per_gpu_terms_runs_each_term_on_the_gpu_the_fit_rule_gives_it() {
    // GPU 0 takes 100-200 W, GPU 1 takes 300-400 W.
    let mut low = gpu_config(0);
    low.limits.power_w = Range { min: 100, max: 200 };
    low.default_power_w = 150;
    let mut high = gpu_config(0);
    high.limits.power_w = Range { min: 300, max: 400 };
    high.default_power_w = 350;
    let h = Harness::with(vec![low, high]);
    let mut b = bid(1, BidKind::Queue, 2, 1_000, power(350));
    b.overclock = vec![power(350), power(120)];
    h.chain.place_bid(b.clone());
    // The GPUs in index order (what the agent's own copy of the rule proposed) are refused:
    // 350 W is out of GPU 0's range.
    let refused = h.chain.allocate(b.key, &[0, 1]).await;
    assert!(
        matches!(refused, Err(ChainError::Rejected { .. })),
        "{refused:?}"
    );
    assert!(
        h.chain.is_open(b.key),
        "a refused allocation changes nothing"
    );

    let mut r = h.reconciler();
    let actions = r.tick(false).await.unwrap();
    assert_eq!(allocations(&actions), vec![(b.key, vec![1, 0])]);
    let lease = h.chain.lease_of_bid(b.key).expect("allocated");
    assert_eq!(lease.gpu_indices, vec![1, 0]);
    h.run_for(&mut r, POLL).await;
    let running = h.running();
    assert_eq!(running.len(), 1);
    assert_eq!(running[0].1.gpu_indices, vec![1, 0]);
    assert_eq!(
        h.applied(1),
        power(350),
        "the bid's GPU 0 terms on machine GPU 1"
    );
    assert_eq!(
        h.applied(0),
        power(120),
        "the bid's GPU 1 terms on machine GPU 0"
    );
}

#[tokio::test(start_paused = true)]
async fn bids_the_fit_rule_gave_the_same_gpu_are_allocated_one_tick_after_the_other() {
    let h = Harness::new(&[0, 0]);
    let a = bid(1, BidKind::Queue, 1, 1_000, power(250));
    let b = bid(2, BidKind::Queue, 1, 1_000, power(300));
    h.chain.place_bid(a.clone());
    h.chain.place_bid(b.clone());
    let mut r = h.reconciler();
    // Both are given GPU 0 on the machine as observed: the second waits for the next look.
    let first = r.tick(false).await.unwrap();
    assert_eq!(allocations(&first), vec![(a.key, vec![0])]);
    let second = r.tick(false).await.unwrap();
    assert_eq!(allocations(&second), vec![(b.key, vec![1])]);
    assert_eq!(h.chain.lease_of_bid(b.key).unwrap().gpu_indices, vec![1]);
}

/// The market's packing policy gives bid 1 another machine (the fake marks it so: no policy
/// runs in the fake chain), and this machine's turn is `turn`. This machine leaves it, and bid 2
/// ranked below it, for `turn` grace periods, then takes it: a machine that is down never
/// strands a bid, and the machines that fit take their turns one at a time.
async fn waits_its_turn_then_runs_here(turn: u32) {
    let h = Harness::new(&[0]);
    let elsewhere = BidView {
        elsewhere: Some(Elsewhere {
            machine: Key([77; 32]),
            turn,
        }),
        ..bid(1, BidKind::Queue, 1, 1_000, power(250))
    };
    let below = bid(2, BidKind::Queue, 1, 1_000, power(250));
    h.chain.place_bid(elsewhere.clone());
    h.chain.place_bid(below.clone());
    let mut r = h.reconciler();
    let wait = r.config.placement_grace.as_secs() * turn as u64;
    let waiting = h.run_for(&mut r, wait - POLL).await;
    assert!(allocations(&waiting).is_empty(), "{waiting:?}");
    assert!(h.chain.is_open(elsewhere.key) && h.chain.is_open(below.key));
    let after = h.run_for(&mut r, 2 * POLL).await;
    assert_eq!(allocations(&after), vec![(elsewhere.key, vec![0])]);
    assert!(h.chain.is_open(below.key), "bid 2 waits for the GPU");
}

#[tokio::test(start_paused = true)]
async fn a_bid_the_policy_gives_another_machine_waits_the_grace_period_then_runs_here() {
    waits_its_turn_then_runs_here(1).await;
}

/// Third after the policy's machine: three grace periods, never at the end of the first,
/// where every machine that fits raced for the bid before turns.
#[tokio::test(start_paused = true)]
async fn a_machine_third_in_line_waits_three_grace_periods() {
    waits_its_turn_then_runs_here(3).await;
}

/// The packing policy leaves out a machine whose last heartbeat is older than the market's
/// silence window (`gpu_market_sdk::placement::alive`): the agent heartbeats at least every two
/// thirds of it even where its own interval (120 s by default) is longer, so a live machine is
/// never left out. Here the window is 30 s: a heartbeat every 20 s.
#[tokio::test(start_paused = true)]
async fn the_heartbeat_keeps_within_the_markets_silence_window() {
    let h = Harness::new(&[0]);
    h.chain.set_alive_secs(30);
    let mut r = h.reconciler();
    assert_eq!(r.config.heartbeat_interval, Duration::from_secs(120));
    h.run_for(&mut r, 120).await;
    let beats = h.chain.heartbeats();
    assert!((6..=7).contains(&beats), "{beats} heartbeats in 120 s");
}

#[test]
fn the_plan_allocates_the_fit_rules_gpus_until_two_choices_overlap() {
    let given = |n: u8, gpus: Vec<u8>| BidView {
        gpus: Some(gpus),
        ..bid(n, BidKind::Queue, 1, 1, power(250))
    };
    let chain = ChainObserved {
        machine: machine(&[0, 0, 0], vec![80; 3]),
        leases: Vec::new(),
        closed: BTreeSet::new(),
        bids: vec![
            given(1, vec![2]),
            given(2, vec![0]),
            given(3, vec![0]),
            given(4, vec![1]),
        ],
        expired: Vec::new(),
        reservation: None,
    };
    let actions = plan(&observed(Some(chain), AgentState::default()));
    assert_eq!(
        allocations(&actions),
        vec![(Key([1; 32]), vec![2]), (Key([2; 32]), vec![0])],
        "bid 4 must not start before bid 3, which may still fit elsewhere"
    );
}

#[tokio::test(start_paused = true)]
async fn expired_bids_are_pruned_a_few_a_tick_without_holding_up_the_proofs() {
    let h = Harness::new(&[0]);
    let (mut r, lease) =
        allocated_and_started(&h, bid(1, BidKind::Queue, 1, 1_000, power(250))).await;
    // Five bids whose latest start is the second before the boundary of the lease's first
    // proof (two intervals), and one that lasts; none fits while the lease holds the GPU.
    let boundary = lease.started_at + 2 * INTERVAL as i64;
    let expiring: Vec<BidView> = (10..15)
        .map(|n| BidView {
            latest_start: boundary - 1,
            ..bid(n, BidKind::Queue, 1, 1_000, power(250))
        })
        .collect();
    let lasting = bid(20, BidKind::Queue, 1, 1_000, power(250));
    for b in expiring.iter().chain([&lasting]) {
        h.chain.place_bid(b.clone());
    }
    let refused = h.chain.prune_bid(lasting.key).await;
    assert!(matches!(refused, Err(ChainError::Rejected { .. })));

    h.run_for(&mut r, (boundary - h.chain.clock()) as u64 - POLL)
        .await;
    assert!(
        h.chain.pruned().is_empty(),
        "nothing pruned before the deadline"
    );
    // The boundary: the interval's proof and the first prunes in the same tick.
    tokio::time::advance(Duration::from_secs(POLL)).await;
    let actions = r.tick(false).await.unwrap();
    let prunes: Vec<Key> = actions
        .iter()
        .filter_map(|a| match a {
            Action::Prune { bid } => Some(*bid),
            _ => None,
        })
        .collect();
    let keys: Vec<Key> = expiring.iter().map(|b| b.key).collect();
    assert_eq!(prunes, keys[..PRUNES_PER_TICK]);
    assert!(actions.contains(&Action::Submit { lease: lease.key }));
    assert_eq!(h.chain.pruned(), keys[..PRUNES_PER_TICK]);
    // The proof, sent beside the loop, wakes the next tick: it prunes the rest.
    settle(&mut r).await;
    assert_eq!(proven_intervals(&h, lease.key), vec![0, 1]);
    assert_eq!(h.chain.pruned(), keys, "the rest on the next tick");
    assert!(h.chain.is_open(lasting.key));
    h.run_for(&mut r, POLL).await;
    assert_eq!(h.chain.pruned().len(), keys.len(), "each pruned once");
}

#[test]
fn a_lease_that_never_started_before_its_stop_is_proven_empty_and_ended() {
    let h_lease = one_gpu_lease(T0 - 120, T0 - 10);
    let mut local = AgentState::default();
    local.leases.insert(
        h_lease.key,
        LeaseRecord::new(&h_lease, &[Sample::default()]),
    );
    let chain = ChainObserved {
        machine: machine(&[0], vec![0]),
        leases: vec![h_lease.clone()],
        closed: BTreeSet::new(),
        bids: Vec::new(),
        expired: Vec::new(),
        reservation: None,
    };
    let mut o = observed(Some(chain), local.clone());
    o.heartbeat_due = false;
    assert_eq!(
        plan(&o),
        vec![
            Action::Finish {
                lease: h_lease.key,
                exit_code: exit::CONTAINER_LOST
            },
            Action::Submit { lease: h_lease.key }
        ]
    );
    let record = local.leases.get_mut(&h_lease.key).unwrap();
    record.close_final(T0, &[Sample::default()], exit::CONTAINER_LOST);
    let gpu_seconds: Vec<u64> = record.pending.iter().map(|p| p.gpu_seconds).collect();
    assert_eq!(gpu_seconds, vec![0, 0], "both windows, nothing used");
}

#[test]
fn without_the_cluster_the_plan_touches_nothing_on_chain() {
    let lease = one_gpu_lease(T0 - 120, T0 + 600);
    let mut record = LeaseRecord::new(&lease, &[Sample::default()]);
    record.container_id = Some("c".into());
    let mut local = AgentState::default();
    local.leases.insert(lease.key, record);
    let mut o = observed(None, local);
    o.heartbeat_due = false;
    o.containers.as_mut().unwrap().push(ObservedContainer {
        host_ports: Vec::new(),
        id: "c".into(),
        lease: Some(lease.key),
        state: ContainerState::Running,
    });
    o.containers.as_mut().unwrap().push(ObservedContainer {
        host_ports: Vec::new(),
        id: "stray".into(),
        lease: Some(Key([1; 32])),
        state: ContainerState::Running,
    });
    assert_eq!(
        plan(&o),
        vec![
            Action::Meter { lease: lease.key },
            Action::CloseEnded { lease: lease.key }
        ],
        "meters and closes locally; no submit, no orphan removal without the chain's word"
    );
}

mod batching;
mod extend;
mod faults;
mod isolation;
mod liveness;
mod power;
mod preempt;
mod ready;

/// The agent does what the books say of reservations, once: it reserves the bid they name and
/// clears a reservation that holds nothing (`reservation_duty` decides which, on the chain).
#[tokio::test(start_paused = true)]
async fn the_agent_reserves_and_clears_as_the_books_say() {
    let h = Harness::new(&[0]);
    let mut r = h.reconciler();
    let waiting = Key([7; 32]);
    h.chain
        .set_reservation_duty(Some(ReservationDuty::Reserve(waiting)));
    let actions = r.tick(false).await.unwrap();
    assert!(actions.contains(&Action::Reserve { bid: waiting }));
    assert_eq!(h.chain.reservations(), vec![Some(waiting)]);
    // Done: the next look at the books asks nothing.
    let actions = r.tick(false).await.unwrap();
    assert!(!actions
        .iter()
        .any(|a| matches!(a, Action::Reserve { .. } | Action::Unreserve)));
    h.chain.set_reservation_duty(Some(ReservationDuty::Clear));
    r.tick(false).await.unwrap();
    assert_eq!(h.chain.reservations(), vec![Some(waiting), None]);
}
