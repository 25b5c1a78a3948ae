//! `boost_bid`: the client of a waiting queue bid pays an urgency premium after placing it, to
//! rank higher.

use anchor_lang::prelude::*;
use anchor_spl::token::{Mint, Token, TokenAccount};
use gpu_market_core::score;
use gpu_market_core::settlement::{escrow_for, spend_per_hour};

use crate::errors::MarketError;
use crate::events::BidBoosted;
use crate::instructions::{client_pays, load_book_mut};
use crate::state::{seeds, Bid, BidKind, BidStatus, BookKey, Market, StakeAccount};

#[derive(Accounts)]
pub struct BoostBid<'info> {
    pub client: Signer<'info>,

    #[account(
        mut, dup,
        constraint = market.payment_mint == payment_mint.key() @ ErrorCode::ConstraintHasOne,
        constraint = market.payment_vault == payment_vault.key() @ ErrorCode::ConstraintHasOne,
    )]
    pub market: Box<Account<'info, Market>>,

    #[account(
        mut, dup,
        constraint = bid.client == client.key() @ ErrorCode::ConstraintHasOne,
        constraint = bid.market == market.key() @ ErrorCode::ConstraintHasOne,
    )]
    pub bid: Box<Account<'info, Bid>>,

    /// The client's stake: the score counts it as it is now.
    #[account(
        seeds = [seeds::STAKE, market.key().as_ref(), client.key().as_ref()],
        bump = client_stake.bump,
    )]
    pub client_stake: Box<Account<'info, StakeAccount>>,

    /// The market's queue book, where the bid moves up.
    /// CHECK: its address is the market's queue book; `load_book_mut` checks its layout.
    #[account(mut, address = market.queue_book @ MarketError::WrongBook)]
    pub book: UncheckedAccount<'info>,

    pub payment_mint: Box<Account<'info, Mint>>,

    #[account(mut, dup, token::mint = payment_mint, token::authority = client)]
    pub client_tokens: Box<Account<'info, TokenAccount>>,

    #[account(mut, dup)]
    pub payment_vault: Box<Account<'info, TokenAccount>>,

    pub token_program: Program<'info, Token>,
}

impl BoostBid<'_> {
    /// Adds `premium` to a waiting queue bid's urgency premium (paid now and burnt, as at
    /// placement) and ranks the bid again: its score with the premium in all and its client's
    /// stake now, aged from when it was placed, as a bid placed then with that premium would
    /// rank. Refused, moving nothing, unless the bid ranks higher for it (the urgency part is
    /// full at the market's `urgency_premium_bps` of the run's escrow).
    pub fn boost_bid(ctx: Context<Self>, premium: u64) -> Result<()> {
        require!(premium > 0, MarketError::ZeroAmount);
        let a = &ctx.accounts;
        let bid = &a.bid;
        require!(bid.status == BidStatus::Open, MarketError::BidRunning);
        require!(bid.kind == BidKind::Queue, MarketError::NotQueueBid);
        let total = bid
            .urgency_premium
            .checked_add(premium)
            .ok_or(MarketError::Overflow)?;
        let (unit, gpus) = (bid.unit(), bid.total_gpus());
        let run_escrow = escrow_for(bid.price, unit, gpus, bid.max_duration_secs as u64)
            .map_err(MarketError::from)?;
        let spend = spend_per_hour(bid.price, unit, gpus).map_err(MarketError::from)?;
        let p = &a.market.params;
        let inputs = p.score_inputs(a.client_stake.amount, spend, run_escrow, total)?;
        let base = score::base_score(p.weights(), &inputs);
        let key = a
            .market
            .rank_key(base, bid.placed_at, bid.max_duration_secs);
        require!(key > bid.book_key, MarketError::NoHigherRank);
        // A new placement number, as a bid put back by failover gets: a machine's walk of the
        // book (`walk_book`) covers only entries placed before it began, so an entry it never
        // judged cannot move into what it covers. It breaks ties of rank only.
        let seq = a.market.next_bid_seq;
        let info = a.book.to_account_info();
        load_book_mut(&info)?
            .rekey(BookKey::new(bid.book_key, bid.seq), BookKey::new(key, seq))
            .map_err(MarketError::from)?;
        client_pays!(a, premium)?;
        let a = &mut *ctx.accounts;
        // Burnt, as the premium paid at placement: ranking first costs whoever asks.
        a.market.burn_due = a
            .market
            .burn_due
            .checked_add(premium)
            .ok_or(MarketError::Overflow)?;
        a.market.next_bid_seq = seq.checked_add(1).ok_or(MarketError::Overflow)?;
        let bid = &mut a.bid;
        bid.urgency_premium = total;
        bid.score = base;
        bid.book_key = key;
        bid.seq = seq;
        emit!(BidBoosted {
            bid: bid.key(),
            premium,
            urgency_premium: total,
            score: base,
        });
        Ok(())
    }
}
