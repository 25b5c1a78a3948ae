use anchor_lang::prelude::*;
use gpu_market_core::settlement;

use crate::errors::MarketError;
use crate::events::HostSlashed;
use crate::state::{Machine, Market, StakeAccount};

#[derive(Accounts)]
pub struct Slash<'info> {
    /// Anyone: slashing follows from the evidence on the machine, not from a decision.
    pub signer: Signer<'info>,

    #[account(mut, dup)]
    pub market: Box<Account<'info, Market>>,

    #[account(mut, dup, constraint = machine.market == market.key() @ ErrorCode::ConstraintHasOne)]
    pub machine: Box<Account<'info, Machine>>,

    #[account(
        mut, dup,
        constraint = host_stake.market == market.key()
            && host_stake.owner == machine.owner @ MarketError::WrongStakeAccount,
    )]
    pub host_stake: Box<Account<'info, StakeAccount>>,
}

impl Slash<'_> {
    /// Uses up every piece of current evidence on the machine (intervals its proofs skipped,
    /// proofs over the agreed power limit) in one slash: `slash_bps` of the machine's bond (its
    /// part of the owner's stake, `min_host_stake`), however much evidence one window holds.
    /// Less than `slash_evidence` pieces, or evidence older than the market's window, slashes
    /// nothing. The stake is kept for the stake treasury (`collect_fees`); silence a client
    /// proves is slashed by `reclaim_escrow`, with half to that client.
    pub fn slash(ctx: Context<Self>) -> Result<()> {
        let now = Clock::get()?.unix_timestamp;
        let a = &mut *ctx.accounts;
        let key = a.machine.key();
        let slashed = slash_evidence(&mut a.market, &mut a.machine, key, &mut a.host_stake, now)?;
        require!(slashed, MarketError::NoSlashingEvidence);
        Ok(())
    }
}

/// The slash of `slash`, wherever the evidence is used up (`slash`, and `close_machine`, which
/// may not take unslashed evidence away with the machine): when `machine` (at `machine_key`)
/// holds enough current evidence, takes one share of its bond from `host_stake` for the stake
/// treasury, clears the evidence and says so; else changes nothing.
pub fn slash_evidence(
    market: &mut Market,
    machine: &mut Machine,
    machine_key: Pubkey,
    host_stake: &mut StakeAccount,
    now: i64,
) -> Result<bool> {
    let params = market.params;
    let Some(units) = machine.slashable_evidence(now, market) else {
        return Ok(false);
    };
    machine.expire_evidence(now, market);
    machine.unslashed_missed = 0;
    machine.unslashed_violations = 0;
    // One window of evidence takes one share, however many pieces it holds.
    let units = units.min(params.slash_evidence as u32);
    let share = settlement::slash_share_bps(
        params.slash_bps as u64,
        units as u64,
        params.slash_evidence as u64,
    )
    .map_err(MarketError::from)?;
    let (from_amount, from_pending) = host_stake.slash(machine.bond, share, None)?;
    market.keep_slashed(from_amount, from_pending)?;
    emit!(HostSlashed {
        machine: machine_key,
        owner: machine.owner,
        amount: from_amount + from_pending,
        to_client: 0,
    });
    Ok(true)
}
