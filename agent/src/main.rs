//! `gpu-market-agent`: the host operator's daemon.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use gpu_market_agent::chain::mirror::Mirror;
use gpu_market_agent::chain::solana::SolanaChain;
use gpu_market_agent::chain::watch::{watch, WatchConfig};
use gpu_market_agent::chain::Chain;
use gpu_market_agent::check::load::Load;
use gpu_market_agent::check::CheckOptions;
use gpu_market_agent::config::{
    Commitment, Config, GpuBackendConfig, GpuSection, HostCapacity, LogFormat,
};
use gpu_market_agent::control::{DrainControl, DrainReport};
use gpu_market_agent::detect::gpus_file;
use gpu_market_agent::docker::{ContainerSpec, DockerEngine};
use gpu_market_agent::gpu::locks::RecordedLocks;
use gpu_market_agent::gpu::nvml::NvmlGpu;
use gpu_market_agent::gpu::simulated::{self, SimulatedGpu, TokioTime};
use gpu_market_agent::gpu::{check_identity, GpuBackend};
use gpu_market_agent::metrics::{self, Metrics, ServerLimits};
use gpu_market_agent::reconcile::{Reconciler, ReconcilerConfig, RunOutcome};
use gpu_market_agent::redact::{log_filter, RedactingWriter};
use gpu_market_agent::runtime::ContainerRuntime;
use solana_commitment_config::CommitmentConfig;
use solana_keypair::Keypair;
use tokio::sync::Notify;

#[derive(Parser)]
#[command(version, about = "The GPU market's host agent")]
struct Cli {
    /// The Docker engine's socket (check-engine; `run` takes it from its configuration).
    #[arg(
        long,
        env = "DOCKER_HOST",
        default_value = "unix:///var/run/docker.sock"
    )]
    docker_host: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Checks that the engine answers and can pull and run IMAGE; prints what it saw.
    CheckEngine {
        /// An image reference, e.g. 127.0.0.1:5000/gpu-market/busybox:latest.
        image: String,
    },
    /// Prints the GPUs file for the GPUs the configured backend finds, for
    /// `gpu-market host register --gpus` (or `host update`).
    Detect {
        /// The TOML configuration file (only its [gpu] section and billing_poll_interval_secs
        /// are read).
        #[arg(long)]
        config: PathBuf,
    },
    /// Checks the GPUs before the machine is listed: applies and reads back each kind of term a
    /// bid may ask, checks clock locks and a lowered power limit under load at the agent's
    /// sampling rate, confines two MPS clients to a slice, resets the GPUs, and prints a table
    /// and the --gpus file. Exits non-zero when a GPU breaks a promise the market makes.
    Check {
        /// The TOML configuration file (only its [gpu] section and billing_poll_interval_secs
        /// are read).
        #[arg(long)]
        config: PathBuf,
        /// The CUDA workload that loads the GPUs (scripts/gpu-workload.py, run with a Python
        /// that has PyTorch or CuPy): `WORKLOAD burn` and `WORKLOAD hold MIB`. Not needed with
        /// SIMULATED GPUs.
        #[arg(long)]
        workload: Option<String>,
        /// Writes the whole report, with every power reading, as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Seconds each GPU is loaded under a lowered power limit (default: the sustained
        /// window's readings, plus two, at the agent's sampling rate).
        #[arg(long)]
        load_secs: Option<u64>,
    },
    /// Runs the daemon: watches the market, runs leases, proves usage. SIGTERM stops it and
    /// leaves the leases running (a restart or an upgrade takes them back); `drain` ends them.
    Run {
        /// The TOML configuration file.
        #[arg(long)]
        config: PathBuf,
    },
    /// SIMULATED GPUs only: makes GPU `gpu` of the running daemon of this configuration report
    /// Xid `xid`, as its driver would (a demo or test of what a GPU fault does: a fatal one
    /// ends the GPU's leases and pauses the machine on chain).
    SimulateFault {
        /// The TOML configuration file of the daemon.
        #[arg(long)]
        config: PathBuf,
        #[arg(long)]
        gpu: u32,
        /// NVIDIA's Xid code, e.g. 79 (fallen off the bus, fatal) or 13 (a program's own
        /// error, not fatal).
        #[arg(long)]
        xid: u64,
    },
    /// Drains the running daemon of this configuration: it takes no more bids, stops every
    /// lease's container, sends the final proofs, ends the leases, resets the GPUs and exits.
    /// Waits for it and says how it ended.
    Drain {
        /// The TOML configuration file of the daemon.
        #[arg(long)]
        config: PathBuf,
    },
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    match command(Cli::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One sentence with its causes, never a backtrace: this is an operator's tool.
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn command(cli: Cli) -> Result<()> {
    match cli.command {
        Command::CheckEngine { image } => check_engine(&cli.docker_host, &image)
            .await
            .context("check-engine failed"),
        Command::Detect { config } => {
            let section = load_gpu_section(&config)?;
            let classes = classes(&section.gpu);
            print!(
                "{}",
                gpus_file(&gpu_backend(&section.gpu, None)?.gpus(), &classes)?
            );
            Ok(())
        }
        Command::Check {
            config,
            workload,
            json,
            load_secs,
        } => check(&config, workload.as_deref(), json.as_deref(), load_secs).await,
        Command::Run { config } => run(&config).await,
        Command::Drain { config } => drain(&load_config(&config)?).await,
        Command::SimulateFault { config, gpu, xid } => simulate_fault(&config, gpu, xid),
    }
}

async fn check_engine(docker_host: &str, image: &str) -> Result<()> {
    let engine = DockerEngine::connect(docker_host, "check-engine").await?;
    println!("engine API version: {}", engine.api_version());
    let progress = engine.pull(image).await?;
    println!("pulled {image} ({progress} progress messages)");
    let spec = ContainerSpec {
        image: image.to_string(),
        cmd: Some(vec!["echo".into(), "gpu-market agent check".into()]),
        memory_bytes: Some(64 << 20),
        pids_limit: Some(64),
        ..Default::default()
    };
    let id = engine.run(&spec).await?;
    let code = engine.wait(&id).await?;
    let logs = engine.logs(&id).await?;
    engine.remove(&id).await?;
    println!("container exited with {code}: {}", logs.stdout.trim());
    anyhow::ensure!(code == 0, "the check container exited with {code}");
    Ok(())
}

async fn check(
    path: &Path,
    workload: Option<&str>,
    json: Option<&Path>,
    load_secs: Option<u64>,
) -> Result<()> {
    let section = load_gpu_section(path)?;
    let (backend, load, name): (Arc<dyn GpuBackend>, Load, &str) = match &section.gpu {
        GpuBackendConfig::Simulated(list) => {
            let gpus = Arc::new(SimulatedGpu::new(list, Arc::new(TokioTime::new())));
            (gpus.clone(), Load::Simulated(gpus), "SIMULATED")
        }
        GpuBackendConfig::Nvml { .. } => {
            let load = workload.and_then(Load::workload).unwrap_or(Load::None);
            (Arc::new(NvmlGpu::new()?), load, "nvml")
        }
    };
    // As the agent runs it: a lock the check sets is recorded until it is reset, here in a
    // folder of the check's own (the agent's data folder is not read).
    let record = std::env::temp_dir().join("gpu-market-check");
    std::fs::create_dir_all(&record).with_context(|| format!("creating {}", record.display()))?;
    let backend = RecordedLocks::open(backend, &record)?;
    let mut options = CheckOptions::new(section.billing_poll_interval, name);
    if let Some(secs) = load_secs {
        options.load_for = Duration::from_secs(secs);
    }
    options.mps = section.mps.clone();
    options.classes = classes(&section.gpu);
    let report = gpu_market_agent::check::run(&backend, &load, &options).await;
    if let Some(path) = json {
        let text = serde_json::to_string_pretty(&report).expect("the report serialises");
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    print!("{}", report.table());
    let failed: Vec<String> = report
        .failures()
        .map(|r| {
            let setting = r.setting.map_or(String::new(), |s| format!(" {s}"));
            format!("GPU {} {}{setting}: {}", r.gpu, r.step, r.detail)
        })
        .collect();
    anyhow::ensure!(failed.is_empty(), "the check failed: {}", failed.join("; "));
    Ok(())
}

/// NVML's model-name-to-class table; SIMULATED GPUs state their class themselves.
fn classes(gpu: &GpuBackendConfig) -> BTreeMap<String, u8> {
    match gpu {
        GpuBackendConfig::Nvml { classes } => classes.clone(),
        GpuBackendConfig::Simulated(_) => Default::default(),
    }
}

fn load_gpu_section(path: &Path) -> Result<GpuSection> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the configuration {}", path.display()))?;
    GpuSection::parse(&text).with_context(|| format!("in the configuration {}", path.display()))
}

fn load_config(path: &Path) -> Result<Config> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the configuration {}", path.display()))?;
    Config::parse(&text).with_context(|| format!("in the configuration {}", path.display()))
}

/// `simulate-fault`: leaves the fault where the daemon's SIMULATED GPUs take it.
fn simulate_fault(path: &Path, gpu: u32, xid: u64) -> Result<()> {
    let config = load_config(path)?;
    let GpuBackendConfig::Simulated(list) = &config.gpu else {
        anyhow::bail!(
            "{} drives real GPUs: their faults come from their driver, not from this command",
            path.display()
        );
    };
    anyhow::ensure!(
        (gpu as usize) < list.len(),
        "the configuration has {} SIMULATED GPUs: no GPU {gpu}",
        list.len()
    );
    if let GpuBackendConfig::Nvml { .. } = config.gpu {
        // Real GPUs reach containers through the toolkit's hooks: one with a known hole runs
        // no lease.
        let toolkit = gpu_market_agent::gpu::toolkit::check()?;
        tracing::info!(%toolkit, "NVIDIA Container Toolkit");
    }
    let inbox = simulated::fault_inbox(&config.data_dir);
    simulated::leave_fault(&inbox, gpu, xid)
        .with_context(|| format!("writing the fault into {}", inbox.display()))?;
    println!(
        "GPU {gpu} reports Xid {xid} to the agent of {}",
        path.display()
    );
    Ok(())
}

/// The configured GPUs; SIMULATED ones take faults from `fault_inbox` where given.
fn gpu_backend(
    gpu: &GpuBackendConfig,
    fault_inbox: Option<PathBuf>,
) -> Result<Arc<dyn GpuBackend>> {
    Ok(match gpu {
        GpuBackendConfig::Simulated(list) => {
            let gpus = SimulatedGpu::new(list, Arc::new(TokioTime::new()));
            Arc::new(match fault_inbox {
                Some(inbox) => gpus.with_fault_inbox(inbox),
                None => gpus,
            })
        }
        GpuBackendConfig::Nvml { .. } => Arc::new(NvmlGpu::new()?),
    })
}

async fn run(path: &Path) -> Result<()> {
    let config = load_config(path)?;
    init_tracing(config.log_format);

    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("creating the data folder {}", config.data_dir.display()))?;
    // The clock locks a crashed run left are in the record; the loop's first tick resets the
    // GPUs no lease uses.
    let inbox = simulated::fault_inbox(&config.data_dir);
    let gpus: Arc<dyn GpuBackend> = Arc::new(RecordedLocks::open(
        gpu_backend(&config.gpu, Some(inbox))?,
        &config.data_dir,
    )?);
    tracing::info!(gpus = gpus.gpus().len(), "GPU backend ready");
    config
        .container
        .check_host(
            gpus.gpus().len(),
            HostCapacity::this_host()?.for_leases(config.network.retained_scratch_mib),
        )
        .with_context(|| format!("in the configuration {}", path.display()))?;
    let metrics = Arc::new(Metrics::new(config.health));
    let mut engine =
        DockerEngine::connect(&config.engine_socket, &config.machine.to_string()).await?;
    if let Some(publishing) = config.network.publishing {
        engine = engine.publishing(publishing);
    }
    engine = engine.lease_pool(config.network.lease_pool);
    metrics.health().engine_reachable(true);
    tracing::info!(api = %engine.api_version(), "container engine ready");
    let engine = Arc::new(engine);
    // The lease firewall's rules, kept first and whole whatever the engine or the host's
    // firewall does to them, for as long as the agent runs.
    tokio::spawn(gpu_market_agent::network::guard(engine.clone()));
    let agent_key = solana_keypair::read_keypair_file(&config.keypair).map_err(|e| {
        anyhow::anyhow!(
            "cannot read the agent keypair {}: {e}",
            config.keypair.display()
        )
    })?;
    let env_key = Arc::new(agent_key.insecure_clone());
    let (chain, electricity_cost_per_kwh, wake) =
        connect_chain(&config, agent_key, metrics.clone()).await;
    let machine = chain.machine().await;
    if let Ok(m) = &machine {
        let declared: Vec<[u8; 16]> = m.gpus.iter().map(|g| g.uuid).collect();
        check_identity(&declared, &gpus.gpus())
            .with_context(|| format!("machine {}", config.machine))?;
    }
    match machine {
        Ok(m) if m.network.room.ports > 0 && config.network.publishing.is_none() => {
            anyhow::bail!(
                "machine {} promises clients {} published ports per lease, but {} has no \
                 [network] ports range to publish them from",
                config.machine,
                m.network.room.ports,
                path.display()
            )
        }
        Ok(m) => HostCapacity::this_host()?
            .for_leases(config.network.retained_scratch_mib)
            .check_declared(m.network.room.host)
            .with_context(|| format!("machine {}", config.machine))?,
        Err(e) => tracing::warn!(error = %e, "cannot read the machine's network declaration yet"),
    }

    let listener = tokio::net::TcpListener::bind(config.metrics_listen)
        .await
        .with_context(|| format!("binding the metrics address {}", config.metrics_listen))?;
    let (stop_metrics, metrics_stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(metrics::serve(
        listener,
        metrics.clone(),
        ServerLimits::default(),
        async {
            metrics_stopped.await.ok();
        },
    ));
    gpu_market_agent::api::start(&config, &env_key).await?;

    let reconciler = Reconciler::new(
        chain,
        engine,
        gpus,
        ReconcilerConfig {
            data_dir: config.data_dir.clone(),
            electricity_cost_per_kwh,
            heartbeat_interval: config.heartbeat_interval,
            claim_interval: config.claim_interval,
            placement_grace: config.placement_grace,
            container: config.container,
            images: config.images,
            registries: config.registries.clone(),
            env_key,
            mps: config.mps.clone(),
            park_idle_gpus: config.park_idle_gpus,
            retention: config.network.retention,
            retained_scratch_bytes: config.network.retained_scratch_mib << 20,
        },
        metrics,
    )?;
    let control = DrainControl::new(&config.data_dir);
    let outcome = reconciler
        .run(
            config.billing_poll_interval,
            config.drain_deadline,
            wake,
            shutdown_signal(),
            control.requested(),
        )
        .await;
    stop_metrics.send(()).ok();
    server.await.ok();
    let report = match outcome {
        RunOutcome::Stopped { .. } => return Ok(()),
        RunOutcome::Drained => DrainReport {
            drained: true,
            left: Vec::new(),
        },
        RunOutcome::DeadlinePassed { left } => DrainReport {
            drained: false,
            left: left.iter().map(ToString::to_string).collect(),
        },
    };
    control
        .finish(&report)
        .context("writing the drain's result")?;
    anyhow::ensure!(
        report.drained,
        "the drain deadline passed with {} lease(s) left; the next start finishes them",
        report.left.len()
    );
    Ok(())
}

/// `drain`: asks the daemon of `config` to drain through its data folder, and waits for it.
async fn drain(config: &Config) -> Result<()> {
    let control = DrainControl::new(&config.data_dir);
    control
        .request()
        .with_context(|| format!("writing a drain request into {}", config.data_dir.display()))?;
    let took = config.billing_poll_interval + Duration::from_secs(10);
    let deadline = tokio::time::Instant::now() + took;
    while !control.accepted() && control.result()?.is_none() {
        if tokio::time::Instant::now() > deadline {
            control.withdraw()?;
            anyhow::bail!(
                "no agent took the drain request within {} s: is `gpu-market-agent run` running with data_dir {}?",
                took.as_secs(),
                config.data_dir.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!("draining: no new bids; stopping the leases' containers, proving and ending them");
    let deadline = tokio::time::Instant::now() + config.drain_deadline + Duration::from_secs(60);
    loop {
        if let Some(report) = control.result()? {
            if report.drained {
                println!("drained: every lease ended; the agent exited");
                return Ok(());
            }
            anyhow::bail!(
                "the drain deadline passed with {} lease(s) left ({}); the next start finishes them",
                report.left.len(),
                report.left.join(", ")
            );
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the agent did not finish draining in time; see its log"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The market program over JSON-RPC, and the websocket watcher that wakes the loop on every
/// change to this machine's accounts (the loop's poll is the fallback while it is down).
/// Also the electricity cost the spot rule uses: the machine's on chain (the program ranks spot
/// bids by it), else, while the cluster cannot be read, the configuration's.
/// The watcher reports its feed's liveness to `metrics`.
async fn connect_chain(
    config: &Config,
    agent: Keypair,
    metrics: Arc<Metrics>,
) -> (Arc<dyn Chain>, u64, Arc<Notify>) {
    let commitment = commitment(config.commitment);
    let chain = SolanaChain::new(
        config.rpc_url.expose().to_string(),
        commitment,
        metrics.traffic().clone(),
        agent,
        config.market,
        config.machine,
        config.host_token_account,
    )
    .with_priority_fee_cap(config.max_priority_fee_micro_lamports);
    let mirror = Arc::new(Mirror::new());
    let chain = chain.with_mirror(mirror.clone());
    // `SecretUrl` shows the URL redacted: its API key stays out of the log.
    tracing::info!(agent = %chain.agent(), rpc = %config.rpc_url, "chain client ready");
    let cost = match chain.electricity_cost_per_kwh().await {
        Ok(on_chain) => {
            if on_chain != config.electricity_cost_per_kwh {
                tracing::warn!(
                    on_chain,
                    configured = config.electricity_cost_per_kwh,
                    "the machine declares another electricity cost on chain; the spot rule uses it"
                );
            }
            on_chain
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the machine yet; using the configured electricity cost");
            config.electricity_cost_per_kwh
        }
    };
    let books = chain.books().await.unwrap_or_else(|e| {
        tracing::warn!(error = %e, "cannot read the books yet; they are read from the RPC node each tick");
        Vec::new()
    });
    let wake = Arc::new(Notify::new());
    tokio::spawn(watch(
        WatchConfig {
            ws_url: config.ws_url.clone(),
            commitment,
            market: config.market,
            machine: config.machine,
            books,
            silence: config.health.websocket_silence,
        },
        wake.clone(),
        mirror,
        metrics,
    ));
    (Arc::new(chain), cost, wake)
}

fn commitment(c: Commitment) -> CommitmentConfig {
    match c {
        Commitment::Confirmed => CommitmentConfig::confirmed(),
        Commitment::Finalized => CommitmentConfig::finalized(),
    }
}

/// Completes on SIGTERM (systemd's stop) or SIGINT.
async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing the SIGTERM handler");
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: stopping; the leases keep running"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: stopping; the leases keep running"),
    }
}

/// Logs to stdout, every URL in every line redacted (API keys live in RPC URLs, and libraries
/// put URLs in their errors and debug lines).
fn init_tracing(format: LogFormat) {
    let filter = log_filter(std::env::var("RUST_LOG").ok().as_deref());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(RedactingWriter(std::io::stdout));
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
