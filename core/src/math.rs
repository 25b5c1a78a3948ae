//! Checked integer helpers.

/// One whole in basis points.
pub const BPS: u64 = 10_000;

/// Arithmetic that would overflow or divide by zero. Callers map it to their own typed error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MathError {
    Overflow,
    DivisionByZero,
}

impl core::fmt::Display for MathError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            MathError::Overflow => f.write_str("arithmetic overflow"),
            MathError::DivisionByZero => f.write_str("division by zero"),
        }
    }
}

impl std::error::Error for MathError {}

/// `a * b / d`, rounded down, computed in 128 bits; fails if the result does not fit in `u64`.
pub fn mul_div_floor(a: u64, b: u64, d: u64) -> Result<u64, MathError> {
    if d == 0 {
        return Err(MathError::DivisionByZero);
    }
    let q = (a as u128 * b as u128) / d as u128;
    u64::try_from(q).map_err(|_| MathError::Overflow)
}

/// `value * bps / 10 000`, rounded down.
pub fn apply_bps(value: u64, bps: u64) -> Result<u64, MathError> {
    mul_div_floor(value, bps, BPS)
}

/// `value` clamped into `0..=bound` and scaled to `0..=10 000` bps of `bound` (rounded down).
/// A zero bound normalises everything to zero: an input the market does not weigh.
pub fn normalise_bps(value: u64, bound: u64) -> u64 {
    if bound == 0 {
        return 0;
    }
    let v = value.min(bound);
    // v <= bound, so the quotient is at most BPS and always fits.
    ((v as u128 * BPS as u128) / bound as u128) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn mul_div_rounds_down_and_rejects_zero_divisor() {
        assert_eq!(mul_div_floor(10, 3, 4), Ok(7));
        assert_eq!(mul_div_floor(1, 1, 0), Err(MathError::DivisionByZero));
        assert_eq!(mul_div_floor(u64::MAX, 2, 1), Err(MathError::Overflow));
        assert_eq!(mul_div_floor(u64::MAX, u64::MAX, u64::MAX), Ok(u64::MAX));
    }

    #[test]
    fn normalise_clamps_and_scales() {
        assert_eq!(normalise_bps(0, 100), 0);
        assert_eq!(normalise_bps(50, 100), 5_000);
        assert_eq!(normalise_bps(1_000, 100), BPS);
        assert_eq!(normalise_bps(7, 0), 0);
    }

    proptest! {
        #[test]
        fn mul_div_matches_wide_arithmetic(a: u64, b: u64, d in 1u64..) {
            let wide = a as u128 * b as u128 / d as u128;
            match mul_div_floor(a, b, d) {
                Ok(q) => prop_assert_eq!(q as u128, wide),
                Err(e) => {
                    prop_assert_eq!(e, MathError::Overflow);
                    prop_assert!(wide > u64::MAX as u128);
                }
            }
        }

        #[test]
        fn normalise_is_bounded_and_monotone(a: u64, b: u64, bound: u64) {
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            prop_assert!(normalise_bps(hi, bound) <= BPS);
            prop_assert!(normalise_bps(lo, bound) <= normalise_bps(hi, bound));
        }
    }
}
