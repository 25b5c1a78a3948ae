//! The container runtime on a real Docker engine, through bollard.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use bollard::auth::DockerCredentials;
use bollard::errors::Error as BollardError;
use bollard::models::{ContainerCreateBody, DeviceRequest, HostConfig};
use bollard::query_parameters::{
    CreateContainerOptions, CreateImageOptions, InspectContainerOptions, LogsOptions,
    RemoveContainerOptions, StartContainerOptions, StopContainerOptions, WaitContainerOptions,
};
use bollard::Docker;
use futures_util::{StreamExt, TryStreamExt};
use tokio::io::AsyncWriteExt;

use crate::runtime::{
    pinned_reference, registry_host, ContainerRuntime, ContainerState, Credentials,
    ManagedContainer, LABEL_LEASE,
};
pub use crate::runtime::{split_reference, ContainerSpec, RuntimeError, LABEL_MANAGED};

/// Output of a finished container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerLogs {
    pub stdout: String,
    pub stderr: String,
}

pub struct DockerEngine {
    docker: Docker,
    /// The value of [`LABEL_MANAGED`] on the containers this engine handle starts and lists:
    /// the machine's address, so that agents of several machines can share one engine.
    scope: String,
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
        })
    }

    /// The API version agreed with the engine.
    pub fn api_version(&self) -> String {
        self.docker.client_version().to_string()
    }

    /// Pulls `image` (by tag or digest), returning the number of progress messages seen.
    pub async fn pull(&self, image: &str) -> Result<usize, RuntimeError> {
        self.pull_with_credentials(image, None).await
    }

    /// Pulls `image`, authenticating to its registry with `credentials` when given.
    pub async fn pull_with_credentials(
        &self,
        image: &str,
        credentials: Option<&Credentials>,
    ) -> Result<usize, RuntimeError> {
        let (repo, reference) = split_reference(image)?;
        let options = CreateImageOptions {
            from_image: Some(repo.to_string()),
            tag: Some(reference.to_string()),
            ..Default::default()
        };
        let credentials = credentials.map(|c| DockerCredentials {
            username: Some(c.username.clone()),
            password: Some(c.password.clone()),
            serveraddress: Some(registry_host(image).to_string()),
            ..Default::default()
        });
        let progress = self
            .docker
            .create_image(Some(options), None, credentials)
            .try_collect::<Vec<_>>()
            .await
            .map_err(|source| RuntimeError::Pull {
                image: image.to_string(),
                source,
            })?;
        Ok(progress.len())
    }

    /// Creates and starts a container; returns its id.
    pub async fn run(&self, spec: &ContainerSpec) -> Result<String, RuntimeError> {
        let mut labels = spec.labels.clone();
        labels.insert(LABEL_MANAGED.to_string(), self.scope.clone());
        let device_requests = (!spec.gpu_indices.is_empty()).then(|| {
            vec![DeviceRequest {
                driver: Some("nvidia".to_string()),
                device_ids: Some(spec.gpu_indices.iter().map(u32::to_string).collect()),
                capabilities: Some(vec![vec!["gpu".to_string()]]),
                ..Default::default()
            }]
        });
        let body = ContainerCreateBody {
            image: Some(spec.image.clone()),
            cmd: spec.cmd.clone(),
            env: Some(spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
            labels: Some(labels),
            host_config: Some(HostConfig {
                memory: spec.memory_bytes,
                nano_cpus: spec.nano_cpus,
                pids_limit: spec.pids_limit,
                network_mode: Some("none".to_string()),
                device_requests,
                ..Default::default()
            }),
            ..Default::default()
        };
        let options = CreateContainerOptions {
            name: spec.name.clone(),
            ..Default::default()
        };
        let created = self
            .docker
            .create_container(Some(options), body)
            .await
            .map_err(|source| RuntimeError::Engine {
                op: "create",
                source,
            })?;
        self.docker
            .start_container(&created.id, None::<StartContainerOptions>)
            .await
            .map_err(|source| RuntimeError::Engine {
                op: "start",
                source,
            })?;
        Ok(created.id)
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
    pub async fn remove(&self, id: &str) -> Result<(), RuntimeError> {
        let options = RemoveContainerOptions {
            force: true,
            ..Default::default()
        };
        self.docker
            .remove_container(id, Some(options))
            .await
            .map_err(|source| engine_error("remove", id, source))
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
                c.id.map(|id| ManagedContainer { id, lease })
            })
            .collect())
    }
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
    ) -> Result<(), RuntimeError> {
        let pinned = pinned_reference(image_ref, digest)?;
        self.pull_with_credentials(&pinned, credentials)
            .await
            .map(drop)
    }

    async fn run(&self, spec: &ContainerSpec) -> Result<String, RuntimeError> {
        DockerEngine::run(self, spec).await
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
