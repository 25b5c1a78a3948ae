//! The GPUs of the machine: enumerate them, apply a lease's settings, read back what took,
//! restore the host defaults and sample power, energy and utilisation.
//!
//! [`nvml::NvmlGpu`] drives real NVIDIA GPUs; [`simulated::SimulatedGpu`] models them for tests
//! and for machines without NVIDIA GPUs. [`locks::RecordedLocks`] wraps either and keeps the
//! clock locks it set in a file, since the driver cannot tell them afterwards.
//!
//! Leases may share a GPU in GiB slices: [`isolation`] confines each to its slice (NVIDIA MPS),
//! and [`attribution`] splits a shared GPU's readings among its leases by their processes' use.

pub mod attribution;
pub mod dvfs;
pub mod faults;
pub mod isolation;
pub mod launch;
pub mod locks;
pub mod mps;
pub mod nvml;
pub mod simulated;
pub mod toolkit;
pub mod watchdog;

use gpu_market_core::overclock::{GpuLimits, OverclockError, OverclockTerms};

/// One GPU as the backend sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuInfo {
    pub index: u32,
    pub uuid: [u8; 16],
    pub name: String,
    pub memory_mib: u64,
    /// The power range and the clock ranges the GPU supports.
    pub limits: GpuLimits,
    pub default_power_w: u16,
    /// The market's class and the topology group, when the backend knows them: the simulated
    /// backend from its configuration; NVML knows the group (NVLink and PCIe switches) but not
    /// the market's class table, which is the operator's to state.
    pub class: Option<u8>,
    pub topology_group: Option<u8>,
}

impl GpuInfo {
    /// The GPU's UUID as the driver prints it and `CUDA_VISIBLE_DEVICES` takes it (`GPU-…`).
    pub fn uuid_name(&self) -> String {
        gpu_market_sdk::gpus::format_uuid(&self.uuid)
    }

    /// The GPU's memory in whole GiB, as the machine declares it on chain (`detect`): the unit
    /// leases take slices of.
    pub fn memory_gib(&self) -> u16 {
        (self.memory_mib / 1024).min(u16::MAX as u64) as u16
    }

    /// The host defaults [`GpuBackend::reset`] restores.
    pub fn defaults(&self) -> OverclockTerms {
        OverclockTerms {
            power_limit_w: self.default_power_w,
            ..OverclockTerms::default()
        }
    }
}

/// One reading of a GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sample {
    pub power_mw: u32,
    /// Energy since the driver loaded, in mJ; never goes down.
    pub energy_mj: u64,
    pub utilisation_pct: u8,
    /// The share of time the memory controller was busy, in percent (NVML's memory
    /// utilisation): with the clocks, what tells a memory-bound load from a compute-bound one
    /// ([`dvfs`]).
    pub mem_utilisation_pct: u8,
}

/// The clocks a GPU runs at now, in MHz: what shows whether a clock lock holds (NVML can set a
/// lock but not read it back; the clock a loaded GPU runs at is the lock's only evidence).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct Clocks {
    pub core_mhz: u32,
    pub mem_mhz: u32,
}

/// One kind of term a bid may ask of a GPU (`OverclockTerms`' fields), by the name reports and
/// errors give it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Setting {
    PowerLimit,
    CoreLock,
    MemLock,
    CoreOffset,
    MemOffset,
}

impl Setting {
    pub const ALL: [Setting; 5] = [
        Setting::PowerLimit,
        Setting::CoreLock,
        Setting::MemLock,
        Setting::CoreOffset,
        Setting::MemOffset,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Setting::PowerLimit => "power_limit",
            Setting::CoreLock => "core_lock",
            Setting::MemLock => "mem_lock",
            Setting::CoreOffset => "core_offset",
            Setting::MemOffset => "mem_offset",
        }
    }

    /// Whether `terms` asks this setting away from the host default `defaults`.
    pub fn asked_in(self, terms: &OverclockTerms, defaults: &OverclockTerms) -> bool {
        match self {
            Setting::PowerLimit => terms.power_limit_w != defaults.power_limit_w,
            Setting::CoreLock => terms.core_lock_mhz.is_some(),
            Setting::MemLock => terms.mem_lock_mhz.is_some(),
            Setting::CoreOffset => terms.core_offset_mhz.is_some(),
            Setting::MemOffset => terms.mem_offset_mhz.is_some(),
        }
    }

    /// This setting's value in `terms`, as text (`-` for none).
    pub fn value_in(self, terms: &OverclockTerms) -> String {
        fn opt<T: std::fmt::Display>(v: Option<T>, unit: &str) -> String {
            v.map_or_else(|| "-".to_string(), |v| format!("{v} {unit}"))
        }
        match self {
            Setting::PowerLimit => format!("{} W", terms.power_limit_w),
            Setting::CoreLock => opt(terms.core_lock_mhz, "MHz"),
            Setting::MemLock => opt(terms.mem_lock_mhz, "MHz"),
            Setting::CoreOffset => opt(terms.core_offset_mhz, "MHz"),
            Setting::MemOffset => opt(terms.mem_offset_mhz, "MHz"),
        }
    }

    /// Whether `a` and `b` agree on this setting.
    pub fn same_in(self, a: &OverclockTerms, b: &OverclockTerms) -> bool {
        self.value_in(a) == self.value_in(b)
    }
}

impl std::fmt::Display for Setting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One compute process on a GPU, as the driver lists it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessUse {
    /// In the host's PID namespace (the container engine lists a container's processes so).
    pub pid: u32,
    /// GPU memory the process holds, in bytes (0 where the driver does not tell).
    pub memory_bytes: u64,
    /// The share of the GPU's SMs the process kept busy lately, in percent; `None` where the
    /// driver keeps no per-process utilisation.
    pub sm_util_pct: Option<u8>,
}

#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error("no GPU with index {0}")]
    NoSuchGpu(u32),
    #[error("GPU {index}: {source}")]
    OutOfRange { index: u32, source: OverclockError },
    #[error("GPU {index}: {what} is not supported by this GPU or driver")]
    Unsupported { index: u32, what: &'static str },
    #[error("GPU {index}: settings did not take: asked {asked:?}, applied {applied:?}")]
    DidNotTake {
        index: u32,
        asked: OverclockTerms,
        applied: OverclockTerms,
    },
    #[error("the NVIDIA management library is not available ({0}); is the NVIDIA driver installed? Use gpu.backend = \"simulated\" on machines without NVIDIA GPUs")]
    NoDriver(String),
    #[error("NVML call {call} failed on GPU {index}: {message}")]
    Nvml {
        index: u32,
        call: &'static str,
        message: String,
    },
    #[error("GPU {index}: the driver call {call} has not returned for {secs} s; the GPU is left alone until it does")]
    Hung {
        index: u32,
        call: &'static str,
        secs: u64,
    },
    #[error("the clock lock record {path}: {reason}")]
    LockRecord {
        path: std::path::PathBuf,
        reason: String,
    },
}

/// The machine's GPUs. Calls are synchronous: each is one driver call or a few.
pub trait GpuBackend: Send + Sync {
    fn gpus(&self) -> Vec<GpuInfo>;
    /// Applies every term of `settings`; terms left `None` are restored to the default.
    fn apply(&self, index: u32, settings: &OverclockTerms) -> Result<(), GpuError>;
    /// What is actually applied now.
    fn read_back(&self, index: u32) -> Result<OverclockTerms, GpuError>;
    /// Restores the host defaults: the default power limit, no locks, no offsets.
    fn reset(&self, index: u32) -> Result<(), GpuError>;
    fn sample(&self, index: u32) -> Result<Sample, GpuError>;
    /// The clocks GPU `index` runs at now.
    fn clocks(&self, index: u32) -> Result<Clocks, GpuError>;
    /// The compute processes on GPU `index` (the NVML per-process view): what splits a shared
    /// GPU's readings among its leases ([`attribution`]).
    fn processes(&self, index: u32) -> Result<Vec<ProcessUse>, GpuError>;
    /// Tells the backend how busy the lease on GPU `index` keeps its container, in thousandths
    /// of the container's CPU limit. Real GPUs measure their own utilisation and ignore it; the
    /// SIMULATED backend takes it as the GPU's load, so that a busy workload draws power and an
    /// idle one looks idle.
    fn observe_workload(&self, _index: u32, _load_permille: u16) {}
    /// Whether [`observe_workload`](Self::observe_workload) is heeded: only then are the
    /// containers' CPU readings taken.
    fn follows_workload(&self) -> bool {
        false
    }
    /// Watches the GPUs for fault events (Xid errors; a GPU fallen off the bus), handing each
    /// batch to `deliver` (an empty one at least every `tick`, so the caller may stop), until
    /// `deliver` returns `false`. Blocking: the agent runs it on a thread of its own
    /// ([`faults::watch`]). `Ok(false)` at once: this backend cannot watch.
    fn watch_faults(
        &self,
        _tick: std::time::Duration,
        _deliver: &mut dyn FnMut(Vec<GpuFault>) -> bool,
    ) -> Result<bool, GpuError> {
        Ok(false)
    }
}

/// One fault event of a GPU, as the driver reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuFault {
    pub index: u32,
    /// The Xid error code (NVIDIA's catalogue); 79 for a GPU that fell off the bus.
    pub xid: u64,
    /// What the driver says must be done to recover, where it says (drivers from R550 on).
    pub recovery: Option<faults::Recovery>,
}

/// Why the machine's GPUs on chain are not the GPUs this host has.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    #[error("the machine declares {declared} GPUs on chain, but this host has {here}: re-run `gpu-market-agent detect` and `gpu-market host update --gpus`")]
    Count { declared: usize, here: usize },
    #[error("the machine's GPU {index} on chain is {declared}, but this host's GPU {index} is {here}: a lease would run on a GPU its client did not rent; re-run `gpu-market-agent detect` and `gpu-market host update --gpus` (or restore the GPU order)")]
    Uuid {
        index: usize,
        declared: String,
        here: String,
    },
}

/// Checks that this host's GPUs (`here`, in the backend's index order) are the ones the
/// machine declares on chain (`declared` UUIDs, in the machine's order): leases name GPUs by
/// index, so a GPU swapped, added or reordered since registration would run leases on GPUs
/// nobody rented.
pub fn check_identity(declared: &[[u8; 16]], here: &[GpuInfo]) -> Result<(), IdentityError> {
    if declared.len() != here.len() {
        return Err(IdentityError::Count {
            declared: declared.len(),
            here: here.len(),
        });
    }
    match declared.iter().zip(here).position(|(d, h)| *d != h.uuid) {
        None => Ok(()),
        Some(index) => Err(IdentityError::Uuid {
            index,
            declared: gpu_market_sdk::gpus::format_uuid(&declared[index]),
            here: gpu_market_sdk::gpus::format_uuid(&here[index].uuid),
        }),
    }
}

/// Milliwatts (NVML's unit) to whole watts (the chain's), rounded.
pub fn mw_to_w(mw: u32) -> u16 {
    ((mw + 500) / 1_000).min(u16::MAX as u32) as u16
}

/// Applies `settings`, reads them back, and fails unless every term took.
pub fn apply_and_verify(
    backend: &dyn GpuBackend,
    index: u32,
    settings: &OverclockTerms,
) -> Result<(), GpuError> {
    backend.apply(index, settings)?;
    let applied = backend.read_back(index)?;
    if applied != *settings {
        return Err(GpuError::DidNotTake {
            index,
            asked: *settings,
            applied,
        });
    }
    Ok(())
}

/// A GPU of `memory_gib` (as NVML reports an 80 GB part: a little over), 100–400 W, in
/// `topology_group`: for unit tests.
#[cfg(test)]
pub(crate) fn test_gpu(index: u32, memory_gib: u64, topology_group: Option<u8>) -> GpuInfo {
    GpuInfo {
        index,
        uuid: [index as u8; 16],
        name: "test".into(),
        memory_mib: memory_gib * 1024 + 100,
        limits: GpuLimits::power_only(gpu_market_core::overclock::Range { min: 100, max: 400 }),
        default_power_w: 300,
        class: None,
        topology_group,
    }
}

#[cfg(test)]
mod tests {
    use super::simulated::{uuid, SimulatedGpu, TokioTime};
    use super::*;

    #[test]
    fn a_gpu_swapped_added_or_reordered_since_registration_is_refused_by_index() {
        let configs = vec![
            crate::config::SimulatedGpuConfig {
                class: 0,
                memory_gib: 24,
                topology_group: 0,
                limits: GpuLimits::power_only(gpu_market_core::overclock::Range {
                    min: 100,
                    max: 400
                }),
                default_power_w: 300,
            };
            2
        ];
        let here = SimulatedGpu::new(&configs, std::sync::Arc::new(TokioTime::new())).gpus();
        assert_eq!(check_identity(&[uuid(0), uuid(1)], &here), Ok(()));
        let e = check_identity(&[uuid(1), uuid(0)], &here).unwrap_err();
        assert!(matches!(e, IdentityError::Uuid { index: 0, .. }), "{e}");
        assert!(
            e.to_string()
                .contains("GPU 0 on chain is GPU-53494d55-4c41-5445-442d-4750552d0001"),
            "{e}"
        );
        assert_eq!(
            check_identity(&[uuid(0)], &here),
            Err(IdentityError::Count {
                declared: 1,
                here: 2
            })
        );
    }
}
