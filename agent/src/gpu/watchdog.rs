//! Every driver call of a GPU on a thread of that GPU ([`Watchdog`]), never on the agent's
//! loop: a call the driver does not answer within [`CALL_BUDGET`] (a GPU in reset, a driver
//! stuck in the kernel) is reported as hung and the loop goes on without it. Until that call
//! returns, every call to the GPU fails at once with [`GpuError::Hung`]: the GPU's leases are
//! metered with its last reading and their proofs go on, and `/healthz` names the GPU. The
//! other GPUs, each on its own thread, are not held up.
//!
//! A call whose caller gave up before its thread took it is dropped, not run late (an `apply`
//! the loop counted as failed must not land behind its back); one already running when its
//! budget ran out may still land, and the loop's next read-back sees what did.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use gpu_market_core::overclock::OverclockTerms;

use super::{Clocks, GpuBackend, GpuError, GpuFault, GpuInfo, ProcessUse, Sample};

/// The longest the loop waits for one driver call. NVML's calls answer in milliseconds; a
/// call that takes seconds is a GPU in trouble, and the loop has every lease's proofs to send.
pub const CALL_BUDGET: Duration = Duration::from_secs(2);

/// A driver call's work on the GPU's thread.
type Run = Box<dyn FnOnce(&dyn GpuBackend) + Send>;

/// One driver call, named for the reports.
struct Job {
    call: &'static str,
    run: Run,
}

/// The call a GPU's thread runs now, and since when.
type Busy = Arc<Mutex<Option<(&'static str, Instant)>>>;

/// One GPU's thread: where its calls go, and what it is doing.
struct Lane {
    jobs: mpsc::Sender<Job>,
    busy: Busy,
}

/// A [`GpuBackend`] whose driver calls each run on a thread of their GPU, waited for at most
/// [`CALL_BUDGET`] (see the module).
pub struct Watchdog {
    infos: Vec<GpuInfo>,
    inner: Arc<dyn GpuBackend>,
    lanes: Vec<Lane>,
}

impl Watchdog {
    /// Starts a thread for each GPU of `inner`. The threads see the tokio runtime of the caller,
    /// if any (the SIMULATED GPUs read its clock).
    pub fn new(inner: Arc<dyn GpuBackend>) -> Self {
        let infos = inner.gpus();
        let runtime = tokio::runtime::Handle::try_current().ok();
        let lanes = infos
            .iter()
            .map(|info| {
                let (jobs, queue) = mpsc::channel::<Job>();
                let busy = Busy::default();
                let (backend, working, runtime) = (inner.clone(), busy.clone(), runtime.clone());
                let index = info.index;
                std::thread::Builder::new()
                    .name(format!("gpu-{index}"))
                    .spawn(move || {
                        let _runtime = runtime.as_ref().map(|r| r.enter());
                        for job in queue {
                            serve(index, job, backend.as_ref(), &working);
                        }
                    })
                    .expect("spawning a GPU thread");
                Lane { jobs, busy }
            })
            .collect();
        Watchdog {
            infos,
            inner,
            lanes,
        }
    }

    /// The GPUs whose driver call has been running for longer than the budget.
    pub fn hung(&self) -> Vec<u32> {
        self.infos
            .iter()
            .zip(&self.lanes)
            .filter(|(_, lane)| stuck(lane).is_some())
            .map(|(info, _)| info.index)
            .collect()
    }

    /// Runs `f` on GPU `index`'s thread and waits for it at most [`CALL_BUDGET`]; fails at once
    /// while an earlier call on that GPU is past its budget.
    fn call<T: Send + 'static>(
        &self,
        index: u32,
        call: &'static str,
        f: impl FnOnce(&dyn GpuBackend) -> Result<T, GpuError> + Send + 'static,
    ) -> Result<T, GpuError> {
        let Some(lane) = self.lane(index) else {
            return Err(GpuError::NoSuchGpu(index));
        };
        if let Some((call, since)) = stuck(lane) {
            return Err(hung(index, call, since));
        }
        let waited_from = Instant::now();
        let (answer, answered) = mpsc::sync_channel(1);
        let abandoned = Arc::new(AtomicBool::new(false));
        let gave_up = abandoned.clone();
        let run: Run = Box::new(move |gpu: &dyn GpuBackend| {
            if !gave_up.load(Ordering::SeqCst) {
                let _ = answer.send(f(gpu));
            }
        });
        if lane.jobs.send(Job { call, run }).is_err() {
            return Err(lost(index, call));
        }
        match answered.recv_timeout(CALL_BUDGET) {
            Ok(result) => result,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                abandoned.store(true, Ordering::SeqCst);
                // The call on the thread (this one, or one before it) counts as hung from now:
                // its thread may have taken it a moment after this wait began.
                let busy = {
                    let mut busy = lane.busy.lock().expect("GPU thread state");
                    if let Some((_, since)) = busy.as_mut() {
                        *since = (*since).min(waited_from);
                    }
                    *busy
                };
                let (call, since) = busy.unwrap_or((call, waited_from));
                let e = hung(index, call, since);
                tracing::error!(gpu = index, error = %e, "a GPU driver call hangs: the GPU's calls fail until it returns; its leases are metered with its last reading");
                Err(e)
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(lost(index, call)),
        }
    }

    fn lane(&self, index: u32) -> Option<&Lane> {
        let at = self.infos.iter().position(|i| i.index == index)?;
        self.lanes.get(at)
    }
}

/// Runs `job` on GPU `index`'s thread, noting what runs in `busy`; a panic in the driver
/// binding fails the call, not the thread.
fn serve(index: u32, job: Job, gpu: &dyn GpuBackend, busy: &Busy) {
    let started = Instant::now();
    *busy.lock().expect("GPU thread state") = Some((job.call, started));
    let _ = std::panic::catch_unwind(AssertUnwindSafe(|| (job.run)(gpu)));
    *busy.lock().expect("GPU thread state") = None;
    let took = started.elapsed();
    if took >= CALL_BUDGET {
        tracing::warn!(
            gpu = index,
            call = job.call,
            secs = took.as_secs_f64(),
            "a hung GPU driver call returned: the GPU is called again"
        );
    }
}

/// The call `lane`'s thread has been running for longer than the budget, and since when.
fn stuck(lane: &Lane) -> Option<(&'static str, Instant)> {
    let busy = *lane.busy.lock().expect("GPU thread state");
    busy.filter(|(_, since)| since.elapsed() >= CALL_BUDGET)
}

fn hung(index: u32, call: &'static str, since: Instant) -> GpuError {
    GpuError::Hung {
        index,
        call,
        secs: since.elapsed().as_secs(),
    }
}

/// A call whose thread answered nothing: the binding panicked in it.
fn lost(index: u32, call: &'static str) -> GpuError {
    GpuError::Nvml {
        index,
        call,
        message: "the driver binding panicked".into(),
    }
}

impl GpuBackend for Watchdog {
    fn gpus(&self) -> Vec<GpuInfo> {
        self.infos.clone()
    }

    fn apply(&self, index: u32, settings: &OverclockTerms) -> Result<(), GpuError> {
        let settings = *settings;
        self.call(index, "apply", move |g| g.apply(index, &settings))
    }

    fn read_back(&self, index: u32) -> Result<OverclockTerms, GpuError> {
        self.call(index, "read_back", move |g| g.read_back(index))
    }

    fn reset(&self, index: u32) -> Result<(), GpuError> {
        self.call(index, "reset", move |g| g.reset(index))
    }

    fn sample(&self, index: u32) -> Result<Sample, GpuError> {
        self.call(index, "sample", move |g| g.sample(index))
    }

    fn clocks(&self, index: u32) -> Result<Clocks, GpuError> {
        self.call(index, "clocks", move |g| g.clocks(index))
    }

    fn processes(&self, index: u32) -> Result<Vec<ProcessUse>, GpuError> {
        self.call(index, "processes", move |g| g.processes(index))
    }

    /// Not a driver call (the SIMULATED GPUs take it as their load; real ones ignore it).
    fn observe_workload(&self, index: u32, load_permille: u16) {
        self.inner.observe_workload(index, load_permille)
    }

    fn follows_workload(&self) -> bool {
        self.inner.follows_workload()
    }

    /// Blocking by design, on the fault watcher's own thread ([`super::faults::watch`]).
    fn watch_faults(
        &self,
        tick: Duration,
        deliver: &mut dyn FnMut(Vec<GpuFault>) -> bool,
    ) -> Result<bool, GpuError> {
        self.inner.watch_faults(tick, deliver)
    }
}

#[cfg(test)]
mod tests {
    use gpu_market_core::overclock::{GpuLimits, Range};

    use super::*;
    use crate::gpu::simulated::{ManualTime, SimulatedGpu};

    fn two_gpus() -> Arc<SimulatedGpu> {
        let config = crate::config::SimulatedGpuConfig {
            class: 0,
            memory_gib: 24,
            topology_group: 0,
            limits: GpuLimits::power_only(Range { min: 100, max: 400 }),
            default_power_w: 300,
        };
        Arc::new(SimulatedGpu::new(
            &[config, config],
            Arc::new(ManualTime::default()),
        ))
    }

    #[test]
    fn a_hung_gpu_fails_fast_after_one_budget_and_the_others_answer() {
        let sim = two_gpus();
        let gpus = Watchdog::new(sim.clone());
        assert!(gpus.sample(0).is_ok());
        sim.hang(0, true);
        let started = Instant::now();
        let e = gpus.sample(0).unwrap_err();
        let waited = started.elapsed();
        assert!(
            matches!(
                e,
                GpuError::Hung {
                    index: 0,
                    call: "sample",
                    ..
                }
            ),
            "{e}"
        );
        assert!(
            waited >= CALL_BUDGET && waited < CALL_BUDGET * 2,
            "{waited:?}"
        );
        assert_eq!(gpus.hung(), vec![0]);
        // Every later call to the hung GPU fails without waiting; the other GPU answers.
        let started = Instant::now();
        for _ in 0..100 {
            assert!(matches!(
                gpus.apply(0, &OverclockTerms::default()),
                Err(GpuError::Hung {
                    index: 0,
                    call: "sample",
                    ..
                })
            ));
        }
        assert!(started.elapsed() < Duration::from_millis(100));
        assert!(gpus.sample(1).is_ok() && gpus.clocks(1).is_ok());
        // Released, the GPU answers again; the calls given up on were not run late.
        sim.hang(0, false);
        let back = Instant::now();
        while !gpus.hung().is_empty() {
            assert!(
                back.elapsed() < Duration::from_secs(5),
                "the thread is back"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(gpus.sample(0).is_ok());
    }

    #[test]
    fn a_call_given_up_on_before_its_thread_took_it_never_runs() {
        let sim = two_gpus();
        let gpus = Arc::new(Watchdog::new(sim.clone()));
        let before = sim.read_back(1).unwrap();
        sim.hang(1, true);
        // A first call holds the thread; a second, from another caller, queues behind it and
        // is given up on after its budget.
        let first = {
            let gpus = gpus.clone();
            std::thread::spawn(move || gpus.sample(1))
        };
        std::thread::sleep(Duration::from_millis(100));
        let lowered = OverclockTerms {
            power_limit_w: before.power_limit_w - 10,
            ..before
        };
        assert!(matches!(
            gpus.apply(1, &lowered),
            Err(GpuError::Hung { index: 1, .. })
        ));
        assert!(matches!(first.join().unwrap(), Err(GpuError::Hung { .. })));
        sim.hang(1, false);
        while !gpus.hung().is_empty() {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(gpus.sample(1).is_ok(), "the queue has moved on");
        assert_eq!(
            sim.read_back(1).unwrap(),
            before,
            "the abandoned apply never ran"
        );
    }
}
