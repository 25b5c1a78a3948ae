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

/// `a * b` as the high and low halves of the 128-bit product.
pub fn widening_mul(a: u64, b: u64) -> (u64, u64) {
    let p = a as u128 * b as u128;
    ((p >> 64) as u64, p as u64)
}

/// `(hi·2⁶⁴ + lo) / d` and its remainder, with 64-bit operations only.
///
/// The SBF target has no 128-bit division (`__udivti3`), so this is Hacker's Delight's `divlu`:
/// normalise the divisor, then two rounds of 64/32-bit estimation with at most two corrections
/// each. Fails when the quotient does not fit in 64 bits (`hi >= d`) or `d` is zero.
pub fn div_wide(hi: u64, lo: u64, d: u64) -> Result<(u64, u64), MathError> {
    const B: u64 = 1 << 32;
    if d == 0 {
        return Err(MathError::DivisionByZero);
    }
    if hi >= d {
        return Err(MathError::Overflow);
    }
    if hi == 0 {
        // The common case: the product fits in 64 bits.
        return Ok((lo / d, lo % d));
    }
    let s = d.leading_zeros();
    let v = d << s;
    let (vn1, vn0) = (v >> 32, v & (B - 1));
    let un32 = if s == 0 {
        hi
    } else {
        (hi << s) | (lo >> (64 - s))
    };
    let un10 = lo << s;
    let (un1, un0) = (un10 >> 32, un10 & (B - 1));

    let mut q1 = un32 / vn1;
    let mut rhat = un32 - q1 * vn1;
    while q1 >= B || q1 * vn0 > B * rhat + un1 {
        q1 -= 1;
        rhat += vn1;
        if rhat >= B {
            break;
        }
    }
    let un21 = un32
        .wrapping_mul(B)
        .wrapping_add(un1)
        .wrapping_sub(q1.wrapping_mul(v));
    let mut q0 = un21 / vn1;
    let mut rhat = un21 - q0 * vn1;
    while q0 >= B || q0 * vn0 > B * rhat + un0 {
        q0 -= 1;
        rhat += vn1;
        if rhat >= B {
            break;
        }
    }
    let r = un21
        .wrapping_mul(B)
        .wrapping_add(un0)
        .wrapping_sub(q0.wrapping_mul(v))
        >> s;
    Ok((q1 * B + q0, r))
}

/// `a * b / d`, rounded down, exact over the full 128-bit product; fails if the result does not
/// fit in `u64`.
pub fn mul_div_floor(a: u64, b: u64, d: u64) -> Result<u64, MathError> {
    let (hi, lo) = widening_mul(a, b);
    div_wide(hi, lo, d).map(|(q, _)| q)
}

/// `a * b / d`, rounded up.
pub fn mul_div_ceil(a: u64, b: u64, d: u64) -> Result<u64, MathError> {
    let (hi, lo) = widening_mul(a, b);
    let (q, r) = div_wide(hi, lo, d)?;
    q.checked_add(u64::from(r != 0)).ok_or(MathError::Overflow)
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
    // value.min(bound) <= bound, so the quotient is at most BPS and always fits.
    mul_div_floor(value.min(bound), BPS, bound).unwrap_or(BPS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn wide_division_edge_cases() {
        assert_eq!(div_wide(0, 7, 2), Ok((3, 1)));
        assert_eq!(
            div_wide(u64::MAX - 1, u64::MAX, u64::MAX),
            Ok((u64::MAX, u64::MAX - 1))
        );
        assert_eq!(div_wide(1, 0, 1), Err(MathError::Overflow));
        assert_eq!(div_wide(0, 1, 0), Err(MathError::DivisionByZero));
        assert_eq!(div_wide(1, 0, 1 << 63), Ok((2, 0)));
    }

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
        fn wide_division_matches_u128(hi: u64, lo: u64, d in 1u64..) {
            let n = ((hi as u128) << 64) | lo as u128;
            match div_wide(hi, lo, d) {
                Ok((q, r)) => {
                    prop_assert_eq!(q as u128, n / d as u128);
                    prop_assert_eq!(r as u128, n % d as u128);
                }
                Err(e) => {
                    prop_assert_eq!(e, MathError::Overflow);
                    prop_assert!(n / d as u128 > u64::MAX as u128);
                }
            }
        }

        #[test]
        fn wide_division_with_small_divisors(hi in 0u64..1_000, lo: u64, d in 1_001u64..1 << 20) {
            let n = ((hi as u128) << 64) | lo as u128;
            let (q, r) = div_wide(hi, lo, d).unwrap();
            prop_assert_eq!((q as u128, r as u128), (n / d as u128, n % d as u128));
        }

        #[test]
        fn ceil_is_floor_plus_remainder(a: u32, b: u32, d in 1u64..1 << 40) {
            let exact = a as u128 * b as u128;
            let c = mul_div_ceil(a as u64, b as u64, d).unwrap() as u128;
            prop_assert_eq!(c, exact.div_ceil(d as u128));
        }

        #[test]
        fn normalise_is_bounded_and_monotone(a: u64, b: u64, bound: u64) {
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            prop_assert!(normalise_bps(hi, bound) <= BPS);
            prop_assert!(normalise_bps(lo, bound) <= normalise_bps(hi, bound));
        }
    }
}
