//! The policy's view kept across looks at the books: what changed since the last look (the
//! machine and lease accounts a feed notified) moves only the machines it touches, each at the
//! cost of one machine's, instead of a view built again from every machine and lease of the
//! market (27 ms at 10,000 machines). The view is built afresh when what every machine's place
//! depends on moves: a machine comes, goes, or falls silent (or heartbeats again); the market's
//! parameters or regions change. At each [`RELEARN_SECS`] boundary of the chain's clock the
//! policy learns the market's workload again, over the machines' offers and leases as kept.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use gpu_market::state::{
    BidKind, BookLeaf, Freed, Lease, Machine, Market, MarketParams, RegionTable, GPU_CLASSES,
};
use gpu_market_core::fit::Offer;
use gpu_market_core::placement::{Demand, Seat, Tenant};
use solana_pubkey::Pubkey;

use super::{add_profile, alive, MarketPlacement};

/// How long the view keeps what it learned of the market's workload (the typical bids and
/// the packing plan, from the running leases and the queue): it learns it again at the first
/// look after each multiple of this many seconds of the chain's clock, the same boundaries for
/// every agent. A market's workload moves over hours (leases run for hours); what changes
/// between boundaries is each machine's free room and leases, which every look follows.
pub const RELEARN_SECS: i64 = 60;

/// Accounts of the market that changed since the view last saw it, as they are now.
#[derive(Debug, Default, Clone)]
pub struct Changes {
    /// Machines, a new one included.
    pub machines: Vec<(Pubkey, Machine)>,
    /// Machine accounts that closed.
    pub closed: Vec<Pubkey>,
    /// Leases, a new one included (one per bid and machine).
    pub leases: Vec<Lease>,
    /// Machines with all of their running leases (a scan of them): a lease the view holds for
    /// one of them that is not listed has closed.
    pub machine_leases: Vec<(Pubkey, Vec<Lease>)>,
}

/// What the view keeps to be updated in place.
pub(super) struct Kept {
    /// Every running lease listed, of any machine.
    pub(super) leases: Vec<Lease>,
    /// Each machine's leases, as places in `leases`.
    pub(super) on: HashMap<Pubkey, Vec<usize>>,
    /// Each alive machine's place among the view's machines.
    pub(super) seat_of: HashMap<Pubkey, usize>,
    /// Each alive machine's running leases as the policy sees them.
    pub(super) tenants: Vec<Vec<Tenant>>,
    /// The demands of `leases`, counted (the running part of the workload the policy learns).
    pub(super) running: HashMap<Demand, u32>,
    /// The [`RELEARN_SECS`] period the workload was learned in, and when the view was built.
    pub(super) epoch: i64,
    pub(super) built: i64,
    /// The clock and the market's reserve prices the offers were made at.
    pub(super) now: i64,
    pub(super) reserve: [Option<u64>; GPU_CLASSES],
    /// What every machine's offer reads of the market besides its reserve prices.
    pub(super) params: MarketParams,
    pub(super) regions: RegionTable,
}

/// `machine`'s offer to queue bids at `now`.
pub(super) fn queue_offer(
    market: &Market,
    now: i64,
    key: &Pubkey,
    machine: &Machine,
) -> Result<Offer, String> {
    machine
        .offer(market, BidKind::Queue, now, &Freed::default())
        .map_err(|e| format!("machine {key}'s offer: {e}"))
}

/// The market's reserve price of each class at `now` (`None` where it cannot be priced).
pub(super) fn reserve_prices(market: &Market, now: i64) -> [Option<u64>; GPU_CLASSES] {
    core::array::from_fn(|c| market.reserve_price(c as u8, now).ok())
}

/// The market's workload at `now` as the policy learns it: its running leases (`running`,
/// their demands counted) and the `queue` book's entries that have not expired.
pub(super) fn workload(
    running: &HashMap<Demand, u32>,
    queue: &[BookLeaf],
    now: i64,
) -> Vec<(Demand, u32)> {
    let mut counts = running.clone();
    for leaf in queue.iter().filter(|leaf| !leaf.summary.expired(now)) {
        *counts
            .entry(Demand::from(&leaf.summary.need()))
            .or_default() += 1;
    }
    counts.into_iter().collect()
}

/// A running lease's demand, as the policy learns the workload.
fn demand_of(lease: &Lease) -> Demand {
    Demand::running(lease.gpu_count, lease.gib_per_gpu, lease.host())
}

/// The running leases' demands of `leases`, counted.
pub(super) fn running_demands(leases: &[Lease]) -> HashMap<Demand, u32> {
    let mut running = HashMap::new();
    for l in leases {
        *running.entry(demand_of(l)).or_default() += 1;
    }
    running
}

/// The policy's seat for `machine`, offering `offer`, its leases `tenants`.
pub(super) fn seat<'a>(
    (key, machine): &(Pubkey, Machine),
    offer: &'a Offer,
    tenants: &'a [Tenant],
) -> Seat<'a> {
    Seat {
        id: key.to_bytes(),
        electricity_cost_per_kwh: machine.electricity_cost_per_kwh,
        offer,
        leases: tenants,
    }
}

/// The running leases at places `on` of `leases`, as the policy sees them.
pub(super) fn tenants_of(leases: &[Lease], on: Option<&Vec<usize>>) -> Vec<Tenant> {
    on.into_iter()
        .flatten()
        .map(|&i| {
            let l = &leases[i];
            Tenant {
                gpus: l.gpus().iter().fold(0u16, |m, &g| m | 1 << g),
                gib_per_gpu: l.gib_per_gpu,
                profile: l.profile(),
            }
        })
        .collect()
}

/// `lease` no longer runs: its demand leaves the count.
fn uncount(running: &mut HashMap<Demand, u32>, lease: &Lease) {
    let demand = demand_of(lease);
    if let Some(n) = running.get_mut(&demand) {
        *n -= 1;
        if *n == 0 {
            running.remove(&demand);
        }
    }
}

impl Kept {
    /// Keeps `lease` as it is now (in place of the one of the same bid on its machine, if
    /// any), its image's profile moved with it; returns its machine.
    fn put_lease(&mut self, lease: Lease, images: &mut BTreeMap<[u8; 32], (u64, u64)>) -> Pubkey {
        let machine = lease.machine;
        add_profile(images, &lease, 1);
        *self.running.entry(demand_of(&lease)).or_default() += 1;
        let on = self.on.entry(machine).or_default();
        match on.iter().find(|&&i| self.leases[i].bid == lease.bid) {
            Some(&i) => {
                add_profile(images, &self.leases[i], -1);
                uncount(&mut self.running, &self.leases[i]);
                self.leases[i] = lease;
            }
            None => {
                on.push(self.leases.len());
                self.leases.push(lease);
            }
        }
        machine
    }

    /// Drops the lease at place `i` (the last one takes its place).
    fn drop_lease(&mut self, i: usize, images: &mut BTreeMap<[u8; 32], (u64, u64)>) {
        let gone = self.leases.swap_remove(i);
        add_profile(images, &gone, -1);
        uncount(&mut self.running, &gone);
        if let Some(on) = self.on.get_mut(&gone.machine) {
            on.retain(|&j| j != i);
        }
        // The lease that was last is at `i` now.
        if let Some(moved) = self.leases.get(i) {
            let last = self.leases.len();
            if let Some(on) = self.on.get_mut(&moved.machine) {
                on.iter_mut().filter(|j| **j == last).for_each(|j| *j = i);
            }
        }
    }

    /// `machine`'s running leases are `leases`: any other kept for it has closed.
    fn set_leases(
        &mut self,
        machine: Pubkey,
        leases: Vec<Lease>,
        images: &mut BTreeMap<[u8; 32], (u64, u64)>,
    ) {
        let listed: BTreeSet<Pubkey> = leases.iter().map(|l| l.bid).collect();
        let mut closed: Vec<usize> = self
            .on
            .get(&machine)
            .into_iter()
            .flatten()
            .copied()
            .filter(|&i| !listed.contains(&self.leases[i].bid))
            .collect();
        // Highest place first, so that no place still to drop moves.
        closed.sort_unstable_by(|a, b| b.cmp(a));
        for i in closed {
            self.drop_lease(i, images);
        }
        for l in leases {
            self.put_lease(l, images);
        }
    }
}

impl MarketPlacement {
    /// The view at `now`, from the view as it was and the accounts that changed since
    /// (`changes`; `queue`: the queue book's entries now, what the workload is learned from
    /// when it is learned again). Each changed machine, and each machine whose leases changed,
    /// gets its offer and its place in the policy again; every other machine's offer is only
    /// priced again (the clock and the market's demand move the reserve price). The view is
    /// built afresh (as [`MarketPlacement::new`], from what it holds) where a machine came,
    /// closed or went silent, or one silent before heartbeats again; where the market's
    /// parameters or regions changed; and where a machine's new state takes it out of the
    /// policy's description (e.g. its GPUs changed model). At each [`RELEARN_SECS`] boundary
    /// the policy learns the workload again from the leases it holds and `queue`.
    /// Afterwards it places bids as a view built afresh from the same accounts would, but for
    /// the workload, which it learned at the last boundary or build ([`Self::built_at`]).
    pub fn update(
        &mut self,
        market: &Market,
        now: i64,
        changes: Changes,
        queue: &[BookLeaf],
    ) -> Result<(), String> {
        let seats = self.keys.len();
        let kept = &mut self.kept;
        let relearn = now.div_euclid(RELEARN_SECS) != kept.epoch;
        let listed = |k: &Pubkey| {
            kept.seat_of.contains_key(k) || self.machines[seats..].iter().any(|(m, _)| m == k)
        };
        let mut rebuild = changes.closed.iter().any(listed)
            || market.params != kept.params
            || market.regions != kept.regions;
        let mut dirty: BTreeSet<Pubkey> = BTreeSet::new();
        for (key, machine) in changes.machines {
            if let Some(&i) = kept.seat_of.get(&key) {
                self.machines[i].1 = machine;
                dirty.insert(key);
            } else if let Some(r) = self.machines[seats..].iter_mut().find(|(k, _)| *k == key) {
                r.1 = machine;
            } else {
                self.machines.push((key, machine));
                rebuild = true;
            }
        }
        for lease in changes.leases {
            dirty.insert(kept.put_lease(lease, &mut self.images));
        }
        for (machine, leases) in changes.machine_leases {
            kept.set_leases(machine, leases, &mut self.images);
            dirty.insert(machine);
        }
        // A machine that fell silent leaves the policy, one that heartbeats again comes back.
        rebuild |= self
            .machines
            .iter()
            .enumerate()
            .any(|(i, (_, m))| alive(market, m, now) != (i < seats));
        let reserve = reserve_prices(market, now);
        if !rebuild && (reserve != kept.reserve || now != kept.now) {
            match reserve.iter().copied().collect::<Option<Vec<u64>>>() {
                Some(prices) => {
                    let prices: [u64; GPU_CLASSES] = core::array::from_fn(|c| prices[c]);
                    self.offers.iter_mut().for_each(|o| o.reprice(now, &prices));
                }
                None => rebuild = true,
            }
        }
        if !rebuild {
            rebuild = !self.update_seats(market, now, &dirty)?;
        }
        if relearn && !rebuild {
            // The machines as they are, the workload learned again from the market now.
            let seats: Vec<Seat> = (0..self.keys.len())
                .map(|i| seat(&self.machines[i], &self.offers[i], &self.kept.tenants[i]))
                .collect();
            self.placer
                .relearn(&seats, &workload(&self.kept.running, queue, now));
            (self.kept.epoch, self.kept.built) = (now.div_euclid(RELEARN_SECS), now);
        }
        if rebuild {
            let mut machines = std::mem::take(&mut self.machines);
            machines.retain(|(k, _)| !changes.closed.contains(k));
            machines.sort_unstable_by_key(|(k, _)| *k);
            let leases = std::mem::take(&mut self.kept.leases);
            *self = MarketPlacement::new(market, now, machines, leases, queue)?;
        }
        self.kept.now = now;
        self.kept.reserve = reserve;
        Ok(())
    }

    /// Each alive machine of `dirty` gets its offer and its leases again, and its place in the
    /// policy; `false` where the policy cannot take one in place. Also when the workload is
    /// learned again right after: the learning sets each GPU's sharing pods, not what the
    /// machine has free. (A view whose machine changed at the turn of a minute kept its
    /// GPUs free in the policy until its next change, and sent bids to GPUs taken since: the
    /// agents' packing test failed so in CI, each time at a minute's turn.)
    fn update_seats(
        &mut self,
        market: &Market,
        now: i64,
        dirty: &BTreeSet<Pubkey>,
    ) -> Result<bool, String> {
        for key in dirty {
            let Some(&i) = self.kept.seat_of.get(key) else {
                continue;
            };
            self.offers[i] = queue_offer(market, now, key, &self.machines[i].1)?;
            self.kept.tenants[i] = tenants_of(&self.kept.leases, self.kept.on.get(key));
            let seat = seat(&self.machines[i], &self.offers[i], &self.kept.tenants[i]);
            if !self.placer.update(i, &seat) {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

impl MarketPlacement {
    /// Every machine of the market the view holds (those it places on, then those not
    /// [`alive`]), as they are at its last update.
    pub fn machines(&self) -> &[(Pubkey, Machine)] {
        &self.machines
    }

    /// Every running lease of the market the view holds.
    pub fn leases(&self) -> &[Lease] {
        &self.kept.leases
    }

    /// When the view was last built afresh or learned the workload again (the clock then).
    pub fn built_at(&self) -> i64 {
        self.kept.built
    }

    /// How many running leases the view would hold for `machine` once `leases` (changed ones,
    /// new ones among them) are put in: where the machine's own count (`Machine::leases`)
    /// differs, one of the leases held has closed, which no notification says, and the
    /// machine's leases are to be listed again ([`Changes::machine_leases`]).
    pub fn leases_held(&self, machine: &Pubkey, leases: &[Lease]) -> usize {
        let held: &[usize] = self.kept.on.get(machine).map_or(&[], Vec::as_slice);
        let new = leases
            .iter()
            .filter(|l| l.machine == *machine)
            .filter(|l| !held.iter().any(|&i| self.kept.leases[i].bid == l.bid))
            .count();
        held.len() + new
    }
}

#[cfg(test)]
mod tests {
    use gpu_market::state::{Bid, LeaseRules, MarketParams};

    use super::super::tests::{bid, machine, NOW};
    use super::super::Sealed;
    use super::*;

    /// Machine `m` with `bid` started on its GPU 0 at `now`, and the lease.
    fn started(market: &Market, (key, m): &(Pubkey, Machine), bid: &Bid) -> (Machine, Lease) {
        let mut m = m.clone();
        m.take(&[0], bid.gib_per_gpu, bid.host(), false, |i| {
            bid.terms_of(i)
        })
        .unwrap();
        m.leases += 1;
        let lease = Lease::of_bid(
            (Pubkey::new_unique(), *key, Pubkey::new_unique()),
            bid,
            (&[0], bid.host()),
            (NOW, NOW + 3_600),
            LeaseRules::of(&market.params),
            255,
        );
        (m, lease)
    }

    /// A view kept from `NOW` on and moved by each change places a bid where a view built
    /// afresh from the same accounts does: a lease starting on the cheaper machine A sends the
    /// next bid to B, a proof of it changes nothing, its end brings the bid back to A; each in
    /// place (the view not built again), until B falls silent (it has no turn from then on;
    /// the view is built again) and heartbeats again (its turn is back).
    #[test]
    fn a_kept_view_places_as_one_built_afresh_from_the_same_accounts() {
        let market = Market::opening(MarketParams::recommended(60, 250, 3_600));
        let (a, b) = (Pubkey::new_unique(), Pubkey::new_unique());
        let mut machines = vec![(a, machine(1, NOW)), (b, machine(2, NOW - 170))];
        let mut leases: Vec<Lease> = Vec::new();
        let mut view =
            MarketPlacement::new(&market, NOW, machines.clone(), leases.clone(), &[]).unwrap();
        let mut wide = bid();
        wide.gib_per_gpu = 60;
        let (one, placed_on) = (bid(), |view: &mut MarketPlacement| {
            view.place(&bid(), Sealed::No).map(|p| p.machine)
        });
        let same_as_afresh = |view: &mut MarketPlacement, now, machines: &[_], leases: &[_]| {
            let mut afresh =
                MarketPlacement::new(&market, now, machines.to_vec(), leases.to_vec(), &[])
                    .unwrap();
            let (kept, fresh) = (view.place(&one, Sealed::No), afresh.place(&one, Sealed::No));
            assert_eq!(kept, fresh);
            let turns = |v: &mut MarketPlacement, p: &Option<crate::placement::Placed>| {
                p.as_ref().map(|p| v.turn(&one, p, &b, Sealed::No))
            };
            assert_eq!(turns(view, &kept), turns(&mut afresh, &fresh));
            kept.map(|p| p.machine)
        };
        assert_eq!(placed_on(&mut view), Some(a));

        // 60 of A's 80 GiB leased: the 40 GiB bid goes to B.
        let (on_a, lease) = started(&market, &machines[0], &wide);
        machines[0].1 = on_a.clone();
        leases.push(lease.clone());
        let changes = Changes {
            machines: vec![(a, on_a.clone())],
            leases: vec![lease.clone()],
            ..Changes::default()
        };
        assert_eq!(view.leases_held(&a, &changes.leases), 1);
        view.update(&market, NOW + 1, changes, &[]).unwrap();
        counted_as_held(&view);
        assert_eq!(
            same_as_afresh(&mut view, NOW + 1, &machines, &leases),
            Some(b)
        );
        assert_eq!(view.built_at(), NOW, "in place");

        // Its proof: a measured profile, and nothing else moves.
        let mut proven = lease.clone();
        (proven.proof_hash, proven.utilisation_bps) = ([7; 32], 4_000);
        leases[0] = proven.clone();
        let changes = Changes {
            leases: vec![proven.clone()],
            ..Changes::default()
        };
        assert_eq!(view.leases_held(&a, &changes.leases), 1, "the same lease");
        view.update(&market, NOW + 2, changes, &[]).unwrap();
        counted_as_held(&view);
        assert_eq!(
            same_as_afresh(&mut view, NOW + 2, &machines, &leases),
            Some(b)
        );
        assert_eq!(
            view.profile_of(&lease.image_digest).map(|p| p.sm_util_bps),
            Some(4_000)
        );
        assert_eq!(view.built_at(), NOW, "in place");

        // The lease ends: A's account counts none, and its leases listed again are none.
        machines[0].1 = machine(1, NOW);
        leases.clear();
        let changes = Changes {
            machines: vec![(a, machines[0].1.clone())],
            machine_leases: vec![(a, Vec::new())],
            ..Changes::default()
        };
        view.update(&market, NOW + 3, changes, &[]).unwrap();
        counted_as_held(&view);
        assert!(view.kept.running.is_empty(), "no demand is left at zero");
        assert_eq!(
            same_as_afresh(&mut view, NOW + 3, &machines, &leases),
            Some(a)
        );
        assert_eq!(view.profile_of(&lease.image_digest), None);
        assert_eq!(view.built_at(), NOW, "in place");

        // B falls silent: A's heartbeat alone comes, and B has no turn.
        machines[0].1.last_heartbeat = NOW + 11;
        let changes = Changes {
            machines: vec![(a, machines[0].1.clone())],
            ..Changes::default()
        };
        view.update(&market, NOW + 11, changes, &[]).unwrap();
        assert_eq!(
            same_as_afresh(&mut view, NOW + 11, &machines, &leases),
            Some(a)
        );
        let placed = view.place(&one, Sealed::No).unwrap();
        assert_eq!(view.turn(&one, &placed, &b, Sealed::No), None);
        assert_eq!(view.built_at(), NOW + 11, "built again without B");

        // B heartbeats again: its turn is back.
        machines[1].1.last_heartbeat = NOW + 12;
        let changes = Changes {
            machines: vec![(b, machines[1].1.clone())],
            ..Changes::default()
        };
        view.update(&market, NOW + 12, changes, &[]).unwrap();
        assert_eq!(
            same_as_afresh(&mut view, NOW + 12, &machines, &leases),
            Some(a)
        );
        let placed = view.place(&one, Sealed::No).unwrap();
        assert_eq!(view.turn(&one, &placed, &b, Sealed::No), Some(1));
        assert_eq!(view.built_at(), NOW + 12, "built again with B");

        // A lease starts on A again; at the next minute of the chain's clock the workload is
        // learned again, from the leases and the queue then, as a view built afresh learns it.
        let (on_a, lease) = started(&market, &machines[0], &wide);
        machines[0].1 = on_a.clone();
        leases.push(lease.clone());
        let changes = Changes {
            machines: vec![(a, on_a)],
            leases: vec![lease],
            ..Changes::default()
        };
        view.update(&market, NOW + 13, changes, &[]).unwrap();
        counted_as_held(&view);
        let queue: Vec<BookLeaf> = [bid(), wide.clone(), bid()]
            .iter()
            .enumerate()
            .map(|(i, b)| BookLeaf {
                bid: Pubkey::new_unique(),
                book_key: 0,
                seq: i as u64,
                summary: b.summary(0),
            })
            .collect();
        let later = NOW + RELEARN_SECS;
        view.update(&market, later, Changes::default(), &queue)
            .unwrap();
        assert_eq!(view.built_at(), later);
        let mut afresh =
            MarketPlacement::new(&market, later, machines.clone(), leases.clone(), &queue).unwrap();
        assert_eq!(afresh.built_at(), later);
        let learned = |v: &MarketPlacement| {
            let mut w = workload(&v.kept.running, &queue, later);
            w.sort_unstable_by_key(|(d, n)| {
                let h = d.host;
                let shape = (d.gpu_count, d.gib_per_gpu, d.accepted_classes);
                (shape, h.cpu_milli, h.memory_mib, *n)
            });
            w
        };
        assert_eq!(learned(&view), learned(&afresh));
        assert_eq!(learned(&view).iter().map(|(_, n)| n).sum::<u32>(), 4);
        assert_eq!(
            view.place(&wide, Sealed::No),
            afresh.place(&wide, Sealed::No)
        );
    }

    /// A machine's change that arrives as the chain's clock turns a minute, when the view learns
    /// the workload again, reaches the policy as any other. The learning sets each GPU's
    /// sharing pods, not what a machine has free, and the view did not give the policy the
    /// changed machine then: B's GPU stayed empty in the policy, and a bid that completes it
    /// went to A (idle, cheaper), where a view built afresh sends it to B.
    #[test]
    fn a_change_as_the_workload_is_learned_again_reaches_the_policy() {
        let market = Market::opening(MarketParams::recommended(60, 250, 3_600));
        let (a, b) = (Pubkey::new_unique(), Pubkey::new_unique());
        let mut machines = vec![(a, machine(1, NOW)), (b, machine(2, NOW))];
        let mut view =
            MarketPlacement::new(&market, NOW, machines.clone(), Vec::new(), &[]).unwrap();
        let mut one = bid();
        one.gib_per_gpu = 20;
        assert_eq!(
            view.place(&one, Sealed::No).map(|p| p.machine),
            Some(a),
            "A is cheaper"
        );
        // 60 of B's 80 GiB leased, seen as the next minute begins: 20 GiB completes B's GPU.
        let mut wide = bid();
        wide.gib_per_gpu = 60;
        let (on_b, lease) = started(&market, &machines[1], &wide);
        machines[1].1 = on_b.clone();
        let turn = (NOW.div_euclid(RELEARN_SECS) + 1) * RELEARN_SECS;
        let changes = Changes {
            machines: vec![(b, on_b)],
            leases: vec![lease.clone()],
            ..Changes::default()
        };
        view.update(&market, turn, changes, &[]).unwrap();
        assert_eq!(view.built_at(), turn, "learned again, in place");
        let mut afresh = MarketPlacement::new(&market, turn, machines, vec![lease], &[]).unwrap();
        assert_eq!(afresh.place(&one, Sealed::No).map(|p| p.machine), Some(b));
        assert_eq!(view.place(&one, Sealed::No), afresh.place(&one, Sealed::No));
    }

    /// The running leases' demands the view counts are those of the leases it holds.
    fn counted_as_held(view: &MarketPlacement) {
        assert_eq!(view.kept.running, running_demands(&view.kept.leases));
    }
}
