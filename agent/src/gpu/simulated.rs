//! GPUs modelled in software: for tests, and for running the agent on a machine without NVIDIA
//! GPUs. The model is deterministic: a GPU draws half its minimum power limit when idle and
//! scales up to its applied power limit with the load a test (or the operator) sets; energy is
//! that power integrated over a time source passed in, so a paused test clock drives it.

use std::sync::{Arc, Mutex, MutexGuard};

use gpu_market_core::overclock::Settings;

use super::{GpuBackend, GpuError, GpuInfo, Sample};
use crate::config::SimulatedGpuConfig;

/// Milliseconds from some fixed start; never goes back.
pub trait TimeSource: Send + Sync {
    fn now_ms(&self) -> u64;
}

/// tokio's clock: real time in the daemon, the paused clock in tests.
pub struct TokioTime {
    epoch: tokio::time::Instant,
}

impl TokioTime {
    pub fn new() -> Self {
        TokioTime {
            epoch: tokio::time::Instant::now(),
        }
    }
}

impl Default for TokioTime {
    fn default() -> Self {
        Self::new()
    }
}

impl TimeSource for TokioTime {
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }
}

pub struct SimulatedGpu {
    infos: Vec<GpuInfo>,
    time: Arc<dyn TimeSource>,
    state: Mutex<Vec<SimState>>,
}

struct SimState {
    applied: Settings,
    /// Load in thousandths.
    load_permille: u16,
    energy_uj: u64,
    last_ms: u64,
    /// A fault for tests: power limit changes are acknowledged but do not take.
    power_limit_stuck: bool,
}

impl SimulatedGpu {
    pub fn new(gpus: &[SimulatedGpuConfig], time: Arc<dyn TimeSource>) -> Self {
        let now = time.now_ms();
        let infos: Vec<GpuInfo> = gpus
            .iter()
            .enumerate()
            .map(|(i, g)| {
                let mut uuid = *b"SIMULATED-GPU-\0\0";
                uuid[14..].copy_from_slice(&(i as u16).to_be_bytes());
                GpuInfo {
                    index: i as u32,
                    uuid,
                    name: format!("Simulated GPU (class {})", g.class),
                    memory_mib: g.memory_gib as u64 * 1024,
                    limits: g.limits,
                    default_power_w: g.default_power_w,
                    class: Some(g.class),
                    topology_group: Some(g.topology_group),
                }
            })
            .collect();
        let state = infos
            .iter()
            .map(|info| SimState {
                applied: info.defaults(),
                load_permille: 0,
                energy_uj: 0,
                last_ms: now,
                power_limit_stuck: false,
            })
            .collect();
        SimulatedGpu {
            infos,
            time,
            state: Mutex::new(state),
        }
    }

    /// Sets how busy GPU `index` is, in thousandths (clamped to 1000).
    pub fn set_load(&self, index: u32, permille: u16) -> Result<(), GpuError> {
        self.with(index, |g, _| g.load_permille = permille.min(1_000))
    }

    /// Makes power limit changes on GPU `index` succeed without taking effect, as a driver that
    /// silently clamps would.
    pub fn stick_power_limit(&self, index: u32) -> Result<(), GpuError> {
        self.with(index, |g, _| g.power_limit_stuck = true)
    }

    fn lock(&self) -> MutexGuard<'_, Vec<SimState>> {
        self.state.lock().expect("simulated GPU lock")
    }

    /// Runs `f` on GPU `index` after integrating its energy up to now.
    fn with<T>(
        &self,
        index: u32,
        f: impl FnOnce(&mut SimState, &GpuInfo) -> T,
    ) -> Result<T, GpuError> {
        let info = self
            .infos
            .get(index as usize)
            .ok_or(GpuError::NoSuchGpu(index))?;
        let now = self.time.now_ms();
        let mut state = self.lock();
        let g = &mut state[index as usize];
        let dt = now.saturating_sub(g.last_ms);
        // mW × ms = µJ.
        g.energy_uj += power_mw(g, info) as u64 * dt;
        g.last_ms = now;
        Ok(f(g, info))
    }
}

fn power_mw(g: &SimState, info: &GpuInfo) -> u32 {
    let idle = info.limits.power_w.min as u32 * 500;
    let limit = (g.applied.power_limit_w as u32 * 1_000).max(idle);
    idle + (limit - idle) * g.load_permille as u32 / 1_000
}

impl GpuBackend for SimulatedGpu {
    fn observe_workload(&self, index: u32, load_permille: u16) {
        // An index the backend lacks was refused when the lease started.
        let _ = self.set_load(index, load_permille);
    }

    fn gpus(&self) -> Vec<GpuInfo> {
        self.infos.clone()
    }

    fn apply(&self, index: u32, settings: &Settings) -> Result<(), GpuError> {
        let info = self
            .infos
            .get(index as usize)
            .ok_or(GpuError::NoSuchGpu(index))?;
        info.limits
            .check(settings)
            .map_err(|source| GpuError::OutOfRange { index, source })?;
        self.with(index, |g, _| {
            let power_limit_w = if g.power_limit_stuck {
                g.applied.power_limit_w
            } else {
                settings.power_limit_w
            };
            g.applied = Settings {
                power_limit_w,
                ..*settings
            };
        })
    }

    fn read_back(&self, index: u32) -> Result<Settings, GpuError> {
        self.with(index, |g, _| g.applied)
    }

    fn reset(&self, index: u32) -> Result<(), GpuError> {
        self.with(index, |g, info| g.applied = info.defaults())
    }

    fn sample(&self, index: u32) -> Result<Sample, GpuError> {
        self.with(index, |g, info| Sample {
            power_mw: power_mw(g, info),
            energy_mj: g.energy_uj / 1_000,
            utilisation_pct: (g.load_permille / 10) as u8,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use gpu_market_core::overclock::{GpuLimits, OverclockError, Range};

    use super::*;
    use crate::gpu::apply_and_verify;

    struct ManualTime(AtomicU64);
    impl TimeSource for ManualTime {
        fn now_ms(&self) -> u64 {
            self.0.load(Ordering::SeqCst)
        }
    }
    impl ManualTime {
        fn advance_secs(&self, s: u64) {
            self.0.fetch_add(s * 1_000, Ordering::SeqCst);
        }
    }

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
                mem_lock_mhz: Range { min: 0, max: 0 },
                core_offset_mhz: Range {
                    min: -100,
                    max: 100,
                },
                mem_offset_mhz: Range { min: 0, max: 0 },
            },
            default_power_w: 300,
        }
    }

    fn two_gpus() -> (Arc<ManualTime>, SimulatedGpu) {
        let time = Arc::new(ManualTime(AtomicU64::new(0)));
        let gpu = SimulatedGpu::new(&[config(), config()], time.clone());
        (time, gpu)
    }

    #[test]
    fn energy_integrates_power_which_follows_load_and_the_power_limit() {
        let (time, gpu) = two_gpus();
        // Idle: half the minimum power limit, 50 W.
        time.advance_secs(10);
        assert_eq!(gpu.sample(0).unwrap().energy_mj, 500_000);
        gpu.set_load(0, 1_000).unwrap();
        time.advance_secs(10);
        let s = gpu.sample(0).unwrap();
        assert_eq!(s.power_mw, 300_000, "full load draws the default limit");
        assert_eq!(s.energy_mj, 500_000 + 3_000_000);
        assert_eq!(s.utilisation_pct, 100);
        apply_and_verify(
            &gpu,
            0,
            &Settings {
                power_limit_w: 200,
                ..Default::default()
            },
        )
        .unwrap();
        time.advance_secs(10);
        let s = gpu.sample(0).unwrap();
        assert_eq!(s.power_mw, 200_000);
        assert_eq!(s.energy_mj, 3_500_000 + 2_000_000);
        // GPU 1 stayed idle throughout.
        assert_eq!(gpu.sample(1).unwrap().energy_mj, 1_500_000);
    }

    #[test]
    fn out_of_range_settings_are_refused_and_change_nothing() {
        let (_, gpu) = two_gpus();
        let err = gpu
            .apply(
                0,
                &Settings {
                    power_limit_w: 450,
                    ..Default::default()
                },
            )
            .unwrap_err();
        assert!(matches!(
            err,
            GpuError::OutOfRange {
                index: 0,
                source: OverclockError::PowerLimit
            }
        ));
        let err = gpu
            .apply(
                0,
                &Settings {
                    power_limit_w: 250,
                    mem_lock_mhz: Some(5_000),
                    ..Default::default()
                },
            )
            .unwrap_err();
        assert!(matches!(
            err,
            GpuError::OutOfRange {
                source: OverclockError::MemLock,
                ..
            }
        ));
        assert_eq!(gpu.read_back(0).unwrap(), gpu.gpus()[0].defaults());
        assert!(matches!(gpu.sample(7), Err(GpuError::NoSuchGpu(7))));
    }

    #[test]
    fn a_stuck_power_limit_is_caught_by_the_read_back_and_reset_restores_defaults() {
        let (_, gpu) = two_gpus();
        let asked = Settings {
            power_limit_w: 250,
            core_lock_mhz: Some(1_500),
            core_offset_mhz: Some(-50),
            ..Default::default()
        };
        apply_and_verify(&gpu, 1, &asked).unwrap();
        assert_eq!(gpu.read_back(1).unwrap(), asked);
        gpu.stick_power_limit(0).unwrap();
        let err = apply_and_verify(&gpu, 0, &asked).unwrap_err();
        assert!(
            matches!(err, GpuError::DidNotTake { index: 0, .. }),
            "{err}"
        );
        gpu.reset(1).unwrap();
        assert_eq!(gpu.read_back(1).unwrap(), gpu.gpus()[1].defaults());
    }
}
