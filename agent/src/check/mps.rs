//! Two MPS clients of one slice, confined as a shared lease's container is: by a daemon of their
//! own, its limits set on the server side (`gpu::mps`), their own variables left unset.

use super::load::{Held, LoadError, Running};
use super::report::Outcome;
use super::GpuCheck;
use crate::gpu::isolation::isolation;
use crate::gpu::mps::CONTEXT_ROOM_MIB;
use crate::gpu::GpuInfo;

impl GpuCheck<'_> {
    /// Two MPS clients of one slice: one within it, one over it.
    pub(super) async fn mps(&mut self, gpus: &[GpuInfo]) {
        let Some(mps) = &self.options.mps else {
            let detail =
                "no MPS (gpu.mps_control): the machine's GPUs go whole, one lease each".to_string();
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
        // The check's own daemon, as a lease's (a key no lease has).
        let check = crate::chain::Key([0; 32]);
        let started = match isolation(&check, (&[index], false), slice_gib, gpus, Some(mps)) {
            Ok(c) => match c.daemon.clone() {
                Some(daemon) => crate::off_runtime(move || daemon.start())
                    .await
                    .map(|()| c)
                    .map_err(|e| e.to_string()),
                None => Err("a slice of the GPU got no MPS daemon".to_string()),
            },
            Err(e) => Err(e.to_string()),
        };
        let confined = match started {
            Ok(confined) => confined,
            Err(e) => {
                self.row(
                    "mps_over_slice",
                    None,
                    format!("{slice_gib} GiB"),
                    "-".into(),
                    Outcome::Failed,
                    e,
                );
                return;
            }
        };
        let daemon = confined.daemon.clone().expect("started above");
        // The clients run as a lease's container does: with the daemon's `/dev/shm`.
        let load = self.load.sharing_shm_of(&daemon);
        let slice_mib = slice_gib as u64 * 1024;
        let within_mib = slice_mib.saturating_sub(CONTEXT_ROOM_MIB).max(256);
        let within = load.hold(self.gpu, &confined.env, within_mib).await;
        let within = self.held("mps_within_slice", within_mib, slice_gib, within, true);
        if let Some(client) = &within {
            let listed = Some(self.backend.processes(self.gpu.index));
            self.accounting("mps_accounting", client.pid(), listed);
        }
        let over_mib = slice_mib + CONTEXT_ROOM_MIB;
        let over = load.hold(self.gpu, &confined.env, over_mib).await;
        let over = self.held("mps_over_slice", over_mib, slice_gib, over, false);
        for client in [within, over].into_iter().flatten() {
            client.stop().await;
        }
        crate::off_runtime(move || crate::gpu::mps::stop(&daemon.control, &daemon.dir)).await;
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
