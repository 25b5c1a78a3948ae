use anchor_lang::prelude::*;
use gpu_market_core::pricing;
use gpu_market_core::score::{self, Inputs, Weights};

use crate::errors::MarketError;
use crate::state::{
    seeds, Bid, BidBook, BidKind, BidStatus, Book, BookKey, BookSlot, StakeAccount, REGION_LEN,
};
use core::ops::DerefMut;

/// GPU classes a market prices (index = `GpuSpec::class`).
pub use gpu_market_core::fit::GPU_CLASSES;

/// Most regions a market lists: bit `i` of a book entry's region filter accepts its `i`-th.
pub const MAX_MARKET_REGIONS: usize = 32;

crate::state::pod_array!(
    ClassBps,
    u16,
    GPU_CLASSES,
    "One value in bps per GPU class."
);
crate::state::pod_array!(HourBps, u16, 24, "One value in bps per UTC hour.");
crate::state::pod_array!(
    ClassNames,
    [u8; CLASS_NAME_LEN],
    GPU_CLASSES,
    "The model name of each GPU class (e.g. H100), zero-padded; empty where none is set."
);

/// Bytes of a GPU class's name (zero-padded).
pub const CLASS_NAME_LEN: usize = 16;
crate::state::pod_array!(
    RegionTable,
    [u8; REGION_LEN],
    MAX_MARKET_REGIONS,
    "The regions a market lists, in the order `add_region` listed them."
);

/// The rules of a market's auction: set at `init_market`, changed by `update_market`. Plain old
/// data, widest fields first so that `repr(C)` adds no padding: Borsh reads and writes it as one
/// copy (the market account holds it twice, in force and scheduled).
#[derive(Clone, Copy, Debug, PartialEq, Eq, InitSpace)]
#[cfg_attr(feature = "idl-build", derive(AnchorSerialize, AnchorDeserialize))]
#[repr(C)]
pub struct MarketParams {
    /// The stake at which the stake input S saturates.
    pub stake_bound: u64,
    /// The spend per hour (price × GPUs, payment-token base units) at which the complexity
    /// input C saturates.
    pub spend_bound: u64,
    /// Base of the dynamic reserve price, per GPU-hour, in payment-token base units.
    pub base_price_per_gpu_hour: u64,
    /// Stake a host needs in the market to register a machine.
    pub min_host_stake: u64,
    pub billing_interval_secs: u32,
    pub unstake_cooldown_secs: u32,
    pub protocol_fee_bps: u16,
    /// Score weights: stake, urgency, complexity; they add up to 10 000.
    pub weights_bps: [u16; 3],
    /// The urgency premium, as a share of the bid's escrow (bps), at which the urgency input U
    /// saturates.
    pub urgency_premium_bps: u16,
    /// Score a waiting bid gains per billing interval, so no bid starves.
    pub aging_per_interval: u16,
    /// The most aging a queue bid can gather (bps): its deadline may leave it no longer to wait.
    pub aging_cap_bps: u16,
    /// Anti-monopoly cap: the most of the market's GPUs one client may hold, in bps.
    pub max_client_share_bps: u16,
    /// Weight of the newest sample in the smoothed demand (bps).
    pub demand_smoothing_bps: u16,
    /// The most the demand factor may add (bps).
    pub demand_cap_bps: u16,
    /// A usage proof below this average utilisation (bps) counts towards the idle flag.
    pub idle_utilisation_bps: u16,
    /// Consecutive low-utilisation proofs that flag a lease idle.
    pub idle_intervals: u16,
    /// Billing intervals without a proof after which the client may reclaim the escrow.
    pub silence_intervals: u16,
    /// Missed intervals, or power-limit violations, that let anyone slash a host once.
    pub slash_evidence: u16,
    /// Share of the slashed machine's bond (`min_host_stake`) one slash takes (bps): per
    /// `slash_evidence` silent intervals of a lease (never more than twice the lease's value),
    /// or once per window of evidence.
    pub slash_bps: u16,
    /// Capability factor of each GPU class, added to 1 (bps).
    pub capability_bps: ClassBps,
    /// Seasonal factor of each UTC hour of the cluster clock (bps; 10 000 = neutral).
    pub seasonal_bps: HourBps,
    /// Consecutive low-utilisation proofs after which the market ends a lease at the end of the
    /// last one, its unused escrow refunded (0: never). More than `idle_intervals`, so the idle
    /// flag (`LeaseIdle`, `gpu-market lease list --idle`) warns its client first.
    pub idle_end_intervals: u16,
}

// SAFETY: `repr(C)`, integers and `u16` tables only, no padding (size pinned below): every bit
// pattern is a valid value.
unsafe impl anchor_lang::__private::bytemuck::Zeroable for MarketParams {}
unsafe impl anchor_lang::__private::bytemuck::Pod for MarketParams {}
const _: () = assert!(
    core::mem::size_of::<MarketParams>() == 4 * 8 + 2 * 4 + 15 * 2 + 2 * GPU_CLASSES + 2 * 24 + 2
);
crate::state::pod_borsh!(MarketParams);

/// Bounds on what a market's authority may set: the parameters can be changed, never bent.
#[constant]
pub const MAX_BILLING_INTERVAL_SECS: u32 = 3_600;
#[constant]
pub const MAX_PROTOCOL_FEE_BPS: u16 = 1_000;
#[constant]
pub const MAX_UNSTAKE_COOLDOWN_SECS: u32 = 30 * 86_400;
#[constant]
pub const MAX_SLASH_BPS: u16 = 5_000;
/// Demand samples `tick_demand` catches up at most (smoothing has converged long before).
pub const MAX_DEMAND_CATCH_UP: u64 = 64;
/// A host always has one whole interval after a window ends to prove it before a client may
/// call it silent.
#[constant]
pub const MIN_SILENCE_INTERVALS: u16 = 2;

/// The longest any bid may wait to start: 7 days.
#[constant]
pub const MAX_BID_WAIT_SECS: u64 = 7 * 86_400;

impl MarketParams {
    /// Reasonable defaults around the given interval, fee and cooldown: the Neurolov weights,
    /// neutral seasons, no capability premium, demand smoothed at 20 % per sample, capped at +100 %.
    pub fn recommended(
        billing_interval_secs: u32,
        protocol_fee_bps: u16,
        unstake_cooldown_secs: u32,
    ) -> Self {
        let w = Weights::DEFAULT;
        MarketParams {
            billing_interval_secs,
            protocol_fee_bps,
            unstake_cooldown_secs,
            weights_bps: [w.stake_bps, w.urgency_bps, w.complexity_bps],
            stake_bound: 1_000_000_000,
            // A full 16-GPU machine at four times the base price.
            spend_bound: 16 * 4 * 1_000_000,
            urgency_premium_bps: 1_000,
            aging_per_interval: 10,
            aging_cap_bps: 3_000,
            max_client_share_bps: 5_000,
            base_price_per_gpu_hour: 1_000_000,
            capability_bps: ClassBps([0; GPU_CLASSES]),
            seasonal_bps: HourBps([10_000; 24]),
            demand_smoothing_bps: 2_000,
            demand_cap_bps: 10_000,
            idle_utilisation_bps: 1_000,
            idle_intervals: 3,
            silence_intervals: 3,
            slash_evidence: 3,
            slash_bps: 1_000,
            // What a full 16-GPU machine earns in a day at the base price: a host that fakes
            // its GPUs risks more than it can take before its clients react.
            min_host_stake: 1_000_000 * 16 * 24,
            idle_end_intervals: 0,
        }
    }

    /// The score inputs of a bid by a client with `stake`: what it pays per hour while running
    /// (`spend_per_hour`), the escrow it locks and the urgency premium it gives up.
    pub fn score_inputs(
        &self,
        stake: u64,
        spend_per_hour: u64,
        escrow: u64,
        urgency_premium: u64,
    ) -> Result<Inputs> {
        // Without a premium U is 0 whatever the bound: skip the division.
        let urgency_bound = if urgency_premium == 0 {
            1
        } else {
            gpu_market_core::math::apply_bps(escrow, self.urgency_premium_bps as u64)
                .map_err(MarketError::from)?
                .max(1)
        };
        Ok(Inputs {
            stake,
            stake_bound: self.stake_bound,
            urgency_premium,
            urgency_bound,
            spend_per_hour,
            spend_bound: self.spend_bound,
        })
    }

    pub fn weights(&self) -> Weights {
        Weights {
            stake_bps: self.weights_bps[0],
            urgency_bps: self.weights_bps[1],
            complexity_bps: self.weights_bps[2],
        }
    }

    /// Every rule a market's parameters must keep; each failure is its own typed error.
    pub fn validate(&self) -> Result<()> {
        let bps = gpu_market_core::BPS;
        require!(self.weights().is_valid(), MarketError::InvalidWeights);
        require!(
            (1..=MAX_BILLING_INTERVAL_SECS).contains(&self.billing_interval_secs),
            MarketError::InvalidBillingInterval
        );
        require!(
            self.protocol_fee_bps <= MAX_PROTOCOL_FEE_BPS,
            MarketError::InvalidFee
        );
        require!(
            self.unstake_cooldown_secs <= MAX_UNSTAKE_COOLDOWN_SECS,
            MarketError::InvalidCooldown
        );
        require!(
            self.stake_bound > 0
                && self.spend_bound > 0
                && self.urgency_premium_bps > 0
                && self.aging_cap_bps as u64 <= bps,
            MarketError::InvalidScoreBounds
        );
        require!(
            self.max_client_share_bps > 0 && self.max_client_share_bps as u64 <= bps,
            MarketError::InvalidClientCap
        );
        require!(
            self.base_price_per_gpu_hour > 0
                && self.seasonal_bps.iter().all(|&s| s > 0)
                && self.demand_smoothing_bps as u64 <= bps,
            MarketError::InvalidPricing
        );
        require!(
            self.idle_intervals > 0
                && (self.idle_end_intervals == 0 || self.idle_end_intervals > self.idle_intervals)
                && self.silence_intervals >= MIN_SILENCE_INTERVALS
                && self.slash_evidence > 0
                && self.idle_utilisation_bps as u64 <= bps
                && self.slash_bps <= MAX_SLASH_BPS,
            MarketError::InvalidEnforcement
        );
        Ok(())
    }
}

/// A market: who runs it, which tokens it uses, and the rules of its auction. Its fields are
/// [`MarketData`]'s (`market.total_escrow` reads through `Deref`).
#[account]
#[derive(InitSpace, Debug)]
pub struct Market {
    pub data: MarketData,
}

/// Everything a market holds. Plain old data, widest fields first so that `repr(C)` adds no
/// padding: Borsh reads and writes it as one copy (`pod_borsh!`), where the derived code took
/// one call per field, about 1.1k compute units an instruction that writes the market.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "idl-build", derive(AnchorSerialize, AnchorDeserialize))]
#[repr(C)]
pub struct MarketData {
    pub authority: Pubkey,
    /// Chosen by the creator so one authority can run several markets.
    pub id: u64,
    pub stake_mint: Pubkey,
    pub payment_mint: Pubkey,
    pub stake_vault: Pubkey,
    pub payment_vault: Pubkey,
    /// Token account of the payment mint that receives the protocol fee.
    pub treasury: Pubkey,
    /// Token account of the stake mint that receives slashed host stake.
    pub stake_treasury: Pubkey,
    pub params: MarketParams,
    /// Smoothed demand factor (bps), sampled once per billing interval (`tick_demand`).
    pub demand_bps: u64,
    /// The billing interval of the last demand sample.
    pub demand_interval: u64,
    /// The market's queue book (a `BidBook` account), set by `init_queue_book`.
    pub queue_book: Pubkey,
    /// GPUs of active machines (the supply side of the demand factor and the cap's base).
    pub gpus_offered: u64,
    /// GPUs asked for by waiting queue bids (the demand side).
    pub gpus_waiting: u64,
    /// `gpus_offered` as it stood when the market's clock last ticked (`tick_demand`): the
    /// anti-monopoly cap's base, so that no instruction can move the cap inside the transaction
    /// that relies on it (a host re-declaring an idle machine's GPUs around its own `allocate`).
    /// `u64::MAX` until the first tick: the market's opening interval has no cap.
    pub cap_gpus_offered: u64,
    /// The next bid's placement number.
    pub next_bid_seq: u64,
    /// Tokens held in the payment vault for what clients paid in: the escrow of waiting bids
    /// and running leases, and the pay (with its fee) their proofs accrued to machines that
    /// was not claimed yet (`Machine::unclaimed_pay`, `unclaimed_fee`).
    pub total_escrow: u64,
    /// Tokens staked (and not asked back) in this market.
    pub total_staked: u64,
    /// Tokens asked back and still in the stake vault, waiting for their cooldown.
    pub total_pending_unstake: u64,
    pub created_at: i64,
    /// Parameters `update_market` scheduled, applied from `pending_at` on (0: none pending).
    pub pending_params: MarketParams,
    pub pending_at: i64,
    /// Protocol fees held in the payment vault until `collect_fees` moves them to the treasury
    /// (so no payment depends on an account the authority could close or freeze).
    pub fees_due: u64,
    /// Slashed host stake held in the stake vault until `collect_fees` moves it.
    pub slashed_due: u64,
    /// Refunds held in the payment vault for clients to claim (the sum of their stake accounts'
    /// `refunds_due`): no longer escrow, not yet paid out.
    pub refunds_due: u64,
    /// Payment tokens held in the payment vault to be burnt by `collect_fees`: urgency premiums
    /// and holding charges. Burnt, not paid to anyone, so that no party (the authority
    /// included) gets back what it spends to rank first or to hold a full book.
    pub burn_due: u64,
    /// The tick of the market's clock: the billing interval it opened with, never changed.
    /// Bid aging and its handicaps, the longest wait and demand sampling count in it, so a
    /// later change of `billing_interval_secs` (which a lease takes at its start) neither
    /// reorders the book nor pauses demand sampling.
    pub clock_secs: u32,
    pub bump: u8,
    pub stake_vault_bump: u8,
    pub payment_vault_bump: u8,
    /// Brings the size to a multiple of the alignment (8), so that `repr(C)` adds no padding.
    pub reserved: [u8; 1],
    /// The regions machines may declare and bids may name, in the order `add_region` listed
    /// them (never removed or reordered: book entries keep their indices); empty labels after.
    pub regions: RegionTable,
    /// The model name of each GPU class (`name_gpu_class`), by which clients bid for it: set
    /// once, never changed, so a class means one model for the life of the market.
    pub class_names: ClassNames,
}

// SAFETY: see `account_data!`; the size is pinned here.
crate::state::account_data!(Market, MarketData);
const _: () = assert!(
    core::mem::size_of::<MarketData>()
        == 8 * 32
            + 2 * core::mem::size_of::<MarketParams>()
            + 16 * 8
            + 4
            + 4
            + 32 * REGION_LEN
            + GPU_CLASSES * CLASS_NAME_LEN
);

/// Whether `name` is a GPU class name: 1 to [`CLASS_NAME_LEN`] printable ASCII bytes, spaces
/// only between words, then zeros.
pub fn class_name_valid(name: &[u8; CLASS_NAME_LEN]) -> bool {
    let len = name.iter().position(|&b| b == 0).unwrap_or(CLASS_NAME_LEN);
    let (text, padding) = name.split_at(len);
    len > 0
        && padding.iter().all(|&b| b == 0)
        && text.iter().all(|&b| b.is_ascii_graphic() || b == b' ')
        && text[0] != b' '
        && text[len - 1] != b' '
}

impl Market {
    /// A market under `params` with nothing in it yet: no accounts named, no book, no bid, no
    /// stake, no demand. `init_market` names its accounts, its clock and its bumps.
    pub fn opening(params: MarketParams) -> Market {
        Market {
            data: MarketData {
                authority: Pubkey::default(),
                id: 0,
                stake_mint: Pubkey::default(),
                payment_mint: Pubkey::default(),
                stake_vault: Pubkey::default(),
                payment_vault: Pubkey::default(),
                treasury: Pubkey::default(),
                stake_treasury: Pubkey::default(),
                params,
                demand_bps: 0,
                demand_interval: 0,
                queue_book: Pubkey::default(),
                gpus_offered: 0,
                gpus_waiting: 0,
                // No cap in the market's opening interval (nothing was offered when it began).
                cap_gpus_offered: u64::MAX,
                next_bid_seq: 0,
                total_escrow: 0,
                total_staked: 0,
                total_pending_unstake: 0,
                created_at: 0,
                clock_secs: params.billing_interval_secs,
                pending_params: params,
                pending_at: 0,
                fees_due: 0,
                slashed_due: 0,
                refunds_due: 0,
                burn_due: 0,
                bump: 0,
                stake_vault_bump: 0,
                payment_vault_bump: 0,
                reserved: [0],
                regions: RegionTable::default(),
                class_names: ClassNames::default(),
            },
        }
    }
}

impl MarketData {
    /// The bit of `region` in the market's table; 0 for the empty label (no region).
    pub fn region_bit(&self, region: &[u8; REGION_LEN]) -> Result<u32> {
        if region[0] == 0 {
            return Ok(0);
        }
        self.regions
            .iter()
            .position(|r| r == region)
            .map(|i| 1 << i)
            .ok_or_else(|| error!(MarketError::UnknownRegion))
    }

    /// What a book entry keeps of the regions a bid names (0: any region).
    pub fn region_filter(&self, regions: &[[u8; REGION_LEN]]) -> Result<u32> {
        regions
            .iter()
            .try_fold(0u32, |f, r| Ok(f | self.region_bit(r)?))
    }

    /// Lists `region` in the next free slot of the table.
    pub fn add_region(&mut self, region: [u8; REGION_LEN]) -> Result<()> {
        require!(region[0] != 0, MarketError::BadRegions);
        require!(!self.regions.contains(&region), MarketError::RegionListed);
        let slot = self
            .regions
            .iter_mut()
            .find(|r| r[0] == 0)
            .ok_or(MarketError::RegionTableFull)?;
        *slot = region;
        Ok(())
    }

    /// Names GPU `class` `name` (see [`class_name_valid`]), once; no two classes share a name
    /// whatever its case.
    pub fn name_gpu_class(&mut self, class: u8, name: [u8; CLASS_NAME_LEN]) -> Result<()> {
        require!(class_name_valid(&name), MarketError::BadGpuClassName);
        let named = self
            .class_names
            .get(class as usize)
            .ok_or(MarketError::UnknownGpuClass)?;
        require!(named[0] == 0, MarketError::GpuClassNamed);
        require!(
            !self
                .class_names
                .iter()
                .any(|n| n.eq_ignore_ascii_case(&name)),
            MarketError::GpuClassNameTaken
        );
        self.class_names[class as usize] = name;
        Ok(())
    }

    /// Signs a CPI as the market PDA, which owns the vaults.
    pub fn with_signer<T>(&self, f: impl FnOnce(&[&[&[u8]]]) -> T) -> T {
        let id = self.id.to_le_bytes();
        let bump = [self.bump];
        f(&[&[seeds::MARKET, self.authority.as_ref(), &id, &bump]])
    }

    /// The dynamic reserve price per GPU-hour of GPU `class` at `unix_time`:
    /// Base × (1 + Demand) × (1 + Capability) × Seasonal, computed by the core crate.
    pub fn reserve_price(&self, class: u8, unix_time: i64) -> Result<u64> {
        let p = &self.params;
        let capability = *p
            .capability_bps
            .get(class as usize)
            .ok_or(MarketError::UnknownGpuClass)?;
        // Unsigned: the SBF target has no signed division (and the clock is after 1970).
        let hour = (unix_time.max(0) as u64 % 86_400) / 3_600;
        let seasonal = p.seasonal_bps[hour as usize];
        let demand = self.demand_bps.min(p.demand_cap_bps as u64);
        pricing::reserve_price(
            p.base_price_per_gpu_hour,
            demand,
            capability as u64,
            seasonal as u64,
        )
        .map_err(|e| error!(MarketError::from(e)))
    }

    /// Puts `bid` in `book` at rank `key` with the market's next placement number.
    pub fn enqueue(
        &mut self,
        bid_key: Pubkey,
        bid: &mut Bid,
        book: &mut Book<impl DerefMut<Target = BidBook>, impl DerefMut<Target = [BookSlot]>>,
        key: u64,
        now: i64,
    ) -> Result<()> {
        let seq = self.next_bid_seq;
        let filter = self.region_filter(&bid.regions)?;
        book.insert_at(now, BookKey::new(key, seq), bid_key, bid.summary(filter))
            .map_err(MarketError::from)?;
        self.next_bid_seq = seq.checked_add(1).ok_or(MarketError::Overflow)?;
        bid.book_key = key;
        bid.seq = seq;
        bid.full_secs_at_entry = book.full_secs(now);
        Ok(())
    }

    /// Takes `bid`'s holding charge at `now` out of its escrow (and the market's total) into
    /// `burn_due`; the bid is leaving `book`. Returns the charge.
    pub fn charge_holding(&mut self, bid: &mut Bid, book: &BidBook, now: i64) -> Result<u64> {
        let charge = bid.holding_charge(book, now);
        if charge > 0 {
            bid.escrow -= charge;
            self.total_escrow = self
                .total_escrow
                .checked_sub(charge)
                .ok_or(MarketError::Overflow)?;
            self.burn_due = self
                .burn_due
                .checked_add(charge)
                .ok_or(MarketError::Overflow)?;
        }
        Ok(charge)
    }

    /// Takes a waiting bid out of its book (cancelled, expired or evicted): its stake no longer
    /// ranks it, its GPUs no longer wait, its holding charge is taken for burning and the rest
    /// of its escrow leaves the market's total. Returns that rest, which the caller refunds.
    pub fn take_out(
        &mut self,
        bid_key: Pubkey,
        bid: &mut Bid,
        book: &mut Book<impl DerefMut<Target = BidBook>, impl DerefMut<Target = [BookSlot]>>,
        stake: &mut StakeAccount,
        now: i64,
    ) -> Result<u64> {
        self.tick_demand(now);
        require!(bid.status == BidStatus::Open, MarketError::BidRunning);
        self.charge_holding(bid, &book.head, now)?;
        let leaf = book
            .remove_at(now, BookKey::new(bid.book_key, bid.seq))
            .map_err(MarketError::from)?;
        // The key found a leaf: it must be this bid's (else the whole transaction rolls back).
        require_keys_eq!(leaf.bid, bid_key, MarketError::WrongBook);
        stake.open_bids = stake
            .open_bids
            .checked_sub(1)
            .ok_or(MarketError::Overflow)?;
        if bid.kind == BidKind::Queue {
            self.add_waiting(-(bid.total_gpus() as i64))?;
        }
        self.total_escrow = self
            .total_escrow
            .checked_sub(bid.escrow)
            .ok_or(MarketError::Overflow)?;
        Ok(bid.escrow)
    }

    /// The longest a bid may wait to start: what the aging cap takes to reach (a queue bid that
    /// waited longer would outrank every newcomer for ever), and never more than
    /// [`MAX_BID_WAIT_SECS`], whatever the aging (none at all lifts the first bound), so that no
    /// bid can hold a book's place, or a retiring machine, for longer.
    pub fn max_wait_secs(&self) -> u64 {
        let p = &self.params;
        score::max_wait_intervals(p.aging_per_interval as u64, p.aging_cap_bps as u64).map_or(
            MAX_BID_WAIT_SECS,
            |n| {
                n.saturating_mul(self.clock_secs as u64)
                    .min(MAX_BID_WAIT_SECS)
            },
        )
    }

    /// Samples demand on the market's clock: one sample (waiting vs offered GPUs, as they stood
    /// since the last change) per billing interval that has begun since the last sample, at most
    /// `MAX_DEMAND_CATCH_UP` of them. Every instruction that changes either count calls it
    /// first, so the reserve price is the same whoever calls and whenever.
    pub fn tick_demand(&mut self, now: i64) {
        let interval = self.interval_at(now);
        let due = interval
            .saturating_sub(self.demand_interval)
            .min(MAX_DEMAND_CATCH_UP);
        if due == 0 {
            return;
        }
        self.cap_gpus_offered = self.gpus_offered;
        let p = &self.params;
        let sample = pricing::demand_bps(
            self.gpus_waiting,
            self.gpus_offered,
            p.demand_cap_bps as u64,
        );
        for _ in 0..due {
            self.demand_bps =
                pricing::smooth_bps(self.demand_bps, sample, p.demand_smoothing_bps as u64);
        }
        self.demand_interval = self.demand_interval.max(interval);
    }

    /// Adds (or, negative, removes) GPUs waiting in the queue book.
    pub fn add_waiting(&mut self, gpus: i64) -> Result<()> {
        self.gpus_waiting = add_signed(self.gpus_waiting, gpus)?;
        Ok(())
    }

    /// Adds (or, negative, removes) GPUs offered by active machines.
    pub fn add_offered(&mut self, gpus: i64) -> Result<()> {
        self.gpus_offered = add_signed(self.gpus_offered, gpus)?;
        Ok(())
    }

    /// Whether a client holding `held` GPUs stays within the anti-monopoly cap at `now` when it
    /// takes `more`. A bid over the cap may still run where no bid within its client's cap fits
    /// (see `allocate`): the cap shares GPUs out, it never keeps them idle.
    pub fn within_client_cap(&self, held: u64, more: u64, now: i64) -> bool {
        let after = held
            .saturating_add(more)
            .saturating_mul(gpu_market_core::BPS);
        after
            <= self
                .cap_base(now)
                .saturating_mul(self.params.max_client_share_bps as u64)
    }

    /// The GPUs the cap shares out at `now`: those offered when the current billing interval
    /// began. Every change of `gpus_offered` ticks the clock first, so where it has not ticked
    /// in this interval the count has not changed since the interval began.
    fn cap_base(&self, now: i64) -> u64 {
        if self.interval_at(now) > self.demand_interval {
            self.gpus_offered
        } else {
            self.cap_gpus_offered
        }
    }

    /// The billing interval `unix_time` falls in, counted from the market's creation.
    /// The queue book key of a bid of base score `base` placed at `now` to run `duration_secs`
    /// (`score::rank_key` with the market's aging and the bid's `score::duration_handicap`):
    /// `place_bid` ranks by it, the client quotes it, the Philly replay measures it.
    pub fn rank_key(&self, base: u64, now: i64, duration_secs: u32) -> u64 {
        let aging = self.params.aging_per_interval as u64;
        let handicap = self.duration_handicap(duration_secs);
        score::rank_key(base, aging, self.interval_at(now), handicap)
    }

    /// What a bid's requested duration takes off its rank (`score::duration_handicap` on the
    /// market's clock): shorter bids go first.
    pub fn duration_handicap(&self, duration_secs: u32) -> u64 {
        score::duration_handicap(
            duration_secs as u64,
            self.params.aging_per_interval as u64,
            self.clock_secs as u64,
        )
    }

    pub fn interval_at(&self, unix_time: i64) -> u64 {
        (unix_time.saturating_sub(self.created_at).max(0) as u64) / self.clock_secs as u64
    }

    /// How long a parameter change waits before it applies: a staker who disagrees can ask its
    /// stake back at once and withdraw it before the change lands.
    pub fn notice_secs(&self) -> i64 {
        self.params.unstake_cooldown_secs as i64 + self.params.billing_interval_secs as i64
    }

    /// The silence window: `silence_intervals` billing intervals, after which a lease's client
    /// may reclaim its escrow, a machine no longer counts as alive, and a reservation whose bid
    /// has not started lapses.
    pub fn silence_window_secs(&self) -> i64 {
        self.params.billing_interval_secs as i64 * self.params.silence_intervals as i64
    }

    /// How long slashing evidence stays usable: the time it takes to gather `slash_evidence`
    /// intervals of it, plus the unstake cooldown (the time a host needs to leave).
    pub fn evidence_window_secs(&self) -> i64 {
        let p = &self.params;
        p.unstake_cooldown_secs as i64 + p.billing_interval_secs as i64 * p.slash_evidence as i64
    }

    /// Applies the scheduled parameters if their time has come; whether it did.
    pub fn apply_due_update(&mut self, now: i64) -> bool {
        if self.pending_at == 0 || now < self.pending_at {
            return false;
        }
        self.params = self.pending_params;
        self.pending_at = 0;
        true
    }

    /// Moves `amount` of a host's slashed stake into the market's keeping (`slashed_due`).
    pub fn keep_slashed(&mut self, from_amount: u64, from_pending: u64) -> Result<()> {
        self.total_staked = self
            .total_staked
            .checked_sub(from_amount)
            .ok_or(MarketError::Overflow)?;
        self.total_pending_unstake = self
            .total_pending_unstake
            .checked_sub(from_pending)
            .ok_or(MarketError::Overflow)?;
        self.slashed_due = self
            .slashed_due
            .checked_add(from_amount + from_pending)
            .ok_or(MarketError::Overflow)?;
        Ok(())
    }

    /// Owes `amount` of refunded escrow to the client of `stake`, held in the payment vault
    /// until it claims it (the caller has taken it out of `total_escrow`).
    pub fn owe_refund(&mut self, stake: &mut StakeAccount, amount: u64) -> Result<()> {
        self.refunds_due = self
            .refunds_due
            .checked_add(amount)
            .ok_or(MarketError::Overflow)?;
        stake.refunds_due = stake
            .refunds_due
            .checked_add(amount)
            .ok_or(MarketError::Overflow)?;
        Ok(())
    }

    /// Takes every refund owed to the client of `stake`; returns the amount to pay out.
    pub fn take_refunds(&mut self, stake: &mut StakeAccount) -> Result<u64> {
        let amount = stake.refunds_due;
        require!(amount > 0, MarketError::NothingToClaim);
        self.refunds_due = self
            .refunds_due
            .checked_sub(amount)
            .ok_or(MarketError::Overflow)?;
        stake.refunds_due = 0;
        Ok(amount)
    }

    /// Holds after every instruction that changes the market's parameters (the totals are
    /// kept by checked arithmetic in the instructions that move tokens).
    pub fn invariant(&self) -> Result<()> {
        self.params.validate()
    }
}

fn add_signed(value: u64, delta: i64) -> Result<u64> {
    let out = if delta >= 0 {
        value.checked_add(delta as u64)
    } else {
        value.checked_sub(delta.unsigned_abs())
    };
    out.ok_or_else(|| error!(MarketError::Overflow))
}
