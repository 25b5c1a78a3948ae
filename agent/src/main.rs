//! `gpu-market-agent`: the host operator's daemon.

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use gpu_market_agent::docker::{ContainerSpec, DockerEngine};

#[derive(Parser)]
#[command(version, about = "The GPU market's host agent")]
struct Cli {
    /// The Docker engine's socket.
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
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::CheckEngine { image } => check_engine(&cli.docker_host, &image)
            .await
            .context("check-engine failed"),
    }
}

async fn check_engine(docker_host: &str, image: &str) -> Result<()> {
    let engine = DockerEngine::connect(docker_host).await?;
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
