//! Leases that share a GPU are metered by their part of it: each tick, every shared GPU's
//! reading since the last is split among the running leases on it by what their processes use
//! (`gpu::attribution`), the GPU's processes mapped to leases through their containers' PIDs.
//! Each lease's energy part adds to its attributed count (in its record, so it outlives a
//! restart); its power and utilisation parts are this tick's readings of the GPU for it.

use std::collections::BTreeMap;

use super::Reconciler;
use crate::chain::Key;
use crate::gpu::attribution::{attribute, tenant_uses, Part, TenantUse};
use crate::gpu::Sample;

#[derive(Debug, Default)]
pub struct Tenancy {
    /// Per shared GPU with running leases, the energy counter (mJ) up to which its energy was
    /// split among them.
    split_to_mj: BTreeMap<u8, u64>,
    /// Each running lease's part of the latest readings of the GPUs it shares.
    parts: BTreeMap<(Key, u8), Part>,
}

impl Reconciler {
    /// Splits the reading of every GPU that running leases share since the last split among
    /// them; `engine_answers` tells whether their containers' PIDs can be asked for (else the
    /// parts are equal).
    pub(super) async fn split_shared_gpus(&mut self, engine_answers: bool) {
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
        let mut pids: BTreeMap<String, Vec<u32>> = BTreeMap::new();
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
                self.uses(gpu, &leases, &mut pids).await
            } else {
                vec![TenantUse::default(); leases.len()]
            };
            for ((lease, _), part) in leases.iter().zip(attribute(&sample, energy_mj, &uses)) {
                if let Some(r) = self.state.leases.get_mut(lease) {
                    r.attribute_energy(gpu, part.energy_mj);
                }
                self.tenancy.parts.insert((*lease, gpu), part);
            }
        }
    }

    /// What each of `leases` (with their containers) uses of GPU `gpu`; `pids` caches the
    /// containers' PIDs for this tick. What cannot be read counts as nothing used.
    async fn uses(
        &self,
        gpu: u8,
        leases: &[(Key, String)],
        pids: &mut BTreeMap<String, Vec<u32>>,
    ) -> Vec<TenantUse> {
        let processes = match self.gpus.processes(gpu as u32) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(gpu, error = %e, "listing the GPU's processes failed; its leases share it equally this tick");
                Vec::new()
            }
        };
        let mut tenant_pids = Vec::with_capacity(leases.len());
        for (lease, id) in leases {
            if !pids.contains_key(id) {
                let listed = self.runtime.pids(id).await.unwrap_or_else(|e| {
                    tracing::warn!(%lease, container = %id, error = %e, "listing the container's processes failed");
                    Vec::new()
                });
                pids.insert(id.clone(), listed);
            }
            tenant_pids.push(pids[id].clone());
        }
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
