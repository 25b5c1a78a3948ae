//! The market's machine choice as this agent computes it: every machine of the market and its
//! running leases as the cluster lists them, and the queue book's open bids, handed to
//! `gpu_market_sdk::placement`. Every agent reads the same accounts, so they agree on which
//! machine takes a bid without talking to each other; one that reads a little later may
//! disagree for a moment, which the grace period absorbs.

use gpu_market::state::{Bid, BookLeaf, Lease, Machine, Market};
use gpu_market_sdk::accounts::decode;
use gpu_market_sdk::placement::MarketPlacement;
use solana_pubkey::Pubkey;

use super::solana::{accounts_with, key, SolanaChain};
use super::{ChainError, Elsewhere};

/// Where `market` sits in machine and lease accounts: right after the discriminator.
const MARKET_OFFSET: usize = 8;

/// What the packing policy says of one bid that fits this machine now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Placement {
    /// This machine, on these GPUs.
    Here(Vec<u8>),
    /// Another machine; this one's turn comes after that many grace periods.
    Elsewhere(Elsewhere),
}

/// The policy's view of the market for one look at the books: read when the first bid that
/// fits this machine asks for it, then kept for the others.
pub(super) struct Policy<'a> {
    pub(super) market: &'a Market,
    now: i64,
    /// The queue book's entries (the open bids of the workload).
    queue: &'a [BookLeaf],
    view: Option<MarketPlacement>,
}

impl<'a> Policy<'a> {
    pub(super) fn new(market: &'a Market, now: i64, queue: &'a [BookLeaf]) -> Self {
        Policy {
            market,
            now,
            queue,
            view: None,
        }
    }
}

impl SolanaChain {
    /// Where the packing policy gives `bid`, which fits this machine now; `None` for a spot
    /// bid (only its book's machine takes it) and when no machine fits it as listed (the
    /// listing behind this machine's own read): the fit rule of this machine then decides.
    pub(super) async fn placement(
        &self,
        policy: &mut Policy<'_>,
        bid: &Bid,
    ) -> Result<Option<Placement>, ChainError> {
        let view = match &mut policy.view {
            Some(view) => view,
            none => {
                let view = self
                    .market_placement(policy.market, policy.now, policy.queue)
                    .await?;
                none.insert(view)
            }
        };
        Ok(view.place(bid).map(|p| {
            if p.machine == self.machine() {
                return Placement::Here(p.gpus);
            }
            Placement::Elsewhere(Elsewhere {
                machine: key(&p.machine),
                // This machine not listed (its own heartbeat is older than the silence window,
                // as at a start after a long stop): first after the policy's machine, as before
                // turns.
                turn: view.turn(bid, &p, &self.machine()).unwrap_or(1),
            })
        }))
    }

    /// Every machine of the market and its running leases, as the cluster lists them now.
    async fn market_placement(
        &self,
        market: &Market,
        now: i64,
        queue: &[BookLeaf],
    ) -> Result<MarketPlacement, ChainError> {
        let of = self.market();
        let (_, machines) = self
            .program_accounts(accounts_with::<Machine>(MARKET_OFFSET, &of))
            .await?;
        let (_, leases) = self
            .program_accounts(accounts_with::<Lease>(MARKET_OFFSET, &of))
            .await?;
        let machines: Vec<(Pubkey, Machine)> = machines
            .iter()
            .filter_map(|(k, d)| Some((*k, decode::<Machine>(d, "machine").ok()?)))
            .collect();
        let leases: Vec<Lease> = leases
            .iter()
            .filter_map(|(_, d)| decode::<Lease>(d, "lease").ok())
            .collect();
        MarketPlacement::new(market, now, machines, &leases, queue)
            .map_err(|reason| ChainError::rejected("read", reason))
    }
}
