//! The market's machine choice as this agent computes it: every machine of the market and its
//! running leases as the cluster lists them, and the queue book's open bids, handed to
//! `gpu_market_sdk::placement`. Every agent reads the same accounts, so they agree on which
//! machine takes a bid without talking to each other; one that reads a little later may
//! disagree for a moment, which the grace period absorbs.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::PoisonError;
use std::time::{Duration, Instant};

use anchor_lang::Discriminator;
use gpu_market::state::{
    Bid, BidKind, BookLeaf, Freed, Lease, Machine, MachineStatus, Market, SealedEnv,
};
use gpu_market_sdk::accounts::decode;
use gpu_market_sdk::placement::{
    alive, earliest_start, gang_start, sealed_holders, Changes, MarketPlacement, Placed, Sealed,
};
use solana_pubkey::Pubkey;
use solana_rpc_client_api::filter::{Memcmp, RpcFilterType};

use super::mirror::Mirror;
use super::solana::{key, lease_filters, offers, SolanaChain};
use super::watch::market_subscriptions;
use super::{ChainError, Elsewhere, ReservationDuty};

/// How long the recipients of a bid's sealed environment are kept before they are read again:
/// its client may seal it to more machines while it waits (`gpu-market bid seal`).
const SEALED_RELIST: Duration = Duration::from_secs(60);
/// The same while it is sealed to nobody in the first [`SEALING_SECS`] after its placement: its
/// client stores the copies in the seconds after placing it, well within the grace period (10 s
/// by default) every machine then leaves it. A bid still sealed to nobody after that (its client
/// never seals it, perhaps on purpose) is read no more often than a sealed one: a book of such
/// bids must not multiply every agent's requests.
const UNSEALED_RELIST: Duration = Duration::from_secs(2);
const SEALING_SECS: i64 = 60;
/// Where a `SealedEnv` account holds its bid, and its recipient (after the discriminator and
/// the market; the bid and its client).
const SEALED_ENV_BID_OFFSET: usize = 8 + 32;
const SEALED_ENV_RECIPIENT_OFFSET: usize = 8 + 32 * 3;

/// How long the `recipients` of a bid placed `age` seconds ago are kept before they are read
/// again: [`UNSEALED_RELIST`] while there are none in its first [`SEALING_SECS`], else
/// [`SEALED_RELIST`].
fn relist(recipients: &[Pubkey], age: i64) -> Duration {
    match recipients.is_empty() && age < SEALING_SECS {
        true => UNSEALED_RELIST,
        false => SEALED_RELIST,
    }
}

/// The recipients of a bid's sealed environment as read: when, for how long they are kept, and
/// the agent keys.
pub(super) type SealedRead = (Instant, Duration, Vec<Pubkey>);

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
    /// The generation of the feed's mirror that follows what changes after the view (`None`:
    /// none does, and the view is not kept).
    generation: Option<u64>,
}

/// The policy's view a look at the books kept for the next, and the generation of the feed's
/// mirror that follows what changes after it.
pub(super) type KeptView = (u64, MarketPlacement);

/// Every machine of a market and its running leases.
pub(super) type Listing = (Vec<(Pubkey, Machine)>, Vec<Lease>);

impl<'a> Policy<'a> {
    pub(super) fn new(market: &'a Market, now: i64, queue: &'a [BookLeaf]) -> Self {
        Policy {
            market,
            now,
            queue,
            view: None,
            generation: None,
        }
    }

    /// The market's machines, as far as this look at the books read them (none before).
    pub(super) fn machines(&self) -> &[(Pubkey, Machine)] {
        self.view.as_ref().map_or(&[], MarketPlacement::machines)
    }

    /// The queue book's entries, best first.
    pub(super) fn queue(&self) -> &'a [BookLeaf] {
        self.queue
    }
}

impl SolanaChain {
    /// Where the packing policy gives `bid`, which fits this machine now (`sealed`: which
    /// machines can open its environment); `None` for a spot bid (only its book's machine takes
    /// it) and when no machine fits it as listed (the listing behind this machine's own read):
    /// the fit rule of this machine then decides, after the grace periods of the machines that
    /// hold a sealed bid's environment.
    pub(super) async fn placement(
        &self,
        policy: &mut Policy<'_>,
        bid: &Bid,
        sealed: Sealed<'_>,
    ) -> Result<Option<Placement>, ChainError> {
        let here = self.machine();
        let view = self.policy_view(policy).await?;
        self.placements_asked.fetch_add(1, Ordering::Relaxed);
        let Some(p) = view.place(bid, sealed) else {
            return Ok(match sealed {
                Sealed::To(holders) if !holders.contains(&here) => {
                    Some(Placement::Elsewhere(Elsewhere {
                        machine: key(&here),
                        turn: (holders.len() as u32).max(1),
                    }))
                }
                _ => None,
            });
        };
        // This machine not listed (its own heartbeat is older than the silence window, as at a
        // start after a long stop): first after the policy's machine, as before turns.
        Ok(Some(match view.turn(bid, &p, &here, sealed).unwrap_or(1) {
            0 => Placement::Here(p.gpus),
            turn => Placement::Elsewhere(Elsewhere {
                machine: key(&p.machine),
                turn,
            }),
        }))
    }

    /// Where the packing policy gives each part of gang bid `bid`, in the gang's order (`None`
    /// unless every part has a machine now).
    pub(super) async fn gang_placement(
        &self,
        policy: &mut Policy<'_>,
        bid: &Bid,
        sealed: Sealed<'_>,
    ) -> Result<Option<Vec<Placed>>, ChainError> {
        let view = self.policy_view(policy).await?;
        self.placements_asked.fetch_add(1, Ordering::Relaxed);
        Ok(view.place_gang(bid, sealed))
    }

    /// The listed machines whose agent can open queue bid `bid`'s (at `key`) sealed environment
    /// (`placement::Sealed`): `None` for a bid without one; none while it is sealed to nobody.
    /// The recipients are read with one `getProgramAccounts` (their keys only) a
    /// [`SEALED_RELIST`] per bid ([`UNSEALED_RELIST`] while there are none in its first
    /// [`SEALING_SECS`]).
    pub(super) async fn sealed_holders(
        &self,
        policy: &mut Policy<'_>,
        key: &Pubkey,
        bid: &Bid,
    ) -> Result<Option<Vec<Pubkey>>, ChainError> {
        if bid.env_hash == [0; 32] {
            return Ok(None);
        }
        let age = policy.now.saturating_sub(bid.placed_at);
        let recipients = self.sealed_recipients(key, age).await?;
        if recipients.is_empty() {
            return Ok(Some(Vec::new()));
        }
        let (machines, _) = self.listing(policy).await?;
        Ok(Some(sealed_holders(machines, &recipients)))
    }

    /// The agent keys that bid `bid` (placed `age` seconds ago) has its environment sealed to,
    /// as read at most a [`relist`] ago.
    async fn sealed_recipients(&self, bid: &Pubkey, age: i64) -> Result<Vec<Pubkey>, ChainError> {
        let now = Instant::now();
        let fresh =
            |(at, relist, _): &(Instant, Duration, Vec<Pubkey>)| now.duration_since(*at) < *relist;
        if let Some(cached) = self.sealed_cache().get(bid).filter(|c| fresh(c)) {
            return Ok(cached.2.clone());
        }
        let filters = vec![
            RpcFilterType::Memcmp(Memcmp::new_raw_bytes(0, SealedEnv::DISCRIMINATOR.to_vec())),
            RpcFilterType::Memcmp(Memcmp::new_raw_bytes(
                SEALED_ENV_BID_OFFSET,
                bid.to_bytes().to_vec(),
            )),
        ];
        let (_, found) = self
            .program_accounts(filters, Some((SEALED_ENV_RECIPIENT_OFFSET, 32)))
            .await?;
        let recipients: Vec<Pubkey> = found
            .iter()
            .filter_map(|(_, d)| Some(Pubkey::new_from_array(d.as_slice().try_into().ok()?)))
            .collect();
        let relist = relist(&recipients, age);
        let mut cache = self.sealed_cache();
        cache.retain(|_, cached| fresh(cached));
        cache.insert(*bid, (now, relist, recipients.clone()));
        Ok(recipients)
    }

    fn sealed_cache(&self) -> std::sync::MutexGuard<'_, HashMap<Pubkey, SealedRead>> {
        self.sealed.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The policy's view of the market for this look at the books, made the first time: the
    /// view the last look kept, moved by what the feed notified since ([`Self::kept_view`]),
    /// else built from the market's listing (and kept from then on while the feed follows the
    /// market).
    async fn policy_view<'p>(
        &self,
        policy: &'p mut Policy<'_>,
    ) -> Result<&'p mut MarketPlacement, ChainError> {
        if policy.view.is_none() {
            let (market, now, queue) = (policy.market, policy.now, policy.queue);
            let view = match self.kept_view(market, now, queue).await? {
                Some(kept) => kept,
                None => {
                    let generation = self.mirror().and_then(Mirror::follow_changes);
                    let (machines, leases) = self.market_listing().await?;
                    let view = MarketPlacement::new(market, now, machines, leases, queue)
                        .map_err(|reason| ChainError::rejected("read", reason))?;
                    self.views_built.fetch_add(1, Ordering::Relaxed);
                    (generation, view)
                }
            };
            (policy.generation, policy.view) = (view.0, Some(view.1));
        }
        Ok(policy.view.as_mut().expect("set above"))
    }

    /// The view the last look at the books kept (`keep_view`), moved to `now` by the machines
    /// and leases the feed notified since ([`MarketPlacement::update`]); `None` where there is
    /// none, or the mirror may have missed a change since (the feed subscribed again, or
    /// dropped). A changed machine whose count of leases differs from the leases the view then
    /// holds for it has had one close (no notification says so): its leases are scanned again,
    /// as a listing does.
    async fn kept_view(
        &self,
        market: &Market,
        now: i64,
        queue: &[BookLeaf],
    ) -> Result<Option<(Option<u64>, MarketPlacement)>, ChainError> {
        let kept = self
            .kept
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some((generation, mut view)) = kept else {
            return Ok(None);
        };
        let filters = market_subscriptions(&self.market());
        let Some(changed) = self.mirror().and_then(|m| m.changes(generation, &filters)) else {
            return Ok(None);
        };
        let [machines, leases] = <[_; 2]>::try_from(changed.matched).unwrap_or_default();
        let mut changes = Changes {
            machines: machines
                .iter()
                .filter_map(|(k, d)| Some((*k, decode::<Machine>(d, "machine").ok()?)))
                .collect(),
            closed: changed.closed,
            leases: leases
                .iter()
                .filter_map(|(_, d)| decode::<Lease>(d, "lease").ok())
                .collect(),
            machine_leases: Vec::new(),
        };
        for (key, machine) in &changes.machines {
            if view.leases_held(key, &changes.leases) == machine.leases as usize {
                continue;
            }
            let found = self.scan(&lease_filters(key)).await?;
            let listed = found
                .iter()
                .filter_map(|(_, d)| decode::<Lease>(d, "lease").ok())
                .collect();
            changes.leases.retain(|l| l.machine != *key);
            changes.machine_leases.push((*key, listed));
        }
        view.update(market, now, changes, queue)
            .map_err(|reason| ChainError::rejected("read", reason))?;
        if view.built_at() == now {
            tracing::debug!(now, "the policy's view was built again from what it kept");
        }
        Ok(Some((Some(generation), view)))
    }

    /// Keeps the view of a look at the books that is over for the next one, where the feed's
    /// mirror follows what changes until then.
    pub(super) fn keep_view(&self, policy: Policy<'_>) {
        if let (Some(generation), Some(view)) = (policy.generation, policy.view) {
            *self.kept.lock().unwrap_or_else(PoisonError::into_inner) = Some((generation, view));
        }
    }

    /// The market's machines and leases as this look at the books sees them: those the
    /// policy's view holds ([`Self::policy_view`]).
    async fn listing<'p>(
        &self,
        policy: &'p mut Policy<'_>,
    ) -> Result<(&'p [(Pubkey, Machine)], &'p [Lease]), ChainError> {
        let view: &'p MarketPlacement = self.policy_view(policy).await?;
        Ok((view.machines(), view.leases()))
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
        let (slot, found) = self.program_accounts(filters.to_vec(), None).await?;
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
            if leaf.summary.is_gang() {
                match self.gang_duty(policy, leaf).await? {
                    GangDuty::Next => continue,
                    GangDuty::Done(duty) => return Ok(duty),
                }
            }
            let until = leaf.summary.runs_until(now);
            if offers.for_run(&leaf.bid, until).fits(&need) {
                return Ok(None);
            }
            let (machines, _) = self.listing(policy).await?;
            let holds = |m: &Machine| m.reservation.binds(now, grace);
            // Held by another machine: from when (this one may take it over only by starting
            // it earlier, which `reserve` checks).
            let held_from = machines
                .iter()
                .find(|(k, m)| *k != here && holds(m) && m.reservation.bid == leaf.bid)
                .map(|(_, m)| m.reservation.start);
            let bid: Bid = self.account(&leaf.bid, "bid").await?;
            // A sealed bid is reserved on a machine that can open its environment where one
            // can start it, else on any.
            let holders = self.sealed_holders(policy, &leaf.bid, &bid).await?;
            let (machines, leases) = self.listing(policy).await?;
            let free: Vec<(Pubkey, Machine)> = machines
                .iter()
                .filter(|(_, m)| {
                    m.status == MachineStatus::Active && alive(market, m, now) && !holds(m)
                })
                .cloned()
                .collect();
            let holding: Vec<(Pubkey, Machine)> = match &holders {
                Some(h) => free
                    .iter()
                    .filter(|(k, _)| h.contains(k))
                    .cloned()
                    .collect(),
                None => Vec::new(),
            };
            let soonest = earliest_start(market, &bid, now, &holding, leases)
                .or_else(|| earliest_start(market, &bid, now, &free, leases));
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

/// What a gang's entry in the queue means for this machine's reservation duty.
enum GangDuty {
    /// Nothing: the next entry may be this machine's to hold.
    Next,
    /// This duty (or none), and no later entry.
    Done(Option<ReservationDuty>),
}

impl SolanaChain {
    /// Gang bid `leaf` of the queue book `queue`, read once while it waits at the same place
    /// (gangs that cannot be reserved in time are walked past at every look, and a book of
    /// them must not cost a request each per look); bids that left the queue are forgotten.
    async fn waiting_gang(&self, queue: &[BookLeaf], leaf: &BookLeaf) -> Result<Bid, ChainError> {
        let cached = |s: &Self| {
            let mut known = s
                .waiting_gangs
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if known.len() > queue.len() {
                let waiting: std::collections::HashSet<&Pubkey> =
                    queue.iter().map(|l| &l.bid).collect();
                known.retain(|k, _| waiting.contains(k));
            }
            known
                .get(&leaf.bid)
                .filter(|(seq, _)| *seq == leaf.seq)
                .map(|(_, b)| b.clone())
        };
        if let Some(bid) = cached(self) {
            return Ok(bid);
        }
        let bid: Bid = self.account(&leaf.bid, "bid").await?;
        self.waiting_gangs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(leaf.bid, (leaf.seq, bid.clone()));
        Ok(bid)
    }

    /// This machine's part in the reservation of gang entry `leaf` (which could run here once
    /// the machine is empty; this machine holds nothing). Of the live machines no other bid's
    /// reservation holds, the gang's parts go to those that can start one soonest
    /// (`placement::gang_start`, every agent computing the same); the first of them sends
    /// `reserve_gang` for all when the gang cannot start now and holds no machines from an
    /// earlier or equal start. The others wait for it. Any other machine, and every machine
    /// where the gang's reservation holds from as early, goes on to the next entry (a gang
    /// holds no other bid back).
    async fn gang_duty(
        &self,
        policy: &mut Policy<'_>,
        leaf: &BookLeaf,
    ) -> Result<GangDuty, ChainError> {
        let (market, now) = (policy.market, policy.now);
        let here = self.machine();
        let grace = market.silence_window_secs();
        let bid = self.waiting_gang(policy.queue, leaf).await?;
        let (machines, leases) = self.listing(policy).await?;
        // Held from when: its parts share one start; a part of an earlier round its machine's
        // agent has not cleared yet starts later, or goes within a tick.
        let held_from = machines
            .iter()
            .filter(|(_, m)| m.reservation.bid == leaf.bid && m.reservation.binds(now, grace))
            .map(|(_, m)| m.reservation.start)
            .min();
        let open: Vec<(Pubkey, Machine)> = machines
            .iter()
            .filter(|(_, m)| {
                m.status == MachineStatus::Active
                    && alive(market, m, now)
                    && (!m.reservation.binds(now, grace) || m.reservation.bid == leaf.bid)
            })
            .cloned()
            .collect();
        let Some((start, parts)) = gang_start(market, &bid, now, &open, leases) else {
            return Ok(GangDuty::Next);
        };
        let earlier = held_from.is_none_or(|from| start < from);
        if !parts.contains(&here) || !earlier {
            return Ok(GangDuty::Next);
        }
        // Every part fits now: the allocation path starts it.
        let duty = (parts[0] == here && start > now).then(|| ReservationDuty::ReserveGang {
            bid: key(&leaf.bid),
            parts: parts.iter().map(key).collect(),
        });
        Ok(GangDuty::Done(duty))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bid sealed to nobody is read again every 2 s while its client may still be storing the
    /// copies (its first minute), then once a minute like any sealed bid: a book full of bids
    /// their clients never seal costs an agent one request a minute each, not thirty.
    #[test]
    fn a_bid_sealed_to_nobody_is_read_often_only_in_its_first_minute() {
        assert_eq!(relist(&[], 0), UNSEALED_RELIST);
        assert_eq!(relist(&[], SEALING_SECS - 1), UNSEALED_RELIST);
        assert_eq!(relist(&[], SEALING_SECS), SEALED_RELIST);
        assert_eq!(relist(&[Pubkey::new_unique()], 0), SEALED_RELIST);
    }
}
