//! `gpu-market market init|show|update|apply|add-region|name-class|collect|inactive`.

use anyhow::{anyhow, bail, Result};
use clap::{Args, Subcommand};
use gpu_market::state::{
    Market, MarketParams, StakeAccount, BOOK_EMPTY_SPACE, GPU_CLASSES, MAX_MARKET_REGIONS,
    REGION_LEN,
};
use gpu_market_sdk::{
    init_queue_book, open_book_instructions, AddRegion, ApplyMarketUpdate, ClientInstruction,
    CollectFees, InitMarket, NameGpuClass, UpdateMarket,
};
use serde_json::{json, Value};
use solana_instruction::Instruction;
use solana_keypair::Keypair;
use solana_pubkey::Pubkey;
use solana_signer::Signer;

use crate::config::{Config, Group};
use crate::output::{object, print_list, print_record, text, Fields};
use crate::parse;

#[derive(Subcommand)]
pub enum MarketCommand {
    /// Creates a market owned by the keypair, with its stake and payment vaults and its queue
    /// book.
    Init {
        /// Distinguishes several markets of one authority.
        #[arg(long, default_value_t = 0)]
        id: u64,
        #[arg(long)]
        stake_mint: Pubkey,
        /// Defaults to the stake mint.
        #[arg(long)]
        payment_mint: Option<Pubkey>,
        /// Token account (of the payment mint) that receives protocol fees.
        #[arg(long)]
        treasury: Pubkey,
        /// Token account (of the stake mint) that receives slashed host stake; defaults to the
        /// treasury (which must then be of the stake mint too).
        #[arg(long)]
        stake_treasury: Option<Pubkey>,
        /// The model name of the next GPU class, from class 0 on (repeatable, e.g.
        /// `--class-name H100 --class-name A100`): what clients bid for it by. A class keeps
        /// its name for the life of the market.
        #[arg(long = "class-name", value_name = "NAME")]
        class_names: Vec<String>,
        #[command(flatten)]
        params: ParamArgs,
    },
    /// Shows a market: its tokens, rules, and the state of its auction.
    Show { market: Pubkey },
    /// Schedules a change of the market's rules (authority only); rules not given stay as
    /// they are (or as already scheduled). The change applies after a notice of the unstake
    /// cooldown plus one billing interval, with `market apply`.
    Update {
        market: Pubkey,
        #[command(flatten)]
        params: ParamArgs,
    },
    /// Applies the market's scheduled rules once their notice is over (anyone may).
    Apply { market: Pubkey },
    /// Lists a region (authority only, at once): machines may then declare it and bids name
    /// it. A market lists at most 32, and a region once listed stays.
    AddRegion {
        market: Pubkey,
        /// The label, at most 16 bytes (e.g. eu-central).
        region: String,
    },
    /// Names a GPU class by its model (authority only, at once): clients then bid for it by
    /// that name. A class is named once and keeps its name; no two classes share one.
    NameClass {
        market: Pubkey,
        /// The class's number, 0 to 7.
        class: u8,
        /// The model, at most 16 characters (e.g. H100, "RTX 4090").
        name: String,
    },
    /// Moves the protocol fees and the slashed stake the market holds to its treasuries
    /// (anyone may).
    Collect { market: Pubkey },
    /// Lists the market's stake accounts whose owners have not acted for a while (no stake,
    /// bid, lease end or claim signed), quietest first: what they still hold in the market
    /// (stake, waiting bids, refunds due), for the authority to remind them.
    Inactive {
        market: Pubkey,
        /// How long without activity: seconds, or e.g. 90m, 12h, 30d.
        #[arg(long = "for", default_value = "30d", value_name = "DURATION")]
        quiet_for: String,
    },
}

/// Market rules; amounts in token units (stake token for stake, payment token for prices).
#[derive(Args)]
pub struct ParamArgs {
    /// Length of a billing interval [init default: 60].
    #[arg(long)]
    billing_interval_secs: Option<u32>,
    /// Protocol fee on payments, in bps [init default: 250].
    #[arg(long)]
    protocol_fee_bps: Option<u16>,
    /// Wait between asking stake back and withdrawing it [init default: 86400].
    #[arg(long)]
    unstake_cooldown_secs: Option<u32>,
    /// Score weights STAKE,URGENCY,COMPLEXITY in bps, adding up to 10000 (e.g. 4000,3000,3000).
    #[arg(long, value_delimiter = ',')]
    weights_bps: Option<Vec<u16>>,
    /// Stake (token units) at which the stake part of the score saturates.
    #[arg(long)]
    stake_bound: Option<String>,
    /// Spend per hour (price × GPUs, payment token units) at which the complexity part of the
    /// score saturates.
    #[arg(long)]
    spend_bound: Option<String>,
    /// Urgency premium, as a share of a bid's escrow in bps, at which the urgency part of the
    /// score saturates [init default: 1000].
    #[arg(long)]
    urgency_premium_bps: Option<u16>,
    /// Score a waiting bid gains per tick of the market's clock (the billing interval the
    /// market opened with, `clock_secs` in `market show`: a later change of the interval
    /// leaves it as it is, so the book keeps its order).
    #[arg(long)]
    aging_per_interval: Option<u16>,
    /// Most score a waiting bid gains by aging, in bps [init default: 3000]; a queue bid's
    /// deadline may let it wait no longer than that takes.
    #[arg(long)]
    aging_cap_bps: Option<u16>,
    /// Most of the market's GPUs one client may hold, in bps.
    #[arg(long)]
    max_client_share_bps: Option<u16>,
    /// Base reserve price per GPU-hour (payment token units).
    #[arg(long)]
    base_price: Option<String>,
    /// Capability premium of a GPU class: CLASS=BPS (repeatable), e.g. 0=2000.
    #[arg(long = "capability", value_name = "CLASS=BPS")]
    capability_bps: Vec<String>,
    /// Seasonal factor of a UTC hour: HOUR=BPS (repeatable; 10000 is neutral), e.g. 18=12000.
    #[arg(long = "seasonal", value_name = "HOUR=BPS")]
    seasonal_bps: Vec<String>,
    #[arg(long)]
    demand_smoothing_bps: Option<u16>,
    #[arg(long)]
    demand_cap_bps: Option<u16>,
    #[arg(long)]
    idle_utilisation_bps: Option<u16>,
    /// Consecutive idle proofs that flag a lease idle (the client's warning).
    #[arg(long)]
    idle_intervals: Option<u16>,
    /// Consecutive idle proofs after which the market ends a lease, its unused escrow refunded
    /// (0: never; more than --idle-intervals otherwise).
    #[arg(long)]
    idle_end_intervals: Option<u16>,
    #[arg(long)]
    silence_intervals: Option<u16>,
    #[arg(long)]
    slash_evidence: Option<u16>,
    /// Share of a machine's bond (the market's minimum host stake) one slash takes, in bps: per
    /// `slash_evidence` silent intervals of a lease (never more than twice the lease's value
    /// where stake and payment are one token), or once per window of evidence.
    #[arg(long)]
    slash_bps: Option<u16>,
    /// Stake (token units) a host needs to register a machine.
    #[arg(long)]
    min_host_stake: Option<String>,
}

/// `INDEX=BPS` with INDEX below `len`.
fn indexed_bps(s: &str, len: usize, what: &str) -> Result<(usize, u16)> {
    let bad = || anyhow!("bad {what} {s:?}: expected INDEX=BPS with INDEX below {len}");
    let (i, v) = s.split_once('=').ok_or_else(bad)?;
    let i: usize = i.trim().parse().map_err(|_| bad())?;
    let v: u16 = v.trim().parse().map_err(|_| bad())?;
    if i >= len {
        return Err(bad());
    }
    Ok((i, v))
}

impl ParamArgs {
    /// `params` with every rule given here replaced.
    fn apply(
        &self,
        mut p: MarketParams,
        stake_decimals: u8,
        payment_decimals: u8,
    ) -> Result<MarketParams> {
        macro_rules! set {
            ($($field:ident),*) => { $( if let Some(v) = self.$field { p.$field = v; } )* };
        }
        set!(
            billing_interval_secs,
            protocol_fee_bps,
            unstake_cooldown_secs,
            urgency_premium_bps,
            aging_per_interval,
            aging_cap_bps,
            max_client_share_bps,
            demand_smoothing_bps,
            demand_cap_bps,
            idle_utilisation_bps,
            idle_intervals,
            idle_end_intervals,
            silence_intervals,
            slash_evidence,
            slash_bps
        );
        if let Some(w) = &self.weights_bps {
            p.weights_bps = w
                .as_slice()
                .try_into()
                .map_err(|_| anyhow!("give three score weights: STAKE,URGENCY,COMPLEXITY"))?;
        }
        if let Some(s) = &self.stake_bound {
            p.stake_bound = parse::amount(s, stake_decimals, "stake bound")?;
        }
        if let Some(s) = &self.spend_bound {
            p.spend_bound = parse::amount(s, payment_decimals, "spend bound")?;
        }
        if let Some(s) = &self.min_host_stake {
            p.min_host_stake = parse::amount(s, stake_decimals, "minimum host stake")?;
        }
        if let Some(s) = &self.base_price {
            p.base_price_per_gpu_hour = parse::amount(s, payment_decimals, "base price")?;
        }
        for c in &self.capability_bps {
            let (i, v) = indexed_bps(c, GPU_CLASSES, "capability")?;
            p.capability_bps[i] = v;
        }
        for s in &self.seasonal_bps {
            let (i, v) = indexed_bps(s, 24, "seasonal factor")?;
            p.seasonal_bps[i] = v;
        }
        Ok(p)
    }
}

pub fn run(config: &Config, command: MarketCommand) -> Result<()> {
    match command {
        MarketCommand::Init {
            id,
            stake_mint,
            payment_mint,
            treasury,
            stake_treasury,
            class_names,
            params,
        } => {
            let authority = config.signer()?;
            if class_names.len() > GPU_CLASSES {
                bail!(
                    "a market has {GPU_CLASSES} GPU classes: {} names given",
                    class_names.len()
                );
            }
            let names = class_names
                .iter()
                .map(|n| crate::classes::name(n))
                .collect::<Result<Vec<_>>>()?;
            let payment_mint = payment_mint.unwrap_or(stake_mint);
            let params = params.apply(
                MarketParams::recommended(60, 250, 86_400),
                config.mint_decimals(&stake_mint)?,
                config.mint_decimals(&payment_mint)?,
            )?;
            let init = InitMarket {
                authority: authority.key(),
                stake_mint,
                payment_mint,
                treasury,
                stake_treasury: stake_treasury.unwrap_or(treasury),
                id,
                params,
            };
            let market = init.market();
            // The client creates the (empty) queue book in the same transaction, and the
            // program opens it; each waiting bid pays for its own place in it.
            let book = Keypair::new();
            let rent = config.rent_exempt_minimum(BOOK_EMPTY_SPACE)?;
            let mut ixs = vec![init.instruction()];
            ixs.extend(open_book_instructions(
                &authority.pubkey(),
                &book.pubkey(),
                rent,
                init_queue_book(&authority.pubkey(), &market, &book.pubkey()),
            ));
            let naming: Vec<Instruction> = names
                .into_iter()
                .zip(0u8..)
                .map(|(name, class)| {
                    NameGpuClass {
                        authority: authority.key(),
                        market,
                        class,
                        name,
                    }
                    .instruction()
                })
                .collect();
            let groups = [
                Group {
                    instructions: ixs,
                    signers: vec![&book],
                },
                Group {
                    instructions: naming,
                    signers: vec![],
                },
            ];
            let signatures = config.send_groups(&authority, &groups)?;
            let m: Market = config.fetch(&market, "market")?;
            print_record(
                config.output,
                &[
                    ("market", text(market)),
                    ("queue_book", text(book.pubkey())),
                    ("gpu_classes", crate::classes::value(&m)),
                    (
                        "signature",
                        text(signatures.last().cloned().unwrap_or_default()),
                    ),
                ],
            );
            Ok(())
        }
        MarketCommand::NameClass {
            market,
            class,
            name,
        } => {
            let signer = config.signer()?;
            let m: Market = config.fetch(&market, "market")?;
            if m.authority != signer.pubkey() {
                bail!(
                    "only market {market}'s authority {} names GPU classes",
                    m.authority
                );
            }
            let label = crate::classes::name(&name)?;
            if class as usize >= GPU_CLASSES {
                bail!("GPU class {class} is not one of the market's classes 0..{GPU_CLASSES}");
            }
            if m.class_names[class as usize][0] != 0 {
                bail!(
                    "GPU class {class} of market {market} is named {} already: a class keeps its name",
                    crate::classes::label(&m, class)
                );
            }
            if let Some((other, taken)) = crate::classes::named(&m)
                .into_iter()
                .find(|(_, n)| n.eq_ignore_ascii_case(&name))
            {
                bail!("GPU class {other} of market {market} is named {taken} already");
            }
            let signature = config.send_all(
                &signer,
                &[&NameGpuClass {
                    authority: signer.key(),
                    market,
                    class,
                    name: label,
                }],
            )?;
            let m: Market = config.fetch(&market, "market")?;
            print_record(
                config.output,
                &[
                    ("market", text(market)),
                    ("gpu_classes", crate::classes::value(&m)),
                    ("signature", text(signature)),
                ],
            );
            Ok(())
        }
        MarketCommand::Show { market } => {
            let m: Market = config.fetch(&market, "market")?;
            print_record(config.output, &market_fields(config, &market, &m)?);
            Ok(())
        }
        MarketCommand::Update { market, params } => {
            let authority = config.signer()?;
            let m: Market = config.fetch(&market, "market")?;
            if m.authority != authority.pubkey() {
                bail!(
                    "only the market's authority {} may update it; the keypair is {}",
                    m.authority,
                    authority.pubkey()
                );
            }
            // A change already scheduled is what the new one builds on: rules not given stay
            // as scheduled.
            let base = if m.pending_at != 0 {
                m.pending_params
            } else {
                m.params
            };
            let new = params.apply(
                base,
                config.mint_decimals(&m.stake_mint)?,
                config.mint_decimals(&m.payment_mint)?,
            )?;
            if new == base {
                bail!("nothing to change: give at least one rule to update");
            }
            let signature = config.send_all(
                &authority,
                &[&UpdateMarket {
                    authority: authority.key(),
                    market,
                    params: new,
                }],
            )?;
            let effective_at = config.fetch::<Market>(&market, "market")?.pending_at;
            print_record(
                config.output,
                &[
                    ("market", text(market)),
                    ("effective_at", effective_at.into()),
                    (
                        "note",
                        text(format!(
                            "the change is scheduled: run `gpu-market market apply {market}` from effective_at on"
                        )),
                    ),
                    ("signature", text(signature)),
                ],
            );
            Ok(())
        }
        MarketCommand::Apply { market } => {
            let signer = config.signer()?;
            let m: Market = config.fetch(&market, "market")?;
            if m.pending_at == 0 {
                bail!("market {market} has no change of rules scheduled");
            }
            let now = config.cluster_time()?;
            if now < m.pending_at {
                bail!(
                    "the notice of market {market}'s scheduled change is not over: it applies from {} ({} s from now)",
                    m.pending_at,
                    m.pending_at - now
                );
            }
            let signature = config.send_all(
                &signer,
                &[&ApplyMarketUpdate {
                    signer: signer.key(),
                    market,
                }],
            )?;
            let m: Market = config.fetch(&market, "market")?;
            let mut fields = market_fields(config, &market, &m)?;
            fields.push(("signature", text(signature)));
            print_record(config.output, &fields);
            Ok(())
        }
        MarketCommand::AddRegion { market, region } => {
            let signer = config.signer()?;
            let m: Market = config.fetch(&market, "market")?;
            if m.authority != signer.pubkey() {
                bail!(
                    "only market {market}'s authority {} lists regions",
                    m.authority
                );
            }
            let label = parse::padded::<REGION_LEN>(&region, "region")?;
            if label[0] == 0 {
                bail!("a region label is not empty");
            }
            if m.regions.contains(&label) {
                bail!("market {market} lists region {region} already");
            }
            if m.regions.iter().all(|r| r[0] != 0) {
                bail!("market {market} lists {MAX_MARKET_REGIONS} regions, the most it can");
            }
            let signature = config.send_all(
                &signer,
                &[&AddRegion {
                    authority: signer.key(),
                    market,
                    region: label,
                }],
            )?;
            let m: Market = config.fetch(&market, "market")?;
            print_record(
                config.output,
                &[
                    ("market", text(market)),
                    ("regions", regions_value(&m)),
                    ("signature", text(signature)),
                ],
            );
            Ok(())
        }
        MarketCommand::Inactive { market, quiet_for } => inactive(config, &market, &quiet_for),
        MarketCommand::Collect { market } => {
            let signer = config.signer()?;
            let m: Market = config.fetch(&market, "market")?;
            if m.fees_due == 0 && m.slashed_due == 0 && m.burn_due == 0 {
                bail!("market {market} holds no fees, slashed stake or tokens to burn");
            }
            let signature = config.send_all(
                &signer,
                &[&CollectFees {
                    signer: signer.key(),
                    market,
                    payment_mint: m.payment_mint,
                    stake_mint: m.stake_mint,
                    treasury: m.treasury,
                    stake_treasury: m.stake_treasury,
                }],
            )?;
            print_record(
                config.output,
                &[
                    ("market", text(market)),
                    (
                        "fees",
                        parse::tokens(m.fees_due, config.mint_decimals(&m.payment_mint)?),
                    ),
                    ("treasury", text(m.treasury)),
                    (
                        "slashed",
                        parse::tokens(m.slashed_due, config.mint_decimals(&m.stake_mint)?),
                    ),
                    ("stake_treasury", text(m.stake_treasury)),
                    (
                        "burned",
                        parse::tokens(m.burn_due, config.mint_decimals(&m.payment_mint)?),
                    ),
                    ("signature", text(signature)),
                ],
            );
            Ok(())
        }
    }
}

/// The rules `p` as shown: amounts in token units (`sd`, `pd`: the stake and payment mints'
/// decimals).
fn param_fields(p: &MarketParams, sd: u8, pd: u8) -> Fields {
    vec![
        ("billing_interval_secs", p.billing_interval_secs.into()),
        ("protocol_fee_bps", p.protocol_fee_bps.into()),
        ("unstake_cooldown_secs", p.unstake_cooldown_secs.into()),
        (
            "score_weights_bps",
            json!({"stake": p.weights_bps[0], "urgency": p.weights_bps[1], "complexity": p.weights_bps[2]}),
        ),
        ("stake_bound", parse::tokens(p.stake_bound, sd)),
        ("spend_bound", parse::tokens(p.spend_bound, pd)),
        ("urgency_premium_bps", p.urgency_premium_bps.into()),
        ("aging_per_interval", p.aging_per_interval.into()),
        ("aging_cap_bps", p.aging_cap_bps.into()),
        ("max_client_share_bps", p.max_client_share_bps.into()),
        (
            "base_price_per_gpu_hour",
            parse::tokens(p.base_price_per_gpu_hour, pd),
        ),
        ("capability_bps", Value::from(p.capability_bps.to_vec())),
        ("seasonal_bps", Value::from(p.seasonal_bps.to_vec())),
        ("demand_smoothing_bps", p.demand_smoothing_bps.into()),
        ("demand_cap_bps", p.demand_cap_bps.into()),
        ("idle_utilisation_bps", p.idle_utilisation_bps.into()),
        ("idle_intervals", p.idle_intervals.into()),
        ("idle_end_intervals", p.idle_end_intervals.into()),
        ("silence_intervals", p.silence_intervals.into()),
        ("slash_evidence", p.slash_evidence.into()),
        ("slash_bps", p.slash_bps.into()),
        ("min_host_stake", parse::tokens(p.min_host_stake, sd)),
    ]
}

/// A market's record as `market show` prints it (and `gpu-market serve`'s market page shows):
/// its accounts, its rules in force and scheduled, and the state of its auction.
pub(crate) fn market_fields(config: &Config, key: &Pubkey, m: &Market) -> Result<Fields> {
    let sd = config.mint_decimals(&m.stake_mint)?;
    let pd = config.mint_decimals(&m.payment_mint)?;
    let mut fields: Fields = vec![
        ("market", text(key)),
        ("authority", text(m.authority)),
        ("id", m.id.into()),
        ("stake_mint", text(m.stake_mint)),
        ("payment_mint", text(m.payment_mint)),
        ("stake_vault", text(m.stake_vault)),
        ("payment_vault", text(m.payment_vault)),
        ("treasury", text(m.treasury)),
        ("stake_treasury", text(m.stake_treasury)),
        ("queue_book", text(m.queue_book)),
        ("regions", regions_value(m)),
        ("gpu_classes", crate::classes::value(m)),
    ];
    // The rules in force, each a field of its own.
    fields.extend(param_fields(&m.params, sd, pd));
    fields.extend([
        // The tick bids age by and demand is sampled on: the interval the market opened with.
        ("clock_secs", m.clock_secs.into()),
        ("demand_bps", m.demand_bps.into()),
        ("gpus_offered", m.gpus_offered.into()),
        ("gpus_waiting", m.gpus_waiting.into()),
        ("total_staked", parse::tokens(m.total_staked, sd)),
        (
            "total_pending_unstake",
            parse::tokens(m.total_pending_unstake, sd),
        ),
        ("total_escrow", parse::tokens(m.total_escrow, pd)),
        ("fees_due", parse::tokens(m.fees_due, pd)),
        ("burn_due", parse::tokens(m.burn_due, pd)),
        ("slashed_due", parse::tokens(m.slashed_due, sd)),
    ]);
    if m.pending_at != 0 {
        fields.push((
            "pending_params",
            object(&param_fields(&m.pending_params, sd, pd)),
        ));
        fields.push(("pending_at", m.pending_at.into()));
    }
    Ok(fields)
}

/// The regions a market lists, in its table's order (a book entry's region bit is the index).
fn regions_value(m: &Market) -> Value {
    Value::from(
        m.regions
            .iter()
            .take_while(|r| r[0] != 0)
            .map(|r| parse::unpadded(r))
            .collect::<Vec<_>>(),
    )
}

/// `market inactive MARKET --for DURATION`.
fn inactive(config: &Config, market: &Pubkey, quiet_for: &str) -> Result<()> {
    let m: Market = config.fetch(market, "market")?;
    let quiet = parse::duration_secs(quiet_for)? as i64;
    let now = config.cluster_time()?;
    let (sd, pd) = (
        config.mint_decimals(&m.stake_mint)?,
        config.mint_decimals(&m.payment_mint)?,
    );
    let mut stakes: Vec<(Pubkey, StakeAccount)> = config
        .program_accounts_of::<StakeAccount>(&[(0, *market)])?
        .into_iter()
        .filter(|(_, s)| now.saturating_sub(s.last_active) >= quiet)
        .collect();
    stakes.sort_by_key(|(_, s)| s.last_active);
    let rows: Vec<Fields> = stakes
        .iter()
        .map(|(key, s)| {
            vec![
                ("owner", text(s.owner)),
                ("stake_account", text(key)),
                ("last_active", s.last_active.into()),
                ("quiet_secs", now.saturating_sub(s.last_active).into()),
                (
                    "stake",
                    parse::tokens(s.amount.saturating_add(s.pending_unstake), sd),
                ),
                ("open_bids", s.open_bids.into()),
                ("gpus_held", s.gpus_held.into()),
                ("machines", s.machines.into()),
                ("refunds_due", parse::tokens(s.refunds_due, pd)),
            ]
        })
        .collect();
    print_list(
        config.output,
        &[
            "owner",
            "stake_account",
            "last_active",
            "quiet_secs",
            "stake",
            "open_bids",
            "gpus_held",
            "machines",
            "refunds_due",
        ],
        &rows,
    );
    Ok(())
}
