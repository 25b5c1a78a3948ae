//! Leases that share a GPU are metered by their part of it: each tick, every shared GPU's
//! reading since the last is split among the running leases on it by what their processes use
//! (`gpu::attribution`), the GPU's processes mapped to leases through their containers' PIDs.
//! Each lease's energy part adds to its attributed count (in its record, so it outlives a
//! restart); its power and utilisation parts are this tick's readings of the GPU for it.
//!
//! The same reading of what each tenant's processes hold is the slice's last guard: a lease
//! whose processes hold more of the GPU than its slice and a CUDA context's room
//! ([`crate::gpu::mps::CONTEXT_ROOM_MIB`]) — its MPS limit raised from inside its container — is
//! stopped at once (`exit::OVER_SLICE`), before its co-tenants run out of memory for good.

use std::collections::{BTreeMap, BTreeSet};

use super::Reconciler;
use crate::chain::{Key, LeaseView};
use crate::gpu::attribution::{attribute, tenant_uses, Part, TenantUse};
use crate::gpu::mps::CONTEXT_ROOM_MIB;
use crate::gpu::{GpuBackend, Sample};

#[derive(Debug, Default)]
pub struct Tenancy {
    /// Per shared GPU with running leases, the energy counter (mJ) up to which its energy was
    /// split among them.
    split_to_mj: BTreeMap<u8, u64>,
    /// Each running lease's part of the latest readings of the GPUs it shares.
    parts: BTreeMap<(Key, u8), Part>,
    /// The host PIDs of each tenant container, as last asked of the engine: asked again only
    /// when a GPU shows a process none of its tenants is known to run (asking every container
    /// every tick costs the engine more than the starts it must serve).
    pids: BTreeMap<String, Vec<u32>>,
    /// Per GPU, the processes on it that no tenant ran when their PIDs were last asked (an
    /// MPS server, the host's own): they do not make the PIDs be asked again.
    strangers: BTreeMap<u8, Vec<u32>>,
    /// Each lease's GiB per GPU, as the chain last listed it.
    slices: BTreeMap<Key, u16>,
    /// The leases whose processes held more of a GPU they share than their slice this tick.
    pub(super) over_slice: BTreeSet<Key>,
}

impl Reconciler {
    /// Splits the reading of every GPU that running leases share since the last split among
    /// them, and notes the leases that hold more of one than their slice; `engine_answers`
    /// tells whether their containers' PIDs can be asked for (else the parts are equal), and
    /// `listed` is the chain's leases, where it answered.
    pub(super) async fn split_shared_gpus(
        &mut self,
        engine_answers: bool,
        listed: Option<&[LeaseView]>,
    ) {
        if let Some(listed) = listed {
            self.tenancy.slices = listed.iter().map(|l| (l.key, l.gib_per_gpu)).collect();
        }
        self.tenancy.over_slice.clear();
        let mut tenants: BTreeMap<u8, Vec<(Key, String)>> = BTreeMap::new();
        for (key, r) in &self.state.leases {
            let (Some(id), None, Some(_)) = (&r.container_id, r.exit_code, r.running_since) else {
                continue;
            };
            for &gpu in r.attributed_energy_mj.keys() {
                tenants.entry(gpu).or_default().push((*key, id.clone()));
            }
        }
        // A GPU no running lease shares starts afresh when one does: the energy in between is
        // nobody's.
        self.tenancy
            .split_to_mj
            .retain(|gpu, _| tenants.contains_key(gpu));
        self.tenancy.parts.clear();
        let tenant_ids: std::collections::BTreeSet<&String> =
            tenants.values().flatten().map(|(_, id)| id).collect();
        let mut pids = std::mem::take(&mut self.tenancy.pids);
        pids.retain(|id, _| tenant_ids.contains(id));
        let mut strangers = std::mem::take(&mut self.tenancy.strangers);
        strangers.retain(|gpu, _| tenants.contains_key(gpu));
        for (gpu, leases) in tenants {
            let sample = self
                .last_samples
                .get(&(gpu as u32))
                .copied()
                .unwrap_or_default();
            let energy_mj = self
                .tenancy
                .split_to_mj
                .insert(gpu, sample.energy_mj)
                .map_or(0, |before| sample.energy_mj.saturating_sub(before));
            let uses = if leases.len() > 1 && engine_answers {
                self.uses(gpu, &leases, &mut pids, strangers.entry(gpu).or_default())
                    .await
            } else {
                vec![TenantUse::default(); leases.len()]
            };
            for ((lease, _), used) in leases.iter().zip(&uses) {
                let Some(&gib) = self.tenancy.slices.get(lease) else {
                    continue;
                };
                let room = ((gib as u64) << 10).saturating_add(CONTEXT_ROOM_MIB) << 20;
                if used.memory_bytes > room {
                    tracing::warn!(%lease, gpu, held_mib = used.memory_bytes >> 20, slice_gib = gib,
                        "the lease holds more of a shared GPU than its slice: stopping it");
                    self.tenancy.over_slice.insert(*lease);
                }
            }
            for ((lease, _), part) in leases.iter().zip(attribute(&sample, energy_mj, &uses)) {
                if let Some(r) = self.state.leases.get_mut(lease) {
                    r.attribute_energy(gpu, part.energy_mj);
                }
                self.tenancy.parts.insert((*lease, gpu), part);
            }
        }
        self.tenancy.pids = pids;
        self.tenancy.strangers = strangers;
    }

    /// What each of `leases` (with their containers) uses of GPU `gpu`; `pids` keeps the
    /// containers' PIDs, asked of the engine only for a container not known yet or when the
    /// GPU runs a process that no tenant is known to run. What cannot be read counts as nothing
    /// used.
    async fn uses(
        &self,
        gpu: u8,
        leases: &[(Key, String)],
        pids: &mut BTreeMap<String, Vec<u32>>,
        strangers: &mut Vec<u32>,
    ) -> Vec<TenantUse> {
        let processes = match self.gpus.processes(gpu as u32) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(gpu, error = %e, "listing the GPU's processes failed; its leases share it equally this tick");
                Vec::new()
            }
        };
        let known = |pids: &BTreeMap<String, Vec<u32>>, pid: u32| {
            leases
                .iter()
                .any(|(_, id)| pids.get(id).is_some_and(|p| p.contains(&pid)))
        };
        if processes
            .iter()
            .any(|p| !known(pids, p.pid) && !strangers.contains(&p.pid))
        {
            for (_, id) in leases {
                pids.remove(id);
            }
        }
        let mut tenant_pids = Vec::with_capacity(leases.len());
        for (lease, id) in leases {
            if !pids.contains_key(id) && !processes.is_empty() {
                let listed = self.runtime.pids(id).await.unwrap_or_else(|e| {
                    tracing::warn!(%lease, container = %id, error = %e, "listing the container's processes failed");
                    Vec::new()
                });
                pids.insert(id.clone(), listed);
            }
            tenant_pids.push(pids.get(id).cloned().unwrap_or_default());
        }
        *strangers = processes
            .iter()
            .map(|p| p.pid)
            .filter(|&pid| !known(pids, pid))
            .collect();
        tenant_uses(&processes, &tenant_pids)
    }

    /// The lease's readings of its GPUs, in its GPU order: the GPU's latest on a GPU it has
    /// whole, its part of it on a GPU it shares (with the energy attributed to it as the counter).
    pub(super) fn lease_samples(&self, lease: Key) -> Vec<Sample> {
        let r = &self.state.leases[&lease];
        r.gpu_indices
            .iter()
            .map(|&i| match r.attributed_energy_mj.get(&i) {
                Some(&energy_mj) => {
                    let part = self
                        .tenancy
                        .parts
                        .get(&(lease, i))
                        .copied()
                        .unwrap_or_default();
                    Sample {
                        power_mw: part.power_mw,
                        energy_mj,
                        utilisation_pct: part.utilisation_pct,
                        // Not split among tenants: auto power runs only on whole GPUs.
                        mem_utilisation_pct: 0,
                    }
                }
                None => self
                    .last_samples
                    .get(&(i as u32))
                    .copied()
                    .unwrap_or_default(),
            })
            .collect()
    }
}
