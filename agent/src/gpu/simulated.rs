//! GPUs modelled in software: for tests, and for running the agent on a machine without NVIDIA
//! GPUs. The model is deterministic: a GPU draws half its minimum power limit when idle and
//! scales up to its applied power limit with the load a test (or the operator) sets; energy is
//! that power integrated over a time source passed in, so a paused test clock drives it.
//!
//! Co-tenancy is modelled too: a test starts CUDA processes of containers on a GPU
//! ([`SimulatedGpu::start_process`]), each holding memory and keeping a share of the SMs busy.
//! While a GPU has processes, its load is theirs together, and [`GpuBackend::processes`] lists
//! them as NVML would. An MPS client (a process whose environment names the MPS pipe folder, as
//! `super::isolation` gives leases on shared GPUs) is refused an allocation past its pinned
//! device memory limit, as the MPS server refuses it; any process is refused one past the GPU's
//! free memory.
//!
//! For auto power, a GPU's work may be given a [`Demand`]: the power it draws unconstrained and
//! how memory-bound it is, so that a limit below its draw slows its SMs (the core clock reads
//! lower) and, once the SMs are its bottleneck, its throughput (the memory utilisation reads
//! lower). Faults for the agent's fault watcher are injected with [`SimulatedGpu::inject_xid`].

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use gpu_market_core::overclock::{OverclockTerms, Range};

use super::faults::Recovery;
use super::isolation::{mps_client, pinned_limit_mib};
use super::{Clocks, GpuBackend, GpuError, GpuFault, GpuInfo, ProcessUse, Sample, Setting};
use crate::config::SimulatedGpuConfig;

/// The UUID of SIMULATED GPU `index`: `SIMULATED-GPU-` and the index, as `detect` prints it
/// (`GPU-53494d55-4c41-5445-442d-4750552d0000` for GPU 0).
pub fn uuid(index: u16) -> [u8; 16] {
    let mut uuid = *b"SIMULATED-GPU-\0\0";
    uuid[14..].copy_from_slice(&index.to_be_bytes());
    uuid
}

/// Milliseconds from some fixed start; never goes back.
pub trait TimeSource: Send + Sync {
    fn now_ms(&self) -> u64;
}

/// A clock that moves only when told: tests and the auto power benchmark step it.
#[derive(Debug, Default)]
pub struct ManualTime(std::sync::atomic::AtomicU64);

impl ManualTime {
    pub fn advance_ms(&self, ms: u64) {
        self.0.fetch_add(ms, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn advance_secs(&self, s: u64) {
        self.advance_ms(s * 1_000);
    }
}

impl TimeSource for ManualTime {
    fn now_ms(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
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
    /// Faults injected for [`GpuBackend::watch_faults`], and the signal that one came.
    faults: Mutex<Vec<GpuFault>>,
    fault_signal: Condvar,
    /// Where `gpu-market-agent simulate-fault` leaves faults for the running agent.
    fault_inbox: Option<PathBuf>,
    /// A fault for tests: the GPUs whose driver calls block (a GPU in reset, a driver stuck in
    /// the kernel) until released, and the signal that one was.
    hung: Mutex<std::collections::BTreeSet<u32>>,
    released: Condvar,
}

/// The folder under an agent's data folder where `gpu-market-agent simulate-fault` leaves
/// faults for its SIMULATED GPUs.
pub fn fault_inbox(data_dir: &Path) -> PathBuf {
    data_dir.join("simulated-faults")
}

/// Leaves an Xid `xid` of GPU `index` in `inbox` for the running agent (written whole, then
/// renamed: the agent never reads half a fault).
pub fn leave_fault(inbox: &Path, index: u32, xid: u64) -> std::io::Result<()> {
    std::fs::create_dir_all(inbox)?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let name = format!("{nanos}-{index}-{xid}");
    let part = inbox.join(format!("{name}.part"));
    std::fs::write(&part, format!("{index} {xid}\n"))?;
    std::fs::rename(part, inbox.join(format!("{name}.fault")))
}

struct SimState {
    applied: OverclockTerms,
    /// Load in thousandths.
    load_permille: u16,
    energy_uj: u64,
    last_ms: u64,
    /// A fault for tests: power limit changes are acknowledged but do not take.
    power_limit_stuck: bool,
    /// NVML's blindness: clock locks take but reads do not show them.
    locks_hidden: bool,
    /// A fault for tests: reads fail as a driver call that errors (`GPU is lost`, a timeout).
    reads_fail: bool,
    /// A fault for tests: clock locks are acknowledged (and recorded) but the GPU's clocks do not
    /// follow them, as on a driver or board that ignores them.
    locks_slip: bool,
    /// A fault for tests: the driver refuses to set these settings, with this message (`None`:
    /// as not supported).
    refused: Vec<(Setting, Option<String>)>,
    /// A fault for tests: the next readings show this much more power than the limit allows
    /// (a boost transient), in mW, for this many readings.
    overshoot: (u32, u32),
    /// The CUDA processes on the GPU.
    processes: Vec<SimProcess>,
    /// What the GPU's work would draw unconstrained, and how memory-bound it is; `None`: work
    /// that takes whatever its power limit allows (compute-bound, at full speed from the GPU's
    /// default limit up).
    demand: Option<Demand>,
}

/// A SIMULATED GPU's work, for power-limit studies (auto power): at full load it draws
/// `draw_w` when its limit allows; under a lower limit its SMs slow in proportion, which costs a
/// memory-bound load nothing until the SMs, not the memory, become its bottleneck.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Demand {
    pub draw_w: u16,
    /// The share of the work's time spent waiting on memory at full speed, in percent (0:
    /// compute-bound; GigaSPOT's memory-bound example draws 280 W of a 450 W GPU).
    pub memory_bound_pct: u8,
}

/// How the GPU runs now: its power, the speed of its SMs and the work's throughput (both in
/// thousandths of full speed).
struct Running {
    power_mw: u32,
    sm_speed_permille: u32,
    throughput_permille: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SimProcess {
    pid: u32,
    memory_mib: u64,
    load_permille: u16,
}

/// A CUDA process of a container, as it starts on a SIMULATED GPU.
#[derive(Debug, Clone, Copy)]
pub struct CudaProcess<'a> {
    /// In the host's PID namespace.
    pub pid: u32,
    /// Its container's environment.
    pub env: &'a [(String, String)],
    /// The device ordinal the GPU has in its container.
    pub ordinal: usize,
    /// The device memory it allocates.
    pub memory_mib: u64,
    /// The share of the GPU's SMs it keeps busy, in thousandths.
    pub load_permille: u16,
}

/// Why a SIMULATED GPU refused a process's allocation (`cudaErrorMemoryAllocation`).
#[derive(Debug, thiserror::Error)]
pub enum AllocationError {
    #[error("GPU {index}: {asked_mib} MiB is over the {limit_mib} MiB the MPS server pinned for this client (SIMULATED)")]
    OverPinnedLimit {
        index: u32,
        asked_mib: u64,
        limit_mib: u64,
    },
    #[error("GPU {index}: out of memory: {asked_mib} MiB asked, {free_mib} MiB free (SIMULATED)")]
    OutOfMemory {
        index: u32,
        asked_mib: u64,
        free_mib: u64,
    },
    #[error(transparent)]
    Gpu(#[from] GpuError),
}

impl SimulatedGpu {
    pub fn new(gpus: &[SimulatedGpuConfig], time: Arc<dyn TimeSource>) -> Self {
        let now = time.now_ms();
        let infos: Vec<GpuInfo> = gpus
            .iter()
            .enumerate()
            .map(|(i, g)| GpuInfo {
                index: i as u32,
                uuid: uuid(i as u16),
                name: format!("Simulated GPU (class {})", g.class),
                memory_mib: g.memory_gib as u64 * 1024,
                limits: g.limits,
                default_power_w: g.default_power_w,
                class: Some(g.class),
                topology_group: Some(g.topology_group),
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
                locks_hidden: false,
                reads_fail: false,
                locks_slip: false,
                refused: Vec::new(),
                overshoot: (0, 0),
                processes: Vec::new(),
                demand: None,
            })
            .collect();
        SimulatedGpu {
            infos,
            time,
            state: Mutex::new(state),
            faults: Mutex::new(Vec::new()),
            fault_signal: Condvar::new(),
            fault_inbox: None,
            hung: Mutex::new(Default::default()),
            released: Condvar::new(),
        }
    }

    /// Takes faults from `inbox` too ([`leave_fault`]): how an operator or a test makes a
    /// running agent's SIMULATED GPU fail.
    pub fn with_fault_inbox(mut self, inbox: PathBuf) -> Self {
        self.fault_inbox = Some(inbox);
        self
    }

    /// The faults left in the inbox, each taken once (its file removed).
    fn take_inbox(&self) -> Vec<GpuFault> {
        let Some(inbox) = &self.fault_inbox else {
            return Vec::new();
        };
        let Ok(entries) = std::fs::read_dir(inbox) else {
            return Vec::new();
        };
        let mut files: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "fault"))
            .collect();
        files.sort();
        files
            .into_iter()
            .filter_map(|path| {
                let text = std::fs::read_to_string(&path).ok();
                std::fs::remove_file(&path).ok()?;
                let mut words = text?.split_whitespace().map(str::parse::<u64>).collect::<Vec<_>>().into_iter();
                let (Some(Ok(index)), Some(Ok(xid))) = (words.next(), words.next()) else {
                    tracing::warn!(path = %path.display(), "a simulated fault that does not read as `GPU XID`: dropped");
                    return None;
                };
                Some(GpuFault {
                    index: u32::try_from(index).ok()?,
                    xid,
                    recovery: None,
                })
            })
            .collect()
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

    /// Makes every read of GPU `index` fail (`true`), as NVML calls on a GPU that fell off the
    /// bus or timed out do, or work again (`false`).
    pub fn fail_reads(&self, index: u32, fail: bool) -> Result<(), GpuError> {
        self.with(index, |g, _| g.reads_fail = fail)
    }

    /// Makes every driver call on GPU `index` block (`true`) until it is released (`false`),
    /// as NVML calls do on a GPU in reset or a driver stuck in the kernel.
    pub fn hang(&self, index: u32, hang: bool) {
        let mut hung = self.hung.lock().expect("simulated hang");
        match hang {
            true => hung.insert(index),
            false => hung.remove(&index),
        };
        self.released.notify_all();
    }

    /// A driver call on GPU `index`: waits while the GPU hangs.
    fn driver(&self, index: u32) {
        let hung = self.hung.lock().expect("simulated hang");
        let _unhung = self
            .released
            .wait_while(hung, |h| h.contains(&index))
            .expect("simulated hang");
    }

    /// Makes the next `readings` samples of GPU `index` show `extra_mw` above what its limit
    /// allows, as a boost transient does on real GPUs.
    pub fn overshoot(&self, index: u32, extra_mw: u32, readings: u32) -> Result<(), GpuError> {
        self.with(index, |g, _| g.overshoot = (extra_mw, readings))
    }

    /// The throughput GPU `index`'s work runs at now, in thousandths of its full speed: the
    /// model's truth, which NVML cannot read (auto power estimates it; its benchmark checks the
    /// estimate against this).
    pub fn throughput_permille(&self, index: u32) -> Result<u32, GpuError> {
        self.with(index, |g, info| running(g, info).throughput_permille)
    }

    /// Gives GPU `index`'s work `demand` (see [`Demand`]).
    pub fn set_demand(&self, index: u32, demand: Demand) -> Result<(), GpuError> {
        self.with(index, |g, _| g.demand = Some(demand))
    }

    /// Makes GPU `index` report Xid `xid` (with the driver's `recovery` action, where given)
    /// to [`GpuBackend::watch_faults`].
    pub fn inject_xid(&self, index: u32, xid: u64, recovery: Option<Recovery>) {
        let mut faults = self.faults.lock().expect("simulated fault queue");
        faults.push(GpuFault {
            index,
            xid,
            recovery,
        });
        self.fault_signal.notify_all();
    }

    /// Makes GPU `index`'s clock locks invisible to [`GpuBackend::read_back`] while they still
    /// take, as on NVIDIA GPUs, where NVML has no call that reads a lock back.
    pub fn hide_clock_locks(&self, index: u32) -> Result<(), GpuError> {
        self.with(index, |g, _| g.locks_hidden = true)
    }

    /// Makes GPU `index` acknowledge clock locks that its clocks then do not follow.
    pub fn slip_clock_locks(&self, index: u32) -> Result<(), GpuError> {
        self.with(index, |g, _| g.locks_slip = true)
    }

    /// Makes the driver of GPU `index` refuse `setting` with `message` (as NVML answers
    /// `Insufficient Permissions` or `Not Supported` on some boards).
    pub fn refuse(&self, index: u32, setting: Setting, message: &str) -> Result<(), GpuError> {
        self.with(index, |g, _| {
            g.refused.push((setting, Some(message.to_string())))
        })
    }

    /// Makes the driver of GPU `index` answer `setting` as not supported (as an H100 answers a
    /// memory clock lock, though it lists its memory clocks).
    pub fn refuse_unsupported(&self, index: u32, setting: Setting) -> Result<(), GpuError> {
        self.with(index, |g, _| g.refused.push((setting, None)))
    }

    /// SIMULATED: process `p` allocates its memory on GPU `index` and keeps its share of the SMs
    /// busy from now on; refused (holding nothing) past its MPS pinned limit or the GPU's free
    /// memory. See the module.
    pub fn start_process(&self, index: u32, p: CudaProcess<'_>) -> Result<(), AllocationError> {
        self.with(index, |g, info| {
            if mps_client(p.env) {
                if let Some(limit_mib) = pinned_limit_mib(p.env, p.ordinal) {
                    if p.memory_mib > limit_mib {
                        return Err(AllocationError::OverPinnedLimit {
                            index,
                            asked_mib: p.memory_mib,
                            limit_mib,
                        });
                    }
                }
            }
            let used: u64 = g.processes.iter().map(|q| q.memory_mib).sum();
            let free_mib = info.memory_mib.saturating_sub(used);
            if p.memory_mib > free_mib {
                return Err(AllocationError::OutOfMemory {
                    index,
                    asked_mib: p.memory_mib,
                    free_mib,
                });
            }
            g.processes.push(SimProcess {
                pid: p.pid,
                memory_mib: p.memory_mib,
                load_permille: p.load_permille.min(1_000),
            });
            Ok(())
        })?
    }

    /// SIMULATED: process `pid` exits, on every GPU it ran on.
    pub fn end_process(&self, pid: u32) {
        for index in 0..self.infos.len() as u32 {
            let _ = self.with(index, |g, _| g.processes.retain(|p| p.pid != pid));
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<SimState>> {
        self.state.lock().expect("simulated GPU lock")
    }

    /// A read of GPU `index` through `f`, failing as NVML's `call` would while reads fail.
    fn read<T>(
        &self,
        index: u32,
        call: &'static str,
        f: impl FnOnce(&mut SimState, &GpuInfo) -> T,
    ) -> Result<T, GpuError> {
        self.driver(index);
        self.with(index, |g, info| {
            if g.reads_fail {
                return Err(GpuError::Nvml {
                    index,
                    call,
                    message: "GPU is lost (simulated)".into(),
                });
            }
            Ok(f(g, info))
        })?
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

/// The GPU's load in thousandths: its processes' together while it has any, else the load set.
fn load_permille(g: &SimState) -> u32 {
    if g.processes.is_empty() {
        g.load_permille as u32
    } else {
        g.processes
            .iter()
            .map(|p| p.load_permille as u32)
            .sum::<u32>()
            .min(1_000)
    }
}

fn power_mw(g: &SimState, info: &GpuInfo) -> u32 {
    running(g, info).power_mw
}

/// The GPU's power, SM speed and throughput under its load, limit and demand. Without a
/// demand, the work draws what its limit allows and runs at full speed from the default limit
/// up; with one, it draws the lesser of its draw and the limit. Its SMs run at the share of the draw they get, and a
/// memory-bound load keeps its throughput until that share falls below its compute share.
fn running(g: &SimState, info: &GpuInfo) -> Running {
    let idle = info.limits.power_w.min as u32 * 500;
    let load = load_permille(g);
    let limit = (g.applied.power_limit_w as u32 * 1_000).max(idle);
    let (natural, power, compute_permille) = match g.demand {
        None => {
            let top = (info.default_power_w as u32 * 1_000).max(idle);
            let natural = idle + (top - idle) * load / 1_000;
            (natural, idle + (limit - idle) * load / 1_000, 1_000)
        }
        Some(d) => {
            let draw = (d.draw_w as u32 * 1_000).max(idle);
            let natural = idle + (draw - idle) * load / 1_000;
            let compute = 1_000 - (d.memory_bound_pct.min(90) as u32 * 10);
            (natural, natural.min(limit), compute)
        }
    };
    let sm_speed_permille = match natural - idle {
        0 => 1_000,
        busy => ((power - idle) * 1_000 / busy).min(1_000),
    };
    Running {
        power_mw: power,
        sm_speed_permille,
        throughput_permille: (sm_speed_permille * 1_000 / compute_permille).min(1_000),
    }
}

impl GpuBackend for SimulatedGpu {
    fn observe_workload(&self, index: u32, load_permille: u16) {
        // An index the backend lacks was refused when the lease started.
        let _ = self.set_load(index, load_permille);
    }

    fn follows_workload(&self) -> bool {
        true
    }

    fn gpus(&self) -> Vec<GpuInfo> {
        self.infos.clone()
    }

    fn apply(&self, index: u32, settings: &OverclockTerms) -> Result<(), GpuError> {
        let info = self
            .infos
            .get(index as usize)
            .ok_or(GpuError::NoSuchGpu(index))?;
        info.limits
            .check(settings)
            .map_err(|source| GpuError::OutOfRange { index, source })?;
        self.driver(index);
        self.with(index, |g, info| {
            let defaults = info.defaults();
            if let Some((setting, message)) = g
                .refused
                .iter()
                .find(|(setting, _)| setting.asked_in(settings, &defaults))
            {
                return Err(match message {
                    Some(message) => GpuError::Nvml {
                        index,
                        call: setting.name(),
                        message: format!("{message} (simulated)"),
                    },
                    None => GpuError::Unsupported {
                        index,
                        what: setting.name(),
                    },
                });
            }
            let power_limit_w = if g.power_limit_stuck {
                g.applied.power_limit_w
            } else {
                settings.power_limit_w
            };
            g.applied = OverclockTerms {
                power_limit_w,
                ..*settings
            };
            Ok(())
        })?
    }

    fn read_back(&self, index: u32) -> Result<OverclockTerms, GpuError> {
        self.read(index, "nvmlDeviceGetPowerManagementLimit", |g, _| {
            OverclockTerms {
                core_lock_mhz: g.applied.core_lock_mhz.filter(|_| !g.locks_hidden),
                mem_lock_mhz: g.applied.mem_lock_mhz.filter(|_| !g.locks_hidden),
                ..g.applied
            }
        })
    }

    fn reset(&self, index: u32) -> Result<(), GpuError> {
        self.driver(index);
        self.with(index, |g, info| g.applied = info.defaults())
    }

    fn sample(&self, index: u32) -> Result<Sample, GpuError> {
        self.read(index, "nvmlDeviceGetPowerUsage", |g, info| {
            let extra = match &mut g.overshoot {
                (mw, n) if *n > 0 => {
                    *n -= 1;
                    *mw
                }
                _ => 0,
            };
            let run = running(g, info);
            let memory_bound = g.demand.map_or(0, |d| d.memory_bound_pct as u32);
            Sample {
                power_mw: run.power_mw + extra,
                energy_mj: g.energy_uj / 1_000,
                utilisation_pct: (load_permille(g) / 10) as u8,
                // The memory is busy for its share of the load, at the work's throughput.
                mem_utilisation_pct: (memory_bound * load_permille(g) / 1_000
                    * run.throughput_permille
                    / 1_000) as u8,
            }
        })
    }

    /// A locked clock runs at its lock (unless locks slip); an unlocked one at the top of its
    /// range under load and at the bottom idle; a GPU with no clock range at 1,000 MHz. Under
    /// load, a limit below the work's draw slows the core below either, as a power cap
    /// overrides a lock on NVIDIA GPUs.
    fn clocks(&self, index: u32) -> Result<Clocks, GpuError> {
        self.read(index, "nvmlDeviceGetClockInfo", |g, info| {
            let busy = load_permille(g) > 0;
            let clock = |lock: Option<u16>, range: Range<u16>, speed: u32| -> u32 {
                let top = match range.max {
                    0 => 1_000,
                    max => max as u32,
                };
                match lock.filter(|_| !g.locks_slip) {
                    Some(mhz) if busy => (mhz as u32).min(top * speed / 1_000),
                    Some(mhz) => mhz as u32,
                    None if busy => top * speed / 1_000,
                    None if range.max == 0 => 1_000,
                    None => range.min as u32,
                }
            };
            let speed = running(g, info).sm_speed_permille;
            Clocks {
                core_mhz: clock(g.applied.core_lock_mhz, info.limits.core_lock_mhz, speed),
                mem_mhz: clock(g.applied.mem_lock_mhz, info.limits.mem_lock_mhz, 1_000),
            }
        })
    }

    /// Hands on the faults [`SimulatedGpu::inject_xid`] queued, waking as each comes.
    fn watch_faults(
        &self,
        tick: std::time::Duration,
        deliver: &mut dyn FnMut(Vec<GpuFault>) -> bool,
    ) -> Result<bool, GpuError> {
        loop {
            let queued = {
                let faults = self.faults.lock().expect("simulated fault queue");
                let (mut faults, _) = self
                    .fault_signal
                    .wait_timeout_while(faults, tick, |f| f.is_empty())
                    .expect("simulated fault queue");
                let mut queued = std::mem::take(&mut *faults);
                queued.extend(self.take_inbox());
                queued
            };
            if !deliver(queued) {
                return Ok(true);
            }
        }
    }

    fn processes(&self, index: u32) -> Result<Vec<ProcessUse>, GpuError> {
        self.read(index, "nvmlDeviceGetComputeRunningProcesses", |g, _| {
            g.processes
                .iter()
                .map(|p| ProcessUse {
                    pid: p.pid,
                    memory_bytes: p.memory_mib << 20,
                    sm_util_pct: Some((p.load_permille / 10) as u8),
                })
                .collect()
        })
    }
}

#[cfg(test)]
mod tests {

    use gpu_market_core::overclock::{GpuLimits, OverclockError, Range};

    use super::*;
    use crate::gpu::apply_and_verify;

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
        let time = Arc::new(ManualTime::default());
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
            &OverclockTerms {
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

    fn process(pid: u32, env: &[(String, String)], gib: u64, permille: u16) -> CudaProcess<'_> {
        CudaProcess {
            pid,
            env,
            ordinal: 0,
            memory_mib: gib * 1024,
            load_permille: permille,
        }
    }

    #[test]
    fn co_tenants_processes_drive_the_gpu_and_mps_pins_each_client_to_its_limit() {
        let (time, gpu) = two_gpus();
        let mps_40g = vec![
            (
                "CUDA_MPS_PIPE_DIRECTORY".to_string(),
                "/run/mps".to_string(),
            ),
            (
                "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".to_string(),
                "0=40G".to_string(),
            ),
        ];
        gpu.start_process(0, process(11, &mps_40g, 30, 750))
            .unwrap();
        gpu.start_process(0, process(22, &mps_40g, 40, 250))
            .unwrap();
        let err = gpu
            .start_process(0, process(33, &mps_40g, 60, 100))
            .unwrap_err();
        assert!(
            matches!(
                err,
                AllocationError::OverPinnedLimit {
                    index: 0,
                    asked_mib: 61_440,
                    limit_mib: 40_960
                }
            ),
            "{err}"
        );
        // Without MPS nothing pins a process: only the GPU's free memory (80 - 70 GiB) bounds it.
        let err = gpu.start_process(0, process(44, &[], 11, 0)).unwrap_err();
        assert!(
            matches!(
                err,
                AllocationError::OutOfMemory {
                    free_mib: 10_240,
                    ..
                }
            ),
            "{err}"
        );
        gpu.set_load(0, 0).unwrap();
        time.advance_secs(10);
        let s = gpu.sample(0).unwrap();
        assert_eq!(
            s.utilisation_pct, 100,
            "the processes' load, not the load set"
        );
        assert_eq!(s.power_mw, 300_000);
        let procs = gpu.processes(0).unwrap();
        assert_eq!(
            procs,
            vec![
                ProcessUse {
                    pid: 11,
                    memory_bytes: 30 << 30,
                    sm_util_pct: Some(75)
                },
                ProcessUse {
                    pid: 22,
                    memory_bytes: 40 << 30,
                    sm_util_pct: Some(25)
                },
            ]
        );
        gpu.end_process(11);
        assert_eq!(gpu.sample(0).unwrap().utilisation_pct, 25);
        assert!(gpu.processes(1).unwrap().is_empty());
        gpu.fail_reads(0, true).unwrap();
        assert!(gpu.processes(0).is_err());
    }

    #[test]
    fn out_of_range_settings_are_refused_and_change_nothing() {
        let (_, gpu) = two_gpus();
        let err = gpu
            .apply(
                0,
                &OverclockTerms {
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
                &OverclockTerms {
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
        let asked = OverclockTerms {
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
