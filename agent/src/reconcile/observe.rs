//! One look at the three backends, each of which may fail alone, and the results of the
//! container jobs that finished since the last look.

use std::collections::BTreeSet;

use std::time::Duration;

use tokio::time::Instant;

use super::jobs::Outcome;
use super::plan::{ChainObserved, Observed, ObservedContainer, ObservedGpu};
use super::ready::Refusal;
use super::{chain_time, Backoff, Reconciler, TickError, BIDS_CONSIDERED, CONTAINER_BACKOFF};
use crate::chain::{ChainError, Key, LeaseView, OpenBids};
use crate::gpu::GpuBackend;
use crate::runtime::RuntimeError;
use crate::state::StateError;

impl Reconciler {
    pub(super) async fn observe(&mut self, draining: bool) -> Result<Observed, TickError> {
        let containers = self.observe_containers().await;
        self.metrics.health().engine_reachable(containers.is_ok());
        let containers = match containers {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!(error = %e, "the container engine does not answer; proofs go on");
                None
            }
        };
        // The leases the agent knows of: its records and its containers' labels.
        let known: BTreeSet<Key> = self
            .state
            .leases
            .keys()
            .copied()
            .chain(containers.iter().flatten().filter_map(|c| c.lease))
            .collect();
        let chain = self.observe_chain(&known).await;
        let now = match (&chain, self.clock) {
            (Ok((now, _)), _) => *now,
            (Err(_), Some((then, at))) => chain_time(then, at, Instant::now()),
            (Err(e), None) => return Err(TickError::NoClock(e.clone())),
        };
        let chain = match chain {
            Ok((now, view)) => {
                self.clock = Some((now, Instant::now()));
                self.follow_stops(&view.leases).await?;
                self.note_waiting(now, &view);
                self.check_gpus(&view.machine);
                Some(view)
            }
            Err(e) => {
                self.chain_error(&e);
                None
            }
        };
        let gpus = self.observe_gpus();
        self.take_faults();
        self.split_shared_gpus(
            containers.is_some(),
            chain.as_ref().map(|c| c.leases.as_slice()),
        )
        .await;
        let interval = (self.config.heartbeat_interval.as_secs() as i64)
            .min(self.alive_secs.map_or(i64::MAX, |a| a * 2 / 3));
        // Proofs that landed since the last look count as a heartbeat (the program records
        // one with them).
        if std::mem::take(&mut self.proofs_landed) {
            self.last_heartbeat = Some(now);
        }
        let heartbeat_due =
            chain.is_some() && self.last_heartbeat.is_none_or(|t| now - t >= interval);
        let claim_every = self.config.claim_interval.as_secs() as i64;
        let claim_due = chain.as_ref().is_some_and(|c| c.machine.unclaimed_pay > 0)
            && self.last_claim.is_none_or(|t| now - t >= claim_every);
        Ok(Observed {
            now,
            chain,
            containers,
            gpus,
            local: self.state.clone(),
            // Leases whose container work waits out a failure count as busy: left alone but
            // for their proofs.
            busy: self
                .jobs
                .busy()
                .into_iter()
                .chain(
                    self.container_backoff
                        .iter()
                        .filter(|(_, b)| now < b.until)
                        .map(|(k, _)| *k),
                )
                .collect(),
            readying: self.jobs.readying(),
            readied: self.readied_containers(),
            draining,
            heartbeat_due,
            claim_due,
            electricity_cost_per_kwh: self.config.electricity_cost_per_kwh,
            waiting: self.waiting.clone(),
            held_back: self
                .held_back
                .iter()
                .filter(|(_, h)| now < h.until)
                .map(|(bid, _)| *bid)
                .collect(),
            grace_secs: i64::try_from(self.config.placement_grace.as_secs()).unwrap_or(i64::MAX),
            faulted: self.faulted.iter().map(|(&g, f)| (g, f.xid)).collect(),
            over_slice: self.tenancy.over_slice.clone(),
            fault_reported: self.fault_reported,
            gpus_as_declared: self.gpus_as_declared,
            confines_slices: self.config.mps.is_some(),
        })
    }

    /// Compares the GPUs the machine account declares with the ones this host has, every time
    /// it is read (a `host update` may change them, and a start that could not read the chain
    /// did not compare): while they differ the agent takes no bid, and says why once.
    fn check_gpus(&mut self, machine: &crate::chain::MachineView) {
        let declared: Vec<[u8; 16]> = machine.gpus.iter().map(|g| g.uuid).collect();
        let identity = crate::gpu::check_identity(&declared, &self.gpu_infos);
        match (&identity, self.gpus_as_declared) {
            (Err(e), true) => tracing::error!(
                error = %e,
                "the machine account does not declare this host's GPUs: no bid is taken until it does                  (`gpu-market-agent detect`, then `gpu-market host update`)"
            ),
            (Ok(()), false) => {
                tracing::info!("the machine account declares this host's GPUs again")
            }
            _ => {}
        }
        self.gpus_as_declared = identity.is_ok();
    }

    /// Notes since when each open bid the packing policy gives another machine has been seen
    /// so; forgets the others (taken, gone, or now given this machine).
    fn note_waiting(&mut self, now: i64, view: &ChainObserved) {
        let elsewhere: BTreeSet<Key> = view
            .bids
            .iter()
            .filter(|b| b.elsewhere.is_some())
            .map(|b| b.key)
            .collect();
        self.waiting.retain(|k, _| elsewhere.contains(k));
        for k in elsewhere {
            self.waiting.entry(k).or_insert(now);
        }
    }

    async fn observe_containers(&self) -> Result<Vec<ObservedContainer>, RuntimeError> {
        let mut containers = Vec::new();
        // One listing; only a container that stopped is looked at for its exit code.
        for c in self.runtime.managed().await? {
            let state = match c.listed {
                Some(state) => state,
                None => match self.runtime.state(&c.id).await {
                    Ok(s) => s,
                    // Removed between the listing and now.
                    Err(RuntimeError::NoSuchContainer(_)) => continue,
                    Err(e) => return Err(e),
                },
            };
            containers.push(ObservedContainer {
                id: c.id,
                lease: c.lease,
                state,
                host_ports: c.host_ports,
            });
        }
        Ok(containers)
    }

    /// Every GPU's settings and reading; a GPU that cannot be read keeps its last reading (its
    /// leases are metered with it) and is left alone this tick.
    fn observe_gpus(&mut self) -> Vec<ObservedGpu> {
        let mut gpus = Vec::with_capacity(self.gpu_infos.len());
        for info in &self.gpu_infos {
            let applied = self
                .gpus
                .read_back(info.index)
                .inspect_err(|e| tracing::warn!(gpu = info.index, error = %e, "reading the GPU's settings failed"))
                .ok();
            let sample = match self.gpus.sample(info.index) {
                Ok(s) => {
                    self.last_samples.insert(info.index, s);
                    s
                }
                Err(e) => {
                    tracing::warn!(gpu = info.index, error = %e, "reading the GPU failed; metering with its last reading");
                    self.last_samples
                        .get(&info.index)
                        .copied()
                        .unwrap_or_default()
                }
            };
            gpus.push(ObservedGpu {
                index: info.index,
                applied,
                idle: self.idle(info),
                sample,
            });
        }
        self.metrics
            .set_gpus(gpus.iter().map(|g| (g.index, g.sample)).collect());
        gpus
    }

    async fn observe_chain(
        &mut self,
        known: &BTreeSet<Key>,
    ) -> Result<(i64, ChainObserved), ChainError> {
        let now = self.chain.now().await?;
        let machine = self.chain.machine().await?;
        let leases = self.chain.leases().await?;
        // What allocation needs may fail alone: the proofs need only the machine's leases.
        let open = match self.chain.best_open_bids(BIDS_CONSIDERED).await {
            Ok(open) => {
                if open.gangs_left > 0 {
                    tracing::debug!(
                        gangs = open.gangs_left,
                        "gang bids that fit here left for a later look"
                    );
                }
                self.alive_secs = open.alive_secs.or(self.alive_secs);
                // Back-offs of bids no longer open go; an unread book forgets none.
                self.held_back
                    .retain(|bid, _| open.bids.iter().any(|b| b.key == *bid));
                open
            }
            Err(e) => {
                self.chain_error(&e);
                tracing::warn!(error = %e, "the books cannot be read: no allocation this tick; proofs go on");
                OpenBids::default()
            }
        };
        // A lease the agent knows that the listing omits is gone only if the chain shows its
        // account closed; a failed check decides nothing.
        let unlisted: Vec<Key> = known
            .iter()
            .filter(|k| !leases.iter().any(|l| l.key == **k))
            .copied()
            .collect();
        let closed: BTreeSet<Key> = if unlisted.is_empty() {
            BTreeSet::new()
        } else {
            match self.chain.closed_leases(&unlisted).await {
                Ok(closed) => closed.into_iter().collect(),
                Err(e) => {
                    self.chain_error(&e);
                    BTreeSet::new()
                }
            }
        };
        Ok((
            now,
            ChainObserved {
                machine,
                leases,
                closed,
                bids: open.bids,
                expired: open
                    .expired
                    .into_iter()
                    .filter(|k| !self.unprunable.contains(k))
                    .collect(),
                reservation: open.reservation,
            },
        ))
    }

    /// Takes each lease's stop from the chain (a spot preemption moves it earlier).
    async fn follow_stops(&mut self, leases: &[LeaseView]) -> Result<(), StateError> {
        let mut changed = false;
        for l in leases {
            if let Some(r) = self.state.leases.get_mut(&l.key) {
                changed |= r.stop != l.stop();
                r.stop = l.stop();
            }
        }
        if changed {
            self.save().await?;
        }
        Ok(())
    }

    /// Applies the results of the container jobs that finished: a started container is
    /// recorded (billing starts when it started), a lease that cannot run gets its final proof,
    /// a cleaned-up lease is forgotten.
    pub(super) async fn take_finished_jobs(&mut self) -> Result<(), StateError> {
        for (lease, outcome) in self.jobs.finished().await {
            if !self.state.leases.contains_key(&lease) {
                let readied = match outcome {
                    Outcome::Prepared(p) => Ok(p),
                    Outcome::Refused { exit_code, reason } => Err(Refusal { exit_code, reason }),
                    _ => continue,
                };
                self.readied_job_ended(lease, readied);
                continue;
            }
            match outcome {
                Outcome::Started { id, at, pulled_in } => {
                    self.metrics.observe_pull(pulled_in);
                    let started = self.clock.map(|(then, read)| chain_time(then, read, at));
                    let baseline = self.lease_samples(lease);
                    let record = self.record(lease);
                    record.container_id = Some(id.clone());
                    record.running_since = started.or(Some(record.started_at));
                    record.baseline_energy_mj = baseline.iter().map(|s| s.energy_mj).collect();
                    let allocated = record.started_at;
                    if let Some(t) = started {
                        self.metrics
                            .observe_start(Duration::from_secs((t - allocated).max(0) as u64));
                    }
                    tracing::info!(%lease, container = %id, ?pulled_in, "lease started");
                }
                Outcome::Refused { exit_code, reason } => {
                    self.refuse_with(lease, Refusal { exit_code, reason })
                        .await?;
                }
                Outcome::Prepared(p) => {
                    // Not planned: a lease on record is started in one go.
                    self.readied_job_ended(lease, Ok(p));
                }
                Outcome::Stopped => {
                    self.container_backoff.remove(&lease);
                    tracing::info!(%lease, "container stopped")
                }
                Outcome::CleanedUp => {
                    self.container_backoff.remove(&lease);
                    self.forget(lease).await?;
                    continue;
                }
                Outcome::Failed(e) => {
                    let now = self.chain_now().unwrap_or_default();
                    let before = self.container_backoff.get(&lease).copied();
                    let wait = Backoff::failed(before, now, CONTAINER_BACKOFF);
                    self.container_backoff.insert(lease, wait);
                    tracing::warn!(%lease, error = %e, retry_at = wait.until, "container work failed; planned again then");
                    continue;
                }
            }
            self.save().await?;
        }
        Ok(())
    }
}
