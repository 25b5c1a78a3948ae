//! Real NVIDIA GPUs through NVML (libnvidia-ml.so, loaded at run time).
//!
//! Power limits, clock locks and clock offsets are set through NVML; the power limit and the
//! offsets are read back from the driver. NVML has no call that reads a clock lock back, so
//! [`NvmlGpu::read_back`] reports no lock: run it wrapped in
//! [`RecordedLocks`](super::locks::RecordedLocks), which records the locks it sets on disk and
//! reports them, across restarts of the agent too.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::sync::Mutex;

use gpu_market_core::overclock::{GpuLimits, OverclockTerms, Range};
use gpu_market_sdk::gpus::parse_uuid;
use nvml_wrapper::enum_wrappers::device::{Clock, PerformanceState, TopologyLevel};
use nvml_wrapper::enums::device::GpuLockedClocksSetting;
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::{ProcessInfo, ProcessUtilizationSample};
use nvml_wrapper::{Device, Nvml};

use super::faults::{Recovery, XID_FALLEN_OFF_BUS};
use super::{mw_to_w, Clocks, GpuBackend, GpuError, GpuFault, GpuInfo, ProcessUse, Sample};

/// The library NVML is loaded from unless told otherwise.
pub const NVML_LIBRARY: &str = "libnvidia-ml.so.1";

pub struct NvmlGpu {
    nvml: Nvml,
    infos: Vec<GpuInfo>,
    /// Per GPU, the timestamp (µs) of the newest per-process utilisation sample read: the next
    /// read asks for the samples since.
    utilisation_seen: Mutex<BTreeMap<u32, u64>>,
}

impl NvmlGpu {
    /// Loads NVML from the driver's usual library and enumerates the GPUs.
    pub fn new() -> Result<Self, GpuError> {
        Self::with_library(OsStr::new(NVML_LIBRARY))
    }

    /// Loads NVML from `library` and enumerates the GPUs.
    pub fn with_library(library: &OsStr) -> Result<Self, GpuError> {
        let nvml = Nvml::builder()
            .lib_path(library)
            .init()
            .map_err(|e| match e {
                NvmlError::LibloadingError(e) => {
                    GpuError::NoDriver(format!("cannot load {}: {e}", library.to_string_lossy()))
                }
                other => GpuError::NoDriver(other.to_string()),
            })?;
        let count = nvml.device_count().map_err(nvml_err(0, "device_count"))?;
        let mut infos = (0..count)
            .map(|i| describe(&nvml, i))
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(groups) = topology(&nvml, count) {
            for (info, group) in infos.iter_mut().zip(groups) {
                info.topology_group = Some(group);
            }
        }
        Ok(NvmlGpu {
            nvml,
            infos,
            utilisation_seen: Mutex::new(BTreeMap::new()),
        })
    }

    fn device(&self, index: u32) -> Result<Device<'_>, GpuError> {
        if index as usize >= self.infos.len() {
            return Err(GpuError::NoSuchGpu(index));
        }
        self.nvml
            .device_by_index(index)
            .map_err(nvml_err(index, "device_by_index"))
    }

    fn info(&self, index: u32) -> Result<&GpuInfo, GpuError> {
        self.infos
            .get(index as usize)
            .ok_or(GpuError::NoSuchGpu(index))
    }
}

/// The GPU's and its memory controller's utilisation, as a [`Sample`]'s fields.
fn utilisation(d: &Device) -> Result<Sample, NvmlError> {
    let u = d.utilization_rates()?;
    Ok(Sample {
        utilisation_pct: u.gpu.min(100) as u8,
        mem_utilisation_pct: u.memory.min(100) as u8,
        ..Sample::default()
    })
}

/// NVML's field for the recovery a GPU needs (`NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`, R550 on).
const FIELD_RECOVERY_ACTION: u32 = 230;

/// The recovery GPU `d` needs, where the driver tells.
fn recovery(d: &Device) -> Option<Recovery> {
    use nvml_wrapper::enums::device::SampleValue;
    use nvml_wrapper::structs::device::FieldId;
    let values = d.field_values_for(&[FieldId(FIELD_RECOVERY_ACTION)]).ok()?;
    match values.into_iter().next()?.ok()?.value.ok()? {
        SampleValue::U32(v) => Recovery::from_code(v as u64),
        SampleValue::U64(v) => Recovery::from_code(v),
        SampleValue::I64(v) => Recovery::from_code(v.try_into().ok()?),
        SampleValue::F64(_) => None,
    }
}

fn nvml_err(index: u32, call: &'static str) -> impl Fn(NvmlError) -> GpuError {
    move |e| match e {
        NvmlError::NotSupported => GpuError::Unsupported { index, what: call },
        other => GpuError::Nvml {
            index,
            call,
            message: other.to_string(),
        },
    }
}

/// A GPU's processes from NVML's lists (`listed`: its compute processes and its MPS clients, a
/// process possibly in both) and its per-process utilisation `samples` since the last read
/// (`None` where the GPU keeps none). NVML gives samples only for processes that were busy, so
/// a listed process without one was idle.
fn merge_processes(
    listed: &[ProcessInfo],
    samples: Option<&[ProcessUtilizationSample]>,
) -> Vec<ProcessUse> {
    let mut by_pid: BTreeMap<u32, ProcessUse> = BTreeMap::new();
    for p in listed {
        let memory_bytes = match p.used_gpu_memory {
            UsedGpuMemory::Used(bytes) => bytes,
            UsedGpuMemory::Unavailable => 0,
        };
        let entry = by_pid.entry(p.pid).or_insert(ProcessUse {
            pid: p.pid,
            memory_bytes: 0,
            sm_util_pct: None,
        });
        entry.memory_bytes = entry.memory_bytes.max(memory_bytes);
    }
    if let Some(samples) = samples {
        for p in by_pid.values_mut() {
            let latest = samples
                .iter()
                .filter(|s| s.pid == p.pid)
                .max_by_key(|s| s.timestamp);
            p.sm_util_pct = Some(latest.map_or(0, |s| s.sm_util.min(100) as u8));
        }
    }
    by_pid.into_values().collect()
}

/// NotSupported as `None`, other errors as errors.
fn optional<T>(r: Result<T, NvmlError>) -> Result<Option<T>, NvmlError> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(NvmlError::NotSupported) => Ok(None),
        Err(e) => Err(e),
    }
}

fn describe(nvml: &Nvml, index: u32) -> Result<GpuInfo, GpuError> {
    let d = nvml
        .device_by_index(index)
        .map_err(nvml_err(index, "device_by_index"))?;
    let err = |call| nvml_err(index, call);
    let uuid_text = d.uuid().map_err(err("uuid"))?;
    let uuid = parse_uuid(&uuid_text).ok_or_else(|| GpuError::Nvml {
        index,
        call: "uuid",
        message: format!("unexpected UUID {uuid_text:?}"),
    })?;
    let power = d
        .power_management_limit_constraints()
        .map_err(err("power_management_limit_constraints"))?;
    let default_mw = d
        .power_management_limit_default()
        .map_err(err("power_management_limit_default"))?;
    let mem_clocks = optional(d.supported_memory_clocks())
        .map_err(err("supported_memory_clocks"))?
        .unwrap_or_default();
    let core_clocks = match mem_clocks.iter().max() {
        Some(&max_mem) => optional(d.supported_graphics_clocks(max_mem))
            .map_err(err("supported_graphics_clocks"))?
            .unwrap_or_default(),
        None => Vec::new(),
    };
    let offsets = |clock| -> Result<Range<i16>, GpuError> {
        Ok(optional(d.clock_offset(clock, PerformanceState::Zero))
            .map_err(err("clock_offset"))?
            .map_or(Range { min: 0, max: 0 }, |o| Range {
                min: clamp_i16(o.min_clock_offset_mhz),
                max: clamp_i16(o.max_clock_offset_mhz),
            }))
    };
    Ok(GpuInfo {
        index,
        uuid,
        name: d.name().map_err(err("name"))?,
        memory_mib: d.memory_info().map_err(err("memory_info"))?.total >> 20,
        limits: GpuLimits {
            power_w: Range {
                min: mw_to_w(power.min_limit),
                max: mw_to_w(power.max_limit),
            },
            core_lock_mhz: clock_range(&core_clocks),
            mem_lock_mhz: clock_range(&mem_clocks),
            core_offset_mhz: offsets(Clock::Graphics)?,
            mem_offset_mhz: offsets(Clock::Memory)?,
        },
        default_power_w: mw_to_w(default_mw),
        class: None,
        topology_group: None,
    })
}

/// Links at most a GPU has (`NVML_NVLINK_MAX_LINKS`).
const MAX_NVLINKS: u32 = 18;

/// The machine's topology groups as NVML reports them, by GPU index; `None` where the driver
/// cannot tell (the operator then sets them from `nvidia-smi topo -m`).
fn topology(nvml: &Nvml, count: u32) -> Option<Vec<u8>> {
    let devices: Vec<Device<'_>> = (0..count)
        .map(|i| nvml.device_by_index(i).ok())
        .collect::<Option<_>>()?;
    let bus_ids: Vec<String> = devices
        .iter()
        .map(|d| d.pci_info().ok().map(|p| p.bus_id))
        .collect::<Option<_>>()?;
    let mut links = Vec::new();
    for (i, d) in devices.iter().enumerate() {
        for link in 0..MAX_NVLINKS {
            let wrapper = d.link_wrapper_for(link);
            match wrapper.is_active() {
                Ok(true) => links.push((i, wrapper.remote_pci_info().ok()?.bus_id)),
                Ok(false) => {}
                // No NVLink on this GPU, or no link of this number.
                Err(NvmlError::NotSupported | NvmlError::InvalidArg) => break,
                Err(_) => return None,
            }
        }
    }
    let mut switched = Vec::new();
    for i in 0..devices.len() {
        for j in i + 1..devices.len() {
            // Takes the other device by value: a fresh handle to it.
            let other = nvml.device_by_index(j as u32).ok()?;
            match devices[i].topology_common_ancestor(other) {
                Ok(TopologyLevel::Internal | TopologyLevel::Single | TopologyLevel::Multiple) => {
                    switched.push((i, j))
                }
                Ok(_) | Err(NvmlError::NotSupported) => {}
                Err(_) => return None,
            }
        }
    }
    Some(topology_groups(&bus_ids, &links, &switched))
}

/// Topology groups from what NVML reports: GPUs (by their PCI bus ids) joined by an active NVLink
/// (`links`: a GPU and the bus id at the link's other end, another GPU's or an NVSwitch's, which
/// joins every GPU linked to it) or under one PCIe switch (`switched`) are one group. Groups are
/// numbered from 0 in the order of their first GPU.
fn topology_groups(
    bus_ids: &[String],
    links: &[(usize, String)],
    switched: &[(usize, usize)],
) -> Vec<u8> {
    // Union-find over the GPUs and the far ends of their links.
    let mut nodes: Vec<String> = bus_ids.iter().map(|b| b.to_ascii_lowercase()).collect();
    let mut parent: Vec<usize> = (0..nodes.len()).collect();
    fn root(parent: &mut [usize], mut x: usize) -> usize {
        while parent[x] != x {
            parent[x] = parent[parent[x]];
            x = parent[x];
        }
        x
    }
    let join = |parent: &mut Vec<usize>, a: usize, b: usize| {
        let (ra, rb) = (root(parent, a), root(parent, b));
        parent[ra.max(rb)] = ra.min(rb);
    };
    for (gpu, remote) in links {
        let remote = remote.to_ascii_lowercase();
        let node = match nodes.iter().position(|n| *n == remote) {
            Some(node) => node,
            None => {
                nodes.push(remote);
                parent.push(parent.len());
                parent.len() - 1
            }
        };
        join(&mut parent, *gpu, node);
    }
    for &(a, b) in switched {
        join(&mut parent, a, b);
    }
    let mut numbers: Vec<usize> = Vec::new();
    (0..bus_ids.len())
        .map(|gpu| {
            let r = root(&mut parent, gpu);
            let group = numbers.iter().position(|&n| n == r).unwrap_or_else(|| {
                numbers.push(r);
                numbers.len() - 1
            });
            group.min(u8::MAX as usize) as u8
        })
        .collect()
}

fn clamp_i16(v: i32) -> i16 {
    v.clamp(i16::MIN as i32, i16::MAX as i32) as i16
}

/// The range spanned by supported clocks; `0..=0` (locks not allowed) when none are listed.
fn clock_range(clocks: &[u32]) -> Range<u16> {
    match (clocks.iter().min(), clocks.iter().max()) {
        (Some(&min), Some(&max)) => Range {
            min: min.min(u16::MAX as u32) as u16,
            max: max.min(u16::MAX as u32) as u16,
        },
        _ => Range { min: 0, max: 0 },
    }
}

/// The offset to write for a term of `asked` on a GPU that offers `offered`: the asked one, zero
/// to undo one where the GPU has offsets, and nothing at all where it has none. A GPU without
/// offsets may answer any write with an error (an H100 on driver 580 answers a zero GPC offset
/// with "an internal driver error occurred"), which would fail every lease's terms and every
/// reset.
fn offset_to_write(asked: Option<i16>, offered: Range<i16>) -> Option<i32> {
    match asked {
        Some(mhz) => Some(mhz as i32),
        None if offered.min == 0 && offered.max == 0 => None,
        None => Some(0),
    }
}

impl GpuBackend for NvmlGpu {
    fn gpus(&self) -> Vec<GpuInfo> {
        self.infos.clone()
    }

    fn apply(&self, index: u32, settings: &OverclockTerms) -> Result<(), GpuError> {
        let info = self.info(index)?;
        info.limits
            .check(settings)
            .map_err(|source| GpuError::OutOfRange { index, source })?;
        let mut d = self.device(index)?;
        let err = |call| nvml_err(index, call);
        d.set_power_management_limit(settings.power_limit_w as u32 * 1_000)
            .map_err(err("set_power_management_limit"))?;
        match settings.core_lock_mhz {
            Some(mhz) => d
                .set_gpu_locked_clocks(GpuLockedClocksSetting::Numeric {
                    min_clock_mhz: mhz as u32,
                    max_clock_mhz: mhz as u32,
                })
                .map_err(err("set_gpu_locked_clocks"))?,
            // Nothing to undo where the GPU cannot lock clocks at all.
            None => optional(d.reset_gpu_locked_clocks())
                .map(drop)
                .map_err(err("reset_gpu_locked_clocks"))?,
        }
        match settings.mem_lock_mhz {
            Some(mhz) => d
                .set_mem_locked_clocks(mhz as u32, mhz as u32)
                .map_err(err("set_mem_locked_clocks"))?,
            None => optional(d.reset_mem_locked_clocks())
                .map(drop)
                .map_err(err("reset_mem_locked_clocks"))?,
        }
        let offsets = [
            (
                Clock::Graphics,
                settings.core_offset_mhz,
                info.limits.core_offset_mhz,
            ),
            (
                Clock::Memory,
                settings.mem_offset_mhz,
                info.limits.mem_offset_mhz,
            ),
        ];
        for (clock, asked, offered) in offsets {
            if let Some(mhz) = offset_to_write(asked, offered) {
                d.set_clock_offset(clock, PerformanceState::Zero, mhz)
                    .map_err(err("set_clock_offset"))?;
            }
        }
        Ok(())
    }

    fn read_back(&self, index: u32) -> Result<OverclockTerms, GpuError> {
        let d = self.device(index)?;
        let err = |call| nvml_err(index, call);
        let power_mw = d
            .power_management_limit()
            .map_err(err("power_management_limit"))?;
        let limits = self.info(index)?.limits;
        // Read only where the GPU offers offsets: the same API `describe` found them with.
        let offset = |clock, offered: Range<i16>| -> Result<Option<i16>, GpuError> {
            if offered.min == 0 && offered.max == 0 {
                return Ok(None);
            }
            Ok(optional(d.clock_offset(clock, PerformanceState::Zero))
                .map_err(err("clock_offset"))?
                .map(|o| clamp_i16(o.clock_offset_mhz))
                .filter(|&v| v != 0))
        };
        Ok(OverclockTerms {
            power_limit_w: mw_to_w(power_mw),
            // Unknowable through NVML; see the module.
            core_lock_mhz: None,
            mem_lock_mhz: None,
            core_offset_mhz: offset(Clock::Graphics, limits.core_offset_mhz)?,
            mem_offset_mhz: offset(Clock::Memory, limits.mem_offset_mhz)?,
        })
    }

    fn reset(&self, index: u32) -> Result<(), GpuError> {
        let defaults = self.info(index)?.defaults();
        self.apply(index, &defaults)
    }

    fn sample(&self, index: u32) -> Result<Sample, GpuError> {
        let d = self.device(index)?;
        let err = |call| nvml_err(index, call);
        Ok(Sample {
            power_mw: d.power_usage().map_err(err("power_usage"))?,
            energy_mj: d
                .total_energy_consumption()
                .map_err(err("total_energy_consumption"))?,
            ..utilisation(&d).map_err(err("utilization_rates"))?
        })
    }

    /// One event set over every GPU that reports critical Xid errors, waited on a second at a
    /// time. `GpuLost` (a GPU fell off the bus: no event names it) is matched to the GPUs that
    /// no longer answer.
    fn watch_faults(
        &self,
        tick: std::time::Duration,
        deliver: &mut dyn FnMut(Vec<GpuFault>) -> bool,
    ) -> Result<bool, GpuError> {
        use nvml_wrapper::bitmasks::event::EventTypes;
        use nvml_wrapper::enums::event::XidError;
        let mut set = self
            .nvml
            .create_event_set()
            .map_err(nvml_err(0, "create_event_set"))?;
        let mut watched = 0;
        for info in &self.infos {
            let d = self.device(info.index)?;
            let supported = d.supported_event_types().unwrap_or(EventTypes::empty());
            if !supported.contains(EventTypes::CRITICAL_XID_ERROR) {
                continue;
            }
            set = d
                .register_events(EventTypes::CRITICAL_XID_ERROR, set)
                .map_err(|e| nvml_err(info.index, "register_events")(e.error))?;
            watched += 1;
        }
        if watched == 0 {
            return Ok(false);
        }
        let by_uuid: BTreeMap<String, u32> = self
            .infos
            .iter()
            .filter_map(|i| Some((self.device(i.index).ok()?.uuid().ok()?, i.index)))
            .collect();
        loop {
            let faults = match set.wait(tick.as_millis().min(u32::MAX as u128) as u32) {
                Ok(event) => {
                    let index = event
                        .device
                        .uuid()
                        .ok()
                        .and_then(|u| by_uuid.get(&u).copied());
                    let xid = match event.event_data {
                        Some(XidError::Value(xid)) => xid,
                        _ => 0,
                    };
                    index
                        .map(|index| GpuFault {
                            index,
                            xid,
                            recovery: recovery(&event.device),
                        })
                        .into_iter()
                        .collect()
                }
                Err(NvmlError::Timeout) => Vec::new(),
                Err(NvmlError::GpuLost) => self
                    .infos
                    .iter()
                    .filter(|i| {
                        matches!(
                            self.device(i.index).map(|d| d.uuid()),
                            Err(_) | Ok(Err(NvmlError::GpuLost))
                        )
                    })
                    .map(|i| GpuFault {
                        index: i.index,
                        xid: XID_FALLEN_OFF_BUS,
                        recovery: None,
                    })
                    .collect(),
                Err(e) => return Err(nvml_err(0, "event_set_wait")(e)),
            };
            if !deliver(faults) {
                return Ok(true);
            }
        }
    }

    fn clocks(&self, index: u32) -> Result<Clocks, GpuError> {
        let d = self.device(index)?;
        let err = |call| nvml_err(index, call);
        Ok(Clocks {
            core_mhz: d.clock_info(Clock::Graphics).map_err(err("clock_info"))?,
            mem_mhz: d.clock_info(Clock::Memory).map_err(err("clock_info"))?,
        })
    }

    fn processes(&self, index: u32) -> Result<Vec<ProcessUse>, GpuError> {
        let d = self.device(index)?;
        let err = |call| nvml_err(index, call);
        let mut listed = d
            .running_compute_processes()
            .map_err(err("running_compute_processes"))?;
        // MPS clients (Volta and later) are listed apart from the MPS server; older drivers have
        // no such call.
        match d.mps_running_compute_processes() {
            Ok(clients) => listed.extend(clients),
            Err(NvmlError::NotSupported | NvmlError::FailedToLoadSymbol(_)) => {}
            Err(e) => return Err(err("mps_running_compute_processes")(e)),
        }
        let since = self
            .utilisation_seen
            .lock()
            .expect("utilisation timestamps")
            .get(&index)
            .copied();
        let samples = match d.process_utilization_stats(since) {
            Ok(samples) => Some(samples),
            // No process was busy since the last read.
            Err(NvmlError::NotFound) => Some(Vec::new()),
            Err(NvmlError::NotSupported | NvmlError::FailedToLoadSymbol(_)) => None,
            Err(e) => return Err(err("process_utilization_stats")(e)),
        };
        if let Some(newest) = samples.iter().flatten().map(|s| s.timestamp).max() {
            self.utilisation_seen
                .lock()
                .expect("utilisation timestamps")
                .insert(index, newest);
        }
        Ok(merge_processes(&listed, samples.as_deref()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_a_clear_error() {
        let err = NvmlGpu::with_library(OsStr::new("/nonexistent/libnvidia-ml.so.1"))
            .err()
            .expect("no such library");
        assert!(matches!(err, GpuError::NoDriver(_)), "{err}");
        let message = err.to_string();
        assert!(
            message.contains("/nonexistent/libnvidia-ml.so.1"),
            "{message}"
        );
        assert!(message.contains("NVIDIA driver"), "{message}");
    }

    #[test]
    fn new_fails_clearly_without_a_driver_and_lists_gpus_with_one() {
        match NvmlGpu::new() {
            Err(err) => {
                assert!(matches!(err, GpuError::NoDriver(_)), "{err}");
                assert!(err.to_string().contains(NVML_LIBRARY), "{err}");
            }
            Ok(gpu) => assert!(!gpu.gpus().is_empty(), "a driver with no GPUs"),
        }
    }

    fn listed(pid: u32, bytes: Option<u64>) -> ProcessInfo {
        ProcessInfo {
            pid,
            used_gpu_memory: bytes.map_or(UsedGpuMemory::Unavailable, UsedGpuMemory::Used),
            gpu_instance_id: None,
            compute_instance_id: None,
        }
    }

    fn utilisation(pid: u32, timestamp: u64, sm_util: u32) -> ProcessUtilizationSample {
        ProcessUtilizationSample {
            pid,
            timestamp,
            sm_util,
            mem_util: 0,
            enc_util: 0,
            dec_util: 0,
        }
    }

    #[test]
    fn processes_merge_the_compute_and_mps_lists_with_the_latest_utilisation() {
        // 7 is the MPS server (compute list), 8 and 9 its clients (MPS list); 9 also appears in
        // the compute list, as on some drivers.
        let procs = [
            listed(7, Some(300 << 20)),
            listed(9, None),
            listed(8, Some(40 << 30)),
            listed(9, Some(20 << 30)),
        ];
        let samples = [
            utilisation(8, 10, 30),
            utilisation(8, 20, 60),
            utilisation(9, 15, 250),
        ];
        assert_eq!(
            merge_processes(&procs, Some(&samples)),
            vec![
                ProcessUse {
                    pid: 7,
                    memory_bytes: 300 << 20,
                    sm_util_pct: Some(0)
                },
                ProcessUse {
                    pid: 8,
                    memory_bytes: 40 << 30,
                    sm_util_pct: Some(60)
                },
                ProcessUse {
                    pid: 9,
                    memory_bytes: 20 << 30,
                    sm_util_pct: Some(100)
                },
            ]
        );
        let unknown = merge_processes(&procs, None);
        assert!(unknown.iter().all(|p| p.sm_util_pct.is_none()));
    }

    #[test]
    fn nvlinks_nvswitches_and_pcie_switches_make_the_topology_groups() {
        let bus = |n: u32| format!("00000000:{n:02X}:00.0");
        let gpus: Vec<String> = (0..6).map(bus).collect();
        // GPUs 0 and 1 joined by NVLink (either end's report), 2 and 3 through an NVSwitch
        // (bus 0xA0, not a GPU), 4 under one PCIe switch with 5.
        let links = vec![
            (0, bus(1).to_lowercase()),
            (1, bus(0)),
            (2, bus(0xA0)),
            (3, bus(0xA0)),
        ];
        assert_eq!(
            topology_groups(&gpus, &links, &[(4, 5)]),
            vec![0, 0, 1, 1, 2, 2]
        );
        // An HGX board: every GPU linked to each of four NVSwitches is one group.
        let hgx: Vec<(usize, String)> = (0..8)
            .flat_map(|g| (0..4).map(move |s| (g, bus(0xB0 + s))))
            .collect();
        let eight: Vec<String> = (0..8).map(bus).collect();
        assert_eq!(topology_groups(&eight, &hgx, &[]), vec![0; 8]);
        // Nothing joins them: one group each, numbered in GPU order.
        assert_eq!(topology_groups(&gpus[..3], &[], &[]), vec![0, 1, 2]);
    }

    #[test]
    fn a_gpu_without_offsets_is_never_written_one() {
        let none = Range { min: 0, max: 0 };
        let some = Range {
            min: -200,
            max: 200,
        };
        // What an H100 answered with "an internal driver error occurred" on every apply.
        assert_eq!(offset_to_write(None, none), None);
        assert_eq!(
            offset_to_write(None, some),
            Some(0),
            "undoes an earlier one"
        );
        assert_eq!(offset_to_write(Some(-50), some), Some(-50));
    }

    #[test]
    fn clock_ranges_span_the_supported_clocks() {
        assert_eq!(
            clock_range(&[1_410, 210, 1_980]),
            Range {
                min: 210,
                max: 1_980
            }
        );
        assert_eq!(clock_range(&[]), Range { min: 0, max: 0 });
        assert_eq!(mw_to_w(299_600), 300);
    }
}
