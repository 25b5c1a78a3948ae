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
    /// The store's collection after a pull: the image pulled, and the digests kept.
    CollectImages {
        reference: String,
        keep: Vec<[u8; 32]>,
    },
    Create {
        id: String,
    },
    Start {
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
    Pids {
        id: String,
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
    /// The host PIDs of its processes ([`RecordingRuntime::spawn_process`]).
    pub pids: Vec<u32>,
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
    next_pid: u32,
    /// How long a CPU reading takes to answer (an engine answers at its next collection).
    stats_delay: std::time::Duration,
    /// Faults a test injects.
    faults: Faults,
}

/// Faults [`RecordingRuntime`] plays on request, as a real engine or registry shows them.
#[derive(Default)]
struct Faults {
    /// Image references (as leases name them) whose pull never finishes.
    stalled_pulls: Vec<String>,
    /// Image references whose pull the registry refuses.
    refused_pulls: Vec<String>,
    /// How long every pull takes.
    pull_delay: Duration,
    /// The size of each image, by reference (0 when not given).
    image_bytes: BTreeMap<String, u64>,
    /// Every call fails as against an engine that does not answer.
    engine_down: bool,
    /// The engine refuses to create containers, with this message.
    refused_creates: Option<String>,
    /// The engine takes create requests and never answers them.
    hung_creates: bool,
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

    /// A new process in container `id`; returns its host PID.
    pub fn spawn_process(&self, id: &str) -> u32 {
        let mut s = self.lock();
        s.next_pid += 1;
        let pid = 10_000 + s.next_pid;
        s.containers
            .get_mut(id)
            .expect("spawn_process: no such container")
            .pids
            .push(pid);
        pid
    }

    /// From now on a CPU reading answers only after `delay`, as an engine's stats request does.
    pub fn set_stats_delay(&self, delay: std::time::Duration) {
        self.lock().stats_delay = delay;
    }

    /// From now on pulls of `image_ref` never finish (a registry that stalls).
    pub fn stall_pulls(&self, image_ref: &str) {
        self.lock().faults.stalled_pulls.push(image_ref.to_string());
    }

    /// From now on every pull takes `delay` (a big image, a slow registry).
    pub fn delay_pulls(&self, delay: Duration) {
        self.lock().faults.pull_delay = delay;
    }

    /// Image `image_ref` is `bytes` big.
    pub fn set_image_size(&self, image_ref: &str, bytes: u64) {
        self.lock()
            .faults
            .image_bytes
            .insert(image_ref.to_string(), bytes);
    }

    /// From now on pulls of `image_ref` fail (an image the registry does not have).
    pub fn refuse_pulls(&self, image_ref: &str) {
        self.lock().faults.refused_pulls.push(image_ref.to_string());
    }

    /// The engine stops answering (`true`) or comes back (`false`); its containers keep running
    /// meanwhile, as with Docker's live-restore.
    pub fn set_engine_down(&self, down: bool) {
        self.lock().faults.engine_down = down;
    }

    /// From now on the engine refuses to create containers (e.g. more CPUs than the host has).
    pub fn refuse_creates(&self, message: &str) {
        self.lock().faults.refused_creates = Some(message.to_string());
    }

    /// From now on (`true`) the engine takes create requests and never answers them (a wedged
    /// daemon); `false`: it answers the requests after this one.
    pub fn hang_creates(&self, hang: bool) {
        self.lock().faults.hung_creates = hang;
    }

    fn reachable(&self) -> Result<(), RuntimeError> {
        if self.lock().faults.engine_down {
            return Err(RuntimeError::Connect {
                socket: "recording".into(),
                source: bollard::errors::Error::RequestTimeoutError,
            });
        }
        Ok(())
    }

    /// Makes container `id` finish with `code`, as a crash or a normal exit would.
    pub fn exit(&self, id: &str, code: i64) {
        let mut s = self.lock();
        let c = s.containers.get_mut(id).expect("exit: no such container");
        c.state = ContainerState::Exited { code };
    }
}

impl Inner {
    /// A new container for `spec`, created but not started, labelled as the engine labels the
    /// agent's.
    fn insert(&mut self, spec: &ContainerSpec) -> String {
        self.next_id += 1;
        let id = format!("container-{}", self.next_id);
        let mut spec = spec.clone();
        spec.labels
            .insert(LABEL_MANAGED.to_string(), "true".to_string());
        self.containers.insert(
            id.clone(),
            FakeContainer {
                spec,
                state: ContainerState::Created,
                cpu_ns: 0,
                cpu_millicpus: 0,
                cpu_since: tokio::time::Instant::now(),
                pids: Vec::new(),
            },
        );
        id
    }
}

#[async_trait]
impl ContainerRuntime for RecordingRuntime {
    async fn pull(
        &self,
        image_ref: &str,
        digest: &[u8; 32],
        credentials: Option<&Credentials>,
        max_bytes: u64,
    ) -> Result<(), RuntimeError> {
        self.reachable()?;
        let reference = super::pinned_reference(image_ref, digest)?;
        let (stalled, refused, bytes, delay) = {
            let mut s = self.lock();
            s.calls.push(Call::Pull {
                reference: reference.clone(),
                username: credentials.map(|c| c.username.clone()),
            });
            let f = &s.faults;
            (
                f.stalled_pulls.iter().any(|i| i == image_ref),
                f.refused_pulls.iter().any(|i| i == image_ref),
                f.image_bytes.get(image_ref).copied().unwrap_or(0),
                f.pull_delay,
            )
        };
        tokio::time::sleep(delay).await;
        if bytes > max_bytes {
            return Err(RuntimeError::ImageTooLarge {
                image: reference,
                bytes,
                max_bytes,
            });
        }
        if stalled {
            std::future::pending::<()>().await;
        }
        if refused {
            return Err(RuntimeError::Pull {
                image: reference,
                source: bollard::errors::Error::DockerResponseServerError {
                    status_code: 404,
                    message: "manifest unknown".into(),
                },
            });
        }
        Ok(())
    }

    /// Records the call; the recording runtime has no image store to collect.
    async fn collect_images(
        &self,
        image_ref: &str,
        digest: &[u8; 32],
        keep: &[[u8; 32]],
        _max_store_bytes: u64,
        _grace: Duration,
    ) -> Result<usize, RuntimeError> {
        self.reachable()?;
        let reference = super::pinned_reference(image_ref, digest)?;
        self.lock().calls.push(Call::CollectImages {
            reference,
            keep: keep.to_vec(),
        });
        Ok(0)
    }

    async fn create(&self, spec: &ContainerSpec) -> Result<String, RuntimeError> {
        self.reachable()?;
        if self.lock().faults.hung_creates {
            std::future::pending::<()>().await;
        }
        let mut s = self.lock();
        if let Some(message) = s.faults.refused_creates.clone() {
            return Err(RuntimeError::Engine {
                op: "create",
                source: bollard::errors::Error::DockerResponseServerError {
                    status_code: 400,
                    message,
                },
            });
        }
        let id = s.insert(spec);
        s.calls.push(Call::Create { id: id.clone() });
        Ok(id)
    }

    async fn start(&self, id: &str) -> Result<(), RuntimeError> {
        self.reachable()?;
        let mut s = self.lock();
        let c = s
            .containers
            .get_mut(id)
            .ok_or_else(|| RuntimeError::NoSuchContainer(id.to_string()))?;
        if c.state == ContainerState::Created {
            c.state = ContainerState::Running;
            c.cpu_since = tokio::time::Instant::now();
        }
        s.calls.push(Call::Start { id: id.to_string() });
        Ok(())
    }

    async fn state(&self, id: &str) -> Result<ContainerState, RuntimeError> {
        self.reachable()?;
        self.lock()
            .containers
            .get(id)
            .map(|c| c.state)
            .ok_or_else(|| RuntimeError::NoSuchContainer(id.to_string()))
    }

    async fn stop(&self, id: &str, grace: Duration) -> Result<(), RuntimeError> {
        self.reachable()?;
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
        self.reachable()?;
        let mut s = self.lock();
        s.calls.push(Call::Remove { id: id.to_string() });
        s.containers
            .remove(id)
            .map(drop)
            .ok_or_else(|| RuntimeError::NoSuchContainer(id.to_string()))
    }

    async fn save_logs(&self, id: &str, path: &Path) -> Result<u64, RuntimeError> {
        self.reachable()?;
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
        self.reachable()?;
        Ok(self
            .lock()
            .containers
            .iter()
            .map(|(id, c)| ManagedContainer {
                id: id.clone(),
                lease: c.spec.labels.get(LABEL_LEASE).and_then(|l| l.parse().ok()),
                listed: match c.state {
                    ContainerState::Exited { .. } => None,
                    listed => Some(listed),
                },
                // RECORDING RUNTIME: host ports from 40,000, one per published port in order.
                host_ports: (0..c.spec.network.ports.len() as u16)
                    .map(|i| 40_000 + i)
                    .collect(),
            })
            .collect())
    }

    async fn cpu_usage_ns(&self, id: &str) -> Result<u64, RuntimeError> {
        self.reachable()?;
        let delay = self.lock().stats_delay;
        tokio::time::sleep(delay).await;
        self.lock()
            .containers
            .get(id)
            .map(FakeContainer::cpu_used)
            .ok_or_else(|| RuntimeError::NoSuchContainer(id.to_string()))
    }

    async fn pids(&self, id: &str) -> Result<Vec<u32>, RuntimeError> {
        self.reachable()?;
        let mut s = self.lock();
        s.calls.push(Call::Pids { id: id.to_string() });
        let c = s
            .containers
            .get(id)
            .ok_or_else(|| RuntimeError::NoSuchContainer(id.to_string()))?;
        Ok(match c.state {
            ContainerState::Running => c.pids.clone(),
            _ => Vec::new(),
        })
    }
}
