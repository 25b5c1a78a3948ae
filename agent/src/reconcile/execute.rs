//! Carrying out a plan: the quick steps in the tick, chain transactions side by side where they
//! are independent, and container work handed to jobs beside the loop.

use gpu_market_core::lease::{exit, proof_span};
use tokio::time::Instant;

use super::jobs::{self, StartJob};
use super::plan::{Action, Observed};
use super::ready::{Readied, Refusal};
use super::senders::Fate;
use super::{
    logs_path, ActionError, Backoff, Reconciler, TickError, ALLOCATE_BACKOFF, METER_PERIOD,
};
use crate::chain::{BidKind, ChainError, Key, LeaseView, Workload};
use crate::config::RegistryPassword;
use crate::gpu::isolation::{isolation, shared_gpus, Isolation};
use crate::gpu::{apply_and_verify, GpuBackend, GpuError, Sample};
use crate::network::gang_peers;
use crate::retention;
use crate::runtime::{
    pinned_reference, registry_host, BindMount, ContainerSpec, Credentials, LeaseNetwork,
    LABEL_CLIENT, LABEL_LEASE,
};
use crate::state::{LeaseRecord, StateError};

impl Reconciler {
    /// Executes `actions`: proofs (all leases side by side), lease ends, the heartbeat and
    /// prunes after the rest.
    pub(super) async fn execute_plan(
        &mut self,
        actions: &[Action],
        o: &Observed,
    ) -> Result<(), TickError> {
        let (later, first): (Vec<&Action>, Vec<&Action>) = actions.iter().partition(|a| {
            matches!(
                a,
                Action::Submit { .. }
                    | Action::End { .. }
                    | Action::Heartbeat
                    | Action::ClaimPay
                    | Action::Prune { .. }
            )
        });
        self.execute_all(&first, o).await?;
        let metered: Vec<String> = actions
            .iter()
            .filter_map(|a| match a {
                Action::Meter { lease } => self.state.leases.get(lease)?.container_id.clone(),
                _ => None,
            })
            .collect();
        if self.gpus.follows_workload() {
            self.cpu_probe.refresh(&self.runtime, metered);
        }
        let submits: Vec<Key> = later
            .iter()
            .filter_map(|a| match a {
                Action::Submit { lease } => Some(*lease),
                _ => None,
            })
            .collect();
        // A round of proofs is the heartbeat (the program records one with it): no other then.
        let proved = self.submit_all(&submits, o).await?;
        let ends: Vec<&Action> = later
            .iter()
            .copied()
            .filter(|a| match a {
                Action::End { .. } | Action::ClaimPay => true,
                Action::Heartbeat => !proved,
                _ => false,
            })
            .collect();
        self.execute_all(&ends, o).await?;
        let prunes: Vec<Key> = later
            .iter()
            .filter_map(|a| match a {
                Action::Prune { bid } => Some(*bid),
                _ => None,
            })
            .collect();
        self.prune_all(&prunes).await;
        Ok(())
    }

    /// Executes `actions` in order; a failed one is logged and planned again next tick, except
    /// a state-file failure, which ends the tick.
    async fn execute_all(&mut self, actions: &[&Action], o: &Observed) -> Result<(), TickError> {
        for &action in actions {
            if let Err(e) = self.execute(action, o).await {
                if let ActionError::State(e) = e {
                    return Err(TickError::State(e));
                }
                tracing::warn!(?action, error = %e, "action failed; planned again next tick");
            }
        }
        Ok(())
    }

    pub(super) fn chain_error(&self, e: &ChainError) {
        self.metrics.rpc_error(e.is_transient());
        if e.is_transient() {
            tracing::warn!(error = %e, "chain call failed: the cluster did not answer");
        } else {
            tracing::warn!(error = %e, "chain call refused");
        }
    }

    fn view(o: &Observed, lease: Key) -> Result<&LeaseView, ActionError> {
        o.chain
            .as_ref()
            .and_then(|c| c.leases.iter().find(|l| l.key == lease))
            .ok_or(ActionError::NotListed(lease))
    }

    fn samples(o: &Observed, gpu_indices: &[u8]) -> Vec<Sample> {
        gpu_indices
            .iter()
            .map(|&i| {
                o.gpus
                    .iter()
                    .find(|g| g.index == i as u32)
                    .map(|g| g.sample)
                    .unwrap_or_default()
            })
            .collect()
    }

    pub(super) fn record(&mut self, lease: Key) -> &mut LeaseRecord {
        self.state
            .leases
            .get_mut(&lease)
            .expect("the plan names leases the state has")
    }

    async fn execute(&mut self, action: &Action, o: &Observed) -> Result<(), ActionError> {
        let grace = self.config.container.stop_grace;
        match action {
            Action::RemoveContainer { id } => self.jobs.remove_stray(&self.runtime, id, grace),
            Action::Adopt { lease, id } => self.adopt(*lease, id, o).await?,
            Action::Start { lease } => self.start(*lease, o).await?,
            Action::Cancel { lease, exit_code } => {
                if self.jobs.cancel(*lease) {
                    self.readied.remove(lease);
                    let reason = "the lease could wait no longer".to_string();
                    let exit_code = *exit_code;
                    self.refuse_with(*lease, Refusal { exit_code, reason })
                        .await?;
                }
            }
            Action::Record { lease } => {
                self.record_lease(*lease, o).await?;
                tracing::info!(%lease, "recorded a lease that cannot start yet: its windows are proven empty meanwhile");
            }
            Action::Meter { lease } => {
                let now = Instant::now();
                if self
                    .metered
                    .get(lease)
                    .is_none_or(|&last| now >= last + METER_PERIOD)
                {
                    self.metered.insert(*lease, now);
                    let samples = self.lease_samples(*lease);
                    if let Some(reading) = self.record(*lease).record_sample(&samples) {
                        self.journal(*lease, reading).await;
                    }
                }
                self.observe_workload(*lease);
                self.auto_power(*lease, o);
            }
            Action::CloseEnded { lease } => {
                let samples = self.lease_samples(*lease);
                let closed = self.record(*lease).close_ended(o.now, &samples);
                self.save().await?;
                tracing::info!(%lease, closed, "closed ended intervals");
            }
            Action::Finish { lease, exit_code } => {
                let samples = self.lease_samples(*lease);
                self.record(*lease).close_final(o.now, &samples, *exit_code);
                self.save().await?;
                self.metrics.lease_ended(*exit_code);
                tracing::info!(%lease, exit_code, "container finished; final proof closed");
            }
            Action::Stop { lease } => {
                if let Some(id) = self.record(*lease).container_id.clone() {
                    tracing::info!(%lease, container = %id, "stopping the container: its lease stops");
                    let runtime = self.runtime.clone();
                    self.jobs.spawn_for(*lease, jobs::stop(runtime, id, grace));
                }
            }
            Action::Submit { lease } => {
                self.submit_all(&[*lease], o).await?;
            }
            Action::End { lease } => {
                self.chain
                    .end_lease(*lease)
                    .await
                    .inspect_err(|e| self.chain_error(e))?;
                tracing::info!(%lease, "lease ended");
                self.clean_up(*lease).await?;
            }
            Action::LeaveGang { lease } => {
                self.chain
                    .end_lease(*lease)
                    .await
                    .inspect_err(|e| self.chain_error(e))?;
                tracing::info!(%lease, "another part of the lease's gang settled: the lease stops now");
            }
            Action::Rendezvous { lease, port } => {
                self.chain
                    .set_rendezvous(*lease, *port)
                    .await
                    .inspect_err(|e| self.chain_error(e))?;
                tracing::info!(%lease, port, "recorded the gang's rendezvous: the other parts reach this one there");
            }
            Action::Forget { lease } => {
                tracing::info!(%lease, "the chain shows the lease closed; cleaning up");
                self.clean_up(*lease).await?;
            }
            Action::Preempt { lease, better_bid } => {
                self.chain
                    .preempt(*lease, *better_bid)
                    .await
                    .inspect_err(|e| self.chain_error(e))?;
                // A queue bid stops the lease now, a spot bid at its next interval boundary.
                let queue = o
                    .chain
                    .iter()
                    .flat_map(|c| &c.bids)
                    .any(|b| b.key == *better_bid && b.kind == BidKind::Queue);
                let when = if queue {
                    "at once"
                } else {
                    "at its next boundary"
                };
                tracing::info!(%lease, %better_bid, "spot lease preempted {when}");
            }
            Action::Prune { bid } => self.prune_all(&[*bid]).await,
            Action::Reserve { bid } => {
                self.chain
                    .reserve(*bid)
                    .await
                    .inspect_err(|e| self.chain_error(e))?;
                tracing::info!(%bid, "reserved the machine's GPUs for a waiting bid");
            }
            Action::ReserveGang { bid, parts } => {
                self.chain
                    .reserve_gang(*bid, parts)
                    .await
                    .inspect_err(|e| self.chain_error(e))?;
                tracing::info!(%bid, machines = parts.len(), "reserved GPUs of the gang's machines for a waiting gang bid");
            }
            Action::SetWholeGpus { whole } => {
                self.chain
                    .set_whole_gpus(*whole)
                    .await
                    .inspect_err(|e| self.chain_error(e))?;
                match whole {
                    true => tracing::info!(
                        "told the chain this machine's GPUs go whole: without NVIDIA MPS no lease \
                         can be confined to a GiB slice, so no GPU holding a lease takes another"
                    ),
                    false => tracing::info!(
                        "told the chain this machine's GPUs may be shared in GiB slices (MPS)"
                    ),
                }
            }
            Action::Unreserve => {
                self.chain
                    .unreserve()
                    .await
                    .inspect_err(|e| self.chain_error(e))?;
                tracing::info!("cleared the machine's reservation: it held nothing any more");
            }
            Action::Allocate { bid, gpu_indices } => {
                if let Some(c) = &o.chain {
                    if let Some(b) = c.bids.iter().find(|b| b.key == *bid) {
                        let alone = c.alone(self.chain.lease_key(*bid), gpu_indices);
                        self.ready(b, (gpu_indices, alone));
                    }
                }
                let lease = self
                    .chain
                    .allocate(*bid, gpu_indices)
                    .await
                    .inspect_err(|e| {
                        self.chain_error(e);
                        self.abandon(*bid);
                        let before = self.held_back.get(bid).copied();
                        let held = Backoff::failed(before, o.now, ALLOCATE_BACKOFF);
                        self.held_back.insert(*bid, held);
                        tracing::warn!(%bid, failures = held.failures, retry_at = held.until, "allocate failed: the bid is held back until then");
                    })?;
                self.held_back.remove(bid);
                tracing::info!(%bid, %lease, ?gpu_indices, "allocated");
            }
            Action::ReportFault { gpu, xid } => {
                self.chain
                    .report_fault(*gpu, *xid)
                    .await
                    .inspect_err(|e| self.chain_error(e))?;
                self.fault_reported(*gpu, *xid);
            }
            Action::ResetGpu { index } => {
                self.make_idle(*index)?;
                tracing::info!(gpu = index, "reset a GPU no lease uses");
            }
            Action::Heartbeat => {
                self.chain
                    .heartbeat()
                    .await
                    .inspect_err(|e| self.chain_error(e))?;
                self.last_heartbeat = Some(o.now);
            }
            Action::ClaimPay => {
                self.chain
                    .claim_pay()
                    .await
                    .inspect_err(|e| self.chain_error(e))?;
                self.last_claim = Some(o.now);
                tracing::info!("claimed the machine's pay");
            }
        }
        Ok(())
    }

    async fn adopt(&mut self, lease: Key, id: &str, o: &Observed) -> Result<(), ActionError> {
        let view = Self::view(o, lease)?;
        let samples = Self::samples(o, &view.gpu_indices);
        let record = self
            .state
            .leases
            .entry(lease)
            .or_insert_with(|| LeaseRecord::new(view, &samples));
        if let Ok(shared) = shared_gpus(&view.gpu_indices, view.gib_per_gpu, &self.gpu_infos) {
            record.meter_shared(&shared);
        }
        record.container_id = Some(id.to_string());
        record.running_since.get_or_insert(o.now);
        self.save().await?;
        tracing::info!(%lease, container = %id, "adopted a running container");
        if let Err(e) = self.verify_settings(view) {
            tracing::warn!(%lease, error = %e, "settings no longer hold; stopping the lease");
            let runtime = self.runtime.clone();
            let grace = self.config.container.stop_grace;
            self.jobs
                .spawn_for(lease, jobs::stop(runtime, id.to_string(), grace));
        }
        Ok(())
    }

    fn verify_settings(&self, view: &LeaseView) -> Result<(), GpuError> {
        for (&i, s) in view.gpu_indices.iter().zip(&view.overclock) {
            apply_and_verify(self.gpus.as_ref(), i as u32, s)?;
        }
        Ok(())
    }

    /// Tells the GPU backend how busy the lease's container kept its CPU share between the
    /// probe's last two readings (the SIMULATED backend's load; real GPUs ignore it).
    fn observe_workload(&mut self, lease: Key) {
        let record = self.record(lease);
        let (Some(id), gpus) = (record.container_id.clone(), record.gpu_indices.clone()) else {
            return;
        };
        let Some((cpu_ns, now)) = self.cpu_probe.latest(&id) else {
            return;
        };
        if self
            .cpu_readings
            .get(&lease)
            .is_some_and(|&(_, at)| at >= now)
        {
            return;
        }
        if let Some((last_ns, at)) = self.cpu_readings.insert(lease, (cpu_ns, now)) {
            let share_ns = (now - at).as_nanos()
                * gpus.len() as u128
                * self.config.container.millicpus_per_gpu as u128
                / 1_000;
            let used = cpu_ns.saturating_sub(last_ns) as u128;
            if let Some(permille) = (used * 1_000).checked_div(share_ns) {
                for &g in &gpus {
                    self.gpus
                        .observe_workload(g as u32, permille.min(1_000) as u16);
                }
            }
        }
    }

    /// Applies the lease's GPU settings (refusing the lease when they do not take, or when it
    /// shares a GPU that the host cannot confine it on), then hands the container's start to a
    /// job beside the loop: of the container readied while `allocate` confirmed, or from the
    /// beginning (environment, pull, create) when there is none. A readied container of a
    /// refused lease is left to the plan, which removes it as a stray.
    async fn start(&mut self, lease: Key, o: &Observed) -> Result<(), ActionError> {
        let view = self.record_lease(lease, o).await?;
        let readied = self.take_readied(lease, &view.gpu_indices);
        if o.now >= view.stop() {
            // Too late to run (its readying outlasted it, or the agent was away): the plan
            // proves it empty and ends it.
            if let Readied::Refused(r) = readied {
                return Ok(self.refuse_with(lease, r).await?);
            }
            return Ok(());
        }
        if let Err(e) = self.verify_settings(view) {
            tracing::warn!(%lease, error = %e, "GPU settings did not take; refusing the lease");
            return Ok(self.refuse(lease, exit::SETTINGS_REFUSED).await?);
        }
        let alone = o
            .chain
            .as_ref()
            .is_some_and(|c| c.alone(lease, &view.gpu_indices));
        let isolation = match isolation(
            &lease,
            (&view.gpu_indices, alone),
            view.gib_per_gpu,
            &self.gpu_infos,
            self.config.mps.as_ref(),
        ) {
            Ok(i) => i,
            Err(e) => {
                tracing::warn!(%lease, error = %e, "refusing the lease");
                return Ok(self.refuse(lease, exit::ISOLATION_UNAVAILABLE).await?);
            }
        };
        self.record(lease).meter_shared(&isolation.shared);
        match readied {
            Readied::Container(p) => {
                tracing::info!(%lease, container = %p.id, "starting the lease's readied container");
                let runtime = self.runtime.clone();
                self.jobs.spawn_for(lease, jobs::start_prepared(runtime, p));
                return Ok(());
            }
            Readied::Refused(r) => return Ok(self.refuse_with(lease, r).await?),
            Readied::Nothing => {}
        }
        let credentials = match self.credentials(&view.image_ref) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(%lease, error = %e, "the registry credentials cannot be read; refusing the lease");
                return Ok(self.refuse(lease, exit::IMAGE_UNAVAILABLE).await?);
            }
        };
        let job = match self.start_job(
            lease,
            view.workload(),
            &view.gpu_indices,
            isolation,
            credentials,
        ) {
            Ok(job) => job,
            Err(ActionError::Runtime(e)) => {
                let reason = e.to_string();
                return Ok(self
                    .refuse_with(
                        lease,
                        Refusal {
                            exit_code: exit::ENGINE_REFUSED,
                            reason,
                        },
                    )
                    .await?);
            }
            Err(e) => return Err(e),
        };
        tracing::info!(%lease, image = %view.image_ref, "starting the lease's container");
        self.jobs
            .spawn_readying(lease, job.progress.clone(), jobs::start(job));
        Ok(())
    }

    /// Records `lease` (as the chain lists it), unless it is on record: from then on its
    /// windows close and are proven, its container running or not.
    async fn record_lease<'o>(
        &mut self,
        lease: Key,
        o: &'o Observed,
    ) -> Result<&'o LeaseView, ActionError> {
        let view = Self::view(o, lease)?;
        if let std::collections::btree_map::Entry::Vacant(e) = self.state.leases.entry(lease) {
            let samples = Self::samples(o, &view.gpu_indices);
            e.insert(LeaseRecord::new(view, &samples));
            self.save().await?;
        }
        Ok(view)
    }

    /// What starting `lease`'s container on `gpu_indices` takes: its image, environment,
    /// limits, and the confinement `isolation` gives it.
    pub(super) fn start_job(
        &self,
        lease: Key,
        workload: Workload<'_>,
        gpu_indices: &[u8],
        isolation: Isolation,
        credentials: Option<Credentials>,
    ) -> Result<StartJob, ActionError> {
        let n = gpu_indices.len() as i64;
        let limits = self.config.container;
        let evidence = crate::evidence::lease_dir(&self.config.data_dir, &lease);
        std::fs::create_dir_all(&evidence).map_err(|source| StateError::Io {
            path: evidence.clone(),
            source,
        })?;
        let mut binds = isolation.binds;
        binds.push(BindMount {
            host: evidence,
            container: crate::evidence::CONTAINER_PATH.into(),
            read_only: true,
        });
        let sandbox = limits.sandbox;
        // What the lease holds; a lease that reserved none gets the host's share per GPU.
        let reserved = workload.room.host;
        let cpu_milli = match reserved.cpu_milli {
            0 => n * limits.millicpus_per_gpu as i64,
            milli => milli as i64,
        };
        let memory_mib = match reserved.memory_mib {
            0 => n * limits.memory_mib_per_gpu as i64,
            mib => mib as i64,
        };
        let spec = ContainerSpec {
            name: None,
            image: pinned_reference(workload.image_ref, workload.image_digest)?,
            cmd: None,
            env: isolation.env,
            labels: [
                (LABEL_LEASE.to_string(), lease.to_string()),
                (LABEL_CLIENT.to_string(), workload.client.to_string()),
            ]
            .into(),
            memory_bytes: Some(memory_mib << 20),
            nano_cpus: Some(cpu_milli * 1_000_000),
            pids_limit: Some(limits.pids_limit),
            gpu_indices: gpu_indices.iter().map(|&i| i as u32).collect(),
            binds,
            sandbox,
            network: LeaseNetwork {
                egress: self.network.egress.clone(),
                ports: workload.room.ports.clone(),
                peers: workload.gang.map(gang_peers).unwrap_or_default(),
            },
        };
        Ok(StartJob {
            runtime: self.runtime.clone(),
            image_ref: workload.image_ref.to_string(),
            digest: *workload.image_digest,
            credentials,
            budget: self.config.images,
            cached_images: self.cached_images.clone(),
            chain: self.chain.clone(),
            bid: workload.bid,
            env_hash: *workload.env_hash,
            env_key: self.config.env_key.clone(),
            spec,
            launch: crate::gpu::launch::launch_env(gpu_indices, &self.gpu_infos, workload.gang),
            retained: retention::Retained {
                data_dir: self.config.data_dir.clone(),
                lease,
                client: workload.client,
                scratch_bytes: u64::from(workload.room.scratch_gib) << 30,
            },
            mps: isolation.daemon,
            progress: Default::default(),
        })
    }

    /// Writes the power logs of `lease`'s closed intervals where its container and auditors
    /// read them (`crate::evidence`); a failure is logged, and the proofs go on without it.
    fn keep_evidence(&mut self, lease: Key) {
        let data_dir = self.config.data_dir.clone();
        if let Err(e) = crate::evidence::write_pending(&data_dir, &lease, self.record(lease)) {
            tracing::warn!(%lease, error = %e, "the power logs cannot be written");
        }
    }

    /// The lease cannot run, for the reason `r` gives (logged).
    pub(super) async fn refuse_with(&mut self, lease: Key, r: Refusal) -> Result<(), StateError> {
        tracing::warn!(%lease, exit_code = r.exit_code, reason = %r.reason, "{}; ending the lease", exit::reason(r.exit_code));
        self.refuse(lease, r.exit_code).await
    }

    /// The lease cannot run: its GPUs go back to their defaults and its final proof, with
    /// nothing used, carries `exit_code`.
    pub(super) async fn refuse(&mut self, lease: Key, exit_code: i32) -> Result<(), StateError> {
        if let Err(e) = self.reset_gpus(lease) {
            tracing::warn!(%lease, error = %e, "resetting the lease's GPUs failed");
        }
        let now = self.chain_now().unwrap_or(self.record(lease).started_at);
        let samples = self.lease_samples(lease);
        self.record(lease).close_final(now, &samples, exit_code);
        self.metrics.lease_ended(exit_code);
        if exit_code == exit::IMAGE_UNAVAILABLE {
            self.metrics.pull_failed();
        }
        self.save().await
    }

    pub(super) fn credentials(
        &self,
        image_ref: &str,
    ) -> Result<Option<Credentials>, std::io::Error> {
        let Some(auth) = self.config.registries.get(registry_host(image_ref)) else {
            return Ok(None);
        };
        let password = match &auth.password {
            RegistryPassword::Inline(p) => p.clone(),
            RegistryPassword::File(path) => std::fs::read_to_string(path)?.trim_end().to_string(),
        };
        Ok(Some(Credentials {
            username: auth.username.clone(),
            password,
        }))
    }

    /// Hands the closed proofs of `leases` to the senders (one round for the machine at a
    /// time, its leases' proofs together), once a round is due: consecutive intervals are
    /// joined into one proof, so that on time a round goes every `proof_span` intervals
    /// (`gpu_market_core::lease::proof_span`); when one lease's proofs are due, every lease's
    /// go. Proofs the chain already has are dropped first (their answer was lost, or the agent
    /// died before saving). Returns whether a round went.
    pub(super) async fn submit_all(
        &mut self,
        leases: &[Key],
        o: &Observed,
    ) -> Result<bool, StateError> {
        let mut ready = Vec::new();
        let mut due = false;
        for &lease in leases {
            if self.senders.is_sending(&lease) {
                continue;
            }
            let Ok(view) = Self::view(o, lease) else {
                continue;
            };
            let (next, prev) = (view.next_interval, view.proof_hash);
            let span = proof_span(view.silence_intervals);
            let record = self.record(lease);
            while record.pending.first().is_some_and(|p| p.interval < next) {
                record.accept_oldest(prev);
            }
            record.join_pending();
            if !record.pending.is_empty() {
                due |= record.proof_due(o.now, span);
                ready.push((lease, prev));
            }
        }
        if !due {
            self.save().await?;
            return Ok(false);
        }
        let mut round = Vec::new();
        for (lease, prev) in ready {
            let record = self.record(lease);
            record.pending.iter_mut().for_each(|p| p.sent = true);
            let pending = record.pending.clone();
            // Each proof's power log is kept before the proof that commits to it is sent.
            self.keep_evidence(lease);
            round.push((lease, prev, pending));
        }
        self.senders.submit(self.chain.clone(), round);
        // The round is the heartbeat from now (the program records one with it): a tick while
        // it confirms sends none beside it.
        self.heartbeat_before_round
            .get_or_insert(self.last_heartbeat);
        self.last_heartbeat = Some(o.now);
        self.save().await?;
        Ok(true)
    }

    /// Takes the round of submissions that ended: each accepted proof is saved. Accepted proofs
    /// count as the machine's heartbeat.
    pub(super) async fn take_finished_sends(&mut self) -> Result<(), StateError> {
        let rounds = self.senders.finished().await;
        if rounds.is_empty() {
            return Ok(());
        }
        let landed = rounds.iter().any(|(_, r)| !r.accepted.is_empty());
        self.proofs_landed |= landed;
        if let Some(before) = self.heartbeat_before_round.take() {
            if !landed {
                // Nothing of it landed: the heartbeat is due as if it had not been sent.
                self.last_heartbeat = before;
            }
        }
        for (lease, round) in rounds {
            if !self.state.leases.contains_key(&lease) {
                continue;
            }
            for (p, hash) in round.accepted {
                self.metrics.proof_accepted(crate::metrics::unix_now());
                let record = self.record(lease);
                if record
                    .pending
                    .first()
                    .is_some_and(|q| q.interval == p.interval)
                {
                    record.accept_oldest(hash);
                }
                tracing::info!(%lease, interval = p.interval, intervals = p.intervals, window = ?p.window, "proof accepted");
            }
            match round.failed {
                None => self.senders.clear_backoff(&lease),
                Some((interval, e)) => self.proof_failed(lease, interval, &e),
            }
        }
        self.save().await
    }

    /// A proof of `lease` for `interval` failed with `e`: one the program can never accept is
    /// dropped (with those after it, when the lease stopped before its interval) and the lease
    /// goes on to its end; anything else is sent again after a back-off.
    fn proof_failed(&mut self, lease: Key, interval: u32, e: &ChainError) {
        self.metrics.proof_failed();
        self.metrics.rpc_error(e.is_transient());
        let fate = Fate::of(e);
        if fate == Fate::Retry {
            let wait = self.senders.back_off(lease);
            tracing::warn!(%lease, interval, error = %e, retry_in = ?wait, "proof submission failed; sent again");
            return;
        }
        self.senders.clear_backoff(&lease);
        let record = self.record(lease);
        let before = record.pending.len();
        record.pending.retain(|p| match fate {
            Fate::DropFromHere => p.interval < interval,
            _ => p.interval != interval,
        });
        let dropped = before - record.pending.len();
        tracing::warn!(%lease, interval, dropped, error = %e, "proof refused for good: dropped, never sent again");
    }

    /// Prunes the expired bids `bids` side by side; one that fails (another keeper may have
    /// pruned it first) is only logged: the next look at the books tells. One refused is not
    /// tried again.
    async fn prune_all(&mut self, bids: &[Key]) {
        let jobs = bids.iter().map(|&bid| {
            let chain = self.chain.clone();
            async move { (bid, chain.prune_bid(bid).await) }
        });
        for (bid, result) in futures_util::future::join_all(jobs).await {
            match result {
                Ok(()) => tracing::info!(%bid, "pruned an expired bid"),
                Err(e) => {
                    self.chain_error(&e);
                    tracing::warn!(%bid, error = %e, "pruning an expired bid failed");
                    if !e.is_transient() {
                        self.unprunable.insert(bid);
                    }
                }
            }
        }
    }

    /// Hands the lease's container (its logs kept) to a clean-up job; the lease is forgotten
    /// when it is done, or at once when it has no container. Either way the retention of what
    /// the agent keeps for its client starts (a lease refused before its container ran may
    /// have its scratch volume mounted already).
    async fn clean_up(&mut self, lease: Key) -> Result<(), StateError> {
        self.cpu_readings.remove(&lease);
        if let Err(e) = retention::mark_ended(&self.config.data_dir, &lease) {
            tracing::warn!(%lease, error = %e, "cannot start the lease's retention");
        }
        match self.record(lease).container_id.clone() {
            Some(id) => {
                self.cpu_probe.forget(&id);
                let logs = logs_path(&self.config.data_dir, &lease);
                let (runtime, grace) = (self.runtime.clone(), self.config.container.stop_grace);
                self.jobs
                    .spawn_for(lease, jobs::clean_up(runtime, id, logs, grace));
                Ok(())
            }
            None => self.forget(lease).await,
        }
    }

    /// Resets the lease's GPUs that no other lease uses and forgets the lease.
    pub(super) async fn forget(&mut self, lease: Key) -> Result<(), StateError> {
        self.forget_auto_power(lease);
        self.metered.remove(&lease);
        self.container_backoff.remove(&lease);
        // A container readied for it that never started goes too.
        self.discard(lease);
        if let Err(e) = self.reset_gpus(lease) {
            tracing::warn!(%lease, error = %e, "resetting the lease's GPUs failed");
        }
        self.state.leases.remove(&lease);
        self.save().await
    }

    /// Resets the lease's GPUs that no other lease of this agent uses, except a GPU with a
    /// fatal fault, which is left as it is.
    fn reset_gpus(&self, lease: Key) -> Result<(), GpuError> {
        let record = &self.state.leases[&lease];
        for &i in &record.gpu_indices {
            if self.faulted.contains_key(&(i as u32)) {
                continue;
            }
            let shared =
                self.state.leases.iter().any(|(k, r)| {
                    *k != lease && r.exit_code.is_none() && r.gpu_indices.contains(&i)
                });
            if !shared {
                self.make_idle(i as u32)?;
            }
        }
        Ok(())
    }
}
