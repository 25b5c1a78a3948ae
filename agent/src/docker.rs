//! The container runtime on a real Docker engine, through bollard.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bollard::errors::Error as BollardError;
use bollard::models::{
    ContainerCreateBody, ContainerStateStatusEnum, ContainerSummaryStateEnum, ContainerTopResponse,
    DeviceRequest, HostConfig, HostConfigLogConfig, Mount, MountType, PortBinding,
};
use bollard::query_parameters::{
    CreateContainerOptions, InspectContainerOptions, LogsOptions, RemoveContainerOptions,
    StartContainerOptions, StopContainerOptions, TopOptions, WaitContainerOptions,
};
use bollard::Docker;
use futures_util::{StreamExt, TryStreamExt};
use tokio::io::AsyncWriteExt;

use crate::chain::Key;
use crate::network::{LeasePool, Publishing};
use crate::runtime::{
    pinned_reference, ContainerRuntime, ContainerState, Credentials, ManagedContainer, LABEL_LEASE,
};
pub use crate::runtime::{
    split_reference, ContainerSpec, RuntimeError, Sandbox, LABEL_HOST_PORTS, LABEL_MANAGED,
    SCRATCH_DIR, TMP_DIR,
};

/// The log driver of every container: it rotates by size and keeps its files compressed, and
/// the engine still serves the logs (`save_logs`).
pub const LOG_DRIVER: &str = "local";

/// Output of a finished container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerLogs {
    pub stdout: String,
    pub stderr: String,
}

pub struct DockerEngine {
    pub(crate) docker: Docker,
    /// The value of [`LABEL_MANAGED`] on the containers this engine handle starts and lists:
    /// the machine's address, so that agents of several machines can share one engine.
    scope: String,
    /// Set once the storage driver has refused a size cap on a writable layer: containers with a
    /// writable root are created without one from then on.
    no_layer_cap: AtomicBool,
    /// Where leases' ports are published; `None`: leases that ask for ports cannot start.
    publishing: Option<Publishing>,
    /// Held from choosing a lease's host ports and subnet until its container holds them.
    publish_lock: tokio::sync::Mutex<()>,
    /// Where leases' bridge subnets are carved from.
    pub(crate) pool: LeasePool,
}

impl DockerEngine {
    /// Connects to the engine at `socket` (`unix:///path`) and negotiates the API version; the
    /// containers it starts and manages are those labelled with `scope` (the machine's address).
    pub async fn connect(socket: &str, scope: &str) -> Result<Self, RuntimeError> {
        let connect_err = |source| RuntimeError::Connect {
            socket: socket.to_string(),
            source,
        };
        let docker = Docker::connect_with_unix(socket, 120, bollard::API_DEFAULT_VERSION)
            .map_err(connect_err)?
            .negotiate_version()
            .await
            .map_err(connect_err)?;
        Ok(DockerEngine {
            docker,
            scope: scope.to_string(),
            no_layer_cap: AtomicBool::new(false),
            publishing: None,
            publish_lock: tokio::sync::Mutex::new(()),
            pool: LeasePool::default(),
        })
    }

    /// Leases' bridge subnets are carved from `pool`.
    pub fn lease_pool(mut self, pool: LeasePool) -> Self {
        self.pool = pool;
        self
    }

    /// Leases' ports are published on `publishing`'s address, from its range.
    pub fn publishing(mut self, publishing: Publishing) -> Self {
        self.publishing = Some(publishing);
        self
    }

    /// The machine address whose containers this handle manages.
    pub fn scope(&self) -> &str {
        &self.scope
    }

    /// The API version agreed with the engine.
    pub fn api_version(&self) -> String {
        self.docker.client_version().to_string()
    }

    /// Creates a container, not started; returns its id. It will run without network, without
    /// capabilities or privilege gain, and confined by `spec.sandbox`.
    async fn create_container(&self, spec: &ContainerSpec) -> Result<String, RuntimeError> {
        let create_error = |source| RuntimeError::Engine {
            op: "create",
            source,
        };
        // One lease's ports at a time, from choosing them until its container holds them.
        let _publishing = self.publish_lock.lock().await;
        let net = self.attachment(spec).await?;
        let cap_layer = !spec.sandbox.read_only_root && !self.no_layer_cap.load(Ordering::Relaxed);
        Ok(match self.create_with_cap(spec, &net, cap_layer).await {
            // Most storage drivers cannot cap a layer (overlay2 only on xfs with `pquota`): the
            // engine refuses the container, which then runs without the cap.
            Err(BollardError::DockerResponseServerError { message, .. }) if cap_layer => {
                let id = self
                    .create_with_cap(spec, &net, false)
                    .await
                    .map_err(create_error)?;
                self.no_layer_cap.store(true, Ordering::Relaxed);
                tracing::warn!(
                    engine = %message,
                    "the storage driver cannot cap a container's writable layer; containers with a \
                     writable root run without the cap"
                );
                id
            }
            created => created.map_err(create_error)?,
        })
    }

    async fn start_container(&self, id: &str) -> Result<(), RuntimeError> {
        self.docker
            .start_container(id, None::<StartContainerOptions>)
            .await
            .map_err(|source| engine_error("start", id, source))
    }

    /// Where `spec`'s container attaches: no network, or its lease's bridge (made now, with its
    /// firewall) with its ports bound to free host ports of the publishing range.
    async fn attachment(&self, spec: &ContainerSpec) -> Result<Attachment, RuntimeError> {
        if !spec.network.bridged() {
            return Ok(Attachment::default());
        }
        let lease: Key = spec
            .labels
            .get(LABEL_LEASE)
            .and_then(|l| l.parse().ok())
            .ok_or(RuntimeError::NoLeaseLabel)?;
        let ports = match (spec.network.ports.is_empty(), &self.publishing) {
            (true, _) => HashMap::new(),
            (false, Some(p)) => self.port_bindings(p, &spec.network.ports).await?,
            (false, None) => return Err(RuntimeError::NoPublishing),
        };
        Ok(Attachment {
            mode: self.lease_network(&lease, &spec.network).await?,
            ports,
            dns: crate::firewall::lease_dns(
                &spec.network.egress,
                &crate::firewall::host_resolv_conf(),
            ),
        })
    }

    /// Creates the container of `spec` attached as `net`, with its writable layer capped when
    /// `cap_layer`.
    async fn create_with_cap(
        &self,
        spec: &ContainerSpec,
        net: &Attachment,
        cap_layer: bool,
    ) -> Result<String, BollardError> {
        let options = CreateContainerOptions {
            name: spec.name.clone(),
            ..Default::default()
        };
        let body = create_body(spec, &self.scope, net, cap_layer);
        Ok(self.docker.create_container(Some(options), body).await?.id)
    }

    /// Waits for the container to stop and returns its exit code.
    pub async fn wait(&self, id: &str) -> Result<i64, RuntimeError> {
        let mut stream = self.docker.wait_container(id, None::<WaitContainerOptions>);
        match stream.next().await {
            Some(Ok(r)) => Ok(r.status_code),
            // bollard reports a non-zero exit as an error carrying the code.
            Some(Err(BollardError::DockerContainerWaitError { code, .. })) => Ok(code),
            Some(Err(source)) => Err(RuntimeError::Engine { op: "wait", source }),
            None => Err(RuntimeError::Engine {
                op: "wait",
                source: BollardError::DockerStreamError {
                    error: "the wait stream ended without a status".to_string(),
                },
            }),
        }
    }

    /// Everything the container wrote so far, split by stream.
    pub async fn logs(&self, id: &str) -> Result<ContainerLogs, RuntimeError> {
        let options = LogsOptions {
            stdout: true,
            stderr: true,
            ..Default::default()
        };
        let chunks = self
            .docker
            .logs(id, Some(options))
            .try_collect::<Vec<_>>()
            .await
            .map_err(|source| RuntimeError::Engine { op: "logs", source })?;
        let mut out = ContainerLogs {
            stdout: String::new(),
            stderr: String::new(),
        };
        for chunk in chunks {
            match chunk {
                bollard::container::LogOutput::StdErr { message } => {
                    out.stderr.push_str(&String::from_utf8_lossy(&message))
                }
                other => out
                    .stdout
                    .push_str(&String::from_utf8_lossy(&other.into_bytes())),
            }
        }
        Ok(out)
    }

    /// Removes the container (forcibly, if it still runs).
    /// Removes the container (forcibly, if it still runs), then its lease's network and
    /// firewall rules if it had them.
    pub async fn remove(&self, id: &str) -> Result<(), RuntimeError> {
        let inspect = self
            .docker
            .inspect_container(id, None::<InspectContainerOptions>)
            .await
            .map_err(|source| engine_error("inspect", id, source))?;
        let options = RemoveContainerOptions {
            force: true,
            ..Default::default()
        };
        self.docker
            .remove_container(id, Some(options))
            .await
            .map_err(|source| engine_error("remove", id, source))?;
        let bridged = inspect
            .host_config
            .and_then(|h| h.network_mode)
            .is_some_and(|m| m.starts_with(crate::network::NETWORK_PREFIX));
        let lease: Option<Key> = inspect
            .config
            .and_then(|c| c.labels)
            .and_then(|l| l.get(LABEL_LEASE).and_then(|l| l.parse().ok()));
        match (bridged, lease) {
            (true, Some(lease)) => self.remove_lease_network(&lease).await,
            _ => Ok(()),
        }
    }

    /// Stops the container: SIGTERM, then SIGKILL after `grace`.
    pub async fn stop(&self, id: &str, grace: Duration) -> Result<(), RuntimeError> {
        let options = StopContainerOptions {
            t: Some(grace.as_secs().min(i32::MAX as u64) as i32),
            signal: None,
        };
        match self.docker.stop_container(id, Some(options)).await {
            // 304: already stopped.
            Ok(())
            | Err(BollardError::DockerResponseServerError {
                status_code: 304, ..
            }) => Ok(()),
            Err(source) => Err(engine_error("stop", id, source)),
        }
    }

    /// Whether the container still runs, or its exit code.
    pub async fn state(&self, id: &str) -> Result<ContainerState, RuntimeError> {
        let inspect = self
            .docker
            .inspect_container(id, None::<InspectContainerOptions>)
            .await
            .map_err(|source| engine_error("inspect", id, source))?;
        let state = inspect.state.unwrap_or_default();
        let finished = state.running != Some(true)
            && state.restarting != Some(true)
            && state.paused != Some(true)
            && state.exit_code.is_some()
            && state
                .finished_at
                .as_deref()
                .is_some_and(|t| !t.starts_with("0001-"));
        Ok(if finished {
            ContainerState::Exited {
                code: state.exit_code.unwrap_or_default(),
            }
        } else if state.status == Some(ContainerStateStatusEnum::CREATED) {
            ContainerState::Created
        } else {
            ContainerState::Running
        })
    }

    /// Streams everything the container printed so far (stdout and stderr, interleaved) into
    /// `path`, replacing the file; returns the bytes written.
    pub async fn save_logs(&self, id: &str, path: &Path) -> Result<u64, RuntimeError> {
        let io_err = |source| RuntimeError::Logs {
            path: path.to_path_buf(),
            source,
        };
        let mut file = tokio::fs::File::create(path).await.map_err(io_err)?;
        let options = LogsOptions {
            stdout: true,
            stderr: true,
            ..Default::default()
        };
        let mut stream = self.docker.logs(id, Some(options));
        let mut written = 0u64;
        while let Some(chunk) = stream.next().await {
            let bytes = chunk
                .map_err(|source| engine_error("logs", id, source))?
                .into_bytes();
            file.write_all(&bytes).await.map_err(io_err)?;
            written += bytes.len() as u64;
        }
        file.sync_all().await.map_err(io_err)?;
        Ok(written)
    }

    /// The ids of the containers this agent manages, running or not.
    pub async fn managed_containers(&self) -> Result<Vec<String>, RuntimeError> {
        Ok(self
            .managed_with_labels()
            .await?
            .into_iter()
            .map(|c| c.id)
            .collect())
    }

    /// The containers this agent manages, with the lease each runs for.
    pub async fn managed_with_labels(&self) -> Result<Vec<ManagedContainer>, RuntimeError> {
        let filters = HashMap::from([(
            "label".to_string(),
            vec![format!("{LABEL_MANAGED}={}", self.scope)],
        )]);
        let options = bollard::query_parameters::ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..Default::default()
        };
        let list = self
            .docker
            .list_containers(Some(options))
            .await
            .map_err(|source| RuntimeError::Engine { op: "list", source })?;
        Ok(list
            .into_iter()
            .filter_map(|c| {
                let lease = c
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(LABEL_LEASE))
                    .and_then(|l| l.parse().ok());
                let listed = match c.state {
                    Some(ContainerSummaryStateEnum::CREATED) => Some(ContainerState::Created),
                    Some(
                        ContainerSummaryStateEnum::RUNNING
                        | ContainerSummaryStateEnum::PAUSED
                        | ContainerSummaryStateEnum::RESTARTING,
                    ) => Some(ContainerState::Running),
                    _ => None,
                };
                let host_ports = c
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(LABEL_HOST_PORTS))
                    .map(|v| v.split(',').filter_map(|p| p.parse().ok()).collect())
                    .unwrap_or_default();
                c.id.map(|id| ManagedContainer {
                    id,
                    lease,
                    listed,
                    host_ports,
                })
            })
            .collect())
    }
}

/// What the engine is asked to create for `spec`, labelled as managed by `scope`: the container
/// without network, without capabilities or privilege gain, confined by `spec.sandbox`, with its
/// writable layer capped when `cap_layer`, and `spec.binds` mounted (bind mounts whose host
/// folder must exist, read-only where they say so).
fn create_body(
    spec: &ContainerSpec,
    scope: &str,
    net: &Attachment,
    cap_layer: bool,
) -> ContainerCreateBody {
    let mut labels = spec.labels.clone();
    labels.insert(LABEL_MANAGED.to_string(), scope.to_string());
    // In the lease's order of ports: the first is a gang's rendezvous.
    let host_ports: Vec<String> = spec
        .network
        .ports
        .iter()
        .filter_map(|p| net.ports.get(&format!("{p}/tcp")))
        .flatten()
        .flatten()
        .filter_map(|b| b.host_port.clone())
        .collect();
    if !host_ports.is_empty() {
        labels.insert(LABEL_HOST_PORTS.to_string(), host_ports.join(","));
    }
    let device_requests = (!spec.gpu_indices.is_empty()).then(|| {
        vec![DeviceRequest {
            driver: Some("nvidia".to_string()),
            device_ids: Some(spec.gpu_indices.iter().map(u32::to_string).collect()),
            // The engine sets NVIDIA_DRIVER_CAPABILITIES from these after the image's own
            // environment, so an image asking for `all` (graphics, display, video) gets the
            // driver's compute and management libraries only.
            capabilities: Some(vec![GPU_CAPABILITIES.map(String::from).to_vec()]),
            ..Default::default()
        }]
    });
    let mounts = (!spec.binds.is_empty()).then(|| {
        spec.binds
            .iter()
            .map(|b| Mount {
                typ: Some(MountType::BIND),
                source: Some(b.host.to_string_lossy().into_owned()),
                target: Some(b.container.to_string_lossy().into_owned()),
                read_only: Some(b.read_only),
                ..Default::default()
            })
            .collect()
    });
    let sandbox = &spec.sandbox;
    // Executable: PyTorch and Triton compile kernels into temporary files and load them.
    let tmpfs = |bytes: u64| format!("rw,exec,nosuid,nodev,size={bytes},mode=1777");
    ContainerCreateBody {
        image: Some(spec.image.clone()),
        exposed_ports: (!net.ports.is_empty()).then(|| net.ports.keys().cloned().collect()),
        cmd: spec.cmd.clone(),
        env: Some(spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
        labels: Some(labels),
        host_config: Some(HostConfig {
            memory: spec.memory_bytes,
            nano_cpus: spec.nano_cpus,
            pids_limit: spec.pids_limit,
            network_mode: Some(net.mode.clone()),
            dns: net.dns.clone(),
            // Lease networks are IPv4 only; the engine is not relied on to switch IPv6 off.
            sysctls: Some(HashMap::from(
                IPV6_OFF.map(|k| (k.to_string(), "1".to_string())),
            )),
            port_bindings: (!net.ports.is_empty()).then(|| net.ports.clone()),
            device_requests,
            mounts,
            cap_drop: Some(vec!["ALL".to_string()]),
            security_opt: Some(vec!["no-new-privileges".to_string()]),
            readonly_rootfs: Some(sandbox.read_only_root),
            tmpfs: Some(
                [
                    (TMP_DIR, sandbox.tmp_bytes),
                    (SCRATCH_DIR, sandbox.scratch_bytes),
                ]
                .into_iter()
                // 0: the folder comes from elsewhere (a lease's retained scratch volume).
                .filter(|(_, bytes)| *bytes > 0)
                .map(|(dir, bytes)| (dir.to_string(), tmpfs(bytes)))
                .collect(),
            ),
            storage_opt: cap_layer.then(|| {
                HashMap::from([("size".to_string(), sandbox.writable_layer_bytes.to_string())])
            }),
            log_config: Some(HostConfigLogConfig {
                typ: Some(LOG_DRIVER.to_string()),
                config: Some(HashMap::from([
                    ("max-size".to_string(), sandbox.log_max_bytes.to_string()),
                    ("max-file".to_string(), sandbox.log_max_files.to_string()),
                ])),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// What a lease's GPU device request asks of the engine's `nvidia` driver.
const GPU_CAPABILITIES: [&str; 3] = ["gpu", "compute", "utility"];

/// The sysctls that switch IPv6 off in a lease's network namespace.
const IPV6_OFF: [&str; 2] = [
    "net.ipv6.conf.all.disable_ipv6",
    "net.ipv6.conf.default.disable_ipv6",
];

/// A container's network: its mode (`none`, or its lease's bridge network) and its published
/// ports (`"8080/tcp"` → the host port).
#[derive(Debug, Clone)]
struct Attachment {
    mode: String,
    ports: HashMap<String, Option<Vec<PortBinding>>>,
    /// The DNS servers named for the container (`crate::firewall::lease_dns`); `None`: the
    /// engine's.
    dns: Option<Vec<String>>,
}

impl Default for Attachment {
    fn default() -> Self {
        Attachment {
            mode: "none".to_string(),
            ports: HashMap::new(),
            dns: None,
        }
    }
}

/// The PIDs in an engine's `top` answer (the `PID` column of its `ps` table).
fn top_pids(top: &ContainerTopResponse) -> Vec<u32> {
    let Some(column) = top.titles.iter().flatten().position(|t| t.trim() == "PID") else {
        return Vec::new();
    };
    top.processes
        .iter()
        .flatten()
        .filter_map(|row| row.get(column)?.trim().parse().ok())
        .collect()
}

/// A missing container as [`RuntimeError::NoSuchContainer`], anything else as the engine's error.
fn engine_error(op: &'static str, id: &str, source: BollardError) -> RuntimeError {
    match source {
        BollardError::DockerResponseServerError {
            status_code: 404, ..
        } => RuntimeError::NoSuchContainer(id.to_string()),
        source => RuntimeError::Engine { op, source },
    }
}

#[async_trait]
impl ContainerRuntime for DockerEngine {
    async fn pull(
        &self,
        image_ref: &str,
        digest: &[u8; 32],
        credentials: Option<&Credentials>,
        max_bytes: u64,
    ) -> Result<(), RuntimeError> {
        let pinned = pinned_reference(image_ref, digest)?;
        // Pinned to its digest, an image already in the store is the one asked for: no round
        // trip to the registry.
        if self.stored_fit(&pinned, max_bytes).await?.is_ok() {
            return Ok(());
        }
        self.pull_with_credentials(&pinned, credentials, max_bytes)
            .await
            .map(drop)
    }

    async fn collect_images(
        &self,
        image_ref: &str,
        digest: &[u8; 32],
        keep: &[[u8; 32]],
        max_store_bytes: u64,
        grace: Duration,
    ) -> Result<usize, RuntimeError> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        self.mark_used(image_ref, digest, now).await?;
        let store = self.stored().await?;
        if store.iter().map(|s| s.bytes).sum::<u64>() <= max_store_bytes {
            return Ok(0);
        }
        let in_use = self.images_in_use().await?;
        let keep: Vec<[u8; 32]> = keep.iter().chain([digest]).copied().collect();
        let before = now.saturating_sub(grace.as_secs());
        let remove = crate::images::to_remove(&store, &in_use, &keep, max_store_bytes, before);
        for id in &remove {
            self.remove_image_id(id).await?;
        }
        Ok(remove.len())
    }

    async fn create(&self, spec: &ContainerSpec) -> Result<String, RuntimeError> {
        self.create_container(spec).await
    }

    async fn start(&self, id: &str) -> Result<(), RuntimeError> {
        self.start_container(id).await
    }

    async fn state(&self, id: &str) -> Result<ContainerState, RuntimeError> {
        DockerEngine::state(self, id).await
    }

    async fn cpu_usage_ns(&self, id: &str) -> Result<u64, RuntimeError> {
        let options = bollard::query_parameters::StatsOptions {
            stream: false,
            one_shot: true,
        };
        let stats = self
            .docker
            .stats(id, Some(options))
            .next()
            .await
            .ok_or_else(|| RuntimeError::NoSuchContainer(id.to_string()))?
            .map_err(|source| engine_error("stats", id, source))?;
        Ok(stats
            .cpu_stats
            .and_then(|c| c.cpu_usage)
            .and_then(|u| u.total_usage)
            .unwrap_or(0))
    }

    async fn pids(&self, id: &str) -> Result<Vec<u32>, RuntimeError> {
        match self.docker.top_processes(id, None::<TopOptions>).await {
            Ok(top) => Ok(top_pids(&top)),
            // 409: the container is not running.
            Err(BollardError::DockerResponseServerError {
                status_code: 409, ..
            }) => Ok(Vec::new()),
            Err(source) => Err(engine_error("top", id, source)),
        }
    }

    async fn stop(&self, id: &str, grace: Duration) -> Result<(), RuntimeError> {
        DockerEngine::stop(self, id, grace).await
    }

    async fn remove(&self, id: &str) -> Result<(), RuntimeError> {
        DockerEngine::remove(self, id).await
    }

    async fn save_logs(&self, id: &str, path: &Path) -> Result<u64, RuntimeError> {
        DockerEngine::save_logs(self, id, path).await
    }

    async fn managed(&self) -> Result<Vec<ManagedContainer>, RuntimeError> {
        self.managed_with_labels().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::BindMount;

    #[test]
    fn binds_become_bind_mounts_read_only_where_asked_and_the_hardening_stays() {
        let spec = ContainerSpec {
            image: "r/i@sha256:00".into(),
            gpu_indices: vec![3],
            binds: vec![
                BindMount {
                    host: "/run/nvidia-mps/shm".into(),
                    container: "/dev/shm".into(),
                    read_only: false,
                },
                BindMount {
                    host: "/var/lib/a/evidence/L".into(),
                    container: "/run/gpu-market/evidence".into(),
                    read_only: true,
                },
            ],
            ..Default::default()
        };
        let body = create_body(&spec, "machine", &Attachment::default(), false);
        let host = body.host_config.expect("a host config");
        let mount = |source: &str, target: &str, read_only| Mount {
            typ: Some(MountType::BIND),
            source: Some(source.into()),
            target: Some(target.into()),
            read_only: Some(read_only),
            ..Default::default()
        };
        assert_eq!(
            host.mounts,
            Some(vec![
                mount("/run/nvidia-mps/shm", "/dev/shm", false),
                mount("/var/lib/a/evidence/L", "/run/gpu-market/evidence", true),
            ])
        );
        assert_eq!(host.readonly_rootfs, Some(true));
        assert_eq!(host.network_mode.as_deref(), Some("none"));
        assert_eq!(host.cap_drop, Some(vec!["ALL".to_string()]));
        assert!(
            host.binds.is_none(),
            "no -v style binds: they create missing folders"
        );
        assert_eq!(body.labels.unwrap()[LABEL_MANAGED], "machine");
        let plain = create_body(
            &ContainerSpec::default(),
            "machine",
            &Attachment::default(),
            false,
        );
        assert_eq!(plain.host_config.unwrap().mounts, None);
    }

    #[test]
    fn top_answers_give_the_pid_column() {
        let row = |cells: &[&str]| cells.iter().map(|c| c.to_string()).collect::<Vec<_>>();
        let top = ContainerTopResponse {
            titles: Some(row(&["UID", "PID", "PPID", "CMD"])),
            processes: Some(vec![
                row(&["root", "4242", "4200", "python train.py"]),
                row(&["root", "4250", "4242", "python -c worker"]),
            ]),
        };
        assert_eq!(top_pids(&top), vec![4242, 4250]);
        assert!(top_pids(&ContainerTopResponse::default()).is_empty());
    }
}
