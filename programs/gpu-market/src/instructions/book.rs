use anchor_lang::__private::bytemuck;
use anchor_lang::prelude::*;
use core::cell::{Ref, RefMut};

use crate::errors::MarketError;
use crate::state::{
    book_space, seeds, BidBook, Book, BookSlot, Lease, Machine, Market, BOOK_EMPTY_SPACE,
    BOOK_HEADER_SIZE, BOOK_KIND_QUEUE, BOOK_KIND_SPOT, BOOK_SLOT_SIZE,
};

// The client creates a book account (`BOOK_EMPTY_SPACE` bytes, owner: this program) with the
// system program in the same transaction, and these instructions initialise it (`zero` checks it
// is new and owned by the program). From then on it holds one slot per entry: an entry's slot is
// paid for by its bid account, which gets it back when the entry leaves (`grow_book`,
// `shrink_book`). A bid account holds the slot's rent whenever it is out of its book, and gives
// it to its client when it closes.

/// A book account (already checked by its `AccountLoader`: owner and discriminator) read in
/// place: its header and its slots.
pub fn load_book<'a>(
    book: &'a AccountInfo<'_>,
) -> Result<Book<Ref<'a, BidBook>, Ref<'a, [BookSlot]>>> {
    let data = book.try_borrow_data()?;
    require!(well_shaped(data.len()), MarketError::BookMisshapen);
    let (head, slots) = Ref::map_split(data, |d| {
        let (head, slots) = d[8..].split_at(BOOK_HEADER_SIZE);
        (bytemuck::from_bytes(head), bytemuck::cast_slice(slots))
    });
    Ok(Book { head, slots })
}

/// [`load_book`], for writing.
pub fn load_book_mut<'a>(
    book: &'a AccountInfo<'_>,
) -> Result<Book<RefMut<'a, BidBook>, RefMut<'a, [BookSlot]>>> {
    let data = book.try_borrow_mut_data()?;
    require!(well_shaped(data.len()), MarketError::BookMisshapen);
    let (head, slots) = RefMut::map_split(data, |d| {
        let (head, slots) = d[8..].split_at_mut(BOOK_HEADER_SIZE);
        (
            bytemuck::from_bytes_mut(head),
            bytemuck::cast_slice_mut(slots),
        )
    });
    Ok(Book { head, slots })
}

fn well_shaped(len: usize) -> bool {
    len >= BOOK_EMPTY_SPACE && (len - BOOK_EMPTY_SPACE).is_multiple_of(BOOK_SLOT_SIZE)
}

/// The rent of the slot an entry takes in a book: what a book account's rent-exempt minimum
/// grows by with each entry (the Rent sysvar's, linear in the account's size).
pub fn slot_rent(rent: &Rent) -> u64 {
    rent.minimum_balance(BOOK_SLOT_SIZE)
        .saturating_sub(rent.minimum_balance(0))
}

/// The rent of a lease account: what a gang bid's account holds for each of its parts, and gets
/// back when each part's lease closes.
pub fn lease_rent(rent: &Rent) -> u64 {
    rent.minimum_balance(8 + Lease::INIT_SPACE)
}

/// Entries in a book account, from its header.
fn book_len(book: &AccountInfo<'_>) -> Result<usize> {
    Ok(load_book(book)?.len())
}

/// Grows `book` by the slot of an entry about to enter, moving `due` ([`slot_rent`]) from `bid`
/// (the entering bid's account, which holds it beyond its own rent: the caller checked).
pub fn grow_book(book: &AccountInfo<'_>, bid: &AccountInfo<'_>, due: u64) -> Result<()> {
    book.resize(book_space(book_len(book)? + 1))?;
    let mut from = bid.try_borrow_mut_lamports()?;
    **from = from.checked_sub(due).ok_or(MarketError::BookRentMissing)?;
    **book.try_borrow_mut_lamports()? += due;
    Ok(())
}

/// Shrinks `book` to its entries after one left, moving the freed slot's rent `due`
/// ([`slot_rent`]) to `bid` (the leaving bid's account).
pub fn shrink_book(book: &AccountInfo<'_>, bid: &AccountInfo<'_>, due: u64) -> Result<()> {
    book.resize(book_space(book_len(book)?))?;
    let mut held = book.try_borrow_mut_lamports()?;
    **held = held.checked_sub(due).ok_or(MarketError::Overflow)?;
    **bid.try_borrow_mut_lamports()? += due;
    Ok(())
}

/// Whether `bid`'s account holds `due` ([`slot_rent`]) beyond its own rent: it does whenever
/// the bid is out of its book (it paid at placement and gets the slot's rent back on leaving).
pub fn holds_slot_rent(bid: &AccountInfo<'_>, rent: &Rent, due: u64) -> bool {
    bid.lamports()
        .checked_sub(rent.minimum_balance(bid.data_len()))
        .is_some_and(|spare| spare >= due)
}

#[derive(Accounts)]
pub struct InitQueueBook<'info> {
    pub authority: Signer<'info>,

    #[account(
        mut, dup,
        constraint = market.authority == authority.key() @ MarketError::NotMarketAuthority,
    )]
    pub market: Box<Account<'info, Market>>,

    /// Created by the system program in the same transaction; its key signs, so an account
    /// created (and paid for) earlier cannot be claimed by someone else's `init`.
    #[account(zero, signer)]
    pub book: AccountLoader<'info, BidBook>,
}

impl InitQueueBook<'_> {
    pub fn init_queue_book(ctx: Context<Self>) -> Result<()> {
        let market = &mut ctx.accounts.market;
        require!(
            market.queue_book == Pubkey::default(),
            MarketError::BookAlreadyOpen
        );
        ctx.accounts
            .book
            .load_init()?
            .init(market.key(), BOOK_KIND_QUEUE, Pubkey::default());
        market.queue_book = ctx.accounts.book.key();
        Ok(())
    }
}

#[derive(Accounts)]
pub struct InitSpotBook<'info> {
    pub owner: Signer<'info>,

    #[account(
        mut, dup,
        seeds = [seeds::MACHINE, machine.data.market.as_ref(), owner.key().as_ref(), &machine.data.id.to_le_bytes()],
        bump = machine.bump,
        constraint = machine.owner == owner.key() @ ErrorCode::ConstraintHasOne,
    )]
    pub machine: Box<Account<'info, Machine>>,

    /// As for the queue book: its key signs.
    #[account(zero, signer)]
    pub book: AccountLoader<'info, BidBook>,
}

impl InitSpotBook<'_> {
    pub fn init_spot_book(ctx: Context<Self>) -> Result<()> {
        let machine = &mut ctx.accounts.machine;
        require!(
            machine.spot_book == Pubkey::default(),
            MarketError::BookAlreadyOpen
        );
        ctx.accounts
            .book
            .load_init()?
            .init(machine.market, BOOK_KIND_SPOT, machine.key());
        machine.spot_book = ctx.accounts.book.key();
        Ok(())
    }
}
