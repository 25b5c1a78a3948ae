//! `gpu-market bid place|top-up|cancel|prune|seal|show|list|explain`.

use std::path::PathBuf;

use anyhow::{anyhow, bail, Result};
use clap::{Args, Parser, Subcommand};
use gpu_market::instructions::PlaceBidArgs;
use gpu_market::pda;
use gpu_market::state::{
    Bid, BidKind, BidStatus, Freed, Lease, Machine, Market, StakeAccount, GPU_CLASSES,
    IMAGE_REF_LEN, MAX_GANG_PARTS, REGION_LEN,
};
use gpu_market_core::math::normalise_bps;
use gpu_market_core::score::{self, Inputs};
use gpu_market_core::{lease, settlement};
use gpu_market_sdk::book::read_book;
use gpu_market_sdk::budget::MAX_COMPUTE_UNITS;
use gpu_market_sdk::placement::{could_run, earliest_start, gang_start, witness, Sealed};
use gpu_market_sdk::{
    Allocate, CancelBid, ClientInstruction, Evict, OpenStake, PlaceBid, PlaceGangBid, TopUpBid,
};
use serde_json::{json, Value};
use solana_compute_budget_interface::ComputeBudgetInstruction;
use solana_instruction::Instruction;
use solana_keypair::Keypair;
use solana_pubkey::Pubkey;
use solana_signer::Signer;

use crate::config::{Config, Signing};
use crate::output::{print_list, print_record, text, Fields};
use crate::parse;

mod boost;
pub(crate) mod env;
mod plan;
mod policy;
mod prune;

#[derive(Subcommand)]
pub enum BidCommand {
    /// Places a queue bid (any matching machine) or, with --machine, a spot bid on one machine;
    /// locks price × GPUs × duration in escrow.
    Place(Box<PlaceArgs>),
    /// Works out how many GPUs of which class a training or serving job needs and how to
    /// spread it (data parallel with ZeRO, tensor parallel in a topology group, pipeline,
    /// recomputation), from its model's config.json, on the market's machines; prints the
    /// cheapest plans per hour, and with --place places one.
    Plan(Box<plan::PlanArgs>),
    /// Adds AMOUNT (token units) to a bid's escrow.
    TopUp {
        bid: Pubkey,
        /// Token units, e.g. 1.5 (negative amounts are refused with a reason).
        #[arg(allow_hyphen_values = true)]
        amount: String,
        #[arg(long)]
        tokens: Option<Pubkey>,
    },
    /// Pays more urgency premium for a waiting queue bid (burnt, as at placement): it ranks
    /// again as if placed then with the premium in all; refused unless it ranks higher for it
    /// (its urgency part is full at the market's urgency_premium_bps of the run's escrow).
    Boost {
        bid: Pubkey,
        /// Token units, e.g. 1.5.
        #[arg(long, allow_hyphen_values = true)]
        premium: String,
        #[arg(long)]
        tokens: Option<Pubkey>,
    },
    /// Cancels a waiting bid; its escrow is refunded, less its holding charge (its price for
    /// the time it waited in a full book).
    Cancel {
        bid: Pubkey,
        #[arg(long)]
        tokens: Option<Pubkey>,
    },
    /// Removes a bid whose latest start has passed (anyone may): its escrow, less any holding charge,
    /// goes back to the token account it came from, its rent to its client.
    Prune {
        #[arg(required_unless_present = "all")]
        bid: Option<Pubkey>,
        /// Every expired bid of a market's queue book instead, several per transaction.
        #[arg(long, requires = "market", conflicts_with = "bid")]
        all: bool,
        /// The market whose queue book `--all` prunes.
        #[arg(long, requires = "all")]
        market: Option<Pubkey>,
    },
    /// Seals a bid's environment to more machines (by default every machine that may run it
    /// and has no copy yet): e.g. machines registered after the bid was placed.
    Seal {
        bid: Pubkey,
        /// The environment file the bid was placed with.
        #[arg(long, value_name = "FILE")]
        env: PathBuf,
        /// Only this machine (repeatable).
        #[arg(long = "machine", value_name = "MACHINE")]
        machines: Vec<Pubkey>,
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
    /// Explains why a bid is not running: which constraint of the fit rule fails on how many
    /// machines, the reserve price to beat, and, where it fits, whether the program would
    /// accept its allocation now.
    Explain { bid: Pubkey },
}

#[derive(Args)]
pub struct PlaceArgs {
    #[arg(long)]
    market: Pubkey,
    /// A spot bid on this machine (priced per GPU-day); without it, a queue bid (per GPU-hour).
    #[arg(long)]
    machine: Option<Pubkey>,
    /// Image reference, e.g. europe-west4-docker.pkg.dev/project/repo/train:v3 (at most 255
    /// bytes; the bid account holds just its bytes).
    #[arg(long)]
    image: String,
    /// The image's sha256 digest (64 hex digits, optionally after `sha256:`).
    #[arg(long)]
    image_digest: String,
    /// GPUs on each machine.
    #[arg(long, default_value_t = 1)]
    gpus: u8,
    /// Machines the bid runs on at once, --gpus on each (a gang, 2 to 8): all start together
    /// or none, each part's container told its rank and the first part's address; the escrow
    /// pays for every part (queue bids only).
    #[arg(long, default_value_t = 1, value_name = "N")]
    machines: u8,
    #[arg(long)]
    gib_per_gpu: u16,
    /// An accepted GPU class of the market, by the model name the market gives it (e.g.
    /// H100; `market show` lists them) or by number (repeatable) [default: every class].
    #[arg(long = "class", value_name = "CLASS")]
    classes: Vec<String>,
    /// Overclock terms, `power=W[,core-lock=MHz][,mem-lock=MHz][,core-offset=MHz][,mem-offset=MHz]`:
    /// once for every GPU, or once per GPU in order. The power limit is mandatory.
    #[arg(long, required = true, value_name = "TERMS")]
    overclock: Vec<String>,
    /// Auto power: the host may lower the GPUs' power limits below the --overclock ones to save
    /// energy, costing the job at most this share of its throughput, e.g. 5% or 2.5 (at most
    /// 20 %; 5 % when the flag has no value) [default: off, the stated limits hold].
    #[arg(
        long,
        value_name = "TOLERANCE",
        num_args = 0..=1,
        default_missing_value = parse::DEFAULT_AUTO_POWER,
        value_parser = parse::auto_power_bps,
    )]
    auto_power: Option<u16>,
    /// Price in payment token units: per GPU-hour (queue) or per GPU-day (spot).
    #[arg(long, allow_hyphen_values = true)]
    price: String,
    /// Longest run time: seconds, or e.g. 90m, 2h, 1d.
    #[arg(long)]
    duration: String,
    /// Latest end: +DURATION from now or a unix time [default: one hour after the duration,
    /// or less where the market's aging cap allows a queue bid less time to wait]. The bid
    /// starts by its deadline less its duration (its latest start), so that it runs in full,
    /// and expires then; the escrow covers the wait it allows as well as the run (returned
    /// unless the bid waits in a full book): a tighter deadline locks less.
    #[arg(long)]
    deadline: Option<String>,
    /// The shortest run you accept, should the bid start late: it may then start until its
    /// deadline less this, and runs until its deadline [default: the whole --duration, so it
    /// never starts later than its deadline less its duration].
    #[arg(long, value_name = "DURATION")]
    min_duration: Option<String>,
    /// A premium in payment token units, paid on top of the escrow and never refunded: it buys
    /// the urgency part of a queue bid's score.
    #[arg(long, default_value = "0", allow_hyphen_values = true)]
    urgency_premium: String,
    /// Environment for the container, KEY=VALUE lines: sealed on this machine to each machine
    /// that may run the bid and stored on chain; only those machines' agents can open it, and
    /// only they are given the bid. A spot bid's is sealed to its one machine; a queue bid's to
    /// EVERY machine of the market it fits, whose hosts can then all read it (the output lists
    /// them), unless --seal-to names the machines: keep secrets a host must not see out of a
    /// queue bid's environment, or seal it to machines you chose.
    #[arg(long, value_name = "FILE")]
    env: Option<PathBuf>,
    /// Seal a queue bid's --env to this machine only (repeatable): the bid then runs only on
    /// the machines named, each of which must be able to run it (a gang needs at least as many
    /// as --machines). Each copy costs its rent (returned when the bid closes).
    #[arg(long = "seal-to", value_name = "MACHINE", requires = "env")]
    seal_to: Vec<Pubkey>,
    /// A container port to publish on the machine's public address (repeatable, at most 4):
    /// `gpu-market lease show` tells where to connect.
    #[arg(long = "port", value_name = "PORT")]
    ports: Vec<u16>,
    /// GiB of scratch volume at the container's /workspace, kept after the lease ends for
    /// `gpu-market lease cp` (the machine's `scratch_gib` caps it) [default: none].
    #[arg(long, default_value_t = 0)]
    scratch_gib: u16,
    /// CPU cores the machine holds for the lease and gives the container as its limit, e.g. 8
    /// or 0.5 (the machine's `cpus` for all its leases caps it) [default: the bid's GPUs'
    /// share of the machine's `cpus`].
    #[arg(long, value_name = "CORES", value_parser = parse::cpu_milli)]
    cpus: Option<u32>,
    /// Memory the machine holds for the lease and gives the container as its limit, e.g. 32GiB
    /// or 512MiB [default: the bid's GPU memory's share of the machine's `memory`].
    #[arg(long, value_name = "SIZE", value_parser = parse::memory_mib)]
    memory: Option<u32>,
    /// A region whose machines may run the bid, as machines label theirs (repeatable, at most
    /// 4) [default: any region].
    #[arg(long = "region", value_name = "REGION")]
    regions: Vec<String>,
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
        BidCommand::Plan(args) => plan::plan(config, *args),
        BidCommand::TopUp {
            bid,
            amount,
            tokens,
        } => {
            let client = config.signer()?;
            let ixs = plan_top_up(config, client.key(), &bid, &amount, tokens)?;
            let signature = config.send(&client, &ixs, &[])?;
            show(config, &bid, Some(signature))
        }
        BidCommand::Boost {
            bid,
            premium,
            tokens,
        } => boost::boost(config, &bid, &premium, tokens),
        BidCommand::Cancel { bid, tokens } => {
            let client = config.signer()?;
            let plan = plan_cancel(config, client.key(), &bid, tokens)?;
            let signature = config.send(&client, &plan.instructions, &[])?;
            print_record(
                config.output,
                &[
                    ("bid", text(bid)),
                    ("refund", parse::tokens(plan.refund, plan.decimals)),
                    ("signature", text(signature)),
                ],
            );
            Ok(())
        }
        BidCommand::Prune { bid, all, market } => match (bid, market) {
            (Some(bid), _) => prune::prune(config, &bid),
            (None, Some(market)) if all => prune::prune_all(config, &market),
            _ => bail!("give a BID, or --all --market MARKET"),
        },
        BidCommand::Seal { bid, env, machines } => env::seal(config, &bid, &env, &machines),
        BidCommand::Show { bid } => show(config, &bid, None),
        BidCommand::List { market, machine } => list(config, market, machine),
        BidCommand::Explain { bid } => explain(config, &bid),
    }
}

/// What `bid top-up` sends (the `top-up` action): `amount` token units more in `bid`'s escrow,
/// from its client's payment tokens.
pub(crate) fn plan_top_up(
    config: &Config,
    client: Signing,
    bid: &Pubkey,
    amount: &str,
    tokens: Option<Pubkey>,
) -> Result<Vec<Instruction>> {
    let b: Bid = config.fetch(bid, "bid")?;
    let m: Market = config.fetch(&b.market, "market")?;
    let decimals = config.mint_decimals(&m.payment_mint)?;
    let amount = parse::positive_amount(amount, decimals, "top-up")?;
    own(&b, bid, &client.pubkey())?;
    if b.status != BidStatus::Open {
        bail!(
            "bid {bid} runs (lease {}): its escrow is its lease's, and a top-up is for a waiting bid",
            gpu_market::pda::lease(bid).0
        );
    }
    let (client_tokens, balance) =
        config.token_account(&client.pubkey(), &m.payment_mint, tokens)?;
    check_balance(amount, balance, decimals, &client_tokens, "the top-up")?;
    Ok(vec![TopUpBid {
        client,
        market: b.market,
        bid: *bid,
        payment_mint: m.payment_mint,
        client_tokens,
        amount,
    }
    .instruction()])
}

/// What `bid cancel` sends (the `cancel` action), and the escrow it refunds.
pub(crate) struct Cancellation {
    pub instructions: Vec<Instruction>,
    pub refund: u64,
    pub decimals: u8,
}

pub(crate) fn plan_cancel(
    config: &Config,
    client: Signing,
    bid: &Pubkey,
    tokens: Option<Pubkey>,
) -> Result<Cancellation> {
    let b: Bid = config.fetch(bid, "bid")?;
    own(&b, bid, &client.pubkey())?;
    if b.status == BidStatus::Running {
        bail!(
            "bid {bid} is running: end its lease {} with `gpu-market lease end` instead",
            pda::lease(bid).0
        );
    }
    let m: Market = config.fetch(&b.market, "market")?;
    let (client_tokens, _) = config.token_account(&client.pubkey(), &m.payment_mint, tokens)?;
    let book = book_of(config, &b, &m)?;
    // The escrow less what waiting in a full book has cost it (the program takes the same).
    let now = config.cluster_time()?;
    let held = read_book(&config.account_data(&book, "book")?)
        .map_or(0, |entries| entries.holding_charge(&b, now));
    Ok(Cancellation {
        instructions: vec![CancelBid {
            client,
            market: b.market,
            bid: *bid,
            book,
            payment_mint: m.payment_mint,
            client_tokens,
        }
        .instruction()],
        refund: b.escrow - held,
        decimals: config.mint_decimals(&m.payment_mint)?,
    })
}

fn own(b: &Bid, bid: &Pubkey, me: &Pubkey) -> Result<()> {
    if b.client != *me {
        bail!("bid {bid} belongs to {}, not to the keypair {me}", b.client);
    }
    Ok(())
}

pub(crate) fn check_balance(
    need: u64,
    have: u64,
    decimals: u8,
    account: &Pubkey,
    what: &str,
) -> Result<()> {
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
    let env = a
        .env
        .as_deref()
        .map(|path| env::read_env(path, &client))
        .transpose()?;
    let env_hash = env.as_ref().map_or([0; 32], |e| e.hash());
    let plan = plan_place(config, client.key(), &a, env_hash)?;
    let signature = config.send(&client, &plan.instructions, &[])?;
    let bid = plan.bid;
    let placed: Bid = config.fetch(&bid, "bid")?;
    let mut fields = bid_fields(config, &bid, &placed, &plan.market)?;
    if let Some(env) = &env {
        let machines = env::seal_new_bid(
            config,
            &client,
            (&bid, &placed),
            &plan.market,
            env,
            &a.seal_to,
        )?;
        if placed.kind == BidKind::Queue && machines.len() > 1 {
            eprintln!(
                "note: the environment is sealed to {} machines: the host of each can read it",
                machines.len()
            );
        }
        fields.push(("env_sealed_to", env::machines_value(&machines)));
    }
    // What left the wallet: the escrow the program locked (refundable; its wait part counts from
    // when the transaction landed, so a little less than the plan checked) and the premium (not).
    let paid = placed
        .escrow
        .checked_add(placed.urgency_premium)
        .ok_or_else(|| anyhow!("the bid's escrow and urgency premium are too large"))?;
    fields.push(("paid", parse::tokens(paid, plan.decimals)));
    fields.push(("signature", text(signature)));
    print_record(config.output, &fields);
    Ok(())
}

/// `bid place`'s arguments from `argv` (no command name) through the CLI's own parser: how
/// `bid plan --place` and the `bid` action of `gpu-market serve` build theirs.
pub(crate) fn place_args_from(
    argv: impl IntoIterator<Item = String>,
) -> std::result::Result<PlaceArgs, clap::Error> {
    #[derive(Parser)]
    #[command(name = "bid place", no_binary_name = true)]
    struct Place {
        #[command(flatten)]
        args: PlaceArgs,
    }
    Place::try_parse_from(argv).map(|p| p.args)
}

/// The regions `market` lists, for people.
pub(crate) fn listed_regions(market: &Market) -> String {
    let listed: Vec<String> = market
        .regions
        .iter()
        .take_while(|r| r[0] != 0)
        .map(|r| parse::unpadded(r))
        .collect();
    if listed.is_empty() {
        "none".into()
    } else {
        listed.join(", ")
    }
}

/// What `bid place` sends (the `bid` action of `gpu-market serve`): checked as the program
/// would check it, priced, ranked for an eviction from a full book; the bidder's stake
/// account opened on the way. `env_hash` is the sealed environment's (zero without one).
pub(crate) struct Placement {
    pub instructions: Vec<Instruction>,
    pub bid: Pubkey,
    pub market: Market,
    /// The escrow and the urgency premium, in payment token base units: the most the bid takes
    /// (the program counts its wait from when the transaction lands, so a little less).
    pub paid: u64,
    pub decimals: u8,
}

pub(crate) fn plan_place(
    config: &Config,
    client: Signing,
    a: &PlaceArgs,
    env_hash: [u8; 32],
) -> Result<Placement> {
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
    if !(1..=MAX_GANG_PARTS).contains(&a.machines) {
        bail!("--machines is 1 to {MAX_GANG_PARTS}");
    }
    if a.machines > 1 && kind == BidKind::Spot {
        bail!("a bid on several machines (--machines) is a queue bid: leave out --machine");
    }
    if a.machines > 1 && a.ports.is_empty() {
        bail!(
            "a bid on several machines needs a --port: the other parts reach the first part's \
             container on its first port (their MASTER_PORT), published on its machine"
        );
    }
    let total_gpus = a.gpus as u64 * a.machines as u64;
    let price = parse::positive_amount(&a.price, decimals, "price")?;
    let duration = u32::try_from(parse::duration_secs(&a.duration)?)
        .map_err(|_| anyhow!("the duration {:?} is too long", a.duration))?;
    if duration == 0 {
        bail!("the duration must be greater than zero");
    }
    let min_duration = match &a.min_duration {
        None => duration,
        Some(d) => match u32::try_from(parse::duration_secs(d)?) {
            Ok(min) if min > 0 && min <= duration => min,
            _ => bail!(
                "the shortest run accepted ({d:?}) must be more than zero and at most the duration ({:?})",
                a.duration
            ),
        },
    };
    let urgency_premium = parse::amount(&a.urgency_premium, decimals, "urgency premium")?;
    let now = config.cluster_time()?;
    let deadline = match &a.deadline {
        Some(d) => parse::deadline(d, now)?,
        None => {
            // An hour to wait and still run in full, or as long as the market lets a bid wait:
            // its latest start (deadline less the shortest run) within the market's cap.
            let max_wait = m.max_wait_secs() as i64;
            let full = now.saturating_add(duration as i64 + max_wait.min(3_600));
            full.min(now.saturating_add(max_wait + min_duration as i64))
        }
    };
    let latest_start = lease::latest_start(deadline, min_duration);
    if latest_start < now {
        bail!(
            "the deadline leaves less time than the shortest run the bid accepts ({min_duration} s): \
             it would have had to start {} s ago",
            now - latest_start
        );
    }
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
    for c in &a.classes {
        accepted_classes |= 1 << crate::classes::parse(&m, c)?;
    }
    if a.classes.is_empty() {
        accepted_classes = u8::MAX;
    }
    // The run and the longest wait from now (the program counts from its own clock, a little
    // later: never more than this).
    let wait = latest_start.saturating_sub(now) as u64;
    let escrow = settlement::bid_escrow(price, kind.unit(), total_gpus, duration as u64, wait)
        .map_err(|_| {
            anyhow!("the bid's escrow (price × GPUs × (duration + longest wait)) is too large")
        })?;
    let (client_tokens, balance) =
        config.token_account(&client.pubkey(), &m.payment_mint, a.tokens)?;
    let paid = escrow
        .checked_add(urgency_premium)
        .ok_or_else(|| anyhow!("the bid's escrow and urgency premium are too large"))?;
    check_balance(
        paid,
        balance,
        decimals,
        &client_tokens,
        "the bid's escrow and urgency premium",
    )?;

    let stake = config
        .fetch::<StakeAccount>(&pda::stake(&a.market, &client.pubkey()).0, "stake")
        .ok();
    // Where the program will rank the bid: by score (with aging) in the queue book, by the
    // host's profit in a spot book. A full book needs its lowest-ranked entry to evict.
    let rank = match &machine {
        None => {
            let inputs = score_inputs(
                &m,
                stake.as_ref().map_or(0, |s| s.amount),
                (price, kind),
                total_gpus,
                duration,
                urgency_premium,
            )?;
            m.rank_key(
                score::base_score(m.params.weights(), &inputs),
                now,
                duration,
            )
        }
        Some((_, mach)) => {
            let watts: u64 = match overclock.as_slice() {
                [one] => one.power_limit_w as u64 * a.gpus as u64,
                each => each.iter().map(|t| t.power_limit_w as u64).sum(),
            };
            lease::spot_profit_per_day(price, a.gpus as u64, watts, mach.electricity_cost_per_kwh)
                .map_err(|_| anyhow!("the bid's profit per day for the host is too large"))?
        }
    };
    let evict = eviction(config, &m, &book, rank)?;
    let nonce = match a.nonce {
        Some(n) => n,
        None => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or_default(),
    };
    let open = OpenStake {
        owner: client,
        market: a.market,
    };
    let args = PlaceBidArgs {
        kind,
        image_ref: a.image.clone(),
        image_digest,
        env_hash,
        gpu_count: a.gpus,
        gib_per_gpu: a.gib_per_gpu,
        accepted_classes,
        overclock,
        price,
        max_duration_secs: duration,
        min_duration_secs: min_duration,
        deadline,
        urgency_premium,
        ports: a.ports.clone(),
        scratch_gib: a.scratch_gib,
        cpu_milli: a.cpus.unwrap_or(0),
        memory_mib: a.memory.unwrap_or(0),
        regions: a
            .regions
            .iter()
            .map(|r| parse::padded::<REGION_LEN>(r, "region"))
            .collect::<Result<_>>()?,
        auto_power: a.auto_power,
    };
    if let Some(r) = args.regions.iter().find(|r| m.region_bit(r).is_err()) {
        bail!(
            "market {} does not list region {:?} (its authority lists regions with `market \
             add-region`); it lists: {}",
            a.market,
            parse::unpadded(r),
            listed_regions(&m)
        );
    }
    // A spot bid's machine; a queue bid names a machine it could run on (its witness).
    let target = match &machine {
        Some((key, _)) => *key,
        None => {
            let machines = config.program_accounts_of::<Machine>(&[(0, a.market)])?;
            let (could, _) = could_run(&m, now, &machines, &args);
            env::check_seal_to(&a.seal_to, &could, a.machines)?;
            if a.machines > 1 && (could.len() as u64) < a.machines as u64 && !could.is_empty() {
                bail!(
                    "a gang of {} machines: only {} active machine(s) of market {} could run a \
                     part ({} GPUs of {} GiB), even with nothing else running",
                    a.machines,
                    could.len(),
                    a.market,
                    a.gpus,
                    a.gib_per_gpu
                );
            }
            witness(&m, now, &machines, &args).map_err(|nearest| match nearest {
                Some(unfit) => anyhow!(
                    "no machine of market {} could run this bid, even with nothing else \
                     running: the nearest fails because {}",
                    a.market,
                    unfit.describe()
                ),
                None => anyhow!(
                    "market {} has no active machine: a queue bid needs one it could run on",
                    a.market
                ),
            })?
        }
    };
    let place = PlaceBid {
        client,
        market: a.market,
        book,
        machine: target,
        payment_mint: m.payment_mint,
        client_tokens,
        nonce,
        args,
        evict,
    };
    let bid = place.bid();
    let parts = a.machines;
    let instruction = match parts {
        1 => place.instruction(),
        _ => PlaceGangBid { place, parts }.instruction(),
    };
    if config.fetch::<Bid>(&bid, "bid").is_ok() {
        bail!("the keypair already has bid {bid} with nonce {nonce}: choose another --nonce");
    }
    // A bid needs the bidder's stake account, even an empty one: open it on the way.
    let mut instructions = Vec::new();
    if stake.is_none() {
        instructions.push(open.instruction());
    }
    instructions.push(instruction);
    Ok(Placement {
        instructions,
        bid,
        market: m,
        paid,
        decimals,
    })
}

/// The inputs `place_bid` scores a bid from, by the program's own `MarketParams::score_inputs`:
/// the bidder's stake, what the bid spends per hour while running (`price` of `kind` × GPUs),
/// its escrow at placement and the urgency premium it paid.
fn score_inputs(
    m: &Market,
    stake: u64,
    (price, kind): (u64, BidKind),
    gpus: u64,
    duration_secs: u32,
    urgency_premium: u64,
) -> Result<Inputs> {
    let too_large = |_| anyhow!("the bid's spend or escrow is too large");
    let spend_per_hour = settlement::spend_per_hour(price, kind.unit(), gpus).map_err(too_large)?;
    let escrow = settlement::escrow_for(price, kind.unit(), gpus, duration_secs as u64)
        .map_err(too_large)?;
    m.params
        .score_inputs(stake, spend_per_hour, escrow, urgency_premium)
        .map_err(|e| anyhow!("cannot score the bid: {e}"))
}

/// The entry a new bid ranked at `rank` evicts from `book` (with the token account its refund
/// goes to), when the book is full and the bid outranks its lowest-ranked entry. A full book
/// the bid does not outrank gets no accounts: the program refuses the bid with its reason.
fn eviction(config: &Config, m: &Market, book: &Pubkey, rank: u64) -> Result<Option<Evict>> {
    let entries = read_book(&config.account_data(book, "book")?)
        .ok_or_else(|| anyhow!("{book} is not an open bid book"))?;
    let Some(worst) = entries.eviction(rank, m.next_bid_seq) else {
        return Ok(None);
    };
    let evicted: Bid = config.fetch(&worst.bid, "bid")?;
    Ok(Some(Evict {
        bid: worst.bid,
        client: worst.summary.client,
        tokens: refund_accounts(config, [&evicted], m)?[0],
    }))
}

/// The parts of a bid's score (each on 0..=10 000 bps: stake, urgency from the premium it
/// paid, complexity from what it spends per hour), the weighted score with the client's stake
/// now, and the score stored at placement with the aging it has gathered since.
fn score_parts(m: &Market, b: &Bid, stake: u64, now: i64) -> Result<Value> {
    let p = &m.params;
    let i = score_inputs(
        m,
        stake,
        (b.price, b.kind),
        b.total_gpus(),
        b.max_duration_secs,
        b.urgency_premium,
    )?;
    let waited = m
        .interval_at(now)
        .saturating_sub(m.interval_at(b.placed_at));
    Ok(json!({
        "stake_bps": normalise_bps(i.stake, i.stake_bound),
        "urgency_bps": score::urgency_bps(i.urgency_premium, i.urgency_bound),
        "complexity_bps": score::complexity_bps(i.spend_per_hour, i.spend_bound),
        "spend_per_hour": i.spend_per_hour,
        "weights_bps": p.weights_bps,
        "score_with_stake_now": score::base_score(p.weights(), &i),
        "intervals_waited": waited,
        "aged_score": score::aged_score(
            b.score,
            p.aging_per_interval as u64,
            waited,
            p.aging_cap_bps as u64,
        ),
        // What the bid's requested duration takes off its rank (shorter bids go first).
        "duration_handicap": m.duration_handicap(b.max_duration_secs),
    }))
}

/// A bid's record as `bid show` prints it: its terms, and while it waits its score's parts and
/// rank, once running its lease.
pub(crate) fn bid_fields(config: &Config, key: &Pubkey, b: &Bid, m: &Market) -> Result<Fields> {
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
        ("image", text(&b.image_ref)),
        ("image_digest", text(hex::encode(b.image_digest))),
        ("env_hash", text(hex::encode(b.env_hash))),
        ("gpu_count", b.gpu_count.into()),
        ("machines", b.parts().into()),
        ("cpus", parse::cores(b.cpu_milli)),
        ("memory_mib", b.memory_mib.into()),
        (
            "regions",
            json!(b
                .regions
                .iter()
                .map(|r| parse::unpadded(r))
                .collect::<Vec<_>>()),
        ),
        ("gib_per_gpu", b.gib_per_gpu.into()),
        ("accepted_classes", Value::from(classes)),
        ("overclock", Value::Array(overclock)),
        auto_power_field(b.auto_power),
        auto_power_bps_field(b.auto_power),
        ("price", parse::tokens(b.price, decimals)),
        ("price_unit", text(price_unit(b.kind))),
        ("max_duration_secs", b.max_duration_secs.into()),
        ("min_duration_secs", b.min_duration_secs.into()),
        ("deadline", b.deadline.into()),
        ("latest_start", b.latest_start().into()),
        ("escrow", parse::tokens(b.escrow, decimals)),
        (
            "urgency_premium",
            parse::tokens(b.urgency_premium, decimals),
        ),
        ("score", b.score.into()),
        ("placed_at", b.placed_at.into()),
    ]);
    if b.status == BidStatus::Open {
        let now = config.cluster_time()?;
        let stake: StakeAccount = config.fetch(&pda::stake(&b.market, &b.client).0, "stake")?;
        fields.push(("score_parts", score_parts(m, b, stake.amount, now)?));
        if let Some(entries) = read_book(&config.account_data(&book_of(config, b, m)?, "book")?) {
            if let Some(i) = entries.entries.iter().position(|l| l.bid == *key) {
                fields.push(("rank", (i as u64 + 1).into()));
                fields.push(("book_size", (entries.entries.len() as u64).into()));
                fields.push(("book_full", entries.is_full().into()));
                // Taken from the escrow when the bid leaves the book, run or not.
                fields.push((
                    "holding_charge",
                    parse::tokens(entries.holding_charge(b, now), decimals),
                ));
            }
        }
    } else if b.is_gang() {
        let parts: Vec<Value> = (0..b.parts)
            .map(|p| text(pda::gang_lease(key, p).0))
            .collect();
        fields.push(("leases", Value::Array(parts)));
        fields.push(("parts_running", b.parts_running.into()));
    } else {
        fields.push(("lease", text(pda::lease(key).0)));
    }
    Ok(fields)
}

/// Auto power as `bid show` and `lease show` say it: how much throughput the client lets the
/// host trade for energy, or `off`.
pub(crate) fn auto_power_field(tolerance_bps: Option<u16>) -> (&'static str, Value) {
    let said = tolerance_bps.map_or_else(
        || "off".to_string(),
        |bps| format!("up to {} throughput for energy", parse::percent(bps)),
    );
    ("auto_power", text(said))
}

/// The most a spot bid with auto power can earn `machine`'s host per day: its price less the
/// electricity of its GPUs held at the machine's least power limit (never above the stated
/// ones), as auto power may hold them; `None` without auto power.
fn auto_power_profit(b: &Bid, machine: &Machine) -> Result<Option<u64>> {
    if b.auto_power.is_none() {
        return Ok(None);
    }
    let least = machine
        .gpus()
        .iter()
        .map(|g| g.power_w[0])
        .min()
        .unwrap_or(0);
    let watts: u64 = b.power_limits().iter().map(|&w| w.min(least) as u64).sum();
    let profit = lease::spot_profit_per_day(
        b.price,
        b.gpu_count as u64,
        watts,
        machine.electricity_cost_per_kwh,
    )?;
    Ok(Some(profit))
}

/// Auto power's tolerance in bps (null when off), for scripts.
pub(crate) fn auto_power_bps_field(tolerance_bps: Option<u16>) -> (&'static str, Value) {
    (
        "auto_power_tolerance_bps",
        tolerance_bps.map_or(Value::Null, Value::from),
    )
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
    let book = book_rows(config, &market, machine, config.cluster_time()?)?;
    print_list(config.output, &book.columns, &book.rows);
    Ok(())
}

/// A book's bids as `bid list` shows them (and `gpu-market serve`'s market page): the columns of
/// its table, and one row per bid with every field.
pub(crate) struct BookRows {
    pub columns: Vec<&'static str>,
    pub rows: Vec<Fields>,
}

/// The bids of `market`'s queue book (or, with `machine`, of that machine's spot book), best
/// first, each with its score's parts at cluster time `now`, its auto power tolerance (and, in a
/// spot book, the host's profit per day at the bid's stated power limits).
pub(crate) fn book_rows(
    config: &Config,
    market: &Pubkey,
    machine: Option<Pubkey>,
    now: i64,
) -> Result<BookRows> {
    let market = *market;
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
            (
                "urgency_premium",
                parse::tokens(b.urgency_premium, decimals),
            ),
            ("score", b.score.into()),
        ];
        let parts = score_parts(&m, b, stake, now)?;
        for k in ["aged_score", "stake_bps", "urgency_bps", "complexity_bps"] {
            row.push((k, parts[k].clone()));
        }
        if let Some(mach) = &spot_machine {
            let profit = b
                .spot_profit(mach)
                .map_err(|e| anyhow!("cannot rank bid {key} by profit: {e}"))?;
            row.push(("profit_per_day", parse::tokens(profit, decimals)));
            // At the stated limits above, a bound the host can count on; with auto power the
            // GPUs may draw down to their least limits, and the host keep at most this.
            let most = auto_power_profit(b, mach)
                .map_err(|e| anyhow!("cannot price bid {key}'s auto power: {e}"))?;
            row.push((
                "profit_per_day_auto",
                most.map_or(Value::Null, |p| parse::tokens(p, decimals)),
            ));
        }
        row.push((
            "auto_power",
            b.auto_power
                .map_or(Value::Null, |bps| text(parse::percent(bps))),
        ));
        row.push(auto_power_bps_field(b.auto_power));
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
        columns.extend(["profit_per_day", "auto_power", "profit_per_day_auto"]);
    }
    Ok(BookRows { columns, rows })
}

/// Each bid's `refund_tokens` while it is a live token account of its client, else `None`.
pub(crate) fn refund_accounts<'a>(
    config: &Config,
    bids: impl IntoIterator<Item = &'a Bid>,
    m: &Market,
) -> Result<Vec<Option<Pubkey>>> {
    let accounts: Vec<(Pubkey, Pubkey)> = bids
        .into_iter()
        .map(|b| (b.refund_tokens, b.client))
        .collect();
    config.live_token_accounts(&accounts, &m.payment_mint)
}

/// Why the program would refuse the `allocate` that `mach`'s agent would send now to start bid
/// `key` from `book` on the GPUs `gpus` (the fit rule's choice), passing `evidence`
/// (`BookEntries::allocate_evidence`); `None` when it would start the bid.
fn allocation_refusal(
    config: &Config,
    key: &Pubkey,
    b: &Bid,
    (machine, mach): (&Pubkey, &Machine),
    book: &Pubkey,
    gpus: &[u8],
    evidence: Vec<Pubkey>,
) -> Result<Option<String>> {
    // Only the agent's key may sign it; the simulation checks no signature, so the instruction
    // is built with a stand-in key and then names the agent.
    let stand_in = Keypair::new();
    let mut ix = Allocate {
        agent: &stand_in,
        market: b.market,
        machine: *machine,
        book: *book,
        bid: *key,
        client: b.client,
        gpus: gpus.to_vec(),
        evidence,
    }
    .instruction();
    for meta in &mut ix.accounts {
        if meta.pubkey == stand_in.pubkey() {
            meta.pubkey = mach.agent;
        }
    }
    config.refusal(
        &mach.agent,
        &[
            ComputeBudgetInstruction::set_compute_unit_limit(MAX_COMPUTE_UNITS),
            ix,
        ],
    )
}

/// The machine whose reservation holds waiting bid `bid` at `now`, and its start.
fn reservation_of(
    m: &Market,
    (bid, b): (&Pubkey, &Bid),
    machines: &[(Pubkey, Machine)],
    now: i64,
) -> Option<(Vec<Pubkey>, i64)> {
    let holding: Vec<&(Pubkey, Machine)> = machines
        .iter()
        .filter(|(k, mach)| mach.holds(k, (bid, b), m, now))
        .collect();
    let start = holding.first()?.1.reservation.start;
    // The machine the bid names first (a gang's first part's), then the others.
    let mut on: Vec<Pubkey> = holding.iter().map(|(k, _)| *k).collect();
    on.sort_by_key(|k| *k != b.reserved_on);
    Some((on, start))
}

/// Adds one machine to the count of `reason`.
fn tally(reasons: &mut Vec<(String, u64)>, reason: String) {
    match reasons.iter_mut().find(|(r, _)| *r == reason) {
        Some((_, n)) => *n += 1,
        None => reasons.push((reason, 1)),
    }
}

fn explain(config: &Config, bid: &Pubkey) -> Result<()> {
    print_record(config.output, &explain_fields(config, bid)?);
    Ok(())
}

/// `bid explain`'s answer (and the bid's page of `gpu-market serve`): for a waiting bid, which
/// constraint of the fit rule fails on how many machines, the reserve price to beat, whether the
/// program would accept its allocation now, and a summary sentence.
pub(crate) fn explain_fields(config: &Config, bid: &Pubkey) -> Result<Fields> {
    let b: Bid = config.fetch(bid, "bid")?;
    let m: Market = config.fetch(&b.market, "market")?;
    let decimals = config.mint_decimals(&m.payment_mint)?;
    let mut fields: Fields = vec![("bid", text(bid)), ("kind", text(kind_name(b.kind)))];
    if b.status == BidStatus::Running && b.is_gang() {
        let leases: Vec<String> = (0..b.parts)
            .map(|p| pda::gang_lease(bid, p).0.to_string())
            .collect();
        fields.push(("status", text("running")));
        fields.push(("leases", json!(leases)));
        fields.push((
            "summary",
            text(format!(
                "the gang runs on {} machines ({} of its parts still running), as leases {}",
                b.parts,
                b.parts_running,
                leases.join(", ")
            )),
        ));
        return Ok(fields);
    }
    if b.status == BidStatus::Running {
        let lease = pda::lease(bid).0;
        fields.push(("status", text("running")));
        fields.push(("lease", text(lease)));
        fields.push((
            "summary",
            text(format!("the bid is running as lease {lease}")),
        ));
        return Ok(fields);
    }
    let now = config.cluster_time()?;
    let stake: StakeAccount = config.fetch(&pda::stake(&b.market, &b.client).0, "stake")?;
    let machines: Vec<(Pubkey, Machine)> = match b.kind {
        BidKind::Spot => vec![(b.machine, config.fetch(&b.machine, "machine")?)],
        BidKind::Queue => config.program_accounts_of::<Machine>(&[(0, b.market)])?,
    };
    let book = book_of(config, &b, &m)?;
    let entries = read_book(&config.account_data(&book, "book")?)
        .ok_or_else(|| anyhow!("{book} is not an open bid book"))?;
    let ahead = entries
        .entries
        .iter()
        .position(|l| l.bid == *bid)
        .unwrap_or(entries.entries.len());
    // Over its client's cap, a queue bid still runs where no bid within its client's cap fits:
    // the program decides that from the book, so the simulation below tells.
    let within_cap =
        b.kind == BidKind::Spot || m.within_client_cap(stake.gpus_held as u64, b.total_gpus(), now);

    // The fit rule on each machine; where the bid fits, the allocation its agent would send
    // (a gang's parts start together: `allocate_gang`, judged below from the policy's plan).
    let mut reasons: Vec<(String, u64)> = Vec::new();
    let mut refused: Vec<Value> = Vec::new();
    let (mut fitting, mut ready) = (0u64, 0u64);
    for (key, mach) in &machines {
        let offers = mach
            .offers(&m, b.kind, now, &Freed::default())
            .map_err(|e| anyhow!("cannot price machine {key}: {e}"))?;
        let offer = offers.for_run(bid, b.runs_until(now));
        match b.fit(offer) {
            Err(_) if b.fit(&offers.now).is_ok() => tally(
                &mut reasons,
                format!(
                    "its GPUs are reserved for a bid from {} (a bid that runs past then waits)",
                    mach.reservation.start
                ),
            ),
            Err(unfit) => tally(&mut reasons, unfit.describe().to_string()),
            Ok(_) if b.is_gang() => fitting += 1,
            Ok(choice) => {
                fitting += 1;
                let why = allocation_refusal(
                    config,
                    bid,
                    &b,
                    (key, mach),
                    &book,
                    choice.gpus(),
                    entries.allocate_evidence(bid, std::slice::from_ref(&offers), within_cap),
                )?;
                match why {
                    None => ready += 1,
                    Some(why) => {
                        refused.push(json!({"machine": key.to_string(), "error": why}));
                        tally(&mut reasons, format!("allocation would be refused: {why}"));
                    }
                }
            }
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
    // Queue bids go where the market's packing policy says (a sealed one to the machines that
    // can open its environment first); a spot bid names its machine.
    let holders = env::holders(config, bid, &b, &machines)?;
    let view = match (b.kind, ready > 0 || (b.is_gang() && fitting > 0)) {
        (BidKind::Queue, true) => Some(policy::policy_view(
            config,
            (&m, now),
            &machines,
            &entries.entries,
            &b,
            holders.as_deref().map_or(Sealed::No, Sealed::To),
        )?),
        _ => None,
    };
    let chosen = view.as_ref().and_then(|v| v.machine);
    let gang_parts = view.as_ref().and_then(|v| v.parts.clone());
    if gang_parts.is_some() {
        // The policy places every part now: the first part's agent starts them.
        ready = 1;
    }
    let n = machines.len();
    let blocked = || {
        reasons
            .iter()
            .map(|(r, k)| format!("{r} on {k}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    // How long it would run: a bid starts by its latest start, so for at least its shortest run.
    let runs_for = lease::run_end(now, b.max_duration_secs as u64, b.deadline)
        .map_or(0, |end| end.saturating_sub(now).max(0) as u64);
    // Where it does not start now: when the running leases' ends free enough of a machine (of
    // as many machines as a gang has parts, all at once).
    let earliest: Option<(i64, Vec<Pubkey>)> = match ready {
        0 => {
            let leases: Vec<Lease> = config
                .program_accounts_of::<Lease>(&[(0, b.market)])?
                .into_iter()
                .map(|(_, l)| l)
                .collect();
            match b.is_gang() {
                true => gang_start(&m, &b, now, &machines, &leases),
                false => earliest_start(&m, &b, now, &machines, &leases)
                    .map(|(at, machine)| (at, vec![machine])),
            }
        }
        // It starts now: nothing to estimate.
        _ => None,
    };
    let mut when = format!(
        "started now it runs {runs_for} s; it may start until {} (its latest start), then runs {} s",
        b.latest_start(),
        b.min_duration_secs
    );
    // (One it fits now waits for the reason the summary gives: allocation would be refused.)
    let reserved = reservation_of(&m, (bid, &b), &machines, now);
    let listed = |on: &[Pubkey]| match on {
        [one] => format!("machine {one}"),
        many => format!(
            "machines {}",
            many.iter()
                .map(|k| k.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    match (ready, &earliest, &reserved) {
        (0, _, Some((on, at))) => when.push_str(&format!(
            "; {} {} its GPUs for it from {at} (its reservation): no bid that would delay it may use them",
            listed(on),
            if on.len() == 1 { "holds" } else { "hold" }
        )),
        (0, Some((at, on)), None) if *at > now => when.push_str(&format!(
            "; at the earliest at {at} on {}, when their running leases end, unless bids ranked above take those GPUs first",
            listed(on)
        )),
        (0, None, None) => when.push_str(
            "; no machine's running leases end in time to free enough for it before its latest start",
        ),
        _ => {}
    }
    let summary = if b.expired(now) {
        format!(
            "its latest start {} has passed, so it will not run: anyone may remove it with \
             `gpu-market bid prune {bid}`, which refunds its escrow in full",
            b.latest_start()
        )
    } else if b.is_gang() && ready > 0 {
        let parts: Vec<String> = gang_parts.iter().flatten().map(|k| k.to_string()).collect();
        format!(
            "a gang of {} machines × {} GPUs: it fits {fitting} of {n} machines now; the market's \
             packing policy places its parts on {}, and the agent of the first starts them all \
             at once ({ahead} bids ranked above it); {when}",
            b.parts,
            b.gpu_count,
            parts.join(", ")
        )
    } else if b.is_gang() {
        format!(
            "a gang of {} machines × {} GPUs waits until {} machines can take a part at once: {fitting} \
             of {n} can now{}; {when}",
            b.parts,
            b.gpu_count,
            b.parts,
            match reasons.is_empty() {
                true => String::new(),
                false => format!(" ({})", blocked()),
            }
        )
    } else if ready > 0 {
        let agent = match chosen {
            Some(machine) => format!(
                "the agent of machine {machine}, which the market's packing policy gives it"
            ),
            None => "an agent".to_string(),
        };
        format!(
            "it fits {ready} of {n} machines now and waits for {agent} to start it ({ahead} bids ranked above it); {when}"
        )
    } else if fitting > 0 {
        format!(
            "it fits {fitting} of {n} machines now, but {}; {when}",
            blocked()
        )
    } else if machines.is_empty() {
        "no machine is registered in the market".to_string()
    } else {
        format!("it fits none of {n} machines: {}; {when}", blocked())
    };
    fields.extend([
        ("status", text("open")),
        ("rank", (ahead as u64 + 1).into()),
        ("bids_ahead", (ahead as u64).into()),
        ("machines_checked", (n as u64).into()),
        ("machines_fitting", fitting.into()),
        ("machines_ready", ready.into()),
        ("latest_start", b.latest_start().into()),
        ("runs_for_secs_if_started_now", runs_for.into()),
        (
            "earliest_start",
            match (ready, &earliest) {
                (0, e) => e.as_ref().map_or(Value::Null, |(at, _)| (*at).into()),
                _ => now.into(),
            },
        ),
        (
            "earliest_start_machine",
            earliest.as_ref().map_or(Value::Null, |(_, on)| text(on[0])),
        ),
        (
            "earliest_start_parts",
            match &earliest {
                Some((_, on)) if b.is_gang() => Value::Array(on.iter().map(text).collect()),
                _ => Value::Null,
            },
        ),
        (
            "reserved_on",
            reserved.as_ref().map_or(Value::Null, |(on, _)| text(on[0])),
        ),
        (
            "reserved_parts",
            match &reserved {
                Some((on, _)) if b.is_gang() => Value::Array(on.iter().map(text).collect()),
                _ => Value::Null,
            },
        ),
        (
            "reserved_from",
            reserved
                .as_ref()
                .map_or(Value::Null, |(_, at)| (*at).into()),
        ),
        (
            "sealed_to_machines",
            holders.map_or(Value::Null, |h| Value::Array(h.iter().map(text).collect())),
        ),
        ("policy_machine", chosen.map_or(Value::Null, text)),
        ("machines_wanted", b.parts().into()),
        (
            "policy_parts",
            gang_parts.map_or(Value::Null, |p| Value::Array(p.iter().map(text).collect())),
        ),
        (
            "image_sm_utilisation_bps",
            view.and_then(|v| v.image_sm_util_bps)
                .map_or(Value::Null, Value::from),
        ),
        (
            "blocked_by",
            Value::Array(
                reasons
                    .iter()
                    .map(|(r, k)| json!({"constraint": r, "machines": k}))
                    .collect(),
            ),
        ),
        ("allocation_refused", Value::Array(refused)),
        ("score_parts", score_parts(&m, &b, stake.amount, now)?),
        ("price", parse::tokens(b.price, decimals)),
        ("price_unit", text(price_unit(b.kind))),
        ("reserve", Value::Array(reserve)),
        ("summary", text(summary)),
    ]);
    Ok(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The auto power `bid place` sends with `flags` before its other arguments, or clap's
    /// refusal.
    fn auto_power(flags: &[&str]) -> std::result::Result<Option<u16>, String> {
        let market = Pubkey::new_unique().to_string();
        let rest = [
            "--market",
            &market,
            "--image",
            "x",
            "--image-digest",
            "ab",
            "--gib-per-gpu",
            "40",
            "--overclock",
            "power=300",
            "--price",
            "1",
            "--duration",
            "1h",
        ];
        place_args_from(flags.iter().chain(&rest).map(|f| f.to_string()))
            .map(|args| args.auto_power)
            .map_err(|e| crate::output::clap_sentence(&e))
    }

    #[test]
    fn auto_power_is_off_unless_asked_and_5_percent_without_a_value() {
        assert_eq!(auto_power(&[]), Ok(None));
        assert_eq!(auto_power(&["--auto-power"]), Ok(Some(500)));
        assert_eq!(auto_power(&["--auto-power", "12.5%"]), Ok(Some(1_250)));
        assert_eq!(auto_power(&["--auto-power=20"]), Ok(Some(2_000)));
        for (bad, says) in [("21%", "at most 20 %"), ("abc", "write a percentage")] {
            let e = auto_power(&["--auto-power", bad]).unwrap_err();
            assert!(e.starts_with("error: "), "{bad}: {e}");
            assert!(
                e.contains("bad auto power tolerance") && e.contains(says),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn auto_power_reads_as_a_sentence_and_a_number() {
        assert_eq!(
            auto_power_field(Some(500)),
            ("auto_power", text("up to 5 % throughput for energy"))
        );
        assert_eq!(auto_power_field(None), ("auto_power", text("off")));
        assert_eq!(
            auto_power_bps_field(Some(500)),
            ("auto_power_tolerance_bps", Value::from(500))
        );
        assert_eq!(auto_power_bps_field(None).1, Value::Null);
    }
}
