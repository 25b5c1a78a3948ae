use anchor_lang::prelude::*;
use anchor_spl::token::{self, Mint, Token, TokenAccount, TransferChecked};

use crate::errors::MarketError;
use crate::events::HostSlashed;
use crate::state::{Machine, Market, StakeAccount};

#[derive(Accounts)]
pub struct Slash<'info> {
    /// Anyone: slashing follows from the evidence on the machine, not from a decision.
    pub signer: Signer<'info>,

    #[account(mut, has_one = stake_mint, has_one = stake_vault, has_one = stake_treasury)]
    pub market: Box<Account<'info, Market>>,

    #[account(mut, has_one = market)]
    pub machine: Box<Account<'info, Machine>>,

    #[account(
        mut,
        constraint = host_stake.market == market.key()
            && host_stake.owner == machine.owner @ MarketError::WrongStakeAccount,
    )]
    pub host_stake: Box<Account<'info, StakeAccount>>,

    pub stake_mint: Box<Account<'info, Mint>>,

    #[account(mut)]
    pub stake_vault: Box<Account<'info, TokenAccount>>,

    #[account(mut)]
    pub stake_treasury: Box<Account<'info, TokenAccount>>,

    pub token_program: Program<'info, Token>,
}

impl Slash<'_> {
    /// Takes `slash_bps` of the host's stake to the stake treasury once the machine has
    /// `slash_evidence` missed intervals or power-limit violations not yet used by a slash;
    /// the evidence is used up.
    pub fn slash(ctx: Context<Self>) -> Result<()> {
        let a = &mut *ctx.accounts;
        let params = a.market.params;
        let evidence = params.slash_evidence as u32;
        let machine = &mut a.machine;
        if machine.unslashed_missed >= evidence {
            machine.unslashed_missed -= evidence;
        } else if machine.unslashed_violations >= evidence {
            machine.unslashed_violations -= evidence;
        } else {
            return err!(MarketError::NoSlashingEvidence);
        }
        let (from_amount, from_pending) = a.host_stake.slash(params.slash_bps)?;
        let market = &mut a.market;
        market.total_staked = market
            .total_staked
            .checked_sub(from_amount)
            .ok_or(MarketError::Overflow)?;
        market.total_pending_unstake = market
            .total_pending_unstake
            .checked_sub(from_pending)
            .ok_or(MarketError::Overflow)?;
        let amount = from_amount + from_pending;
        emit!(HostSlashed {
            machine: machine.key(),
            owner: machine.owner,
            amount,
        });
        if amount == 0 {
            return Ok(());
        }
        let market_info = market.to_account_info();
        market.with_signer(|signer| {
            token::transfer_checked(
                CpiContext::new_with_signer(
                    a.token_program.key(),
                    TransferChecked {
                        from: a.stake_vault.to_account_info(),
                        mint: a.stake_mint.to_account_info(),
                        to: a.stake_treasury.to_account_info(),
                        authority: market_info,
                    },
                    signer,
                ),
                amount,
                a.stake_mint.decimals,
            )
        })
    }
}
