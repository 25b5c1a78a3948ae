//! `gpu-market-agent`: the host operator's daemon.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use gpu_market_agent::chain::solana::{watch, SolanaChain};
use gpu_market_agent::chain::Chain;
use gpu_market_agent::config::{Commitment, Config, GpuBackendConfig, LogFormat};
use gpu_market_agent::detect::gpus_file;
use gpu_market_agent::docker::{ContainerSpec, DockerEngine};
use gpu_market_agent::gpu::nvml::NvmlGpu;
use gpu_market_agent::gpu::simulated::{SimulatedGpu, TokioTime};
use gpu_market_agent::gpu::GpuBackend;
use gpu_market_agent::metrics::{self, Metrics};
use gpu_market_agent::reconcile::{DrainOutcome, Reconciler, ReconcilerConfig};
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
        /// The TOML configuration file.
        #[arg(long)]
        config: PathBuf,
    },
    /// Runs the daemon: watches the market, runs leases, proves usage; drains on SIGTERM.
    Run {
        /// The TOML configuration file.
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
            let config = load_config(&config)?;
            let classes = match &config.gpu {
                GpuBackendConfig::Nvml { classes } => classes.clone(),
                GpuBackendConfig::Simulated(_) => Default::default(),
            };
            print!("{}", gpus_file(&gpu_backend(&config)?.gpus(), &classes)?);
            Ok(())
        }
        Command::Run { config } => run(&config).await,
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

fn load_config(path: &Path) -> Result<Config> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the configuration {}", path.display()))?;
    Config::parse(&text).with_context(|| format!("in the configuration {}", path.display()))
}

fn gpu_backend(config: &Config) -> Result<Arc<dyn GpuBackend>> {
    Ok(match &config.gpu {
        GpuBackendConfig::Simulated(list) => {
            Arc::new(SimulatedGpu::new(list, Arc::new(TokioTime::new())))
        }
        GpuBackendConfig::Nvml { .. } => Arc::new(NvmlGpu::new()?),
    })
}

async fn run(path: &Path) -> Result<()> {
    let config = load_config(path)?;
    init_tracing(config.log_format);

    let gpus = gpu_backend(&config)?;
    tracing::info!(gpus = gpus.gpus().len(), "GPU backend ready");
    let engine = DockerEngine::connect(&config.engine_socket, &config.machine.to_string()).await?;
    tracing::info!(api = %engine.api_version(), "container engine ready");
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("creating the data folder {}", config.data_dir.display()))?;
    let agent_key = solana_keypair::read_keypair_file(&config.keypair).map_err(|e| {
        anyhow::anyhow!(
            "cannot read the agent keypair {}: {e}",
            config.keypair.display()
        )
    })?;
    let env_key = Arc::new(agent_key.insecure_clone());
    let (chain, electricity_cost_per_kwh, wake) = connect_chain(&config, agent_key).await;

    let metrics = Arc::new(Metrics::default());
    let listener = tokio::net::TcpListener::bind(config.metrics_listen)
        .await
        .with_context(|| format!("binding the metrics address {}", config.metrics_listen))?;
    let (stop_metrics, metrics_stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(metrics::serve(listener, metrics.clone(), async {
        metrics_stopped.await.ok();
    }));

    let reconciler = Reconciler::new(
        chain,
        Arc::new(engine),
        gpus,
        ReconcilerConfig {
            data_dir: config.data_dir.clone(),
            electricity_cost_per_kwh,
            heartbeat_interval: config.heartbeat_interval,
            container: config.container,
            registries: config.registries.clone(),
            env_key,
        },
        metrics,
    )?;
    let outcome = reconciler
        .run(
            config.billing_poll_interval,
            config.drain_deadline,
            wake,
            shutdown_signal(),
        )
        .await;
    stop_metrics.send(()).ok();
    server.await.ok();
    match outcome {
        DrainOutcome::Drained => Ok(()),
        DrainOutcome::DeadlinePassed { left } => anyhow::bail!(
            "the drain deadline passed with {} lease(s) left; the next start finishes them",
            left.len()
        ),
    }
}

/// The market program over JSON-RPC, and the websocket watcher that wakes the loop on every
/// change to this machine's accounts (the loop's poll is the fallback while it is down).
/// Also the electricity cost the spot rule uses: the machine's on chain (the program ranks spot
/// bids by it), else, while the cluster cannot be read, the configuration's.
async fn connect_chain(config: &Config, agent: Keypair) -> (Arc<dyn Chain>, u64, Arc<Notify>) {
    let commitment = commitment(config.commitment);
    let chain = SolanaChain::new(
        config.rpc_url.clone(),
        commitment,
        agent,
        config.market,
        config.machine,
        config.host_token_account,
    );
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
    let wake = Arc::new(Notify::new());
    tokio::spawn(watch(
        config.ws_url.clone(),
        commitment,
        config.market,
        config.machine,
        wake.clone(),
        Arc::new(AtomicBool::new(false)),
    ));
    (Arc::new(chain), cost, wake)
}

fn commitment(c: Commitment) -> CommitmentConfig {
    match c {
        Commitment::Processed => CommitmentConfig::processed(),
        Commitment::Confirmed => CommitmentConfig::confirmed(),
        Commitment::Finalized => CommitmentConfig::finalized(),
    }
}

/// Completes on SIGTERM (systemd's stop) or SIGINT.
async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing the SIGTERM handler");
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: draining"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: draining"),
    }
}

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
