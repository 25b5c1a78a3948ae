use anchor_lang::prelude::*;
use anchor_spl::token::{Mint, Token, TokenAccount};

use crate::events::{MarketInitialized, MarketUpdated};
use crate::state::{seeds, Market, MarketParams};

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Debug)]
pub struct InitMarketArgs {
    pub id: u64,
    pub params: MarketParams,
}

#[derive(Accounts)]
#[instruction(args: InitMarketArgs)]
pub struct InitMarket<'info> {
    #[account(mut)]
    pub authority: Signer<'info>,

    #[account(
        init,
        payer = authority,
        space = 8 + Market::INIT_SPACE,
        seeds = [seeds::MARKET, authority.key().as_ref(), &args.id.to_le_bytes()],
        bump,
    )]
    pub market: Box<Account<'info, Market>>,

    pub stake_mint: Box<Account<'info, Mint>>,
    pub payment_mint: Box<Account<'info, Mint>>,

    #[account(
        init,
        payer = authority,
        seeds = [seeds::STAKE_VAULT, market.key().as_ref()],
        bump,
        token::mint = stake_mint,
        token::authority = market,
    )]
    pub stake_vault: Box<Account<'info, TokenAccount>>,

    #[account(
        init,
        payer = authority,
        seeds = [seeds::PAYMENT_VAULT, market.key().as_ref()],
        bump,
        token::mint = payment_mint,
        token::authority = market,
    )]
    pub payment_vault: Box<Account<'info, TokenAccount>>,

    #[account(token::mint = payment_mint)]
    pub treasury: Box<Account<'info, TokenAccount>>,

    /// Receives slashed host stake.
    #[account(token::mint = stake_mint)]
    pub stake_treasury: Box<Account<'info, TokenAccount>>,

    pub token_program: Program<'info, Token>,
    pub system_program: Program<'info, System>,
}

impl InitMarket<'_> {
    fn validate(&self, args: &InitMarketArgs) -> Result<()> {
        args.params.validate()
    }

    #[access_control(ctx.accounts.validate(&args))]
    pub fn init_market(ctx: Context<Self>, args: InitMarketArgs) -> Result<()> {
        let market = &mut ctx.accounts.market;
        market.set_inner(Market {
            authority: ctx.accounts.authority.key(),
            id: args.id,
            stake_mint: ctx.accounts.stake_mint.key(),
            payment_mint: ctx.accounts.payment_mint.key(),
            stake_vault: ctx.accounts.stake_vault.key(),
            payment_vault: ctx.accounts.payment_vault.key(),
            treasury: ctx.accounts.treasury.key(),
            stake_treasury: ctx.accounts.stake_treasury.key(),
            params: args.params,
            demand_bps: 0,
            queue_book: Pubkey::default(),
            gpus_offered: 0,
            gpus_waiting: 0,
            next_bid_seq: 0,
            total_escrow: 0,
            total_staked: 0,
            total_pending_unstake: 0,
            created_at: Clock::get()?.unix_timestamp,
            bump: ctx.bumps.market,
            stake_vault_bump: ctx.bumps.stake_vault,
            payment_vault_bump: ctx.bumps.payment_vault,
        });
        market.invariant()?;
        emit!(MarketInitialized {
            market: market.key(),
            authority: market.authority,
            stake_mint: market.stake_mint,
            payment_mint: market.payment_mint,
        });
        Ok(())
    }
}

#[derive(Accounts)]
pub struct UpdateMarket<'info> {
    pub authority: Signer<'info>,

    #[account(mut, has_one = authority @ crate::errors::MarketError::NotMarketAuthority)]
    pub market: Box<Account<'info, Market>>,
}

impl UpdateMarket<'_> {
    /// Replaces the market's parameters; the event carries the old and the new values.
    pub fn update_market(ctx: Context<Self>, params: MarketParams) -> Result<()> {
        let market = &mut ctx.accounts.market;
        let old = market.params;
        market.params = params;
        market.invariant()?;
        emit!(MarketUpdated {
            market: market.key(),
            old,
            new: params,
        });
        Ok(())
    }
}
