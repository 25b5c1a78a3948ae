//! Escrow and payment arithmetic.

use crate::math::{apply_bps, mul_div_ceil, mul_div_floor, MathError, BPS};

pub const SECS_PER_HOUR: u64 = 3_600;
pub const SECS_PER_DAY: u64 = 86_400;

/// How a bid's price is quoted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PriceUnit {
    /// Queue bids: per GPU per hour.
    PerGpuHour,
    /// Spot bids (GigaSPOT): per GPU per day.
    PerGpuDay,
}

impl PriceUnit {
    pub fn secs(self) -> u64 {
        match self {
            PriceUnit::PerGpuHour => SECS_PER_HOUR,
            PriceUnit::PerGpuDay => SECS_PER_DAY,
        }
    }
}

/// The cost of `gpus` GPUs for `secs` seconds at `price` per GPU per `unit`, rounded down.
pub fn cost(price: u64, unit: PriceUnit, gpus: u64, secs: u64) -> Result<u64, MathError> {
    let per_gpu = mul_div_floor(price, secs, unit.secs())?;
    per_gpu.checked_mul(gpus).ok_or(MathError::Overflow)
}

/// What `gpus` GPUs at `price` per GPU per `unit` cost per hour (a bid's spend rate, the
/// complexity input of its score); an hourly price needs no division.
pub fn spend_per_hour(price: u64, unit: PriceUnit, gpus: u64) -> Result<u64, MathError> {
    match unit {
        PriceUnit::PerGpuHour => price.checked_mul(gpus).ok_or(MathError::Overflow),
        PriceUnit::PerGpuDay => cost(price, unit, gpus, SECS_PER_HOUR),
    }
}

/// The escrow a bid locks: its price for its whole maximum duration. Rounded up to a whole
/// price unit so that the escrow always covers the full duration's cost.
pub fn escrow_for(
    price: u64,
    unit: PriceUnit,
    gpus: u64,
    max_duration_secs: u64,
) -> Result<u64, MathError> {
    let gpu_secs = gpus
        .checked_mul(max_duration_secs)
        .ok_or(MathError::Overflow)?;
    mul_div_ceil(price, gpu_secs, unit.secs())
}

/// The escrow a bid locks at placement: its price for its whole run (`run_secs`, see
/// [`escrow_for`]) and for the longest it may wait to start (`wait_secs`, from placement to its
/// latest start). Waiting in a full book costs at most the second part ([`holding_charge`] of
/// at most `wait_secs`), so what is left always pays the whole run, and no bid can hold a place
/// for longer than its escrow pays for.
pub fn bid_escrow(
    price: u64,
    unit: PriceUnit,
    gpus: u64,
    run_secs: u64,
    wait_secs: u64,
) -> Result<u64, MathError> {
    escrow_for(price, unit, gpus, run_secs)?
        .checked_add(escrow_for(price, unit, gpus, wait_secs)?)
        .ok_or(MathError::Overflow)
}

/// What waiting in a full book cost a bid: its own price for the GPUs it asks, for the seconds
/// its book was full while it waited (`full_secs`), never more than its `escrow`. A full book
/// turns newcomers away, so each entry in it pays, while it is full, what the GPU-hours it asks
/// would cost to run: holding a place is never cheaper than using one. Infallible: an amount
/// past `u64` is past any escrow.
pub fn holding_charge(price: u64, unit: PriceUnit, gpus: u64, full_secs: u64, escrow: u64) -> u64 {
    if full_secs == 0 {
        return 0;
    }
    escrow_for(price, unit, gpus, full_secs).map_or(escrow, |charge| charge.min(escrow))
}

/// The whole seconds `escrow` pays for `gpus` GPUs at `price` per GPU per `unit` (rounded
/// down; `u64::MAX` when the price is zero).
pub fn secs_covered(price: u64, unit: PriceUnit, gpus: u64, escrow: u64) -> u64 {
    price
        .checked_mul(gpus)
        .filter(|&rate| rate > 0)
        .map_or(u64::MAX, |rate| {
            mul_div_floor(escrow, unit.secs(), rate).unwrap_or(u64::MAX)
        })
}

/// One settlement step: what is owed for `billed_secs` proven seconds in all, less what was
/// already `paid`, never more than what is left in escrow, split between the host and the
/// protocol's fee. Computed on the running total, so rounding never loses a unit: a price too
/// small to pay one interval still pays once enough intervals add up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Payout {
    pub to_host: u64,
    pub fee: u64,
    pub escrow_left: u64,
}

/// What a lease has been billed so far: its price and the seconds and amount paid until now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Billing {
    pub price: u64,
    pub unit: PriceUnit,
    pub gpus: u64,
    /// Proven payable seconds in all, including this step's.
    pub billed_secs: u64,
    /// Gross amount paid by earlier steps.
    pub paid: u64,
}

pub fn payout(b: Billing, escrow: u64, fee_bps: u64) -> Result<Payout, MathError> {
    let owed = cost(b.price, b.unit, b.gpus, b.billed_secs)?.saturating_sub(b.paid);
    let gross = owed.min(escrow);
    let fee = apply_bps(gross, fee_bps.min(crate::BPS))?;
    Ok(Payout {
        to_host: gross - fee,
        fee,
        escrow_left: escrow - gross,
    })
}

/// How many times its value a slash for a lease's silence may take at most: half of it goes to
/// the lease's client, who so gets back at most the lease's value besides the refund of its
/// unproven time.
pub const SLASH_LEASE_VALUE_MULTIPLE: u64 = 2;

/// The share of a machine's bond a slash takes for `units` of evidence (missed intervals,
/// power-limit violations): `slash_bps` per `slash_evidence` units, in proportion, never more
/// than the whole bond.
pub fn slash_share_bps(slash_bps: u64, units: u64, slash_evidence: u64) -> Result<u64, MathError> {
    Ok(mul_div_floor(slash_bps, units, slash_evidence.max(1))?.min(BPS))
}

/// What a slash takes from a host: `share_bps` of the slashed machine's `bond` (what
/// registering it put at stake, never more than the host's `staked`), and, where the harm has a
/// value in the stake's own token, no more than `value_cap` (a silent lease:
/// [`SLASH_LEASE_VALUE_MULTIPLE`] × its value). A host's other machines, and the rest of a large
/// stake, are not what one machine's failure is slashed from.
pub fn slash_amount(
    bond: u64,
    staked: u64,
    share_bps: u64,
    value_cap: Option<u64>,
) -> Result<u64, MathError> {
    let take = apply_bps(bond.min(staked), share_bps.min(BPS))?;
    Ok(value_cap.map_or(take, |cap| take.min(cap)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn escrow_covers_the_full_duration() {
        assert_eq!(
            escrow_for(3_600, PriceUnit::PerGpuHour, 2, 1_800),
            Ok(3_600)
        );
        assert_eq!(escrow_for(1, PriceUnit::PerGpuHour, 1, 1), Ok(1));
        assert_eq!(escrow_for(86_400, PriceUnit::PerGpuDay, 1, 60), Ok(60));
        assert_eq!(
            escrow_for(u64::MAX, PriceUnit::PerGpuHour, 16, u64::MAX),
            Err(MathError::Overflow)
        );
    }

    #[test]
    fn payout_is_capped_by_escrow_and_splits_the_fee() {
        let p = payout(hourly(3_600, 1, 100, 0), 1_000, 250).unwrap();
        assert_eq!(
            p,
            Payout {
                to_host: 98,
                fee: 2,
                escrow_left: 900
            }
        );
        let p = payout(hourly(3_600, 1, 10_000, 0), 1_000, 0).unwrap();
        assert_eq!(
            p,
            Payout {
                to_host: 1_000,
                fee: 0,
                escrow_left: 0
            }
        );
    }

    fn hourly(price: u64, gpus: u64, billed_secs: u64, paid: u64) -> Billing {
        Billing {
            price,
            unit: PriceUnit::PerGpuHour,
            gpus,
            billed_secs,
            paid,
        }
    }

    #[test]
    fn small_prices_are_carried_not_rounded_away() {
        // 1 per GPU-day pays nothing for one 60 s interval, and 1 after 1,440 of them.
        let day = |secs, paid| Billing {
            price: 1,
            unit: PriceUnit::PerGpuDay,
            gpus: 1,
            billed_secs: secs,
            paid,
        };
        let mut paid = 0;
        for i in 1..=1_440u64 {
            let p = payout(day(i * 60, paid), 10, 0).unwrap();
            paid += p.to_host + p.fee;
        }
        assert_eq!(paid, 1);
    }

    #[test]
    fn holding_costs_what_running_would() {
        // A 2-GPU bid at 3,600 per GPU-hour that waited a full book's hour pays two GPU-hours.
        assert_eq!(
            holding_charge(3_600, PriceUnit::PerGpuHour, 2, 3_600, 1 << 20),
            7_200
        );
        // Never past its escrow, whatever the wait, and nothing while the book was not full.
        assert_eq!(
            holding_charge(u64::MAX, PriceUnit::PerGpuHour, 16, u64::MAX, 5),
            5
        );
        assert_eq!(
            holding_charge(3_600, PriceUnit::PerGpuHour, 2, 0, 1 << 20),
            0
        );
        assert_eq!(secs_covered(3_600, PriceUnit::PerGpuHour, 2, 7_199), 3_599);
        assert_eq!(secs_covered(0, PriceUnit::PerGpuHour, 2, 1), u64::MAX);
    }

    proptest! {
        #[test]
        fn what_waiting_costs_never_eats_into_the_run(price in 0u64..1 << 40, gpus in 1u64..=16, run in 1u64..1 << 22, wait in 0u64..1 << 22, held_pct in 0u64..=100, spot: bool) {
            let unit = if spot { PriceUnit::PerGpuDay } else { PriceUnit::PerGpuHour };
            let escrow = bid_escrow(price, unit, gpus, run, wait).unwrap();
            let charge = holding_charge(price, unit, gpus, wait * held_pct / 100, escrow);
            prop_assert!(escrow - charge >= escrow_for(price, unit, gpus, run).unwrap());
        }

        #[test]
        fn a_holding_charge_is_the_cost_of_the_held_time_within_the_escrow(price in 0u64..1 << 40, gpus in 1u64..=16, held in 0u64..1 << 26, escrow: u64, spot: bool) {
            let unit = if spot { PriceUnit::PerGpuDay } else { PriceUnit::PerGpuHour };
            let charge = holding_charge(price, unit, gpus, held, escrow);
            prop_assert!(charge <= escrow);
            let full = escrow_for(price, unit, gpus, held).unwrap();
            prop_assert_eq!(charge, full.min(escrow));
            // What is left after the charge never pays for more time than it covers.
            let left = escrow - charge;
            let covered = secs_covered(price, unit, gpus, left);
            if covered != u64::MAX {
                prop_assert!(cost(price, unit, gpus, covered).unwrap() <= left);
            }
        }

        #[test]
        fn a_slash_takes_at_most_the_bond_the_stake_and_the_cap(bond: u64, staked: u64, slash_bps in 0u64..=5_000, units in 0u64..1 << 16, evidence in 0u64..1 << 8, cap: Option<u64>) {
            let share = slash_share_bps(slash_bps, units, evidence).unwrap();
            prop_assert!(share <= BPS);
            let take = slash_amount(bond, staked, share, cap).unwrap();
            prop_assert!(take <= bond && take <= staked);
            prop_assert!(cap.is_none_or(|c| take <= c));
            // More evidence never takes less.
            let more = slash_share_bps(slash_bps, units + 1, evidence).unwrap();
            prop_assert!(slash_amount(bond, staked, more, cap).unwrap() >= take);
        }

        #[test]
        fn spend_per_hour_is_the_cost_of_an_hour(price in 0u64..1 << 40, gpus in 1u64..=16, daily: bool) {
            let unit = if daily { PriceUnit::PerGpuDay } else { PriceUnit::PerGpuHour };
            prop_assert_eq!(spend_per_hour(price, unit, gpus), cost(price, unit, gpus, SECS_PER_HOUR));
        }

        #[test]
        fn payouts_conserve_escrow(price in 0u64..1 << 40, gpus in 1u64..=16, secs in 0u64..1 << 24, escrow: u64, fee in 0u64..=10_000) {
            let p = payout(hourly(price, gpus, secs, 0), escrow, fee).unwrap();
            prop_assert_eq!(p.to_host as u128 + p.fee as u128 + p.escrow_left as u128, escrow as u128);
        }

        #[test]
        fn interval_payments_never_exceed_the_escrow(price in 0u64..1 << 30, gpus in 1u64..=16, dur in 1u64..1 << 20, steps in proptest::collection::vec(0u64..1 << 16, 1..40)) {
            let mut escrow = escrow_for(price, PriceUnit::PerGpuHour, gpus, dur).unwrap();
            let start = escrow;
            let (mut paid, mut billed) = (0u64, 0u64);
            for s in steps {
                billed += s;
                let p = payout(hourly(price, gpus, billed, paid), escrow, 0).unwrap();
                paid += p.to_host;
                escrow = p.escrow_left;
            }
            prop_assert_eq!(paid + escrow, start);
            // Nothing is lost to rounding: the total is the cost of the total time (or the escrow).
            let total = cost(price, PriceUnit::PerGpuHour, gpus, billed).unwrap().min(start);
            prop_assert_eq!(paid, total);
        }
    }
}
