use anchor_lang::prelude::*;

use crate::errors::MarketError;
use crate::events::{
    MachineFaulted, MachineHeartbeat, MachineRegistered, MachineStatusChanged, MachineUpdated,
    MachineWholeGpus,
};
use crate::state::{
    seeds, BidBook, Machine, MachineFault, MachineStatus, MachineTerms, Market, Reservation,
    StakeAccount,
};

#[derive(Accounts)]
#[instruction(id: u64)]
pub struct RegisterMachine<'info> {
    #[account(mut)]
    pub owner: Signer<'info>,

    #[account(mut, dup)]
    pub market: Box<Account<'info, Market>>,

    /// The host's stake: slashable evidence needs something to slash. Each machine bonds
    /// `min_host_stake` of it until the machine is closed.
    #[account(
        mut, dup,
        seeds = [seeds::STAKE, market.key().as_ref(), owner.key().as_ref()],
        bump = host_stake.bump,
    )]
    pub host_stake: Box<Account<'info, StakeAccount>>,

    #[account(
        init,
        payer = owner,
        space = 8 + Machine::INIT_SPACE,
        seeds = [seeds::MACHINE, market.key().as_ref(), owner.key().as_ref(), &id.to_le_bytes()],
        bump,
    )]
    pub machine: Box<Account<'info, Machine>>,

    pub system_program: Program<'info, System>,
}

impl RegisterMachine<'_> {
    pub fn register_machine(ctx: Context<Self>, id: u64, terms: MachineTerms) -> Result<()> {
        let now = Clock::get()?.unix_timestamp;
        let bond = ctx.accounts.market.params.min_host_stake;
        ctx.accounts.host_stake.bond(bond)?;
        let machine = &mut ctx.accounts.machine;
        machine.bond = bond;
        machine.market = ctx.accounts.market.key();
        machine.owner = ctx.accounts.owner.key();
        machine.id = id;
        machine.status = MachineStatus::Active;
        machine.registered_at = now;
        machine.last_heartbeat = now;
        machine.bump = ctx.bumps.machine;
        machine.apply_terms(&terms, &ctx.accounts.market)?;
        ctx.accounts.market.tick_demand(now);
        ctx.accounts.market.add_offered(machine.offered())?;
        emit!(MachineRegistered {
            market: machine.market,
            machine: machine.key(),
            owner: machine.owner,
            agent: machine.agent,
            gpu_count: machine.gpu_count,
        });
        Ok(())
    }
}

#[derive(Accounts)]
pub struct UpdateMachine<'info> {
    pub owner: Signer<'info>,

    #[account(
        mut, dup,
        seeds = [seeds::MACHINE, machine.data.market.as_ref(), owner.key().as_ref(), &machine.data.id.to_le_bytes()],
        bump = machine.bump,
        constraint = machine.owner == owner.key() @ ErrorCode::ConstraintHasOne,
        constraint = machine.market == market.key() @ ErrorCode::ConstraintHasOne,
    )]
    pub machine: Box<Account<'info, Machine>>,

    /// Counts the GPUs its active machines offer.
    #[account(mut, dup)]
    pub market: Box<Account<'info, Market>>,

    /// The machine's spot book, needed (empty) to change its electricity cost: the keys of
    /// waiting spot bids are the host's profit at the cost they were placed under.
    #[account(address = machine.spot_book @ MarketError::WrongBook)]
    pub spot_book: Option<AccountLoader<'info, BidBook>>,
}

impl UpdateMachine<'_> {
    pub fn update_machine(ctx: Context<Self>, terms: MachineTerms) -> Result<()> {
        let machine = &mut ctx.accounts.machine;
        require!(
            machine.status != MachineStatus::Retired,
            MarketError::MachineRetired
        );
        // GPUs under running leases cannot change under them.
        require!(machine.leases == 0, MarketError::MachineBusy);
        if terms.electricity_cost_per_kwh != machine.electricity_cost_per_kwh
            && machine.spot_book != Pubkey::default()
        {
            let book = ctx
                .accounts
                .spot_book
                .as_ref()
                .ok_or(MarketError::SpotBidsWaiting)?;
            require!(book.load()?.is_empty(), MarketError::SpotBidsWaiting);
        }
        let before = machine.offered();
        machine.apply_terms(&terms, &ctx.accounts.market)?;
        // A reservation was computed from the GPUs as they were.
        machine.reservation = Reservation::default();
        let market = &mut ctx.accounts.market;
        market.tick_demand(Clock::get()?.unix_timestamp);
        market.add_offered(machine.offered() - before)?;
        emit!(MachineUpdated {
            machine: machine.key(),
            agent: machine.agent,
            gpu_count: machine.gpu_count,
        });
        Ok(())
    }

    pub fn set_machine_status(ctx: Context<Self>, status: MachineStatus) -> Result<()> {
        let machine = &mut ctx.accounts.machine;
        require!(
            machine.status != MachineStatus::Retired,
            MarketError::MachineRetired
        );
        let old = machine.status;
        let before = machine.offered();
        machine.status = status;
        // Resuming says the owner has seen the fault (`host show`) and serviced the GPU.
        if status == MachineStatus::Active {
            machine.fault = None;
        }
        let market = &mut ctx.accounts.market;
        market.tick_demand(Clock::get()?.unix_timestamp);
        market.add_offered(machine.offered() - before)?;
        emit!(MachineStatusChanged {
            machine: machine.key(),
            old,
            new: status,
        });
        Ok(())
    }
}

#[derive(Accounts)]
pub struct SetCachedImages<'info> {
    pub owner: Signer<'info>,

    #[account(
        mut, dup,
        seeds = [seeds::MACHINE, machine.data.market.as_ref(), owner.key().as_ref(), &machine.data.id.to_le_bytes()],
        bump = machine.bump,
        constraint = machine.owner == owner.key() @ ErrorCode::ConstraintHasOne,
    )]
    pub machine: Box<Account<'info, Machine>>,
}

impl SetCachedImages<'_> {
    /// The images only steer which machine the packing policy prefers for a bid (a cached image
    /// starts at once): they may change while leases run.
    pub fn set_cached_images(ctx: Context<Self>, images: Vec<[u8; 32]>) -> Result<()> {
        let machine = &mut ctx.accounts.machine;
        require!(
            machine.status != MachineStatus::Retired,
            MarketError::MachineRetired
        );
        machine.set_cached_images(&images)?;
        emit!(MachineUpdated {
            machine: machine.key(),
            agent: machine.agent,
            gpu_count: machine.gpu_count,
        });
        Ok(())
    }
}

#[derive(Accounts)]
pub struct Heartbeat<'info> {
    pub agent: Signer<'info>,

    #[account(mut, dup, constraint = machine.agent == agent.key() @ MarketError::WrongAgent)]
    pub machine: Box<Account<'info, Machine>>,
}

impl Heartbeat<'_> {
    pub fn heartbeat(ctx: Context<Self>) -> Result<()> {
        let machine = &mut ctx.accounts.machine;
        require!(
            machine.status != MachineStatus::Retired,
            MarketError::MachineRetired
        );
        machine.last_heartbeat = Clock::get()?.unix_timestamp;
        emit!(MachineHeartbeat {
            machine: machine.key(),
            at: machine.last_heartbeat,
        });
        Ok(())
    }
}

/// Accounts of `set_whole_gpus`: the machine's own agent, which knows whether its host can
/// confine a lease to a slice of a GPU.
#[derive(Accounts)]
pub struct SetWholeGpus<'info> {
    pub agent: Signer<'info>,

    #[account(mut, constraint = machine.agent == agent.key() @ MarketError::WrongAgent)]
    pub machine: Box<Account<'info, Machine>>,
}

impl SetWholeGpus<'_> {
    /// The agent says whether its host can confine a lease to a GiB slice of a GPU (`whole`:
    /// it cannot). While it cannot, no GPU of the machine holding a lease is offered to
    /// another: a lease that asks less than a GPU's memory gets the GPU alone.
    pub fn set_whole_gpus(ctx: Context<Self>, whole: bool) -> Result<()> {
        let machine = &mut ctx.accounts.machine;
        require!(
            machine.status != MachineStatus::Retired,
            MarketError::MachineRetired
        );
        machine.whole_gpus = whole as u8;
        emit!(MachineWholeGpus {
            machine: machine.key(),
            whole,
        });
        Ok(())
    }
}

/// Accounts of `report_fault`: the machine's own agent, which saw the fault.
#[derive(Accounts)]
pub struct ReportFault<'info> {
    pub agent: Signer<'info>,

    #[account(mut, dup, constraint = machine.agent == agent.key() @ MarketError::WrongAgent)]
    pub machine: Box<Account<'info, Machine>>,
}

impl ReportFault<'_> {
    /// The agent saw a fatal fault on GPU `gpu` (Xid `xid`): the machine is paused, so that no
    /// bid is allocated to it, and the fault is kept for its owner (`host show`) until the
    /// owner resumes it. The agent ends the affected leases with their final proofs itself.
    pub fn report_fault(ctx: Context<Self>, gpu: u8, xid: u32) -> Result<()> {
        let machine = &mut ctx.accounts.machine;
        require!(
            machine.status != MachineStatus::Retired,
            MarketError::MachineRetired
        );
        require!(gpu < machine.gpu_count, MarketError::NoSuchGpu);
        let at = Clock::get()?.unix_timestamp;
        let old = machine.status;
        machine.status = MachineStatus::Paused;
        machine.fault = Some(MachineFault { gpu, xid, at });
        emit!(MachineFaulted {
            machine: machine.key(),
            gpu,
            xid,
            at,
        });
        if old != MachineStatus::Paused {
            emit!(MachineStatusChanged {
                machine: machine.key(),
                old,
                new: MachineStatus::Paused,
            });
        }
        Ok(())
    }
}
