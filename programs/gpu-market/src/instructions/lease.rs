use anchor_lang::prelude::*;
use anchor_spl::token::{Mint, Token, TokenAccount};
use gpu_market_core::lease::{self as lease_math, UsageProof};
use gpu_market_core::settlement::{self, cost, payout, Billing};

use crate::errors::MarketError;
use crate::events::{
    HostSlashed, LeaseEnded, LeaseIdle, LeaseStopping, PayClaimed, SpotPreempted, UsageProven,
};
use crate::instructions::{
    grow_book, holds_slot_rent, lease_rent, load_book_mut, pay_out, refund_escrow, slot_rent,
};
use crate::state::{
    seeds, Bid, BidBook, BidKind, BidStatus, Freed, GangFlags, Lease, Machine, MachineStatus,
    Market, StakeAccount,
};

#[derive(Accounts)]
pub struct Preempt<'info> {
    pub agent: Signer<'info>,

    pub market: Box<Account<'info, Market>>,

    #[account(
        constraint = machine.market == market.key() @ ErrorCode::ConstraintHasOne,
        constraint = machine.agent == agent.key() @ MarketError::WrongAgent,
    )]
    pub machine: Box<Account<'info, Machine>>,

    #[account(mut, dup, has_one = machine)]
    pub lease: Box<Account<'info, Lease>>,

    #[account(address = lease.bid)]
    pub lease_bid: Box<Account<'info, Bid>>,

    /// The waiting bid that wants the lease's GPUs.
    #[account(constraint = challenger.market == market.key() @ ErrorCode::ConstraintHasOne)]
    pub challenger: Box<Account<'info, Bid>>,

    /// The challenger's client stake (for the anti-monopoly cap).
    #[account(
        seeds = [seeds::STAKE, market.key().as_ref(), challenger.data.client.as_ref()],
        bump = challenger_stake.bump,
    )]
    pub challenger_stake: Box<Account<'info, StakeAccount>>,
}

impl Preempt<'_> {
    /// Stops a spot lease for a bid that outranks it: a queue bid stops it now (queue leases
    /// outrank spot leases), a spot bid that pays the host more stops it at the end of the
    /// current billing interval, never before. The challenger must fit the GPUs it frees.
    pub fn preempt(ctx: Context<Self>) -> Result<()> {
        let now = Clock::get()?.unix_timestamp;
        let a = &ctx.accounts;
        let lease = &a.lease;
        require!(lease.kind == BidKind::Spot, MarketError::NotSpotLease);
        require!(
            lease.stop_at == Lease::NOT_STOPPED,
            MarketError::LeaseStopping
        );
        let freed = Freed {
            gpus: lease.gpus().iter().fold(0u16, |m, &g| m | 1 << g),
            gib: lease.gib_per_gpu,
            host: lease.host(),
        };
        let offers = a
            .machine
            .offers(&a.market, a.challenger.kind, now, &freed)?;
        let offer = offers.for_run(&a.challenger.key(), a.challenger.runs_until(now));
        let within_cap = a.challenger.kind == BidKind::Spot
            || a.market.within_client_cap(
                a.challenger_stake.gpus_held as u64,
                a.challenger.gpu_count as u64,
                now,
            );
        require!(
            a.challenger.status == BidStatus::Open && within_cap && a.challenger.fit(offer).is_ok(),
            MarketError::BidNotFeasible
        );
        let stop = match a.challenger.kind {
            BidKind::Queue => now,
            BidKind::Spot => {
                require_keys_eq!(
                    a.challenger.machine,
                    a.machine.key(),
                    MarketError::WrongBook
                );
                require!(
                    a.challenger.spot_profit(&a.machine)? > a.lease_bid.spot_profit(&a.machine)?,
                    MarketError::NotBetterBid
                );
                lease_math::interval_end(lease.started_at, lease.rules.billing_interval_secs, now)
                    .ok_or(MarketError::Overflow)?
            }
        };
        let challenger = a.challenger.key();
        let lease = &mut ctx.accounts.lease;
        lease.request_stop(stop);
        lease.preempted = true;
        emit!(SpotPreempted {
            lease: lease.key(),
            by: challenger,
            stop_at: lease.stop_at,
        });
        Ok(())
    }
}

/// One lease's proof of `intervals` billing intervals from `interval` on, as `submit_usage`
/// takes it.
#[derive(AnchorSerialize, AnchorDeserialize, Clone, Debug)]
pub struct UsageProofArgs {
    pub interval: u32,
    /// At least 1 (`gpu_market_core::lease::span_window`).
    pub intervals: u16,
    pub gpu_seconds: u64,
    pub energy_j: u64,
    /// Energy the host's automatic power limit saved in the interval, in J (0 unless the bid
    /// opted in to auto power).
    pub energy_saved_j: u64,
    pub avg_utilisation_bps: u16,
    /// Peak power of each of the lease's GPUs, in W, in the bid's GPU order.
    pub peak_power_w: Vec<u16>,
    pub exit_code: Option<i32>,
    /// sha256 of the power readings behind `peak_power_w`
    /// (`gpu_market_core::evidence::PowerLog`), chained into the proof's hash.
    pub samples_hash: [u8; 32],
}

impl From<&UsageProof> for UsageProofArgs {
    fn from(proof: &UsageProof) -> Self {
        UsageProofArgs {
            interval: proof.interval,
            intervals: proof.intervals,
            gpu_seconds: proof.gpu_seconds,
            energy_j: proof.energy_j,
            energy_saved_j: proof.energy_saved_j,
            avg_utilisation_bps: proof.avg_utilisation_bps,
            peak_power_w: proof.peak_power_w.clone(),
            exit_code: proof.exit_code,
            samples_hash: proof.samples_hash,
        }
    }
}

impl UsageProofArgs {
    pub fn proof(&self) -> UsageProof {
        UsageProof {
            interval: self.interval,
            intervals: self.intervals,
            gpu_seconds: self.gpu_seconds,
            energy_j: self.energy_j,
            energy_saved_j: self.energy_saved_j,
            avg_utilisation_bps: self.avg_utilisation_bps,
            peak_power_w: self.peak_power_w.clone(),
            exit_code: self.exit_code,
            samples_hash: self.samples_hash,
        }
    }
}

/// Accounts of `submit_usage`; the proven leases follow as remaining accounts, writable, one per
/// proof and in the proofs' order (a lease proving several intervals is listed once for each).
#[derive(Accounts)]
pub struct SubmitUsage<'info> {
    pub agent: Signer<'info>,

    pub market: Box<Account<'info, Market>>,

    #[account(
        mut, dup,
        constraint = machine.market == market.key() @ ErrorCode::ConstraintHasOne,
        constraint = machine.agent == agent.key() @ MarketError::WrongAgent,
    )]
    pub machine: Box<Account<'info, Machine>>,
}

impl<'info> SubmitUsage<'info> {
    /// Signed usage proofs of a machine's leases, each of one or more consecutive billing
    /// intervals (a span: the agent proves two at a time at the recommended parameters), in one
    /// transaction: each pays price × proven time out of its lease's escrow, never past the
    /// clock, the lease's end or the escrow, and accrues it to the machine (`claim_pay` pays it
    /// out). All or nothing: one refused proof refuses them all. The proofs count as the
    /// machine's heartbeat.
    pub fn submit_usage(ctx: Context<'info, Self>, proofs: Vec<UsageProofArgs>) -> Result<()> {
        require!(
            !proofs.is_empty() && proofs.len() == ctx.remaining_accounts.len(),
            MarketError::ProofAccountsMismatch
        );
        let now = Clock::get()?.unix_timestamp;
        let a = &mut *ctx.accounts;
        for (args, info) in proofs.iter().zip(ctx.remaining_accounts) {
            require!(info.is_writable, MarketError::ProofAccountsMismatch);
            // Loaded, proven and written back one at a time: a lease listed twice proves two
            // intervals in turn.
            let mut lease = Account::<Lease>::try_from(info)?;
            require_keys_eq!(
                lease.machine,
                a.machine.key(),
                MarketError::ProofAccountsMismatch
            );
            prove(&a.market, &mut a.machine, &mut lease, args, now)?;
            lease.exit(&crate::ID)?;
        }
        if a.machine.status != MachineStatus::Retired {
            a.machine.last_heartbeat = now;
        }
        Ok(())
    }
}

/// Applies one proof to `lease`.
fn prove(
    market: &Market,
    machine: &mut Machine,
    lease: &mut Account<Lease>,
    args: &UsageProofArgs,
    now: i64,
) -> Result<()> {
    require!(
        args.interval >= lease.next_interval,
        MarketError::StaleInterval
    );
    require!(
        args.peak_power_w.len() == lease.gpu_count as usize,
        MarketError::BadProofGpuCount
    );
    require!(args.intervals >= 1, MarketError::EmptyProofSpan);
    let rules = lease.rules;
    // A final proof (the container exited) ends the lease now: its window is clipped at the
    // clock instead of waiting for the interval's end, so a lease whose container could not
    // run is refunded at once.
    let stop = match args.exit_code {
        Some(_) => lease.stop().min(now),
        None => lease.stop(),
    };
    let (from, to) = lease_math::span_window(
        lease.started_at,
        rules.billing_interval_secs,
        args.interval,
        args.intervals,
        stop,
    )
    .ok_or(match args.exit_code {
        Some(_) if now < lease.stop() => MarketError::IntervalNotOver,
        _ => MarketError::IntervalAfterStop,
    })?;
    require!(to <= now, MarketError::IntervalNotOver);
    // The market's idle rule ends a lease at the end of its `idle_end_intervals`-th idle
    // interval in a row: an idle span that goes past it is proven, and paid, up to there only,
    // as proofs of one interval each would have been.
    let to = match lease_math::idle_end_within(
        lease.idle_streak,
        args.avg_utilisation_bps,
        rules.idle_utilisation_bps,
        rules.idle_end_intervals,
        args.intervals,
    ) {
        Some(n) if args.exit_code.is_none() => lease_math::span_window(
            lease.started_at,
            rules.billing_interval_secs,
            args.interval,
            n,
            stop,
        )
        .map_or(to, |w| w.1),
        _ => to,
    };

    // Skipped intervals are never paid, and count as the host's silence.
    let missed = args.interval - lease.next_interval;
    if missed > 0 {
        machine.record_missed(missed, now, market)?;
    }
    let gpus = lease.gpu_count as u64;
    let secs = lease_math::payable_secs((to - from) as u64, args.gpu_seconds, gpus);
    lease.billed_secs = lease
        .billed_secs
        .checked_add(secs)
        .ok_or(MarketError::Overflow)?;
    let billing = Billing {
        price: lease.price,
        unit: lease.kind.unit(),
        gpus,
        billed_secs: lease.billed_secs,
        paid: lease.paid,
    };
    let pay =
        payout(billing, lease.escrow, rules.protocol_fee_bps as u64).map_err(MarketError::from)?;
    lease.escrow = pay.escrow_left;
    // Accrued to the machine, paid out by `claim_pay`: the vault keeps it meanwhile, and the
    // fee stays there until `collect_fees`, so a host is paid whatever becomes of the treasury.
    machine.unclaimed_pay = machine
        .unclaimed_pay
        .checked_add(pay.to_host)
        .ok_or(MarketError::Overflow)?;
    machine.unclaimed_fee = machine
        .unclaimed_fee
        .checked_add(pay.fee)
        .ok_or(MarketError::Overflow)?;

    let proof = args.proof();
    let preimage = proof.chain_preimage(&lease.key().to_bytes(), &lease.proof_hash);
    lease.proof_hash = solana_sha256_hasher::hash(&preimage).to_bytes();
    lease.next_interval = args
        .interval
        .checked_add(args.intervals as u32)
        .ok_or(MarketError::Overflow)?;
    lease.proven_until = to;
    lease.paid = lease
        .paid
        .checked_add(pay.to_host + pay.fee)
        .ok_or(MarketError::Overflow)?;
    lease.gpu_seconds = lease.gpu_seconds.saturating_add(args.gpu_seconds);
    lease.energy_j = lease.energy_j.saturating_add(args.energy_j);
    // Auto power is the client's opt-in: a lease without it has nothing to save.
    if lease.auto_power.is_some() {
        lease.energy_saved_j = lease.energy_saved_j.saturating_add(args.energy_saved_j);
    }
    let violated = proof
        .power_violations(&lease.power_limits_w[..])
        .next()
        .is_some();
    if violated {
        lease.violations = lease
            .violations
            .checked_add(1)
            .ok_or(MarketError::Overflow)?;
        machine.record_violation(now, market)?;
    }
    lease.utilisation_bps = args.avg_utilisation_bps;
    lease.idle_streak = lease_math::idle_streak(
        lease.idle_streak,
        args.avg_utilisation_bps,
        rules.idle_utilisation_bps,
        args.intervals,
    );
    if !lease.idle && lease.idle_streak >= rules.idle_intervals {
        lease.idle = true;
        emit!(LeaseIdle {
            lease: lease.key(),
            intervals: lease.idle_streak,
        });
    }
    // An exited container, an empty escrow or the market's idle rule ends the lease at this
    // window; the exit code stays with the lease, for its client to read why.
    let idle_ended = rules.idle_end_intervals > 0
        && lease.idle_streak >= rules.idle_end_intervals
        && args.exit_code.is_none();
    if idle_ended {
        lease.exit_code = Some(gpu_market_core::lease::exit::IDLE_ENDED);
    } else if args.exit_code.is_some() {
        lease.exit_code = args.exit_code;
    }
    if args.exit_code.is_some() || lease.escrow == 0 || idle_ended {
        lease.request_stop(to);
    }
    emit!(UsageProven {
        lease: lease.key(),
        interval: args.interval,
        intervals: args.intervals,
        paid_to_host: pay.to_host,
        fee: pay.fee,
        escrow_left: pay.escrow_left,
        power_violation: violated,
        proof_hash: lease.proof_hash,
        exit_code: args.exit_code,
        peak_power_w: args.peak_power_w.clone(),
        power_limits_w: lease.power_limits_w[..lease.gpu_count as usize].to_vec(),
        samples_hash: args.samples_hash,
        energy_saved_j: lease.auto_power.map_or(0, |_| args.energy_saved_j),
    });
    Ok(())
}

/// Accounts of `claim_pay`: anyone may send it, the pay can only go to the machine's owner.
#[derive(Accounts)]
pub struct ClaimPay<'info> {
    #[account(
        mut, dup,
        constraint = market.payment_mint == payment_mint.key() @ ErrorCode::ConstraintHasOne,
        constraint = market.payment_vault == payment_vault.key() @ ErrorCode::ConstraintHasOne,
    )]
    pub market: Box<Account<'info, Market>>,

    #[account(mut, dup, constraint = machine.market == market.key() @ ErrorCode::ConstraintHasOne)]
    pub machine: Box<Account<'info, Machine>>,

    pub payment_mint: Box<Account<'info, Mint>>,

    #[account(mut, dup)]
    pub payment_vault: Box<Account<'info, TokenAccount>>,

    /// Where the host is paid: a payment-token account of the machine's owner.
    #[account(mut, dup, token::mint = payment_mint, token::authority = machine.owner)]
    pub host_tokens: Box<Account<'info, TokenAccount>>,

    pub token_program: Program<'info, Token>,
}

impl ClaimPay<'_> {
    /// Pays the host what its machine's proofs accrued, and books their fee for the treasury.
    pub fn claim_pay(ctx: Context<Self>) -> Result<()> {
        let a = &mut *ctx.accounts;
        let (pay, fee) = (a.machine.unclaimed_pay, a.machine.unclaimed_fee);
        a.machine.unclaimed_pay = 0;
        a.machine.unclaimed_fee = 0;
        let market = &mut a.market;
        market.total_escrow = market
            .total_escrow
            .checked_sub(pay + fee)
            .ok_or(MarketError::Overflow)?;
        market.fees_due = market
            .fees_due
            .checked_add(fee)
            .ok_or(MarketError::Overflow)?;
        emit!(PayClaimed {
            machine: a.machine.key(),
            owner: a.machine.owner,
            amount: pay,
            fee,
        });
        pay_out(
            &a.market,
            a.market.to_account_info(),
            a.payment_vault.to_account_info(),
            &a.payment_mint,
            a.host_tokens.to_account_info(),
            &a.token_program,
            pay,
        )
    }
}

/// Accounts of `end_lease` and `reclaim_escrow`: everything the final settlement touches.
#[derive(Accounts)]
pub struct CloseLease<'info> {
    pub signer: Signer<'info>,

    #[account(
        mut, dup,
        constraint = market.payment_mint == payment_mint.key() @ ErrorCode::ConstraintHasOne,
        constraint = market.payment_vault == payment_vault.key() @ ErrorCode::ConstraintHasOne,
    )]
    pub market: Box<Account<'info, Market>>,

    #[account(mut, dup, address = lease.machine)]
    pub machine: Box<Account<'info, Machine>>,

    #[account(mut, dup, has_one = market)]
    pub lease: Box<Account<'info, Lease>>,

    #[account(mut, dup, address = lease.bid)]
    pub bid: Box<Account<'info, Bid>>,

    #[account(
        mut, dup,
        seeds = [seeds::STAKE, market.key().as_ref(), lease.client.as_ref()],
        bump = client_stake.bump,
    )]
    pub client_stake: Box<Account<'info, StakeAccount>>,

    /// The machine's spot book: a preempted spot bid goes back into it.
    #[account(mut, address = machine.spot_book @ MarketError::WrongBook)]
    pub spot_book: Option<AccountLoader<'info, BidBook>>,

    /// The market's queue book: a queue bid whose host went silent goes back into it
    /// (failover, `reclaim_escrow`).
    #[account(mut, address = market.queue_book @ MarketError::WrongBook)]
    pub queue_book: Option<AccountLoader<'info, BidBook>>,

    /// The host's stake (the machine owner's), slashed by `reclaim_escrow` for the silence it
    /// proves; never the client's own stake account.
    #[account(
        mut, dup,
        constraint = host_stake.market == market.key()
            && host_stake.owner == machine.owner
            && host_stake.key() != client_stake.key() @ MarketError::HostStakeMissing,
    )]
    pub host_stake: Option<Box<Account<'info, StakeAccount>>>,

    /// A payment-token account of the client for the unspent escrow. Absent (its client may
    /// have closed it), the refund stays in the vault, owed by the client's stake account
    /// (`refunds_due`, taken with `claim_refunds`): no client can keep a lease from settling.
    #[account(mut, dup, token::mint = payment_mint, token::authority = lease.client)]
    pub client_tokens: Option<Box<Account<'info, TokenAccount>>>,

    /// Gets the bid account's rent back when the bid closes.
    /// CHECK: only receives lamports; its address is the lease's client.
    #[account(mut, address = lease.client)]
    pub client: UncheckedAccount<'info>,

    /// Gets the lease account's rent back (the agent paid it).
    /// CHECK: only receives lamports; its address is the machine's agent.
    #[account(mut, address = machine.agent)]
    pub agent: UncheckedAccount<'info>,

    pub payment_mint: Box<Account<'info, Mint>>,

    #[account(mut, dup)]
    pub payment_vault: Box<Account<'info, TokenAccount>>,

    pub token_program: Program<'info, Token>,
}

impl CloseLease<'_> {
    fn is_party(&self) -> bool {
        let s = self.signer.key();
        s == self.lease.client || s == self.machine.owner || s == self.machine.agent
    }

    /// Stops the lease (client or host, at once) and settles it once every payable second is
    /// proven: GPUs freed, the unspent escrow refunded, or a preempted spot bid put back in its
    /// book with what is left of its escrow. Anyone may settle an expired, preempted or empty
    /// lease whose time is proven.
    pub fn end_lease(ctx: Context<Self>) -> Result<()> {
        let now = Clock::get()?.unix_timestamp;
        // A part of a gang that no longer runs whole may be stopped by anyone.
        let may_stop = ctx.accounts.is_party() || ctx.accounts.bid.gang_broken();
        if may_stop {
            ctx.accounts.lease.request_stop(now);
        }
        if ctx.accounts.signer.key() == ctx.accounts.lease.client {
            ctx.accounts.client_stake.touch(now);
        }
        let lease = &ctx.accounts.lease;
        if !lease.fully_proven() {
            require!(may_stop, MarketError::NotLeaseParty);
            emit!(LeaseStopping {
                lease: lease.key(),
                stop_at: lease.stop(),
                proven_until: lease.proven_until,
            });
            return Ok(());
        }
        ctx.accounts.settle(now, false)
    }

    /// Ends a lease whose host sent no proof for `silence_intervals` billing intervals: the
    /// unproven time is not paid, and it counts against the machine as missed intervals. A
    /// queue bid that can still start goes back to the queue at its rank with the rest of its
    /// escrow, for another machine to run (failover), unless the client itself sends it with
    /// `refund`; otherwise the rest is refunded. Anyone may send it (a keeper, the client): a
    /// refund can only go to the client (its token account, or its stake's `refunds_due`), and
    /// the slash half to the client's stake, half to the stake treasury.
    pub fn reclaim_escrow(ctx: Context<Self>, refund: bool) -> Result<()> {
        let now = Clock::get()?.unix_timestamp;
        let a = &mut *ctx.accounts;
        // Failover unless the client itself asks for its escrow back.
        let failover = !(refund && a.signer.key() == a.lease.client);
        if a.bid.is_gang() {
            a.bid.gang_flags |= match failover {
                true => GangFlags::FAILOVER,
                false => GangFlags::REFUND,
            };
        }
        let lease = &mut a.lease;
        require!(!lease.fully_proven(), MarketError::NothingToReclaim);
        require!(lease.reclaimable(now), MarketError::HostNotSilent);
        let interval = lease.rules.billing_interval_secs as i64;
        // The harm is the silence the client had to sit through before it could act: waiting
        // longer to reclaim does not make it larger.
        let unproven = (lease.stop().min(now) - lease.proven_until).max(0) as u64;
        let missed = unproven
            .div_ceil(interval as u64)
            .min(lease.rules.silence_intervals as u64) as u32;
        a.machine.record_silence(missed)?;
        lease.stop_at = lease.proven_until;
        lease.preempted = false;
        a.slash_for_silence(missed)?;
        a.settle(now, failover)
    }

    /// Slashes the host for `missed` silent intervals of this lease, at once and once: the
    /// lease's `slash_bps` per `slash_evidence` intervals (the rules it started with) of the
    /// machine's bond, and never more than twice what the lease was worth where stake and
    /// payment are one token (`settlement::slash_amount`); half goes to the harmed client's
    /// stake, half is kept for the stake treasury. A client renting its own machine slashes
    /// nothing.
    fn slash_for_silence(&mut self, missed: u32) -> Result<()> {
        if self.lease.client == self.machine.owner {
            return Ok(());
        }
        let rules = &self.lease.rules;
        let share = settlement::slash_share_bps(
            rules.slash_bps as u64,
            missed as u64,
            rules.slash_evidence as u64,
        )
        .map_err(MarketError::from)?;
        let market = &self.market;
        let value_cap = if market.stake_mint == market.payment_mint {
            let bid = &self.bid;
            let value = cost(
                bid.price,
                bid.unit(),
                self.lease.gpu_count as u64,
                bid.max_duration_secs as u64,
            )
            .map_err(MarketError::from)?;
            Some(value.saturating_mul(settlement::SLASH_LEASE_VALUE_MULTIPLE))
        } else {
            None
        };
        let bond = self.machine.bond;
        let host = self
            .host_stake
            .as_mut()
            .ok_or(MarketError::HostStakeMissing)?;
        let (from_amount, from_pending) = host.slash(bond, share, value_cap)?;
        let taken = from_amount + from_pending;
        let to_client = taken / 2;
        self.market.keep_slashed(from_amount, from_pending)?;
        let market = &mut self.market;
        market.slashed_due -= to_client;
        market.total_staked = market
            .total_staked
            .checked_add(to_client)
            .ok_or(MarketError::Overflow)?;
        let client = &mut self.client_stake;
        client.amount = client
            .amount
            .checked_add(to_client)
            .ok_or(MarketError::Overflow)?;
        emit!(HostSlashed {
            machine: self.machine.key(),
            owner: self.machine.owner,
            amount: taken,
            to_client,
        });
        Ok(())
    }

    /// Frees the lease's GPUs and closes it; its bid goes back into a book (a preempted spot
    /// bid, or with `failover` a queue bid whose host went silent) or is refunded and closed.
    /// A gang's part gives its escrow and its lease's rent back to the bid; the last part to
    /// settle decides for the whole gang: back to the queue if a part failed over (and the
    /// client did not ask for a refund), else refunded.
    fn settle(&mut self, now: i64, failover: bool) -> Result<()> {
        let lease = &self.lease;
        let spot = lease.kind == BidKind::Spot;
        self.machine
            .release(lease.gpus(), lease.gib_per_gpu, lease.host(), spot)?;
        self.machine
            .reservation
            .lease_ended(lease.ends_at, lease.host())?;
        let stake = &mut self.client_stake;
        stake.gpus_held = stake
            .gpus_held
            .checked_sub(lease.gpu_count as u32)
            .ok_or(MarketError::Overflow)?;
        let bid = &mut self.bid;
        let gang = bid.is_gang();
        let (again, escrow, lease_rents) = if gang {
            bid.escrow = bid
                .escrow
                .checked_add(lease.escrow)
                .ok_or(MarketError::Overflow)?;
            bid.parts_running = bid
                .parts_running
                .checked_sub(1)
                .ok_or(MarketError::Overflow)?;
            if bid.parts_running > 0 {
                // The gang's other parts settle later (anyone may stop them now).
                emit!(LeaseEnded {
                    lease: lease.key(),
                    market: lease.market,
                    client: lease.client,
                    paid: lease.paid,
                    refund: 0,
                    requeued: false,
                    idle: lease.idle,
                    exit_code: lease.exit_code,
                });
                return self.lease.close(self.bid.to_account_info());
            }
            let flags = bid.gang_flags;
            let again = flags & GangFlags::FAILOVER != 0 && flags & GangFlags::REFUND == 0;
            let rents = lease_rent(&Rent::get()?)
                .checked_mul(bid.parts() as u64)
                .ok_or(MarketError::Overflow)?;
            (again, bid.escrow, rents)
        } else {
            (
                if spot { lease.preempted } else { failover },
                lease.escrow,
                0,
            )
        };
        // A preempted spot bid goes back to its machine's book, and a queue bid whose host went
        // silent to the market's queue (failover), only while it can still start (its latest
        // start has not passed) and pay an interval; settling never waits for room in a book (a
        // full one means a refund).
        let interval_cost = cost(
            bid.price,
            bid.unit(),
            bid.total_gpus(),
            lease.rules.billing_interval_secs as u64,
        )
        .map_err(MarketError::from)?;
        let requeue_due = again && !bid.expired(now) && escrow >= interval_cost.max(1);
        // The rules decide, not whoever settles: a bid that may wait again needs its book, and
        // the rent of its slot there, which its account kept since `allocate`.
        let book = match (requeue_due, spot) {
            (false, _) => None,
            (true, true) => Some(
                self.spot_book
                    .as_ref()
                    .ok_or(MarketError::SpotBookMissing)?,
            ),
            (true, false) => Some(
                self.queue_book
                    .as_ref()
                    .ok_or(MarketError::QueueBookMissing)?,
            ),
        };
        let book = match book {
            None => None,
            Some(b) => {
                let rent = Rent::get()?;
                let slot = slot_rent(&rent);
                // A gang's last lease gives its rent back to the bid below: count it in.
                let coming = if gang {
                    self.lease.to_account_info().lamports()
                } else {
                    0
                };
                let due = (slot + lease_rents).saturating_sub(coming);
                (!b.load()?.is_full() && holds_slot_rent(&bid.to_account_info(), &rent, due))
                    .then(|| (b.to_account_info(), slot))
            }
        };
        let requeue = book.is_some();
        let refund = if requeue { 0 } else { escrow };
        if let Some((book, slot)) = book {
            bid.escrow = escrow;
            bid.gang_flags = 0;
            // With its remaining escrow: a spot bid ranked by its profit for the host, a queue
            // bid at the rank it had (its book key; its place among equal keys is new).
            let key = match spot {
                true => bid.spot_profit(&self.machine)?,
                false => bid.book_key,
            };
            bid.status = BidStatus::Open;
            let bid_key = bid.key();
            grow_book(&book, &bid.to_account_info(), slot)?;
            self.market
                .enqueue(bid_key, bid, &mut load_book_mut(&book)?, key, now)?;
            if !spot {
                self.market.add_waiting(bid.total_gpus() as i64)?;
            }
            stake.open_bids = stake
                .open_bids
                .checked_add(1)
                .ok_or(MarketError::Overflow)?;
        } else {
            self.market.total_escrow = self
                .market
                .total_escrow
                .checked_sub(refund)
                .ok_or(MarketError::Overflow)?;
        }
        emit!(LeaseEnded {
            lease: lease.key(),
            market: lease.market,
            client: lease.client,
            paid: lease.paid,
            refund,
            requeued: requeue,
            idle: lease.idle,
            exit_code: lease.exit_code,
        });
        refund_escrow(
            &mut self.market,
            stake,
            self.client_tokens.as_ref().map(|t| t.to_account_info()),
            self.payment_vault.to_account_info(),
            &self.payment_mint,
            &self.token_program,
            refund,
        )?;
        // A gang's lease rent goes back to its bid (to its client when the bid closes).
        let rent_to = match gang {
            true => self.bid.to_account_info(),
            false => self.agent.to_account_info(),
        };
        self.lease.close(rent_to)?;
        if !requeue {
            self.bid.close(self.client.to_account_info())?;
        }
        Ok(())
    }
}
