//! `gpu-market`: the command-line client of the GPU market, in the Solana CLI's habits.

mod config;
mod market;
mod output;
mod token;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::config::{Commitment, Config};
use crate::output::OutputFormat;

#[derive(Parser)]
#[command(
    name = "gpu-market",
    version,
    about = "Stake, bid and host on the GPU compute market"
)]
struct Cli {
    /// JSON-RPC URL or moniker: localhost, devnet, testnet, mainnet-beta.
    #[arg(short = 'u', long, global = true, default_value = "localhost")]
    url: String,
    /// Keypair that signs and pays [default: ~/.config/solana/id.json].
    #[arg(short = 'k', long, global = true)]
    keypair: Option<String>,
    #[arg(long, global = true, value_enum, default_value_t = Commitment::Confirmed)]
    commitment: Commitment,
    #[arg(long, global = true, value_enum, default_value_t = OutputFormat::Table)]
    output: OutputFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Markets: create and inspect.
    #[command(subcommand)]
    Market(market::MarketCommand),
    /// SPL token helpers for local clusters (mints, accounts, balances).
    #[command(subcommand)]
    Token(token::TokenCommand),
    /// Writes a new keypair file in the Solana CLI's format.
    Keygen {
        #[arg(long)]
        outfile: String,
        /// Overwrite an existing file.
        #[arg(long)]
        force: bool,
    },
    /// Requests SOL from the cluster's faucet (local and test clusters only).
    Airdrop {
        /// SOL, e.g. 10 or 0.5.
        sol: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = run(cli);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One clear sentence, its causes after a colon; no backtrace.
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let config = Config::new(&cli.url, cli.keypair.as_deref(), cli.commitment, cli.output)?;
    match cli.command {
        Command::Market(c) => market::run(&config, c),
        Command::Token(c) => token::run(&config, c),
        Command::Keygen { outfile, force } => config::keygen(&config, &outfile, force),
        Command::Airdrop { sol } => config::airdrop(&config, &sol),
    }
}
