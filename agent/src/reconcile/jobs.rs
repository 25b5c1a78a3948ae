//! Container work that can take long — opening the environment, pulling the image, creating and
//! starting the container, stopping it, keeping its logs and removing it — runs beside the
//! reconcile loop, one job per lease at a time (as a kube-rs controller hands each object to its
//! own reconcile). The loop never waits for a registry or an engine: it starts jobs, and each
//! tick takes the results of the ones that finished.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use gpu_market_core::lease::exit;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::chain::{Chain, Key};
use crate::config::ImageBudget;
use crate::env::fetch_env;
use crate::retention;
use crate::runtime::{
    BindMount, ContainerRuntime, ContainerSpec, Credentials, RuntimeError, SCRATCH_DIR,
};

/// How a job ended.
#[derive(Debug)]
pub enum Outcome {
    /// The lease's container runs: `id`, started at `at`, its image had in `pulled_in`.
    Started {
        id: String,
        at: Instant,
        pulled_in: Duration,
    },
    /// The lease's container is created, not started: what `allocate` confirming starts.
    Prepared(Prepared),
    /// The lease cannot run; its final proof carries `exit_code` (one of core's `exit` codes)
    /// and its client is refunded the unused escrow.
    Refused { exit_code: i32, reason: String },
    /// The container was stopped.
    Stopped,
    /// The container's logs were kept and the container removed.
    CleanedUp,
    /// A stop or clean-up failed (the engine did not answer): planned again next tick.
    Failed(RuntimeError),
}

/// A lease's container, created while its `allocate` confirmed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    pub id: String,
    /// How long the environment and the image took.
    pub pulled_in: Duration,
}

/// The longest one engine call of a job (create, start, remove, keeping logs) may take; a stop
/// gets this beyond its grace period. An engine that hangs longer ends the job: a start is
/// refused (`ENGINE_REFUSED`), a stop or clean-up planned again.
pub const ENGINE_CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// What a readying job (the environment, the image, the container) has had so far: the loop
/// reads it to end a wait that outlasts what the lease allows (`Action::Cancel`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Readying {
    /// The sealed environment was opened (or the bid has none).
    pub env: bool,
    /// The image is on the machine.
    pub pulled: bool,
}

impl Readying {
    /// The exit code of a lease whose readying ends now, unfinished: what it still lacked.
    pub fn lacking(self) -> i32 {
        if !self.env {
            exit::ENVIRONMENT_UNAVAILABLE
        } else if !self.pulled {
            exit::IMAGE_UNAVAILABLE
        } else {
            exit::ENGINE_REFUSED
        }
    }
}

/// A readying job's [`Readying`], shared between the job and the loop.
#[derive(Debug, Clone, Default)]
pub struct Progress(Arc<std::sync::Mutex<Readying>>);

impl Progress {
    pub fn get(&self) -> Readying {
        *self.0.lock().expect("progress lock")
    }

    fn update(&self, f: impl FnOnce(&mut Readying)) {
        f(&mut self.0.lock().expect("progress lock"))
    }
}

/// What starting one lease's container takes.
pub struct StartJob {
    pub runtime: Arc<dyn ContainerRuntime>,
    pub image_ref: String,
    pub digest: [u8; 32],
    pub credentials: Option<Credentials>,
    pub budget: ImageBudget,
    /// The images the machine advertises as cached: never collected.
    pub cached_images: Vec<[u8; 32]>,
    /// Where the bid's sealed environment is read, and the key that opens it.
    pub chain: Arc<dyn Chain>,
    pub bid: Key,
    pub env_hash: [u8; 32],
    pub env_key: Arc<solana_keypair::Keypair>,
    /// The container to run. Its environment holds the host's variables (a shared GPU's MPS
    /// settings), which the lease's own go before and cannot override.
    pub spec: ContainerSpec,
    /// Variables the lease's own environment may override: the launch conventions of its GPUs
    /// (`gpu::launch`).
    pub launch: Vec<(String, String)>,
    /// What the agent keeps of the lease for its client: its scratch volume, mounted before the
    /// container is created.
    pub retained: retention::Retained,
    /// The lease's own MPS daemon (a lease that shares a GPU), started before the container is
    /// created.
    pub mps: Option<crate::gpu::mps::LeaseMps>,
    /// What it has had so far, for the loop to read.
    pub progress: Progress,
}

/// The jobs under way: per lease, and per stray container being removed.
#[derive(Default)]
pub struct Jobs {
    leases: BTreeMap<Key, JoinHandle<Outcome>>,
    /// The progress of the lease jobs that ready a container.
    readying: BTreeMap<Key, Progress>,
    strays: BTreeMap<String, JoinHandle<Outcome>>,
    /// Notified as each lease job finishes: the loop takes its result at once rather than at
    /// its next poll.
    done: Arc<Notify>,
}

impl Jobs {
    /// Leases with a job under way.
    pub fn busy(&self) -> BTreeSet<Key> {
        self.leases.keys().copied().collect()
    }

    /// The leases whose container is being readied, with what each has had so far.
    pub fn readying(&self) -> BTreeMap<Key, Readying> {
        self.readying
            .iter()
            .filter(|(k, _)| self.leases.contains_key(k))
            .map(|(k, p)| (*k, p.get()))
            .collect()
    }

    /// Runs the readying `job` (a [`create`] or a [`start`]) for `lease` beside the loop,
    /// unless a job already runs for it; its progress is read through `progress`.
    pub fn spawn_readying(
        &mut self,
        lease: Key,
        progress: Progress,
        job: impl std::future::Future<Output = Outcome> + Send + 'static,
    ) {
        if !self.leases.contains_key(&lease) {
            self.readying.insert(lease, progress);
            self.spawn_for(lease, job);
        }
    }

    /// Ends `lease`'s readying job where it is (it waited longer than the lease allows);
    /// whether one ran. A container it created is found again by its lease label and removed as
    /// a stray.
    pub fn cancel(&mut self, lease: Key) -> bool {
        let cancelled = self.readying.remove(&lease).is_some();
        if cancelled {
            if let Some(h) = self.leases.remove(&lease) {
                h.abort();
            }
        }
        cancelled
    }

    /// Runs `job` for `lease` beside the loop, unless one already runs for it.
    pub fn spawn_for(
        &mut self,
        lease: Key,
        job: impl std::future::Future<Output = Outcome> + Send + 'static,
    ) {
        let done = self.done.clone();
        self.leases.entry(lease).or_insert_with(|| {
            tokio::spawn(async move {
                let outcome = job.await;
                done.notify_one();
                outcome
            })
        });
    }

    /// Whether a lease job has finished and waits to be taken.
    #[cfg(test)]
    pub fn any_finished(&self) -> bool {
        self.leases.values().any(|h| h.is_finished())
    }

    /// Whether every job has finished.
    #[cfg(test)]
    pub fn all_finished(&self) -> bool {
        self.leases
            .values()
            .chain(self.strays.values())
            .all(|h| h.is_finished())
    }

    /// Completes when a lease job has finished since the last call.
    pub async fn one_finished(&self) {
        self.done.notified().await
    }

    /// Stops and removes the stray container `id` beside the loop, unless that already runs.
    pub fn remove_stray(&mut self, runtime: &Arc<dyn ContainerRuntime>, id: &str, grace: Duration) {
        let runtime = runtime.clone();
        let owned = id.to_string();
        self.strays.entry(id.to_string()).or_insert_with(|| {
            tokio::spawn(async move {
                match stop_and_remove(runtime.as_ref(), &owned, grace).await {
                    Ok(()) => Outcome::CleanedUp,
                    Err(e) => Outcome::Failed(e),
                }
            })
        });
    }

    /// The outcomes of the lease jobs that finished since the last call (stray removals are
    /// only logged).
    pub async fn finished(&mut self) -> Vec<(Key, Outcome)> {
        let done: Vec<Key> = self
            .leases
            .iter()
            .filter(|(_, h)| h.is_finished())
            .map(|(k, _)| *k)
            .collect();
        let mut out = Vec::with_capacity(done.len());
        for key in done {
            let handle = self.leases.remove(&key).expect("listed above");
            self.readying.remove(&key);
            out.push((key, joined(handle.await)));
        }
        let strays: Vec<String> = self
            .strays
            .iter()
            .filter(|(_, h)| h.is_finished())
            .map(|(k, _)| k.clone())
            .collect();
        for id in strays {
            let handle = self.strays.remove(&id).expect("listed above");
            match joined(handle.await) {
                Outcome::Failed(e) => {
                    tracing::warn!(container = %id, error = %e, "removing a stray container failed")
                }
                _ => tracing::info!(container = %id, "removed a container no lease accounts for"),
            }
        }
        out
    }
}

fn joined(r: Result<Outcome, tokio::task::JoinError>) -> Outcome {
    r.unwrap_or_else(|e| Outcome::Refused {
        exit_code: exit::ENGINE_REFUSED,
        reason: format!("the start task failed: {e}"),
    })
}

/// Opens the environment, pulls the image within the budget, creates and starts the container.
/// Waits for a missing environment file or a registry that does not answer, with backoff, up to
/// the budget's pull timeout; everything that cannot get better refuses the lease at once.
pub async fn start(job: StartJob) -> Outcome {
    let runtime = job.runtime.clone();
    match create(job).await {
        Outcome::Prepared(p) => start_prepared(runtime, p).await,
        refused => refused,
    }
}

/// What [`start`] does up to the container's start: run while `allocate` confirms, so that
/// only the start is left once it has.
pub async fn create(job: StartJob) -> Outcome {
    let began = Instant::now();
    let env = match prepare(&job, began + job.budget.pull_timeout).await {
        Ok(env) => env,
        Err(refusal) => return refusal,
    };
    let pulled_in = began.elapsed();
    let mut spec = job.spec;
    // The mount is a system call that can block: on a blocking thread, beside the loop.
    let retained = job.retained;
    match crate::off_runtime(move || retained.prepare()).await {
        Ok(Some(scratch)) => {
            spec.binds.push(BindMount {
                host: scratch,
                container: SCRATCH_DIR.into(),
                read_only: false,
            });
            spec.sandbox.scratch_bytes = 0;
        }
        Ok(None) => {}
        Err(e) => return refused(exit::ENGINE_REFUSED, e.to_string()),
    }
    // Its own MPS daemon, limits set, before its container exists.
    if let Some(daemon) = job.mps {
        if let Err(e) = crate::off_runtime(move || daemon.start()).await {
            return refused(exit::ISOLATION_UNAVAILABLE, e.to_string());
        }
    }
    let host = std::mem::take(&mut spec.env);
    let set = |key: &String| env.iter().chain(&host).any(|(k, _)| k == key);
    spec.env = job
        .launch
        .iter()
        .filter(|(key, _)| !set(key))
        .cloned()
        .collect();
    spec.env.extend(
        env.iter()
            .filter(|(key, _)| !host.iter().any(|(k, _)| k == key))
            .cloned(),
    );
    spec.env.extend(host);
    match engine_call("create", job.runtime.create(&spec)).await {
        Ok(id) => Outcome::Prepared(Prepared { id, pulled_in }),
        Err(e) => refused(exit::ENGINE_REFUSED, e.to_string()),
    }
}

/// Starts a container [`create`] made.
pub async fn start_prepared(runtime: Arc<dyn ContainerRuntime>, p: Prepared) -> Outcome {
    match engine_call("start", runtime.start(&p.id)).await {
        Ok(()) => Outcome::Started {
            id: p.id,
            at: Instant::now(),
            pulled_in: p.pulled_in,
        },
        Err(e) => refused(exit::ENGINE_REFUSED, e.to_string()),
    }
}

/// `call` (the engine operation `op`), given up after [`ENGINE_CALL_TIMEOUT`].
async fn engine_call<T>(
    op: &'static str,
    call: impl std::future::Future<Output = Result<T, RuntimeError>>,
) -> Result<T, RuntimeError> {
    tokio::time::timeout(ENGINE_CALL_TIMEOUT, call)
        .await
        .unwrap_or(Err(RuntimeError::Hung {
            op,
            after: ENGINE_CALL_TIMEOUT,
        }))
}

fn refused(exit_code: i32, reason: String) -> Outcome {
    Outcome::Refused { exit_code, reason }
}

/// The environment and the image, side by side, both by `deadline`; each retried with backoff
/// while it may get better. The client may still be storing its sealed copy on chain: the
/// environment is looked for again while the image pulls. The loop ends a wait sooner where the
/// lease allows less (`Action::Cancel`).
async fn prepare(job: &StartJob, deadline: Instant) -> Result<Vec<(String, String)>, Outcome> {
    let budget = job.budget.pull_timeout.as_secs();
    let env = async {
        let mut backoff = Duration::from_millis(500);
        loop {
            let found = fetch_env(job.chain.as_ref(), job.bid, &job.env_hash, &job.env_key)
                .await
                .map_err(|e| refused(exit::ENVIRONMENT_UNAVAILABLE, e.to_string()))?;
            if let Some(env) = found {
                job.progress.update(|r| r.env = true);
                return Ok(env);
            }
            if Instant::now() + backoff > deadline {
                return Err(refused(
                    exit::ENVIRONMENT_UNAVAILABLE,
                    format!("the sealed environment did not arrive within {budget} s"),
                ));
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(15));
        }
    };
    let image = async {
        let mut backoff = Duration::from_millis(500);
        let too_late = || {
            refused(
                exit::IMAGE_UNAVAILABLE,
                format!("{} was not pulled within {budget} s", job.image_ref),
            )
        };
        loop {
            let pull = job.runtime.pull(
                &job.image_ref,
                &job.digest,
                job.credentials.as_ref(),
                job.budget.max_image_bytes,
            );
            match tokio::time::timeout_at(deadline, pull).await {
                Ok(Ok(())) => {
                    job.progress.update(|r| r.pulled = true);
                    collect_images(job).await;
                    return Ok(());
                }
                Ok(Err(e)) if !may_get_better(&e) => {
                    return Err(refused(exit::IMAGE_UNAVAILABLE, e.to_string()))
                }
                Ok(Err(e)) => {
                    tracing::warn!(image = %job.image_ref, error = %e, "pull failed; retrying")
                }
                Err(_) => return Err(too_late()),
            }
            if Instant::now() + backoff > deadline {
                return Err(too_late());
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(15));
        }
    };
    let (env, ()) = tokio::try_join!(env, image)?;
    Ok(env)
}

/// How long an image stays out of the store's collection after a lease last asked for it:
/// leases being readied beside this one have pulled theirs and not yet made a container.
pub const IMAGE_GRACE: Duration = Duration::from_secs(600);

/// Once `job`'s image is in the store: marks it used, and removes images no lease uses while
/// the store holds more than its budget. A failure is logged; the lease goes on.
async fn collect_images(job: &StartJob) {
    let collected = job
        .runtime
        .collect_images(
            &job.image_ref,
            &job.digest,
            &job.cached_images,
            job.budget.max_store_bytes,
            IMAGE_GRACE,
        )
        .await;
    match collected {
        Ok(0) => {}
        Ok(n) => tracing::info!(
            removed = n,
            "image store over its budget: unused images removed"
        ),
        Err(e) => tracing::warn!(error = %e, "collecting unused images failed"),
    }
}

/// Whether a failed pull may succeed if tried again: the engine or registry did not answer,
/// or answered with a server error. A reference that names no image, one the registry does not
/// have or will not give, and one over the size limit do not get better.
fn may_get_better(e: &RuntimeError) -> bool {
    use bollard::errors::Error as B;
    match e {
        RuntimeError::Connect { .. } => true,
        RuntimeError::Pull { source, .. } | RuntimeError::Engine { source, .. } => match source {
            B::DockerResponseServerError { status_code, .. } => *status_code >= 500,
            _ => true,
        },
        _ => false,
    }
}

/// Stops the container (SIGTERM, SIGKILL after `grace`).
pub async fn stop(runtime: Arc<dyn ContainerRuntime>, id: String, grace: Duration) -> Outcome {
    match stop_within(runtime.as_ref(), &id, grace).await {
        Ok(()) | Err(RuntimeError::NoSuchContainer(_)) => Outcome::Stopped,
        Err(e) => Outcome::Failed(e),
    }
}

/// Keeps the container's logs at `logs`, then stops and removes it.
pub async fn clean_up(
    runtime: Arc<dyn ContainerRuntime>,
    id: String,
    logs: PathBuf,
    grace: Duration,
) -> Outcome {
    let saved = async {
        tokio::fs::create_dir_all(logs.parent().expect("logs folder"))
            .await
            .map_err(|source| RuntimeError::Logs {
                path: logs.clone(),
                source,
            })?;
        engine_call("logs", runtime.save_logs(&id, &logs)).await
    };
    if let Err(e) = saved.await {
        tracing::warn!(container = %id, error = %e, "could not keep the container's logs");
    }
    match stop_and_remove(runtime.as_ref(), &id, grace).await {
        Ok(()) => Outcome::CleanedUp,
        Err(e) => Outcome::Failed(e),
    }
}

async fn stop_and_remove(
    runtime: &dyn ContainerRuntime,
    id: &str,
    grace: Duration,
) -> Result<(), RuntimeError> {
    match stop_within(runtime, id, grace).await {
        Ok(()) | Err(RuntimeError::NoSuchContainer(_)) => {}
        Err(e) => return Err(e),
    }
    match engine_call("remove", runtime.remove(id)).await {
        Ok(()) | Err(RuntimeError::NoSuchContainer(_)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Stops the container, the engine given its `grace` on top of [`ENGINE_CALL_TIMEOUT`].
async fn stop_within(
    runtime: &dyn ContainerRuntime,
    id: &str,
    grace: Duration,
) -> Result<(), RuntimeError> {
    match tokio::time::timeout(grace + ENGINE_CALL_TIMEOUT, runtime.stop(id, grace)).await {
        Ok(r) => r,
        Err(_) => Err(RuntimeError::Hung {
            op: "stop",
            after: grace + ENGINE_CALL_TIMEOUT,
        }),
    }
}
