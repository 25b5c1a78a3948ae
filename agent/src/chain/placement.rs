//! The market's machine choice as this agent computes it: every machine of the market and its
//! running leases as the cluster lists them, and the queue book's open bids, handed to
//! `gpu_market_sdk::placement`. Every agent reads the same accounts, so they agree on which
//! machine takes a bid without talking to each other; one that reads a little later may
//! disagree for a moment, which the grace period absorbs.

use std::collections::HashMap;

use gpu_market::state::{Bid, BidKind, BookLeaf, Freed, Lease, Machine, MachineStatus, Market};
use gpu_market_sdk::accounts::decode;
use gpu_market_sdk::placement::{alive, earliest_start, MarketPlacement, Placed};
use solana_pubkey::Pubkey;

use super::solana::{key, lease_filters, offers, SolanaChain};
use super::watch::market_subscriptions;
use super::{ChainError, Elsewhere, ReservationDuty};

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
    /// The market's machines and running leases, read once for the policy's view and the
    /// reservations' duty.
    listing: Option<Listing>,
}

/// Every machine of a market and its running leases.
type Listing = (Vec<(Pubkey, Machine)>, Vec<Lease>);

impl<'a> Policy<'a> {
    pub(super) fn new(market: &'a Market, now: i64, queue: &'a [BookLeaf]) -> Self {
        Policy {
            market,
            now,
            queue,
            view: None,
            listing: None,
        }
    }

    /// The market's machines, as far as this look at the books read them (none before).
    pub(super) fn machines(&self) -> &[(Pubkey, Machine)] {
        self.listing.as_ref().map_or(&[], |(m, _)| m.as_slice())
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
        let view = self.policy_view(policy).await?;
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

    /// Where the packing policy gives each part of gang bid `bid`, in the gang's order (`None`
    /// unless every part has a machine now).
    pub(super) async fn gang_placement(
        &self,
        policy: &mut Policy<'_>,
        bid: &Bid,
    ) -> Result<Option<Vec<Placed>>, ChainError> {
        Ok(self.policy_view(policy).await?.place_gang(bid))
    }

    /// The policy's view of the market for this look at the books, built the first time.
    async fn policy_view<'p>(
        &self,
        policy: &'p mut Policy<'_>,
    ) -> Result<&'p mut MarketPlacement, ChainError> {
        if policy.view.is_none() {
            let (market, now, queue) = (policy.market, policy.now, policy.queue);
            let (machines, leases) = self.listing(&mut policy.listing).await?;
            let view = MarketPlacement::new(market, now, machines.clone(), leases, queue)
                .map_err(|reason| ChainError::rejected("read", reason))?;
            policy.view = Some(view);
        }
        Ok(policy.view.as_mut().expect("set above"))
    }

    /// The market's machines and leases as a look at the books read them (`cache`), read now
    /// the first time.
    async fn listing<'p>(&self, cache: &'p mut Option<Listing>) -> Result<&'p Listing, ChainError> {
        match cache {
            Some(listing) => Ok(listing),
            none => Ok(none.insert(self.market_listing().await?)),
        }
    }

    /// Every machine of the market and its running leases: from the mirror, which the
    /// feed's subscriptions to them keep current once one scan of each was installed, else
    /// scanned from the RPC node (and installed). No notification says that a lease closed:
    /// the leases of a machine whose count of them (`Machine.leases`) differs from those
    /// listed are scanned again, machine by machine.
    pub(super) async fn market_listing(&self) -> Result<Listing, ChainError> {
        let [machine_filters, lease_filters_all] = market_subscriptions(&self.market());
        let machines: Vec<(Pubkey, Machine)> = self
            .listed(&machine_filters)
            .await?
            .iter()
            .filter_map(|(k, d)| Some((*k, decode::<Machine>(d, "machine").ok()?)))
            .collect();
        let mut leases: Vec<Lease> = self
            .listed(&lease_filters_all)
            .await?
            .iter()
            .filter_map(|(_, d)| decode::<Lease>(d, "lease").ok())
            .collect();
        // One count per machine in one pass: a scan of the leases per machine would be
        // quadratic (460 million comparisons at 10,000 machines and 46,000 leases).
        let mut listed: HashMap<Pubkey, usize> = HashMap::with_capacity(machines.len());
        for l in &leases {
            *listed.entry(l.machine).or_default() += 1;
        }
        for (key, machine) in &machines {
            if listed.get(key).copied().unwrap_or(0) == machine.leases as usize {
                continue;
            }
            let found = self.scan(&lease_filters(key)).await?;
            leases.retain(|l| l.machine != *key);
            leases.extend(
                found
                    .iter()
                    .filter_map(|(_, d)| decode::<Lease>(d, "lease").ok()),
            );
        }
        Ok((machines, leases))
    }

    /// The program's accounts that pass `filters`, one of the feed's subscriptions: from the
    /// mirror when it holds them all, else scanned from the RPC node and installed there.
    async fn listed(
        &self,
        filters: &[solana_rpc_client_api::filter::RpcFilterType],
    ) -> Result<Vec<(Pubkey, Vec<u8>)>, ChainError> {
        match self.mirror().and_then(|m| m.listing(filters)) {
            Some(found) => Ok(found),
            None => self.scan(filters).await,
        }
    }

    /// The program's accounts that pass `filters`, scanned from the RPC node, the scan
    /// installed in the mirror ([`super::mirror::Mirror::scanned`]).
    async fn scan(
        &self,
        filters: &[solana_rpc_client_api::filter::RpcFilterType],
    ) -> Result<Vec<(Pubkey, Vec<u8>)>, ChainError> {
        let (slot, found) = self.program_accounts(filters.to_vec()).await?;
        if let Some(m) = self.mirror() {
            m.scanned(filters, slot, &found);
        }
        Ok(found)
    }

    /// This machine's part in the market's reservations now, from the queue book's entries
    /// `queue` (best first). A reservation of its own that no longer holds anything is cleared.
    /// Without one, it walks the entries it could run once empty that have not expired: one
    /// that fits here now, the allocation path takes; one no machine holds, this machine
    /// reserves when, of the live machines no reservation holds, it is the one that can start
    /// it soonest (`placement::earliest_start`; ties: the first listed), every agent computing
    /// the same; one another machine holds, this machine takes over only if it starts it
    /// earlier (so a reservation parked on a machine that frees late does not stay there), and
    /// otherwise goes on to the next entry. The program refuses any other choice.
    /// Reads the market's machines and leases only when an entry waits for one, once a look
    /// at the books with the policy's view.
    pub(super) async fn reservation_duty(
        &self,
        policy: &mut Policy<'_>,
        machine: &Machine,
    ) -> Result<Option<ReservationDuty>, ChainError> {
        let (market, now, queue) = (policy.market, policy.now, policy.queue);
        let here = self.machine();
        let grace = market.silence_window_secs();
        let held = &machine.reservation;
        if held.is_set() {
            let bid: Option<Bid> = self.account(&held.bid, "bid").await.ok();
            let holds = bid.is_some_and(|b| machine.holds(&here, (&held.bid, &b), market, now));
            return Ok((!holds).then_some(ReservationDuty::Clear));
        }
        if machine.status != MachineStatus::Active {
            return Ok(None);
        }
        // What the machine offers once empty, and now.
        let empty = offers(machine, market, BidKind::Queue, now, &Freed::all())?.now;
        let offers = offers(machine, market, BidKind::Queue, now, &Freed::default())?;
        for leaf in queue {
            let need = leaf.summary.need();
            if leaf.summary.expired(now) || !empty.fits(&need) {
                continue;
            }
            let until = leaf.summary.runs_until(now);
            if offers.for_run(&leaf.bid, until).fits(&need) {
                return Ok(None);
            }
            let (machines, leases) = self.listing(&mut policy.listing).await?;
            let holds = |m: &Machine| m.reservation.binds(now, grace);
            // Held by another machine: from when (this one may take it over only by starting
            // it earlier, which `reserve` checks).
            let held_from = machines
                .iter()
                .find(|(k, m)| *k != here && holds(m) && m.reservation.bid == leaf.bid)
                .map(|(_, m)| m.reservation.start);
            let bid: Bid = self.account(&leaf.bid, "bid").await?;
            let free: Vec<(Pubkey, Machine)> = machines
                .iter()
                .filter(|(_, m)| {
                    m.status == MachineStatus::Active && alive(market, m, now) && !holds(m)
                })
                .cloned()
                .collect();
            let soonest = earliest_start(market, &bid, now, &free, leases);
            let ours = soonest.filter(|&(at, m)| m == here && at > now);
            match (ours, held_from) {
                (Some(_), None) => return Ok(Some(ReservationDuty::Reserve(key(&leaf.bid)))),
                (Some((at, _)), Some(from)) if at < from => {
                    return Ok(Some(ReservationDuty::Reserve(key(&leaf.bid))))
                }
                // Held elsewhere: the next entry may be this machine's to hold.
                (_, Some(_)) => continue,
                (None, None) => return Ok(None),
            }
        }
        Ok(None)
    }
}
