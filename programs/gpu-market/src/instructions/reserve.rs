//! `reserve` and `unreserve`: the reservations of EASY backfilling (`state::reservation`).
//! Anyone may send them (the machines' agents do): what they may do is decided from the
//! accounts, never from who sends them.

use anchor_lang::prelude::*;

use gpu_market_core::fit::Offer;

use crate::errors::MarketError;
use crate::events::{BidReserved, ReservationCleared};
use crate::instructions::{entry_fits, load_book};
use crate::state::{
    Bid, BidBook, BidKind, BidStatus, Freed, Lease, Machine, MachineStatus, Market, Reservation,
};

/// Remaining accounts, in any order: every lease running on the machine (all of them: the
/// start is computed from their ends), and, for each queue entry ranked above the bid that
/// could run on the machine once it is empty, a machine whose reservation holds that entry.
#[derive(Accounts)]
pub struct Reserve<'info> {
    pub market: Box<Account<'info, Market>>,

    #[account(mut, dup, constraint = machine.market == market.key() @ ErrorCode::ConstraintHasOne)]
    pub machine: Box<Account<'info, Machine>>,

    #[account(address = market.queue_book @ MarketError::WrongBook)]
    pub queue_book: AccountLoader<'info, BidBook>,

    #[account(mut, dup, constraint = bid.market == market.key() @ ErrorCode::ConstraintHasOne)]
    pub bid: Box<Account<'info, Bid>>,

    /// The machine the bid is reserved on now (`bid.reserved_on`), when that is another one:
    /// its reservation moves here only for an earlier start. A machine its host has closed
    /// holds nothing.
    /// CHECK: read as a machine of this program by `release_previous`, unless closed.
    #[account(
        mut,
        address = bid.reserved_on @ MarketError::WrongMachine,
        constraint = previous.key() != machine.key() @ MarketError::WrongMachine,
    )]
    pub previous: Option<UncheckedAccount<'info>>,
}

/// Whether `info` is a closed account (the system program's, holding no data): a machine whose
/// host closed it, which holds nothing (lamports sent to the address since change nothing).
fn closed(info: &AccountInfo) -> bool {
    *info.owner == anchor_lang::system_program::ID && info.data_is_empty()
}

/// Releases `bid`'s reservation on `info`, the machine it is reserved on now, for a reservation
/// from `start`: refused (`ReservationHolds`) where the one held there starts no later. A
/// machine since closed holds nothing.
#[inline(never)]
fn release_previous(
    info: &AccountInfo,
    (key, bid): (&Pubkey, &Bid),
    start: i64,
    (market, now): (&Market, i64),
) -> Result<()> {
    if closed(info) {
        return Ok(());
    }
    require_keys_eq!(*info.owner, crate::ID, MarketError::WrongMachine);
    let mut data = info.try_borrow_mut_data()?;
    let mut previous = Box::new(Machine::try_deserialize(&mut &data[..])?);
    if previous.holds(info.key, (key, bid), market, now) {
        require!(
            start < previous.reservation.start,
            MarketError::ReservationHolds
        );
        previous.reservation = Reservation::default();
        previous.try_serialize(&mut &mut data[..])?;
    }
    Ok(())
}

/// What the remaining accounts of `reserve` show: the machine's leases, and the bids other
/// machines' reservations hold.
struct Shown {
    leases: Vec<Lease>,
    held_elsewhere: Vec<Pubkey>,
}

impl Shown {
    #[inline(never)]
    fn read(
        remaining: &[AccountInfo],
        (market_key, market): (&Pubkey, &Market),
        machine: &Pubkey,
        now: i64,
    ) -> Result<Self> {
        let grace = market.silence_window_secs();
        let (mut leases, mut keys, mut held_elsewhere) = (Vec::new(), Vec::new(), Vec::new());
        for info in remaining {
            require_keys_eq!(*info.owner, crate::ID, MarketError::LeasesMissing);
            if !info.try_borrow_data()?.starts_with(Machine::DISCRIMINATOR) {
                read_lease(info, machine, &keys, &mut leases)?;
                keys.push(*info.key);
                continue;
            }
            let (key, other) = shown_machine(info, market_key)?;
            if key != *machine && other.reservation.binds(now, grace) {
                held_elsewhere.push(other.reservation.bid);
            }
        }
        Ok(Shown {
            leases,
            held_elsewhere,
        })
    }
}

impl Reserve<'_> {
    /// Holds the machine's GPUs for queue bid `bid` from the earliest time it fits there
    /// (`Machine::earliest_start` over the machine's leases). Refused when it fits now (it is
    /// allocated instead), when that time is past its latest start, when an entry ranked above
    /// it could run on this machine once it is empty and no other machine holds that entry, and
    /// when the bid holds another machine from an earlier or equal start.
    pub fn reserve<'info>(ctx: Context<'info, Reserve<'info>>) -> Result<()> {
        let now = Clock::get()?.unix_timestamp;
        let a = &ctx.accounts;
        let (market, machine, bid) = (&a.market, &a.machine, &a.bid);
        require!(bid.kind == BidKind::Queue, MarketError::NotQueueBid);
        require!(!bid.is_gang(), MarketError::GangNeedsReserveGang);
        require!(bid.status == BidStatus::Open, MarketError::BidRunning);
        require!(!bid.expired(now), MarketError::LatestStartPassed);
        require!(
            machine.status == MachineStatus::Active,
            MarketError::MachineNotActive
        );
        let market_key = market.key();
        let shown = Shown::read(
            ctx.remaining_accounts,
            (&market_key, market),
            &machine.key(),
            now,
        )?;
        require!(
            shown.leases.len() == machine.leases as usize,
            MarketError::LeasesMissing
        );

        // The bid comes first among the entries this machine could ever run that no other
        // machine holds.
        let empty = machine.offer(market, BidKind::Queue, now, &Freed::all())?;
        comes_first(
            &a.queue_book.to_account_info(),
            bid,
            (&empty, current_hold(machine, &bid.key(), market, now)),
            &shown.held_elsewhere,
            now,
        )?;

        let reservation = machine
            .reservation_for(market, (bid.key(), bid), now, &shown.leases)?
            .ok_or(MarketError::BidNotFeasible)?;
        require!(reservation.start > now, MarketError::BidFitsNow);
        let (start, gpus) = (reservation.start, reservation.gpus);

        if bid.reserved_on != Pubkey::default() && bid.reserved_on != machine.key() {
            let previous = a
                .previous
                .as_ref()
                .ok_or(error!(MarketError::WrongMachine))?;
            release_previous(previous, (&bid.key(), bid), start, (market, now))?;
        }
        let a = &mut *ctx.accounts;
        a.machine.reservation = reservation;
        a.bid.reserved_on = a.machine.key();
        a.bid.reserved_round = reservation.round;
        emit!(BidReserved {
            bid: a.bid.key(),
            machine: a.machine.key(),
            start,
            gpus,
        });
        Ok(())
    }
}

/// The bid `machine`'s reservation holds at `now` when that is not `bid`: one `reserve` and
/// `reserve_gang` may take over only for a bid ranked above it.
fn current_hold(machine: &Machine, bid: &Pubkey, market: &Market, now: i64) -> Option<Pubkey> {
    let held = &machine.reservation;
    (held.binds(now, market.silence_window_secs()) && held.bid != *bid).then_some(held.bid)
}

/// Whether `bid` comes first in the queue `book` among the entries the machine behind `empty`
/// (its offer with every GPU free) could run that no other machine holds (`held_elsewhere`),
/// and ranks above the bid the machine holds now (`current`), if any. A gang's entry holds no
/// other bid back (as in `allocate`), but a machine holding one of its parts keeps it from
/// bids ranked below it.
#[inline(never)]
fn comes_first(
    book: &AccountInfo,
    bid: &Account<Bid>,
    (empty, current): (&Offer, Option<Pubkey>),
    held_elsewhere: &[Pubkey],
    now: i64,
) -> Result<()> {
    let book = load_book(book)?;
    for leaf in book.iter() {
        if leaf.bid == bid.key() && leaf.seq == bid.seq {
            return Ok(());
        }
        if leaf.summary.expired(now) {
            continue;
        }
        require!(current != Some(leaf.bid), MarketError::ReservationHolds);
        if leaf.summary.is_gang() || !entry_fits(empty, leaf) {
            continue;
        }
        require!(
            held_elsewhere.contains(&leaf.bid),
            MarketError::BetterBidUnreserved
        );
    }
    err!(MarketError::BookNotFound)
}

/// Remaining accounts: for each of the gang's parts, in the order its reservation lists them,
/// its machine (writable) and then every lease running on it (`Machine::leases` of them);
/// then, read only: for each queue entry ranked above the gang that could run on one of those
/// machines once it is empty, a machine whose reservation holds it, and the machine the gang is
/// reserved on now (`Bid::reserved_on`) where that is none of the parts.
#[derive(Accounts)]
pub struct ReserveGang<'info> {
    pub market: Box<Account<'info, Market>>,

    #[account(address = market.queue_book @ MarketError::WrongBook)]
    pub queue_book: AccountLoader<'info, BidBook>,

    #[account(mut, constraint = bid.market == market.key() @ ErrorCode::ConstraintHasOne)]
    pub bid: Box<Account<'info, Bid>>,
}

/// A part's machine and every lease running on it, from `reserve_gang`'s remaining accounts.
struct Part<'info> {
    machine: Box<Account<'info, Machine>>,
    leases: Vec<Lease>,
}

/// A part's machine from a remaining account (owner and discriminator checked), in a frame of
/// its own.
#[inline(never)]
fn load_part<'info>(info: &'info AccountInfo<'info>) -> Result<Box<Account<'info, Machine>>> {
    Ok(Box::new(Account::try_from(info)?))
}

/// Adds to `leases` a lease of `machine` from a remaining account, in a frame of its own;
/// `seen`, the leases' addresses read so far, must not hold it.
#[inline(never)]
fn read_lease(
    info: &AccountInfo,
    machine: &Pubkey,
    seen: &[Pubkey],
    leases: &mut Vec<Lease>,
) -> Result<()> {
    require_keys_eq!(*info.owner, crate::ID, MarketError::LeasesMissing);
    require!(!seen.contains(info.key), MarketError::LeasesMissing);
    let data = info.try_borrow_data()?;
    require!(
        data.starts_with(Lease::DISCRIMINATOR),
        MarketError::LeasesMissing
    );
    let lease = Lease::try_deserialize(&mut &data[..])?;
    require_keys_eq!(lease.machine, *machine, MarketError::LeasesMissing);
    leases.push(lease);
    Ok(())
}

/// A machine shown as evidence, at its address.
type ShownMachine = (Pubkey, Box<Machine>);

/// The machine behind `info` (of `market`) and its reservation, for evidence.
#[inline(never)]
fn shown_machine(info: &AccountInfo, market: &Pubkey) -> Result<ShownMachine> {
    require_keys_eq!(*info.owner, crate::ID, MarketError::WrongMachine);
    let data = info.try_borrow_data()?;
    let machine = Box::new(Machine::try_deserialize(&mut &data[..])?);
    require_keys_eq!(machine.market, *market, MarketError::WrongMachine);
    Ok((*info.key, machine))
}

/// Reads `parts` parts (a machine and its leases each) from `remaining`, checking that each
/// machine is the market's, active and heard from within the silence window, none twice, and
/// that each comes with every lease running on it; then every further account as a machine.
#[inline(never)]
fn read_parts<'info>(
    remaining: &'info [AccountInfo<'info>],
    parts: u8,
    (market_key, market): (&Pubkey, &Market),
    now: i64,
) -> Result<(Vec<Part<'info>>, Vec<ShownMachine>)> {
    let mut out: Vec<Part<'info>> = Vec::with_capacity(parts as usize);
    let mut rest = remaining.iter();
    for _ in 0..parts {
        let info = rest.next().ok_or(error!(MarketError::GangPartsMismatch))?;
        let machine = load_part(info)?;
        require_keys_eq!(machine.market, *market_key, ErrorCode::ConstraintHasOne);
        require!(
            !out.iter().any(|p| p.machine.key() == machine.key()),
            MarketError::GangPartsMismatch
        );
        require!(
            machine.status == MachineStatus::Active,
            MarketError::MachineNotActive
        );
        require!(
            now.saturating_sub(machine.last_heartbeat) <= market.silence_window_secs(),
            MarketError::MachineSilent
        );
        let mut leases = Vec::with_capacity(machine.leases as usize);
        let mut keys: Vec<Pubkey> = Vec::with_capacity(machine.leases as usize);
        for _ in 0..machine.leases {
            let info = rest.next().ok_or(error!(MarketError::LeasesMissing))?;
            read_lease(info, &machine.key(), &keys, &mut leases)?;
            keys.push(*info.key);
        }
        out.push(Part { machine, leases });
    }
    let shown = rest
        .filter(|info| !closed(info))
        .map(|info| shown_machine(info, market_key))
        .collect::<Result<Vec<_>>>()?;
    Ok((out, shown))
}

impl<'info> ReserveGang<'info> {
    /// Holds GPUs on each of a gang's machines for it, all from the gang's start: the latest
    /// of the parts' earliest starts (`Machine::earliest_start` over each machine's leases),
    /// since the parts start together. Until then each machine runs other bids on the held
    /// GPUs only if they end by the start (EASY backfilling, as for one machine's bid). Refused
    /// as `reserve` refuses (on each machine: an entry ranked above it that could run there
    /// once it is empty and that no other machine holds, or a reservation there of a bid
    /// ranked above it), when every part fits now (`allocate_gang` starts it instead), and
    /// when the gang holds machines already from an earlier or equal start. Its earlier
    /// reservations on other machines hold nothing from here on (`Machine::holds`), and anyone
    /// may clear them.
    pub fn reserve_gang(ctx: Context<'info, Self>) -> Result<()> {
        let now = Clock::get()?.unix_timestamp;
        let a = &ctx.accounts;
        let (market, bid) = (&a.market, &a.bid);
        require!(bid.is_gang(), MarketError::NotAGang);
        require!(bid.status == BidStatus::Open, MarketError::BidRunning);
        require!(!bid.expired(now), MarketError::LatestStartPassed);
        let market_key = market.key();
        let (mut parts, others) = read_parts(
            ctx.remaining_accounts,
            bid.parts,
            (&market_key, market),
            now,
        )?;
        let grace = market.silence_window_secs();
        let shown = |key: &Pubkey| -> Option<&Machine> {
            parts
                .iter()
                .map(|p| (p.machine.key(), &**p.machine as &Machine))
                .chain(others.iter().map(|(k, m)| (*k, &**m)))
                .find(|(k, _)| k == key)
                .map(|(_, m)| m)
        };

        // On each machine, the gang comes first among the entries no other machine holds.
        let book = a.queue_book.to_account_info();
        for part in &parts {
            let here = part.machine.key();
            let held_elsewhere: Vec<Pubkey> = parts
                .iter()
                .map(|p| (p.machine.key(), &p.machine.reservation))
                .chain(others.iter().map(|(k, m)| (*k, &m.reservation)))
                .filter(|(k, r)| *k != here && r.binds(now, grace))
                .map(|(_, r)| r.bid)
                .collect();
            let empty = part
                .machine
                .offer(market, BidKind::Queue, now, &Freed::all())?;
            let current = current_hold(&part.machine, &bid.key(), market, now);
            comes_first(&book, bid, (&empty, current), &held_elsewhere, now)?;
        }

        let key = bid.key();
        let shown_parts: Vec<(&Machine, &[Lease])> = parts
            .iter()
            .map(|p| (&**p.machine as &Machine, &p.leases[..]))
            .collect();
        let (start, reservations) =
            Machine::gang_reservations(market, (key, bid), now, &shown_parts)?
                .ok_or(error!(MarketError::BidNotFeasible))?;
        drop(shown_parts);
        require!(start > now, MarketError::BidFitsNow);
        if bid.reserved_on != Pubkey::default() {
            match shown(&bid.reserved_on) {
                Some(first) if first.holds(&bid.reserved_on, (&key, bid), market, now) => {
                    require!(
                        start < first.reservation.start,
                        MarketError::ReservationHolds
                    );
                }
                Some(_) => {}
                // Not a machine any more: shown closed, it holds nothing.
                None => require!(
                    ctx.remaining_accounts
                        .iter()
                        .any(|i| *i.key == bid.reserved_on && closed(i)),
                    MarketError::WrongMachine
                ),
            }
        }

        let round = reservations[0].round;
        for (part, reservation) in parts.iter_mut().zip(reservations) {
            let gpus = reservation.gpus;
            part.machine.reservation = reservation;
            part.machine.exit(&crate::ID)?;
            emit!(BidReserved {
                bid: key,
                machine: part.machine.key(),
                start,
                gpus,
            });
        }
        let first = parts[0].machine.key();
        let bid = &mut ctx.accounts.bid;
        bid.reserved_on = first;
        bid.reserved_round = round;
        Ok(())
    }
}

#[derive(Accounts)]
pub struct Unreserve<'info> {
    pub market: Box<Account<'info, Market>>,

    #[account(mut, dup, constraint = machine.market == market.key() @ ErrorCode::ConstraintHasOne)]
    pub machine: Box<Account<'info, Machine>>,

    /// CHECK: the reservation's bid, read only where it is still one of this program's bids
    /// (a closed bid is gone).
    #[account(address = machine.reservation.bid @ MarketError::NotReservedBid)]
    pub bid: UncheckedAccount<'info>,
}

impl Unreserve<'_> {
    /// Clears the machine's reservation once it no longer holds anything: its bid has started
    /// (here or elsewhere), left the book or moved its reservation, the machine is not active,
    /// or it lapsed.
    pub fn unreserve(ctx: Context<Self>) -> Result<()> {
        let now = Clock::get()?.unix_timestamp;
        let a = &ctx.accounts;
        let held = &a.machine.reservation;
        require!(held.is_set(), MarketError::NotReservedBid);
        let info = a.bid.to_account_info();
        // A bid account that is gone (or not a bid any more) is no bid waiting for it.
        let holds = *info.owner == crate::ID && {
            let data = info.try_borrow_data()?;
            data.starts_with(Bid::DISCRIMINATOR)
                && Bid::try_deserialize(&mut &data[..]).is_ok_and(|b| {
                    a.machine
                        .holds(&a.machine.key(), (info.key, &b), &a.market, now)
                })
        };
        require!(!holds, MarketError::ReservationHolds);
        let bid = held.bid;
        ctx.accounts.machine.reservation = Reservation::default();
        emit!(ReservationCleared {
            bid,
            machine: ctx.accounts.machine.key(),
        });
        Ok(())
    }
}
