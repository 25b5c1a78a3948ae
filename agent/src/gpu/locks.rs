//! Clock locks recorded on disk, so that a restarted agent knows which GPUs it left locked.
//!
//! NVML can set a GPU's clock locks but has no call that reads them back: a lock outlives the
//! agent that set it (it lasts until reset or a driver reload), and an agent restarted after a
//! crash would see an unused GPU as at its defaults and leave it locked for the next lease.
//! [`RecordedLocks`] wraps a backend and writes the locks it sets to
//! `<data_dir>/gpu-locks.json`, by GPU UUID; its [`GpuBackend::read_back`] reports a recorded
//! lock where the backend reports none, so the reconcile loop, which resets every GPU no lease
//! uses whose applied settings differ from its defaults, resets such a GPU on its first tick.
//!
//! A lock is recorded before the driver is asked to set it, and forgotten only after a reset or
//! an apply without it succeeded: a crash between the two errs towards one reset too many,
//! never a lock forgotten.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use gpu_market_core::overclock::OverclockTerms;
use gpu_market_sdk::gpus::format_uuid;
use serde::{Deserialize, Serialize};

use super::{Clocks, GpuBackend, GpuError, GpuInfo, ProcessUse, Sample};
use crate::state::write_durably;

/// The file under the data folder.
pub const LOCK_RECORD_FILE: &str = "gpu-locks.json";

/// The clock locks a GPU may hold, in MHz.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Locks {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core_mhz: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_mhz: Option<u16>,
}

impl Locks {
    fn of(s: &OverclockTerms) -> Self {
        Locks {
            core_mhz: s.core_lock_mhz,
            mem_mhz: s.mem_lock_mhz,
        }
    }

    /// Both: the locks a GPU may hold while it changes from `self` to `other`.
    fn or(self, other: Locks) -> Locks {
        Locks {
            core_mhz: other.core_mhz.or(self.core_mhz),
            mem_mhz: other.mem_mhz.or(self.mem_mhz),
        }
    }
}

/// A backend whose clock locks are recorded in a file (see the module).
pub struct RecordedLocks {
    inner: Arc<dyn GpuBackend>,
    path: PathBuf,
    /// Each GPU's UUID, by index, as the record keys it.
    uuids: Vec<String>,
    record: Mutex<BTreeMap<String, Locks>>,
}

impl RecordedLocks {
    /// Wraps `inner`, with the record under `data_dir` (read now when there is one).
    pub fn open(inner: Arc<dyn GpuBackend>, data_dir: &Path) -> Result<Self, GpuError> {
        let path = data_dir.join(LOCK_RECORD_FILE);
        let record = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| GpuError::LockRecord {
                path: path.clone(),
                reason: format!(
                    "corrupt ({e}); reset the GPUs (nvidia-smi -rgc -rmc) and remove it"
                ),
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => {
                return Err(GpuError::LockRecord {
                    path,
                    reason: e.to_string(),
                })
            }
        };
        let uuids = inner.gpus().iter().map(|g| format_uuid(&g.uuid)).collect();
        Ok(RecordedLocks {
            inner,
            path,
            uuids,
            record: Mutex::new(record),
        })
    }

    /// The locks recorded for GPU `index`.
    pub fn recorded(&self, index: u32) -> Result<Locks, GpuError> {
        let uuid = self.uuid(index)?;
        Ok(self
            .record
            .lock()
            .expect("lock record")
            .get(uuid)
            .copied()
            .unwrap_or_default())
    }

    fn uuid(&self, index: u32) -> Result<&str, GpuError> {
        self.uuids
            .get(index as usize)
            .map(String::as_str)
            .ok_or(GpuError::NoSuchGpu(index))
    }

    /// Records `locks` for GPU `index`, writing the file when that changes it.
    fn record(&self, index: u32, locks: Locks) -> Result<(), GpuError> {
        let uuid = self.uuid(index)?.to_string();
        let mut record = self.record.lock().expect("lock record");
        let before = record.get(&uuid).copied().unwrap_or_default();
        if before == locks {
            return Ok(());
        }
        if locks == Locks::default() {
            record.remove(&uuid);
        } else {
            record.insert(uuid, locks);
        }
        let bytes = serde_json::to_vec_pretty(&*record).expect("the lock record serialises");
        write_durably(&self.path, &bytes).map_err(|e| GpuError::LockRecord {
            path: self.path.clone(),
            reason: e.to_string(),
        })
    }
}

impl GpuBackend for RecordedLocks {
    fn gpus(&self) -> Vec<GpuInfo> {
        self.inner.gpus()
    }

    fn apply(&self, index: u32, settings: &OverclockTerms) -> Result<(), GpuError> {
        let asked = Locks::of(settings);
        self.record(index, self.recorded(index)?.or(asked))?;
        self.inner.apply(index, settings)?;
        self.record(index, asked)
    }

    /// The backend's reading, with the recorded locks where it shows none.
    fn read_back(&self, index: u32) -> Result<OverclockTerms, GpuError> {
        let read = self.inner.read_back(index)?;
        let recorded = self.recorded(index)?;
        Ok(OverclockTerms {
            core_lock_mhz: read.core_lock_mhz.or(recorded.core_mhz),
            mem_lock_mhz: read.mem_lock_mhz.or(recorded.mem_mhz),
            ..read
        })
    }

    fn reset(&self, index: u32) -> Result<(), GpuError> {
        self.inner.reset(index)?;
        self.record(index, Locks::default())
    }

    fn sample(&self, index: u32) -> Result<Sample, GpuError> {
        self.inner.sample(index)
    }

    fn clocks(&self, index: u32) -> Result<Clocks, GpuError> {
        self.inner.clocks(index)
    }

    fn processes(&self, index: u32) -> Result<Vec<ProcessUse>, GpuError> {
        self.inner.processes(index)
    }

    fn observe_workload(&self, index: u32, load_permille: u16) {
        self.inner.observe_workload(index, load_permille)
    }

    fn follows_workload(&self) -> bool {
        self.inner.follows_workload()
    }

    fn watch_faults(
        &self,
        tick: std::time::Duration,
        deliver: &mut dyn FnMut(Vec<super::GpuFault>) -> bool,
    ) -> Result<bool, GpuError> {
        self.inner.watch_faults(tick, deliver)
    }
}

#[cfg(test)]
mod tests {
    use gpu_market_core::overclock::{GpuLimits, Range};

    use super::*;
    use crate::config::SimulatedGpuConfig;
    use crate::gpu::apply_and_verify;
    use crate::gpu::simulated::{SimulatedGpu, TokioTime};

    fn config() -> SimulatedGpuConfig {
        SimulatedGpuConfig {
            class: 0,
            memory_gib: 80,
            topology_group: 0,
            limits: GpuLimits {
                power_w: Range { min: 100, max: 400 },
                core_lock_mhz: Range {
                    min: 300,
                    max: 1_800,
                },
                mem_lock_mhz: Range {
                    min: 500,
                    max: 2_600,
                },
                core_offset_mhz: Range { min: 0, max: 0 },
                mem_offset_mhz: Range { min: 0, max: 0 },
            },
            default_power_w: 300,
        }
    }

    /// Two simulated GPUs that, like NVIDIA's, cannot show their clock locks: the GPUs outlive
    /// every agent process in a test, as real ones do.
    fn blind_gpus() -> Arc<SimulatedGpu> {
        let gpus = Arc::new(SimulatedGpu::new(
            &[config(), config()],
            Arc::new(TokioTime::new()),
        ));
        gpus.hide_clock_locks(0).unwrap();
        gpus.hide_clock_locks(1).unwrap();
        gpus
    }

    fn locked() -> OverclockTerms {
        OverclockTerms {
            power_limit_w: 250,
            core_lock_mhz: Some(1_500),
            mem_lock_mhz: Some(2_000),
            ..OverclockTerms::default()
        }
    }

    #[test]
    fn without_a_record_a_lock_left_behind_is_invisible() {
        let gpus = blind_gpus();
        gpus.apply(0, &locked()).unwrap();
        let defaults = gpus.gpus()[0].defaults();
        let read = gpus.read_back(0).unwrap();
        assert_eq!(read.core_lock_mhz, None, "the driver cannot tell the lock");
        assert_ne!(read, defaults, "the power limit shows");
        gpus.apply(
            0,
            &OverclockTerms {
                power_limit_w: 300,
                ..locked()
            },
        )
        .unwrap();
        assert_eq!(
            gpus.read_back(0).unwrap(),
            defaults,
            "a locked GPU looks as if at its defaults: a restarted agent would not reset it"
        );
    }

    #[test]
    fn a_lock_left_by_a_crashed_agent_is_seen_after_a_restart_and_reset_clears_it() {
        let dir = tempfile::tempdir().unwrap();
        let gpus = blind_gpus();
        let asked = OverclockTerms {
            power_limit_w: 300,
            ..locked()
        };
        let first = RecordedLocks::open(gpus.clone(), dir.path()).unwrap();
        apply_and_verify(&first, 1, &asked).unwrap();
        drop(first); // The agent crashes; the GPU stays locked.

        let second = RecordedLocks::open(gpus.clone(), dir.path()).unwrap();
        let defaults = second.gpus()[1].defaults();
        assert_eq!(second.read_back(1).unwrap(), asked);
        assert_ne!(
            second.read_back(1).unwrap(),
            defaults,
            "the loop resets a GPU no lease uses that differs from its defaults"
        );
        assert_eq!(second.read_back(0).unwrap(), second.gpus()[0].defaults());
        second.reset(1).unwrap();
        assert_eq!(second.read_back(1).unwrap(), defaults);
        drop(second);

        let third = RecordedLocks::open(gpus, dir.path()).unwrap();
        assert_eq!(third.read_back(1).unwrap(), defaults);
        let file = std::fs::read_to_string(dir.path().join(LOCK_RECORD_FILE)).unwrap();
        assert_eq!(file.trim(), "{}", "nothing locked, nothing recorded");
    }

    #[test]
    fn settings_without_locks_forget_them_and_a_failed_apply_keeps_them_possible() {
        let dir = tempfile::tempdir().unwrap();
        let gpus = RecordedLocks::open(blind_gpus(), dir.path()).unwrap();
        apply_and_verify(&gpus, 0, &locked()).unwrap();
        let core_only = OverclockTerms {
            mem_lock_mhz: None,
            ..locked()
        };
        apply_and_verify(&gpus, 0, &core_only).unwrap();
        assert_eq!(gpus.recorded(0).unwrap().mem_mhz, None);
        // Refused by the driver: the memory lock asked may or may not have taken.
        let refused = OverclockTerms {
            power_limit_w: 999,
            ..locked()
        };
        assert!(gpus.apply(0, &refused).is_err());
        assert_eq!(
            gpus.recorded(0).unwrap(),
            Locks {
                core_mhz: Some(1_500),
                mem_mhz: Some(2_000)
            }
        );
        assert!(matches!(gpus.recorded(5), Err(GpuError::NoSuchGpu(5))));
    }

    #[test]
    fn a_corrupt_record_stops_the_agent_with_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(LOCK_RECORD_FILE), "{not json").unwrap();
        let err = RecordedLocks::open(blind_gpus(), dir.path())
            .err()
            .expect("a corrupt record is refused");
        assert!(matches!(err, GpuError::LockRecord { .. }), "{err}");
        assert!(err.to_string().contains("nvidia-smi"), "{err}");
    }
}
