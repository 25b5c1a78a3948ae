//! A container runtime that records every call and keeps its containers in memory, for tests.
//! A test makes a container finish with [`RecordingRuntime::exit`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;

use super::{
    ContainerRuntime, ContainerSpec, ContainerState, Credentials, ManagedContainer, RuntimeError,
    LABEL_LEASE, LABEL_MANAGED,
};

/// The exit code of a container stopped by SIGTERM (128 + 15).
pub const EXIT_SIGTERM: i64 = 143;

#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    Pull {
        reference: String,
        username: Option<String>,
    },
    Run {
        id: String,
    },
    Stop {
        id: String,
        grace: Duration,
    },
    Remove {
        id: String,
    },
    SaveLogs {
        id: String,
        path: PathBuf,
    },
}

#[derive(Debug, Clone)]
pub struct FakeContainer {
    pub spec: ContainerSpec,
    pub state: ContainerState,
    /// CPU time used up to `cpu_since`, and the rate (millicpus) it is used at since.
    pub cpu_ns: u64,
    pub cpu_millicpus: u64,
    pub cpu_since: tokio::time::Instant,
}

impl FakeContainer {
    fn cpu_used(&self) -> u64 {
        self.cpu_ns + (self.cpu_since.elapsed().as_nanos() as u64) * self.cpu_millicpus / 1_000
    }
}

#[derive(Default)]
pub struct RecordingRuntime {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    calls: Vec<Call>,
    containers: BTreeMap<String, FakeContainer>,
    next_id: u32,
    /// How long a CPU reading takes to answer (an engine answers at its next collection).
    stats_delay: std::time::Duration,
}

impl RecordingRuntime {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().expect("recording runtime lock")
    }

    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// Containers not yet removed.
    pub fn containers(&self) -> BTreeMap<String, FakeContainer> {
        self.lock().containers.clone()
    }

    /// From now on container `id` keeps `millicpus` of CPU busy, as its workload would.
    pub fn set_cpu_rate(&self, id: &str, millicpus: u64) {
        let mut s = self.lock();
        let c = s
            .containers
            .get_mut(id)
            .expect("set_cpu_rate: no such container");
        c.cpu_ns = c.cpu_used();
        c.cpu_millicpus = millicpus;
        c.cpu_since = tokio::time::Instant::now();
    }

    /// From now on a CPU reading answers only after `delay`, as an engine's stats request does.
    pub fn set_stats_delay(&self, delay: std::time::Duration) {
        self.lock().stats_delay = delay;
    }

    /// Makes container `id` finish with `code`, as a crash or a normal exit would.
    pub fn exit(&self, id: &str, code: i64) {
        let mut s = self.lock();
        let c = s.containers.get_mut(id).expect("exit: no such container");
        c.state = ContainerState::Exited { code };
    }
}

#[async_trait]
impl ContainerRuntime for RecordingRuntime {
    async fn pull(
        &self,
        image_ref: &str,
        digest: &[u8; 32],
        credentials: Option<&Credentials>,
    ) -> Result<(), RuntimeError> {
        let reference = super::pinned_reference(image_ref, digest)?;
        self.lock().calls.push(Call::Pull {
            reference,
            username: credentials.map(|c| c.username.clone()),
        });
        Ok(())
    }

    async fn run(&self, spec: &ContainerSpec) -> Result<String, RuntimeError> {
        let mut s = self.lock();
        s.next_id += 1;
        let id = format!("container-{}", s.next_id);
        let mut spec = spec.clone();
        spec.labels
            .insert(LABEL_MANAGED.to_string(), "true".to_string());
        s.containers.insert(
            id.clone(),
            FakeContainer {
                spec,
                state: ContainerState::Running,
                cpu_ns: 0,
                cpu_millicpus: 0,
                cpu_since: tokio::time::Instant::now(),
            },
        );
        s.calls.push(Call::Run { id: id.clone() });
        Ok(id)
    }

    async fn state(&self, id: &str) -> Result<ContainerState, RuntimeError> {
        self.lock()
            .containers
            .get(id)
            .map(|c| c.state)
            .ok_or_else(|| RuntimeError::NoSuchContainer(id.to_string()))
    }

    async fn stop(&self, id: &str, grace: Duration) -> Result<(), RuntimeError> {
        let mut s = self.lock();
        s.calls.push(Call::Stop {
            id: id.to_string(),
            grace,
        });
        let c = s
            .containers
            .get_mut(id)
            .ok_or_else(|| RuntimeError::NoSuchContainer(id.to_string()))?;
        if c.state == ContainerState::Running {
            c.state = ContainerState::Exited { code: EXIT_SIGTERM };
        }
        Ok(())
    }

    async fn remove(&self, id: &str) -> Result<(), RuntimeError> {
        let mut s = self.lock();
        s.calls.push(Call::Remove { id: id.to_string() });
        s.containers
            .remove(id)
            .map(drop)
            .ok_or_else(|| RuntimeError::NoSuchContainer(id.to_string()))
    }

    async fn save_logs(&self, id: &str, path: &Path) -> Result<u64, RuntimeError> {
        let text = format!("logs of {id}\n");
        self.lock().calls.push(Call::SaveLogs {
            id: id.to_string(),
            path: path.to_path_buf(),
        });
        std::fs::write(path, &text).map_err(|source| RuntimeError::Logs {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(text.len() as u64)
    }

    async fn managed(&self) -> Result<Vec<ManagedContainer>, RuntimeError> {
        Ok(self
            .lock()
            .containers
            .iter()
            .map(|(id, c)| ManagedContainer {
                id: id.clone(),
                lease: c.spec.labels.get(LABEL_LEASE).and_then(|l| l.parse().ok()),
            })
            .collect())
    }

    async fn cpu_usage_ns(&self, id: &str) -> Result<u64, RuntimeError> {
        let delay = self.lock().stats_delay;
        tokio::time::sleep(delay).await;
        self.lock()
            .containers
            .get(id)
            .map(FakeContainer::cpu_used)
            .ok_or_else(|| RuntimeError::NoSuchContainer(id.to_string()))
    }
}
