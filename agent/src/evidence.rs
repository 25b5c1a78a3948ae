//! The power readings behind each proof, kept where others can check them: one JSON file per
//! proven interval in `<data_dir>/leases/<lease>/evidence/<interval>.json`, a folder the lease's
//! container sees read-only at [`CONTAINER_PATH`], deleted with the lease's other files when its
//! retention ends (`crate::retention`). Each file holds the interval's
//! `gpu_market_core::evidence::PowerLog` and its sha256 (`gpu_market_sdk::evidence`), which the
//! proof carries on chain (chained into the proof's hash and in its `UsageProven` event):
//! `gpu-market lease audit` checks a file against the chain and recomputes the peaks the proof
//! stated.

use std::path::{Path, PathBuf};

use gpu_market_sdk::evidence::IntervalEvidence;

use crate::chain::Key;
use crate::runtime::hex;
use crate::state::LeaseRecord;

/// Where a lease's container reads its power logs.
pub const CONTAINER_PATH: &str = "/run/gpu-market/evidence";

/// The folder of `lease`'s power logs: among the files the agent retains for the lease.
pub fn lease_dir(data_dir: &Path, lease: &Key) -> PathBuf {
    crate::retention::lease_dir(data_dir, lease).join("evidence")
}

/// Moves the power logs an agent before the retained folders kept (`<data_dir>/evidence/<lease>`)
/// into their lease's retained folder, where they expire with its retention; returns the
/// leases moved. A running container that sees the old folder keeps seeing it: the folder
/// moves, its mount follows. Done at start, before the agent ends the folders it has no record
/// of.
pub fn move_old_logs(data_dir: &Path) -> Vec<Key> {
    let old = data_dir.join("evidence");
    let mut moved = Vec::new();
    for lease in crate::retention::lease_folders(&old) {
        let to = lease_dir(data_dir, &lease);
        let made = to.parent().map_or(Ok(()), std::fs::create_dir_all);
        match made.and_then(|()| std::fs::rename(old.join(lease.to_string()), &to)) {
            Ok(()) => moved.push(lease),
            Err(e) => tracing::warn!(%lease, error = %e, "cannot move the lease's power logs"),
        }
    }
    let _ = std::fs::remove_dir(old);
    moved
}

/// Writes the evidence of each of `record`'s pending proofs that has none yet.
pub fn write_pending(data_dir: &Path, lease: &Key, record: &LeaseRecord) -> std::io::Result<()> {
    let dir = lease_dir(data_dir, lease);
    std::fs::create_dir_all(&dir)?;
    for p in &record.pending {
        let path = dir.join(format!("{}.json", p.interval));
        if path.exists() {
            continue;
        }
        let evidence = IntervalEvidence {
            lease: lease.to_string(),
            interval: p.interval,
            samples_hash: hex(&p.samples_hash),
            log: p.power_log.clone(),
        };
        let json = serde_json::to_vec(&evidence).map_err(std::io::Error::other)?;
        // Whole or not at all: the container may read the folder at any time.
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, json)?;
        std::fs::rename(&tmp, &path)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn power_logs_in_the_old_folder_move_to_their_leases_retained_folder() {
        let dir = tempfile::tempdir().unwrap();
        let lease = Key([3; 32]);
        let old = dir.path().join("evidence").join(lease.to_string());
        std::fs::create_dir_all(&old).unwrap();
        std::fs::write(old.join("0.json"), b"{}").unwrap();
        assert_eq!(move_old_logs(dir.path()), vec![lease]);
        let new = lease_dir(dir.path(), &lease).join("0.json");
        assert_eq!(std::fs::read(new).unwrap(), b"{}");
        assert!(!dir.path().join("evidence").exists());
        assert!(move_old_logs(dir.path()).is_empty(), "once");
    }
}
