//! EASY backfilling, as the program enforces it. The best-ranked queue bid that no machine can
//! start now may hold the GPUs of one machine from the earliest time they are free for it
//! (`reserve`). Until it starts, that machine runs other bids on those GPUs only if they end by
//! then, and runs bids that end later only on its other GPUs and with the CPU and memory the
//! reserved bid will need left over: nothing started after the reservation delays it.

use anchor_lang::prelude::*;
use gpu_market_core::fit::{Host, Offer};

use crate::state::{Bid, BidKind, BidStatus, Freed, Lease, Machine, MachineStatus, Market};

/// A machine's reservation for one queue bid (`Machine::reservation`); all zero: none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "idl-build", derive(AnchorSerialize, AnchorDeserialize))]
#[repr(C)]
pub struct Reservation {
    /// The queue bid the GPUs are held for (default: none).
    pub bid: Pubkey,
    /// When they are held from: the earliest time the bid fits the machine, from the ends of
    /// its running leases.
    pub start: i64,
    /// The CPU (thousandths of a core) and memory (MiB) the bid's lease will hold.
    pub cpu_milli: u32,
    pub memory_mib: u32,
    /// What the machine's leases that end after `start` hold of them, kept exact as leases start,
    /// extend and end.
    pub after_cpu_milli: u32,
    pub after_memory_mib: u32,
    /// Bit `g`: the bid runs on GPU `g` from `start`.
    pub gpus: u16,
    /// The bid's [`crate::state::BidData::reserved_round`] when it was made.
    pub round: u16,
    pub pad: [u8; 4],
}

// SAFETY: `repr(C)`, integers and a key only, no padding (size pinned below).
unsafe impl anchor_lang::__private::bytemuck::Zeroable for Reservation {}
unsafe impl anchor_lang::__private::bytemuck::Pod for Reservation {}
const _: () = assert!(core::mem::size_of::<Reservation>() == 32 + 8 + 4 * 4 + 2 + 2 + 4);
crate::state::pod_borsh!(Reservation);

impl Reservation {
    /// Whether it names a bid (it may have lapsed: see [`Reservation::binds`]).
    pub fn is_set(&self) -> bool {
        self.bid != Pubkey::default()
    }

    /// Whether it holds the machine at `now`: set, and not lapsed. It lapses `grace` seconds
    /// after its start (the market's silence window): a bid not started by then is not held up
    /// by a machine that does not run it, and may be reserved elsewhere.
    pub fn binds(&self, now: i64, grace: i64) -> bool {
        self.is_set() && now <= self.start.saturating_add(grace)
    }

    /// The CPU and memory the reserved bid will hold.
    pub fn host(&self) -> Host {
        Host {
            cpu_milli: self.cpu_milli,
            memory_mib: self.memory_mib,
        }
    }

    /// What leases that end after the start hold.
    pub fn after(&self) -> Host {
        Host {
            cpu_milli: self.after_cpu_milli,
            memory_mib: self.after_memory_mib,
        }
    }

    /// Whether a lease that may run until `until` must leave the reservation room: it ends
    /// after the start.
    pub fn restricts(&self, until: i64) -> bool {
        until > self.start
    }

    /// Of `total` (the machine's CPU and memory), what leases that end after the start may
    /// still hold beside the reserved bid.
    pub fn room_after(&self, total: Host) -> Host {
        total.less(self.after()).less(self.host())
    }

    /// Counts (`more`) or forgets (`!more`) `host` of a lease that ends after the start.
    /// Forgetting saturates: no lease's end may ever wait on this bookkeeping.
    pub fn count_after(&mut self, host: Host, more: bool) -> Result<()> {
        let after = if more {
            self.after()
                .checked_add(host)
                .ok_or(crate::errors::MarketError::Overflow)?
        } else {
            self.after().less(host)
        };
        self.after_cpu_milli = after.cpu_milli;
        self.after_memory_mib = after.memory_mib;
        Ok(())
    }

    /// Its part when a lease of bid `bid`, holding `host`, starts at `now` on its machine to run
    /// until `ends_at` (`allocate`): the reserved bid starting, or a lapsed reservation, clears
    /// it; a lease that ends after the start is counted.
    pub fn lease_started(
        &mut self,
        bid: &Pubkey,
        (ends_at, host): (i64, Host),
        now: i64,
        grace: i64,
    ) -> Result<()> {
        if self.bid == *bid || (self.is_set() && !self.binds(now, grace)) {
            *self = Reservation::default();
        } else if self.is_set() && self.restricts(ends_at) {
            self.count_after(host, true)?;
        }
        Ok(())
    }

    /// Its part when a lease that ran until `ends_at` holding `host` ends on its machine.
    pub fn lease_ended(&mut self, ends_at: i64, host: Host) -> Result<()> {
        if self.is_set() && self.restricts(ends_at) {
            self.count_after(host, false)?;
        }
        Ok(())
    }

    /// Whether a lease on `gpus` (a mask) holding `host` may run past the start on a machine
    /// of `total` CPU and memory: it keeps off the reserved GPUs and leaves the bid its CPU and
    /// memory.
    pub fn admits_after(&self, gpus: u16, host: Host, total: Host) -> bool {
        gpus & self.gpus == 0 && self.room_after(total).holds(host)
    }
}

/// A machine's offers to the bids of one book at one moment: to a bid that may use every free
/// GPU, and, while a reservation binds, to one that would run past its start.
pub struct Offers {
    pub now: Offer,
    /// The reservation's bid and start, and the offer without its GPUs and with its CPU and
    /// memory set aside.
    pub after: Option<(Pubkey, i64, Offer)>,
}

impl Offers {
    /// The offer bid `bid`, which would run until `until`, gets.
    pub fn for_run(&self, bid: &Pubkey, until: i64) -> &Offer {
        match &self.after {
            Some((held_for, start, after)) if held_for != bid && until > *start => after,
            _ => &self.now,
        }
    }
}

impl Machine {
    /// Whether this machine (at `machine`) holds its GPUs for `bid` (at `key`) at `now`: its
    /// reservation names the bid and is of its current round, the bid still waits (and, one
    /// machine's bid, names this machine), the machine is active, and the reservation has not
    /// lapsed. Otherwise `unreserve` may clear it.
    pub fn holds(
        &self,
        machine: &Pubkey,
        (key, bid): (&Pubkey, &Bid),
        market: &Market,
        now: i64,
    ) -> bool {
        self.reservation.bid == *key
            && self.reservation.round == bid.reserved_round
            && bid.status == BidStatus::Open
            && (bid.is_gang() || bid.reserved_on == *machine)
            && self.status == MachineStatus::Active
            && self.reservation.binds(now, market.silence_window_secs())
    }

    /// The reservation `reserve` makes of this machine for `bid` (at address `key`) at `now`,
    /// from its running `leases` (every one of them): from [`Machine::earliest_start`], on the
    /// GPUs the fit rule gives the bid then ([`Machine::reservation_at`]). `None` where the bid
    /// never fits in time.
    pub fn reservation_for(
        &self,
        market: &Market,
        (key, bid): (Pubkey, &Bid),
        now: i64,
        leases: &[Lease],
    ) -> Result<Option<Reservation>> {
        let Some((start, gpus)) = self.earliest_start(market, bid, now, leases) else {
            return Ok(None);
        };
        self.reservation_at((key, bid), (start, gpus), leases)
            .map(Some)
    }

    /// The reservation of this machine's `gpus` (a mask) for `bid` (at `key`) from `start`,
    /// of the bid's next round: the CPU and memory its lease will hold, and what the running
    /// `leases` (every one of them) that end after the start hold. A gang's part is held
    /// from the gang's start, which may be later than the part's own earliest: the GPUs free
    /// then stay free until it (no lease may run past the start on them).
    pub fn reservation_at(
        &self,
        (key, bid): (Pubkey, &Bid),
        (start, gpus): (i64, u16),
        leases: &[Lease],
    ) -> Result<Reservation> {
        let host = self.lease_host(bid.host(), bid.gpu_count, bid.gib_per_gpu);
        let mut reservation = Reservation {
            bid: key,
            start,
            cpu_milli: host.cpu_milli,
            memory_mib: host.memory_mib,
            gpus,
            round: bid.reserved_round.wrapping_add(1),
            ..Reservation::default()
        };
        for lease in leases.iter().filter(|l| l.ends_at > start) {
            reservation.count_after(lease.host(), true)?;
        }
        Ok(reservation)
    }

    /// The reservations `reserve_gang` makes for gang `bid` (at `key`) at `now` on `parts`
    /// (each machine with every lease running on it), in their order: each part's GPUs from
    /// the gang's start, the latest of the parts' earliest starts ([`Machine::earliest_start`]),
    /// since the parts start together. `None` where a part never fits in time.
    pub fn gang_reservations(
        market: &Market,
        (key, bid): (Pubkey, &Bid),
        now: i64,
        parts: &[(&Machine, &[Lease])],
    ) -> Result<Option<(i64, Vec<Reservation>)>> {
        let mut starts = Vec::with_capacity(parts.len());
        for (machine, leases) in parts {
            match machine.earliest_start(market, bid, now, leases.iter()) {
                Some(found) => starts.push(found),
                None => return Ok(None),
            }
        }
        let start = starts.iter().map(|(at, _)| *at).max().unwrap_or(now);
        let mut out = Vec::with_capacity(parts.len());
        for ((machine, leases), (_, gpus)) in parts.iter().zip(starts) {
            out.push(machine.reservation_at((key, bid), (start, gpus), leases)?);
        }
        Ok(Some((start, out)))
    }

    /// When `bid` fits this machine at the earliest, and on which GPUs (a mask): `now` when it
    /// fits now; otherwise the end (or stop) of its running `leases` taken in order, those ending
    /// at the same time together, each freed as `end_lease` frees it ([`crate::state::MachineData::release`]), until the machine fits the bid, priced
    /// then. `None` when it never does by the bid's latest start (the fit rule's check).
    /// `leases` must be every lease running here: `reserve` checks that they are.
    pub fn earliest_start<'a>(
        &self,
        market: &Market,
        bid: &Bid,
        now: i64,
        leases: impl IntoIterator<Item = &'a Lease>,
    ) -> Option<(i64, u16)> {
        let fit = |m: &Machine, at: i64| {
            m.offer(market, bid.kind, at, &Freed::default())
                .ok()
                .and_then(|o| bid.fit(&o).ok())
                .map(|choice| (at, choice.mask()))
        };
        if let Some(found) = fit(self, now) {
            return Some(found);
        }
        let mut ending: Vec<&Lease> = leases.into_iter().collect();
        // Not `sort_by_key`: its scratch buffer on the stack exceeds the SBF frame.
        ending.sort_unstable_by_key(|l| l.stop());
        let mut left = self.clone();
        let mut ending = ending.into_iter().peekable();
        while let Some(l) = ending.next() {
            let at = l.stop().max(now);
            if at > bid.latest_start() {
                return None;
            }
            let spot = l.kind == BidKind::Spot;
            left.release(l.gpus(), l.gib_per_gpu, l.host(), spot).ok()?;
            // Every lease that has ended by then is gone before the choice is made.
            if ending.peek().is_some_and(|next| next.stop().max(now) == at) {
                continue;
            }
            if let Some(found) = fit(&left, at) {
                return Some(found);
            }
        }
        None
    }
}
