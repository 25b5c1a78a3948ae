//! Running a lease's container: the operations the reconcile loop needs from a container engine.
//!
//! [`crate::docker::DockerEngine`] implements them on a Docker engine; [`recording::RecordingRuntime`]
//! records them for tests and lets a test make a container exit.

pub mod recording;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;

use crate::chain::Key;
pub use crate::network::LeaseNetwork;

/// Label carried by every container the agent starts, valued with its machine's address: a
/// restart finds its own, and agents of other machines on the same engine leave them alone.
pub const LABEL_MANAGED: &str = "io.gpu-market.managed";
/// Label naming the lease (base58) a container runs for.
pub const LABEL_LEASE: &str = "io.gpu-market.lease";
/// Label naming the lease's client (base58): the one key the agent's API serves the lease to,
/// while the container runs and through its retention after the lease ends.
pub const LABEL_CLIENT: &str = "io.gpu-market.client";
/// Label listing the host ports (comma-separated) a container's lease was given: a container
/// created but not started publishes none yet, and its ports must not go to another.
pub const LABEL_HOST_PORTS: &str = "io.gpu-market.host-ports";

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("cannot reach the Docker engine at {socket}: {source}")]
    Connect {
        socket: String,
        source: bollard::errors::Error,
    },
    #[error("pulling {image} failed: {source}")]
    Pull {
        image: String,
        source: bollard::errors::Error,
    },
    #[error("the engine refused container {op}: {source}")]
    Engine {
        op: &'static str,
        source: bollard::errors::Error,
    },
    #[error("{image} is {bytes} bytes or more, over the host's limit of {max_bytes}")]
    ImageTooLarge {
        image: String,
        bytes: u64,
        max_bytes: u64,
    },
    #[error("{image} sets {key} in its own environment, which makes the loader or the NVIDIA toolkit run code of the image's on the host: refused and removed")]
    ImageEnv { image: String, key: String },
    #[error("image reference {0:?} has no repository")]
    BadImage(String),
    #[error("no container {0}")]
    NoSuchContainer(String),
    /// The engine did not answer the call within the agent's bound
    /// (`reconcile::jobs::ENGINE_CALL_TIMEOUT`).
    #[error("the engine did not answer container {op} within {} s", after.as_secs())]
    Hung {
        op: &'static str,
        after: std::time::Duration,
    },
    #[error("the lease's firewall: {0}")]
    Firewall(#[from] crate::firewall::FirewallError),
    #[error("no free lease subnet left in the agent's pool {}/{} ([network] lease_pool)", .0.network, .0.prefix)]
    NoFreeSubnet(crate::network::LeasePool),
    #[error("no free host port left in the publishing range {first}-{last}")]
    NoFreePort { first: u16, last: u16 },
    #[error("the lease asks for published ports but the agent has no [network] ports range")]
    NoPublishing,
    #[error("a container with network needs its lease in the {LABEL_LEASE} label")]
    NoLeaseLabel,
    #[error("the lease's scratch volume at {path}: {reason}")]
    Scratch { path: PathBuf, reason: String },
    #[error("writing logs to {path}: {source}")]
    Logs {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// What to run: the image, its environment, its limits and the GPUs it may see.
#[derive(Debug, Clone, Default)]
pub struct ContainerSpec {
    pub name: Option<String>,
    /// `registry/repository:tag` or `registry/repository@sha256:…`.
    pub image: String,
    pub cmd: Option<Vec<String>>,
    /// Environment variables. Never logged: they may carry the client's decrypted secrets.
    pub env: Vec<(String, String)>,
    pub labels: HashMap<String, String>,
    pub memory_bytes: Option<i64>,
    /// CPU quota in billionths of a CPU.
    pub nano_cpus: Option<i64>,
    pub pids_limit: Option<i64>,
    /// GPU indices (as the NVIDIA runtime numbers them) exposed to the container.
    pub gpu_indices: Vec<u32>,
    /// Host folders mounted into the container: the lease's power logs (read-only), the NVIDIA
    /// MPS folders of a lease on a shared GPU (read-write).
    pub binds: Vec<BindMount>,
    /// Where the container may write and how much it may log; hardened by default.
    pub sandbox: Sandbox,
    /// The lease's bridge, egress and published ports (the bridge is named after the lease
    /// in [`LABEL_LEASE`]); the default runs it with no network.
    pub network: LeaseNetwork,
}

/// A host folder mounted into a container. The folder must exist: the engine refuses the
/// container otherwise, rather than create an empty one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindMount {
    pub host: PathBuf,
    /// Where the container sees it; an absolute path.
    pub container: PathBuf,
    /// The container may only read it (the lease's power logs); otherwise read-write (the
    /// NVIDIA MPS folders).
    pub read_only: bool,
}

/// The tmpfs every container gets for temporary files.
pub const TMP_DIR: &str = "/tmp";
/// The tmpfs every container gets as its writable scratch directory.
pub const SCRATCH_DIR: &str = "/workspace";

/// How a container is confined beyond its CPU, memory and process limits. Whatever it says,
/// every container also runs with every Linux capability dropped and with `no-new-privileges`
/// (no setuid or file-capability gain), and has size-limited tmpfs mounts at [`TMP_DIR`] and
/// [`SCRATCH_DIR`] (counted against its memory limit, as tmpfs pages are).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sandbox {
    /// Mounts the image's root filesystem read-only: the container writes only to its tmpfs
    /// mounts (and `/dev/shm`). Off for images that must write elsewhere.
    pub read_only_root: bool,
    /// The size of the tmpfs at [`TMP_DIR`], in bytes.
    pub tmp_bytes: u64,
    /// The size of the tmpfs at [`SCRATCH_DIR`], in bytes.
    pub scratch_bytes: u64,
    /// With a writable root only: the cap on the container's writable layer, in bytes, where the
    /// engine's storage driver supports one (btrfs, zfs, overlay2 on xfs mounted with `pquota`);
    /// elsewhere the container runs without it.
    pub writable_layer_bytes: u64,
    /// The container's log (the engine's `local` driver) rotates at this size, in bytes …
    pub log_max_bytes: u64,
    /// … keeping this many files: the oldest output goes first.
    pub log_max_files: u32,
}

impl Default for Sandbox {
    fn default() -> Self {
        Sandbox {
            read_only_root: true,
            tmp_bytes: 1 << 30,
            scratch_bytes: 4 << 30,
            writable_layer_bytes: 10 << 30,
            log_max_bytes: 20 << 20,
            log_max_files: 5,
        }
    }
}

/// Registry credentials for one pull.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials({}, <redacted>)", self.username)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerState {
    /// Created but never started: not running, and nothing to bill.
    Created,
    /// Running, paused or restarting: not finished.
    Running,
    Exited {
        code: i64,
    },
}

/// A container carrying [`LABEL_MANAGED`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagedContainer {
    pub id: String,
    /// The lease in its [`LABEL_LEASE`] label, if it has a valid one.
    pub lease: Option<Key>,
    /// Its state where the listing tells it (created, or running); `None` where only
    /// [`ContainerRuntime::state`] does (an exit code).
    pub listed: Option<ContainerState>,
    /// The host ports given its published ports, in the order of its lease's ports
    /// ([`LABEL_HOST_PORTS`]).
    pub host_ports: Vec<u16>,
}

#[async_trait]
pub trait ContainerRuntime: Send + Sync {
    /// Pulls `image_ref`'s repository pinned to `digest` (`repo@sha256:…`), refusing an image
    /// whose layers add up to more than `max_bytes`.
    async fn pull(
        &self,
        image_ref: &str,
        digest: &[u8; 32],
        credentials: Option<&Credentials>,
        max_bytes: u64,
    ) -> Result<(), RuntimeError>;
    /// Marks the pulled image `image_ref` pinned to `digest` used now, then, while the image
    /// store holds more than `max_store_bytes`, removes the images this agent pulled that no
    /// container uses, `keep` does not name, and no lease asked for within `grace`, least
    /// recently used first; returns how many it removed.
    async fn collect_images(
        &self,
        image_ref: &str,
        digest: &[u8; 32],
        keep: &[[u8; 32]],
        max_store_bytes: u64,
        grace: std::time::Duration,
    ) -> Result<usize, RuntimeError>;
    /// Creates a container without starting it; returns its id. The container gets
    /// [`LABEL_MANAGED`].
    async fn create(&self, spec: &ContainerSpec) -> Result<String, RuntimeError>;
    /// Starts a container [`create`](Self::create) made.
    async fn start(&self, id: &str) -> Result<(), RuntimeError>;
    /// Creates and starts a container; returns its id.
    async fn run(&self, spec: &ContainerSpec) -> Result<String, RuntimeError> {
        let id = self.create(spec).await?;
        self.start(&id).await?;
        Ok(id)
    }
    async fn state(&self, id: &str) -> Result<ContainerState, RuntimeError>;
    /// Sends SIGTERM, then SIGKILL after `grace`; returns once the container has stopped.
    async fn stop(&self, id: &str, grace: Duration) -> Result<(), RuntimeError>;
    async fn remove(&self, id: &str) -> Result<(), RuntimeError>;
    /// Writes everything the container printed to `path`; returns the bytes written.
    async fn save_logs(&self, id: &str, path: &Path) -> Result<u64, RuntimeError>;
    /// Every container carrying [`LABEL_MANAGED`], running or not: one request, however many.
    async fn managed(&self) -> Result<Vec<ManagedContainer>, RuntimeError>;
    /// CPU time the container has used since it started, in nanoseconds.
    async fn cpu_usage_ns(&self, id: &str) -> Result<u64, RuntimeError>;
    /// The host PIDs of the container's processes (none once it stopped): what maps the GPUs'
    /// processes to leases.
    async fn pids(&self, id: &str) -> Result<Vec<u32>, RuntimeError>;
}

/// The repository of `image_ref` pinned to `digest`: `registry/repo@sha256:<hex>`.
pub fn pinned_reference(image_ref: &str, digest: &[u8; 32]) -> Result<String, RuntimeError> {
    let (repo, _) = split_reference(image_ref)?;
    Ok(format!("{repo}@sha256:{}", hex(digest)))
}

/// The registry host of an image reference, as Docker decides it: the first path component
/// when it looks like a host (has a dot or a port, or is `localhost`), else Docker Hub.
pub fn registry_host(image_ref: &str) -> &str {
    match image_ref.split_once('/') {
        Some((first, _)) if first.contains('.') || first.contains(':') || first == "localhost" => {
            first
        }
        _ => "docker.io",
    }
}

/// Splits `registry/repo:tag` or `registry/repo@sha256:…` into the repository and the tag or
/// digest (`latest` when neither is given). A registry port is not mistaken for a tag.
pub fn split_reference(image: &str) -> Result<(&str, &str), RuntimeError> {
    if let Some((repo, digest)) = image.split_once('@') {
        return if repo.is_empty() {
            Err(RuntimeError::BadImage(image.to_string()))
        } else {
            Ok((repo, digest))
        };
    }
    let last_slash = image.rfind('/').map_or(0, |i| i + 1);
    let (repo, tag) = match image[last_slash..].rfind(':') {
        Some(i) => (&image[..last_slash + i], &image[last_slash + i + 1..]),
        None => (image, "latest"),
    };
    if repo.is_empty() || tag.is_empty() {
        return Err(RuntimeError::BadImage(image.to_string()));
    }
    Ok((repo, tag))
}

/// Lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_split_into_repository_and_tag_or_digest() {
        assert_eq!(
            split_reference("127.0.0.1:5000/gpu-market/busybox:1.0").unwrap(),
            ("127.0.0.1:5000/gpu-market/busybox", "1.0")
        );
        assert_eq!(
            split_reference("127.0.0.1:5000/busybox").unwrap(),
            ("127.0.0.1:5000/busybox", "latest")
        );
        assert_eq!(
            split_reference("reg/busybox@sha256:abcd").unwrap(),
            ("reg/busybox", "sha256:abcd")
        );
        assert!(split_reference("busybox:").is_err());
        assert!(split_reference("@sha256:abcd").is_err());
    }

    #[test]
    fn pulls_are_pinned_to_the_digest_and_credentials_found_by_host() {
        let digest = [0xab; 32];
        assert_eq!(
            pinned_reference("127.0.0.1:5000/gpu-market/train:v2", &digest).unwrap(),
            format!("127.0.0.1:5000/gpu-market/train@sha256:{}", "ab".repeat(32))
        );
        assert_eq!(
            registry_host("127.0.0.1:5000/gpu-market/train:v2"),
            "127.0.0.1:5000"
        );
        assert_eq!(registry_host("ghcr.io/org/train"), "ghcr.io");
        assert_eq!(registry_host("library/busybox"), "docker.io");
        assert_eq!(registry_host("busybox"), "docker.io");
        assert!(!format!(
            "{:?}",
            Credentials {
                username: "u".into(),
                password: "hunter2".into()
            }
        )
        .contains("hunter2"));
    }
}
