//! Two MPS clients of one slice, confined as a shared lease's container is.

use super::load::{Held, LoadError, Running};
use super::report::Outcome;
use super::GpuCheck;
use crate::gpu::isolation::isolation;
use crate::gpu::GpuInfo;

/// A client inside its slice asks this much less than the slice: room for its CUDA context.
const CONTEXT_ROOM_MIB: u64 = 1_024;

impl GpuCheck<'_> {
    /// Two MPS clients of one slice: one within it, one over it.
    pub(super) async fn mps(&mut self, gpus: &[GpuInfo]) {
        let Some(mps) = &self.options.mps else {
            let detail =
                "no MPS daemon (gpu.mps_pipe_dir): leases that share a GPU are refused".to_string();
            self.row(
                "mps_over_slice",
                None,
                "-".into(),
                "-".into(),
                Outcome::Skipped,
                detail,
            );
            return;
        };
        let memory_gib = self.gpu.memory_gib();
        let slice_gib = (memory_gib / 4).max(1);
        let index = self.gpu.index as u8;
        let confined = match isolation(&[index], slice_gib, gpus, Some(mps)) {
            Ok(confined) => confined,
            Err(e) => {
                self.row(
                    "mps_over_slice",
                    None,
                    format!("{slice_gib} GiB"),
                    "-".into(),
                    Outcome::Failed,
                    e.to_string(),
                );
                return;
            }
        };
        let slice_mib = slice_gib as u64 * 1024;
        let within_mib = slice_mib.saturating_sub(CONTEXT_ROOM_MIB).max(256);
        let within = self.load.hold(self.gpu, &confined.env, within_mib).await;
        let within = self.held("mps_within_slice", within_mib, slice_gib, within, true);
        if let Some(client) = &within {
            let listed = Some(self.backend.processes(self.gpu.index));
            self.accounting("mps_accounting", client.pid(), listed);
        }
        let over_mib = slice_mib + CONTEXT_ROOM_MIB;
        let over = self.load.hold(self.gpu, &confined.env, over_mib).await;
        let over = self.held("mps_over_slice", over_mib, slice_gib, over, false);
        for client in [within, over].into_iter().flatten() {
            client.stop().await;
        }
    }

    /// The row for an MPS client's allocation of `mib` in a slice of `slice_gib`, which should
    /// be granted (`fits`) or refused; the client, if it holds memory.
    fn held(
        &mut self,
        step: &'static str,
        mib: u64,
        slice_gib: u16,
        held: Result<Option<Held>, LoadError>,
        fits: bool,
    ) -> Option<Running> {
        let asked = format!("{mib} MiB of a {slice_gib} GiB slice");
        let (got, outcome, detail, running) = match held {
            Ok(None) => (
                "-".into(),
                Outcome::Skipped,
                "no workload to run MPS clients with (--workload)".into(),
                None,
            ),
            Err(e) => ("-".into(), Outcome::Failed, e.to_string(), None),
            Ok(Some(Held::Holding(r))) if fits => (
                "allocated".into(),
                Outcome::Ok,
                "granted, as a lease's slice must be".into(),
                Some(r),
            ),
            Ok(Some(Held::Holding(r))) => (
                "allocated".into(),
                Outcome::Failed,
                "a client took more than its slice: MPS does not confine leases here".into(),
                Some(r),
            ),
            Ok(Some(Held::Refused(why))) if fits => (
                "refused".into(),
                Outcome::Failed,
                format!("a client within its slice was refused: {why}"),
                None,
            ),
            Ok(Some(Held::Refused(why))) => (
                "refused".into(),
                Outcome::Ok,
                format!("the MPS server held the slice: {why}"),
                None,
            ),
        };
        self.row(step, None, asked, got, outcome, detail);
        running
    }
}
