//! What the API asks of the engine, on the agent's own [`DockerEngine`].

use std::collections::HashMap;
use std::pin::Pin;
use std::time::Duration;

use bollard::container::LogOutput;
use bollard::errors::Error as BollardError;
use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::{ContainerInspectResponse, ContainerStateStatusEnum, ExecConfig};
use bollard::query_parameters::{
    DownloadFromContainerOptions, InspectContainerOptions, ListContainersOptions, LogsOptions,
    ResizeExecOptions,
};
use futures_util::{Stream, StreamExt};
use gpu_market_sdk::api::{ContainerStatus, LeaseStatus, TermSize};
use hyper::body::Bytes;
use solana_pubkey::Pubkey;
use tokio::io::AsyncWrite;

use crate::docker::DockerEngine;
use crate::runtime::{LABEL_CLIENT, LABEL_LEASE, LABEL_MANAGED, SCRATCH_DIR};

/// A lease's container on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct LeaseContainer {
    pub id: String,
    /// The key in its [`LABEL_CLIENT`] label: the only one it is served to. `None` (a container
    /// started before the label existed, or a bad label): it is served to no one.
    pub client: Option<Pubkey>,
}

/// The engine's streams of an exec: the command's output, and its input.
pub(super) type ExecOutput = Pin<Box<dyn Stream<Item = Result<LogOutput, BollardError>> + Send>>;
pub(super) type ExecInput = Pin<Box<dyn AsyncWrite + Send>>;

/// How often, and how many times, an exec whose output ended is asked for its exit code: the
/// engine records it a moment after the streams close.
const EXIT_CODE_POLL: Duration = Duration::from_millis(20);
const EXIT_CODE_POLLS: u32 = 500;

impl DockerEngine {
    /// The container of `lease` that this agent manages (the newest, should there be several).
    pub(super) async fn lease_container(
        &self,
        lease: &Pubkey,
    ) -> Result<Option<LeaseContainer>, BollardError> {
        let filters = HashMap::from([(
            "label".to_string(),
            vec![
                format!("{LABEL_MANAGED}={}", self.scope()),
                format!("{LABEL_LEASE}={lease}"),
            ],
        )]);
        let options = ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..Default::default()
        };
        let list = self.docker.list_containers(Some(options)).await?;
        Ok(list.into_iter().max_by_key(|c| c.created).and_then(|c| {
            let client = c.labels?.get(LABEL_CLIENT).and_then(|k| k.parse().ok());
            Some(LeaseContainer { id: c.id?, client })
        }))
    }

    /// The state and published ports of container `id`.
    pub(super) async fn lease_status(&self, id: &str) -> Result<LeaseStatus, BollardError> {
        let inspect = self
            .docker
            .inspect_container(id, None::<InspectContainerOptions>)
            .await?;
        Ok(lease_status(&inspect))
    }

    /// Container `id`'s stdout and stderr as they were printed; with `follow`, until it stops.
    pub(super) fn log_stream(
        &self,
        id: &str,
        tail: Option<u64>,
        since: i32,
        follow: bool,
    ) -> impl Stream<Item = Result<Bytes, BollardError>> + Send + 'static {
        let options = LogsOptions {
            follow,
            stdout: true,
            stderr: true,
            since,
            tail: tail.map_or_else(|| "all".to_string(), |n| n.to_string()),
            ..Default::default()
        };
        self.docker
            .logs(id, Some(options))
            .map(|chunk| chunk.map(LogOutput::into_bytes))
    }

    /// The engine's tar archive of `path` in container `id`, running or not.
    pub(super) fn archive(
        &self,
        id: &str,
        path: &str,
    ) -> impl Stream<Item = Result<Bytes, BollardError>> + Send + 'static {
        let options = DownloadFromContainerOptions {
            path: path.to_string(),
        };
        self.docker.download_from_container(id, Some(options))
    }

    /// Prepares `cmd` in container `id`, attached to its three streams, on a terminal of size
    /// `tty` if given (else none), as the container's user and unprivileged; returns the exec's
    /// id.
    pub(super) async fn create_exec(
        &self,
        id: &str,
        cmd: Vec<String>,
        tty: Option<TermSize>,
    ) -> Result<String, BollardError> {
        let config = ExecConfig {
            attach_stdin: Some(true),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            tty: Some(tty.is_some()),
            // The terminal's size from its creation on (engines from API 1.42; the session
            // resizes it after the start too), and what `docker exec -t` gives a terminal
            // session, so that programs draw for it.
            console_size: tty.map(|s| vec![usize::from(s.rows), usize::from(s.cols)]),
            env: tty.map(|_| vec!["TERM=xterm-256color".to_string()]),
            cmd: Some(cmd),
            privileged: Some(false),
            ..Default::default()
        };
        Ok(self.docker.create_exec(id, config).await?.id)
    }

    /// Starts exec `exec_id` (on a terminal when `tty`): its output, and its input.
    pub(super) async fn start_exec(
        &self,
        exec_id: &str,
        tty: bool,
    ) -> Result<(ExecOutput, ExecInput), BollardError> {
        let options = StartExecOptions {
            detach: false,
            tty,
            output_capacity: None,
        };
        match self.docker.start_exec(exec_id, Some(options)).await? {
            StartExecResults::Attached { output, input } => Ok((output, input)),
            StartExecResults::Detached => Err(BollardError::DockerStreamError {
                error: "the engine started the exec detached".into(),
            }),
        }
    }

    /// Sets the terminal size of exec `exec_id`, started with a TTY.
    pub(super) async fn resize_exec(
        &self,
        exec_id: &str,
        size: TermSize,
    ) -> Result<(), BollardError> {
        let options = ResizeExecOptions {
            h: i32::from(size.rows),
            w: i32::from(size.cols),
        };
        self.docker.resize_exec(exec_id, options).await
    }

    /// The exit code of exec `exec_id`, whose output has ended.
    pub(super) async fn exec_exit_code(&self, exec_id: &str) -> Result<i64, BollardError> {
        for _ in 0..EXIT_CODE_POLLS {
            let inspect = self.docker.inspect_exec(exec_id).await?;
            if let (Some(false), Some(code)) = (inspect.running, inspect.exit_code) {
                return Ok(code);
            }
            tokio::time::sleep(EXIT_CODE_POLL).await;
        }
        Err(BollardError::DockerStreamError {
            error: format!("exec {exec_id} reports no exit code"),
        })
    }
}

/// The engine's HTTP status in `e`, where it answered with one.
pub(super) fn engine_status(e: &BollardError) -> Option<u16> {
    match e {
        BollardError::DockerResponseServerError { status_code, .. } => Some(*status_code),
        _ => None,
    }
}

/// What `GET /v1/leases/{lease}` says of an inspected container.
fn lease_status(inspect: &ContainerInspectResponse) -> LeaseStatus {
    let state = inspect.state.as_ref();
    let status = match state.and_then(|s| s.status) {
        Some(ContainerStateStatusEnum::CREATED) => ContainerStatus::Created,
        Some(ContainerStateStatusEnum::EXITED) => ContainerStatus::Exited {
            exit_code: state.and_then(|s| s.exit_code).unwrap_or_default(),
        },
        Some(ContainerStateStatusEnum::REMOVING | ContainerStateStatusEnum::DEAD) => {
            ContainerStatus::Gone
        }
        _ => ContainerStatus::Running,
    };
    let ports = inspect
        .network_settings
        .as_ref()
        .and_then(|n| n.ports.as_ref())
        .map(crate::network::published_ports)
        .unwrap_or_default();
    LeaseStatus {
        state: status,
        ports,
        scratch: SCRATCH_DIR.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use bollard::models::{ContainerState, NetworkSettings};

    use super::*;

    #[test]
    fn an_exited_container_reports_its_exit_code_and_a_dead_one_is_gone() {
        let inspect = |status, exit_code| ContainerInspectResponse {
            state: Some(ContainerState {
                status: Some(status),
                exit_code: Some(exit_code),
                ..Default::default()
            }),
            network_settings: Some(NetworkSettings::default()),
            ..Default::default()
        };
        let exited = lease_status(&inspect(ContainerStateStatusEnum::EXITED, 3));
        assert_eq!(exited.state, ContainerStatus::Exited { exit_code: 3 });
        assert_eq!(exited.scratch, SCRATCH_DIR);
        assert!(exited.ports.is_empty());
        for (status, expected) in [
            (ContainerStateStatusEnum::RUNNING, ContainerStatus::Running),
            (ContainerStateStatusEnum::PAUSED, ContainerStatus::Running),
            (ContainerStateStatusEnum::CREATED, ContainerStatus::Created),
            (ContainerStateStatusEnum::DEAD, ContainerStatus::Gone),
            (ContainerStateStatusEnum::REMOVING, ContainerStatus::Gone),
        ] {
            assert_eq!(lease_status(&inspect(status, 0)).state, expected);
        }
    }
}
