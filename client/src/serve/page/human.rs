//! The page's words for people: each field of the CLI's records under a label (`gib_per_gpu`:
//! "GiB per GPU") and its value in units (a cluster time as a clock and how long ago, basis
//! points as a percentage, seconds as a duration, GiB and watts with their unit). The machine
//! value stays in the cell's `data-value` (`html`), which the tests and any scraper read.

use serde_json::Value;

/// Words of a field name written as people write them.
const WORDS: &[(&str, &str)] = &[
    ("gpu", "GPU"),
    ("gpus", "GPUs"),
    ("gib", "GiB"),
    ("mib", "MiB"),
    ("cpu", "CPU"),
    ("cpus", "CPUs"),
    ("id", "ID"),
    ("api", "API"),
    ("utc", "UTC"),
    ("env", "environment"),
    ("mhz", "MHz"),
];

/// Unit suffixes a label drops: the value carries its unit.
const UNIT_SUFFIXES: &[&str] = &["_bps", "_secs", "_w", "_mhz"];

/// Fields that hold a cluster time (unix seconds).
const TIMES: &[&str] = &[
    "last_heartbeat",
    "deadline",
    "latest_start",
    "proven_until",
    "earliest_start",
    "reserved_from",
    "last_active",
    "ends_at",
];

/// Field `name`'s label: its words, unit suffix dropped, the first capitalised, known
/// abbreviations as written (`gib_per_gpu`: "GiB per GPU"; `demand_bps`: "Demand").
pub fn label(name: &str) -> String {
    let base = UNIT_SUFFIXES
        .iter()
        .find_map(|s| name.strip_suffix(s))
        .unwrap_or(name);
    let words: Vec<String> = base
        .split('_')
        .filter(|w| !w.is_empty())
        .map(|w| {
            WORDS
                .iter()
                .find(|(k, _)| *k == w)
                .map_or_else(|| w.to_string(), |(_, v)| v.to_string())
        })
        .collect();
    let text = words.join(" ");
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => text,
    }
}

/// Field `name`'s value as people read it at cluster time `now`, where its name says its unit;
/// `None`: shown as it is.
pub fn shown(name: &str, v: &Value, now: i64) -> Option<String> {
    let int = v.as_i64();
    if TIMES.contains(&name) || name.ends_with("_at") {
        return int.filter(|&t| t > 0).map(|t| time(t, now));
    }
    if name.ends_with("_bps") {
        return match v {
            Value::Object(parts) => Some(
                parts
                    .iter()
                    .map(|(k, p)| {
                        let part = p.as_i64().map_or_else(|| p.to_string(), percent);
                        format!("{k} {part}")
                    })
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
            Value::Array(_) => None,
            _ => int.map(percent),
        };
    }
    if name.ends_with("_secs") {
        return int.filter(|&s| s >= 0).map(|s| duration(s as u64));
    }
    if name == "gib_per_gpu" || name.ends_with("_gib") {
        return int.map(|g| format!("{g} GiB"));
    }
    if name.ends_with("_per_gpu_hour") {
        return v.as_str().map(|t| format!("{t} per GPU-hour"));
    }
    if let (Some(unit), Some([lo, hi])) = (range_unit(name), v.as_array().map(Vec::as_slice)) {
        return Some(format!("{lo}–{hi} {unit}"));
    }
    None
}

/// The unit of a `[min, max]` field.
fn range_unit(name: &str) -> Option<&'static str> {
    match name {
        n if n.ends_with("_mhz") => Some("MHz"),
        n if n.ends_with("_w") => Some("W"),
        _ => None,
    }
}

/// Basis points as a percentage (2500: "25 %", 125: "1.25 %").
fn percent(bps: i64) -> String {
    let (whole, frac) = (bps / 100, (bps % 100).abs());
    match frac {
        0 => format!("{whole} %"),
        f if f % 10 == 0 => format!("{whole}.{} %", f / 10),
        f => format!("{whole}.{f:02} %"),
    }
}

/// Seconds as the two largest units that matter ("45 s", "10 min", "1 h 30 min", "2 d 4 h").
pub fn duration(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86_400, secs / 3_600 % 24, secs / 60 % 60, secs % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s} s"),
        (0, 0, _) if s == 0 => format!("{m} min"),
        (0, 0, _) => format!("{m} min {s} s"),
        (0, _, 0) => format!("{h} h"),
        (0, _, _) => format!("{h} h {m} min"),
        (_, 0, _) => format!("{d} d"),
        _ => format!("{d} d {h} h"),
    }
}

/// Cluster time `t` as its UTC date and clock and how far from `now` ("2 min ago", "in 5 min",
/// "now").
fn time(t: i64, now: i64) -> String {
    let days = t.div_euclid(86_400);
    let (y, mo, d) = civil_from_days(days);
    let clock = super::plot::clock(t);
    let when = match t - now {
        0 => "now".to_string(),
        past if past < 0 => format!("{} ago", duration(past.unsigned_abs())),
        ahead => format!("in {}", duration(ahead as u64)),
    };
    format!("{y:04}-{mo:02}-{d:02} {clock} UTC ({when})")
}

/// The proleptic Gregorian date of `days` since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_read_as_words_and_values_in_their_units() {
        assert_eq!(label("gib_per_gpu"), "GiB per GPU");
        assert_eq!(label("demand_bps"), "Demand");
        assert_eq!(label("score_weights_bps"), "Score weights");
        assert_eq!(label("billing_interval_secs"), "Billing interval");
        assert_eq!(label("last_heartbeat"), "Last heartbeat");
        assert_eq!(label("env_hash"), "Environment hash");
        let now = 1_795_745_434;
        assert_eq!(
            shown("last_heartbeat", &json!(now - 125), now).unwrap(),
            "2026-11-27 02:08:29 UTC (2 min 5 s ago)"
        );
        assert_eq!(
            shown("deadline", &json!(now + 3_600), now).unwrap(),
            "2026-11-27 03:10:34 UTC (in 1 h)"
        );
        assert_eq!(shown("demand_bps", &json!(2_500), now).unwrap(), "25 %");
        assert_eq!(
            shown("protocol_fee_bps", &json!(125), now).unwrap(),
            "1.25 %"
        );
        assert_eq!(
            shown(
                "score_weights_bps",
                &json!({"stake": 4000, "urgency": 3000}),
                now
            )
            .unwrap(),
            "stake 40 %, urgency 30 %"
        );
        assert_eq!(
            shown("billing_interval_secs", &json!(60), now).unwrap(),
            "1 min"
        );
        assert_eq!(
            shown("max_duration_secs", &json!(5_400), now).unwrap(),
            "1 h 30 min"
        );
        assert_eq!(shown("gib_per_gpu", &json!(40), now).unwrap(), "40 GiB");
        assert_eq!(
            shown("power_w", &json!([150, 450]), now).unwrap(),
            "150–450 W"
        );
        assert_eq!(
            shown("base_price_per_gpu_hour", &json!("0.1"), now).unwrap(),
            "0.1 per GPU-hour"
        );
        assert_eq!(shown("gpu_count", &json!(4), now), None);
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
    }
}
