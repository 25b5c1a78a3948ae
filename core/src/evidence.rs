//! The power readings behind a usage proof, as evidence someone other than the host can check.
//!
//! A proof states each GPU's sustained peak power ([`SustainedPeak`]); on its own that is the
//! host's word. With each proof the agent also commits to the readings the peak came from: the
//! proof carries the sha256 of [`PowerLog::encode`] (`samples_hash`), chained into the proof's
//! hash and in its `UsageProven` event, and the agent keeps the log where the lease's container
//! can read it. Anyone holding a log can then check that it is the one the proof committed to and
//! that the proof's peaks are the log's ([`PowerLog::peak_power_w`]): a proof that understates
//! its own readings is provable misreporting. What stays the host's word: the readings
//! themselves (NVML on the host), which the lease's own container can compare with what it reads.

use crate::lease::{SustainedPeak, SUSTAINED_READINGS};

/// One GPU's readings for one interval, in mW.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(deny_unknown_fields)
)]
pub struct GpuPowerLog {
    /// The readings carried in from before the interval, oldest first (at most
    /// [`SUSTAINED_READINGS`]): the first sustained windows of the interval average over them.
    pub carried_mw: Vec<u32>,
    /// The interval's readings, in order.
    pub readings_mw: Vec<u32>,
}

/// The readings of each of a lease's GPUs (in the lease's GPU order) for one interval.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(deny_unknown_fields)
)]
pub struct PowerLog {
    pub gpus: Vec<GpuPowerLog>,
}

/// The first bytes of an encoded log (format version 1).
pub const POWER_LOG_MAGIC: &[u8; 8] = b"GMPWR\0\0\x01";

impl PowerLog {
    /// An empty log for `gpus` GPUs.
    pub fn new(gpus: usize) -> Self {
        PowerLog {
            gpus: vec![GpuPowerLog::default(); gpus],
        }
    }

    /// Adds one reading of GPU `i` (in the lease's GPU order).
    pub fn record(&mut self, i: usize, power_mw: u32) {
        if let Some(g) = self.gpus.get_mut(i) {
            g.readings_mw.push(power_mw);
        }
    }

    /// The log of the next interval: each GPU's last [`SUSTAINED_READINGS`] readings carried in.
    pub fn next_interval(&self) -> Self {
        let gpus = self
            .gpus
            .iter()
            .map(|g| {
                let all: Vec<u32> = g.carried_mw.iter().chain(&g.readings_mw).copied().collect();
                GpuPowerLog {
                    carried_mw: all[all.len().saturating_sub(SUSTAINED_READINGS)..].to_vec(),
                    readings_mw: Vec::new(),
                }
            })
            .collect();
        PowerLog { gpus }
    }

    /// The bytes a proof's `samples_hash` is the sha256 of: [`POWER_LOG_MAGIC`], the GPU count,
    /// then per GPU the count and values of its carried readings and of its readings, all
    /// little-endian u32.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = POWER_LOG_MAGIC.to_vec();
        out.extend_from_slice(&(self.gpus.len() as u32).to_le_bytes());
        for g in &self.gpus {
            for part in [&g.carried_mw, &g.readings_mw] {
                out.extend_from_slice(&(part.len() as u32).to_le_bytes());
                for mw in part {
                    out.extend_from_slice(&mw.to_le_bytes());
                }
            }
        }
        out
    }

    /// Each GPU's sustained peak over the interval, in W, as a proof states it: the readings
    /// replayed through [`SustainedPeak`].
    pub fn peak_power_w(&self) -> Vec<u16> {
        self.gpus
            .iter()
            .map(|g| {
                let mut peak = SustainedPeak::default();
                for &mw in &g.carried_mw {
                    peak.record(mw);
                }
                peak.next_interval();
                for &mw in &g.readings_mw {
                    peak.record(mw);
                }
                peak.peak_w()
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_replayed_peak_is_the_incremental_one_across_intervals() {
        // One GPU read 12 times over three intervals of 4 readings, as the agent meters it.
        let readings = [
            300_000, 300_000, 360_000, 300_000, 330_000, 330_000, 330_000, 330_000, 330_000,
            250_000, 250_000, 250_000,
        ];
        let mut live = SustainedPeak::default();
        let mut log = PowerLog::new(1);
        for (k, chunk) in readings.chunks(4).enumerate() {
            if k > 0 {
                live.next_interval();
                log = log.next_interval();
            }
            for &mw in chunk {
                live.record(mw);
                log.record(0, mw);
            }
            assert_eq!(log.peak_power_w(), vec![live.peak_w()], "interval {k}");
            assert!(log.gpus[0].carried_mw.len() <= SUSTAINED_READINGS);
        }
    }

    #[test]
    fn the_encoding_tells_every_reading_and_where_it_belongs() {
        let mut a = PowerLog::new(2);
        a.record(0, 1);
        a.record(1, 2);
        let mut b = PowerLog::new(2);
        b.record(0, 1);
        b.record(0, 2);
        assert_ne!(a.encode(), b.encode());
        assert!(a.encode().starts_with(POWER_LOG_MAGIC));
        // A reading moved from carried to the interval changes the bytes.
        let moved = PowerLog {
            gpus: vec![GpuPowerLog {
                carried_mw: vec![1],
                readings_mw: vec![],
            }],
        };
        let kept = PowerLog {
            gpus: vec![GpuPowerLog {
                carried_mw: vec![],
                readings_mw: vec![1],
            }],
        };
        assert_ne!(moved.encode(), kept.encode());
    }
}
