//! Lease arithmetic shared by the program (which pays) and the agent (which proves): the time
//! window each usage proof covers, the seconds it may be paid for, the spot rule's profit, and
//! the byte layout that chains one proof to the next.

use crate::math::{mul_div_floor, MathError};
use crate::settlement::SECS_PER_DAY;

/// The exit codes a host's agent puts in a lease's final proof when the client's container did
/// not run to its own exit; a container's own exit codes are 0 or more. One table for the agent
/// that writes them and the CLI that explains them.
pub mod exit {
    /// The GPU settings the lease asked for did not take on the GPUs.
    pub const SETTINGS_REFUSED: i32 = -1;
    /// The container vanished (removed behind the agent's back) or never started before a drain.
    pub const CONTAINER_LOST: i32 = -2;
    /// The image could not be pulled within the host's time and size budget.
    pub const IMAGE_UNAVAILABLE: i32 = -3;
    /// The lease's sealed environment is missing, or cannot be opened or accepted by the host.
    pub const ENVIRONMENT_UNAVAILABLE: i32 = -4;
    /// The container engine refused to create or start the container.
    pub const ENGINE_REFUSED: i32 = -5;

    /// A sentence for a final proof's exit code.
    pub fn reason(code: i32) -> String {
        match code {
            0 => "the container exited successfully".into(),
            SETTINGS_REFUSED => "the host refused the lease: its GPU settings did not take".into(),
            CONTAINER_LOST => {
                "the container was lost (removed, or never started before the host drained)".into()
            }
            IMAGE_UNAVAILABLE => "the image could not be pulled within the host's budget".into(),
            ENVIRONMENT_UNAVAILABLE => {
                "the sealed environment is missing, unreadable or refused by the host".into()
            }
            ENGINE_REFUSED => {
                "the container engine refused to create or start the container".into()
            }
            c if c > 128 && c <= 128 + 64 => {
                format!("the container was killed by signal {}", c - 128)
            }
            c if c > 0 => format!("the container exited with code {c}"),
            c => format!("the host ended the lease with code {c}"),
        }
    }
}

/// The window `[from, to)` of interval `k` of a lease that started at `start`, clipped at `stop`
/// (the lease's end, or the time it was told to stop). `None` when the window is empty: the
/// lease had stopped before interval `k` began.
pub fn interval_window(start: i64, interval_secs: u32, k: u32, stop: i64) -> Option<(i64, i64)> {
    let len = interval_secs as i64;
    let from = start.checked_add(len.checked_mul(k as i64)?)?;
    let to = from.checked_add(len)?.min(stop);
    (from < to).then_some((from, to))
}

/// The interval index that `unix_time` falls in for a lease started at `start` (0 before it).
pub fn interval_index(start: i64, interval_secs: u32, unix_time: i64) -> u64 {
    (unix_time.saturating_sub(start).max(0) as u64) / interval_secs.max(1) as u64
}

/// Seconds a proof is paid for: the window's length, or less when the proven GPU-seconds say the
/// GPUs ran for less of it (a container that crashed mid-interval).
pub fn payable_secs(window_secs: u64, gpu_seconds: u64, gpus: u64) -> u64 {
    window_secs.min(gpu_seconds / gpus.max(1))
}

/// A spot bid's profit for the host per day (GigaSPOT's rule): what the GPUs earn minus the
/// electricity they may draw at the agreed power limits. Zero when the power costs more.
pub fn spot_profit_per_day(
    price_per_gpu_day: u64,
    gpus: u64,
    total_power_limit_w: u64,
    electricity_cost_per_kwh: u64,
) -> Result<u64, MathError> {
    let revenue = price_per_gpu_day
        .checked_mul(gpus)
        .ok_or(MathError::Overflow)?;
    // W × 24 h = Wh per day; / 1000 = kWh per day.
    let watt_hours = total_power_limit_w
        .checked_mul(SECS_PER_DAY / 3_600)
        .ok_or(MathError::Overflow)?;
    let power_cost = mul_div_floor(watt_hours, electricity_cost_per_kwh, 1_000)?;
    Ok(revenue.saturating_sub(power_cost))
}

/// Whether a proof's utilisation keeps the lease's idle streak going; returns the new streak.
pub fn idle_streak(streak: u16, avg_utilisation_bps: u16, threshold_bps: u16) -> u16 {
    if avg_utilisation_bps < threshold_bps {
        streak.saturating_add(1)
    } else {
        0
    }
}

/// What one usage proof states about one billing interval of one lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageProof {
    /// The lease's interval index, counted from its start; strictly increasing.
    pub interval: u32,
    pub gpu_seconds: u64,
    pub energy_j: u64,
    /// Average GPU utilisation over the interval, in bps.
    pub avg_utilisation_bps: u16,
    /// Peak power of each of the lease's GPUs, in W, in the lease's GPU order.
    pub peak_power_w: Vec<u16>,
    /// The container's exit status when it ended in this interval.
    pub exit_code: Option<i32>,
}

/// Bytes of a proof's chain preimage with `gpus` GPUs.
pub fn preimage_len(gpus: usize) -> usize {
    32 + 32 + 4 + 8 + 8 + 2 + 1 + 4 + 2 * gpus
}

impl UsageProof {
    /// The bytes whose sha256 is the proof's chain hash: the lease, the previous hash, then every
    /// field little-endian. The program hashes them with the sha256 syscall, the agent with a
    /// library; both build them here.
    pub fn chain_preimage(&self, lease: &[u8; 32], prev_hash: &[u8; 32]) -> Vec<u8> {
        let mut out = Vec::with_capacity(preimage_len(self.peak_power_w.len()));
        out.extend_from_slice(lease);
        out.extend_from_slice(prev_hash);
        out.extend_from_slice(&self.interval.to_le_bytes());
        out.extend_from_slice(&self.gpu_seconds.to_le_bytes());
        out.extend_from_slice(&self.energy_j.to_le_bytes());
        out.extend_from_slice(&self.avg_utilisation_bps.to_le_bytes());
        out.push(self.exit_code.is_some() as u8);
        out.extend_from_slice(&self.exit_code.unwrap_or(0).to_le_bytes());
        for w in &self.peak_power_w {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out
    }

    /// Indices (in the lease's GPU order) whose peak power exceeded its agreed limit.
    pub fn power_violations<'a>(&'a self, limits_w: &'a [u16]) -> impl Iterator<Item = usize> + 'a {
        self.peak_power_w
            .iter()
            .zip(limits_w)
            .enumerate()
            .filter(|(_, (peak, limit))| peak > limit)
            .map(|(i, _)| i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn windows_are_clipped_at_the_stop() {
        assert_eq!(interval_window(1_000, 60, 0, 2_000), Some((1_000, 1_060)));
        assert_eq!(interval_window(1_000, 60, 2, 1_150), Some((1_120, 1_150)));
        assert_eq!(interval_window(1_000, 60, 3, 1_150), None);
        assert_eq!(
            interval_window(0, 60, u32::MAX, i64::MAX),
            Some((257_698_037_700, 257_698_037_760))
        );
        assert_eq!(interval_window(i64::MAX - 10, 60, 1, i64::MAX), None);
    }

    #[test]
    fn interval_index_counts_from_the_start() {
        assert_eq!(interval_index(1_000, 60, 999), 0);
        assert_eq!(interval_index(1_000, 60, 1_059), 0);
        assert_eq!(interval_index(1_000, 60, 1_060), 1);
    }

    #[test]
    fn a_crashed_container_is_paid_for_the_gpu_seconds_it_ran() {
        assert_eq!(payable_secs(60, 120, 2), 60);
        assert_eq!(payable_secs(60, 50, 2), 25);
        assert_eq!(payable_secs(60, 10_000, 2), 60);
    }

    #[test]
    fn spot_profit_subtracts_the_power_bill() {
        // 2 GPUs at 24 000/day; 2 × 300 W × 24 h = 14.4 kWh at 500/kWh = 7 200.
        assert_eq!(spot_profit_per_day(24_000, 2, 600, 500), Ok(48_000 - 7_200));
        assert_eq!(spot_profit_per_day(10, 1, 450, 1_000), Ok(0));
        assert_eq!(
            spot_profit_per_day(u64::MAX, 2, 1, 1),
            Err(MathError::Overflow)
        );
    }

    #[test]
    fn idle_streaks_reset_on_a_busy_interval() {
        assert_eq!(idle_streak(0, 100, 500), 1);
        assert_eq!(idle_streak(2, 499, 500), 3);
        assert_eq!(idle_streak(2, 500, 500), 0);
    }

    #[test]
    fn the_preimage_has_the_documented_length_and_binds_every_field() {
        let p = UsageProof {
            interval: 3,
            gpu_seconds: 120,
            energy_j: 36_000,
            avg_utilisation_bps: 9_000,
            peak_power_w: vec![300, 310],
            exit_code: Some(0),
        };
        let a = p.chain_preimage(&[1; 32], &[2; 32]);
        assert_eq!(a.len(), preimage_len(2));
        let mut q = p.clone();
        q.exit_code = None;
        assert_ne!(a, q.chain_preimage(&[1; 32], &[2; 32]));
        assert_ne!(a, p.chain_preimage(&[1; 32], &[3; 32]));
        assert_eq!(p.power_violations(&[300, 300]).collect::<Vec<_>>(), vec![1]);
    }

    #[test]
    fn every_exit_code_has_its_own_sentence() {
        use super::exit::*;
        let codes = [
            0,
            SETTINGS_REFUSED,
            CONTAINER_LOST,
            IMAGE_UNAVAILABLE,
            ENVIRONMENT_UNAVAILABLE,
            ENGINE_REFUSED,
            3,
            137,
            -9,
        ];
        let sentences: std::collections::BTreeSet<String> =
            codes.iter().map(|&c| reason(c)).collect();
        assert_eq!(sentences.len(), codes.len());
        assert_eq!(reason(137), "the container was killed by signal 9");
        assert_eq!(reason(3), "the container exited with code 3");
    }

    proptest! {
        #[test]
        fn consecutive_windows_tile_the_lease(start in 0i64..1 << 40, len in 1u32..100_000, dur in 1i64..10_000_000) {
            let stop = start + dur;
            let mut covered = 0i64;
            let mut k = 0u32;
            while let Some((from, to)) = interval_window(start, len, k, stop) {
                prop_assert_eq!(from, start + covered);
                covered += to - from;
                k += 1;
            }
            prop_assert_eq!(covered, dur);
        }
    }
}
