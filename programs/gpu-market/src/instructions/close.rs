//! Giving rent back: accounts whose work is over close, and their owners get the lamports.

use anchor_lang::prelude::*;

use crate::errors::MarketError;
use crate::instructions::slash_evidence;
use crate::state::{seeds, BidBook, Machine, MachineStatus, Market, StakeAccount};

#[derive(Accounts)]
pub struct CloseStake<'info> {
    #[account(mut)]
    pub owner: Signer<'info>,

    /// Only an empty stake: nothing staked or pending, no waiting bid, no GPU held, no machine
    /// registered, and no refund left to claim (closing would strand it in the vault: claim it
    /// first).
    #[account(
        mut, dup,
        close = owner,
        has_one = owner,
        constraint = stake.amount == 0
            && stake.pending_unstake == 0
            && stake.open_bids == 0
            && stake.gpus_held == 0
            && stake.machines == 0 @ MarketError::StakeNotEmpty,
        constraint = stake.refunds_due == 0 @ MarketError::RefundsDue,
    )]
    pub stake: Box<Account<'info, StakeAccount>>,
}

impl CloseStake<'_> {
    pub fn close_stake(_ctx: Context<Self>) -> Result<()> {
        Ok(())
    }
}

#[derive(Accounts)]
pub struct CloseMachine<'info> {
    #[account(mut)]
    pub owner: Signer<'info>,

    /// A retired machine with no lease left and its pay claimed.
    #[account(
        mut, dup,
        close = owner,
        constraint = machine.owner == owner.key() @ ErrorCode::ConstraintHasOne,
        constraint = machine.status == MachineStatus::Retired @ MarketError::MachineNotRetired,
        constraint = machine.leases == 0 @ MarketError::MachineBusy,
        constraint = machine.unclaimed_pay == 0 && machine.unclaimed_fee == 0 @ MarketError::PayUnclaimed,
    )]
    pub machine: Box<Account<'info, Machine>>,

    /// The machine's market: evidence left on the machine is slashed before it closes.
    #[account(mut, dup, address = machine.market)]
    pub market: Box<Account<'info, Market>>,

    /// The machine's spot book, when it has one: it closes with the machine, once empty.
    #[account(mut, close = owner, address = machine.spot_book @ MarketError::WrongBook)]
    pub spot_book: Option<AccountLoader<'info, BidBook>>,

    /// The owner's stake: the machine's bond is released.
    #[account(
        mut, dup,
        seeds = [seeds::STAKE, machine.data.market.as_ref(), owner.key().as_ref()],
        bump = host_stake.bump,
    )]
    pub host_stake: Box<Account<'info, StakeAccount>>,
}

impl CloseMachine<'_> {
    pub fn close_machine(ctx: Context<Self>) -> Result<()> {
        let now = Clock::get()?.unix_timestamp;
        let a = &mut *ctx.accounts;
        // Enough current evidence against the machine is slashed now: closing it must not
        // take the evidence away (issue 30, fault 7).
        let key = a.machine.key();
        slash_evidence(&mut a.market, &mut a.machine, key, &mut a.host_stake, now)?;
        a.host_stake.unbond(a.machine.bond);
        let a = &ctx.accounts;
        match &a.spot_book {
            Some(book) => require!(book.load()?.is_empty(), MarketError::BookNotEmpty),
            // Its rent would be stranded: the book can only close with its machine.
            None => require_keys_eq!(
                a.machine.spot_book,
                Pubkey::default(),
                MarketError::WrongBook
            ),
        }
        Ok(())
    }
}

#[derive(Accounts)]
pub struct CloseQueueBook<'info> {
    #[account(mut)]
    pub authority: Signer<'info>,

    #[account(
        mut, dup,
        constraint = market.authority == authority.key() @ MarketError::NotMarketAuthority,
    )]
    pub market: Box<Account<'info, Market>>,

    #[account(mut, close = authority, address = market.queue_book @ MarketError::WrongBook)]
    pub book: AccountLoader<'info, BidBook>,
}

impl CloseQueueBook<'_> {
    /// Closes the market's empty queue book (a new one can be opened with `init_queue_book`).
    pub fn close_queue_book(ctx: Context<Self>) -> Result<()> {
        require!(
            ctx.accounts.book.load()?.is_empty(),
            MarketError::BookNotEmpty
        );
        ctx.accounts.market.queue_book = Pubkey::default();
        Ok(())
    }
}
