use anchor_lang::prelude::*;
use gpu_market_core::colocate::Profile;
use gpu_market_core::fit::Host;

use crate::state::{Bid, BidKind, MarketParams, MAX_GPUS};

/// The market's rules a lease runs under, copied when it starts: the market's authority can
/// change the market's parameters, never the terms of a running lease.
#[derive(AnchorSerialize, AnchorDeserialize, Clone, Copy, Debug, PartialEq, Eq, InitSpace)]
pub struct LeaseRules {
    pub billing_interval_secs: u32,
    pub protocol_fee_bps: u16,
    pub idle_utilisation_bps: u16,
    pub idle_intervals: u16,
    pub idle_end_intervals: u16,
    pub silence_intervals: u16,
    /// What a slash for this lease's silence takes: `slash_bps` per `slash_evidence` intervals.
    pub slash_bps: u16,
    pub slash_evidence: u16,
}

impl LeaseRules {
    pub fn of(params: &MarketParams) -> Self {
        LeaseRules {
            billing_interval_secs: params.billing_interval_secs,
            protocol_fee_bps: params.protocol_fee_bps,
            idle_utilisation_bps: params.idle_utilisation_bps,
            idle_intervals: params.idle_intervals,
            idle_end_intervals: params.idle_end_intervals,
            silence_intervals: params.silence_intervals,
            slash_bps: params.slash_bps,
            slash_evidence: params.slash_evidence,
        }
    }
}

crate::state::pod_array!(
    WattTable,
    u16,
    MAX_GPUS,
    "Watts for each of a lease's GPUs."
);

/// A bid running on a machine: created by `allocate`, paid by `submit_usage`, closed by
/// `end_lease` or `reclaim_escrow`. While it runs the lease holds its bid's escrow and its proofs.
#[account]
#[derive(InitSpace, Debug)]
pub struct Lease {
    pub market: Pubkey,
    pub machine: Pubkey,
    pub bid: Pubkey,
    pub client: Pubkey,
    /// sha256 digest of the image the lease runs (its bid's): the market's packing policy
    /// learns what an image asks of a GPU from the leases running it.
    pub image_digest: [u8; 32],
    pub kind: BidKind,
    /// The lease's place in its gang (0 for the first machine, whose address the others
    /// reach) and the gang's machine count (1: not a gang's).
    pub part: u8,
    pub parts: u8,
    /// For a gang's first part: the machine's host port its agent published the bid's first
    /// port on (`set_rendezvous`), where the other parts reach it; 0 until then.
    pub rendezvous_port: u16,
    pub gpu_count: u8,
    /// The machine's GPU serving each of the bid's GPUs (first `gpu_count` entries).
    pub gpus: [u8; MAX_GPUS],
    pub gib_per_gpu: u16,
    /// Thousandths of a CPU core and MiB of memory the machine holds for the lease (the
    /// container's limits): what the bid asked, or its GPU memory's share of the machine's
    /// (`Host::or_share`); 0 only on a machine that gives none (its agent's per-GPU default).
    pub cpu_milli: u32,
    pub memory_mib: u32,
    /// The agreed power limit of each GPU, in W, in the bid's GPU order.
    pub power_limits_w: WattTable,
    /// The bid's price, in its unit (per GPU-hour for queue leases, per GPU-day for spot).
    pub price: u64,
    pub started_at: i64,
    /// Start + the bid's maximum duration, capped at its deadline (the bid starts by its latest
    /// start, so this leaves at least the shortest run its client accepted) and at what its
    /// escrow pays for after a holding charge.
    pub ends_at: i64,
    /// When the lease was told to stop (`i64::MAX` while it was not): no time after it is paid.
    pub stop_at: i64,
    /// The next proof's interval index; proofs only ever move it forward.
    pub next_interval: u32,
    /// The end of the last proven window: time up to here is paid.
    pub proven_until: i64,
    /// sha256 of the last proof's chain preimage (zero before the first proof).
    pub proof_hash: [u8; 32],
    /// Gross amount paid out of escrow (host + fee).
    pub paid: u64,
    /// What is left of the bid's escrow: `allocate` moves it here, each proof pays out of it,
    /// and what remains goes back to the client (or into the bid, put back in its book) when
    /// the lease settles. A proof needs the lease alone, so one transaction proves a machine's
    /// leases.
    pub escrow: u64,
    /// Payable seconds proven in all: pay is the cost of this total less `paid`, so no
    /// interval's rounding is ever lost.
    pub billed_secs: u64,
    pub gpu_seconds: u64,
    pub energy_j: u64,
    /// Energy the automatic power limit saved, as the proofs state it, in J.
    pub energy_saved_j: u64,
    pub idle_streak: u16,
    /// The average SM utilisation of the lease's GPUs over its last proven window, in basis
    /// points (0 before the first proof, which `proof_hash` tells): what the market's
    /// co-location model knows of the lease as a neighbour on a shared GPU.
    pub utilisation_bps: u16,
    /// Set once `idle_intervals` consecutive proofs showed low utilisation.
    pub idle: bool,
    pub violations: u32,
    /// A spot lease stopped by a better bid: its bid goes back to the book when it ends.
    pub preempted: bool,
    /// The market's rules when the lease started.
    pub rules: LeaseRules,
    pub bump: u8,
    /// The exit code of the final proof, once one arrived: the container's own (0 or more), or
    /// one of `gpu_market_core::lease::exit`'s when it did not run to its own exit. At the end
    /// with `auto_power`, as their encoded sizes vary.
    pub exit_code: Option<i32>,
    /// The bid's auto power tolerance (bps of throughput), copied when it starts: the host may
    /// lower its GPUs' power limits below the stated ones within it. Variable size, so last.
    pub auto_power: Option<u16>,
}

impl Lease {
    pub const NOT_STOPPED: i64 = i64::MAX;

    /// The lease `allocate` starts for `bid` (at `key`) of `market` on `machine`: on the
    /// machine's GPUs `gpus` (in the bid's GPU order), holding `host` of its CPU and memory,
    /// from `now` until `ends_at`, under `rules`; the bid's escrow moves to it.
    pub fn of_bid(
        (market, machine, key): (Pubkey, Pubkey, Pubkey),
        bid: &Bid,
        (gpus, host): (&[u8], Host),
        (now, ends_at): (i64, i64),
        rules: LeaseRules,
        bump: u8,
    ) -> Lease {
        let n = gpus.len();
        let mut on = [0u8; MAX_GPUS];
        on[..n].copy_from_slice(gpus);
        let mut power_limits_w = WattTable::default();
        power_limits_w[..n].copy_from_slice(&bid.power_limits());
        Lease {
            market,
            machine,
            bid: key,
            client: bid.client,
            image_digest: bid.image_digest,
            kind: bid.kind,
            part: 0,
            parts: 1,
            rendezvous_port: 0,
            gpu_count: n as u8,
            gpus: on,
            gib_per_gpu: bid.gib_per_gpu,
            cpu_milli: host.cpu_milli,
            memory_mib: host.memory_mib,
            power_limits_w,
            price: bid.price,
            started_at: now,
            ends_at,
            stop_at: Lease::NOT_STOPPED,
            next_interval: 0,
            proven_until: now,
            proof_hash: [0; 32],
            paid: 0,
            escrow: bid.escrow,
            billed_secs: 0,
            gpu_seconds: 0,
            energy_j: 0,
            energy_saved_j: 0,
            idle_streak: 0,
            utilisation_bps: 0,
            idle: false,
            violations: 0,
            preempted: false,
            rules,
            bump,
            exit_code: None,
            auto_power: bid.auto_power,
        }
    }

    /// The CPU and memory the machine holds for the lease.
    pub fn host(&self) -> Host {
        Host {
            cpu_milli: self.cpu_milli,
            memory_mib: self.memory_mib,
        }
    }

    pub fn gpus(&self) -> &[u8] {
        &self.gpus[..self.gpu_count as usize]
    }

    /// What the lease's proofs measured, as the co-location model sees a neighbour: `None`
    /// before the first proof.
    pub fn profile(&self) -> Option<Profile> {
        (self.proof_hash != [0; 32]).then_some(Profile {
            sm_util_bps: self.utilisation_bps,
        })
    }

    /// The time after which nothing more is owed: its end, or when it was told to stop.
    pub fn stop(&self) -> i64 {
        self.ends_at.min(self.stop_at)
    }

    /// Whether every payable second has been proven.
    pub fn fully_proven(&self) -> bool {
        self.proven_until >= self.stop()
    }

    /// When the host counts as silent on this lease: `silence_intervals` billing intervals
    /// after the last proven second.
    pub fn silent_from(&self) -> i64 {
        let interval = self.rules.billing_interval_secs as i64;
        self.proven_until
            .saturating_add(interval.saturating_mul(self.rules.silence_intervals as i64))
    }

    /// Whether `reclaim_escrow` takes this lease's escrow back at `now`: time is left unproven
    /// and the host has been silent long enough.
    pub fn reclaimable(&self, now: i64) -> bool {
        !self.fully_proven() && now >= self.silent_from()
    }

    /// Asks the lease to stop at `at` (never later than an earlier request).
    pub fn request_stop(&mut self, at: i64) {
        self.stop_at = self.stop_at.min(at.max(self.proven_until));
    }
}
