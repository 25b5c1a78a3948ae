use anchor_lang::prelude::*;

/// One owner's stake in one market.
#[account]
#[derive(InitSpace, Debug)]
pub struct StakeAccount {
    pub market: Pubkey,
    pub owner: Pubkey,
    /// Tokens that count in the owner's bid scores.
    pub amount: u64,
    pub bump: u8,
}
