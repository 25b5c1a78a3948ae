//! `gpu-market keeper --market MARKET`: keeps a market's rules moving, for anyone who runs it.
//! Each round it reads the market's accounts and sends, one transaction each, only what the
//! program will accept now, by the program's own rules (`Bid::prunable`, `Lease::fully_proven`,
//! `Lease::reclaimable`, `Machine::slashable_evidence`):
//! - `prune_bid` for each expired bid, and each spot bid of a retired machine: the escrow goes
//!   back to its client in full;
//! - `end_lease` for each lease proven up to its stop: the host is paid, the rest refunded;
//! - `reclaim_escrow` for each lease whose host went silent: the silence is slashed, half to the
//!   client, and a queue bid that can still start goes back to the queue at its rank with its
//!   unproven escrow, for another machine to run (failover); any other's escrow goes back to
//!   the client;
//! - `slash` for each machine with enough current evidence (skipped intervals, power
//!   violations): the stake treasury keeps it;
//! - `unreserve` for each machine whose reservation holds nothing any more (`Machine::holds`:
//!   its bid started, left the book or is reserved elsewhere, the machine is not active, or the
//!   reservation lapsed), so that no stale reservation lingers where the machine's own agent,
//!   which clears its own, is gone;
//! - `close_sealed_env` for each sealed environment whose bid is gone: rent to the client.
//!
//! None of these can send funds anywhere but to their owners, so the keeper needs no trust and
//! no stake: only SOL for fees. Each action is one log line with its reason; counters per duty
//! and outcome are written, with `--metrics-file`, in the OpenMetrics text format for the
//! Prometheus node exporter's textfile collector.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use clap::Args;
use gpu_market::state::{
    Bid, BidKind, BidStatus, Lease, Machine, MachineStatus, Market, SealedEnv,
};
use gpu_market_sdk::{CloseLease, CloseSealedEnv, PruneBid, Slash, Unreserve};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use serde_json::json;
use solana_keypair::Keypair;
use solana_pubkey::Pubkey;

use crate::bid::refund_accounts;
use crate::config::{Config, Sendable};
use crate::output::{self, OutputFormat};

#[derive(Args)]
pub struct KeeperArgs {
    #[arg(long)]
    market: Pubkey,
    /// Seconds between rounds.
    #[arg(long, default_value_t = 10)]
    every: u64,
    /// One round, then exit (e.g. from cron).
    #[arg(long)]
    once: bool,
    /// Writes the counters here after each round (OpenMetrics text; point the node exporter's
    /// textfile collector at its folder).
    #[arg(long, value_name = "FILE")]
    metrics_file: Option<PathBuf>,
    /// The most transactions one round sends (each pays its fee): what is due beyond waits
    /// for the next round, the most pressing first (reclaims, settlements, slashes, then
    /// prunes, stale reservations and closes), so that a flood of expired bids cannot spend
    /// the keeper's SOL.
    #[arg(long, default_value_t = 64)]
    max_per_round: usize,
}

/// What the keeper does, one kind of instruction each.
/// In the order a round capped by `--max-per-round` takes them: the client's escrow and the
/// host's pay first, rent last.
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, PartialOrd, Ord)]
enum Duty {
    Reclaim,
    Settle,
    Slash,
    Prune,
    Unreserve,
    CloseEnv,
}

impl Duty {
    /// Its name in the log and in the counters' `duty` label.
    fn name(self) -> &'static str {
        match self {
            Duty::Prune => "prune",
            Duty::Settle => "settle",
            Duty::Reclaim => "reclaim",
            Duty::Slash => "slash",
            Duty::Unreserve => "unreserve",
            Duty::CloseEnv => "close_env",
        }
    }
}

/// The counters' labels: the duty's name, and `sent` or `refused`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionLabels {
    duty: &'static str,
    outcome: &'static str,
}

struct Counters {
    registry: Registry,
    actions: Family<ActionLabels, Counter>,
    rounds: Counter,
    failed_rounds: Counter,
}

impl Counters {
    fn new() -> Self {
        let mut registry = Registry::with_prefix("gpu_market_keeper");
        let actions = Family::<ActionLabels, Counter>::default();
        registry.register(
            "actions",
            "Instructions sent, by duty and outcome",
            actions.clone(),
        );
        let rounds = Counter::default();
        registry.register("rounds", "Rounds run", rounds.clone());
        let failed_rounds = Counter::default();
        registry.register(
            "failed_rounds",
            "Rounds that could not read the market",
            failed_rounds.clone(),
        );
        Counters {
            registry,
            actions,
            rounds,
            failed_rounds,
        }
    }

    fn write(&self, path: &PathBuf) -> Result<()> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .map_err(|e| anyhow!("cannot encode the counters: {e}"))?;
        // Written whole, then renamed: the collector never reads half a file.
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, path))
            .with_context(|| format!("cannot write the counters to {}", path.display()))
    }
}

/// One instruction due now, with its reason.
struct Due<'a> {
    duty: Duty,
    target: Pubkey,
    reason: String,
    ix: Box<dyn Sendable + 'a>,
}

pub fn run(config: &Config, a: KeeperArgs) -> Result<()> {
    let keeper = config.signer()?;
    let keeper = keeper.keypair("the keeper")?;
    let counters = Counters::new();
    loop {
        counters.rounds.inc();
        match round(config, keeper, &a.market, a.max_per_round) {
            Ok(done) => {
                for (duty, sent) in done {
                    let outcome = if sent { "sent" } else { "refused" };
                    counters
                        .actions
                        .get_or_create(&ActionLabels {
                            duty: duty.name(),
                            outcome,
                        })
                        .inc();
                }
            }
            Err(e) => {
                counters.failed_rounds.inc();
                eprintln!("keeper: cannot read market {}: {e:#}", a.market);
                if a.once {
                    return Err(e);
                }
            }
        }
        if let Some(path) = &a.metrics_file {
            counters.write(path)?;
        }
        if a.once {
            return Ok(());
        }
        std::thread::sleep(Duration::from_secs(a.every.max(1)));
    }
}

/// Sends what is due now, one transaction each, at most `max` of them (the most pressing
/// first); returns each duty sent and whether the program took it.
fn round(
    config: &Config,
    keeper: &Keypair,
    market: &Pubkey,
    max: usize,
) -> Result<Vec<(Duty, bool)>> {
    let (due, deferred) = capped(due(config, keeper, market)?, max, |d| d.duty);
    if deferred > 0 {
        eprintln!(
            "keeper: {deferred} more due than --max-per-round {max}; they wait for the next round"
        );
    }
    let mut done = Vec::with_capacity(due.len());
    for d in due {
        let sent = config.send_all(keeper, &[d.ix.as_ref()]);
        log(config.output, &d, &sent);
        done.push((d.duty, sent.is_ok()));
    }
    Ok(done)
}

/// The first `max` of `due`, the most pressing duties first (each duty's in the order found),
/// and how many are left for a later round.
fn capped<T>(mut due: Vec<T>, max: usize, duty: impl Fn(&T) -> Duty) -> (Vec<T>, usize) {
    due.sort_by_key(|d| duty(d));
    let deferred = due.len().saturating_sub(max);
    due.truncate(max);
    (due, deferred)
}

fn log(format: OutputFormat, d: &Due, sent: &Result<String>) {
    let duty = d.duty.name();
    match format {
        OutputFormat::Json => {
            let mut line =
                json!({"duty": duty, "target": d.target.to_string(), "reason": d.reason});
            match sent {
                Ok(sig) => line["signature"] = json!(sig),
                Err(e) => line["error"] = json!(format!("{e:#}")),
            }
            output::line(line);
        }
        OutputFormat::Table => match sent {
            Ok(sig) => output::line(format_args!("{duty} {}: {} ({sig})", d.target, d.reason)),
            Err(e) => output::line(format_args!(
                "{duty} {}: {}: refused: {e:#}",
                d.target, d.reason
            )),
        },
    }
}

/// Everything the program would accept from anyone in `market` now.
fn due<'a>(config: &Config, keeper: &'a Keypair, market: &Pubkey) -> Result<Vec<Due<'a>>> {
    let m: Market = config.fetch(market, "market")?;
    let now = config.cluster_time()?;
    let machines: BTreeMap<Pubkey, Machine> = config
        .program_accounts_of::<Machine>(&[(0, *market)])?
        .into_iter()
        .collect();
    let mut due = Vec::new();
    expired_bids(config, keeper, (market, &m), &machines, now, &mut due)?;
    ended_leases(config, keeper, (market, &m), &machines, now, &mut due)?;
    for (key, mach) in &machines {
        if let Some(units) = mach.slashable_evidence(now, &m) {
            due.push(Due {
                duty: Duty::Slash,
                target: *key,
                reason: format!(
                    "{units} pieces of evidence ({} skipped intervals, {} power-limit violations; the market slashes from {})",
                    mach.unslashed_missed, mach.unslashed_violations, m.params.slash_evidence
                ),
                ix: Box::new(Slash {
                    signer: keeper,
                    market: *market,
                    machine: *key,
                    host: mach.owner,
                }),
            });
        }
    }
    stale_reservations(config, (market, &m), &machines, now, &mut due)?;
    orphan_envs(config, keeper, market, &mut due)?;
    Ok(due)
}

fn stale_reservations(
    config: &Config,
    (market, m): (&Pubkey, &Market),
    machines: &BTreeMap<Pubkey, Machine>,
    now: i64,
    due: &mut Vec<Due<'_>>,
) -> Result<()> {
    let reserved: Vec<(&Pubkey, &Machine)> = machines
        .iter()
        .filter(|(_, mach)| mach.reservation.is_set())
        .collect();
    let keys: Vec<Pubkey> = reserved.iter().map(|(_, m)| m.reservation.bid).collect();
    let bids = config.fetch_many::<Bid>(&keys)?;
    for ((key, mach), bid) in reserved.into_iter().zip(bids) {
        let held = mach.reservation.bid;
        let reason = match &bid {
            Some(b) if mach.holds(key, (&held, b), m, now) => continue,
            None => format!("its bid {held} is closed"),
            Some(b) if b.status != BidStatus::Open => {
                format!("its bid {held} started or left the book")
            }
            Some(b) if mach.reservation.round != b.reserved_round => {
                format!(
                    "its bid {held} was reserved again since (on machine {})",
                    b.reserved_on
                )
            }
            Some(b) if !b.is_gang() && b.reserved_on != *key => {
                format!("its bid {held} is reserved on machine {}", b.reserved_on)
            }
            Some(_) if mach.status != MachineStatus::Active => {
                "the machine is not active".to_string()
            }
            Some(_) => format!(
                "it lapsed a silence window after its start {}",
                mach.reservation.start
            ),
        };
        due.push(Due {
            duty: Duty::Unreserve,
            target: *key,
            reason,
            ix: Box::new(Unreserve::of(*market, (*key, mach))),
        });
    }
    Ok(())
}

fn expired_bids<'a>(
    config: &Config,
    keeper: &'a Keypair,
    (market, m): (&Pubkey, &Market),
    machines: &BTreeMap<Pubkey, Machine>,
    now: i64,
    due: &mut Vec<Due<'a>>,
) -> Result<()> {
    let bids: Vec<(Pubkey, Bid)> = config
        .program_accounts_of::<Bid>(&[(0, *market)])?
        .into_iter()
        .filter(|(_, b)| {
            let machine = machines.get(&b.machine).map(|m| m.status);
            b.status == BidStatus::Open && b.prunable(now, machine)
        })
        .collect();
    let refund_to = refund_accounts(config, bids.iter().map(|(_, b)| b), m)?;
    for ((key, b), to) in bids.into_iter().zip(refund_to) {
        let book = match b.kind {
            BidKind::Queue => m.queue_book,
            BidKind::Spot => match machines.get(&b.machine) {
                Some(mach) => mach.spot_book,
                None => continue,
            },
        };
        let reason = match b.expired(now) {
            true => format!("its latest start {} has passed", b.latest_start()),
            false => format!("its machine {} has retired", b.machine),
        };
        due.push(Due {
            duty: Duty::Prune,
            target: key,
            reason,
            ix: Box::new(PruneBid {
                caller: keeper,
                market: *market,
                bid: key,
                client: b.client,
                book,
                payment_mint: m.payment_mint,
                client_tokens: to,
                machine: (b.kind == BidKind::Spot).then_some(b.machine),
            }),
        });
    }
    Ok(())
}

fn ended_leases<'a>(
    config: &Config,
    keeper: &'a Keypair,
    (market, m): (&Pubkey, &Market),
    machines: &BTreeMap<Pubkey, Machine>,
    now: i64,
    due: &mut Vec<Due<'a>>,
) -> Result<()> {
    let leases: Vec<(Pubkey, Lease)> = config
        .program_accounts_of::<Lease>(&[(0, *market)])?
        .into_iter()
        .filter(|(_, l)| l.fully_proven() || l.reclaimable(now))
        .collect();
    let bids = config.fetch_many::<Bid>(&leases.iter().map(|(_, l)| l.bid).collect::<Vec<_>>())?;
    for ((key, l), b) in leases.into_iter().zip(bids) {
        let (Some(b), Some(mach)) = (b, machines.get(&l.machine)) else {
            continue;
        };
        let reclaim = !l.fully_proven();
        let (duty, reason) = if reclaim {
            (
                Duty::Reclaim,
                format!(
                    "its host has been silent since {} (silent from {})",
                    l.proven_until,
                    l.silent_from()
                ),
            )
        } else {
            (Duty::Settle, format!("proven up to its stop {}", l.stop()))
        };
        let client_tokens = refund_accounts(config, [&b], m)?[0];
        due.push(Due {
            duty,
            target: key,
            reason,
            ix: Box::new(CloseLease::of(
                keeper,
                (key, &l),
                mach,
                m,
                client_tokens,
                reclaim,
            )),
        });
    }
    Ok(())
}

fn orphan_envs<'a>(
    config: &Config,
    keeper: &'a Keypair,
    market: &Pubkey,
    due: &mut Vec<Due<'a>>,
) -> Result<()> {
    let envs = config.program_accounts_of::<SealedEnv>(&[(0, *market)])?;
    let bids = config.fetch_many::<Bid>(&envs.iter().map(|(_, e)| e.bid).collect::<Vec<_>>())?;
    for ((key, e), b) in envs.into_iter().zip(bids) {
        if b.is_none() {
            due.push(Due {
                duty: Duty::CloseEnv,
                target: key,
                reason: format!("its bid {} is closed", e.bid),
                ix: Box::new(CloseSealedEnv {
                    signer: keeper,
                    bid: e.bid,
                    client: e.client,
                    recipient: e.recipient,
                }),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capped_round_takes_the_most_pressing_duties_first_and_defers_the_rest() {
        let found = vec![
            (Duty::Prune, 1),
            (Duty::CloseEnv, 2),
            (Duty::Reclaim, 3),
            (Duty::Prune, 4),
            (Duty::Settle, 5),
            (Duty::Unreserve, 7),
            (Duty::Slash, 6),
        ];
        let (taken, deferred) = capped(found.clone(), 4, |d| d.0);
        assert_eq!(
            taken,
            vec![
                (Duty::Reclaim, 3),
                (Duty::Settle, 5),
                (Duty::Slash, 6),
                (Duty::Prune, 1)
            ]
        );
        assert_eq!(deferred, 3);
        let (all, none) = capped(found, 64, |d| d.0);
        assert_eq!((all.len(), none), (7, 0));
        // A stale reservation before the rent of a sealed environment.
        assert_eq!(
            all[5..].iter().map(|d| d.0).collect::<Vec<_>>(),
            [Duty::Unreserve, Duty::CloseEnv]
        );
    }
}
