//! Container CPU readings taken off the tick (the simulated GPUs' load follows them).

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::time::Instant;

use crate::runtime::ContainerRuntime;

/// Reads the CPU use of the leases' containers in the background. The engine answers a stats
/// request only at its next collection (up to a second); read one lease after the other inside
/// the tick, they delayed every allocation and start by about half a second per running lease.
/// The tick hands the probe the containers to read and uses the latest readings it has.
#[derive(Default)]
pub(super) struct CpuProbe {
    /// Container id → cumulative CPU nanoseconds and when they were read.
    latest: Arc<std::sync::Mutex<BTreeMap<String, (u64, Instant)>>>,
    /// The round under way, if any: one at a time.
    round: Option<tokio::task::JoinHandle<()>>,
}

impl CpuProbe {
    /// Starts a round reading `ids` side by side, unless the last one is still under way.
    pub(super) fn refresh(&mut self, runtime: &Arc<dyn ContainerRuntime>, ids: Vec<String>) {
        if ids.is_empty() || self.round.as_ref().is_some_and(|r| !r.is_finished()) {
            return;
        }
        let (runtime, latest) = (runtime.clone(), self.latest.clone());
        self.round = Some(tokio::spawn(async move {
            let reads = ids.into_iter().map(|id| {
                let runtime = runtime.clone();
                async move { (runtime.cpu_usage_ns(&id).await, id) }
            });
            for (read, id) in futures_util::future::join_all(reads).await {
                if let Ok(ns) = read {
                    latest
                        .lock()
                        .expect("probe lock")
                        .insert(id, (ns, Instant::now()));
                }
            }
        }));
    }

    /// The latest reading of container `id`.
    pub(super) fn latest(&self, id: &str) -> Option<(u64, Instant)> {
        self.latest.lock().expect("probe lock").get(id).copied()
    }

    pub(super) fn forget(&self, id: &str) {
        self.latest.lock().expect("probe lock").remove(id);
    }
}

impl std::fmt::Debug for CpuProbe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuProbe").finish_non_exhaustive()
    }
}
