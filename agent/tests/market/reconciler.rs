//! The agent's reconcile loop on a market under test: the `Reconciler` over the market's chain,
//! the recording container runtime and simulated GPUs as the machine declares them (SIMULATED
//! GPU: no hardware here), ticked on the paused clock.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use gpu_market_agent::chain::Chain;
use gpu_market_agent::config::{ContainerLimits, ImageBudget, SimulatedGpuConfig};
use gpu_market_agent::gpu::mps::Mps;
use gpu_market_agent::gpu::simulated::{SimulatedGpu, TokioTime};
use gpu_market_agent::metrics::Metrics;
use gpu_market_agent::reconcile::{Reconciler, ReconcilerConfig};
use gpu_market_agent::runtime::recording::RecordingRuntime;
use tempfile::TempDir;

use super::{machine_gpus, MarketUnderTest, ELECTRICITY_COST};

/// How often the loop ticks, in seconds.
pub const POLL: u64 = 5;

/// A reconciler of the market's machine, and what it runs containers on.
pub struct Agent {
    pub reconciler: Reconciler,
    pub runtime: Arc<RecordingRuntime>,
    /// The simulated MPS its shared leases' daemons run from.
    mps: Mps,
    _dir: TempDir,
}

impl Drop for Agent {
    /// The daemons of the shared leases the scenario left running.
    fn drop(&mut self) {
        gpu_market_agent::gpu::mps::sweep(&self.mps, &Default::default());
    }
}

impl Agent {
    pub fn start(m: &impl MarketUnderTest) -> Agent {
        Agent::on(m.chain())
    }

    /// The agent of the machine `chain` is the view of (one of [`machine_gpus`]).
    pub fn on(chain: Arc<dyn Chain>) -> Agent {
        let configs: Vec<SimulatedGpuConfig> = machine_gpus()
            .iter()
            .map(|g| SimulatedGpuConfig {
                class: g.class,
                memory_gib: g.memory_gib,
                topology_group: g.topology_group,
                limits: g.limits(),
                default_power_w: 350,
            })
            .collect();
        let gpus = Arc::new(SimulatedGpu::new(&configs, Arc::new(TokioTime::new())));
        let runtime = Arc::new(RecordingRuntime::new());
        let dir = tempfile::tempdir().expect("a data directory");
        let mps = gpu_market_agent::gpu::mps::simulated(&dir.path().join("mps"));
        let config = ReconcilerConfig {
            data_dir: dir.path().to_path_buf(),
            electricity_cost_per_kwh: ELECTRICITY_COST,
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
            // The agent's defaults, as a host runs it.
            images: ImageBudget::default(),
            registries: BTreeMap::new(),
            env_key: Arc::new(solana_keypair::Keypair::new()),
            // SIMULATED: the GPUs are shared in slices; each shared lease's daemon is the
            // simulated control program's (processes and pipes, no GPU).
            mps: Some(mps.clone()),
            retention: Duration::from_secs(3_600),
            retained_scratch_bytes: gpu_market_agent::config::DEFAULT_RETAINED_SCRATCH_MIB << 20,
            park_idle_gpus: true,
        };
        let reconciler = Reconciler::new(
            chain,
            runtime.clone(),
            gpus,
            config,
            Arc::new(Metrics::default()),
        )
        .expect("a reconciler with an empty state file");
        Agent {
            reconciler,
            runtime,
            mps,
            _dir: dir,
        }
    }

    /// Ticks every [`POLL`] seconds for `secs`, moving the market's clocks; after each tick the
    /// container jobs it started run (50 ms of real time, and up to 2 s while they wait on work
    /// handed to blocking threads, the runtime kept busy meanwhile so that the paused clock does
    /// not jump).
    pub async fn run_for(&mut self, m: &impl MarketUnderTest, secs: u64) {
        for _ in 0..secs / POLL {
            m.advance(POLL).await;
            self.tick().await;
        }
    }

    /// One tick, then the container jobs it started run (see [`Agent::run_for`]).
    pub async fn tick(&mut self) {
        self.reconciler.tick(false).await.expect("tick");
        for waited in 0..2_000 {
            tokio::task::yield_now().await;
            if waited >= 50 && gpu_market_agent::off_runtime_calls() == 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// How many of the runtime's containers are running.
    pub fn running(&self) -> usize {
        self.runtime
            .containers()
            .values()
            .filter(|c| c.state == gpu_market_agent::runtime::ContainerState::Running)
            .count()
    }
}
