//! `gpu-market lease list|show|end|reclaim|extend|audit|logs|exec|cp`.

use anyhow::{anyhow, bail, Result};
use clap::Subcommand;
use gpu_market::events::{LeaseEnded, LeaseStarted, RefundDue, SpotPreempted};
use gpu_market::state::{Bid, BidKind, Lease, Machine, Market};
use gpu_market_core::lease::exit;
use gpu_market_core::math::normalise_bps;
use gpu_market_core::settlement;
use gpu_market_sdk::api::LogsQuery;
use gpu_market_sdk::events::from_logs;
use gpu_market_sdk::{ClientInstruction, CloseLease};
use serde_json::{json, Value};
use solana_instruction::Instruction;
use solana_pubkey::Pubkey;
use solana_signer::Signer;

use crate::bid::{auto_power_bps_field, auto_power_field};
use crate::config::{Config, Signing};

mod audit;
mod extend;
pub(crate) mod remote;
mod terminal;
use crate::output::{print_list, print_record, text, Fields};
use crate::parse;

#[derive(Subcommand)]
pub enum LeaseCommand {
    /// Lists a market's leases.
    List {
        #[arg(long)]
        market: Pubkey,
        /// Only this client's leases.
        #[arg(long, conflicts_with = "machine")]
        client: Option<Pubkey>,
        /// Only leases on this machine.
        #[arg(long)]
        machine: Option<Pubkey>,
        /// Only leases idle now (their last `idle_intervals` proofs or more under the idle
        /// threshold): the market's idle rule ends them after `idle_end_intervals` such proofs,
        /// unless their GPUs get busy first.
        #[arg(long)]
        idle: bool,
    },
    /// Shows a lease: its proofs, energy, utilisation, idle flag, what is paid and refundable,
    /// and why its container exited once the final proof says so. A settled lease (its account
    /// closed) is read back from its settlement transaction: what was paid and refunded.
    Show { lease: Pubkey },
    /// Ends a lease (its client or host): it stops now and settles once the host has proven
    /// its time; run it again after the last proof to settle.
    End {
        lease: Pubkey,
        /// The client's payment-token account for the refund [default: the client's, largest
        /// balance; with none, the refund waits in the client's stake for `stake claim`].
        #[arg(long)]
        tokens: Option<Pubkey>,
    },
    /// Ends a lease whose host has sent no proof for the market's silence window (anyone
    /// may): the lease settles at once, its unproven time is not paid, and the host is slashed
    /// for the silence, half of it to the client's stake. A queue lease's bid goes back to the
    /// queue at its rank with the rest of its escrow, for another machine to run (failover),
    /// while it can still start and pay an interval; otherwise the escrow goes back to the
    /// client.
    Reclaim {
        lease: Pubkey,
        /// As for `end`.
        #[arg(long)]
        tokens: Option<Pubkey>,
        /// Take the escrow back rather than fail over (only the lease's client may).
        #[arg(long)]
        refund: bool,
    },
    /// Buys more run time for a running lease (its client only), at its price, paid into its
    /// escrow now; refused while a bid waiting in the queue could run on its GPUs once it ends
    /// (an extension never passes the queue), and on a machine that is paused or retiring.
    Extend {
        lease: Pubkey,
        /// How much longer: seconds, or e.g. 30m, 2h.
        #[arg(long, value_name = "DURATION")]
        by: String,
        /// The client's payment-token account to pay from [default: its largest].
        #[arg(long)]
        tokens: Option<Pubkey>,
    },
    /// Checks the power logs the host's agent kept for a lease (its container sees them at
    /// /run/gpu-market/evidence) against the proofs on chain: each is the log its proof
    /// committed to, and the peaks the proof stated are the log's.
    Audit {
        lease: Pubkey,
        /// The folder of the lease's logs (`<interval>.json`).
        #[arg(long, value_name = "DIR")]
        evidence: std::path::PathBuf,
    },
    /// Streams the output (stdout and stderr) of the lease's container from its host's agent.
    Logs {
        lease: Pubkey,
        /// Goes on streaming until the container stops.
        #[arg(long)]
        follow: bool,
        /// Only the last N lines.
        #[arg(long, value_name = "N")]
        tail: Option<u64>,
        /// Only what was printed from this unix second on.
        #[arg(long, value_name = "UNIX", value_parser = clap::value_parser!(i64).range(0..))]
        since: Option<i64>,
        #[command(flatten)]
        remote: remote::Remote,
    },
    /// Runs a command in the lease's running container, our standard input piped to it and its
    /// output to ours; exits with its exit code. `gpu-market lease exec LEASE -- CMD ARGS...`;
    /// `-t` for a shell: `gpu-market lease exec -t LEASE -- bash`.
    Exec {
        lease: Pubkey,
        /// On a terminal: ours, in raw mode, sized as our window and following its changes
        /// (standard input must be a terminal; the command's output comes as one stream).
        #[arg(short = 't', long)]
        tty: bool,
        #[arg(last = true, required = true, value_name = "CMD")]
        cmd: Vec<String>,
        #[command(flatten)]
        remote: remote::Remote,
    },
    /// Copies a file or folder of the lease's scratch (`LEASE:/workspace/PATH`) into LOCAL_DIR,
    /// while its container runs or after it exited; prints each file written with its sha256.
    Cp {
        #[arg(value_name = "LEASE:/workspace/PATH")]
        source: String,
        #[arg(value_name = "LOCAL_DIR")]
        dir: std::path::PathBuf,
        /// The sha256 (hex) the single file copied must have: a file that differs is deleted,
        /// and the command fails.
        #[arg(long, value_name = "HEX", value_parser = remote::parse_sha256)]
        expect_sha256: Option<[u8; 32]>,
        #[command(flatten)]
        remote: remote::Remote,
    },
}

pub fn run(config: &Config, command: LeaseCommand) -> Result<()> {
    match command {
        LeaseCommand::List {
            market,
            client,
            machine,
            idle,
        } => list(config, &market, client, machine, idle),
        LeaseCommand::Show { lease } => show(config, &lease),
        LeaseCommand::End { lease, tokens } => end(config, lease, tokens, Closing::End),
        LeaseCommand::Reclaim {
            lease,
            tokens,
            refund,
        } => end(config, lease, tokens, Closing::Reclaim { refund }),
        LeaseCommand::Extend { lease, by, tokens } => extend::extend(config, &lease, &by, tokens),
        LeaseCommand::Audit { lease, evidence } => audit::audit(config, &lease, &evidence),
        LeaseCommand::Logs {
            lease,
            follow,
            tail,
            since,
            remote,
        } => {
            let query = LogsQuery {
                tail,
                since,
                follow,
            };
            remote::logs(config, &lease, query, &remote)
        }
        LeaseCommand::Exec {
            lease,
            tty,
            cmd,
            remote,
        } => remote::exec(config, &lease, cmd, tty, &remote),
        LeaseCommand::Cp {
            source,
            dir,
            expect_sha256,
            remote,
        } => remote::cp(config, &source, &dir, expect_sha256, &remote),
    }
}

fn list(
    config: &Config,
    market: &Pubkey,
    client: Option<Pubkey>,
    machine: Option<Pubkey>,
    idle: bool,
) -> Result<()> {
    let filter = LeaseFilter {
        client,
        machine,
        idle,
    };
    let rows = lease_rows(config, market, filter, config.cluster_time()?)?;
    print_list(config.output, LIST_COLUMNS, &rows);
    Ok(())
}

/// The columns `lease list` prints of [`lease_rows`].
pub(crate) const LIST_COLUMNS: &[&str] = &[
    "lease",
    "machine",
    "client",
    "kind",
    "gpus",
    "started_at",
    "ends_at",
    "paid",
    "refundable",
    "idle",
];

/// Which of a market's leases [`lease_rows`] reads: only a client's, only a machine's, only
/// those idle now.
#[derive(Default)]
pub(crate) struct LeaseFilter {
    pub client: Option<Pubkey>,
    pub machine: Option<Pubkey>,
    pub idle: bool,
}

/// A market's leases as `lease list` shows them (and `gpu-market serve`'s market page), each
/// with what is paid and refundable at cluster time `now`.
pub(crate) fn lease_rows(
    config: &Config,
    market: &Pubkey,
    only: LeaseFilter,
    now: i64,
) -> Result<Vec<Fields>> {
    let m: Market = config.fetch(market, "market")?;
    let decimals = config.mint_decimals(&m.payment_mint)?;
    let mut filter = vec![(0, *market)];
    filter.extend(only.machine.map(|k| (32, k)));
    filter.extend(only.client.map(|k| (96, k)));
    let mut leases = config.program_accounts_of::<Lease>(&filter)?;
    leases.retain(|(_, l)| !only.idle || l.idle_streak >= l.rules.idle_intervals);
    leases
        .iter()
        .map(|(key, l)| lease_fields(key, l, &m, decimals, now))
        .collect()
}

fn show(config: &Config, lease: &Pubkey) -> Result<()> {
    let Some(l) = config.fetch_if_any::<Lease>(lease, "lease")? else {
        return show_settled(config, lease);
    };
    let m: Market = config.fetch(&l.market, "market")?;
    let b: Option<Bid> = config.fetch(&l.bid, "bid").ok();
    let mut fields = lease_fields(
        lease,
        &l,
        &m,
        config.mint_decimals(&m.payment_mint)?,
        config.cluster_time()?,
    )?;
    if let Some(b) = &b {
        fields.extend(room_fields(config, lease, &l, b));
    }
    print_record(config.output, &fields);
    Ok(())
}

/// The ports and scratch the lease holds and, for its client (the keypair), where to connect
/// to its published ports, as its machine's agent tells it.
fn room_fields(config: &Config, lease: &Pubkey, l: &Lease, b: &Bid) -> Fields {
    let mut fields: Fields = vec![
        ("ports", json!(b.ports)),
        ("scratch_gib", b.scratch_gib.into()),
        ("cpus", crate::parse::cores(l.cpu_milli)),
        ("memory_mib", l.memory_mib.into()),
    ];
    let client = config.signer().is_ok_and(|k| k.pubkey() == l.client);
    if b.ports.is_empty() || !client {
        return fields;
    }
    let connect = config
        .fetch::<Machine>(&l.machine, "machine")
        .and_then(|mach| remote::connect_addresses(config, lease, (l.machine, &mach)));
    fields.push(match connect {
        Ok(addresses) => ("connect", json!(addresses)),
        Err(e) => ("connect", text(format!("not known: {e:#}"))),
    });
    fields
}

/// How `lease end` or `lease reclaim` closes a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Closing {
    End,
    /// With `refund`, the client takes the escrow back rather than failing over.
    Reclaim {
        refund: bool,
    },
}

/// `lease end` or `lease reclaim`: refused before anything is sent when the program would
/// refuse.
fn end(config: &Config, lease: Pubkey, tokens: Option<Pubkey>, closing: Closing) -> Result<()> {
    let signer = config.signer()?;
    let Ending {
        instructions,
        lease: l,
        market: m,
        client_tokens,
    } = plan_end(config, signer.key(), &lease, tokens, closing)?;
    let signature = config.send(&signer, &instructions, &[])?;
    let decimals = config.mint_decimals(&m.payment_mint)?;
    let mut fields: Fields = match config.fetch_if_any::<Lease>(&lease, "lease")? {
        Some(after) => vec![
            ("lease", text(lease)),
            ("status", text("stopping")),
            ("stop_at", after.stop().into()),
            ("proven_until", after.proven_until.into()),
            (
                "note",
                text("the lease settles once the host proves its time up to stop_at: run `lease end` again then"),
            ),
        ],
        None => {
            // Settled: the bid's escrow was refunded, or the bid put back in its book.
            let requeued = config.fetch_if_any::<Bid>(&l.bid, "bid")?.is_some();
            let refund = if requeued { 0 } else { l.escrow };
            let settled = LeaseEnded {
                lease,
                market: l.market,
                client: l.client,
                paid: l.paid,
                refund,
                requeued,
                idle: l.idle,
                exit_code: l.exit_code,
            };
            settlement_fields(&settled, refund > 0 && client_tokens.is_none(), decimals)
        }
    };
    fields.push(("signature", text(signature)));
    print_record(config.output, &fields);
    Ok(())
}

/// What `lease end` or `lease reclaim` sends (the `end-lease` action of
/// `gpu-market serve`), with what the settlement report reads; refused before anything is
/// built when the program would refuse.
pub(crate) struct Ending {
    pub instructions: Vec<Instruction>,
    pub lease: Lease,
    pub market: Market,
    /// Where the client's refund goes; `None`: into its stake, to claim.
    pub client_tokens: Option<Pubkey>,
}

pub(crate) fn plan_end(
    config: &Config,
    signer: Signing,
    lease: &Pubkey,
    tokens: Option<Pubkey>,
    closing: Closing,
) -> Result<Ending> {
    let l: Lease = config.fetch(lease, "lease")?;
    let m: Market = config.fetch(&l.market, "market")?;
    let mach: Machine = config.fetch(&l.machine, "machine")?;
    let me = signer.pubkey();
    let reclaim = closing != Closing::End;
    let refund = closing == Closing::Reclaim { refund: true };
    if refund && me != l.client {
        bail!(
            "only the lease's client {} may take the escrow back rather than fail over; the signer is {me}",
            l.client
        );
    }
    if reclaim {
        check_reclaim(config, lease, &l)?;
    } else if ![l.client, mach.owner, mach.agent].contains(&me) && !l.fully_proven() {
        bail!(
            "only the lease's client {} or its host may end it before its time is proven; the signer is {me}",
            l.client
        );
    }
    // With no token account of the client, the refund waits in its stake (`stake claim`).
    let client_tokens = config.refund_account(&l.client, &m.payment_mint, tokens)?;
    let instructions = vec![CloseLease {
        refund,
        ..CloseLease::of(signer, (*lease, &l), &mach, &m, client_tokens, reclaim)
    }
    .instruction()];
    Ok(Ending {
        instructions,
        lease: l,
        market: m,
        client_tokens,
    })
}

/// Whether the program would reclaim lease `l`'s escrow now (anyone may send it: the refund
/// goes to the client whoever signs).
fn check_reclaim(config: &Config, key: &Pubkey, l: &Lease) -> Result<()> {
    if l.fully_proven() {
        bail!("lease {key} is proven up to its stop: end it with `gpu-market lease end {key}`");
    }
    let now = config.cluster_time()?;
    if !l.reclaimable(now) {
        let silent_from = l.silent_from();
        bail!(
            "the host has proven lease {key} up to {}: it counts as silent from {silent_from}, in {} s",
            l.proven_until,
            silent_from - now
        );
    }
    Ok(())
}

fn lease_fields(key: &Pubkey, l: &Lease, m: &Market, decimals: u8, now: i64) -> Result<Fields> {
    let unit = l.kind.unit();
    let gpus = l.gpu_count as u64;
    // Run but not proven yet: it will be paid out of the escrow when the host proves it.
    let unproven_secs = now.min(l.stop()).saturating_sub(l.proven_until).max(0) as u64;
    let owed = settlement::cost(l.price, unit, gpus, unproven_secs)
        .map_err(|e| anyhow!("cannot price the unproven time of lease {key}: {e:?}"))?;
    let proven_secs = l.proven_until.saturating_sub(l.started_at).max(0) as u64;
    let stopping = l.stop_at != Lease::NOT_STOPPED;
    let mut fields = vec![
        ("lease", text(key)),
        ("market", text(l.market)),
        ("machine", text(l.machine)),
        ("bid", text(l.bid)),
        ("client", text(l.client)),
        (
            "kind",
            text(match l.kind {
                BidKind::Queue => "queue",
                BidKind::Spot => "spot",
            }),
        ),
        ("gpus", Value::from(l.gpus().to_vec())),
        ("gib_per_gpu", l.gib_per_gpu.into()),
        (
            "power_limits_w",
            Value::from(l.power_limits_w[..l.gpu_count as usize].to_vec()),
        ),
        auto_power_field(l.auto_power),
        auto_power_bps_field(l.auto_power),
        ("price", parse::tokens(l.price, decimals)),
        ("started_at", l.started_at.into()),
        ("ends_at", l.ends_at.into()),
        (
            "stop_at",
            if stopping {
                l.stop_at.into()
            } else {
                Value::Null
            },
        ),
        ("preempted", l.preempted.into()),
        ("proofs_next_interval", l.next_interval.into()),
        ("proven_until", l.proven_until.into()),
        ("proof_hash", text(hex::encode(l.proof_hash))),
        ("gpu_seconds", l.gpu_seconds.into()),
        (
            "gpu_time_utilisation_bps",
            normalise_bps(l.gpu_seconds, gpus.saturating_mul(proven_secs)).into(),
        ),
        ("energy_j", l.energy_j.into()),
        ("energy_kwh", kwh(l.energy_j)),
        // What the automatic power limit saved of it (null with auto power off).
        (
            "energy_saved_j",
            l.auto_power
                .map_or(Value::Null, |_| l.energy_saved_j.into()),
        ),
        (
            "energy_saved_kwh",
            l.auto_power.map_or(Value::Null, |_| kwh(l.energy_saved_j)),
        ),
        (
            "sm_utilisation_bps",
            l.profile().map_or(Value::Null, |p| p.sm_util_bps.into()),
        ),
        ("idle_streak", l.idle_streak.into()),
        ("idle", l.idle.into()),
        ("violations", l.violations.into()),
        ("paid", parse::tokens(l.paid, decimals)),
        ("escrow_left", parse::tokens(l.escrow, decimals)),
        ("owed_unproven", parse::tokens(owed.min(l.escrow), decimals)),
        (
            "refundable",
            parse::tokens(l.escrow.saturating_sub(owed), decimals),
        ),
        ("protocol_fee_bps", m.params.protocol_fee_bps.into()),
        exit_code_field(l.exit_code),
        exit_reason_field(l.exit_code),
    ];
    // A part of a gang: its place, the gang's size, and where the other parts reach the first.
    if l.parts > 1 {
        fields.push((
            "gang",
            serde_json::json!({
                "part": l.part,
                "parts": l.parts,
                "rendezvous_port": (l.rendezvous_port != 0).then_some(l.rendezvous_port),
            }),
        ));
    }
    Ok(fields)
}

/// Joules in kWh, to the Wh.
fn kwh(joules: u64) -> Value {
    text(gpu_market_core::amount::format(joules / 3_600, 3))
}

/// A settled lease, read back from the chain's history: the `LeaseEnded` event of its
/// settlement, the `RefundDue` of the same transaction when the refund waits in the client's
/// stake, and, for a spot lease preempted in that run, its `SpotPreempted` (when it was told to
/// stop, and for which bid). The history is read newest first, so the run is the last one (a
/// requeued spot bid run again takes the same lease address); its `LeaseStarted` ends the search.
fn show_settled(config: &Config, lease: &Pubkey) -> Result<()> {
    let found = config.find_in_history(lease, |logs| {
        let ended = from_logs::<LeaseEnded>(logs)
            .into_iter()
            .find(|e| e.lease == *lease)?;
        let in_stake = from_logs::<RefundDue>(logs).iter().any(|r| {
            r.owner == ended.client && r.market == ended.market && r.amount == ended.refund
        });
        Some((ended, in_stake))
    })?;
    let Some((signature, (ended, in_stake))) = found else {
        bail!(
            "lease {lease} does not exist on {}, and no settlement of it is in the cluster's history",
            config.url
        );
    };
    let preempted = config
        .find_in_history(lease, |logs| {
            if let Some(p) = from_logs::<SpotPreempted>(logs)
                .into_iter()
                .find(|p| p.lease == *lease)
            {
                return Some(Some(p));
            }
            from_logs::<LeaseStarted>(logs)
                .iter()
                .any(|s| s.lease == *lease)
                .then_some(None)
        })?
        .and_then(|(_, p)| p);
    let m: Market = config.fetch(&ended.market, "market")?;
    let mut fields = settlement_fields(&ended, in_stake, config.mint_decimals(&m.payment_mint)?);
    fields.push(("preempted", preempted.is_some().into()));
    if let Some(p) = preempted {
        fields.push(("stop_at", p.stop_at.into()));
        fields.push(("preempted_by", text(p.by)));
    }
    fields.push(("signature", text(signature)));
    print_record(config.output, &fields);
    Ok(())
}

/// What a lease's settlement did, as `lease end` and `lease show` print it.
fn settlement_fields(e: &LeaseEnded, refund_in_stake: bool, decimals: u8) -> Fields {
    let status = if e.requeued {
        "settled, bid back in its book to run again"
    } else {
        "settled"
    };
    let mut fields: Fields = vec![
        ("lease", text(e.lease)),
        ("market", text(e.market)),
        ("client", text(e.client)),
        ("status", text(status)),
        ("paid", parse::tokens(e.paid, decimals)),
        ("refund", parse::tokens(e.refund, decimals)),
        ("refund_in_stake", refund_in_stake.into()),
        ("idle", e.idle.into()),
        exit_code_field(e.exit_code),
        exit_reason_field(e.exit_code),
    ];
    if refund_in_stake {
        fields.push((
            "note",
            text(format!(
                "the client had no token account for the refund: it waits in the client's stake; claim it with `gpu-market stake claim --market {}`",
                e.market
            )),
        ));
    }
    fields
}

/// The final proof's exit code (null before it).
fn exit_code_field(code: Option<i32>) -> (&'static str, Value) {
    ("exit_code", code.map_or(Value::Null, Value::from))
}

/// Why the container exited, in a sentence (`gpu_market_core::lease::exit::reason`).
fn exit_reason_field(code: Option<i32>) -> (&'static str, Value) {
    (
        "exit_reason",
        code.map_or(Value::Null, |c| text(exit::reason(c))),
    )
}
