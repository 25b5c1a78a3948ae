//! `gpu-market lease extend LEASE --by DURATION`: the lease's client buys more run time at the
//! lease's price, paid into its escrow now (unspent escrow comes back when the lease settles).

use anyhow::{anyhow, bail, Result};
use gpu_market::state::{Lease, Market};
use gpu_market_core::settlement;
use gpu_market_sdk::{ClientInstruction, ExtendLease};
use solana_pubkey::Pubkey;

use crate::bid::check_balance;
use crate::config::Config;
use crate::output::{print_record, text};
use crate::parse;

pub(super) fn extend(
    config: &Config,
    lease: &Pubkey,
    by: &str,
    tokens: Option<Pubkey>,
) -> Result<()> {
    let signer = config.signer()?;
    let client = signer.key();
    let me = client.pubkey();
    let l: Lease = config.fetch(lease, "lease")?;
    if me != l.client {
        bail!(
            "only the lease's client {} may extend it; the signer is {me}",
            l.client
        );
    }
    let secs = u32::try_from(parse::duration_secs(by)?)
        .ok()
        .filter(|&s| s > 0)
        .ok_or_else(|| {
            anyhow!("the extension {by:?} must be more than zero and less than 136 years")
        })?;
    let m: Market = config.fetch(&l.market, "market")?;
    let decimals = config.mint_decimals(&m.payment_mint)?;
    let cost = settlement::escrow_for(l.price, l.kind.unit(), l.gpu_count as u64, secs as u64)
        .map_err(|_| anyhow!("the price of {secs} s of the lease is too large"))?;
    let (client_tokens, balance) = config.token_account(&me, &m.payment_mint, tokens)?;
    check_balance(cost, balance, decimals, &client_tokens, "the extension")?;
    let ix = ExtendLease::of(client, (*lease, &l), &m, client_tokens, secs).instruction();
    let signature = config.send(client, &[ix], &[])?;
    let after: Lease = config.fetch(lease, "lease")?;
    print_record(
        config.output,
        &[
            ("lease", text(lease)),
            ("extended_by_secs", secs.into()),
            ("paid", parse::tokens(cost, decimals)),
            ("ends_at", after.ends_at.into()),
            ("escrow", parse::tokens(after.escrow, decimals)),
            ("signature", text(signature)),
        ],
    );
    Ok(())
}
