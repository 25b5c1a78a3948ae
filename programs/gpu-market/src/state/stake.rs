use anchor_lang::prelude::*;

use crate::errors::MarketError;

/// One owner's stake in one market.
#[account]
#[derive(InitSpace, Debug, PartialEq, Eq)]
pub struct StakeAccount {
    pub market: Pubkey,
    pub owner: Pubkey,
    /// Tokens that count in the owner's bid scores.
    pub amount: u64,
    /// Tokens asked back: they no longer count, and can be withdrawn from `unlocks_at` on.
    pub pending_unstake: u64,
    /// Unix time from which `pending_unstake` can be withdrawn (0 when nothing is pending).
    pub unlocks_at: i64,
    /// Waiting bids whose score was computed from this stake. While any waits, the stake cannot
    /// be asked back: a score cannot be bought with stake that leaves right after.
    pub open_bids: u32,
    /// GPUs the owner holds in running leases (for the anti-monopoly cap).
    pub gpus_held: u32,
    /// Machines the owner has registered in the market.
    pub machines: u32,
    /// The counting stake those machines bond: each its `Machine::bond` (the market's
    /// `min_host_stake` when it was registered) until it is closed (which its leases must all
    /// have settled for): a host cannot take back the stake its leases could be slashed from.
    pub bonded: u64,
    /// Escrow refunded to the owner but held in the market's payment vault, because no token
    /// account of the owner was given when the refund was made (it may have closed it): the
    /// owner takes it with `claim_refunds`. Payment-token base units.
    pub refunds_due: u64,
    /// The last time the owner signed an instruction with this stake account (opened or added
    /// stake, asked it back, withdrew, placed or cancelled a bid, ended a lease, claimed
    /// refunds): `gpu-market market inactive` shows owners quiet for long.
    pub last_active: i64,
    pub bump: u8,
}

impl StakeAccount {
    /// Records that the owner acted at `now`.
    pub fn touch(&mut self, now: i64) {
        self.last_active = self.last_active.max(now);
    }

    /// Moves `amount` from counting stake to the cooldown; a new request restarts the cooldown
    /// for everything pending, so a cooldown can never be shortened by splitting requests. What
    /// the owner's machines bond (`bonded`) stays.
    pub fn request_unstake(&mut self, amount: u64, now: i64, cooldown_secs: u32) -> Result<()> {
        require!(amount > 0, MarketError::ZeroAmount);
        require!(self.open_bids == 0, MarketError::StakeLockedByBids);
        require!(amount <= self.amount, MarketError::InsufficientStake);
        require!(
            self.amount - amount >= self.bonded,
            MarketError::HostStakeBonded
        );
        self.amount -= amount;
        self.pending_unstake = self
            .pending_unstake
            .checked_add(amount)
            .ok_or(MarketError::Overflow)?;
        self.unlocks_at = now
            .checked_add(cooldown_secs as i64)
            .ok_or(MarketError::Overflow)?;
        Ok(())
    }

    /// Bonds a new machine's `bond`; refused unless the counting stake covers every bond.
    pub fn bond(&mut self, bond: u64) -> Result<()> {
        self.machines = self.machines.checked_add(1).ok_or(MarketError::Overflow)?;
        // Past u64::MAX no stake could cover it.
        let bonded = self.bonded.checked_add(bond);
        self.bonded = bonded.ok_or(MarketError::HostStakeTooLow)?;
        require!(self.amount >= self.bonded, MarketError::HostStakeTooLow);
        Ok(())
    }

    /// Releases a closed machine's `bond`.
    pub fn unbond(&mut self, bond: u64) {
        self.machines = self.machines.saturating_sub(1);
        self.bonded = self.bonded.saturating_sub(bond);
    }

    /// Takes a slash of `share_bps` of a machine's `bond`, at most `value_cap`
    /// (`settlement::slash_amount`), from everything staked (counting first, then pending);
    /// returns the amounts taken from each.
    pub fn slash(
        &mut self,
        bond: u64,
        share_bps: u64,
        value_cap: Option<u64>,
    ) -> Result<(u64, u64)> {
        let total = self
            .amount
            .checked_add(self.pending_unstake)
            .ok_or(MarketError::Overflow)?;
        let take = gpu_market_core::settlement::slash_amount(bond, total, share_bps, value_cap)
            .map_err(MarketError::from)?;
        let from_amount = take.min(self.amount);
        let from_pending = take - from_amount;
        self.amount -= from_amount;
        self.pending_unstake -= from_pending;
        Ok((from_amount, from_pending))
    }

    /// Takes everything whose cooldown has passed; returns the amount to pay out.
    pub fn withdraw(&mut self, now: i64) -> Result<u64> {
        require!(self.pending_unstake > 0, MarketError::NothingToWithdraw);
        require!(now >= self.unlocks_at, MarketError::CooldownNotOver);
        let amount = self.pending_unstake;
        self.pending_unstake = 0;
        self.unlocks_at = 0;
        Ok(amount)
    }
}
