//! `gpu-market bid place|top-up|cancel|show|list|explain`.

use std::path::PathBuf;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use gpu_market::instructions::{feasible, PlaceBidArgs};
use gpu_market::pda;
use gpu_market::state::{
    Bid, BidKind, BidStatus, Freed, Machine, MachineStatus, Market, StakeAccount, GPU_CLASSES,
    IMAGE_REF_LEN,
};
use gpu_market_core::math::normalise_bps;
use gpu_market_core::score::{self, Inputs};
use gpu_market_core::{matching, settlement};
use gpu_market_sdk::book::read_book;
use gpu_market_sdk::envelope;
use gpu_market_sdk::{CancelBid, OpenStake, PlaceBid, TopUpBid};
use serde_json::{json, Value};
use solana_pubkey::Pubkey;
use solana_signer::Signer;

use crate::config::{Config, Sendable};
use crate::output::{print_list, print_record, text, Fields};
use crate::parse;

#[derive(Subcommand)]
pub enum BidCommand {
    /// Places a queue bid (any matching machine) or, with --machine, a spot bid on one machine;
    /// locks price × GPUs × duration in escrow.
    Place(Box<PlaceArgs>),
    /// Adds AMOUNT (token units) to a bid's escrow.
    TopUp {
        bid: Pubkey,
        /// Token units, e.g. 1.5 (negative amounts are refused with a reason).
        #[arg(allow_hyphen_values = true)]
        amount: String,
        #[arg(long)]
        tokens: Option<Pubkey>,
    },
    /// Cancels a waiting bid; its escrow is refunded in full.
    Cancel {
        bid: Pubkey,
        #[arg(long)]
        tokens: Option<Pubkey>,
    },
    /// Shows a bid with its rank and score parts.
    Show { bid: Pubkey },
    /// Lists the bids of a market's queue book (or a machine's spot book), best first, with
    /// each score's parts.
    List {
        #[arg(long)]
        market: Pubkey,
        /// List this machine's spot book instead of the market's queue book.
        #[arg(long)]
        machine: Option<Pubkey>,
    },
    /// Explains why a bid is not running: which constraint fails on how many machines, and the
    /// reserve price to beat.
    Explain { bid: Pubkey },
}

#[derive(Args)]
pub struct PlaceArgs {
    #[arg(long)]
    market: Pubkey,
    /// A spot bid on this machine (priced per GPU-day); without it, a queue bid (per GPU-hour).
    #[arg(long)]
    machine: Option<Pubkey>,
    /// Image reference, e.g. registry.example/train:v3 (at most 48 bytes).
    #[arg(long)]
    image: String,
    /// The image's sha256 digest (64 hex digits, optionally after `sha256:`).
    #[arg(long)]
    image_digest: String,
    #[arg(long, default_value_t = 1)]
    gpus: u8,
    #[arg(long)]
    gib_per_gpu: u16,
    /// An accepted GPU class of the market (repeatable) [default: every class].
    #[arg(long = "class", value_name = "CLASS")]
    classes: Vec<u8>,
    /// Overclock terms, `power=W[,core-lock=MHz][,mem-lock=MHz][,core-offset=MHz][,mem-offset=MHz]`:
    /// once for every GPU, or once per GPU in order. The power limit is mandatory.
    #[arg(long, required = true, value_name = "TERMS")]
    overclock: Vec<String>,
    /// Price in payment token units: per GPU-hour (queue) or per GPU-day (spot).
    #[arg(long, allow_hyphen_values = true)]
    price: String,
    /// Longest run time: seconds, or e.g. 90m, 2h, 1d.
    #[arg(long)]
    duration: String,
    /// Latest end: +DURATION from now or a unix time [default: one hour after the duration].
    #[arg(long)]
    deadline: Option<String>,
    /// Environment for the container, KEY=VALUE lines; sealed before it leaves this machine.
    #[arg(long, value_name = "FILE")]
    env: Option<PathBuf>,
    /// Who may read the environment [default: the machine's agent key for a spot bid, the
    /// market authority's key for a queue bid].
    #[arg(long, value_name = "PUBKEY")]
    env_to: Option<Pubkey>,
    /// Where the sealed environment is written [default: FILE with its extension replaced by
    /// `.sealed`, e.g. alice.env → alice.sealed].
    #[arg(long, value_name = "FILE")]
    env_out: Option<PathBuf>,
    /// Distinguishes the keypair's bids [default: from the clock].
    #[arg(long)]
    nonce: Option<u64>,
    /// The payment-token account to pay the escrow from [default: the keypair's].
    #[arg(long)]
    tokens: Option<Pubkey>,
}

pub fn run(config: &Config, command: BidCommand) -> Result<()> {
    match command {
        BidCommand::Place(args) => place(config, *args),
        BidCommand::TopUp {
            bid,
            amount,
            tokens,
        } => {
            let client = config.signer()?;
            let b: Bid = config.fetch(&bid, "bid")?;
            let m: Market = config.fetch(&b.market, "market")?;
            let decimals = config.mint_decimals(&m.payment_mint)?;
            let amount = parse::positive_amount(&amount, decimals, "top-up")?;
            own(&b, &bid, &client.pubkey())?;
            let (client_tokens, balance) =
                config.token_account(&client.pubkey(), &m.payment_mint, tokens)?;
            check_balance(amount, balance, decimals, &client_tokens, "the top-up")?;
            let signature = config.send_all(
                &client,
                &[&TopUpBid {
                    client: &client,
                    market: b.market,
                    bid,
                    payment_mint: m.payment_mint,
                    client_tokens,
                    amount,
                }],
            )?;
            show(config, &bid, Some(signature))
        }
        BidCommand::Cancel { bid, tokens } => {
            let client = config.signer()?;
            let b: Bid = config.fetch(&bid, "bid")?;
            own(&b, &bid, &client.pubkey())?;
            if b.status == BidStatus::Running {
                bail!(
                    "bid {bid} is running: end its lease {} with `gpu-market lease end` instead",
                    pda::lease(&bid).0
                );
            }
            let m: Market = config.fetch(&b.market, "market")?;
            let (client_tokens, _) =
                config.token_account(&client.pubkey(), &m.payment_mint, tokens)?;
            let signature = config.send_all(
                &client,
                &[&CancelBid {
                    client: &client,
                    market: b.market,
                    bid,
                    book: book_of(config, &b, &m)?,
                    payment_mint: m.payment_mint,
                    client_tokens,
                }],
            )?;
            print_record(
                config.output,
                &[
                    ("bid", text(bid)),
                    (
                        "refund",
                        parse::tokens(b.escrow, config.mint_decimals(&m.payment_mint)?),
                    ),
                    ("signature", text(signature)),
                ],
            );
            Ok(())
        }
        BidCommand::Show { bid } => show(config, &bid, None),
        BidCommand::List { market, machine } => list(config, market, machine),
        BidCommand::Explain { bid } => explain(config, &bid),
    }
}

fn own(b: &Bid, bid: &Pubkey, me: &Pubkey) -> Result<()> {
    if b.client != *me {
        bail!("bid {bid} belongs to {}, not to the keypair {me}", b.client);
    }
    Ok(())
}

fn check_balance(need: u64, have: u64, decimals: u8, account: &Pubkey, what: &str) -> Result<()> {
    if have < need {
        bail!(
            "insufficient balance: {what} needs {} but token account {account} holds {}",
            gpu_market_core::amount::format(need, decimals),
            gpu_market_core::amount::format(have, decimals)
        );
    }
    Ok(())
}

/// The book a bid waits in: its machine's spot book or the market's queue book.
fn book_of(config: &Config, b: &Bid, m: &Market) -> Result<Pubkey> {
    Ok(match b.kind {
        BidKind::Queue => m.queue_book,
        BidKind::Spot => config.fetch::<Machine>(&b.machine, "machine")?.spot_book,
    })
}

fn kind_name(k: BidKind) -> &'static str {
    match k {
        BidKind::Queue => "queue",
        BidKind::Spot => "spot",
    }
}

fn price_unit(k: BidKind) -> &'static str {
    match k {
        BidKind::Queue => "per GPU-hour",
        BidKind::Spot => "per GPU-day",
    }
}

fn place(config: &Config, a: PlaceArgs) -> Result<()> {
    let client = config.signer()?;
    let m: Market = config.fetch(&a.market, "market")?;
    let decimals = config.mint_decimals(&m.payment_mint)?;
    let (kind, book, machine) = match a.machine {
        Some(key) => {
            let mach: Machine = config.fetch(&key, "machine")?;
            if mach.market != a.market {
                bail!("machine {key} is not in market {}", a.market);
            }
            if mach.spot_book == Pubkey::default() {
                bail!("machine {key} has no spot book: its owner has not opened one");
            }
            (BidKind::Spot, mach.spot_book, Some((key, mach)))
        }
        None => {
            if m.queue_book == Pubkey::default() {
                bail!("market {} has no queue book open", a.market);
            }
            (BidKind::Queue, m.queue_book, None)
        }
    };
    let price = parse::positive_amount(&a.price, decimals, "price")?;
    let duration = u32::try_from(parse::duration_secs(&a.duration)?)
        .map_err(|_| anyhow!("the duration {:?} is too long", a.duration))?;
    if duration == 0 {
        bail!("the duration must be greater than zero");
    }
    let now = config.cluster_time()?;
    let deadline = match &a.deadline {
        Some(d) => parse::deadline(d, now)?,
        None => now.saturating_add(duration as i64 + 3_600),
    };
    if a.image.len() > IMAGE_REF_LEN {
        bail!("the image reference is longer than {IMAGE_REF_LEN} bytes");
    }
    let image_digest = parse::digest(&a.image_digest)?;
    let overclock = a
        .overclock
        .iter()
        .map(|t| parse::overclock(t))
        .collect::<Result<Vec<_>>>()?;
    if overclock.len() != 1 && overclock.len() != a.gpus as usize {
        bail!(
            "give --overclock once for every GPU or once per GPU ({} given for {} GPUs)",
            overclock.len(),
            a.gpus
        );
    }
    let mut accepted_classes = 0u8;
    for &c in &a.classes {
        if c as usize >= GPU_CLASSES {
            bail!("GPU class {c} is not one of the market's classes 0..{GPU_CLASSES}");
        }
        accepted_classes |= 1 << c;
    }
    if a.classes.is_empty() {
        accepted_classes = u8::MAX;
    }
    let escrow = settlement::escrow_for(price, kind.unit(), a.gpus as u64, duration as u64)
        .map_err(|_| anyhow!("the bid's escrow (price × GPUs × duration) is too large"))?;
    let (client_tokens, balance) =
        config.token_account(&client.pubkey(), &m.payment_mint, a.tokens)?;
    check_balance(
        escrow,
        balance,
        decimals,
        &client_tokens,
        "the bid's escrow",
    )?;

    let sealed = match &a.env {
        Some(path) => {
            let recipient = match (a.env_to, &machine) {
                (Some(k), _) => k,
                (None, Some((_, mach))) => mach.agent,
                (None, None) => m.authority,
            };
            let plain = std::fs::read(path)
                .with_context(|| format!("cannot read the environment file {}", path.display()))?;
            let sealed = envelope::seal(&plain, &recipient)
                .map_err(|e| anyhow!("cannot seal the environment to {recipient}: {e}"))?;
            let out = a
                .env_out
                .clone()
                .unwrap_or_else(|| path.with_extension("sealed"));
            std::fs::write(&out, &sealed).with_context(|| {
                format!("cannot write the sealed environment {}", out.display())
            })?;
            Some((envelope::env_hash(&sealed), out, recipient))
        }
        None => None,
    };
    let nonce = match a.nonce {
        Some(n) => n,
        None => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or_default(),
    };
    let open = OpenStake {
        owner: &client,
        market: a.market,
    };
    let place = PlaceBid {
        client: &client,
        market: a.market,
        book,
        machine: machine.as_ref().map(|(k, _)| *k),
        payment_mint: m.payment_mint,
        client_tokens,
        args: PlaceBidArgs {
            nonce,
            kind,
            image_ref: a.image.clone(),
            image_digest,
            env_hash: sealed.as_ref().map_or([0; 32], |(h, _, _)| *h),
            gpu_count: a.gpus,
            gib_per_gpu: a.gib_per_gpu,
            accepted_classes,
            overclock,
            price,
            max_duration_secs: duration,
            deadline,
        },
    };
    let bid = place.bid();
    if config.fetch::<Bid>(&bid, "bid").is_ok() {
        bail!("the keypair already has bid {bid} with nonce {nonce}: choose another --nonce");
    }
    // A bid needs the bidder's stake account, even an empty one: open it on the way.
    let mut ixs: Vec<&dyn Sendable> = Vec::new();
    if config
        .fetch::<StakeAccount>(&pda::stake(&a.market, &client.pubkey()).0, "stake")
        .is_err()
    {
        ixs.push(&open);
    }
    ixs.push(&place);
    let signature = config.send_all(&client, &ixs)?;
    let mut fields = bid_fields(config, &bid, &config.fetch(&bid, "bid")?, &m)?;
    if let Some((_, out, recipient)) = sealed {
        fields.push(("env_sealed_file", text(out.display())));
        fields.push(("env_sealed_to", text(recipient)));
    }
    fields.push(("signature", text(signature)));
    print_record(config.output, &fields);
    Ok(())
}

/// The inputs `place_bid` scored the bid from, with the bidder's stake as it is now.
fn score_inputs(m: &Market, b: &Bid, stake: u64) -> Inputs {
    let p = &m.params;
    Inputs {
        stake,
        stake_bound: p.stake_bound,
        duration_secs: b.max_duration_secs as u64,
        time_left_secs: b.deadline.saturating_sub(b.placed_at).max(0) as u64,
        resource_gib_secs: b.gpu_count as u64 * b.gib_per_gpu as u64 * b.max_duration_secs as u64,
        resource_bound: p.resource_bound_gib_secs,
    }
}

/// The parts of a bid's score (each on 0..=10 000 bps), the weighted score stored at
/// placement, and the score with the aging it has gathered since.
fn score_parts(m: &Market, b: &Bid, stake: u64, now: i64) -> Value {
    let p = &m.params;
    let i = score_inputs(m, b, stake);
    let waited = m
        .interval_at(now)
        .saturating_sub(m.interval_at(b.placed_at));
    json!({
        "stake_bps": normalise_bps(i.stake, i.stake_bound),
        "urgency_bps": score::urgency_bps(i.duration_secs, i.time_left_secs),
        "complexity_bps": score::complexity_bps(i.resource_gib_secs, i.resource_bound),
        "weights_bps": p.weights_bps,
        "score_with_stake_now": score::base_score(p.weights(), &i),
        "intervals_waited": waited,
        "aged_score": score::aged_score(b.score, p.aging_per_interval as u64, waited),
    })
}

fn bid_fields(config: &Config, key: &Pubkey, b: &Bid, m: &Market) -> Result<Fields> {
    let decimals = config.mint_decimals(&m.payment_mint)?;
    let classes: Vec<u8> = (0..GPU_CLASSES as u8)
        .filter(|c| b.accepted_classes & (1 << c) != 0)
        .collect();
    let overclock: Vec<Value> = b
        .overclock
        .iter()
        .map(|t| {
            json!({
                "power_limit_w": t.power_limit_w,
                "core_lock_mhz": t.core_lock_mhz,
                "mem_lock_mhz": t.mem_lock_mhz,
                "core_offset_mhz": t.core_offset_mhz,
                "mem_offset_mhz": t.mem_offset_mhz,
            })
        })
        .collect();
    let mut fields = vec![
        ("bid", text(key)),
        ("market", text(b.market)),
        ("client", text(b.client)),
        ("kind", text(kind_name(b.kind))),
        (
            "status",
            text(match b.status {
                BidStatus::Open => "open",
                BidStatus::Running => "running",
            }),
        ),
    ];
    if b.kind == BidKind::Spot {
        fields.push(("machine", text(b.machine)));
    }
    fields.extend([
        ("image", text(parse::unpadded(&b.image_ref))),
        ("image_digest", text(hex::encode(b.image_digest))),
        ("env_hash", text(hex::encode(b.env_hash))),
        ("gpu_count", b.gpu_count.into()),
        ("gib_per_gpu", b.gib_per_gpu.into()),
        ("accepted_classes", Value::from(classes)),
        ("overclock", Value::Array(overclock)),
        ("price", parse::tokens(b.price, decimals)),
        ("price_unit", text(price_unit(b.kind))),
        ("max_duration_secs", b.max_duration_secs.into()),
        ("deadline", b.deadline.into()),
        ("escrow", parse::tokens(b.escrow, decimals)),
        ("score", b.score.into()),
        ("placed_at", b.placed_at.into()),
    ]);
    if b.status == BidStatus::Open {
        let now = config.cluster_time()?;
        let stake: StakeAccount = config.fetch(&pda::stake(&b.market, &b.client).0, "stake")?;
        fields.push(("score_parts", score_parts(m, b, stake.amount, now)));
        if let Some(entries) = read_book(&config.account_data(&book_of(config, b, m)?, "book")?) {
            if let Some(i) = entries.entries.iter().position(|l| l.bid == *key) {
                fields.push(("rank", (i as u64 + 1).into()));
                fields.push(("book_size", (entries.entries.len() as u64).into()));
            }
        }
    } else {
        fields.push(("lease", text(pda::lease(key).0)));
    }
    Ok(fields)
}

fn show(config: &Config, bid: &Pubkey, signature: Option<String>) -> Result<()> {
    let b: Bid = config.fetch(bid, "bid")?;
    let m: Market = config.fetch(&b.market, "market")?;
    let mut fields = bid_fields(config, bid, &b, &m)?;
    if let Some(sig) = signature {
        fields.push(("signature", text(sig)));
    }
    print_record(config.output, &fields);
    Ok(())
}

fn list(config: &Config, market: Pubkey, machine: Option<Pubkey>) -> Result<()> {
    let m: Market = config.fetch(&market, "market")?;
    let decimals = config.mint_decimals(&m.payment_mint)?;
    let (book, spot_machine) = match machine {
        Some(key) => {
            let mach: Machine = config.fetch(&key, "machine")?;
            if mach.market != market {
                bail!("machine {key} is not in market {market}");
            }
            (mach.spot_book, Some(mach))
        }
        None => (m.queue_book, None),
    };
    let entries = read_book(&config.account_data(&book, "book")?)
        .ok_or_else(|| anyhow!("{book} is not an open bid book"))?;
    let keys: Vec<Pubkey> = entries.entries.iter().map(|l| l.bid).collect();
    let bids = config.fetch_many::<Bid>(&keys)?;
    let stake_keys: Vec<Pubkey> = bids
        .iter()
        .map(|b| {
            b.as_ref()
                .map_or_else(Pubkey::default, |b| pda::stake(&market, &b.client).0)
        })
        .collect();
    let stakes = config.fetch_many::<StakeAccount>(&stake_keys)?;
    let now = config.cluster_time()?;
    let mut rows = Vec::new();
    for (rank, ((key, bid), stake)) in keys.iter().zip(&bids).zip(&stakes).enumerate() {
        let Some(b) = bid else { continue };
        let stake = stake.as_ref().map_or(0, |s| s.amount);
        let mut row: Fields = vec![
            ("rank", (rank as u64 + 1).into()),
            ("bid", text(key)),
            ("client", text(b.client)),
            ("gpus", b.gpu_count.into()),
            ("gib_per_gpu", b.gib_per_gpu.into()),
            ("price", parse::tokens(b.price, decimals)),
            ("escrow", parse::tokens(b.escrow, decimals)),
            ("score", b.score.into()),
        ];
        let parts = score_parts(&m, b, stake, now);
        for k in ["aged_score", "stake_bps", "urgency_bps", "complexity_bps"] {
            row.push((k, parts[k].clone()));
        }
        if let Some(mach) = &spot_machine {
            let profit = b
                .spot_profit(mach)
                .map_err(|e| anyhow!("cannot rank bid {key} by profit: {e}"))?;
            row.push(("profit_per_day", parse::tokens(profit, decimals)));
        }
        row.push(("score_parts", parts));
        rows.push(row);
    }
    let mut columns = vec![
        "rank",
        "bid",
        "gpus",
        "gib_per_gpu",
        "price",
        "escrow",
        "score",
        "aged_score",
        "stake_bps",
        "urgency_bps",
        "complexity_bps",
    ];
    if spot_machine.is_some() {
        columns.push("profit_per_day");
    }
    print_list(config.output, &columns, &rows);
    Ok(())
}

/// The first constraint that keeps a bid off a machine, checked from the most basic up; `None`
/// when the bid fits the machine now.
fn blocker(
    b: &Bid,
    stake: &StakeAccount,
    mach: &Machine,
    m: &Market,
    now: i64,
) -> Result<Option<&'static str>> {
    if mach.status != MachineStatus::Active {
        return Ok(Some("machine paused or retired"));
    }
    let gpus = mach.gpus();
    let n = b.gpu_count as usize;
    let class_ok = |g: &&gpu_market::state::GpuSpec| b.accepted_classes & (1 << g.class) != 0;
    if gpus.iter().filter(class_ok).count() < n {
        return Ok(Some("too few GPUs of an accepted class"));
    }
    if gpus
        .iter()
        .filter(class_ok)
        .filter(|g| g.memory_gib >= b.gib_per_gpu)
        .count()
        < n
    {
        return Ok(Some("too little memory per GPU"));
    }
    let by_terms: Vec<u16> = (0..n)
        .map(|i| {
            gpus.iter().enumerate().fold(0u16, |mask, (g, gpu)| {
                let fits = class_ok(&gpu)
                    && gpu.memory_gib >= b.gib_per_gpu
                    && gpu.limits().check(&b.terms_of(i).settings()).is_ok();
                if fits {
                    mask | 1 << g
                } else {
                    mask
                }
            })
        })
        .collect();
    if matching::assign(&by_terms).is_none() {
        return Ok(Some("overclock terms outside the GPUs' ranges"));
    }
    // Every GPU counted as free: only the price can still fail.
    let idle = Freed {
        gpus: u16::MAX,
        gib: u16::MAX,
    };
    if matching::assign(&mach.compat(b, m, now, &idle)?).is_none() {
        // Without a reserve price (a zero base price makes it zero) only the host's floor counts.
        let mut no_reserve = m.clone();
        no_reserve.params.base_price_per_gpu_hour = 0;
        let floor_ok = gpus.iter().any(|g| {
            b.pays_enough(g.class, mach, &no_reserve, now)
                .unwrap_or(false)
        });
        return Ok(Some(if floor_ok {
            "price below the market's reserve price"
        } else {
            "price below the host's floor"
        }));
    }
    if matching::assign(&mach.compat(b, m, now, &Freed::default())?).is_none() {
        return Ok(Some("GPUs busy with running leases"));
    }
    if !feasible(b, stake.gpus_held as u64, mach, m, now, &Freed::default())? {
        return Ok(Some(
            "the client holds the market's anti-monopoly cap of GPUs",
        ));
    }
    Ok(None)
}

fn explain(config: &Config, bid: &Pubkey) -> Result<()> {
    let b: Bid = config.fetch(bid, "bid")?;
    let m: Market = config.fetch(&b.market, "market")?;
    let decimals = config.mint_decimals(&m.payment_mint)?;
    let mut fields: Fields = vec![("bid", text(bid)), ("kind", text(kind_name(b.kind)))];
    if b.status == BidStatus::Running {
        let lease = pda::lease(bid).0;
        fields.push(("status", text("running")));
        fields.push(("lease", text(lease)));
        fields.push((
            "summary",
            text(format!("the bid is running as lease {lease}")),
        ));
        print_record(config.output, &fields);
        return Ok(());
    }
    let now = config.cluster_time()?;
    let stake: StakeAccount = config.fetch(&pda::stake(&b.market, &b.client).0, "stake")?;
    let machines: Vec<(Pubkey, Machine)> = match b.kind {
        BidKind::Spot => vec![(b.machine, config.fetch(&b.machine, "machine")?)],
        BidKind::Queue => config.program_accounts_of::<Machine>(&[(0, b.market)])?,
    };
    let entries = read_book(&config.account_data(&book_of(config, &b, &m)?, "book")?)
        .map(|e| e.entries)
        .unwrap_or_default();
    let ahead = entries
        .iter()
        .position(|l| l.bid == *bid)
        .unwrap_or(entries.len());

    let mut reasons: Vec<(&'static str, u64)> = Vec::new();
    let mut fits = 0u64;
    for (_, mach) in &machines {
        match blocker(&b, &stake, mach, &m, now)? {
            Some(r) => match reasons.iter_mut().find(|(k, _)| *k == r) {
                Some((_, count)) => *count += 1,
                None => reasons.push((r, 1)),
            },
            None => fits += 1,
        }
    }
    // The reserve price of each accepted class now (queue bids must pay at least that).
    let reserve: Vec<Value> = (0..GPU_CLASSES as u8)
        .filter(|c| b.accepted_classes & (1 << c) != 0)
        .map(|c| {
            let r = m.reserve_price(c, now).map_err(|e| anyhow!("{e}"))?;
            Ok(json!({
                "class": c,
                "reserve_price_per_gpu_hour": gpu_market_core::amount::format(r, decimals),
                "bid_beats_it": b.kind == BidKind::Spot || b.price >= r,
            }))
        })
        .collect::<Result<_>>()?;
    let summary = if now >= b.deadline {
        "its deadline has passed: cancel it to get the escrow back".to_string()
    } else if fits > 0 {
        format!(
            "it fits {fits} of {} machines now and waits for an agent to start it ({ahead} bids ranked above it)",
            machines.len()
        )
    } else if machines.is_empty() {
        "no machine is registered in the market".to_string()
    } else {
        let parts: Vec<String> = reasons.iter().map(|(r, n)| format!("{r} on {n}")).collect();
        format!(
            "it fits none of {} machines: {}",
            machines.len(),
            parts.join(", ")
        )
    };
    fields.extend([
        ("status", text("open")),
        ("rank", (ahead as u64 + 1).into()),
        ("bids_ahead", (ahead as u64).into()),
        ("machines_checked", (machines.len() as u64).into()),
        ("machines_fitting", fits.into()),
        (
            "blocked_by",
            Value::Array(
                reasons
                    .iter()
                    .map(|(r, n)| json!({"constraint": r, "machines": n}))
                    .collect(),
            ),
        ),
        ("price", parse::tokens(b.price, decimals)),
        ("price_unit", text(price_unit(b.kind))),
        ("reserve", Value::Array(reserve)),
        ("summary", text(summary)),
    ]);
    print_record(config.output, &fields);
    Ok(())
}
