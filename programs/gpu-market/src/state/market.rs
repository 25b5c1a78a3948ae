use anchor_lang::prelude::*;
use gpu_market_core::score::Weights;

use crate::errors::MarketError;
use crate::state::seeds;

/// A market: who runs it, which tokens it uses, and the rules of its auction.
#[account]
#[derive(InitSpace, Debug)]
pub struct Market {
    pub authority: Pubkey,
    /// Chosen by the creator so one authority can run several markets.
    pub id: u64,
    pub stake_mint: Pubkey,
    pub payment_mint: Pubkey,
    pub stake_vault: Pubkey,
    pub payment_vault: Pubkey,
    /// Token account of the payment mint that receives the protocol fee.
    pub treasury: Pubkey,
    pub billing_interval_secs: u32,
    pub protocol_fee_bps: u16,
    pub unstake_cooldown_secs: u32,
    pub weight_stake_bps: u16,
    pub weight_urgency_bps: u16,
    pub weight_complexity_bps: u16,
    /// Tokens staked (and not asked back) in this market.
    pub total_staked: u64,
    /// Tokens asked back and still in the stake vault, waiting for their cooldown.
    pub total_pending_unstake: u64,
    pub bump: u8,
    pub stake_vault_bump: u8,
    pub payment_vault_bump: u8,
}

impl Market {
    /// Signs a CPI as the market PDA, which owns the vaults.
    pub fn with_signer<T>(&self, f: impl FnOnce(&[&[&[u8]]]) -> T) -> T {
        let id = self.id.to_le_bytes();
        let bump = [self.bump];
        f(&[&[seeds::MARKET, self.authority.as_ref(), &id, &bump]])
    }

    pub fn weights(&self) -> Weights {
        Weights {
            stake_bps: self.weight_stake_bps,
            urgency_bps: self.weight_urgency_bps,
            complexity_bps: self.weight_complexity_bps,
        }
    }

    /// Holds after every instruction that changes the market.
    pub fn invariant(&self) -> Result<()> {
        require!(self.weights().is_valid(), MarketError::InvalidWeights);
        require!(
            self.billing_interval_secs > 0,
            MarketError::InvalidBillingInterval
        );
        require!(
            self.protocol_fee_bps as u64 <= gpu_market_core::BPS,
            MarketError::InvalidFee
        );
        Ok(())
    }
}
