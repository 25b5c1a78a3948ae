//! Containers made ready while their lease's `allocate` confirms: the environment opened, the
//! image present, the container created. Once the lease is on chain only the start is left.
//!
//! The lease's key is known before `allocate` is sent (`Chain::lease_key`), so the container
//! carries its lease label from the start. An `allocate` that fails abandons it: the container is
//! removed as soon as it exists.

use std::collections::BTreeMap;

use super::jobs::{self, Prepared};
use super::{Key, Reconciler};
use crate::chain::BidView;
use crate::gpu::isolation::isolation;

/// One lease's readied container.
#[derive(Debug)]
pub(super) struct Ready {
    /// The GPUs it was made for (those `allocate` was sent with).
    gpu_indices: Vec<u8>,
    /// `None` while the job runs; then the container, or why the lease cannot run.
    outcome: Option<Result<Prepared, Refusal>>,
    /// Its `allocate` failed.
    abandoned: bool,
}

/// Why a lease cannot run: its final proof's exit code and a sentence for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Refusal {
    pub exit_code: i32,
    pub reason: String,
}

/// What readying gave a lease that is about to start.
#[derive(Debug)]
pub(super) enum Readied {
    /// Nothing usable: start from the beginning.
    Nothing,
    Container(Prepared),
    Refused(Refusal),
}

impl Reconciler {
    /// Readies the container of `bid`'s lease on `gpu_indices` beside the loop, unless it is
    /// already (or cannot be: a shared GPU without MPS, unreadable registry credentials; the
    /// start then refuses the lease as it would have).
    /// `alone`: no other lease shares those GPUs, nor will (`ChainObserved::alone`).
    pub(super) fn ready(&mut self, bid: &BidView, (gpu_indices, alone): (&[u8], bool)) {
        let lease = self.chain.lease_key(bid.key);
        if let Some(r) = self.readied.get_mut(&lease) {
            r.abandoned = false;
            return;
        }
        if self.jobs.busy().contains(&lease) || self.state.leases.contains_key(&lease) {
            return;
        }
        let Ok(isolation) = isolation(
            &lease,
            (gpu_indices, alone),
            bid.gib_per_gpu,
            &self.gpu_infos,
            self.config.mps.as_ref(),
        ) else {
            return;
        };
        let Ok(credentials) = self.credentials(&bid.image_ref) else {
            return;
        };
        let Ok(job) = self.start_job(lease, bid.workload(), gpu_indices, isolation, credentials)
        else {
            return;
        };
        self.jobs
            .spawn_readying(lease, job.progress.clone(), jobs::create(job));
        self.readied.insert(
            lease,
            Ready {
                gpu_indices: gpu_indices.to_vec(),
                outcome: None,
                abandoned: false,
            },
        );
    }

    /// `bid`'s `allocate` failed: its readied container goes.
    pub(super) fn abandon(&mut self, bid: Key) {
        let lease = self.chain.lease_key(bid);
        let Some(r) = self.readied.get_mut(&lease) else {
            return;
        };
        r.abandoned = true;
        if r.outcome.is_some() {
            self.discard(lease);
        }
    }

    /// Takes the end of a readying job; `false` when `lease` was not being readied.
    pub(super) fn readied_job_ended(
        &mut self,
        lease: Key,
        outcome: Result<Prepared, Refusal>,
    ) -> bool {
        let Some(r) = self.readied.get_mut(&lease) else {
            return false;
        };
        r.outcome = Some(outcome);
        if r.abandoned {
            self.discard(lease);
        }
        true
    }

    /// What readying gave `lease`, about to start on `gpu_indices`; a container readied for
    /// other GPUs is removed.
    pub(super) fn take_readied(&mut self, lease: Key, gpu_indices: &[u8]) -> Readied {
        let Some(r) = self.readied.remove(&lease) else {
            return Readied::Nothing;
        };
        match r.outcome {
            Some(Ok(p)) if r.gpu_indices == gpu_indices => Readied::Container(p),
            Some(Err(refusal)) if r.gpu_indices == gpu_indices => Readied::Refused(refusal),
            Some(Ok(p)) => {
                self.remove_container(&p.id);
                Readied::Nothing
            }
            _ => Readied::Nothing,
        }
    }

    /// The readied containers waiting for their lease, by lease.
    pub(super) fn readied_containers(&self) -> BTreeMap<Key, String> {
        self.readied
            .iter()
            .filter(|(_, r)| !r.abandoned)
            .filter_map(|(k, r)| match &r.outcome {
                Some(Ok(p)) => Some((*k, p.id.clone())),
                _ => None,
            })
            .collect()
    }

    /// Forgets what was readied for `lease`, removing its container and stopping its MPS daemon
    /// (beside the loop): its `allocate` failed, or the lease ended (before it started, or
    /// after: `forget`).
    pub(super) fn discard(&mut self, lease: Key) {
        if let Some(mps) = &self.config.mps {
            let (control, dir) = (mps.control.clone(), mps.dir(&lease));
            if dir.exists() {
                tokio::spawn(crate::off_runtime(move || {
                    crate::gpu::mps::stop(&control, &dir)
                }));
            }
        }
        if let Some(Ready {
            outcome: Some(Ok(p)),
            ..
        }) = self.readied.remove(&lease)
        {
            tracing::info!(%lease, container = %p.id, "removing a readied container that will not start");
            self.remove_container(&p.id);
        }
        // What readying prepared (its scratch volume) goes after the retention, unless the
        // lease is readied here again.
        if let Err(e) = crate::retention::mark_ended(&self.config.data_dir, &lease) {
            tracing::warn!(%lease, error = %e, "cannot start the retention of a lease's files");
        }
    }

    fn remove_container(&mut self, id: &str) {
        let grace = self.config.container.stop_grace;
        self.jobs.remove_stray(&self.runtime, id, grace);
    }
}
