use anchor_lang::prelude::*;
use anchor_spl::token::{Mint, Token, TokenAccount};

use crate::errors::MarketError;
use crate::events::{RefundsClaimed, Staked};
use crate::instructions::{pay_in, pay_out};
use crate::state::{seeds, Market, StakeAccount};

#[derive(Accounts)]
pub struct OpenStake<'info> {
    #[account(mut)]
    pub owner: Signer<'info>,

    pub market: Box<Account<'info, Market>>,

    /// Created once per (market, owner); its bump is searched here, once, and stored.
    #[account(
        init,
        payer = owner,
        space = 8 + StakeAccount::INIT_SPACE,
        seeds = [seeds::STAKE, market.key().as_ref(), owner.key().as_ref()],
        bump,
    )]
    pub stake: Account<'info, StakeAccount>,

    pub system_program: Program<'info, System>,
}

impl OpenStake<'_> {
    pub fn open_stake(ctx: Context<Self>) -> Result<()> {
        let stake = &mut ctx.accounts.stake;
        stake.market = ctx.accounts.market.key();
        stake.owner = ctx.accounts.owner.key();
        stake.bump = ctx.bumps.stake;
        stake.touch(Clock::get()?.unix_timestamp);
        Ok(())
    }
}

#[derive(Accounts)]
pub struct Stake<'info> {
    #[account(mut)]
    pub owner: Signer<'info>,

    #[account(
        mut, dup,
        constraint = market.stake_mint == stake_mint.key() @ ErrorCode::ConstraintHasOne,
        constraint = market.stake_vault == stake_vault.key() @ ErrorCode::ConstraintHasOne,
    )]
    pub market: Box<Account<'info, Market>>,

    #[account(
        mut, dup,
        seeds = [seeds::STAKE, market.key().as_ref(), owner.key().as_ref()],
        bump = stake.bump,
    )]
    pub stake: Account<'info, StakeAccount>,

    pub stake_mint: Account<'info, Mint>,

    #[account(mut, dup, token::mint = stake_mint, token::authority = owner)]
    pub owner_tokens: Account<'info, TokenAccount>,

    #[account(mut, dup)]
    pub stake_vault: Account<'info, TokenAccount>,

    pub token_program: Program<'info, Token>,
}

impl Stake<'_> {
    fn validate(&self, amount: u64) -> Result<()> {
        require!(amount > 0, MarketError::ZeroAmount);
        Ok(())
    }

    #[access_control(ctx.accounts.validate(amount))]
    pub fn stake(ctx: Context<Self>, amount: u64) -> Result<()> {
        let a = &ctx.accounts;
        pay_in(
            a.owner_tokens.to_account_info(),
            a.stake_vault.to_account_info(),
            a.owner.to_account_info(),
            &a.stake_mint,
            &a.token_program,
            amount,
        )?;

        let stake = &mut ctx.accounts.stake;
        stake.touch(Clock::get()?.unix_timestamp);
        stake.amount = stake
            .amount
            .checked_add(amount)
            .ok_or(MarketError::Overflow)?;
        let market = &mut ctx.accounts.market;
        market.total_staked = market
            .total_staked
            .checked_add(amount)
            .ok_or(MarketError::Overflow)?;
        emit!(Staked {
            market: market.key(),
            owner: stake.owner,
            amount,
            total: stake.amount,
        });
        Ok(())
    }
}

#[derive(Accounts)]
pub struct ClaimRefunds<'info> {
    pub owner: Signer<'info>,

    #[account(
        mut, dup,
        constraint = market.payment_mint == payment_mint.key() @ ErrorCode::ConstraintHasOne,
        constraint = market.payment_vault == payment_vault.key() @ ErrorCode::ConstraintHasOne,
    )]
    pub market: Box<Account<'info, Market>>,

    #[account(
        mut, dup,
        seeds = [seeds::STAKE, market.key().as_ref(), owner.key().as_ref()],
        bump = stake.bump,
        has_one = owner,
        has_one = market,
    )]
    pub stake: Box<Account<'info, StakeAccount>>,

    pub payment_mint: Box<Account<'info, Mint>>,

    /// A payment-token account of the owner: receives every refund due.
    #[account(mut, dup, token::mint = payment_mint, token::authority = owner)]
    pub owner_tokens: Box<Account<'info, TokenAccount>>,

    #[account(mut, dup)]
    pub payment_vault: Box<Account<'info, TokenAccount>>,

    pub token_program: Program<'info, Token>,
}

impl ClaimRefunds<'_> {
    /// Pays the owner every refund its stake account holds (`refunds_due`): escrow refunded
    /// while no token account of the owner was given.
    pub fn claim_refunds(ctx: Context<Self>) -> Result<()> {
        let a = &mut *ctx.accounts;
        a.stake.touch(Clock::get()?.unix_timestamp);
        let amount = a.market.take_refunds(&mut a.stake)?;
        pay_out(
            &a.market,
            a.market.to_account_info(),
            a.payment_vault.to_account_info(),
            &a.payment_mint,
            a.owner_tokens.to_account_info(),
            &a.token_program,
            amount,
        )?;
        emit!(RefundsClaimed {
            market: a.market.key(),
            owner: a.owner.key(),
            amount,
        });
        Ok(())
    }
}
