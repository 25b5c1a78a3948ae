//! What people type, checked: token amounts, durations, deadlines, digests, overclock terms.
//! Every parser returns one clear sentence on bad input.

use anyhow::{anyhow, bail, Result};
use gpu_market::state::{Cidr, Egress, OverclockTerms, MAX_ALLOW, MAX_AUTO_POWER_TOLERANCE_BPS};
use gpu_market_core::amount::AmountError;
use serde_json::Value;

/// A token amount in token units (`"1.5"`), exact in base units of a mint with `decimals`.
/// Refuses negative numbers, more decimals than the mint has, and overflow.
pub fn amount(s: &str, decimals: u8, what: &str) -> Result<u64> {
    gpu_market_core::amount::parse(s, decimals).map_err(|e| anyhow!("bad {what} {s:?}: {e}"))
}

/// Like [`amount`], and above zero.
pub fn positive_amount(s: &str, decimals: u8, what: &str) -> Result<u64> {
    let units = amount(s, decimals, what)?;
    if units == 0 {
        bail!("the {what} must be greater than zero");
    }
    Ok(units)
}

/// Base units shown in token units.
pub fn tokens(units: u64, decimals: u8) -> Value {
    Value::String(gpu_market_core::amount::format(units, decimals))
}

/// A count such as a model's parameters: `7B`, `1.5B`, `350M`, `12K`, `1T` (thousand, million,
/// billion, trillion) or a plain whole number; exact, and above zero.
pub fn count(s: &str) -> Result<u64> {
    let t = s.trim();
    let (number, decimals) = match t.char_indices().last() {
        Some((i, 'K' | 'k')) => (&t[..i], 3),
        Some((i, 'M' | 'm')) => (&t[..i], 6),
        Some((i, 'B' | 'b')) => (&t[..i], 9),
        Some((i, 'T' | 't')) => (&t[..i], 12),
        _ => (t, 0),
    };
    positive_amount(number, decimals, "count")
        .map_err(|e| anyhow!("{e} (write e.g. 7B, 1.5B or 350M)"))
}

/// Seconds from `90`, `90s`, `15m`, `2h` or `3d`.
pub fn duration_secs(s: &str) -> Result<u64> {
    let t = s.trim();
    let (digits, unit) = match t.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => t.split_at(i),
        None => (t, "s"),
    };
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => bail!("bad duration {s:?}: write seconds, or a number with s, m, h or d (e.g. 90m)"),
    };
    if digits.is_empty() {
        bail!("bad duration {s:?}: it has no number");
    }
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(|| anyhow!("bad duration {s:?}: too large"))
}

/// Thousandths of a CPU core from cores, e.g. `8` or `0.5` (at most three decimals).
pub fn cpu_milli(s: &str) -> Result<u32> {
    let milli =
        gpu_market_core::amount::parse(s, 3).map_err(|e| anyhow!("bad CPU count {s:?}: {e}"))?;
    u32::try_from(milli).map_err(|_| anyhow!("bad CPU count {s:?}: too large"))
}

/// Cores from thousandths of a core, the way [`cpu_milli`] reads them.
pub fn cores(milli: u32) -> Value {
    tokens(milli as u64, 3)
}

/// MiB of memory from a size with its binary unit: `512MiB`, `32GiB`, `1TiB` (or M, G, T).
pub fn memory_mib(s: &str) -> Result<u32> {
    let t = s.trim();
    let (digits, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let scale: u64 = match unit {
        "MiB" | "M" => 1,
        "GiB" | "G" => 1 << 10,
        "TiB" | "T" => 1 << 20,
        "" => bail!("bad memory size {s:?}: give a unit, e.g. 512MiB or 32GiB"),
        _ => bail!("bad memory size {s:?}: write a whole number with MiB, GiB or TiB (e.g. 32GiB)"),
    };
    if digits.is_empty() {
        bail!("bad memory size {s:?}: it has no number");
    }
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .and_then(|mib| u32::try_from(mib).ok())
        .ok_or_else(|| anyhow!("bad memory size {s:?}: too large"))
}

/// A deadline: `+DURATION` from `now`, or an absolute unix time in seconds.
pub fn deadline(s: &str, now: i64) -> Result<i64> {
    let t = s.trim();
    if let Some(rel) = t.strip_prefix('+') {
        let secs = i64::try_from(duration_secs(rel)?)
            .map_err(|_| anyhow!("bad deadline {s:?}: too far"))?;
        return now
            .checked_add(secs)
            .ok_or_else(|| anyhow!("bad deadline {s:?}: too far"));
    }
    t.parse::<i64>()
        .map_err(|_| anyhow!("bad deadline {s:?}: write +DURATION (e.g. +6h) or a unix time"))
}

/// A sha256 digest: 64 hex digits, optionally after `sha256:`.
pub fn digest(s: &str) -> Result<[u8; 32]> {
    let hex_part = s.trim().strip_prefix("sha256:").unwrap_or(s.trim());
    let mut out = [0u8; 32];
    hex::decode_to_slice(hex_part, &mut out)
        .map_err(|_| anyhow!("bad digest {s:?}: expected 64 hex digits (sha256)"))?;
    Ok(out)
}

/// Overclock terms for one GPU: `power=300[,core-lock=1500][,mem-lock=5000]
/// [,core-offset=-100][,mem-offset=200]` (W and MHz). The power limit is mandatory.
pub fn overclock(s: &str) -> Result<OverclockTerms> {
    let mut terms = OverclockTerms::default();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = part
            .split_once('=')
            .ok_or_else(|| anyhow!("bad overclock term {part:?}: expected KEY=VALUE"))?;
        let bad = || anyhow!("bad overclock value {part:?}: not a number in range");
        match key.trim() {
            "power" => terms.power_limit_w = value.trim().parse().map_err(|_| bad())?,
            "core-lock" => terms.core_lock_mhz = value.trim().parse().map_err(|_| bad())?,
            "mem-lock" => terms.mem_lock_mhz = value.trim().parse().map_err(|_| bad())?,
            "core-offset" => terms.core_offset_mhz = value.trim().parse().map_err(|_| bad())?,
            "mem-offset" => terms.mem_offset_mhz = value.trim().parse().map_err(|_| bad())?,
            other => bail!(
                "unknown overclock term {other:?}: use power, core-lock, mem-lock, core-offset, mem-offset"
            ),
        }
    }
    if terms.power_limit_w == 0 {
        bail!("the power limit is mandatory: give power=WATTS (above zero) in {s:?}");
    }
    Ok(terms)
}

/// Auto power's throughput tolerance when `--auto-power` is given without one.
pub const DEFAULT_AUTO_POWER: &str = "5%";

/// Auto power's throughput tolerance in bps from a percentage: `5%`, `5` or `2.5 %` (at most two
/// decimals), at most the program's cap (20 %). `0` is auto power that trades no throughput: the
/// limit still comes down to what the work draws.
pub fn auto_power_bps(s: &str) -> Result<u16> {
    let t = s.trim();
    let number = t.strip_suffix('%').unwrap_or(t);
    let cap = MAX_AUTO_POWER_TOLERANCE_BPS;
    let bad = |why: String| anyhow!("bad auto power tolerance {s:?}: {why}");
    match gpu_market_core::amount::parse(number, 2) {
        Ok(bps) if bps <= cap as u64 => Ok(bps as u16),
        Ok(_) | Err(AmountError::Overflow) => Err(bad(format!(
            "auto power trades at most {} of throughput",
            percent(cap)
        ))),
        Err(_) => Err(bad(
            "write a percentage of throughput with at most two decimals, e.g. 5% or 2.5".into(),
        )),
    }
}

/// Basis points as a percentage, e.g. `5 %` or `2.5 %`.
pub fn percent(bps: u16) -> String {
    format!("{} %", gpu_market_core::amount::format(bps as u64, 2))
}

/// A fixed-size, zero-padded byte field from text (region labels, image references).
pub fn padded<const N: usize>(s: &str, what: &str) -> Result<[u8; N]> {
    if s.len() > N {
        bail!("the {what} {s:?} is longer than {N} bytes");
    }
    let mut out = [0u8; N];
    out[..s.len()].copy_from_slice(s.as_bytes());
    Ok(out)
}

/// Text of a zero-padded byte field.
pub fn unpadded(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// An egress policy: `none`, `open`, or a comma-separated allow-list of IPv4 networks
/// (`a.b.c.d/len`, or an address alone for /32).
pub fn egress(s: &str) -> Result<(Egress, Vec<Cidr>)> {
    match s.trim() {
        "none" => Ok((Egress::None, Vec::new())),
        "open" => Ok((Egress::Open, Vec::new())),
        list => {
            let allow = list
                .split(',')
                .map(|c| cidr(c.trim()))
                .collect::<Result<Vec<_>>>()?;
            if allow.is_empty() || allow.len() > MAX_ALLOW {
                bail!(
                    "an egress allow-list holds 1 to {MAX_ALLOW} networks, not {}",
                    allow.len()
                );
            }
            Ok((Egress::AllowList, allow))
        }
    }
}

fn cidr(s: &str) -> Result<Cidr> {
    let bad = || {
        anyhow!("bad egress entry {s:?}: expected none, open or IPv4 networks like 203.0.113.0/24")
    };
    let (addr, prefix) = s.split_once('/').unwrap_or((s, "32"));
    let addr: std::net::Ipv4Addr = addr.parse().map_err(|_| bad())?;
    let prefix: u8 = prefix.parse().ok().filter(|p| *p <= 32).ok_or_else(bad)?;
    Ok(Cidr {
        addr: addr.octets(),
        prefix,
    })
}

/// The text [`egress`] reads.
pub fn format_egress(egress: Egress, allow: &[Cidr]) -> String {
    match egress {
        Egress::None => "none".into(),
        Egress::Open => "open".into(),
        Egress::AllowList => allow
            .iter()
            .map(|c| format!("{}/{}", std::net::Ipv4Addr::from(c.addr), c.prefix))
            .collect::<Vec<_>>()
            .join(","),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn counts_read_with_their_suffixes_exactly() {
        assert_eq!(count("7B").unwrap(), 7_000_000_000);
        assert_eq!(count("1.5b").unwrap(), 1_500_000_000);
        assert_eq!(count("350M").unwrap(), 350_000_000);
        assert_eq!(count("6738415616").unwrap(), 6_738_415_616);
        assert_eq!(count("1T").unwrap(), 1_000_000_000_000);
        for bad in ["", "B", "-7B", "0", "1.0000000001B", "7X", "99999999999T"] {
            let e = count(bad).unwrap_err().to_string();
            assert!(e.contains("count") && e.contains("e.g. 7B"), "{bad}: {e}");
        }
    }

    #[test]
    fn cpus_and_memory_read_as_people_write_them() {
        assert_eq!(cpu_milli("8").unwrap(), 8_000);
        assert_eq!(cpu_milli("0.5").unwrap(), 500);
        assert_eq!(cores(2_500), Value::from("2.5"));
        for bad in ["-1", "0.0005", "x", "", "4294968"] {
            let e = cpu_milli(bad).unwrap_err().to_string();
            assert!(e.starts_with("bad CPU count"), "{bad}: {e}");
        }
        assert_eq!(memory_mib("512MiB").unwrap(), 512);
        assert_eq!(memory_mib("32GiB").unwrap(), 32_768);
        assert_eq!(memory_mib("2G").unwrap(), 2_048);
        assert_eq!(memory_mib("1TiB").unwrap(), 1_048_576);
        for (bad, says) in [
            ("32", "give a unit"),
            ("1.5GiB", "whole number"),
            ("GiB", "no number"),
            ("4096TiB", "too large"),
            ("-1GiB", "whole number"),
        ] {
            let e = memory_mib(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn amounts_use_the_mint_decimals_and_refuse_bad_input() {
        assert_eq!(amount("2.5", 6, "price").unwrap(), 2_500_000);
        assert_eq!(amount("0", 0, "price").unwrap(), 0);
        for bad in [
            "-1",
            "1.0000001",
            "1.2.3",
            "abc",
            "",
            "1e3",
            "18446744073709.551616",
        ] {
            let e = amount(bad, 6, "price").unwrap_err().to_string();
            assert!(e.starts_with("bad price"), "{bad}: {e}");
        }
        assert!(amount("1.5", 0, "stake")
            .unwrap_err()
            .to_string()
            .contains("1 decimal places given, the token has 0"));
        assert_eq!(
            positive_amount("0.000", 6, "deposit")
                .unwrap_err()
                .to_string(),
            "the deposit must be greater than zero"
        );
        assert_eq!(tokens(1_500_000, 6), Value::from("1.5"));
    }

    #[test]
    fn durations_and_deadlines() {
        assert_eq!(duration_secs("90").unwrap(), 90);
        assert_eq!(duration_secs("15m").unwrap(), 900);
        assert_eq!(duration_secs("2h").unwrap(), 7_200);
        assert_eq!(duration_secs("1d").unwrap(), 86_400);
        for bad in ["", "h", "2w", "-5m", "1.5h", "99999999999999999999d"] {
            assert!(duration_secs(bad).is_err(), "{bad}");
        }
        assert_eq!(deadline("+1h", 1_000).unwrap(), 4_600);
        assert_eq!(deadline("1700000000", 1_000).unwrap(), 1_700_000_000);
        assert!(deadline("tomorrow", 0).is_err());
        assert!(deadline(&format!("+{}", u64::MAX), 0).is_err());
    }

    #[test]
    fn digests_uuids_and_padding() {
        let d = "ab".repeat(32);
        assert_eq!(digest(&d).unwrap(), [0xab; 32]);
        assert_eq!(digest(&format!("sha256:{d}")).unwrap(), [0xab; 32]);
        assert!(digest("abc").is_err());
        assert_eq!(padded::<4>("eu", "region").unwrap(), *b"eu\0\0");
        assert!(padded::<2>("eu-1", "region").is_err());
        assert_eq!(unpadded(b"eu\0\0"), "eu");
    }

    #[test]
    fn overclock_terms_need_a_power_limit() {
        let t = overclock("power=300, core-lock=1500,core-offset=-100").unwrap();
        assert_eq!(
            (
                t.power_limit_w,
                t.core_lock_mhz,
                t.core_offset_mhz,
                t.mem_lock_mhz
            ),
            (300, 1500, -100, 0)
        );
        assert!(overclock("core-lock=1500")
            .unwrap_err()
            .to_string()
            .contains("mandatory"));
        assert!(overclock("power=0").is_err());
        assert!(overclock("power=70000").is_err());
        assert!(overclock("power=300,turbo=1").is_err());
        assert!(overclock("power").is_err());
    }

    proptest! {
        #[test]
        fn written_amounts_parse_to_their_units(units: u64, decimals in 0u8..=9) {
            let written = gpu_market_core::amount::format(units, decimals);
            prop_assert_eq!(amount(&written, decimals, "amount").unwrap(), units);
            // A minus sign, or one digit more than the mint has, is always refused.
            let negative = format!("-{written}");
            prop_assert!(amount(&negative, decimals, "amount").is_err());
            let too_precise = format!("{}.{}1", units, "0".repeat(decimals as usize));
            prop_assert!(amount(&too_precise, decimals, "amount").is_err());
        }

        #[test]
        fn durations_scale_exactly(n in 0u64..1 << 40) {
            prop_assert_eq!(duration_secs(&format!("{n}m")).unwrap(), n * 60);
            prop_assert_eq!(duration_secs(&format!("{n}d")).unwrap(), n * 86_400);
        }

        #[test]
        fn overclock_terms_round_trip(p in 1u16.., cl: u16, ml: u16, co: i16, mo: i16) {
            let s = format!("power={p},core-lock={cl},mem-lock={ml},core-offset={co},mem-offset={mo}");
            let t = overclock(&s).unwrap();
            prop_assert_eq!(t, OverclockTerms { power_limit_w: p, core_lock_mhz: cl, mem_lock_mhz: ml, core_offset_mhz: co, mem_offset_mhz: mo });
        }
    }

    #[test]
    fn auto_power_tolerances_are_percentages_up_to_20() {
        for (written, bps) in [
            ("5%", 500),
            ("5", 500),
            ("20", 2_000),
            ("20%", 2_000),
            (" 2.5 % ", 250),
            ("0.01%", 1),
            ("0%", 0),
        ] {
            assert_eq!(auto_power_bps(written).unwrap(), bps, "{written}");
        }
        assert_eq!(auto_power_bps(DEFAULT_AUTO_POWER).unwrap(), 500);
        for (bad, says) in [
            ("21%", "at most 20 %"),
            ("20.01", "at most 20 %"),
            ("99999999999999999999", "at most 20 %"),
            ("abc", "write a percentage"),
            ("", "write a percentage"),
            ("-5%", "write a percentage"),
            ("5%%", "write a percentage"),
            ("0.001", "at most two decimals"),
        ] {
            let e = auto_power_bps(bad).unwrap_err().to_string();
            assert!(e.starts_with("bad auto power tolerance"), "{bad}: {e}");
            assert!(e.contains(says), "{bad}: {e}");
        }
        assert_eq!(percent(500), "5 %");
        assert_eq!(percent(250), "2.5 %");
        assert_eq!(percent(MAX_AUTO_POWER_TOLERANCE_BPS), "20 %");
    }

    #[test]
    fn egress_policies_read_back_as_they_are_written() {
        for text in ["none", "open", "203.0.113.0/24,198.51.100.7/32"] {
            let (egress, allow) = egress(text).unwrap();
            assert_eq!(format_egress(egress, &allow), text);
        }
        assert_eq!(egress("198.51.100.7").unwrap().1[0].prefix, 32);
        for bad in [
            "",
            "10.0.0.0/33",
            "example.com",
            "1.2.3.4,1.2.3.5,1.2.3.6,1.2.3.7,1.2.3.8",
        ] {
            assert!(egress(bad).is_err(), "{bad}");
        }
    }
}
