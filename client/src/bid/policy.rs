//! Which machine the market's packing policy gives a bid (`gpu_market_sdk::placement`, what
//! every host agent computes): `bid explain` shows it.

use anyhow::{anyhow, Result};
use gpu_market::state::{Bid, BookLeaf, Lease, Machine, Market};
use gpu_market_sdk::placement::MarketPlacement;
use solana_pubkey::Pubkey;

use crate::config::Config;

/// The machine of `machines` (all of `market`'s, `queue` its queue book's entries) whose
/// agent takes `bid` at once, as the agents compute it at `now`; `None` where none fits it.
pub(super) fn policy_machine(
    config: &Config,
    market: &Market,
    now: i64,
    machines: &[(Pubkey, Machine)],
    queue: &[BookLeaf],
    bid: &Bid,
) -> Result<Option<Pubkey>> {
    let leases: Vec<Lease> = config
        .program_accounts_of::<Lease>(&[(0, bid.market)])?
        .into_iter()
        .map(|(_, l)| l)
        .collect();
    let mut placement = MarketPlacement::new(market, now, machines.to_vec(), &leases, queue)
        .map_err(|e| anyhow!("{e}"))?;
    Ok(placement.place(bid).map(|p| p.machine))
}
