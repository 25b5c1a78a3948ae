//! `gpu-market lease audit LEASE --evidence DIR`: checks the power logs a host's agent kept for
//! a lease (`<data_dir>/leases/<lease>/evidence/`, which the lease's container sees at
//! `/run/gpu-market/evidence`) against the proofs on chain. For each proven interval: is the
//! file the log the proof committed to (its `samples_hash`), and are the peaks the proof stated
//! the ones its own log gives (`PowerLog::peak_power_w`)? A proof that understates its own log
//! is evidence of misreporting that anyone can check; the readings themselves remain the host's.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use gpu_market::events::UsageProven;
use gpu_market_core::lease::UsageProof;
use gpu_market_sdk::events::from_logs;
use gpu_market_sdk::evidence::{samples_hash, IntervalEvidence};
use serde_json::Value;
use solana_pubkey::Pubkey;

use crate::config::Config;
use crate::output::{print_list, text, Fields};

/// Whether `peaks` break any of `limits` (the program's rule).
fn violates(peaks: &[u16], limits: &[u16]) -> bool {
    UsageProof {
        interval: 0,
        intervals: 1,
        gpu_seconds: 0,
        energy_j: 0,
        avg_utilisation_bps: 0,
        peak_power_w: peaks.to_vec(),
        exit_code: None,
        samples_hash: [0; 32],
        energy_saved_j: 0,
    }
    .power_violations(limits)
    .next()
    .is_some()
}

/// The evidence files of `dir`, by interval.
fn read_dir(dir: &Path, lease: &Pubkey) -> Result<BTreeMap<u32, IntervalEvidence>> {
    let mut out = BTreeMap::new();
    let entries = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read the evidence folder {}", dir.display()))?;
    for entry in entries {
        let path = entry?.path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let bytes =
            std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
        let e: IntervalEvidence = serde_json::from_slice(&bytes)
            .map_err(|err| anyhow!("{} is not a power log: {err}", path.display()))?;
        if e.lease != lease.to_string() {
            bail!(
                "{} is the log of lease {}, not {lease}",
                path.display(),
                e.lease
            );
        }
        out.insert(e.interval, e);
    }
    Ok(out)
}

/// One interval's finding.
fn finding(e: Option<&IntervalEvidence>, p: Option<&UsageProven>) -> (&'static str, Fields) {
    let (e, p) = match (e, p) {
        (None, _) => return ("no log was kept for this proof", Vec::new()),
        (Some(_), None) => return ("no proof of this interval on chain", Vec::new()),
        (Some(e), Some(p)) => (e, p),
    };
    let hash = samples_hash(&e.log);
    let peaks = e.log.peak_power_w();
    let fields: Fields = vec![
        ("stated_peak_w", Value::from(p.peak_power_w.clone())),
        ("log_peak_w", Value::from(peaks.clone())),
        ("limits_w", Value::from(p.power_limits_w.clone())),
        ("violation_on_chain", p.power_violation.into()),
        (
            "violation_by_log",
            violates(&peaks, &p.power_limits_w).into(),
        ),
    ];
    let verdict = if hash != p.samples_hash {
        "not the log the proof committed to"
    } else if peaks != p.peak_power_w {
        "the proof misstates its own log"
    } else {
        "consistent"
    };
    (verdict, fields)
}

pub(super) fn audit(config: &Config, lease: &Pubkey, dir: &Path) -> Result<()> {
    let logs = read_dir(dir, lease)?;
    let mut proven: BTreeMap<u32, UsageProven> = BTreeMap::new();
    config.find_in_history(lease, |tx_logs| {
        for e in from_logs::<UsageProven>(tx_logs) {
            if e.lease == *lease {
                proven.insert(e.interval, e);
            }
        }
        None::<()>
    })?;
    if proven.is_empty() && logs.is_empty() {
        bail!(
            "no proof of lease {lease} is in the cluster's history, and {} holds no log",
            dir.display()
        );
    }
    let intervals: std::collections::BTreeSet<u32> =
        proven.keys().chain(logs.keys()).copied().collect();
    let rows: Vec<Fields> = intervals
        .into_iter()
        .map(|k| {
            let (verdict, details) = finding(logs.get(&k), proven.get(&k));
            // A proof may cover several intervals: its first names it, as its log does.
            let span = proven.get(&k).map_or(1, |p| p.intervals);
            let mut row: Fields = vec![
                ("interval", k.into()),
                ("intervals", span.into()),
                ("verdict", text(verdict)),
            ];
            row.extend(details);
            row
        })
        .collect();
    print_list(
        config.output,
        &[
            "interval",
            "intervals",
            "verdict",
            "stated_peak_w",
            "log_peak_w",
            "limits_w",
            "violation_on_chain",
            "violation_by_log",
        ],
        &rows,
    );
    Ok(())
}
