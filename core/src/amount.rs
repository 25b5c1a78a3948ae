//! Token amounts as people write them ("1.5") and as the chain stores them (base units).

/// Why a written amount was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AmountError {
    Empty,
    NotANumber(String),
    TooManyDecimals { given: usize, allowed: u8 },
    Overflow,
}

impl core::fmt::Display for AmountError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            AmountError::Empty => f.write_str("the amount is empty"),
            AmountError::NotANumber(s) => write!(f, "{s:?} is not a decimal number"),
            AmountError::TooManyDecimals { given, allowed } => {
                write!(f, "{given} decimal places given, the token has {allowed}")
            }
            AmountError::Overflow => f.write_str("the amount is too large"),
        }
    }
}

impl std::error::Error for AmountError {}

/// Parses `"12.345"` into base units of a token with `decimals` decimals, exactly.
pub fn parse(s: &str, decimals: u8) -> Result<u64, AmountError> {
    let s = s.trim();
    if s.is_empty() {
        return Err(AmountError::Empty);
    }
    let (whole, frac) = s.split_once('.').unwrap_or((s, ""));
    let digits = |t: &str| t.chars().all(|c| c.is_ascii_digit());
    if (whole.is_empty() && frac.is_empty()) || !digits(whole) || !digits(frac) {
        return Err(AmountError::NotANumber(s.to_string()));
    }
    if frac.len() > decimals as usize {
        return Err(AmountError::TooManyDecimals {
            given: frac.len(),
            allowed: decimals,
        });
    }
    let scale = 10u64
        .checked_pow(decimals as u32)
        .ok_or(AmountError::Overflow)?;
    let whole: u64 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| AmountError::Overflow)?
    };
    let frac_units: u64 = if frac.is_empty() {
        0
    } else {
        let padded = format!("{frac:0<width$}", width = decimals as usize);
        padded.parse().map_err(|_| AmountError::Overflow)?
    };
    whole
        .checked_mul(scale)
        .and_then(|w| w.checked_add(frac_units))
        .ok_or(AmountError::Overflow)
}

/// Formats base units with `decimals` decimals, trailing zeros trimmed (`1500000`, 6 → `"1.5"`).
pub fn format(units: u64, decimals: u8) -> String {
    if decimals == 0 {
        return units.to_string();
    }
    let s = format!("{units:0>width$}", width = decimals as usize + 1);
    let (whole, frac) = s.split_at(s.len() - decimals as usize);
    let frac = frac.trim_end_matches('0');
    if frac.is_empty() {
        whole.to_string()
    } else {
        format!("{whole}.{frac}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_exactly() {
        assert_eq!(parse("1.5", 6), Ok(1_500_000));
        assert_eq!(parse("0.000001", 6), Ok(1));
        assert_eq!(parse(".5", 1), Ok(5));
        assert_eq!(parse("7", 0), Ok(7));
        assert_eq!(parse("18446744073709.551615", 6), Ok(u64::MAX));
        assert_eq!(
            parse("18446744073709.551616", 6),
            Err(AmountError::Overflow)
        );
        assert_eq!(
            parse("0.0000001", 6),
            Err(AmountError::TooManyDecimals {
                given: 7,
                allowed: 6
            })
        );
        assert!(matches!(parse("-1", 6), Err(AmountError::NotANumber(_))));
        assert!(matches!(parse("1e3", 6), Err(AmountError::NotANumber(_))));
        assert!(matches!(parse(".", 6), Err(AmountError::NotANumber(_))));
        assert_eq!(parse(" ", 6), Err(AmountError::Empty));
    }

    #[test]
    fn formats_without_trailing_zeros() {
        assert_eq!(format(1_500_000, 6), "1.5");
        assert_eq!(format(1, 6), "0.000001");
        assert_eq!(format(2_000_000, 6), "2");
        assert_eq!(format(42, 0), "42");
    }

    proptest! {
        #[test]
        fn format_then_parse_round_trips(units: u64, decimals in 0u8..=9) {
            prop_assert_eq!(parse(&format(units, decimals), decimals), Ok(units));
        }
    }
}
