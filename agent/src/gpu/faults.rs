//! GPU faults: which of the driver's fault events mean the GPU cannot be trusted with work, and
//! the thread that watches for them.
//!
//! NVML reports Xid errors as events (`nvmlEventTypeXidCriticalError`, which despite its name
//! carries application errors too) and, from driver R550 on, the recovery the GPU needs
//! (`NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`). The driver's recovery action decides where it is
//! given; older drivers leave the catalogue of Xids ([`FATAL_XIDS`]). Errors a tenant's own
//! program can cause (an illegal address, Xid 13, 31, 43, 45) never count: a tenant must not be
//! able to pause the host's machine.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use super::{GpuBackend, GpuFault};

/// What the driver says a GPU needs to recover (`nvmlDeviceGpuRecoveryAction_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovery {
    /// Nothing: the GPU works on.
    None,
    /// A GPU reset.
    GpuReset,
    /// A reboot of the node.
    NodeReboot,
    /// Drain peer-to-peer (NVLink) work.
    DrainP2p,
    /// Drain the GPU's work, then reset it.
    DrainAndReset,
}

impl Recovery {
    /// The driver's code; `None` for a code this agent does not know.
    pub fn from_code(code: u64) -> Option<Recovery> {
        Some(match code {
            0 => Recovery::None,
            1 => Recovery::GpuReset,
            2 => Recovery::NodeReboot,
            3 => Recovery::DrainP2p,
            4 => Recovery::DrainAndReset,
            _ => return None,
        })
    }
}

/// Xids that take the GPU out of service when the driver names no recovery action (NVIDIA's
/// Xid catalogue): double-bit ECC (48), an internal micro-controller halt (62), a failed row
/// remapping (64), an NVLink error (74), the GPU fallen off the bus (79), an uncontained ECC
/// error (95), GSP errors (119, 120), an unrecovered ECC error (140) and "recovery action
/// changed" (154).
pub const FATAL_XIDS: [u64; 10] = [48, 62, 64, 74, 79, 95, 119, 120, 140, 154];

/// The Xid a GPU that fell off the bus gets (NVML reports it as an error, not an event).
pub const XID_FALLEN_OFF_BUS: u64 = 79;

/// Whether `fault` takes its GPU out of service: the driver's recovery action where it gave
/// one, else the catalogue.
pub fn is_fatal(fault: &GpuFault) -> bool {
    match fault.recovery {
        Some(r) => r != Recovery::None,
        None => FATAL_XIDS.contains(&fault.xid),
    }
}

/// How long one wait for fault events lasts: how soon the watching thread notices that the
/// agent stopped.
const WAIT: Duration = Duration::from_secs(1);

/// The longest wait before a failed watch is tried again (it doubles from [`WAIT`]).
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Watches `gpus` for faults on a thread of its own (the driver's wait blocks), sending each
/// fault to the receiver returned. The thread ends when the receiver is dropped, or when the
/// backend cannot watch (the receiver then never yields); a failed watch is retried.
pub fn watch(gpus: Arc<dyn GpuBackend>) -> mpsc::UnboundedReceiver<GpuFault> {
    let (tx, rx) = mpsc::unbounded_channel();
    let spawned = std::thread::Builder::new()
        .name("gpu-faults".into())
        .spawn(move || {
            let mut deliver = |faults: Vec<GpuFault>| {
                faults.into_iter().all(|f| tx.send(f).is_ok()) && !tx.is_closed()
            };
            let mut backoff = WAIT;
            loop {
                match gpus.watch_faults(WAIT, &mut deliver) {
                    Ok(false) => {
                        tracing::info!("the GPU backend reports no fault events; not watching");
                        return;
                    }
                    Ok(true) => return,
                    Err(e) => {
                        tracing::warn!(error = %e, retry_secs = backoff.as_secs(), "watching for GPU fault events failed");
                        std::thread::sleep(backoff);
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                        if tx.is_closed() {
                            return;
                        }
                    }
                }
            }
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot start the GPU fault watcher");
    }
    rx
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fault(xid: u64, recovery: Option<Recovery>) -> GpuFault {
        GpuFault {
            index: 0,
            xid,
            recovery,
        }
    }

    #[test]
    fn the_drivers_recovery_action_decides_and_the_catalogue_stands_in_without_one() {
        // A tenant's own errors never take the GPU out, whatever it does.
        for xid in [13, 31, 43, 45, 63, 92, 94] {
            assert!(!is_fatal(&fault(xid, None)), "xid {xid}");
        }
        for xid in FATAL_XIDS {
            assert!(is_fatal(&fault(xid, None)), "xid {xid}");
        }
        // Where the driver names the recovery, it decides, both ways.
        assert!(!is_fatal(&fault(48, Some(Recovery::None))));
        for r in [
            Recovery::GpuReset,
            Recovery::NodeReboot,
            Recovery::DrainP2p,
            Recovery::DrainAndReset,
        ] {
            assert!(is_fatal(&fault(13, Some(r))), "{r:?}");
        }
        assert_eq!(Recovery::from_code(4), Some(Recovery::DrainAndReset));
        assert_eq!(Recovery::from_code(9), None);
    }
}
