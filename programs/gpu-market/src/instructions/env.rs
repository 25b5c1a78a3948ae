//! Sealed environments on chain: the bid's client stores its environment, sealed to each
//! machine that may run the bid, where the agents read it; nobody copies a file.

use anchor_lang::prelude::*;

use crate::errors::MarketError;
use crate::state::{seeds, Bid, SealedEnv};

/// `seal_env(recipient, sealed)`: `recipient` is the key that can open it, the agent key of a
/// machine that may run the bid; `sealed` is the envelope (`gpu_market_sdk::envelope`), at most
/// `SealedEnv::MAX_SEALED` bytes. Top-level arguments, so that a client generated from the IDL
/// derives the account's address from `recipient`.
#[derive(Accounts)]
#[instruction(recipient: Pubkey, sealed: Vec<u8>)]
pub struct SealEnv<'info> {
    #[account(mut)]
    pub client: Signer<'info>,

    #[account(constraint = bid.client == client.key() @ ErrorCode::ConstraintHasOne)]
    pub bid: Box<Account<'info, Bid>>,

    #[account(
        init,
        payer = client,
        space = SealedEnv::space(sealed.len().min(SealedEnv::MAX_SEALED)),
        seeds = [seeds::SEALED_ENV, bid.key().as_ref(), recipient.as_ref()],
        bump,
    )]
    pub sealed_env: Box<Account<'info, SealedEnv>>,

    pub system_program: Program<'info, System>,
}

impl SealEnv<'_> {
    /// Stores the bid's environment sealed to `recipient`, paid by the client. The program
    /// cannot read it; the agent checks what it opens against the bid's `env_hash`.
    pub fn seal_env(ctx: Context<Self>, recipient: Pubkey, sealed: Vec<u8>) -> Result<()> {
        require!(
            ctx.accounts.bid.env_hash != [0; 32],
            MarketError::NoEnvironment
        );
        require!(
            (1..=SealedEnv::MAX_SEALED).contains(&sealed.len()),
            MarketError::SealedEnvSize
        );
        ctx.accounts.sealed_env.set_inner(SealedEnv {
            market: ctx.accounts.bid.market,
            bid: ctx.accounts.bid.key(),
            client: ctx.accounts.client.key(),
            recipient,
            bump: ctx.bumps.sealed_env,
            sealed,
        });
        Ok(())
    }
}

#[derive(Accounts)]
pub struct CloseSealedEnv<'info> {
    /// The bid's client at any time; anyone once the bid is gone.
    pub signer: Signer<'info>,

    #[account(mut, dup, has_one = bid, has_one = client, close = client)]
    pub sealed_env: Box<Account<'info, SealedEnv>>,

    /// CHECK: the sealed environment's bid: only whether it still lives is read.
    pub bid: UncheckedAccount<'info>,

    /// CHECK: only receives the rent; its address is the sealed environment's client.
    #[account(mut)]
    pub client: UncheckedAccount<'info>,
}

impl CloseSealedEnv<'_> {
    /// Closes a sealed environment, its rent to the client. Once its bid is closed (ended,
    /// cancelled or pruned) nobody needs it, so anyone may close it.
    pub fn close_sealed_env(ctx: Context<Self>) -> Result<()> {
        let a = &ctx.accounts;
        let bid_lives = a.bid.owner == &crate::ID && !a.bid.data_is_empty();
        require!(
            a.signer.key() == a.client.key() || !bid_lives,
            MarketError::SealedEnvInUse
        );
        Ok(())
    }
}
