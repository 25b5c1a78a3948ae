use anchor_lang::prelude::*;
use gpu_market_core::matching::{self, AssignError};

use crate::errors::MarketError;
use crate::events::LeaseStarted;
use crate::state::{
    seeds, Bid, BidBook, BidKind, BidStatus, BookKey, Freed, Lease, Machine, MachineStatus, Market,
    StakeAccount, MAX_GPUS,
};

#[derive(AnchorSerialize, AnchorDeserialize, Clone, Debug)]
pub struct AllocateArgs {
    /// The machine GPU that serves each of the bid's GPUs, in the bid's GPU order.
    pub gpus: Vec<u8>,
}

/// Remaining accounts: every bid ranked above `bid` in `book`, best first, each followed by its
/// client's stake account. The program checks that none of them fits the machine now.
#[derive(Accounts)]
pub struct Allocate<'info> {
    /// The machine's agent; pays the lease's rent and gets it back when the lease closes.
    #[account(mut)]
    pub agent: Signer<'info>,

    #[account(mut)]
    pub market: Box<Account<'info, Market>>,

    #[account(mut, has_one = market, has_one = agent @ MarketError::WrongAgent)]
    pub machine: Box<Account<'info, Machine>>,

    /// The market's queue book (queue bids) or the machine's spot book (spot bids).
    #[account(mut)]
    pub book: AccountLoader<'info, BidBook>,

    #[account(mut, has_one = market)]
    pub bid: Box<Account<'info, Bid>>,

    #[account(
        init,
        payer = agent,
        space = 8 + Lease::INIT_SPACE,
        seeds = [seeds::LEASE, bid.key().as_ref()],
        bump,
    )]
    pub lease: Box<Account<'info, Lease>>,

    #[account(
        mut,
        seeds = [seeds::STAKE, market.key().as_ref(), bid.client.as_ref()],
        bump = client_stake.bump,
    )]
    pub client_stake: Box<Account<'info, StakeAccount>>,

    pub system_program: Program<'info, System>,
}

/// Whether a queue bid's client stays under the anti-monopoly cap with `bid` (spot bids rent
/// one host's machine in its own auction and are not capped).
fn under_cap(bid: &Bid, held_by_client: u64, market: &Market) -> bool {
    bid.kind == BidKind::Spot || market.within_client_cap(held_by_client, bid.gpu_count as u64)
}

/// Whether `bid` could start on `machine` now on some GPUs: deadline, cap and an assignment.
pub fn feasible(
    bid: &Bid,
    held_by_client: u64,
    machine: &Machine,
    market: &Market,
    now: i64,
    freed: &Freed,
) -> Result<bool> {
    Ok(bid.status == BidStatus::Open
        && now < bid.deadline
        && under_cap(bid, held_by_client, market)
        && matching::assign(&machine.compat(bid, market, now, freed)?).is_some())
}

impl Allocate<'_> {
    fn validate(&self, args: &AllocateArgs, now: i64) -> Result<()> {
        let (machine, bid, market) = (&self.machine, &self.bid, &self.market);
        require!(
            machine.status == MachineStatus::Active,
            MarketError::MachineNotActive
        );
        require!(bid.status == BidStatus::Open, MarketError::BidRunning);
        let book = match bid.kind {
            BidKind::Queue => market.queue_book,
            BidKind::Spot => {
                require_keys_eq!(bid.machine, machine.key(), MarketError::WrongBook);
                machine.spot_book
            }
        };
        require_keys_eq!(self.book.key(), book, MarketError::WrongBook);
        require!(now < bid.deadline, MarketError::DeadlinePassed);
        require!(
            under_cap(bid, self.client_stake.gpus_held as u64, market),
            MarketError::ClientCapReached
        );
        require!(
            args.gpus.iter().all(|&g| g < machine.gpu_count),
            MarketError::UnknownGpu
        );
        let compat = machine.compat(bid, market, now, &Freed::default())?;
        matching::check(&compat, &args.gpus).map_err(|e| match e {
            AssignError::Count => error!(MarketError::BadGpuCount),
            AssignError::Unknown(_) => error!(MarketError::UnknownGpu),
            AssignError::Duplicate(_) => error!(MarketError::DuplicateGpu),
            AssignError::Incompatible(_) => error!(MarketError::GpuCannotServe),
        })?;
        // Multi-GPU work stays inside one NVLink/PCIe group whenever it fits in one.
        let chosen = args.gpus.iter().fold(0u16, |m, &g| m | 1 << g);
        let groups = machine.topology_groups();
        if !groups.iter().any(|&grp| chosen & !grp == 0) {
            let fits_one = groups.iter().any(|&grp| {
                let within: Vec<u16> = compat.iter().map(|m| m & grp).collect();
                matching::assign(&within).is_some()
            });
            require!(!fits_one, MarketError::TopologySplit);
        }
        Ok(())
    }

    /// No bid ranked above the chosen one fits the machine now (the remaining accounts hold
    /// each of them, in book order, with its client's stake).
    fn check_better_bids<'a>(&self, remaining: &'a [AccountInfo<'a>], now: i64) -> Result<()> {
        let book = self.book.load()?;
        let chosen = self.bid.key();
        let mut passed = remaining.iter();
        for leaf in book.iter() {
            if leaf.bid == chosen {
                return Ok(());
            }
            let (Some(bid_info), Some(stake_info)) = (passed.next(), passed.next()) else {
                return err!(MarketError::CandidatesMissing);
            };
            require_keys_eq!(*bid_info.key, leaf.bid, MarketError::CandidatesMissing);
            let better: Account<Bid> = Account::try_from(bid_info)?;
            let stake: Account<StakeAccount> = Account::try_from(stake_info)?;
            require!(
                stake.market == self.market.key() && stake.owner == better.client,
                MarketError::WrongStakeAccount
            );
            require!(
                !feasible(
                    &better,
                    stake.gpus_held as u64,
                    &self.machine,
                    &self.market,
                    now,
                    &Freed::default()
                )?,
                MarketError::BetterBidFeasible
            );
        }
        err!(MarketError::BookNotFound)
    }

    pub fn allocate<'info>(ctx: Context<'info, Allocate<'info>>, args: AllocateArgs) -> Result<()> {
        let now = Clock::get()?.unix_timestamp;
        ctx.accounts.validate(&args, now)?;
        ctx.accounts
            .check_better_bids(ctx.remaining_accounts, now)?;

        let accounts = ctx.accounts;
        let bid = &mut accounts.bid;
        let n = bid.gpu_count;
        let leaf = accounts
            .book
            .load_mut()?
            .remove(BookKey::new(bid.book_key, bid.seq))
            .map_err(MarketError::from)?;
        require_keys_eq!(leaf.bid, bid.key(), MarketError::WrongBook);
        bid.status = BidStatus::Running;

        let spot = bid.kind == BidKind::Spot;
        accounts
            .machine
            .take(&args.gpus, bid.gib_per_gpu, spot, |i| bid.terms_of(i))?;
        let stake = &mut accounts.client_stake;
        stake.open_bids = stake
            .open_bids
            .checked_sub(1)
            .ok_or(MarketError::Overflow)?;
        stake.gpus_held = stake
            .gpus_held
            .checked_add(n as u32)
            .ok_or(MarketError::Overflow)?;
        let market = &mut accounts.market;
        if !spot {
            market.add_waiting(-(n as i64))?;
        }
        market.sample_demand();

        let mut gpus = [0u8; MAX_GPUS];
        gpus[..n as usize].copy_from_slice(&args.gpus);
        let mut power_limits_w = [0u16; MAX_GPUS];
        power_limits_w[..n as usize].copy_from_slice(&bid.power_limits());
        let ends_at = now
            .checked_add(bid.max_duration_secs as i64)
            .ok_or(MarketError::Overflow)?
            .min(bid.deadline);
        let lease = &mut accounts.lease;
        lease.set_inner(Lease {
            market: market.key(),
            machine: accounts.machine.key(),
            bid: bid.key(),
            client: bid.client,
            kind: bid.kind,
            gpu_count: n,
            gpus,
            gib_per_gpu: bid.gib_per_gpu,
            power_limits_w,
            price: bid.price,
            started_at: now,
            ends_at,
            stop_at: Lease::NOT_STOPPED,
            next_interval: 0,
            proven_until: now,
            proof_hash: [0; 32],
            paid: 0,
            gpu_seconds: 0,
            energy_j: 0,
            idle_streak: 0,
            idle: false,
            violations: 0,
            preempted: false,
            bump: ctx.bumps.lease,
        });
        emit!(LeaseStarted {
            lease: lease.key(),
            machine: lease.machine,
            bid: lease.bid,
            client: lease.client,
            kind: lease.kind,
            gpus: args.gpus,
            started_at: now,
            ends_at,
        });
        Ok(())
    }
}
