//! The GPUs' power beyond a lease's settings: auto power for leases that opted in
//! ([`crate::gpu::dvfs`]), and the fatal faults that end the leases on a GPU and pause the
//! machine ([`crate::gpu::faults`]).

use gpu_market_core::overclock::OverclockTerms;

use super::plan::Observed;
use super::Reconciler;
use crate::chain::Key;
use crate::gpu::dvfs::{AutoPower, Reading};
use crate::gpu::{apply_and_verify, faults, GpuBackend, GpuError, GpuInfo};

impl Reconciler {
    /// Takes the fault events the watcher sent since the last tick; keeps the fatal ones (the
    /// first per GPU) until the agent restarts, by when the machine is paused on chain.
    pub(super) fn take_faults(&mut self) {
        while let Ok(f) = self.faults.try_recv() {
            if !faults::is_fatal(&f) {
                tracing::warn!(gpu = f.index, xid = f.xid, recovery = ?f.recovery, "GPU error event (not fatal: the GPU stays in service)");
                continue;
            }
            tracing::error!(gpu = f.index, xid = f.xid, recovery = ?f.recovery, "fatal GPU fault: its leases end now and the machine is paused");
            self.faulted.entry(f.index).or_insert(f);
        }
    }

    /// The fault is on chain: the machine is paused.
    pub(super) fn fault_reported(&mut self, gpu: u8, xid: u32) {
        self.fault_reported = true;
        tracing::error!(
            gpu,
            xid,
            "GPU fault reported on chain: the machine is paused until its owner resumes it \
             (`gpu-market host resume`) once the GPU is serviced"
        );
    }

    /// One step of auto power on each GPU of `lease`, after its reading was metered: where the
    /// lease opted in and holds its GPUs whole. A limit that does not take returns the GPU to
    /// the stated one and turns auto power off for the lease.
    pub(super) fn auto_power(&mut self, lease: Key, o: &Observed) {
        let Some(view) = o
            .chain
            .as_ref()
            .and_then(|c| c.leases.iter().find(|l| l.key == lease))
        else {
            return;
        };
        let Some(tolerance) = view.auto_power else {
            return;
        };
        let record = &self.state.leases[&lease];
        if self.auto_power_off.contains(&lease)
            || !record.attributed_energy_mj.is_empty()
            || record.running_since.is_none()
        {
            return;
        }
        let at_ms = self.epoch.elapsed().as_millis() as u64;
        let mut saved_mj = 0;
        for (&gpu, stated) in view.gpu_indices.iter().zip(&view.overclock) {
            let least = self
                .gpu_infos
                .iter()
                .find(|g| g.index == gpu as u32)
                .map_or(stated.power_limit_w, |g| g.limits.power_w.min);
            let Some(sample) = o
                .gpus
                .iter()
                .find(|g| g.index == gpu as u32)
                .map(|g| g.sample)
            else {
                continue;
            };
            let Ok(clocks) = self.gpus.clocks(gpu as u32) else {
                continue;
            };
            let control = self
                .auto_powers
                .entry((lease, gpu))
                .or_insert_with(|| AutoPower::new(stated.power_limit_w, least, tolerance));
            let limit = control.observe(&Reading::of(at_ms, &sample, &clocks));
            saved_mj += control.take_saved_mj();
            let Some(w) = limit else { continue };
            let lowered = OverclockTerms {
                power_limit_w: w,
                ..*stated
            };
            if let Err(e) = apply_and_verify(self.gpus.as_ref(), gpu as u32, &lowered) {
                tracing::warn!(%lease, gpu, error = %e, "auto power: the limit did not take; the stated one holds for the rest of the lease");
                self.auto_power_off.insert(lease);
                for (&g, s) in view.gpu_indices.iter().zip(&view.overclock) {
                    self.auto_powers.remove(&(lease, g));
                    if let Err(e) = apply_and_verify(self.gpus.as_ref(), g as u32, s) {
                        tracing::warn!(%lease, gpu = g, error = %e, "auto power: the stated limit did not take back");
                    }
                }
                return;
            }
            tracing::debug!(%lease, gpu, limit_w = w, "auto power: limit moved");
        }
        if let Some(r) = self.state.leases.get_mut(&lease) {
            r.energy_saved_mj = r.energy_saved_mj.saturating_add(saved_mj);
        }
    }

    /// What GPU `info` is set to while no lease uses it: its defaults, at its least power
    /// limit where idle GPUs are parked (auto power's other half: a GPU waiting for work draws
    /// as little as its driver allows).
    pub(super) fn idle(&self, info: &GpuInfo) -> OverclockTerms {
        let defaults = info.defaults();
        match self.config.park_idle_gpus {
            true => OverclockTerms {
                power_limit_w: info.limits.power_w.min,
                ..defaults
            },
            false => defaults,
        }
    }

    /// Resets GPU `index` and sets its idle settings.
    pub(super) fn make_idle(&self, index: u32) -> Result<(), GpuError> {
        self.gpus.reset(index)?;
        match self.gpu_infos.iter().find(|g| g.index == index) {
            Some(info) if self.config.park_idle_gpus => {
                apply_and_verify(self.gpus.as_ref(), index, &self.idle(info))
            }
            _ => Ok(()),
        }
    }

    /// Forgets the auto power of a lease that ended.
    pub(super) fn forget_auto_power(&mut self, lease: Key) {
        self.auto_powers.retain(|(l, _), _| *l != lease);
        self.auto_power_off.remove(&lease);
    }
}
