use anchor_lang::prelude::*;
use anchor_spl::token::{self, Burn, Mint, Token, TokenAccount};

use crate::errors::MarketError;
use crate::events::{
    FeesCollected, GpuClassNamed, MarketInitialized, MarketUpdateApplied, MarketUpdated,
    RegionAdded,
};
use crate::instructions::pay_out;
use crate::state::{seeds, Market, MarketData, MarketParams, CLASS_NAME_LEN, REGION_LEN};

/// `init_market(id, params)`: `id` tells one authority's markets apart. A top-level argument, so
/// that a client generated from the IDL derives the market's address from it.
#[derive(Accounts)]
#[instruction(id: u64)]
pub struct InitMarket<'info> {
    #[account(mut)]
    pub authority: Signer<'info>,

    #[account(
        init,
        payer = authority,
        space = 8 + Market::INIT_SPACE,
        seeds = [seeds::MARKET, authority.key().as_ref(), &id.to_le_bytes()],
        bump,
    )]
    pub market: Box<Account<'info, Market>>,

    /// Mints without a freeze authority: nobody can freeze the market's vaults and stop every
    /// payment and withdrawal.
    #[account(constraint = stake_mint.freeze_authority.is_none() @ MarketError::MintCanFreeze)]
    pub stake_mint: Box<Account<'info, Mint>>,
    #[account(constraint = payment_mint.freeze_authority.is_none() @ MarketError::MintCanFreeze)]
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
    #[access_control(params.validate())]
    pub fn init_market(ctx: Context<Self>, id: u64, params: MarketParams) -> Result<()> {
        let market = &mut ctx.accounts.market;
        market.set_inner(Market {
            data: MarketData {
                authority: ctx.accounts.authority.key(),
                id,
                stake_mint: ctx.accounts.stake_mint.key(),
                payment_mint: ctx.accounts.payment_mint.key(),
                stake_vault: ctx.accounts.stake_vault.key(),
                payment_vault: ctx.accounts.payment_vault.key(),
                treasury: ctx.accounts.treasury.key(),
                stake_treasury: ctx.accounts.stake_treasury.key(),
                created_at: Clock::get()?.unix_timestamp,
                bump: ctx.bumps.market,
                stake_vault_bump: ctx.bumps.stake_vault,
                payment_vault_bump: ctx.bumps.payment_vault,
                ..Market::opening(params).data
            },
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

    #[account(
        mut, dup,
        constraint = market.authority == authority.key() @ MarketError::NotMarketAuthority,
    )]
    pub market: Box<Account<'info, Market>>,
}

impl UpdateMarket<'_> {
    /// Schedules new parameters: they apply after the market's notice period (the event says
    /// when), so stakers and bidders can leave first. A change already due applies now; a later
    /// call replaces a change still waiting.
    pub fn update_market(ctx: Context<Self>, params: MarketParams) -> Result<()> {
        let now = Clock::get()?.unix_timestamp;
        params.validate()?;
        let market = &mut ctx.accounts.market;
        market.apply_due_update(now);
        let effective_at = now
            .checked_add(market.notice_secs())
            .ok_or(MarketError::Overflow)?;
        market.pending_params = params;
        market.pending_at = effective_at;
        emit!(MarketUpdated {
            market: market.key(),
            old: market.params,
            new: params,
            effective_at,
        });
        Ok(())
    }
}

impl UpdateMarket<'_> {
    /// Lists a region machines may declare and bids may name. At once, as it takes nothing
    /// from anyone; a listed region stays, in its place, for the life of the market (book
    /// entries keep regions by their index in the table).
    pub fn add_region(ctx: Context<Self>, region: [u8; REGION_LEN]) -> Result<()> {
        let market = &mut ctx.accounts.market;
        market.add_region(region)?;
        emit!(RegionAdded {
            market: market.key(),
            region,
        });
        Ok(())
    }

    /// Names GPU class `class` by its model (e.g. H100), at once and once: what clients bid for
    /// it by. A class keeps its name for the life of the market, so a bid for "H100" never
    /// comes to mean another model.
    pub fn name_gpu_class(ctx: Context<Self>, class: u8, name: [u8; CLASS_NAME_LEN]) -> Result<()> {
        let market = &mut ctx.accounts.market;
        market.name_gpu_class(class, name)?;
        emit!(GpuClassNamed {
            market: market.key(),
            class,
            name,
        });
        Ok(())
    }
}

#[derive(Accounts)]
pub struct ApplyMarketUpdate<'info> {
    /// Anyone: the change was announced and its notice is over.
    pub signer: Signer<'info>,

    #[account(mut, dup)]
    pub market: Box<Account<'info, Market>>,
}

impl ApplyMarketUpdate<'_> {
    pub fn apply_market_update(ctx: Context<Self>) -> Result<()> {
        let now = Clock::get()?.unix_timestamp;
        let market = &mut ctx.accounts.market;
        require!(market.apply_due_update(now), MarketError::NoUpdateDue);
        market.invariant()?;
        emit!(MarketUpdateApplied {
            market: market.key(),
            params: market.params,
        });
        Ok(())
    }
}

#[derive(Accounts)]
pub struct CollectFees<'info> {
    /// Anyone: the tokens can only go to the market's own treasury accounts.
    pub signer: Signer<'info>,

    #[account(
        mut, dup,
        constraint = market.payment_mint == payment_mint.key() @ ErrorCode::ConstraintHasOne,
        constraint = market.stake_mint == stake_mint.key() @ ErrorCode::ConstraintHasOne,
        constraint = market.payment_vault == payment_vault.key() @ ErrorCode::ConstraintHasOne,
        constraint = market.stake_vault == stake_vault.key() @ ErrorCode::ConstraintHasOne,
        constraint = market.treasury == treasury.key() @ ErrorCode::ConstraintHasOne,
        constraint = market.stake_treasury == stake_treasury.key() @ ErrorCode::ConstraintHasOne,
    )]
    pub market: Box<Account<'info, Market>>,

    /// Its supply falls by what is burnt.
    #[account(mut, dup)]
    pub payment_mint: Box<Account<'info, Mint>>,
    pub stake_mint: Box<Account<'info, Mint>>,

    #[account(mut, dup)]
    pub payment_vault: Box<Account<'info, TokenAccount>>,

    #[account(mut, dup)]
    pub stake_vault: Box<Account<'info, TokenAccount>>,

    #[account(mut, dup)]
    pub treasury: Box<Account<'info, TokenAccount>>,

    /// The treasury itself when both mints are one (`market init`'s default).
    #[account(mut, dup)]
    pub stake_treasury: Box<Account<'info, TokenAccount>>,

    pub token_program: Program<'info, Token>,
}

impl CollectFees<'_> {
    /// Moves the protocol fees and the slashed stake the market holds to its treasuries, and
    /// burns the urgency premiums and holding charges it holds (`burn_due`).
    pub fn collect_fees(ctx: Context<Self>) -> Result<()> {
        let a = &mut *ctx.accounts;
        let (fees, slashed, burned) = (a.market.fees_due, a.market.slashed_due, a.market.burn_due);
        a.market.fees_due = 0;
        a.market.slashed_due = 0;
        a.market.burn_due = 0;
        let market_info = a.market.to_account_info();
        pay_out(
            &a.market,
            market_info.clone(),
            a.payment_vault.to_account_info(),
            &a.payment_mint,
            a.treasury.to_account_info(),
            &a.token_program,
            fees,
        )?;
        pay_out(
            &a.market,
            market_info.clone(),
            a.stake_vault.to_account_info(),
            &a.stake_mint,
            a.stake_treasury.to_account_info(),
            &a.token_program,
            slashed,
        )?;
        if burned > 0 {
            a.market.with_signer(|signer| {
                token::burn(
                    CpiContext::new_with_signer(
                        a.token_program.key(),
                        Burn {
                            mint: a.payment_mint.to_account_info(),
                            from: a.payment_vault.to_account_info(),
                            authority: market_info,
                        },
                        signer,
                    ),
                    burned,
                )
            })?;
        }
        emit!(FeesCollected {
            market: a.market.key(),
            fees,
            slashed,
            burned,
        });
        Ok(())
    }
}
