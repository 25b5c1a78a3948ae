//! The dynamic reserve price: `Base × (1 + Demand) × (1 + Capability) × Seasonal` per GPU-hour.

use crate::math::{apply_bps, mul_div_floor, MathError, BPS};

/// Demand in bps from GPUs wanted by waiting bids against GPUs offered by active machines,
/// capped at `cap_bps`. With nothing offered, demand is at its cap as soon as anything is wanted.
pub fn demand_bps(requested_gpus: u64, offered_gpus: u64, cap_bps: u64) -> u64 {
    if requested_gpus == 0 {
        return 0;
    }
    if offered_gpus == 0 {
        return cap_bps;
    }
    mul_div_floor(requested_gpus, BPS, offered_gpus)
        .unwrap_or(u64::MAX)
        .min(cap_bps)
}

/// Exponential smoothing in bps: `prev + alpha·(sample − prev)`.
pub fn smooth_bps(prev: u64, sample: u64, alpha_bps: u64) -> u64 {
    // prev + alpha·(sample − prev), on whichever side sample lies; never leaves [prev, sample].
    let alpha = alpha_bps.min(BPS);
    if sample >= prev {
        prev + mul_div_floor(sample - prev, alpha, BPS).unwrap_or(0)
    } else {
        prev - mul_div_floor(prev - sample, alpha, BPS).unwrap_or(0)
    }
}

/// Reserve price per GPU-hour in token base units, rounded down after every factor.
pub fn reserve_price(
    base_per_gpu_hour: u64,
    demand_bps: u64,
    capability_bps: u64,
    seasonal_bps: u64,
) -> Result<u64, MathError> {
    let p = apply_bps(
        base_per_gpu_hour,
        BPS.checked_add(demand_bps).ok_or(MathError::Overflow)?,
    )?;
    let p = apply_bps(
        p,
        BPS.checked_add(capability_bps).ok_or(MathError::Overflow)?,
    )?;
    apply_bps(p, seasonal_bps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn neutral_factors_give_the_base_price() {
        assert_eq!(reserve_price(1_000_000, 0, 0, BPS), Ok(1_000_000));
        // +50 % demand, +20 % capability, 0.8 seasonal: 1.0 × 1.5 × 1.2 × 0.8 = 1.44
        assert_eq!(reserve_price(1_000_000, 5_000, 2_000, 8_000), Ok(1_440_000));
        assert_eq!(reserve_price(u64::MAX, 1, 0, BPS), Err(MathError::Overflow));
    }

    #[test]
    fn demand_is_a_capped_ratio() {
        assert_eq!(demand_bps(0, 0, 20_000), 0);
        assert_eq!(demand_bps(5, 0, 20_000), 20_000);
        assert_eq!(demand_bps(5, 10, 20_000), 5_000);
        assert_eq!(demand_bps(50, 10, 20_000), 20_000);
        assert_eq!(smooth_bps(0, 10_000, 2_500), 2_500);
        assert_eq!(smooth_bps(8_000, 8_000, 2_500), 8_000);
    }

    proptest! {
        #[test]
        fn price_never_falls_below_base_times_seasonal(base in 0u64..1u64 << 40, d in 0u64..40_000, c in 0u64..40_000, s in 0u64..40_000) {
            let p = reserve_price(base, d, c, s).unwrap();
            let floor = apply_bps(base, s).unwrap();
            prop_assert!(p + 2 >= floor, "rounding loses at most one unit per factor");
            let upper = base as u128 * (BPS + d) as u128 * (BPS + c) as u128 * s as u128 / (BPS as u128).pow(3);
            prop_assert!(p as u128 <= upper);
        }

        #[test]
        fn price_is_monotone_in_demand(base in 0u64..1u64 << 40, a in 0u64..40_000, b in 0u64..40_000) {
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            prop_assert!(reserve_price(base, lo, 0, BPS).unwrap() <= reserve_price(base, hi, 0, BPS).unwrap());
        }

        #[test]
        fn smoothing_stays_between_prev_and_sample(prev: u64, sample: u64, alpha in 0u64..=10_000) {
            let v = smooth_bps(prev, sample, alpha);
            prop_assert!(v >= prev.min(sample) && v <= prev.max(sample));
        }
    }
}
