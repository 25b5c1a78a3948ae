use anchor_lang::prelude::*;

use crate::errors::MarketError;
use crate::state::{seeds, BidBook, Machine, Market, BOOK_KIND_QUEUE, BOOK_KIND_SPOT};

// A book is 272 KiB, past what a program may allocate in a CPI (10 KiB): the client creates the
// account with the system program (owner: this program) in the same transaction, and these
// instructions initialise it (`zero` checks it is new and owned by the program).

#[derive(Accounts)]
pub struct InitQueueBook<'info> {
    pub authority: Signer<'info>,

    #[account(mut, dup, has_one = authority @ MarketError::NotMarketAuthority)]
    pub market: Account<'info, Market>,

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
        seeds = [seeds::MACHINE, machine.market.as_ref(), owner.key().as_ref(), &machine.id.to_le_bytes()],
        bump = machine.bump,
        has_one = owner,
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
