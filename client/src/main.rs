//! `gpu-market`: the command-line client of the GPU market, in the Solana CLI's habits.

mod bid;
mod classes;
mod config;
mod host;
mod keeper;
mod lease;
mod market;
mod output;
mod parse;
mod quote;
mod serve;
mod stake;
mod token;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

use crate::config::{Commitment, Config};
use crate::output::{one_line, OutputFormat};

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
    /// Stake: deposit, ask back, withdraw, inspect.
    #[command(subcommand)]
    Stake(stake::StakeCommand),
    /// Machines: register, update, pause, resume, retire, list.
    #[command(subcommand)]
    Host(host::HostCommand),
    /// Bids: place, top up, cancel, inspect, rank, explain.
    #[command(subcommand)]
    Bid(bid::BidCommand),
    /// The dynamic reserve price per GPU class, now and by hour of day.
    Quote(quote::QuoteArgs),
    /// Leases: list, inspect, end.
    #[command(subcommand)]
    Lease(lease::LeaseCommand),
    /// Keeps a market's rules moving (anyone may run it): removes expired bids, settles proven
    /// leases, reclaims silent hosts' escrow for their clients, slashes on evidence.
    Keeper(keeper::KeeperArgs),
    /// Serves the market to wallets: Solana Actions (stake, unstake, withdraw, bid, top up,
    /// cancel, end a lease) whose transactions a wallet signs, and the market page.
    Serve(serve::ServeArgs),
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
    /// Prints a completion script for SHELL, e.g.
    /// `gpu-market completions bash > /etc/bash_completion.d/gpu-market`.
    Completions { shell: clap_complete::Shell },
}

fn main() -> ExitCode {
    // A bug must still end in one line, not a backtrace.
    std::panic::set_hook(Box::new(|info| {
        eprintln!("error: internal error: {}", one_line(&info.to_string()));
    }));
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(), // --help, --version
        Err(e) => {
            eprintln!("{}", output::clap_sentence(&e));
            return ExitCode::from(2);
        }
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One clear sentence, its causes after a colon; no backtrace.
            eprintln!("error: {}", one_line(&format!("{e:#}")));
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    if let Command::Completions { shell } = cli.command {
        let mut script = Vec::new();
        clap_complete::generate(shell, &mut Cli::command(), "gpu-market", &mut script);
        output::line(String::from_utf8_lossy(&script).trim_end());
        return Ok(());
    }
    let config = Config::new(&cli.url, cli.keypair.as_deref(), cli.commitment, cli.output)?;
    match cli.command {
        Command::Market(c) => market::run(&config, c),
        Command::Stake(c) => stake::run(&config, c),
        Command::Host(c) => host::run(&config, c),
        Command::Bid(c) => bid::run(&config, c),
        Command::Quote(a) => quote::run(&config, a),
        Command::Lease(c) => lease::run(&config, c),
        Command::Keeper(a) => keeper::run(&config, a),
        Command::Serve(a) => serve::run(config, a),
        Command::Token(c) => token::run(&config, c),
        Command::Keygen { outfile, force } => config::keygen(&config, &outfile, force),
        Command::Airdrop { sol } => config::airdrop(&config, &sol),
        Command::Completions { .. } => unreachable!("answered before the configuration is read"),
    }
}
