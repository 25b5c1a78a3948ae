//! `gpu-market quote`: the market's dynamic reserve price per GPU class, now and by hour.

use anyhow::{anyhow, bail, Result};
use clap::Args;
use gpu_market::state::{Market, GPU_CLASSES};
use serde_json::Value;
use solana_pubkey::Pubkey;

use crate::config::Config;
use crate::output::{print_list, text, Fields};
use crate::parse;

#[derive(Args)]
pub struct QuoteArgs {
    #[arg(long)]
    market: Pubkey,
    /// Only this GPU class (repeatable) [default: every class].
    #[arg(long = "class", value_name = "CLASS")]
    classes: Vec<u8>,
}

pub fn run(config: &Config, args: QuoteArgs) -> Result<()> {
    let m: Market = config.fetch(&args.market, "market")?;
    let decimals = config.mint_decimals(&m.payment_mint)?;
    let classes: Vec<u8> = if args.classes.is_empty() {
        (0..GPU_CLASSES as u8).collect()
    } else {
        args.classes.clone()
    };
    if let Some(c) = classes.iter().find(|&&c| c as usize >= GPU_CLASSES) {
        bail!("GPU class {c} is not one of the market's classes 0..{GPU_CLASSES}");
    }
    let now = config.cluster_time()?;
    let midnight = now - now.rem_euclid(86_400);
    let price = |class: u8, at: i64| -> Result<Value> {
        let p = m
            .reserve_price(class, at)
            .map_err(|e| anyhow!("cannot price GPU class {class}: {e}"))?;
        Ok(parse::tokens(p, decimals))
    };
    let rows = classes
        .iter()
        .map(|&class| {
            let by_hour = (0..24)
                .map(|h| price(class, midnight + h * 3_600))
                .collect::<Result<Vec<_>>>()?;
            Ok(vec![
                ("class", class.into()),
                ("now", price(class, now)?),
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
        .collect::<Result<Vec<Fields>>>()?;
    print_list(
        config.output,
        &[
            "class",
            "now",
            "demand_bps",
            "capability_bps",
            "by_hour_utc",
        ],
        &rows,
    );
    Ok(())
}
