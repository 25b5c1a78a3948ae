//! One NVIDIA MPS control daemon per lease that shares a GPU, its limits set on the server side
//! before the lease's container can connect (issue 32).
//!
//! One daemon for the whole host, its pipe folder and `/dev/shm` mounted into every shared
//! lease's container, let any tenant end every co-tenant's GPU work (`echo quit |
//! nvidia-cuda-mps-control` from inside its container), read the other tenants' shared memory,
//! and leave its own memory limit behind by unsetting a variable of its own environment. Here
//! each such lease gets:
//! - its own daemon (`nvidia-cuda-mps-control -d`), seeing only the lease's GPUs
//!   (`CUDA_VISIBLE_DEVICES`, by UUID, in the lease's order: the container's ordinals), its pipes
//!   in a folder of the lease's alone, under the agent's data folder;
//! - the daemon's default limits set before anything connects: each GPU's pinned device memory at
//!   the lease's slice (`set_default_device_pinned_mem_limit`) and the share of the SMs
//!   (`set_default_active_thread_percentage`); read back, and the lease refused if they did not
//!   take. A server the daemon starts for the lease's client takes these; the client's own
//!   variable can only lower them;
//! - a tmpfs of its own as the daemon's `/dev/shm` (the daemon runs in a mount namespace of its
//!   own, `unshare --mount`, with the tmpfs bound there), the same tmpfs the container gets as
//!   its `/dev/shm`.
//!
//! A tenant that tells its daemon to quit ends its own lease's GPU work, no one else's. A tenant,
//! root in its container, still holds its own daemon's control pipe and can raise its own
//! server's limits there; what its processes hold of the GPU is what the agent watches: more than
//! its slice and a context's room, and the lease is stopped at the next tick
//! (`reconcile::tenancy`, `exit::OVER_SLICE`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rustix::mount::{mount, unmount, MountFlags, UnmountFlags};
use rustix::process::{kill_process, Pid, Signal};

use crate::chain::Key;

/// What a client may hold of a GPU beyond its slice: the room its CUDA context takes. A lease
/// whose processes hold more than that on a GPU it shares is stopped
/// (`reconcile::tenancy`).
pub const CONTEXT_ROOM_MIB: u64 = 1_024;
/// The size of the tmpfs a lease's daemon and container share as `/dev/shm`.
pub const SHM_BYTES: u64 = 64 << 20;
/// How long a daemon may take to open its control pipe, to answer, or to go once told to quit.
const DAEMON_WAIT: Duration = Duration::from_secs(10);
/// The daemon's control pipe in its pipe folder, and its pid file.
const CONTROL_PIPE: &str = "control";
const PID_FILE: &str = "nvidia-cuda-mps-control.pid";

/// The host's MPS: the control program every lease's daemon is started from, and the folder
/// the daemons' own folders go in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mps {
    /// `nvidia-cuda-mps-control` (`[gpu] mps_control`).
    pub control: PathBuf,
    /// `<data_dir>/mps`: one folder per lease.
    pub root: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the lease's MPS daemon: {0}")]
pub struct MpsError(pub String);

/// One lease's MPS daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseMps {
    pub control: PathBuf,
    /// `<root>/<lease>`: its `pipe`, `log` and `shm` folders.
    pub dir: PathBuf,
    /// The lease's GPUs as `CUDA_VISIBLE_DEVICES` names them (`GPU-…` UUIDs), in the lease's
    /// order.
    pub gpus: Vec<String>,
    /// Each GPU's pinned device memory limit, in GiB.
    pub gib_per_gpu: u16,
    /// The share of the SMs, in percent.
    pub thread_percent: u32,
}

impl Mps {
    /// The folder of `lease`'s daemon.
    pub fn dir(&self, lease: &Key) -> PathBuf {
        self.root.join(lease.to_string())
    }
}

impl LeaseMps {
    /// The folder of its pipes: the container's `CUDA_MPS_PIPE_DIRECTORY`, mounted at the same
    /// path.
    pub fn pipe_dir(&self) -> PathBuf {
        self.dir.join("pipe")
    }

    /// Its tmpfs: the daemon's `/dev/shm`, and the container's.
    pub fn shm_dir(&self) -> PathBuf {
        self.dir.join("shm")
    }

    fn log_dir(&self) -> PathBuf {
        self.dir.join("log")
    }

    /// Starts the daemon with its limits set and read back, unless it runs already (a
    /// restarted agent finds its leases' daemons running). Blocking.
    pub fn start(&self) -> Result<(), MpsError> {
        for dir in [self.pipe_dir(), self.log_dir(), self.shm_dir()] {
            std::fs::create_dir_all(&dir)
                .map_err(|e| MpsError(format!("cannot create {}: {e}", dir.display())))?;
        }
        if !crate::retention::mounted(&self.shm_dir()) {
            let options = std::ffi::CString::new(format!("size={SHM_BYTES},mode=1777"))
                .expect("no NUL in the mount options");
            mount(
                "gpu-market-mps-shm",
                self.shm_dir(),
                "tmpfs",
                MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
                options.as_c_str(),
            )
            .map_err(|e| MpsError(format!("cannot mount its shared memory: {e}")))?;
        }
        if !self.running() {
            // What it says on failure, in a file: a daemon that kept a pipe open would hold
            // the wait for it.
            let errors = self.log_dir().join("start.err");
            let stderr = std::fs::File::create(&errors)
                .map_err(|e| MpsError(format!("cannot create {}: {e}", errors.display())))?;
            // Its own mount namespace, where the lease's tmpfs is `/dev/shm`; `-d` forks the
            // daemon into the background, in that namespace.
            let status = Command::new("unshare")
                .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
                .arg(r#"mount --bind "$1" /dev/shm && exec "$2" -d"#)
                .arg("sh")
                .arg(self.shm_dir())
                .arg(&self.control)
                .envs(self.env())
                .env("CUDA_VISIBLE_DEVICES", self.gpus.join(","))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(stderr)
                .status()
                .map_err(|e| MpsError(format!("cannot run unshare: {e}")))?;
            if !status.success() {
                return Err(MpsError(format!(
                    "{} -d did not start: {}",
                    self.control.display(),
                    std::fs::read_to_string(&errors).unwrap_or_default().trim()
                )));
            }
            let deadline = Instant::now() + DAEMON_WAIT;
            while !self.pipe_dir().join(CONTROL_PIPE).exists() {
                if Instant::now() > deadline {
                    return Err(MpsError("its control pipe never opened".into()));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        // Set, then read back: two runs of the control program, each with its commands on
        // its input, one a line (each `get` answers on a line of its own).
        let limit = format!("{}G", self.gib_per_gpu);
        let percent = self.thread_percent.to_string();
        let ordinals = 0..self.gpus.len();
        let mut set: Vec<String> = ordinals
            .clone()
            .map(|o| format!("set_default_device_pinned_mem_limit {o} {limit}"))
            .collect();
        set.push(format!("set_default_active_thread_percentage {percent}"));
        self.command(&set.join("\n"))?;
        let mut get: Vec<String> = ordinals
            .map(|o| format!("get_default_device_pinned_mem_limit {o}"))
            .collect();
        get.push("get_default_active_thread_percentage".into());
        let read = self.command(&get.join("\n"))?;
        let lines: Vec<&str> = read.lines().map(str::trim).collect();
        let want = self.gib_per_gpu as u64 * 1024;
        for ordinal in 0..self.gpus.len() {
            let got = lines.get(ordinal).copied().unwrap_or("");
            if limit_mib(got) != Some(want) {
                return Err(MpsError(format!(
                    "device {ordinal}'s memory limit reads {got:?}, not {limit}"
                )));
            }
        }
        let got = lines.get(self.gpus.len()).copied().unwrap_or("");
        if got.parse::<f64>().ok() != percent.parse::<f64>().ok() {
            return Err(MpsError(format!(
                "its thread percentage reads {got:?}, not {percent}"
            )));
        }
        Ok(())
    }

    /// The daemon's variables: its pipes and logs in the lease's folders.
    fn env(&self) -> [(&'static str, PathBuf); 2] {
        [
            ("CUDA_MPS_PIPE_DIRECTORY", self.pipe_dir()),
            ("CUDA_MPS_LOG_DIRECTORY", self.log_dir()),
        ]
    }

    /// Its daemon's process, while it runs: the live process its pid file names.
    fn pid(&self) -> Option<i32> {
        std::fs::read_to_string(self.pipe_dir().join(PID_FILE))
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok())
            .filter(|pid| Path::new(&format!("/proc/{pid}")).exists())
    }

    fn running(&self) -> bool {
        self.pid().is_some()
    }

    /// Sends commands to the daemon (`nvidia-cuda-mps-control` as its user interface, the
    /// commands on its input, a line each); what it answered.
    fn command(&self, command: &str) -> Result<String, MpsError> {
        let mut child = Command::new(&self.control)
            .envs(self.env())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| MpsError(format!("cannot run {}: {e}", self.control.display())))?;
        if let Some(mut input) = child.stdin.take() {
            writeln!(input, "{command}").map_err(|e| MpsError(format!("{command}: {e}")))?;
        }
        let deadline = Instant::now() + DAEMON_WAIT;
        while child.try_wait().ok().flatten().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                return Err(MpsError(format!("{command}: no answer")));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let out = child
            .wait_with_output()
            .map_err(|e| MpsError(format!("{command}: {e}")))?;
        if !out.status.success() {
            return Err(MpsError(format!(
                "{command}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }
}

/// Stops the daemon whose folder is `dir` (told to quit, killed if it does not go), unmounts
/// its tmpfs and deletes the folder; nothing where there is none. Blocking.
pub fn stop(control: &Path, dir: &Path) {
    let daemon = LeaseMps {
        control: control.to_path_buf(),
        dir: dir.to_path_buf(),
        gpus: Vec::new(),
        gib_per_gpu: 0,
        thread_percent: 0,
    };
    if daemon.running() {
        if let Err(e) = daemon.command("quit") {
            tracing::warn!(dir = %dir.display(), error = %e, "the MPS daemon did not take quit");
        }
        let deadline = Instant::now() + DAEMON_WAIT;
        while daemon.running() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if let Some(pid) = daemon.pid().and_then(Pid::from_raw) {
            let _ = kill_process(pid, Signal::KILL);
        }
    }
    if crate::retention::mounted(&daemon.shm_dir()) {
        if let Err(e) = unmount(daemon.shm_dir(), UnmountFlags::DETACH) {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot unmount the MPS daemon's shared memory");
        }
    }
    if let Err(e) = std::fs::remove_dir_all(dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(dir = %dir.display(), error = %e, "cannot delete the MPS daemon's folder");
        }
    }
}

/// The lease folders under `root` whose lease is not one of `live` (a daemon the agent left
/// running when it was killed): each daemon stopped, its folder deleted. Blocking.
pub fn sweep(mps: &Mps, live: &std::collections::BTreeSet<Key>) -> Vec<Key> {
    let mut swept = Vec::new();
    for lease in crate::retention::lease_folders(&mps.root) {
        if !live.contains(&lease) {
            stop(&mps.control, &mps.dir(&lease));
            swept.push(lease);
        }
    }
    swept
}

/// The host's MPS with the SIMULATED control program of the tests
/// (`agent/tests/fixtures/mps-control-simulated`: real processes and pipes, no server, no GPU),
/// the daemons' folders under `root`.
pub fn simulated(root: &Path) -> Mps {
    Mps {
        control: concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/mps-control-simulated"
        )
        .into(),
        root: root.to_path_buf(),
    }
}

/// A limit as the daemon prints it or takes it (`40G`, `512M`, `2GB`), in MiB.
pub fn limit_mib(limit: &str) -> Option<u64> {
    let limit = limit.trim().trim_end_matches('B');
    let (number, mib_per_unit) = match limit.strip_suffix('G') {
        Some(n) => (n, 1024),
        None => (limit.strip_suffix('M')?, 1),
    };
    number.trim().parse::<u64>().ok()?.checked_mul(mib_per_unit)
}
