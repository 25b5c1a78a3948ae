//! Each lease's readings of its open interval, journalled as they are taken: one line appended
//! to `<data_dir>/leases/<lease>/readings` per reading (no fsync: a killed process loses nothing
//! the kernel has), so that the state file is rewritten, twice fsynced, only when something
//! else changes (`AgentState::without_readings`), not on every reading. At start the readings a
//! lease's saved record does not hold yet are replayed from its journal ([`replay`]): the record
//! counts those it holds (`LeaseRecord::samples`), and the journal holds the open interval's in
//! order. A journal is cleared once the save that closed its interval is written ([`clear`]);
//! lines of an older interval left by a kill between the two are ignored.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::chain::Key;
use crate::state::{LeaseRecord, Reading};

/// Where `lease`'s journal is: in its retained folder (not its scratch, which the container
/// sees), so that it expires with the lease's retention.
pub fn path(data_dir: &Path, lease: &Key) -> PathBuf {
    crate::retention::lease_dir(data_dir, lease).join("readings")
}

/// Appends `reading` to the journal at `path`.
pub fn append(path: &Path, reading: &Reading) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    let power: Vec<String> = reading.power_mw.iter().map(u32::to_string).collect();
    let line = format!(
        "{} {} {}\n",
        reading.interval,
        reading.utilisation_pct,
        power.join(",")
    );
    // One write of the whole line: a kill leaves it whole or torn at its end, never
    // interleaved.
    fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?
        .write_all(line.as_bytes())
}

/// Adds to `record` the readings of its open interval that the journal at `path` has beyond
/// those the record holds; returns how many. A last line without its newline (torn by a kill)
/// is not read, and is cut off so that the next reading starts a line of its own.
pub fn replay(path: &Path, record: &mut LeaseRecord) -> usize {
    let Ok(text) = fs::read_to_string(path) else {
        return 0;
    };
    let whole = text.rfind('\n').map_or(0, |i| i + 1);
    if whole < text.len() {
        if let Err(e) = fs::OpenOptions::new()
            .write(true)
            .open(path)
            .and_then(|f| f.set_len(whole as u64))
        {
            tracing::warn!(path = %path.display(), error = %e, "cannot cut a torn reading off the journal");
        }
    }
    let open = record.open_interval;
    let held = record.samples as usize;
    let mut applied = 0;
    let readings = text[..whole]
        .lines()
        .map_while(parse)
        .filter(|r| r.interval == open);
    for reading in readings.skip(held) {
        record.apply(&reading);
        applied += 1;
    }
    applied
}

/// Removes the journal at `path` (its interval closed and saved); none is fine.
pub fn clear(path: &Path) -> std::io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

fn parse(line: &str) -> Option<Reading> {
    let mut fields = line.split(' ');
    let interval = fields.next()?.parse().ok()?;
    let utilisation_pct = fields.next()?.parse().ok()?;
    let power = fields.next()?;
    let power_mw = match power {
        "" => Vec::new(),
        p => p
            .split(',')
            .map(|w| w.parse().ok())
            .collect::<Option<_>>()?,
    };
    fields.next().is_none().then_some(Reading {
        interval,
        utilisation_pct,
        power_mw,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(interval: u32, util: u64, power: &[u32]) -> Reading {
        Reading {
            interval,
            utilisation_pct: util,
            power_mw: power.to_vec(),
        }
    }

    fn record(open_interval: u32) -> LeaseRecord {
        let zero = [0u8; 32];
        let mut r: LeaseRecord = serde_json::from_value(serde_json::json!({
            "gpu_indices": [0, 1], "started_at": 0, "interval_secs": 60, "stop": 600,
            "container_id": null, "running_since": 0, "open_interval": open_interval,
            "baseline_energy_mj": [0, 0], "utilisation_sum_pct": 0, "samples": 0,
            "pending": [], "last_proven": null, "proof_hash": zero, "exit_code": null,
        }))
        .unwrap();
        r.power_log = gpu_market_core::evidence::PowerLog::new(2);
        r
    }

    #[test]
    fn a_replay_adds_the_readings_the_record_does_not_hold_yet() {
        let dir = tempfile::tempdir().unwrap();
        let path = path(dir.path(), &Key([3; 32]));
        // A line of the interval before (a kill between a close's save and the clear).
        append(&path, &reading(2, 90, &[400_000, 410_000])).unwrap();
        let taken = [
            reading(3, 50, &[200_000, 210_000]),
            reading(3, 70, &[300_000, 310_000]),
            reading(3, 80, &[350_000, 360_000]),
        ];
        // The saved record holds the first reading; the journal has all three.
        let mut saved = record(3);
        saved.apply(&taken[0]);
        let mut live = saved.clone();
        for r in &taken {
            append(&path, r).unwrap();
        }
        live.apply(&taken[1]);
        live.apply(&taken[2]);
        assert_eq!(replay(&path, &mut saved), 2);
        assert_eq!(saved, live, "the record as it was before the kill");
        // A torn last line (a kill in the middle of a write) is not read, and is cut off: the
        // next reading is read whole.
        let mut f = fs::OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"3 99 12").unwrap();
        assert_eq!(replay(&path, &mut record(3)), 3);
        append(&path, &reading(3, 60, &[1, 2])).unwrap();
        let mut again = record(3);
        assert_eq!(replay(&path, &mut again), 4);
        assert_eq!(again.samples, 4);
        clear(&path).unwrap();
        assert!(!path.exists());
        clear(&path).unwrap();
        assert_eq!(replay(&path, &mut record(3)), 0);
    }
}
