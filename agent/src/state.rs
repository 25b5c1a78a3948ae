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

use gpu_market_core::evidence::PowerLog;
use gpu_market_core::lease::{interval_window, UsageProof};
use gpu_market_sdk::evidence::samples_hash;
use serde::{Deserialize, Deserializer, Serialize};

use crate::chain::{Key, LeaseView};
use crate::gpu::Sample;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentState {
    pub leases: BTreeMap<Key, LeaseRecord>,
}

impl AgentState {
    /// The state less what each reading of the GPUs changes: the open intervals' readings
    /// (each lease's journal keeps them, `crate::readings`), the energy attributed to leases
    /// on shared GPUs and the energy auto power saved (a kill loses what accrued since the
    /// last save: reported a little low, never billed). The state file is rewritten only when
    /// this changes: an interval closes, a proof is sent or accepted, a lease starts or ends.
    pub fn without_readings(&self) -> AgentState {
        let mut state = self.clone();
        for r in state.leases.values_mut() {
            r.utilisation_sum_pct = 0;
            r.samples = 0;
            r.power_log = PowerLog::default();
            r.attributed_energy_mj.values_mut().for_each(|e| *e = 0);
            r.energy_saved_mj = 0;
        }
        state
    }
}

/// One reading of a lease's GPUs for its open interval `interval`: their mean utilisation and
/// each GPU's power.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reading {
    pub interval: u32,
    pub utilisation_pct: u64,
    pub power_mw: Vec<u32>,
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
    /// Each GPU's energy counter when the open interval's metering began, in mJ: the GPU's own,
    /// or on a GPU the lease shares, the one in [`Self::attributed_energy_mj`].
    pub baseline_energy_mj: Vec<u64>,
    /// On each GPU the lease shares with other leases (by machine index): the energy attributed
    /// to it so far, in mJ (`crate::gpu::attribution`), which it is metered by instead of the
    /// GPU's counter. Empty for a lease with its GPUs whole, and in state files written before.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributed_energy_mj: BTreeMap<u8, u64>,
    pub utilisation_sum_pct: u64,
    pub samples: u32,
    /// Each GPU's power readings in the open interval, with those carried in from before it:
    /// the proof's sustained peaks are computed from them, and the proof commits to them
    /// ([`PowerLog`]). Absent from state files written before it: each GPU's then starts empty.
    #[serde(default)]
    pub power_log: PowerLog,
    /// `sustained_peaks`, the running peaks that agents before [`Self::power_log`] kept:
    /// accepted so that their state files still load, and dropped (the open interval's readings
    /// count from the upgrade on).
    #[serde(
        default,
        rename = "sustained_peaks",
        skip_serializing,
        deserialize_with = "ignore"
    )]
    pub legacy_sustained_peaks: (),
    /// `peak_power_mw`, the instantaneous peaks that agents before the sustained peaks kept:
    /// accepted so that their state files still load, and dropped.
    #[serde(
        default,
        rename = "peak_power_mw",
        skip_serializing,
        deserialize_with = "ignore"
    )]
    pub legacy_peak_power_mw: (),
    /// Closed intervals not yet accepted on chain, oldest first.
    pub pending: Vec<ProofRecord>,
    /// The last interval the chain accepted, and the chain hash it left.
    pub last_proven: Option<u32>,
    pub proof_hash: [u8; 32],
    /// The container's exit code once it finished (or the agent refused the lease).
    pub exit_code: Option<i32>,
    /// Energy auto power saved in the open interval, in mJ (`crate::gpu::dvfs`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub energy_saved_mj: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

fn one() -> u16 {
    1
}

/// A [`UsageProof`] as stored: of one closed interval, or of several consecutive ones joined
/// ([`LeaseRecord::join_pending`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProofRecord {
    pub interval: u32,
    /// How many intervals from `interval` on it covers (1 in state files written before spans).
    #[serde(default = "one")]
    pub intervals: u16,
    /// Whether it was handed to the chain: it is then sent as it is until the chain answers
    /// (never extended, so that a lost answer cannot make the chain see two different proofs).
    #[serde(default)]
    pub sent: bool,
    pub window: (i64, i64),
    pub gpu_seconds: u64,
    pub energy_j: u64,
    /// Energy auto power saved in the interval (absent from state files before it).
    #[serde(default)]
    pub energy_saved_j: u64,
    pub avg_utilisation_bps: u16,
    pub peak_power_w: Vec<u16>,
    pub exit_code: Option<i32>,
    /// The readings `peak_power_w` comes from, and their hash the proof carries: the evidence
    /// the agent keeps for the lease (`crate::evidence`).
    #[serde(default)]
    pub power_log: PowerLog,
    #[serde(default)]
    pub samples_hash: [u8; 32],
}

impl ProofRecord {
    /// Whether `next` continues this proof: its intervals follow, neither was sent yet, this
    /// one is not final, and the joined log replays to the higher of the two proofs' peaks (as
    /// the auditor of the evidence replays it). A sustained window that is not yet full (a
    /// lease's first readings) restarts the peak, so a log joined over one can replay to other
    /// peaks than its parts stated: such parts go as proofs of their own, each with its own log.
    fn continued_by(&self, next: &ProofRecord) -> bool {
        !self.sent
            && !next.sent
            && self.exit_code.is_none()
            && self.interval.checked_add(self.intervals as u32) == Some(next.interval)
            && self.intervals.checked_add(next.intervals).is_some()
            && self.joined_log(next).peak_power_w()
                == self
                    .peak_power_w
                    .iter()
                    .zip(&next.peak_power_w)
                    .map(|(a, b)| *a.max(b))
                    .collect::<Vec<u16>>()
    }

    /// This proof's power log run on with `next`'s readings: the log of the joined proof.
    fn joined_log(&self, next: &ProofRecord) -> PowerLog {
        let mut log = self.power_log.clone();
        for (g, more) in log.gpus.iter_mut().zip(&next.power_log.gpus) {
            g.readings_mw.extend_from_slice(&more.readings_mw);
        }
        log
    }

    /// Joins `next`, which [`Self::continued_by`], into one proof of both spans: GPU time and
    /// energy add up, utilisation is averaged over time, each GPU's peak is the higher one and
    /// the power logs run on (the peaks replayed from the joined log are the same: `continued_by`
    /// checks it), and a final `next` makes the joined proof final.
    fn join(&mut self, next: ProofRecord) {
        let secs = |w: (i64, i64)| (w.1 - w.0).max(0) as u64;
        let (a, b) = (secs(self.window), secs(next.window));
        self.avg_utilisation_bps = match a + b {
            0 => self.avg_utilisation_bps.max(next.avg_utilisation_bps),
            total => {
                ((self.avg_utilisation_bps as u64 * a + next.avg_utilisation_bps as u64 * b)
                    / total) as u16
            }
        };
        self.intervals += next.intervals;
        self.window.1 = next.window.1;
        self.gpu_seconds = self.gpu_seconds.saturating_add(next.gpu_seconds);
        self.energy_j = self.energy_j.saturating_add(next.energy_j);
        self.energy_saved_j = self.energy_saved_j.saturating_add(next.energy_saved_j);
        for (peak, other) in self.peak_power_w.iter_mut().zip(&next.peak_power_w) {
            *peak = (*peak).max(*other);
        }
        self.power_log = self.joined_log(&next);
        self.samples_hash = samples_hash(&self.power_log);
        self.exit_code = next.exit_code;
    }

    pub fn proof(&self) -> UsageProof {
        UsageProof {
            interval: self.interval,
            intervals: self.intervals,
            gpu_seconds: self.gpu_seconds,
            energy_j: self.energy_j,
            energy_saved_j: self.energy_saved_j,
            avg_utilisation_bps: self.avg_utilisation_bps,
            peak_power_w: self.peak_power_w.clone(),
            exit_code: self.exit_code,
            samples_hash: self.samples_hash,
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
            attributed_energy_mj: BTreeMap::new(),
            utilisation_sum_pct: 0,
            samples: 0,
            power_log: PowerLog::new(lease.gpu_indices.len()),
            legacy_sustained_peaks: (),
            legacy_peak_power_mw: (),
            pending: Vec::new(),
            last_proven: lease.next_interval.checked_sub(1),
            proof_hash: lease.proof_hash,
            exit_code: None,
            energy_saved_mj: 0,
        }
    }

    /// Meters the GPUs `shared` (machine indices), which the lease shares with other leases, by
    /// the energy attributed to it from now on ([`Self::attribute_energy`]), from zero. GPUs it
    /// is metered so already keep their count.
    pub fn meter_shared(&mut self, shared: &[u8]) {
        for &gpu in shared {
            if self.attributed_energy_mj.contains_key(&gpu) {
                continue;
            }
            self.attributed_energy_mj.insert(gpu, 0);
            if let Some(i) = self.gpu_indices.iter().position(|&g| g == gpu) {
                if let Some(baseline) = self.baseline_energy_mj.get_mut(i) {
                    *baseline = 0;
                }
            }
        }
    }

    /// Adds `mj` to the energy attributed to the lease on the shared GPU `gpu`.
    pub fn attribute_energy(&mut self, gpu: u8, mj: u64) {
        if let Some(count) = self.attributed_energy_mj.get_mut(&gpu) {
            *count = count.saturating_add(mj);
        }
    }

    fn window(&self, k: u32) -> Option<(i64, i64)> {
        interval_window(self.started_at, self.interval_secs, k, self.stop)
    }

    /// Whether every interval up to the stop is closed.
    pub fn all_closed(&self) -> bool {
        self.window(self.open_interval).is_none()
    }

    /// Adds one reading of the lease's GPUs (in the lease's GPU order) to the open interval
    /// ([`Self::reading`], [`Self::apply`]); returns it, for the lease's journal.
    pub fn record_sample(&mut self, samples: &[Sample]) -> Option<Reading> {
        let reading = self.reading(samples)?;
        self.apply(&reading);
        Some(reading)
    }

    /// The reading `samples` (of the lease's GPUs, in its GPU order) make for the open
    /// interval; `None` without samples.
    pub fn reading(&self, samples: &[Sample]) -> Option<Reading> {
        if samples.is_empty() {
            return None;
        }
        let util: u64 = samples.iter().map(|s| s.utilisation_pct as u64).sum();
        Some(Reading {
            interval: self.open_interval,
            utilisation_pct: util / samples.len() as u64,
            power_mw: samples.iter().map(|s| s.power_mw).collect(),
        })
    }

    /// Adds `reading` to the open interval (one of another interval is ignored). The power goes
    /// into the interval's [`PowerLog`]: a proof states the highest power sustained over a
    /// window of readings (`gpu_market_core::lease::SustainedPeak`), not the highest single
    /// reading.
    pub fn apply(&mut self, reading: &Reading) {
        if reading.interval != self.open_interval {
            return;
        }
        self.utilisation_sum_pct += reading.utilisation_pct;
        self.samples += 1;
        if self.power_log.gpus.len() < reading.power_mw.len() {
            self.power_log
                .gpus
                .resize(reading.power_mw.len(), Default::default());
        }
        for (i, &mw) in reading.power_mw.iter().enumerate() {
            self.power_log.record(i, mw);
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
    /// final proof. Intervals that ended before are closed first; when the last of them ended
    /// too (the lease is past its stop), its proof, if not sent yet, carries the exit code.
    pub fn close_final(&mut self, now: i64, samples: &[Sample], exit_code: i32) {
        self.close_ended(now, samples);
        self.exit_code = Some(exit_code);
        match self.window(self.open_interval) {
            Some((from, to)) => {
                let energy = self.energy_since_baseline_j(samples);
                self.push_proof(
                    self.open_interval,
                    (from, to.min(now.max(from))),
                    energy,
                    Some(exit_code),
                );
                self.restart_metering(self.open_interval + 1, samples);
            }
            None => {
                if let Some(last) = self.pending.last_mut() {
                    last.exit_code.get_or_insert(exit_code);
                }
            }
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
        let peaks = self.power_log.peak_power_w();
        let avg_utilisation_bps = match self.samples {
            0 => 0,
            n => (self.utilisation_sum_pct * 100 / n as u64).min(10_000) as u16,
        };
        self.pending.push(ProofRecord {
            interval: k,
            intervals: 1,
            sent: false,
            window,
            gpu_seconds: self.gpu_seconds(window.0, window.1),
            energy_j,
            energy_saved_j: std::mem::take(&mut self.energy_saved_mj) / 1_000,
            avg_utilisation_bps,
            peak_power_w: (0..self.gpu_indices.len())
                .map(|i| peaks.get(i).copied().unwrap_or(0))
                .collect(),
            samples_hash: samples_hash(&self.power_log),
            power_log: self.power_log.clone(),
            exit_code,
        });
    }

    fn restart_metering(&mut self, open: u32, samples: &[Sample]) {
        self.open_interval = open;
        self.baseline_energy_mj = samples.iter().map(|s| s.energy_mj).collect();
        self.utilisation_sum_pct = 0;
        self.samples = 0;
        self.power_log = self.power_log.next_interval();
    }

    /// Joins each run of consecutive pending proofs not sent yet into one proof of their span
    /// (one signature for several intervals).
    pub fn join_pending(&mut self) {
        let mut joined: Vec<ProofRecord> = Vec::with_capacity(self.pending.len());
        for p in std::mem::take(&mut self.pending) {
            match joined.last_mut() {
                Some(last) if last.continued_by(&p) => last.join(p),
                _ => joined.push(p),
            }
        }
        self.pending = joined;
    }

    /// Whether the lease's pending proofs should be sent at `now`, a proof covering `span`
    /// intervals when the host is on time ([`gpu_market_core::lease::proof_span`]): the oldest
    /// covers `span` intervals, or its window closed `span − 1` intervals ago (whatever kept the
    /// next from closing), or it is sent again, or a later one waits behind it, or the lease has no interval left to
    /// close. The silence window keeps one interval for a proof that must be sent again.
    pub fn proof_due(&self, now: i64, span: u16) -> bool {
        let Some(oldest) = self.pending.first() else {
            return false;
        };
        let waited = (span.saturating_sub(1) as i64).saturating_mul(self.interval_secs as i64);
        oldest.sent
            || oldest.intervals >= span
            || now >= oldest.window.1.saturating_add(waited)
            || self.pending.len() > 1
            || oldest.exit_code.is_some()
            || self.exit_code.is_some()
            || self.all_closed()
    }

    /// The chain accepted the oldest pending proof, leaving `hash`.
    pub fn accept_oldest(&mut self, hash: [u8; 32]) {
        let proof = self.pending.remove(0);
        self.last_proven = Some(proof.interval + proof.intervals as u32 - 1);
        self.proof_hash = hash;
    }
}

/// Reads and drops any value.
fn ignore<'de, D: Deserializer<'de>>(d: D) -> Result<(), D::Error> {
    serde::de::IgnoredAny::deserialize(d).map(drop)
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

    /// Replaces the saved state with `state`, atomically and durably, on a blocking thread
    /// (its fsyncs wait on the disk).
    pub async fn save(&self, state: &AgentState) -> Result<(), StateError> {
        let bytes = serde_json::to_vec_pretty(state).expect("the state serialises");
        let path = self.path.clone();
        crate::off_runtime(move || write_durably(&path, &bytes))
            .await
            .map_err(|e| self.io(e))
    }

    fn io(&self, source: std::io::Error) -> StateError {
        StateError::Io {
            path: self.path.clone(),
            source,
        }
    }
}

/// Replaces the file at `path` with `bytes`, atomically (a temporary file beside it, renamed over
/// it) and durably (both fsynced, and the folder): after a crash the file holds either the old
/// bytes or the new, whole.
pub fn write_durably(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut file = fs::File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    fs::rename(&tmp, path)?;
    fs::File::open(dir).and_then(|d| d.sync_all())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::BidKind;

    fn lease(next_interval: u32) -> LeaseView {
        LeaseView {
            gang: None,
            gang_broken: false,
            key: Key([9; 32]),
            bid: Key([8; 32]),
            client: Key([7; 32]),
            kind: BidKind::Queue,
            price: 1,
            gpu_indices: vec![0, 1],
            gib_per_gpu: 80,
            overclock: vec![Default::default(); 2],
            image_ref: "r/i:1".into(),
            image_digest: [0; 32],
            env_hash: [0; 32],
            room: crate::chain::RoomAsked::default(),
            started_at: 1_000,
            ends_at: 1_250,
            stop_at: None,
            interval_secs: 100,
            silence_intervals: 3,
            next_interval,
            proof_hash: [0; 32],
            auto_power: None,
        }
    }

    fn samples(energy_mj: u64, power_mw: u32, util: u8) -> Vec<Sample> {
        vec![
            Sample {
                power_mw,
                energy_mj,
                utilisation_pct: util,
                mem_utilisation_pct: 0,
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
        // The proof commits to the readings its peaks come from.
        let log = PowerLog {
            gpus: vec![
                gpu_market_core::evidence::GpuPowerLog {
                    carried_mw: vec![],
                    readings_mw: vec![200_000, 300_000],
                };
                2
            ],
        };
        assert_eq!(
            r.pending,
            vec![ProofRecord {
                interval: 0,
                intervals: 1,
                sent: false,
                window: (1_000, 1_100),
                gpu_seconds: 200,
                energy_j: 200,
                energy_saved_j: 0,
                avg_utilisation_bps: 7_500,
                peak_power_w: vec![250, 250],
                exit_code: None,
                samples_hash: samples_hash(&log),
                power_log: log,
            }]
        );
        assert_eq!(r.pending[0].proof().samples_hash, r.pending[0].samples_hash);
        assert_eq!(r.open_interval, 1);
        assert_eq!(r.baseline_energy_mj, vec![100_000, 100_000]);
        assert_eq!(r.close_ended(1_150, &samples(150_000, 0, 0)), 0);
    }

    #[tokio::test]
    async fn a_lone_power_spike_is_not_the_proofs_peak_and_the_window_outlives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let file = StateFile::new(dir.path());
        let mut r = LeaseRecord::new(&lease(0), &samples(0, 0, 0));
        r.running_since = Some(1_000);
        let watts = [300, 300, 300, 300, 360, 300, 300, 300, 300, 300];
        for (i, w) in watts.iter().enumerate() {
            r.record_sample(&samples(0, w * 1_000, 100));
            if i == 5 {
                // The agent restarts mid-interval: the readings so far come back from the file.
                let mut state = AgentState::default();
                state.leases.insert(Key([9; 32]), r);
                file.save(&state).await.unwrap();
                r = file.load().unwrap().leases.remove(&Key([9; 32])).unwrap();
            }
        }
        r.close_ended(1_100, &samples(0, 0, 0));
        let proof = r.pending[0].proof();
        assert_eq!(proof.peak_power_w, vec![312, 312], "(4 × 300 + 360) / 5");
        assert_eq!(proof.power_violations(&[300, 300]).count(), 0);

        // Sustained above the limit for a window: the next interval's proof shows it.
        for _ in 0..gpu_market_core::lease::SUSTAINED_READINGS {
            r.record_sample(&samples(0, 330_000, 100));
        }
        r.close_ended(1_200, &samples(0, 0, 0));
        let proof = r.pending[1].proof();
        assert_eq!(proof.peak_power_w, vec![330, 330]);
        assert_eq!(proof.power_violations(&[300, 300]).count(), 2);
    }

    /// A lease's record saved, its JSON changed by `older` (as an older agent wrote it), and
    /// loaded back.
    async fn saved_as_older(
        older: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>),
    ) -> LeaseRecord {
        let dir = tempfile::tempdir().unwrap();
        let file = StateFile::new(dir.path());
        let mut state = AgentState::default();
        state
            .leases
            .insert(Key([9; 32]), LeaseRecord::new(&lease(0), &samples(0, 0, 0)));
        file.save(&state).await.unwrap();
        let mut json: serde_json::Value =
            serde_json::from_slice(&fs::read(file.path()).unwrap()).unwrap();
        let record = json["leases"]
            .as_object_mut()
            .unwrap()
            .values_mut()
            .next()
            .unwrap();
        let record = record.as_object_mut().unwrap();
        assert!(record.remove("power_log").is_some());
        older(record);
        fs::write(file.path(), serde_json::to_vec(&json).unwrap()).unwrap();
        file.load().unwrap().leases.remove(&Key([9; 32])).unwrap()
    }

    #[tokio::test]
    async fn state_files_written_with_instantaneous_peaks_still_load() {
        let mut r = saved_as_older(|record| {
            assert!(
                !record.contains_key("peak_power_mw"),
                "not written any more"
            );
            record.insert("peak_power_mw".into(), serde_json::json!([360_000, 0]));
        })
        .await;
        assert!(r.power_log.gpus.is_empty());
        r.running_since = Some(1_000);
        r.close_ended(1_100, &samples(0, 0, 0));
        assert_eq!(
            r.pending[0].peak_power_w,
            vec![0, 0],
            "one peak per GPU, none read"
        );
        r.record_sample(&samples(0, 250_000, 100));
        r.close_ended(1_200, &samples(0, 0, 0));
        assert_eq!(r.pending[1].peak_power_w, vec![250, 250]);
    }

    #[tokio::test]
    async fn state_files_written_with_sustained_peaks_still_load() {
        let r = saved_as_older(|record| {
            let peaks = vec![gpu_market_core::lease::SustainedPeak::default(); 2];
            record.insert(
                "sustained_peaks".into(),
                serde_json::to_value(peaks).unwrap(),
            );
        })
        .await;
        assert!(
            r.power_log.gpus.is_empty(),
            "readings count from the upgrade on"
        );
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
    fn consecutive_proofs_join_into_one_of_their_span_whose_log_replays_its_peaks() {
        let mut r = LeaseRecord::new(&lease(0), &samples(0, 0, 0));
        r.running_since = Some(1_000);
        for _ in 0..5 {
            r.record_sample(&samples(0, 300_000, 100));
        }
        r.close_ended(1_100, &samples(100_000, 0, 0));
        // Silence after 3 intervals: a proof spans 2, the next interval is awaited.
        assert!(!r.proof_due(1_100, 2));
        assert!(!r.proof_due(1_199, 2));
        assert!(
            r.proof_due(1_100, 1),
            "no spans with the smallest silence window"
        );
        for _ in 0..gpu_market_core::lease::SUSTAINED_READINGS {
            r.record_sample(&samples(0, 330_000, 0));
        }
        r.close_ended(1_200, &samples(150_000, 0, 0));
        let parts = r.pending.clone();
        r.join_pending();
        assert_eq!(r.pending.len(), 1);
        let p = &r.pending[0];
        assert_eq!((p.interval, p.intervals, p.window), (0, 2, (1_000, 1_200)));
        assert_eq!(p.gpu_seconds, 400, "2 GPUs × 200 s");
        assert_eq!(p.energy_j, parts[0].energy_j + parts[1].energy_j);
        assert_eq!(
            p.avg_utilisation_bps,
            (parts[0].avg_utilisation_bps + parts[1].avg_utilisation_bps) / 2
        );
        assert_eq!(p.peak_power_w, vec![330, 330]);
        // The joined log replays to the joined peaks, and the proof commits to it.
        assert_eq!(p.power_log.peak_power_w(), p.peak_power_w);
        assert_eq!(p.samples_hash, samples_hash(&p.power_log));
        assert_eq!(p.proof().intervals, 2);
        assert!(r.proof_due(1_200, 2));
    }

    /// A lease's first readings fill the sustained window only gradually, and a window not yet
    /// full restarts the peak: a log joined over such a start replays to other peaks than its
    /// parts state (here 220 W against the 400 W stated), which the demo's auditor found ("the
    /// proof misstates its own log"). Such parts are not joined; each proof's log replays to the
    /// peaks it states.
    #[test]
    fn parts_whose_joined_log_would_replay_to_other_peaks_go_as_proofs_of_their_own() {
        let mut r = LeaseRecord::new(&lease(0), &samples(0, 0, 0));
        r.running_since = Some(1_000);
        for _ in 0..2 {
            r.record_sample(&samples(0, 400_000, 100));
        }
        r.close_ended(1_100, &samples(100_000, 0, 0));
        for _ in 0..3 {
            r.record_sample(&samples(0, 100_000, 100));
        }
        r.close_ended(1_200, &samples(150_000, 0, 0));
        assert_eq!(
            (
                r.pending[0].peak_power_w.clone(),
                r.pending[1].peak_power_w.clone()
            ),
            (vec![400, 400], vec![220, 220])
        );
        r.join_pending();
        assert_eq!(r.pending.len(), 2, "not joined");
        for p in &r.pending {
            assert_eq!(p.power_log.peak_power_w(), p.peak_power_w);
        }
    }

    #[test]
    fn a_sent_proof_a_final_one_and_a_gap_are_never_joined_over() {
        let mut r = LeaseRecord::new(&lease(0), &samples(0, 0, 0));
        r.close_ended(1_100, &samples(0, 0, 0));
        r.pending[0].sent = true;
        r.close_ended(1_200, &samples(0, 0, 0));
        r.join_pending();
        assert_eq!(r.pending.len(), 2, "the sent proof goes again as it was");
        assert!(r.proof_due(1_200, 2));

        // A gap (interval 1 dropped) is not joined over.
        let mut r = LeaseRecord::new(&lease(0), &samples(0, 0, 0));
        r.close_ended(1_200, &samples(0, 0, 0));
        r.pending.remove(1);
        r.close_final(1_230, &samples(0, 0, 0), 0);
        r.join_pending();
        let spans: Vec<_> = r
            .pending
            .iter()
            .map(|p| (p.interval, p.intervals))
            .collect();
        assert_eq!(spans, vec![(0, 1), (2, 1)]);

        // A final proof ends a span: nothing joins after it, and it is due at once.
        let mut r = LeaseRecord::new(&lease(0), &samples(0, 0, 0));
        r.close_final(1_030, &samples(0, 0, 0), 0);
        assert!(r.proof_due(1_030, 2));
        let mut after = r.pending[0].clone();
        after.interval = 1;
        after.exit_code = None;
        r.pending.push(after);
        r.join_pending();
        assert_eq!(r.pending.len(), 2);
    }

    #[test]
    fn a_proof_waits_for_its_span_at_most_until_the_last_window_would_have_closed() {
        let mut r = LeaseRecord::new(&lease(0), &samples(0, 0, 0));
        r.close_ended(1_100, &samples(0, 0, 0));
        // Whatever kept the next window from closing, the proof goes one interval later.
        assert!(!r.proof_due(1_199, 2));
        assert!(r.proof_due(1_200, 2));
        // The lease's last window (1 200 to its end at 1 250) is due as it closes.
        let mut r = LeaseRecord::new(&lease(2), &samples(0, 0, 0));
        r.close_ended(1_250, &samples(0, 0, 0));
        assert!(r.all_closed());
        assert!(r.proof_due(1_250, 2));
    }

    #[test]
    fn a_refused_lease_proves_nothing_used() {
        let mut r = LeaseRecord::new(&lease(0), &samples(5_000, 0, 0));
        r.close_final(1_010, &samples(9_000, 0, 0), -1);
        assert_eq!(r.pending[0].gpu_seconds, 0);
        assert_eq!(r.pending[0].energy_j, 0);
    }

    #[tokio::test]
    async fn a_shared_gpu_is_metered_by_the_energy_attributed_and_old_files_load_without_it() {
        let mut r = LeaseRecord::new(&lease(0), &samples(5_000_000, 0, 0));
        r.meter_shared(&[1]);
        assert_eq!(r.baseline_energy_mj, vec![5_000_000, 0]);
        r.running_since = Some(1_000);
        r.attribute_energy(1, 3_000_000);
        r.attribute_energy(0, 1_000_000);
        assert_eq!(
            r.attributed_energy_mj,
            [(1, 3_000_000)].into(),
            "GPU 0 is whole"
        );
        r.meter_shared(&[1]);
        assert_eq!(r.attributed_energy_mj[&1], 3_000_000, "kept");
        // GPU 0 by its counter (+2 000 J), GPU 1 by the energy attributed (+3 000 J).
        let now = vec![
            Sample {
                energy_mj: 7_000_000,
                ..Default::default()
            },
            Sample {
                energy_mj: 3_000_000,
                ..Default::default()
            },
        ];
        r.close_ended(1_100, &now);
        assert_eq!(r.pending[0].energy_j, 5_000);
        assert_eq!(r.baseline_energy_mj, vec![7_000_000, 3_000_000]);

        let dir = tempfile::tempdir().unwrap();
        let file = StateFile::new(dir.path());
        let mut state = AgentState::default();
        state.leases.insert(Key([9; 32]), r);
        state
            .leases
            .insert(Key([8; 32]), LeaseRecord::new(&lease(0), &samples(0, 0, 0)));
        file.save(&state).await.unwrap();
        assert_eq!(file.load().unwrap(), state);
        let text = fs::read_to_string(file.path()).unwrap();
        assert_eq!(
            text.matches("attributed_energy_mj").count(),
            1,
            "written only where a GPU is shared, as files before it have none"
        );
    }

    #[tokio::test]
    async fn the_state_file_round_trips_and_replaces_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let file = StateFile::new(dir.path());
        assert_eq!(file.load().unwrap(), AgentState::default());
        let mut state = AgentState::default();
        let mut r = LeaseRecord::new(&lease(0), &samples(7, 0, 0));
        r.container_id = Some("c1".into());
        r.close_final(1_010, &samples(9, 0, 0), 0);
        state.leases.insert(Key([9; 32]), r);
        file.save(&state).await.unwrap();
        assert_eq!(file.load().unwrap(), state);
        assert!(!dir.path().join("state.json.tmp").exists());
        fs::write(file.path(), b"{not json").unwrap();
        assert!(matches!(file.load(), Err(StateError::Corrupt { .. })));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_save_the_disk_holds_up_does_not_hold_up_the_runtime() {
        let dir = tempfile::tempdir().unwrap();
        let file = StateFile::new(dir.path());
        // A write that blocks until someone reads it: a disk that does not answer. Before the
        // save ran on a blocking thread, it held the agent's one runtime thread (`/healthz`,
        // the websocket, the lease API) with it, and this test never ended.
        let stuck = dir.path().join("state.json.tmp");
        let made = std::process::Command::new("mkfifo")
            .arg(&stuck)
            .status()
            .unwrap();
        assert!(made.success());
        let beside = tokio::spawn(async {
            for _ in 0..5 {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        });
        let state = AgentState::default();
        let save = file.save(&state);
        tokio::pin!(save);
        tokio::select! {
            _ = &mut save => panic!("the write cannot finish before it is read"),
            done = beside => done.unwrap(),
        }
        // The disk answers; the save ends (a FIFO cannot be fsynced: an error, reported).
        let reader = std::thread::spawn(move || fs::read(stuck).unwrap());
        assert!(matches!(save.await, Err(StateError::Io { .. })));
        assert_eq!(
            reader.join().unwrap(),
            serde_json::to_vec_pretty(&state).unwrap()
        );
    }
}
