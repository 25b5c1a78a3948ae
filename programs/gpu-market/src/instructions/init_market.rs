use anchor_lang::prelude::*;
use anchor_spl::token::{Mint, Token, TokenAccount};
use gpu_market_core::score::Weights;

use crate::errors::MarketError;
use crate::events::MarketInitialized;
use crate::state::{seeds, Market};

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Debug)]
pub struct InitMarketArgs {
    pub id: u64,
    pub billing_interval_secs: u32,
    pub protocol_fee_bps: u16,
    pub unstake_cooldown_secs: u32,
    /// `None` takes the defaults: stake 4000, urgency 3000, complexity 3000.
    pub weights_bps: Option<[u16; 3]>,
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
    pub market: Account<'info, Market>,

    pub stake_mint: Account<'info, Mint>,
    pub payment_mint: Account<'info, Mint>,

    #[account(
        init,
        payer = authority,
        seeds = [seeds::STAKE_VAULT, market.key().as_ref()],
        bump,
        token::mint = stake_mint,
        token::authority = market,
    )]
    pub stake_vault: Account<'info, TokenAccount>,

    #[account(
        init,
        payer = authority,
        seeds = [seeds::PAYMENT_VAULT, market.key().as_ref()],
        bump,
        token::mint = payment_mint,
        token::authority = market,
    )]
    pub payment_vault: Account<'info, TokenAccount>,

    #[account(token::mint = payment_mint)]
    pub treasury: Account<'info, TokenAccount>,

    pub token_program: Program<'info, Token>,
    pub system_program: Program<'info, System>,
}

impl InitMarket<'_> {
    fn validate(&self, args: &InitMarketArgs) -> Result<()> {
        require!(
            args.billing_interval_secs > 0,
            MarketError::InvalidBillingInterval
        );
        require!(
            args.protocol_fee_bps as u64 <= gpu_market_core::BPS,
            MarketError::InvalidFee
        );
        Ok(())
    }

    #[access_control(ctx.accounts.validate(&args))]
    pub fn init_market(ctx: Context<Self>, args: InitMarketArgs) -> Result<()> {
        let weights = match args.weights_bps {
            Some([stake_bps, urgency_bps, complexity_bps]) => Weights {
                stake_bps,
                urgency_bps,
                complexity_bps,
            },
            None => Weights::DEFAULT,
        };
        let market = &mut ctx.accounts.market;
        market.set_inner(Market {
            authority: ctx.accounts.authority.key(),
            id: args.id,
            stake_mint: ctx.accounts.stake_mint.key(),
            payment_mint: ctx.accounts.payment_mint.key(),
            stake_vault: ctx.accounts.stake_vault.key(),
            payment_vault: ctx.accounts.payment_vault.key(),
            treasury: ctx.accounts.treasury.key(),
            billing_interval_secs: args.billing_interval_secs,
            protocol_fee_bps: args.protocol_fee_bps,
            unstake_cooldown_secs: args.unstake_cooldown_secs,
            weight_stake_bps: weights.stake_bps,
            weight_urgency_bps: weights.urgency_bps,
            weight_complexity_bps: weights.complexity_bps,
            total_staked: 0,
            total_pending_unstake: 0,
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
