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
    /// its reservation moves here only for an earlier start.
    #[account(
        mut, dup,
        address = bid.reserved_on @ MarketError::WrongMachine,
        constraint = previous.key() != machine.key() @ MarketError::WrongMachine,
    )]
    pub previous: Option<Box<Account<'info, Machine>>>,
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
            let data = info.try_borrow_data()?;
            if data.starts_with(Lease::DISCRIMINATOR) {
                let lease = Lease::try_deserialize(&mut &data[..])?;
                require_keys_eq!(lease.machine, *machine, MarketError::LeasesMissing);
                require!(!keys.contains(info.key), MarketError::LeasesMissing);
                keys.push(*info.key);
                leases.push(lease);
            } else if data.starts_with(Machine::DISCRIMINATOR) {
                let other = Machine::try_deserialize(&mut &data[..])?;
                require_keys_eq!(other.market, *market_key, MarketError::WrongMachine);
                if info.key != machine && other.reservation.binds(now, grace) {
                    held_elsewhere.push(other.reservation.bid);
                }
            } else {
                return err!(MarketError::LeasesMissing);
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
        require!(!bid.is_gang(), MarketError::GangNeedsAllocateGang);
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
        comes_first(&a.queue_book.to_account_info(), bid, &empty, &shown, now)?;

        let reservation = machine
            .reservation_for(market, (bid.key(), bid), now, &shown.leases)?
            .ok_or(MarketError::BidNotFeasible)?;
        require!(reservation.start > now, MarketError::BidFitsNow);
        let (start, gpus) = (reservation.start, reservation.gpus);
        let grace = market.silence_window_secs();

        let a = &mut *ctx.accounts;
        if a.bid.reserved_on != Pubkey::default() && a.bid.reserved_on != a.machine.key() {
            let previous = a
                .previous
                .as_mut()
                .ok_or(error!(MarketError::WrongMachine))?;
            let held = &mut previous.reservation;
            if held.bid == a.bid.key() && held.binds(now, grace) {
                require!(start < held.start, MarketError::ReservationHolds);
                *held = Reservation::default();
            }
        }
        a.machine.reservation = reservation;
        a.bid.reserved_on = a.machine.key();
        emit!(BidReserved {
            bid: a.bid.key(),
            machine: a.machine.key(),
            start,
            gpus,
        });
        Ok(())
    }
}

/// Whether `bid` comes first in the queue `book` among the entries the machine behind `empty`
/// (its offer with every GPU free) could run that no other machine holds (`shown`).
#[inline(never)]
fn comes_first(
    book: &AccountInfo,
    bid: &Account<Bid>,
    empty: &Offer,
    shown: &Shown,
    now: i64,
) -> Result<()> {
    let book = load_book(book)?;
    for leaf in book.iter() {
        if leaf.bid == bid.key() && leaf.seq == bid.seq {
            return Ok(());
        }
        if leaf.summary.expired(now) || leaf.summary.is_gang() || !entry_fits(empty, leaf) {
            continue;
        }
        require!(
            shown.held_elsewhere.contains(&leaf.bid),
            MarketError::BetterBidUnreserved
        );
    }
    err!(MarketError::BookNotFound)
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
