use anchor_lang::prelude::*;

#[event]
pub struct MarketInitialized {
    pub market: Pubkey,
    pub authority: Pubkey,
    pub stake_mint: Pubkey,
    pub payment_mint: Pubkey,
}

#[event]
pub struct Staked {
    pub market: Pubkey,
    pub owner: Pubkey,
    pub amount: u64,
    pub total: u64,
}

#[event]
pub struct UnstakeRequested {
    pub market: Pubkey,
    pub owner: Pubkey,
    pub amount: u64,
    pub unlocks_at: i64,
}

#[event]
pub struct StakeWithdrawn {
    pub market: Pubkey,
    pub owner: Pubkey,
    pub amount: u64,
}
