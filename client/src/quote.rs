//! `gpu-market quote`: the market's dynamic reserve price per GPU class, now and by hour.

use anyhow::{anyhow, Result};
use clap::Args;
use gpu_market::state::{Machine, Market};
use serde_json::Value;
use solana_pubkey::Pubkey;

use crate::classes;
use crate::config::Config;
use crate::output::{print_list, text, Fields};
use crate::parse;

#[derive(Args)]
pub struct QuoteArgs {
    #[arg(long)]
    market: Pubkey,
    /// Only this GPU class, by its model name or number (repeatable) [default: the classes
    /// the market names or its machines declare].
    #[arg(long = "class", value_name = "CLASS")]
    classes: Vec<String>,
}

pub fn run(config: &Config, args: QuoteArgs) -> Result<()> {
    let m: Market = config.fetch(&args.market, "market")?;
    let classes = match args.classes.is_empty() {
        true => {
            let machines = config.program_accounts_of::<Machine>(&[(0, args.market)])?;
            let declared = machines
                .iter()
                .flat_map(|(_, mach)| mach.gpus[..mach.gpu_count as usize].iter().map(|g| g.class));
            classes::in_use(&m, declared.collect::<Vec<_>>())
        }
        false => args
            .classes
            .iter()
            .map(|c| classes::parse(&m, c))
            .collect::<Result<Vec<_>>>()?,
    };
    let rows = quote_rows(config, &args.market, &classes, config.cluster_time()?)?;
    print_list(config.output, COLUMNS, &rows);
    Ok(())
}

/// The columns `quote` prints of [`quote_rows`].
pub(crate) const COLUMNS: &[&str] = &[
    "class",
    "name",
    "now",
    "demand_bps",
    "capability_bps",
    "by_hour_utc",
];

/// The reserve price of each GPU class of `classes` at cluster time `now`, and at each hour
/// (UTC) of `now`'s day with the market's demand now: what `quote` prints (and `gpu-market
/// serve`'s market page shows).
pub(crate) fn quote_rows(
    config: &Config,
    market: &Pubkey,
    classes: &[u8],
    now: i64,
) -> Result<Vec<Fields>> {
    let m: Market = config.fetch(market, "market")?;
    let decimals = config.mint_decimals(&m.payment_mint)?;
    classes
        .iter()
        .map(|&class| {
            let by_hour: Vec<Value> = by_hour(&m, class, now)?
                .into_iter()
                .map(|p| parse::tokens(p, decimals))
                .collect();
            Ok(vec![
                ("class", class.into()),
                ("name", text(classes::label(&m, class))),
                ("now", parse::tokens(reserve(&m, class, now)?, decimals)),
                ("hour_utc_now", ((now.rem_euclid(86_400)) / 3_600).into()),
                (
                    "demand_bps",
                    m.demand_bps.min(m.params.demand_cap_bps as u64).into(),
                ),
                (
                    "capability_bps",
                    m.params.capability_bps[class as usize].into(),
                ),
                ("unit", text("per GPU-hour")),
                ("by_hour_utc", Value::Array(by_hour)),
            ])
        })
        .collect()
}

/// The reserve price per GPU-hour of GPU `class` at `at`, in base units: the program's own
/// `Market::reserve_price` on the market's demand as it stands.
pub(crate) fn reserve(m: &Market, class: u8, at: i64) -> Result<u64> {
    m.reserve_price(class, at)
        .map_err(|e| anyhow!("cannot price GPU class {class}: {e}"))
}

/// [`reserve`] at each hour (UTC) of the day `now` falls in, 0 to 23.
pub(crate) fn by_hour(m: &Market, class: u8, now: i64) -> Result<Vec<u64>> {
    let midnight = now - now.rem_euclid(86_400);
    (0..24)
        .map(|h| reserve(m, class, midnight + h * 3_600))
        .collect()
}
