//! Demand forecast for the reserve price: exponential smoothing of the level times an
//! hour-of-day profile (multiplicative Holt-Winters without trend), in integers on [`smooth_bps`].
//!
//! Explainable by construction: the state is one level (demand per hour, deseasonalised) and
//! 24 factors in bps (10 000 = an average hour). After each hour's demand `x` is observed:
//! - level ← smooth(level, x ÷ factor[h], α)
//! - factor[h] ← smooth(factor[h], x ÷ level, γ), the ratio capped at [`MAX_FACTOR_BPS`]
//!
//! and the forecast for hour `h` is `level × factor[h]`. The reserve price takes its Demand
//! factor from the forecast against the GPUs offered ([`demand_bps`]) and its Seasonal factor
//! from the hour's profile, clamped to a band the market sets.

use crate::math::BPS;
use crate::pricing::{demand_bps, smooth_bps};

/// Hours in the profile.
pub const HOURS: usize = 24;
/// The highest an hour's factor may reach (8 × an average hour).
pub const MAX_FACTOR_BPS: u64 = 8 * BPS;
/// The lowest an hour's factor may fall (⅛ of an average hour).
pub const MIN_FACTOR_BPS: u64 = BPS / 8;
/// Demand is kept in thousandths, so that small counts smooth without rounding to zero.
const SCALE: u64 = 1_000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HourlyForecast {
    alpha_bps: u64,
    gamma_bps: u64,
    /// Deseasonalised demand per hour, in thousandths; `None` before the first observation.
    level: Option<u64>,
    factor_bps: [u64; HOURS],
}

impl HourlyForecast {
    /// `alpha_bps` smooths the level, `gamma_bps` the hour-of-day profile.
    pub fn new(alpha_bps: u64, gamma_bps: u64) -> HourlyForecast {
        HourlyForecast {
            alpha_bps: alpha_bps.min(BPS),
            gamma_bps: gamma_bps.min(BPS),
            level: None,
            factor_bps: [BPS; HOURS],
        }
    }

    /// The deseasonalised level, per hour (rounded down).
    pub fn level(&self) -> u64 {
        self.level.unwrap_or(0) / SCALE
    }

    /// The hour-of-day profile, in bps.
    pub fn profile_bps(&self) -> &[u64; HOURS] {
        &self.factor_bps
    }

    /// Forecast demand for an hour of the day (`hour` is taken mod 24).
    pub fn forecast(&self, hour: usize) -> u64 {
        let level = self.level.unwrap_or(0) as u128;
        (level * self.factor_bps[hour % HOURS] as u128 / BPS as u128 / SCALE as u128) as u64
    }

    /// Takes the demand observed during an hour of the day.
    pub fn observe(&mut self, hour: usize, demand: u64) {
        let h = hour % HOURS;
        let x = demand.saturating_mul(SCALE);
        let Some(level) = self.level else {
            self.level = Some(x);
            return;
        };
        let deseasonalised = mul_div(x, BPS, self.factor_bps[h]);
        let level = smooth_bps(level, deseasonalised, self.alpha_bps);
        self.level = Some(level);
        let ratio = if level == 0 {
            BPS
        } else {
            mul_div(x, BPS, level).clamp(MIN_FACTOR_BPS, MAX_FACTOR_BPS)
        };
        self.factor_bps[h] = smooth_bps(self.factor_bps[h], ratio, self.gamma_bps);
        // Renormalise so that the factors average 10 000 (the level then is the daily mean),
        // moving the difference into the level: forecasts do not change.
        let sum: u64 = self.factor_bps.iter().sum();
        let target = BPS * HOURS as u64;
        for f in self.factor_bps.iter_mut() {
            *f = mul_div(*f, target, sum).clamp(MIN_FACTOR_BPS, MAX_FACTOR_BPS);
        }
        self.level = Some(mul_div(level, sum, target));
    }

    /// The reserve price's Demand factor for an hour: forecast GPUs wanted against `offered`.
    pub fn demand_bps(&self, hour: usize, offered_gpus: u64, cap_bps: u64) -> u64 {
        demand_bps(self.forecast(hour), offered_gpus, cap_bps)
    }

    /// The reserve price's Seasonal factor for an hour: its profile, clamped to `lo..=hi`.
    pub fn seasonal_bps(&self, hour: usize, lo: u64, hi: u64) -> u64 {
        self.factor_bps[hour % HOURS].clamp(lo, hi.max(lo))
    }
}

/// `a × b ÷ d`, saturating at `u64::MAX`.
fn mul_div(a: u64, b: u64, d: u64) -> u64 {
    crate::math::mul_div_floor(a, b, d).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Demand of 100 at night (hours 0..12) and 300 by day.
    fn day(h: usize) -> u64 {
        if h % HOURS < 12 {
            100
        } else {
            300
        }
    }

    #[test]
    fn learns_a_daily_profile() {
        let mut f = HourlyForecast::new(1_000, 2_000);
        for h in 0..24 * 60 {
            f.observe(h, day(h));
        }
        // Level ≈ the daily mean 200; night ≈ 0.5, day ≈ 1.5.
        assert!((190..=210).contains(&f.level()), "{}", f.level());
        for h in 0..HOURS {
            let err = f.forecast(h).abs_diff(day(h));
            assert!(
                err <= day(h) / 20,
                "hour {h}: {} vs {}",
                f.forecast(h),
                day(h)
            );
        }
        assert!((4_500..=5_500).contains(&f.profile_bps()[3]));
        assert!((14_500..=15_500).contains(&f.profile_bps()[15]));
        // The price factors: demand 300 of 600 offered = 50 %; the seasonal band clamps.
        let d = f.demand_bps(15, 600, 20_000);
        assert!((4_700..=5_300).contains(&d), "{d}");
        assert_eq!(f.seasonal_bps(15, 8_000, 12_000), 12_000);
        assert_eq!(f.seasonal_bps(3, 8_000, 12_000), 8_000);
    }

    #[test]
    fn starts_from_the_first_observation() {
        let mut f = HourlyForecast::new(5_000, 5_000);
        assert_eq!(f.forecast(7), 0);
        f.observe(7, 42);
        assert_eq!((f.level(), f.forecast(7), f.forecast(8)), (42, 42, 42));
        // Half of 42 in the level, and hour 8 becomes a quiet hour (the profile renormalised).
        f.observe(8, 0);
        assert_eq!(f.level(), 20);
        assert!(f.forecast(8) < f.forecast(7));
    }

    proptest! {
        /// A constant demand is forecast exactly, whatever the smoothing.
        #[test]
        fn constant_demand_is_a_fixed_point(c in 0u64..1_000_000, a in 0u64..=10_000, g in 0u64..=10_000, n in 1usize..200) {
            let mut f = HourlyForecast::new(a, g);
            for h in 0..n {
                f.observe(h, c);
            }
            for h in 0..HOURS {
                prop_assert_eq!(f.forecast(h), c);
            }
        }

        /// Factors stay in their band, the level within 8 × the largest demand seen, and the
        /// forecast within the level times the largest factor.
        #[test]
        fn the_state_stays_bounded(xs in prop::collection::vec(0u64..1 << 40, 1..300), a in 0u64..=10_000, g in 0u64..=10_000) {
            let mut f = HourlyForecast::new(a, g);
            for (h, &x) in xs.iter().enumerate() {
                f.observe(h, x);
            }
            let max = *xs.iter().max().unwrap() as u128;
            for h in 0..HOURS {
                prop_assert!((MIN_FACTOR_BPS..=MAX_FACTOR_BPS).contains(&f.profile_bps()[h]));
                prop_assert!(f.level() as u128 <= max * (BPS / MIN_FACTOR_BPS) as u128);
                prop_assert!(f.forecast(h) as u128 <= f.level() as u128 * MAX_FACTOR_BPS as u128 / BPS as u128 + 1);
            }
        }

        /// More demand observed never lowers the next forecast for the same hour.
        #[test]
        fn the_forecast_is_monotone_in_demand(xs in prop::collection::vec(0u64..10_000, 1..100), lo in 0u64..10_000, d in 0u64..10_000) {
            let run = |last: u64| {
                let mut f = HourlyForecast::new(2_000, 1_000);
                for (h, &x) in xs.iter().enumerate() {
                    f.observe(h, x);
                }
                f.observe(xs.len(), last);
                f.level()
            };
            prop_assert!(run(lo) <= run(lo + d));
        }
    }
}
