//! What the agent must remember across a crash, per lease: the container it runs, the interval
//! being metered with its energy baselines, the proofs closed but not yet accepted on chain, and
//! the last accepted proof. Written atomically (temp file, fsync, rename, fsync of the folder), so
//! a kill at any point leaves either the old file or the new one.
//!
//! The metering is here too, as pure methods on [`LeaseRecord`]: samples go in, proofs come out.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use gpu_market_core::lease::{interval_window, UsageProof};
use serde::{Deserialize, Serialize};

use crate::chain::{Key, LeaseView};
use crate::gpu::Sample;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentState {
    pub leases: BTreeMap<Key, LeaseRecord>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseRecord {
    pub gpu_indices: Vec<u8>,
    pub started_at: i64,
    pub interval_secs: u32,
    /// The lease's stop as last seen on chain (its end, or an earlier preemption).
    pub stop: i64,
    pub container_id: Option<String>,
    /// When the container started; `None` while it has not (GPU-seconds count from here).
    pub running_since: Option<i64>,
    /// The interval being metered.
    pub open_interval: u32,
    /// Each GPU's energy counter when the open interval's metering began, in mJ.
    pub baseline_energy_mj: Vec<u64>,
    pub utilisation_sum_pct: u64,
    pub samples: u32,
    pub peak_power_mw: Vec<u32>,
    /// Closed intervals not yet accepted on chain, oldest first.
    pub pending: Vec<ProofRecord>,
    /// The last interval the chain accepted, and the chain hash it left.
    pub last_proven: Option<u32>,
    pub proof_hash: [u8; 32],
    /// The container's exit code once it finished (or the agent refused the lease).
    pub exit_code: Option<i32>,
}

/// A [`UsageProof`] as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProofRecord {
    pub interval: u32,
    pub window: (i64, i64),
    pub gpu_seconds: u64,
    pub energy_j: u64,
    pub avg_utilisation_bps: u16,
    pub peak_power_w: Vec<u16>,
    pub exit_code: Option<i32>,
}

impl ProofRecord {
    pub fn proof(&self) -> UsageProof {
        UsageProof {
            interval: self.interval,
            gpu_seconds: self.gpu_seconds,
            energy_j: self.energy_j,
            avg_utilisation_bps: self.avg_utilisation_bps,
            peak_power_w: self.peak_power_w.clone(),
            exit_code: self.exit_code,
        }
    }
}

impl LeaseRecord {
    /// A record for `lease` whose metering starts at `now` from the energy counters in
    /// `samples` (in the lease's GPU order), at the lease's next unproven interval.
    pub fn new(lease: &LeaseView, samples: &[Sample]) -> Self {
        LeaseRecord {
            gpu_indices: lease.gpu_indices.clone(),
            started_at: lease.started_at,
            interval_secs: lease.interval_secs,
            stop: lease.stop(),
            container_id: None,
            running_since: None,
            open_interval: lease.next_interval,
            baseline_energy_mj: samples.iter().map(|s| s.energy_mj).collect(),
            utilisation_sum_pct: 0,
            samples: 0,
            peak_power_mw: vec![0; lease.gpu_indices.len()],
            pending: Vec::new(),
            last_proven: lease.next_interval.checked_sub(1),
            proof_hash: lease.proof_hash,
            exit_code: None,
        }
    }

    fn window(&self, k: u32) -> Option<(i64, i64)> {
        interval_window(self.started_at, self.interval_secs, k, self.stop)
    }

    /// Whether every interval up to the stop is closed.
    pub fn all_closed(&self) -> bool {
        self.window(self.open_interval).is_none()
    }

    /// Adds one reading of the lease's GPUs (in the lease's GPU order).
    pub fn record_sample(&mut self, samples: &[Sample]) {
        if samples.is_empty() {
            return;
        }
        let util: u64 = samples.iter().map(|s| s.utilisation_pct as u64).sum();
        self.utilisation_sum_pct += util / samples.len() as u64;
        self.samples += 1;
        for (peak, s) in self.peak_power_mw.iter_mut().zip(samples) {
            *peak = (*peak).max(s.power_mw);
        }
    }

    /// GPU-seconds the container ran within `[from, to)`.
    fn gpu_seconds(&self, from: i64, to: i64) -> u64 {
        let Some(since) = self.running_since else {
            return 0;
        };
        (to - from.max(since)).max(0) as u64 * self.gpu_indices.len() as u64
    }

    /// Closes every interval whose window ended by `now`, given the GPUs' energy counters now;
    /// returns how many. When several close at once (the agent was not running at their
    /// boundaries), the energy measured since the baseline is shared by window length.
    pub fn close_ended(&mut self, now: i64, samples: &[Sample]) -> usize {
        let mut ended = Vec::new();
        let mut k = self.open_interval;
        while let Some((from, to)) = self.window(k).filter(|w| w.1 <= now) {
            ended.push((k, from, to));
            k += 1;
        }
        let total_secs: i64 = ended.iter().map(|(_, from, to)| to - from).sum();
        let mut energy_left = self.energy_since_baseline_j(samples);
        let energy = energy_left;
        for (n, &(k, from, to)) in ended.iter().enumerate() {
            let share = if n + 1 == ended.len() {
                energy_left
            } else {
                (energy as u128 * (to - from) as u128 / total_secs as u128) as u64
            };
            energy_left -= share;
            self.push_proof(k, (from, to), share, None);
        }
        if !ended.is_empty() {
            self.restart_metering(k, samples);
        }
        ended.len()
    }

    /// Closes the open interval early, at `now`, with the container's exit code: the lease's
    /// final proof. Intervals that ended before are closed first.
    pub fn close_final(&mut self, now: i64, samples: &[Sample], exit_code: i32) {
        self.close_ended(now, samples);
        self.exit_code = Some(exit_code);
        if let Some((from, to)) = self.window(self.open_interval) {
            let energy = self.energy_since_baseline_j(samples);
            self.push_proof(
                self.open_interval,
                (from, to.min(now.max(from))),
                energy,
                Some(exit_code),
            );
            self.restart_metering(self.open_interval + 1, samples);
        }
    }

    fn energy_since_baseline_j(&self, samples: &[Sample]) -> u64 {
        if self.running_since.is_none() {
            return 0;
        }
        let mj: u64 = samples
            .iter()
            .zip(&self.baseline_energy_mj)
            .map(|(s, base)| s.energy_mj.saturating_sub(*base))
            .sum();
        mj / 1_000
    }

    fn push_proof(&mut self, k: u32, window: (i64, i64), energy_j: u64, exit_code: Option<i32>) {
        let avg_utilisation_bps = match self.samples {
            0 => 0,
            n => (self.utilisation_sum_pct * 100 / n as u64).min(10_000) as u16,
        };
        self.pending.push(ProofRecord {
            interval: k,
            window,
            gpu_seconds: self.gpu_seconds(window.0, window.1),
            energy_j,
            avg_utilisation_bps,
            peak_power_w: self
                .peak_power_mw
                .iter()
                .map(|mw| (mw / 1_000).min(u16::MAX as u32) as u16)
                .collect(),
            exit_code,
        });
    }

    fn restart_metering(&mut self, open: u32, samples: &[Sample]) {
        self.open_interval = open;
        self.baseline_energy_mj = samples.iter().map(|s| s.energy_mj).collect();
        self.utilisation_sum_pct = 0;
        self.samples = 0;
        self.peak_power_mw = vec![0; self.gpu_indices.len()];
    }

    /// The chain accepted the oldest pending proof, leaving `hash`.
    pub fn accept_oldest(&mut self, hash: [u8; 32]) {
        let proof = self.pending.remove(0);
        self.last_proven = Some(proof.interval);
        self.proof_hash = hash;
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("state file {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("state file {path} is corrupt: {source}")]
    Corrupt {
        path: PathBuf,
        source: serde_json::Error,
    },
}

/// The state file under the data folder.
#[derive(Debug, Clone)]
pub struct StateFile {
    path: PathBuf,
}

impl StateFile {
    pub fn new(data_dir: &Path) -> Self {
        StateFile {
            path: data_dir.join("state.json"),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The saved state; empty when there is none yet.
    pub fn load(&self) -> Result<AgentState, StateError> {
        match fs::read(&self.path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|source| StateError::Corrupt {
                path: self.path.clone(),
                source,
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(AgentState::default()),
            Err(source) => Err(self.io(source)),
        }
    }

    /// Replaces the saved state with `state`, atomically and durably.
    pub fn save(&self, state: &AgentState) -> Result<(), StateError> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        let tmp = self.path.with_extension("json.tmp");
        let bytes = serde_json::to_vec_pretty(state).expect("the state serialises");
        let mut file = fs::File::create(&tmp).map_err(|e| self.io(e))?;
        file.write_all(&bytes).map_err(|e| self.io(e))?;
        file.sync_all().map_err(|e| self.io(e))?;
        fs::rename(&tmp, &self.path).map_err(|e| self.io(e))?;
        fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| self.io(e))
    }

    fn io(&self, source: std::io::Error) -> StateError {
        StateError::Io {
            path: self.path.clone(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::BidKind;

    fn lease(next_interval: u32) -> LeaseView {
        LeaseView {
            key: Key([9; 32]),
            bid: Key([8; 32]),
            client: Key([7; 32]),
            kind: BidKind::Queue,
            price: 1,
            gpu_indices: vec![0, 1],
            gib_per_gpu: 80,
            settings: vec![Default::default(); 2],
            image_ref: "r/i:1".into(),
            image_digest: [0; 32],
            env_hash: [0; 32],
            started_at: 1_000,
            ends_at: 1_250,
            stop_at: None,
            interval_secs: 100,
            next_interval,
            proof_hash: [0; 32],
        }
    }

    fn samples(energy_mj: u64, power_mw: u32, util: u8) -> Vec<Sample> {
        vec![
            Sample {
                power_mw,
                energy_mj,
                utilisation_pct: util,
            };
            2
        ]
    }

    #[test]
    fn each_ended_window_becomes_one_proof_with_its_measurements() {
        let mut r = LeaseRecord::new(&lease(0), &samples(0, 0, 0));
        r.running_since = Some(1_000);
        r.record_sample(&samples(50_000, 200_000, 50));
        r.record_sample(&samples(90_000, 300_000, 100));
        assert_eq!(
            r.close_ended(1_099, &samples(100_000, 0, 0)),
            0,
            "not ended yet"
        );
        assert_eq!(r.close_ended(1_100, &samples(100_000, 250_000, 80)), 1);
        assert_eq!(
            r.pending,
            vec![ProofRecord {
                interval: 0,
                window: (1_000, 1_100),
                gpu_seconds: 200,
                energy_j: 200,
                avg_utilisation_bps: 7_500,
                peak_power_w: vec![300, 300],
                exit_code: None,
            }]
        );
        assert_eq!(r.open_interval, 1);
        assert_eq!(r.baseline_energy_mj, vec![100_000, 100_000]);
        assert_eq!(r.close_ended(1_150, &samples(150_000, 0, 0)), 0);
    }

    #[test]
    fn missed_boundaries_share_the_energy_by_window_length_and_stop_at_the_lease_end() {
        let mut r = LeaseRecord::new(&lease(0), &samples(0, 0, 0));
        r.running_since = Some(1_000);
        // Down from start to past the end at 1 250: windows of 100, 100 and 50 s.
        assert_eq!(r.close_ended(1_400, &samples(125_000, 0, 0)), 3);
        let energies: Vec<u64> = r.pending.iter().map(|p| p.energy_j).collect();
        assert_eq!(energies, vec![100, 100, 50]);
        assert_eq!(r.pending[2].window, (1_200, 1_250));
        assert_eq!(r.pending[2].gpu_seconds, 100);
        assert!(r.all_closed());
    }

    #[test]
    fn a_final_proof_covers_the_interval_up_to_the_exit() {
        let mut r = LeaseRecord::new(&lease(1), &samples(0, 0, 0));
        assert_eq!(r.open_interval, 1);
        assert_eq!(r.last_proven, Some(0));
        r.running_since = Some(1_130);
        r.close_final(1_160, &samples(10_000, 0, 0), 3);
        let p = &r.pending[0];
        assert_eq!(
            (p.interval, p.window, p.exit_code),
            (1, (1_100, 1_160), Some(3))
        );
        assert_eq!(p.gpu_seconds, 60, "30 s on 2 GPUs");
        assert_eq!(p.energy_j, 20);
        assert_eq!(r.exit_code, Some(3));
    }

    #[test]
    fn a_refused_lease_proves_nothing_used() {
        let mut r = LeaseRecord::new(&lease(0), &samples(5_000, 0, 0));
        r.close_final(1_010, &samples(9_000, 0, 0), -1);
        assert_eq!(r.pending[0].gpu_seconds, 0);
        assert_eq!(r.pending[0].energy_j, 0);
    }

    #[test]
    fn the_state_file_round_trips_and_replaces_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let file = StateFile::new(dir.path());
        assert_eq!(file.load().unwrap(), AgentState::default());
        let mut state = AgentState::default();
        let mut r = LeaseRecord::new(&lease(0), &samples(7, 0, 0));
        r.container_id = Some("c1".into());
        r.close_final(1_010, &samples(9, 0, 0), 0);
        state.leases.insert(Key([9; 32]), r);
        file.save(&state).unwrap();
        assert_eq!(file.load().unwrap(), state);
        assert!(!dir.path().join("state.json.tmp").exists());
        fs::write(file.path(), b"{not json").unwrap();
        assert!(matches!(file.load(), Err(StateError::Corrupt { .. })));
    }
}
