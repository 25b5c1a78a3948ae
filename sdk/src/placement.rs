//! The market's machine choice from its accounts: every machine of a market, their running
//! leases and the queue book's open bids, handed to the packing policy of
//! `gpu_market_core::placement` ([`Placer`]). The host agent asks it which machine should take
//! each bid it could take; `gpu-market bid explain` tells a client which machine that is. Both
//! read the same accounts, so they give the same answer.
//!
//! What the co-location model knows comes from the leases too: each lease's last proven SM
//! utilisation is its profile as a neighbour, and a bid's profile is the mean over the measured
//! leases running its image.

use std::collections::{BTreeMap, HashMap, HashSet};

use gpu_market::instructions::PlaceBidArgs;
use gpu_market::state::{Bid, BidKind, BookLeaf, Freed, Lease, Machine, MachineStatus, Market};
use gpu_market_core::colocate::Profile;
use gpu_market_core::fit::{Offer, Unfit};
use gpu_market_core::placement::{Affinity, Placer, Seat, Tenant};
use solana_pubkey::Pubkey;

mod update;

use update::{queue_offer, reserve_prices, running_demands, seat, tenants_of, workload, Kept};
pub use update::{Changes, RELEARN_SECS};

/// A market's machines as the packing policy sees them at one moment, kept current from the
/// accounts that change ([`MarketPlacement::update`]).
pub struct MarketPlacement {
    /// The machines the policy places on (alive), in listing order.
    keys: Vec<Pubkey>,
    /// Every machine listed: those of `keys` first, in their order, then the others (not
    /// [`alive`]: they come back with a heartbeat).
    machines: Vec<(Pubkey, Machine)>,
    /// Each machine's offer to queue bids.
    offers: Vec<Offer>,
    placer: Placer,
    /// Each image some measured lease runs: the sum of their SM utilisations, and how many.
    images: BTreeMap<[u8; 32], (u64, u64)>,
    /// What [`MarketPlacement::update`] changes in place.
    kept: Kept,
}

/// Each image's measured leases' SM utilisation, summed, and their count.
fn image_sums(leases: &[Lease]) -> BTreeMap<[u8; 32], (u64, u64)> {
    let mut sums = BTreeMap::new();
    for l in leases {
        add_profile(&mut sums, l, 1);
    }
    sums
}

/// Counts lease `l`'s profile in `sums` (`sign` 1) or takes it out again (-1).
fn add_profile(sums: &mut BTreeMap<[u8; 32], (u64, u64)>, l: &Lease, sign: i8) {
    let Some(p) = l.profile() else { return };
    let (sum, n) = sums.entry(l.image_digest).or_default();
    match sign {
        1 => (*sum, *n) = (*sum + p.sm_util_bps as u64, *n + 1),
        _ => {
            (*sum, *n) = (
                sum.saturating_sub(p.sm_util_bps as u64),
                n.saturating_sub(1),
            )
        }
    }
}

/// A queue bid's witness (`place_bid`'s `machine`): the first active machine of `machines` the
/// bid fits once that machine's leases are gone, by the rule the program applies at `now`. Where
/// none does, the reason it came nearest to running for (the latest stage of the fit rule any
/// machine reached); `None` when the market has no active machine at all.
pub fn witness(
    market: &Market,
    now: i64,
    machines: &[(Pubkey, Machine)],
    args: &PlaceBidArgs,
) -> Result<Pubkey, Option<Unfit>> {
    let (fit, nearest) = could_run(market, now, machines, args);
    fit.first().copied().ok_or(nearest)
}

/// Every active machine of `machines` the bid fits once that machine's leases are gone (what
/// [`witness`] takes the first of: a gang bid needs as many as it has parts), and the nearest
/// reason a machine did not.
pub fn could_run(
    market: &Market,
    now: i64,
    machines: &[(Pubkey, Machine)],
    args: &PlaceBidArgs,
) -> (Vec<Pubkey>, Option<Unfit>) {
    let settings = args.overclock_per_gpu();
    let need = args.need(&settings);
    let (mut fit, mut nearest) = (Vec::new(), None);
    for (key, machine) in machines {
        if machine.status != MachineStatus::Active {
            continue;
        }
        let Ok(offer) = machine.offer(market, args.kind, now, &Freed::all()) else {
            continue;
        };
        match offer.fit(&need) {
            Ok(_) => fit.push(*key),
            Err(e) => nearest = nearest.max(Some(e)),
        }
    }
    (fit, nearest)
}

/// How long a heartbeat keeps a machine in the packing policy: the market's silence window
/// (`silence_intervals` billing intervals, after which a lease's client may reclaim its escrow).
/// The agent heartbeats at least every two thirds of it (a round of proofs counts as one).
pub fn alive_secs(market: &Market) -> i64 {
    market.silence_window_secs()
}

/// Whether `machine`'s agent has shown life at `now`: its last heartbeat (or its registration)
/// is at most [`alive_secs`] old.
pub fn alive(market: &Market, machine: &Machine, now: i64) -> bool {
    now.saturating_sub(machine.last_heartbeat) <= alive_secs(market)
}

/// Which machines can open a bid's environment. A bid with a sealed environment opens only on the
/// machines whose agent key it was sealed to (`seal_env`): the ones its client chose (`bid place
/// --seal-to`), or every machine that fitted it when it was placed (not one registered since).
/// The policy gives such a bid to those machines first; another that takes it cannot open its
/// environment, waits for a copy, and refuses the lease (its client refunded, the bid never
/// run). The others still get their turns after them: `allocate` lets no machine pass over a
/// better bid that fits it, so a bid that no holder takes must leave the book through one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sealed<'a> {
    /// No sealed environment: any machine opens it.
    No,
    /// Sealed to the agents of these machines ([`sealed_holders`]); none while its client has
    /// sealed no copy yet (`bid place --env` seals right after placing).
    To(&'a [Pubkey]),
}

/// The machines of `machines` whose agent holds a copy of a bid's sealed environment: whose
/// agent key is one of `recipients` (the `recipient` of each of the bid's `SealedEnv`
/// accounts).
pub fn sealed_holders(machines: &[(Pubkey, Machine)], recipients: &[Pubkey]) -> Vec<Pubkey> {
    machines
        .iter()
        .filter(|(_, m)| recipients.contains(&m.agent))
        .map(|(k, _)| *k)
        .collect()
}

/// Where the policy gives a bid: the machine, and the GPUs it takes there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    pub machine: Pubkey,
    pub gpus: Vec<u8>,
}

impl MarketPlacement {
    /// The policy over `machines` of `market` at `now` (those [`alive`] then: no bid waits a
    /// grace period for a machine whose agent is gone), with their running `leases`; it learns
    /// the market's workload from those leases and `queue` (the queue book's entries; the
    /// expired ones are left out). A machine whose offer cannot be priced is an error.
    pub fn new(
        market: &Market,
        now: i64,
        machines: Vec<(Pubkey, Machine)>,
        leases: Vec<Lease>,
        queue: &[BookLeaf],
    ) -> Result<Self, String> {
        // In place: a machine account is 1.5 KB, and moving 10,000 of them took 3 ms.
        let mut machines = machines;
        if machines.iter().any(|(_, m)| !alive(market, m, now)) {
            let (mut seats, resting): (Vec<_>, Vec<_>) = std::mem::take(&mut machines)
                .into_iter()
                .partition(|(_, m)| alive(market, m, now));
            seats.extend(resting);
            machines = seats;
        }
        let keys: Vec<Pubkey> = machines
            .iter()
            .take_while(|(_, m)| alive(market, m, now))
            .map(|(k, _)| *k)
            .collect();
        // Each lease finds its machine by address in one lookup: a scan of the machines per
        // lease took 190 ms of 200 at 10,000 machines and 46,000 leases.
        let seat_of: HashMap<Pubkey, usize> =
            keys.iter().enumerate().map(|(i, k)| (*k, i)).collect();
        let mut on: HashMap<Pubkey, Vec<usize>> = HashMap::with_capacity(keys.len());
        for (i, l) in leases.iter().enumerate() {
            on.entry(l.machine).or_default().push(i);
        }
        let tenants: Vec<Vec<Tenant>> = keys
            .iter()
            .map(|k| tenants_of(&leases, on.get(k)))
            .collect();
        let offers: Vec<Offer> = machines[..keys.len()]
            .iter()
            .map(|(k, m)| queue_offer(market, now, k, m))
            .collect::<Result<_, _>>()?;
        let seats: Vec<Seat> = (0..keys.len())
            .map(|i| seat(&machines[i], &offers[i], &tenants[i]))
            .collect();
        let running = running_demands(&leases);
        let placer = Placer::new(&seats, &workload(&running, queue, now));
        Ok(MarketPlacement {
            keys,
            machines,
            offers,
            placer,
            images: image_sums(&leases),
            kept: Kept {
                leases,
                on,
                seat_of,
                tenants,
                running,
                epoch: now.div_euclid(RELEARN_SECS),
                built: now,
                now,
                reserve: reserve_prices(market, now),
                params: market.params,
                regions: market.regions,
            },
        })
    }

    /// Where the policy gives queue bid `bid`: the machine whose fit rule accepts it and where
    /// it fragments the market least, a place whose co-tenants get along with it (as the
    /// co-location model predicts from their profiles and its image's) before any other (ties:
    /// a machine caching its image, the cheaper electricity, the lowest address), and the GPUs
    /// there: for a `sealed` bid, among the machines that can open its environment where one
    /// fits, else among all; `None` when no machine's fit rule accepts it, and for a spot bid,
    /// which waits in its machine's own book for that machine.
    pub fn place(&mut self, bid: &Bid, sealed: Sealed) -> Option<Placed> {
        if let Sealed::To(holders) = sealed {
            let offers = self.offers_within(holders);
            if let Some(placed) = self.place_among(bid, &offers) {
                return Some(placed);
            }
        }
        // Out of `self` while it chooses (no copy: 10,000 machines' offers are most of the view).
        let offers = std::mem::take(&mut self.offers);
        let placed = self.place_among(bid, &offers);
        self.offers = offers;
        placed
    }

    /// The view's offers with every machine but `holders` closed.
    fn offers_within(&self, holders: &[Pubkey]) -> Vec<Offer> {
        let holders: HashSet<&Pubkey> = holders.iter().collect();
        self.keys
            .iter()
            .zip(&self.offers)
            .map(|(k, o)| match holders.contains(k) {
                true => o.clone(),
                false => o.clone().closed(),
            })
            .collect()
    }

    /// Where the policy gives each part of gang bid `bid`: each part as
    /// [`MarketPlacement::place`] places a bid (a `sealed` gang among the machines that can open
    /// its environment where every part fits there), on a machine no earlier part took; `None`
    /// unless every part has a machine now. The parts come in the order of their machines'
    /// addresses, and the first part's machine sends `allocate_gang`.
    pub fn place_gang(&mut self, bid: &Bid, sealed: Sealed) -> Option<Vec<Placed>> {
        let within = match sealed {
            Sealed::To(holders) => Some(self.offers_within(holders)),
            Sealed::No => None,
        };
        let mut parts = within
            .and_then(|within| self.place_parts(bid, within))
            .or_else(|| self.place_parts(bid, self.offers.clone()))?;
        // The parts in their machines' order: agents whose views learned the workload at
        // different times can rank the same machines differently, and each waited for the
        // other's agent to send `allocate_gang` (7 s past a gang's reservation, in the agents'
        // gang test); on the same machines they now name the same first part.
        parts.sort_by_key(|p| p.machine);
        Some(parts)
    }

    /// Each part of gang bid `bid` among the machines behind `offers`, on a machine no earlier
    /// part took.
    fn place_parts(&mut self, bid: &Bid, mut offers: Vec<Offer>) -> Option<Vec<Placed>> {
        let mut parts = Vec::with_capacity(bid.parts() as usize);
        for _ in 0..bid.parts() {
            let placed = self.place_among(bid, &offers)?;
            let taken = self.keys.iter().position(|k| *k == placed.machine)?;
            offers[taken] = offers[taken].clone().closed();
            parts.push(placed);
        }
        Some(parts)
    }

    /// [`MarketPlacement::place`] among the machines behind `offers` (the view's, some closed).
    fn place_among(&mut self, bid: &Bid, offers: &[Offer]) -> Option<Placed> {
        if bid.kind != BidKind::Queue {
            return None;
        }
        let overclock = bid.overclock_per_gpu();
        let need = bid.need(&overclock);
        let caching = self.caching(&bid.image_digest);
        let affinity = Affinity {
            caching: &caching,
            profile: self.profile_of(&bid.image_digest),
        };
        let chosen = self.placer.choose(&need, offers, affinity)?;
        Some(Placed {
            machine: self.keys[chosen.machine],
            gpus: chosen.gpus,
        })
    }

    /// The machines (by their place in the policy) that cache `image`.
    fn caching(&self, image: &[u8; 32]) -> Vec<usize> {
        self.machines[..self.keys.len()]
            .iter()
            .enumerate()
            .filter(|(_, (_, m))| m.cached_images[..m.cached_image_count as usize].contains(image))
            .map(|(i, _)| i)
            .collect()
    }

    /// How many request shapes the policy holds an index of (at most
    /// `gpu_market_core::placement::MAX_SHAPE_INDEXES`).
    pub fn shapes_indexed(&self) -> usize {
        self.placer.shapes_indexed()
    }

    /// When `machine` may take queue bid `bid`, which [`MarketPlacement::place`] gave `placed`:
    /// after this many grace periods (0: its own now). A machine's turn is its place among the
    /// other machines whose fit rule accepts the bid, in the policy's tie-break order
    /// (`Placer::turn`); for a `sealed` bid, the machines that can open its environment take
    /// their turns first, and each other one its turn after as many grace periods as there are
    /// of them (at least one: while none has a copy, its client is still storing them). `None`:
    /// the machine is not listed (not alive) or does not fit.
    pub fn turn(
        &mut self,
        bid: &Bid,
        placed: &Placed,
        machine: &Pubkey,
        sealed: Sealed,
    ) -> Option<u32> {
        let overclock = bid.overclock_per_gpu();
        let need = bid.need(&overclock);
        let seat = |k: &Pubkey| self.keys.iter().position(|key| key == k);
        let (chosen, at) = (seat(&placed.machine)?, seat(machine)?);
        let holders = match sealed {
            Sealed::To(holders) => holders,
            Sealed::No if at == chosen => return Some(0),
            Sealed::No => return self.placer.turn(&need, &self.offers, chosen, at),
        };
        if holders.contains(machine) {
            return match at == chosen {
                true => Some(0),
                false => self
                    .placer
                    .turn(&need, &self.offers_within(holders), chosen, at),
            };
        }
        // After every holder's turn (one grace period while there is none: its client is
        // storing the copies), in the policy's order over all machines.
        let after = (holders.len() as u32).max(1);
        let first = self.place(bid, Sealed::No)?.machine;
        let first = self.keys.iter().position(|k| *k == first)?;
        let own = match first == at {
            true => 0,
            false => self.placer.turn(&need, &self.offers, first, at)?,
        };
        Some(after + own)
    }

    /// The profile of `image`, where a measured lease of the market runs it.
    pub fn profile_of(&self, image: &[u8; 32]) -> Option<Profile> {
        let &(sum, n) = self.images.get(image).filter(|(_, n)| *n > 0)?;
        Some(Profile {
            sm_util_bps: u16::try_from(sum / n).unwrap_or(u16::MAX),
        })
    }
}

/// When `bid` could start at the earliest, and where: of `machines`, the one whose running
/// `leases` free enough for it soonest, by the bid's latest start (`Machine::earliest_start`,
/// the program's rule, which `reserve` uses); `now` on a machine whose fit rule accepts it now.
/// `None`: no machine frees enough by then. Bids ranked above it may take those GPUs first, and
/// leases may end sooner (or be extended): an estimate, not a promise, unless a machine's
/// reservation holds it.
pub fn earliest_start(
    market: &Market,
    bid: &Bid,
    now: i64,
    machines: &[(Pubkey, Machine)],
    leases: &[Lease],
) -> Option<(i64, Pubkey)> {
    // The first of the earliest: ties go to the machine listed first.
    starts(market, bid, now, machines, leases).min_by_key(|(at, _)| *at)
}

/// When a gang bid could start at the earliest, and on which machines: its parts start
/// together, so on the `bid.parts` machines of `machines` whose own earliest starts
/// ([`earliest_start`]) are soonest (ties: the first listed), at the latest of those. What
/// `reserve_gang` holds them from, and the order its parts are listed in. `None`: fewer
/// machines than parts free enough by its latest start.
pub fn gang_start(
    market: &Market,
    bid: &Bid,
    now: i64,
    machines: &[(Pubkey, Machine)],
    leases: &[Lease],
) -> Option<(i64, Vec<Pubkey>)> {
    let mut soonest: Vec<(i64, Pubkey)> = starts(market, bid, now, machines, leases).collect();
    soonest.sort_by_key(|(at, _)| *at);
    soonest.truncate(bid.parts as usize);
    let start = soonest.last().map(|(at, _)| *at)?;
    (soonest.len() == bid.parts as usize)
        .then(|| (start, soonest.into_iter().map(|(_, k)| k).collect()))
}

/// Each of `machines` that `bid` could start on by its latest start, and when
/// (`Machine::earliest_start` over its running `leases`), in listing order.
fn starts<'a>(
    market: &'a Market,
    bid: &'a Bid,
    now: i64,
    machines: &'a [(Pubkey, Machine)],
    leases: &'a [Lease],
) -> impl Iterator<Item = (i64, Pubkey)> + 'a {
    let mut on: HashMap<&Pubkey, Vec<&Lease>> = HashMap::new();
    for l in leases {
        on.entry(&l.machine).or_default().push(l);
    }
    machines.iter().filter_map(move |(key, machine)| {
        let running = on.get(key).into_iter().flatten().copied();
        machine
            .earliest_start(market, bid, now, running)
            .map(|(at, _)| (at, *key))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_market::state::{
        BidData, GpuSpec, MachineData, MachineNetwork, MarketParams, OverclockTerms,
    };

    pub(super) const NOW: i64 = 1_800_000_000;

    /// An idle machine of one 80 GiB class-0 GPU, its electricity at `cost`, heard from at
    /// `heartbeat`.
    pub(super) fn machine(cost: u64, heartbeat: i64) -> Machine {
        let mut gpus = gpu_market::state::GpuTable::default();
        gpus[0] = GpuSpec {
            class: 0,
            memory_gib: 80,
            power_w: [100, 400],
            ..GpuSpec::default()
        };
        Machine {
            data: MachineData {
                gpu_count: 1,
                gpus,
                electricity_cost_per_kwh: cost,
                last_heartbeat: heartbeat,
                cpu_milli: 16_000,
                memory_mib: 65_536,
                ..MachineData::default()
            },
            status: MachineStatus::Active,
            network: MachineNetwork::default(),
            fault: None,
        }
    }

    pub(super) fn bid() -> Bid {
        Bid::queue(
            BidData {
                gpu_count: 1,
                gib_per_gpu: 40,
                accepted_classes: 1,
                price: 1_000_000_000,
                max_duration_secs: 3_600,
                min_duration_secs: 3_600,
                deadline: NOW + 7_200,
                cpu_milli: 1_000,
                memory_mib: 1_024,
                ..BidData::default()
            },
            OverclockTerms {
                power_limit_w: 300,
                ..OverclockTerms::default()
            },
        )
    }

    /// Three machines that fit the bid; the cheapest one's agent went silent longer ago than
    /// the market's silence window (3 intervals of 60 s): it is not chosen and has no turn, so
    /// no bid waits a grace period for it. The other two take their turns in order.
    #[test]
    fn a_machine_silent_past_the_window_is_never_given_a_bid() {
        let market = Market::opening(MarketParams::recommended(60, 250, 3_600));
        let window = 3 * 60;
        let (dead, live, later) = (
            Pubkey::new_unique(),
            Pubkey::new_unique(),
            Pubkey::new_unique(),
        );
        let machines = vec![
            (dead, machine(1, NOW - window - 1)),
            (live, machine(2, NOW - window)),
            (later, machine(3, NOW)),
        ];
        assert!(!alive(&market, &machines[0].1, NOW));
        assert!(alive(&market, &machines[1].1, NOW));
        let mut placement = MarketPlacement::new(&market, NOW, machines, Vec::new(), &[]).unwrap();
        let b = bid();
        let placed = placement.place(&b, Sealed::No).unwrap();
        assert_eq!(placed.machine, live, "the cheapest live machine");
        assert_eq!(placement.turn(&b, &placed, &later, Sealed::No), Some(1));
        assert_eq!(placement.turn(&b, &placed, &dead, Sealed::No), None);
    }

    /// Two agents whose views rank the same two machines differently (here: the cheaper one
    /// differs) name the same first part of a gang, so exactly one of them sends
    /// `allocate_gang`. Before, each view put its best machine first: with the views of the
    /// agents' gang test disagreeing, each agent waited for the other's (7 s past the gang's
    /// reservation).
    #[test]
    fn views_that_rank_a_gangs_machines_differently_name_the_same_first_part() {
        let market = Market::opening(MarketParams::recommended(60, 250, 3_600));
        let keys = [Pubkey::new_unique(), Pubkey::new_unique()];
        let first_parts: Vec<Pubkey> = [(1, 2), (2, 1)]
            .into_iter()
            .map(|(a, b)| {
                let machines = vec![(keys[0], machine(a, NOW)), (keys[1], machine(b, NOW))];
                let mut view =
                    MarketPlacement::new(&market, NOW, machines, Vec::new(), &[]).unwrap();
                let mut gang = bid();
                gang.parts = 2;
                let parts = view.place_gang(&gang, Sealed::No).unwrap();
                assert_eq!(parts.len(), 2);
                parts[0].machine
            })
            .collect();
        assert_eq!(first_parts, vec![keys[0], keys[0]]);
    }

    /// Four idle machines, cheapest first; a bid sealed to the agents of machines 1 and 3 (and
    /// to an agent with no machine here). The policy gives it to the cheapest holder, then the
    /// other holder's turn; machines 0 and 2, which cannot open it, come after both holders, in
    /// the policy's order over all machines (0 is that order's first). Sealed to nobody yet,
    /// every machine waits a grace period more than unsealed. A gang goes to the holders where
    /// they are enough, else to every machine.
    #[test]
    fn a_sealed_bid_goes_to_the_machines_holding_its_environment_first() {
        let market = Market::opening(MarketParams::recommended(60, 250, 3_600));
        let agents: Vec<Pubkey> = (0..4).map(|_| Pubkey::new_unique()).collect();
        let keys: Vec<Pubkey> = (0..4).map(|_| Pubkey::new_unique()).collect();
        let machines: Vec<(Pubkey, Machine)> = (0..4)
            .map(|i| {
                let mut m = machine(i as u64 + 1, NOW);
                m.agent = agents[i];
                (keys[i], m)
            })
            .collect();
        let holders = sealed_holders(&machines, &[agents[3], agents[1], Pubkey::new_unique()]);
        assert_eq!(holders, vec![keys[1], keys[3]]);
        let mut placement = MarketPlacement::new(&market, NOW, machines, Vec::new(), &[]).unwrap();
        let b = bid();
        let open = placement.place(&b, Sealed::No).unwrap();
        assert_eq!(open.machine, keys[0], "unsealed: the cheapest machine");
        let sealed = Sealed::To(&holders);
        let placed = placement.place(&b, sealed).unwrap();
        assert_eq!(placed.machine, keys[1], "the cheapest holder");
        let turns: Vec<Option<u32>> = keys
            .iter()
            .map(|k| placement.turn(&b, &placed, k, sealed))
            .collect();
        assert_eq!(turns, vec![Some(2), Some(0), Some(4), Some(1)]);
        // Sealed to nobody yet: the policy's machine too waits one grace period.
        let nobody = Sealed::To(&[]);
        let placed = placement.place(&b, nobody).unwrap();
        assert_eq!(placed.machine, keys[0]);
        let turns: Vec<Option<u32>> = keys
            .iter()
            .map(|k| placement.turn(&b, &placed, k, nobody))
            .collect();
        assert_eq!(turns, vec![Some(1), Some(2), Some(3), Some(4)]);
        let mut gang = b.clone();
        gang.parts = 2;
        let parts = placement.place_gang(&gang, sealed).unwrap();
        let on: Vec<Pubkey> = parts.iter().map(|p| p.machine).collect();
        assert_eq!(on, vec![keys[1], keys[3]]);
        let parts = placement
            .place_gang(&gang, Sealed::To(&holders[..1]))
            .unwrap();
        let on: Vec<Pubkey> = parts.iter().map(|p| p.machine).collect();
        assert_eq!(
            on,
            vec![keys[0], keys[1]],
            "one holder is not enough: every machine"
        );
    }
}
