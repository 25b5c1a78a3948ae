use anchor_lang::prelude::*;

use crate::state::{BidKind, MachineStatus, MarketParams};

#[event]
pub struct MarketInitialized {
    pub market: Pubkey,
    pub authority: Pubkey,
    pub stake_mint: Pubkey,
    pub payment_mint: Pubkey,
}

#[event]
pub struct MarketUpdated {
    pub market: Pubkey,
    pub old: MarketParams,
    pub new: MarketParams,
    /// When `new` applies (after the market's notice period).
    pub effective_at: i64,
}

#[event]
pub struct RegionAdded {
    pub market: Pubkey,
    pub region: [u8; 16],
}

#[event]
pub struct GpuClassNamed {
    pub market: Pubkey,
    pub class: u8,
    pub name: [u8; 16],
}

#[event]
pub struct MarketUpdateApplied {
    pub market: Pubkey,
    pub params: MarketParams,
}

#[event]
pub struct FeesCollected {
    pub market: Pubkey,
    pub fees: u64,
    pub slashed: u64,
    /// Payment tokens burnt: urgency premiums and holding charges.
    pub burned: u64,
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

#[event]
pub struct MachineRegistered {
    pub market: Pubkey,
    pub machine: Pubkey,
    pub owner: Pubkey,
    pub agent: Pubkey,
    pub gpu_count: u8,
}

#[event]
pub struct MachineUpdated {
    pub machine: Pubkey,
    pub agent: Pubkey,
    pub gpu_count: u8,
}

#[event]
pub struct MachineStatusChanged {
    pub machine: Pubkey,
    pub old: MachineStatus,
    pub new: MachineStatus,
}

/// The machine's agent reported a fatal GPU fault: the machine is paused until its owner
/// resumes it.
#[event]
pub struct MachineFaulted {
    pub machine: Pubkey,
    pub gpu: u8,
    pub xid: u32,
    pub at: i64,
}

#[event]
pub struct MachineHeartbeat {
    pub machine: Pubkey,
    pub at: i64,
}

/// The machine's agent said whether its GPUs are leased whole only (its host cannot confine a
/// lease to a GiB slice).
#[event]
pub struct MachineWholeGpus {
    pub machine: Pubkey,
    pub whole: bool,
}

#[event]
pub struct BidPlaced {
    pub market: Pubkey,
    pub bid: Pubkey,
    pub client: Pubkey,
    pub kind: BidKind,
    pub score: u64,
    pub escrow: u64,
    pub urgency_premium: u64,
}

/// Its client paid `premium` more for urgency after placing it; it ranks by `score` now.
#[event]
pub struct BidBoosted {
    pub bid: Pubkey,
    pub premium: u64,
    pub urgency_premium: u64,
    pub score: u64,
}

/// The machine's GPUs `gpus` (a mask) are held for queue bid `bid` from `start`.
#[event]
pub struct BidReserved {
    pub bid: Pubkey,
    pub machine: Pubkey,
    pub start: i64,
    pub gpus: u16,
}

/// The machine's reservation for `bid` no longer holds anything, and was cleared.
#[event]
pub struct ReservationCleared {
    pub bid: Pubkey,
    pub machine: Pubkey,
}

#[event]
pub struct BidToppedUp {
    pub bid: Pubkey,
    pub amount: u64,
    pub escrow: u64,
}

/// Why a waiting bid left its book with its escrow refunded.
#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BidRemoval {
    /// Its client cancelled it.
    Cancelled,
    /// Its latest start had passed; anyone may remove it.
    Expired,
    /// A better bid took its place in a full book.
    Evicted,
    /// A spot bid whose machine retired; anyone may remove it.
    MachineRetired,
}

#[event]
pub struct BidCancelled {
    pub bid: Pubkey,
    pub refund: u64,
    pub reason: BidRemoval,
}

#[event]
pub struct LeaseStarted {
    pub lease: Pubkey,
    pub machine: Pubkey,
    pub bid: Pubkey,
    pub client: Pubkey,
    pub kind: BidKind,
    pub gpus: Vec<u8>,
    pub started_at: i64,
    pub ends_at: i64,
}

/// A gang's first part published its rendezvous: the other parts reach it at its machine's
/// host on `port`.
#[event]
pub struct GangRendezvous {
    pub lease: Pubkey,
    pub bid: Pubkey,
    pub port: u16,
}

#[event]
pub struct SpotPreempted {
    pub lease: Pubkey,
    /// The bid that takes the GPUs.
    pub by: Pubkey,
    pub stop_at: i64,
}

#[event]
pub struct UsageProven {
    pub lease: Pubkey,
    pub interval: u32,
    /// How many intervals from `interval` on the proof covered.
    pub intervals: u16,
    pub paid_to_host: u64,
    pub fee: u64,
    pub escrow_left: u64,
    pub power_violation: bool,
    pub proof_hash: [u8; 32],
    /// The container's exit code in a final proof (`gpu_market_core::lease::exit`).
    pub exit_code: Option<i32>,
    /// What the proof states of each GPU's sustained peak, and the lease's limits, in W.
    pub peak_power_w: Vec<u16>,
    pub power_limits_w: Vec<u16>,
    /// The hash of the power readings the proof committed to (`gpu-market lease audit`).
    pub samples_hash: [u8; 32],
    /// Energy the automatic power limit saved in the interval, in J (0 without auto power).
    pub energy_saved_j: u64,
}

/// A machine's accrued pay went to its owner (`claim_pay`); its fee stays for the treasury.
#[event]
pub struct PayClaimed {
    pub machine: Pubkey,
    pub owner: Pubkey,
    pub amount: u64,
    pub fee: u64,
}

#[event]
pub struct LeaseIdle {
    pub lease: Pubkey,
    pub intervals: u16,
}

/// Its client bought `secs` more run time, paying `paid` into the lease's escrow.
#[event]
pub struct LeaseExtended {
    pub lease: Pubkey,
    pub secs: u32,
    pub paid: u64,
    pub ends_at: i64,
}

#[event]
pub struct LeaseStopping {
    pub lease: Pubkey,
    pub stop_at: i64,
    pub proven_until: i64,
}

#[event]
pub struct LeaseEnded {
    pub lease: Pubkey,
    pub market: Pubkey,
    pub client: Pubkey,
    pub paid: u64,
    pub refund: u64,
    /// Its bid went back to a book with its remaining escrow: a preempted spot bid, or a queue
    /// bid whose host went silent (failover).
    pub requeued: bool,
    pub idle: bool,
    /// The final proof's exit code, if one came (`gpu_market_core::lease::exit` says why a
    /// container did not run).
    pub exit_code: Option<i32>,
}

/// A refund kept in the payment vault for its client, who passed no token account for it (or
/// had closed it): the client's stake account owes it (`refunds_due`) until `claim_refunds`.
#[event]
pub struct RefundDue {
    pub market: Pubkey,
    pub owner: Pubkey,
    pub amount: u64,
    /// Everything the stake account owes its owner now.
    pub refunds_due: u64,
}

#[event]
pub struct RefundsClaimed {
    pub market: Pubkey,
    pub owner: Pubkey,
    pub amount: u64,
}

#[event]
pub struct HostSlashed {
    pub machine: Pubkey,
    pub owner: Pubkey,
    pub amount: u64,
    /// The part paid to the harmed client's stake (the rest is kept for the stake treasury).
    pub to_client: u64,
}
