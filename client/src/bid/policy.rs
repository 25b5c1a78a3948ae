//! Which machine the market's packing policy gives a bid (`gpu_market_sdk::placement`, what
//! every host agent computes), and what the co-location model knows of its image: `bid
//! explain` shows both.

use anyhow::{anyhow, Result};
use gpu_market::state::{Bid, BookLeaf, Lease, Machine, Market};
use gpu_market_sdk::placement::{MarketPlacement, Sealed};
use solana_pubkey::Pubkey;

use crate::config::Config;

/// What the packing policy makes of a bid.
pub(super) struct PolicyView {
    /// The machine whose agent takes it at once; `None` where none fits it. For a gang bid,
    /// its first part's (whose agent starts every part).
    pub machine: Option<Pubkey>,
    /// For a gang bid: each part's machine, in the gang's order, where every part has one now.
    pub parts: Option<Vec<Pubkey>>,
    /// The mean SM utilisation of the measured leases running its image: its profile for the
    /// co-location model (`None`: not measured, it clashes with no co-tenant).
    pub image_sm_util_bps: Option<u16>,
}

/// The packing policy's view of `bid` over `machines` (all of `market`'s, `queue` its queue
/// book's entries), `sealed` to some of them, as the agents compute it at `now`.
pub(super) fn policy_view(
    config: &Config,
    (market, now): (&Market, i64),
    machines: &[(Pubkey, Machine)],
    queue: &[BookLeaf],
    bid: &Bid,
    sealed: Sealed,
) -> Result<PolicyView> {
    let leases: Vec<Lease> = config
        .program_accounts_of::<Lease>(&[(0, bid.market)])?
        .into_iter()
        .map(|(_, l)| l)
        .collect();
    let mut placement = MarketPlacement::new(market, now, machines.to_vec(), leases, queue)
        .map_err(|e| anyhow!("{e}"))?;
    let parts = bid
        .is_gang()
        .then(|| placement.place_gang(bid, sealed))
        .flatten()
        .map(|parts| parts.into_iter().map(|p| p.machine).collect::<Vec<_>>());
    let machine = match bid.is_gang() {
        true => parts.as_ref().map(|p| p[0]),
        false => placement.place(bid, sealed).map(|p| p.machine),
    };
    Ok(PolicyView {
        machine,
        parts,
        image_sm_util_bps: placement
            .profile_of(&bid.image_digest)
            .map(|p| p.sm_util_bps),
    })
}
