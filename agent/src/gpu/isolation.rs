//! Confining a lease to its slice of a shared GPU, the way the field does it: NVIDIA MPS with a
//! pinned device memory limit per client (as NVIDIA's Kubernetes device plugin shares GPUs).
//!
//! The market sells GPUs in GiB slices: a lease whose `gib_per_gpu` is less than a GPU's memory
//! shares that GPU with other leases. Without confinement each co-tenant sees, and may fill, the
//! whole GPU. With MPS on the host (`[gpu] mps_control`), such a lease gets an MPS control daemon
//! of its own ([`super::mps::LeaseMps`], its limits set on the server side before the container
//! starts), and its container becomes that daemon's client: it gets the daemon's pipe folder (at
//! the same path) and shared memory (at `/dev/shm`) mounted, and the MPS variables set by the
//! agent after the lease's own environment (which may not set them: `crate::env` refuses
//! [`MPS_ENV_PREFIX`]):
//! - [`PINNED_DEVICE_MEM_LIMIT`]: its GiB on each of its GPUs, by device ordinal as the container
//!   sees them (the NVIDIA runtime numbers a container's GPUs from 0). The daemon's default is
//!   the same, so unsetting it gains the tenant nothing.
//! - [`ACTIVE_THREAD_PERCENTAGE`]: the share of the SMs its slice is of the GPU's memory (at
//!   least 1 %), so that one client cannot take all the compute either.
//!
//! A lease that has its GPUs whole gets none of this. A host without MPS has its GPUs go whole
//! (the agent tells the chain, `set_whole_gpus`, and the program then puts one lease on a GPU):
//! a slice alone on its GPU has it whole. One that still shares a GPU (started beside another
//! before the chain was told) is refused ([`IsolationError::NoMps`]): its slice would be
//! bookkeeping only.

use std::path::PathBuf;

use super::mps::{LeaseMps, Mps};
use super::GpuInfo;
use crate::chain::Key;
use crate::runtime::BindMount;

/// Every MPS variable starts with it; a lease's environment may set none.
pub const MPS_ENV_PREFIX: &str = "CUDA_MPS_";
/// The folder of the MPS control daemon's pipes, where a client finds its server.
pub const PIPE_DIRECTORY: &str = "CUDA_MPS_PIPE_DIRECTORY";
/// A client's device memory limit per device ordinal: `0=40G,1=40G`.
pub const PINNED_DEVICE_MEM_LIMIT: &str = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT";
/// The share of the SMs a client's contexts may use, in percent.
pub const ACTIVE_THREAD_PERCENTAGE: &str = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE";
/// Where a client container sees the MPS daemon's shared memory.
pub const CLIENT_SHM_DIR: &str = "/dev/shm";

/// What a lease's container gets to confine it to its slices; nothing for a lease that has its
/// GPUs whole.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Isolation {
    /// The machine GPUs the lease shares (its slice is less than their memory).
    pub shared: Vec<u8>,
    /// Set after the lease's own environment.
    pub env: Vec<(String, String)>,
    pub binds: Vec<BindMount>,
    /// Its own MPS daemon, started before its container is created.
    pub daemon: Option<LeaseMps>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IsolationError {
    #[error(
        "the lease takes {gib_per_gpu} GiB of GPU(s) {shared:?}, which other leases may share, and \
         this host has no NVIDIA MPS to confine it to that (gpu.mps_control is not set)"
    )]
    NoMps { gib_per_gpu: u16, shared: Vec<u8> },
    #[error("the lease names GPU {0}, which this machine does not have")]
    NoSuchGpu(u8),
}

/// What the container of `lease`, of `gib_per_gpu` GiB on the machine GPUs `gpu_indices` (in
/// the lease's order, which is the container's device order), gets on a machine of GPUs `gpus`
/// with MPS `mps`, if any. `alone`: no other lease shares those GPUs, nor will (the machine's
/// GPUs go whole, `set_whole_gpus`), so the lease has them whole whatever its slice.
pub fn isolation(
    lease: &Key,
    (gpu_indices, alone): (&[u8], bool),
    gib_per_gpu: u16,
    gpus: &[GpuInfo],
    mps: Option<&Mps>,
) -> Result<Isolation, IsolationError> {
    let memory_gib = memory_gib(gpu_indices, gpus)?;
    let shared = shared_gpus(gpu_indices, gib_per_gpu, gpus)?;
    if shared.is_empty() || alone {
        return Ok(Isolation::default());
    }
    let Some(mps) = mps else {
        return Err(IsolationError::NoMps {
            gib_per_gpu,
            shared,
        });
    };
    let limits: Vec<String> = (0..gpu_indices.len())
        .map(|ordinal| format!("{ordinal}={gib_per_gpu}G"))
        .collect();
    // One percentage for all the client's devices: the smallest of its slices'.
    let percent = memory_gib
        .iter()
        .map(|&memory| (gib_per_gpu as u32 * 100 / memory.max(1) as u32).clamp(1, 100))
        .min()
        .unwrap_or(100);
    let uuids = each(gpu_indices, gpus, GpuInfo::uuid_name)?;
    let daemon = LeaseMps {
        control: mps.control.clone(),
        dir: mps.dir(lease),
        gpus: uuids,
        gib_per_gpu,
        thread_percent: percent,
    };
    let pipe = daemon.pipe_dir();
    Ok(Isolation {
        shared,
        env: vec![
            (
                PIPE_DIRECTORY.to_string(),
                pipe.to_string_lossy().into_owned(),
            ),
            (PINNED_DEVICE_MEM_LIMIT.to_string(), limits.join(",")),
            (ACTIVE_THREAD_PERCENTAGE.to_string(), percent.to_string()),
        ],
        binds: vec![
            BindMount {
                host: pipe.clone(),
                container: pipe,
                read_only: false,
            },
            BindMount {
                host: daemon.shm_dir(),
                container: PathBuf::from(CLIENT_SHM_DIR),
                read_only: false,
            },
        ],
        daemon: Some(daemon),
    })
}

/// The GPUs among `gpu_indices` that a lease of `gib_per_gpu` GiB shares with other leases: those
/// whose memory is more than its slice.
pub fn shared_gpus(
    gpu_indices: &[u8],
    gib_per_gpu: u16,
    gpus: &[GpuInfo],
) -> Result<Vec<u8>, IsolationError> {
    Ok(gpu_indices
        .iter()
        .zip(memory_gib(gpu_indices, gpus)?)
        .filter(|&(_, memory)| gib_per_gpu < memory)
        .map(|(&i, _)| i)
        .collect())
}

/// The memory of each of `gpu_indices`, in GiB.
fn memory_gib(gpu_indices: &[u8], gpus: &[GpuInfo]) -> Result<Vec<u16>, IsolationError> {
    each(gpu_indices, gpus, GpuInfo::memory_gib)
}

/// `read` of each of the machine's GPUs `gpu_indices`, in their order.
fn each<T>(
    gpu_indices: &[u8],
    gpus: &[GpuInfo],
    read: impl Fn(&GpuInfo) -> T,
) -> Result<Vec<T>, IsolationError> {
    gpu_indices
        .iter()
        .map(|&i| {
            gpus.iter()
                .find(|g| g.index == i as u32)
                .map(&read)
                .ok_or(IsolationError::NoSuchGpu(i))
        })
        .collect()
}

/// Whether a process with environment `env` is an MPS client (its CUDA contexts go through the
/// MPS server).
pub fn mps_client(env: &[(String, String)]) -> bool {
    env.iter().any(|(k, _)| k == PIPE_DIRECTORY)
}

/// The pinned device memory limit, in MiB, that an MPS client with environment `env` has on its
/// device `ordinal`, as the MPS server reads [`PINNED_DEVICE_MEM_LIMIT`] (`G` and `M` suffixes);
/// `None` when it has none.
pub fn pinned_limit_mib(env: &[(String, String)], ordinal: usize) -> Option<u64> {
    let (_, value) = env
        .iter()
        .rev()
        .find(|(k, _)| k == PINNED_DEVICE_MEM_LIMIT)?;
    value.split(',').find_map(|entry| {
        let (device, limit) = entry.trim().split_once('=')?;
        if device.trim().parse::<usize>().ok()? != ordinal {
            return None;
        }
        super::mps::limit_mib(limit)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(index: u32, memory_gib: u64) -> GpuInfo {
        crate::gpu::test_gpu(index, memory_gib, None)
    }

    fn mps() -> Mps {
        Mps {
            control: "/usr/bin/nvidia-cuda-mps-control".into(),
            root: "/var/lib/agent/mps".into(),
        }
    }

    const LEASE: Key = Key([7; 32]);

    fn env(i: &Isolation, key: &str) -> Option<String> {
        i.env.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
    }

    #[test]
    fn a_lease_with_whole_gpus_gets_nothing_with_or_without_mps() {
        let gpus = [gpu(0, 80), gpu(1, 80)];
        for m in [None, Some(&mps())] {
            assert_eq!(
                isolation(&LEASE, (&[1, 0], false), 80, &gpus, m),
                Ok(Isolation::default())
            );
        }
    }

    #[test]
    fn a_slice_becomes_the_client_of_a_daemon_of_its_own_pinned_to_its_gib_on_every_ordinal() {
        let gpus = [gpu(0, 80), gpu(1, 80), gpu(2, 80)];
        let i = isolation(&LEASE, (&[2, 0], false), 20, &gpus, Some(&mps())).unwrap();
        assert_eq!(i.shared, vec![2, 0]);
        let dir = PathBuf::from(format!("/var/lib/agent/mps/{LEASE}"));
        assert_eq!(
            i.daemon,
            Some(LeaseMps {
                control: "/usr/bin/nvidia-cuda-mps-control".into(),
                dir: dir.clone(),
                gpus: vec![gpus[2].uuid_name(), gpus[0].uuid_name()],
                gib_per_gpu: 20,
                thread_percent: 25,
            }),
            "its GPUs in the lease's order: the container's ordinals"
        );
        let pipe = dir.join("pipe");
        assert_eq!(
            env(&i, PIPE_DIRECTORY).as_deref(),
            Some(pipe.to_str().unwrap())
        );
        assert_eq!(
            env(&i, PINNED_DEVICE_MEM_LIMIT).as_deref(),
            Some("0=20G,1=20G"),
            "container ordinals, not machine indices"
        );
        assert_eq!(env(&i, ACTIVE_THREAD_PERCENTAGE).as_deref(), Some("25"));
        assert_eq!(
            i.binds,
            vec![
                BindMount {
                    host: pipe.clone(),
                    container: pipe,
                    read_only: false,
                },
                BindMount {
                    host: dir.join("shm"),
                    container: "/dev/shm".into(),
                    read_only: false,
                },
            ],
            "the lease's own folders, no host-wide one"
        );
        let other = isolation(&Key([8; 32]), (&[2, 0], false), 20, &gpus, Some(&mps())).unwrap();
        assert!(other.binds.iter().all(|b| !i.binds.contains(b)));
        assert!(i.env.iter().all(|(k, _)| k.starts_with(MPS_ENV_PREFIX)));
        assert!(mps_client(&i.env));
        assert_eq!(pinned_limit_mib(&i.env, 1), Some(20 * 1024));
        assert_eq!(pinned_limit_mib(&i.env, 2), None, "no such ordinal");
    }

    #[test]
    fn the_thread_percentage_is_the_smallest_slice_and_at_least_one() {
        let gpus = [gpu(0, 80), gpu(1, 40)];
        let i = isolation(&LEASE, (&[0, 1], false), 40, &gpus, Some(&mps())).unwrap();
        assert_eq!(i.shared, vec![0], "GPU 1 is the lease's whole");
        assert_eq!(env(&i, ACTIVE_THREAD_PERCENTAGE).as_deref(), Some("50"));
        let i = isolation(&LEASE, (&[0], false), 0, &gpus, Some(&mps())).unwrap();
        assert_eq!(env(&i, ACTIVE_THREAD_PERCENTAGE).as_deref(), Some("1"));
        let i = isolation(&LEASE, (&[0], false), 1, &[gpu(0, 141)], Some(&mps())).unwrap();
        assert_eq!(env(&i, ACTIVE_THREAD_PERCENTAGE).as_deref(), Some("1"));
    }

    #[test]
    fn a_slice_without_mps_is_refused_and_unknown_gpus_are_named() {
        let gpus = [gpu(0, 80), gpu(1, 80)];
        // Alone on its GPU (the machine's GPUs go whole), a slice has it whole.
        assert_eq!(
            isolation(&LEASE, (&[1], true), 40, &gpus, None),
            Ok(Isolation::default())
        );
        let err = isolation(&LEASE, (&[1], false), 40, &gpus, None).unwrap_err();
        assert_eq!(
            err,
            IsolationError::NoMps {
                gib_per_gpu: 40,
                shared: vec![1]
            }
        );
        assert!(err.to_string().contains("mps_control"), "{err}");
        assert_eq!(
            isolation(&LEASE, (&[0, 7], false), 80, &gpus, None),
            Err(IsolationError::NoSuchGpu(7))
        );
    }

    #[test]
    fn pinned_limits_are_read_as_the_mps_server_reads_them() {
        let env = |v: &str| vec![(PINNED_DEVICE_MEM_LIMIT.to_string(), v.to_string())];
        assert_eq!(pinned_limit_mib(&env("0=1G, 1=512M"), 1), Some(512));
        assert_eq!(pinned_limit_mib(&env("0=2GB"), 0), Some(2048));
        assert_eq!(pinned_limit_mib(&env("0=2T"), 0), None);
        assert_eq!(pinned_limit_mib(&[], 0), None);
        assert!(!mps_client(&env("0=1G")));
    }
}
