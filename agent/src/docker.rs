//! The container runtime on a real Docker engine, through bollard.

use std::collections::HashMap;

use bollard::errors::Error as BollardError;
use bollard::models::{ContainerCreateBody, DeviceRequest, HostConfig};
use bollard::query_parameters::{
    CreateContainerOptions, CreateImageOptions, LogsOptions, RemoveContainerOptions,
    StartContainerOptions, WaitContainerOptions,
};
use bollard::Docker;
use futures_util::{StreamExt, TryStreamExt};

/// Label carried by every container the agent starts, so a restart can find its own.
pub const LABEL_MANAGED: &str = "io.gpu-market.managed";

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("cannot reach the Docker engine at {socket}: {source}")]
    Connect {
        socket: String,
        source: BollardError,
    },
    #[error("pulling {image} failed: {source}")]
    Pull { image: String, source: BollardError },
    #[error("the engine refused container {op}: {source}")]
    Engine {
        op: &'static str,
        source: BollardError,
    },
    #[error("image reference {0:?} has no repository")]
    BadImage(String),
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
}

/// Output of a finished container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerLogs {
    pub stdout: String,
    pub stderr: String,
}

pub struct DockerEngine {
    docker: Docker,
}

impl DockerEngine {
    /// Connects to the engine at `socket` (`unix:///path`) and negotiates the API version.
    pub async fn connect(socket: &str) -> Result<Self, RuntimeError> {
        let connect_err = |source| RuntimeError::Connect {
            socket: socket.to_string(),
            source,
        };
        let docker = Docker::connect_with_unix(socket, 120, bollard::API_DEFAULT_VERSION)
            .map_err(connect_err)?
            .negotiate_version()
            .await
            .map_err(connect_err)?;
        Ok(DockerEngine { docker })
    }

    /// The API version agreed with the engine.
    pub fn api_version(&self) -> String {
        self.docker.client_version().to_string()
    }

    /// Pulls `image` (by tag or digest), returning the number of progress messages seen.
    pub async fn pull(&self, image: &str) -> Result<usize, RuntimeError> {
        let (repo, reference) = split_reference(image)?;
        let options = CreateImageOptions {
            from_image: Some(repo.to_string()),
            tag: Some(reference.to_string()),
            ..Default::default()
        };
        let progress = self
            .docker
            .create_image(Some(options), None, None)
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
        labels.insert(LABEL_MANAGED.to_string(), "true".to_string());
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
            .map_err(|source| RuntimeError::Engine {
                op: "remove",
                source,
            })
    }

    /// The ids of the containers this agent manages, running or not.
    pub async fn managed_containers(&self) -> Result<Vec<String>, RuntimeError> {
        let filters = HashMap::from([("label".to_string(), vec![format!("{LABEL_MANAGED}=true")])]);
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
        Ok(list.into_iter().filter_map(|c| c.id).collect())
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
}
