//! The CUDA work `check` puts on a GPU: a load that keeps it busy, and client processes that
//! allocate its memory. On real GPUs these are processes of a workload program the host names
//! (`scripts/gpu-workload.py`: PyTorch or CuPy); on SIMULATED GPUs they are the simulated
//! backend's own processes.

use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use gpu_market_sdk::gpus::format_uuid;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::gpu::simulated::{AllocationError, CudaProcess, SimulatedGpu};
use crate::gpu::GpuInfo;

/// How long a workload process may take to start its first kernel or allocation (a Python CUDA
/// stack imports and creates its context in seconds; the first run on a machine compiles more).
pub const WORKLOAD_START: Duration = Duration::from_secs(60);

/// The exit status a workload's `hold` ends with when its allocation is refused.
pub const REFUSED_EXIT: i32 = 3;

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("the workload {program}: {reason}")]
    Workload { program: String, reason: String },
    #[error(transparent)]
    Simulated(#[from] AllocationError),
}

/// A CUDA process `check` started; it runs until [`Running::stop`].
pub enum Running {
    Process { pid: u32, child: Child },
    Simulated { gpus: Arc<SimulatedGpu>, pid: u32 },
}

impl Running {
    /// In the host's PID namespace: what NVML lists.
    pub fn pid(&self) -> u32 {
        match self {
            Running::Process { pid, .. } | Running::Simulated { pid, .. } => *pid,
        }
    }

    pub async fn stop(self) {
        match self {
            Running::Process { mut child, .. } => {
                let _ = child.kill().await;
            }
            Running::Simulated { gpus, pid } => gpus.end_process(pid),
        }
    }
}

/// What an allocation came to.
pub enum Held {
    /// The memory is held until the process is stopped.
    Holding(Running),
    /// The allocation was refused, with the CUDA error's words.
    Refused(String),
}

/// Where `check`'s CUDA work comes from.
#[derive(Clone)]
pub enum Load {
    /// A workload program (and its leading arguments): `PROGRAM... burn` keeps the GPU in
    /// `CUDA_VISIBLE_DEVICES` busy until killed, printing `busy` once its first kernel ran;
    /// `PROGRAM... hold MIB` allocates MIB MiB and holds them until killed, printing
    /// `allocated`, or exits with [`REFUSED_EXIT`] when the allocation is refused.
    Workload(Vec<String>),
    /// The SIMULATED backend's processes: a load of the whole GPU, allocations checked as the
    /// simulated MPS server checks them.
    Simulated(Arc<SimulatedGpu>),
    /// No way to load the GPU: the steps that need a load are reported as not run.
    None,
}

/// Simulated processes take PIDs from here: far above any real one.
static SIMULATED_PID: AtomicU32 = AtomicU32::new(4_000_000);

impl Load {
    /// A workload from its command line, split at white space (no quoting).
    pub fn workload(command: &str) -> Option<Load> {
        let words: Vec<String> = command.split_whitespace().map(str::to_string).collect();
        (!words.is_empty()).then_some(Load::Workload(words))
    }

    pub fn describe(&self) -> String {
        match self {
            Load::Workload(words) => words.join(" "),
            Load::Simulated(_) => "SIMULATED processes".into(),
            Load::None => "none".into(),
        }
    }

    /// This load with its processes in a mount namespace of their own whose `/dev/shm` is
    /// `daemon`'s, as a lease's container has it: an MPS client and its server share memory
    /// there.
    pub fn sharing_shm_of(&self, daemon: &crate::gpu::mps::LeaseMps) -> Load {
        match self {
            Load::Workload(words) => {
                let mut wrapped: Vec<String> = [
                    "unshare",
                    "--mount",
                    "--propagation",
                    "private",
                    "--",
                    "sh",
                    "-c",
                    r#"mount --bind "$1" /dev/shm && shift && exec "$@""#,
                    "sh",
                ]
                .map(String::from)
                .to_vec();
                wrapped.push(daemon.shm_dir().to_string_lossy().into_owned());
                wrapped.extend(words.iter().cloned());
                Load::Workload(wrapped)
            }
            other => other.clone(),
        }
    }

    /// Keeps `gpu` busy: the whole of it, with the device's own work (no MPS).
    pub async fn burn(&self, gpu: &GpuInfo) -> Result<Option<Running>, LoadError> {
        match self {
            Load::None => Ok(None),
            Load::Simulated(gpus) => {
                let pid = SIMULATED_PID.fetch_add(1, Ordering::Relaxed);
                gpus.start_process(
                    gpu.index,
                    CudaProcess {
                        pid,
                        env: &[],
                        ordinal: 0,
                        memory_mib: 1_024,
                        load_permille: 1_000,
                    },
                )?;
                Ok(Some(Running::Simulated {
                    gpus: gpus.clone(),
                    pid,
                }))
            }
            Load::Workload(words) => {
                match spawn_until(words, gpu, &[], &["burn".to_string()], "busy").await? {
                    Held::Holding(running) => Ok(Some(running)),
                    Held::Refused(reason) => Err(LoadError::Workload {
                        program: words.join(" "),
                        reason: format!("burn was refused: {reason}"),
                    }),
                }
            }
        }
    }

    /// A client process with environment `env` (an MPS client's, from `gpu::isolation`)
    /// allocates `mib` MiB of `gpu`. `None`: no way to run one.
    pub async fn hold(
        &self,
        gpu: &GpuInfo,
        env: &[(String, String)],
        mib: u64,
    ) -> Result<Option<Held>, LoadError> {
        match self {
            Load::None => Ok(None),
            Load::Simulated(gpus) => {
                let pid = SIMULATED_PID.fetch_add(1, Ordering::Relaxed);
                let started = gpus.start_process(
                    gpu.index,
                    CudaProcess {
                        pid,
                        env,
                        ordinal: 0,
                        memory_mib: mib,
                        load_permille: 100,
                    },
                );
                Ok(Some(match started {
                    Ok(()) => Held::Holding(Running::Simulated {
                        gpus: gpus.clone(),
                        pid,
                    }),
                    Err(
                        e @ (AllocationError::OverPinnedLimit { .. }
                        | AllocationError::OutOfMemory { .. }),
                    ) => Held::Refused(e.to_string()),
                    Err(e) => return Err(e.into()),
                }))
            }
            Load::Workload(words) => {
                let args = ["hold".to_string(), mib.to_string()];
                spawn_until(words, gpu, env, &args, "allocated")
                    .await
                    .map(Some)
            }
        }
    }
}

/// Starts `words args` on `gpu` (by UUID, whatever CUDA's device order) with `env`, and waits
/// until it prints `ready`, exits refused, or fails.
async fn spawn_until(
    words: &[String],
    gpu: &GpuInfo,
    env: &[(String, String)],
    args: &[String],
    ready: &str,
) -> Result<Held, LoadError> {
    let program = words.join(" ");
    let fail = |reason: String| LoadError::Workload {
        program: program.clone(),
        reason,
    };
    let mut child = Command::new(&words[0])
        .args(&words[1..])
        .args(args)
        .env("CUDA_VISIBLE_DEVICES", format_uuid(&gpu.uuid))
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| fail(format!("cannot start it: {e}")))?;
    let pid = child.id().unwrap_or(0);
    let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
    let started = tokio::time::timeout(WORKLOAD_START, async {
        while let Some(line) = lines.next_line().await? {
            if line.trim() == ready {
                return Ok(true);
            }
        }
        Ok::<_, std::io::Error>(false)
    })
    .await;
    match started {
        Ok(Ok(true)) => Ok(Held::Holding(Running::Process { pid, child })),
        Err(_) => {
            let _ = child.kill().await;
            Err(fail(format!(
                "printed no `{ready}` within {} s",
                WORKLOAD_START.as_secs()
            )))
        }
        Ok(Err(e)) => Err(fail(format!("reading its output: {e}"))),
        Ok(Ok(false)) => {
            let status = child.wait().await.map_err(|e| fail(e.to_string()))?;
            let mut stderr = String::new();
            if let Some(mut err) = child.stderr.take() {
                let _ = err.read_to_string(&mut stderr).await;
            }
            let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
            let words = last.unwrap_or("").trim().to_string();
            if status.code() == Some(REFUSED_EXIT) {
                Ok(Held::Refused(words))
            } else {
                Err(fail(format!("ended ({status}) before `{ready}`: {words}")))
            }
        }
    }
}
