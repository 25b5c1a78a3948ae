//! `extend_lease`: the client of a running lease buys more run time, the machine's GPUs
//! permitting.

use anchor_lang::prelude::*;
use anchor_spl::token::{Mint, Token, TokenAccount};
use gpu_market_core::settlement::escrow_for;

use crate::errors::MarketError;
use crate::events::LeaseExtended;
use crate::instructions::{client_pays, entry_fits, load_book};
use crate::state::{BidKind, Freed, Lease, Machine, MachineStatus, Market};

#[derive(Accounts)]
pub struct ExtendLease<'info> {
    pub client: Signer<'info>,

    #[account(
        mut, dup,
        constraint = market.payment_mint == payment_mint.key() @ ErrorCode::ConstraintHasOne,
        constraint = market.payment_vault == payment_vault.key() @ ErrorCode::ConstraintHasOne,
    )]
    pub market: Box<Account<'info, Market>>,

    #[account(mut, dup, address = lease.machine)]
    pub machine: Box<Account<'info, Machine>>,

    #[account(mut, dup, has_one = market, has_one = client)]
    pub lease: Box<Account<'info, Lease>>,

    /// The market's queue book: a queue lease is extended only while no bid waiting there could
    /// run on its GPUs once it ends.
    /// CHECK: its address is the market's queue book; `load_book` checks its layout.
    #[account(address = market.queue_book @ MarketError::WrongBook)]
    pub queue_book: UncheckedAccount<'info>,

    pub payment_mint: Box<Account<'info, Mint>>,

    #[account(mut, dup, token::mint = payment_mint, token::authority = client)]
    pub client_tokens: Box<Account<'info, TokenAccount>>,

    #[account(mut, dup)]
    pub payment_vault: Box<Account<'info, TokenAccount>>,

    pub token_program: Program<'info, Token>,
}

impl ExtendLease<'_> {
    /// Lengthens the lease by `secs`, its price for them paid into its escrow now. Refused when
    /// the lease was told to stop or has ended, when its machine is not active (a paused or
    /// retired machine is winding down), and, for a queue lease, when a bid waiting in the
    /// queue could run on the lease's GPUs once it ends: an extension never passes the queue. A
    /// spot lease needs no such check: better bids preempt it as before.
    pub fn extend_lease(ctx: Context<Self>, secs: u32) -> Result<()> {
        require!(secs > 0, MarketError::ZeroAmount);
        let now = Clock::get()?.unix_timestamp;
        let a = &ctx.accounts;
        let lease = &a.lease;
        require!(lease.parts <= 1, MarketError::GangPartExtend);
        require!(
            lease.stop_at == Lease::NOT_STOPPED && now < lease.ends_at,
            MarketError::LeaseStopping
        );
        require!(
            a.machine.status == MachineStatus::Active,
            MarketError::MachineNotActive
        );
        if lease.kind == BidKind::Queue {
            let freed = Freed {
                gpus: lease.gpus().iter().fold(0u16, |m, &g| m | 1 << g),
                gib: lease.gib_per_gpu,
                host: lease.host(),
            };
            let offer = a.machine.offer(&a.market, BidKind::Queue, now, &freed)?;
            let info = a.queue_book.to_account_info();
            let book = load_book(&info)?;
            require!(
                !book.iter().any(|leaf| entry_fits(&offer, leaf)),
                MarketError::GpusWanted
            );
        }
        // A lease that would now run past the machine's reservation must leave it room.
        let reservation = &a.machine.reservation;
        let ends_at = lease
            .ends_at
            .checked_add(secs as i64)
            .ok_or(MarketError::Overflow)?;
        let crosses = reservation.binds(now, a.market.silence_window_secs())
            && !reservation.restricts(lease.ends_at)
            && reservation.restricts(ends_at);
        let gpus = lease.gpus().iter().fold(0u16, |m, &g| m | 1 << g);
        require!(
            !crosses || reservation.admits_after(gpus, lease.host(), a.machine.host()),
            MarketError::GpusReserved
        );
        let amount = escrow_for(
            lease.price,
            lease.kind.unit(),
            lease.gpu_count as u64,
            secs as u64,
        )
        .map_err(MarketError::from)?;
        let a = &mut *ctx.accounts;
        if crosses {
            a.machine.reservation.count_after(a.lease.host(), true)?;
        }
        let lease = &mut a.lease;
        lease.ends_at = ends_at;
        lease.escrow = lease
            .escrow
            .checked_add(amount)
            .ok_or(MarketError::Overflow)?;
        a.market.total_escrow = a
            .market
            .total_escrow
            .checked_add(amount)
            .ok_or(MarketError::Overflow)?;
        client_pays!(a, amount)?;
        emit!(LeaseExtended {
            lease: lease.key(),
            secs,
            paid: amount,
            ends_at: lease.ends_at,
        });
        Ok(())
    }
}
