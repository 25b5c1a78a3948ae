use anchor_lang::prelude::*;
use anchor_spl::token::{self, Mint, Token, TokenAccount, TransferChecked};

use crate::errors::MarketError;
use crate::events::{StakeWithdrawn, UnstakeRequested};
use crate::state::{seeds, Market, StakeAccount};

#[derive(Accounts)]
pub struct RequestUnstake<'info> {
    pub owner: Signer<'info>,

    #[account(mut, dup)]
    pub market: Box<Account<'info, Market>>,

    #[account(
        mut, dup,
        seeds = [seeds::STAKE, market.key().as_ref(), owner.key().as_ref()],
        bump = stake.bump,
        has_one = owner,
        has_one = market,
    )]
    pub stake: Account<'info, StakeAccount>,
}

impl RequestUnstake<'_> {
    /// Stops `amount` counting in scores at once and starts the market's cooldown.
    pub fn request_unstake(ctx: Context<Self>, amount: u64) -> Result<()> {
        let now = Clock::get()?.unix_timestamp;
        let market = &mut ctx.accounts.market;
        let stake = &mut ctx.accounts.stake;
        stake.touch(now);
        stake.request_unstake(amount, now, market.params.unstake_cooldown_secs)?;
        market.total_staked = market
            .total_staked
            .checked_sub(amount)
            .ok_or(MarketError::Overflow)?;
        market.total_pending_unstake = market
            .total_pending_unstake
            .checked_add(amount)
            .ok_or(MarketError::Overflow)?;
        emit!(UnstakeRequested {
            market: market.key(),
            owner: stake.owner,
            amount,
            unlocks_at: stake.unlocks_at,
        });
        Ok(())
    }
}

#[derive(Accounts)]
pub struct WithdrawStake<'info> {
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
        has_one = owner,
        has_one = market,
    )]
    pub stake: Account<'info, StakeAccount>,

    pub stake_mint: Account<'info, Mint>,

    #[account(mut, dup, token::mint = stake_mint, token::authority = owner)]
    pub owner_tokens: Account<'info, TokenAccount>,

    #[account(mut, dup)]
    pub stake_vault: Account<'info, TokenAccount>,

    pub token_program: Program<'info, Token>,
}

impl WithdrawStake<'_> {
    /// Pays out everything whose cooldown has passed to the owner's token account.
    pub fn withdraw_stake(ctx: Context<Self>) -> Result<()> {
        let now = Clock::get()?.unix_timestamp;
        ctx.accounts.stake.touch(now);
        let amount = ctx.accounts.stake.withdraw(now)?;
        let market = &ctx.accounts.market;
        market.with_signer(|signer| {
            token::transfer_checked(
                CpiContext::new_with_signer(
                    ctx.accounts.token_program.key(),
                    TransferChecked {
                        from: ctx.accounts.stake_vault.to_account_info(),
                        mint: ctx.accounts.stake_mint.to_account_info(),
                        to: ctx.accounts.owner_tokens.to_account_info(),
                        authority: market.to_account_info(),
                    },
                    signer,
                ),
                amount,
                ctx.accounts.stake_mint.decimals,
            )
        })?;
        let market = &mut ctx.accounts.market;
        market.total_pending_unstake = market
            .total_pending_unstake
            .checked_sub(amount)
            .ok_or(MarketError::Overflow)?;
        emit!(StakeWithdrawn {
            market: market.key(),
            owner: ctx.accounts.stake.owner,
            amount,
        });
        Ok(())
    }
}
