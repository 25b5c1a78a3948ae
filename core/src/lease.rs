//! Lease arithmetic shared by the program (which pays) and the agent (which proves): when a bid
//! may start and how long it then runs, the time window each usage proof covers, the seconds it may be paid for, the spot rule's profit, and
//! the byte layout that chains one proof to the next.

use crate::math::{mul_div_floor, MathError};
use crate::settlement::SECS_PER_DAY;

/// The latest time a bid may start: its `deadline` (the latest end of its run) less the shortest
/// run its client accepts. A bid never starts after it, so its lease runs at least that long.
pub fn latest_start(deadline: i64, min_duration_secs: u32) -> i64 {
    deadline.saturating_sub(min_duration_secs as i64)
}

/// When a bid's lease that starts at `start` ends: after its longest run, or at its deadline.
pub fn run_end(start: i64, max_duration_secs: u64, deadline: i64) -> Option<i64> {
    Some(
        start
            .checked_add(i64::try_from(max_duration_secs).ok()?)?
            .min(deadline),
    )
}

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
    /// The lease shares a GPU with other leases (its GiB slice is less than the GPU's memory)
    /// and the host cannot confine it to its slice (no NVIDIA MPS set up on the host). Such a
    /// host's agent has its GPUs go whole (`set_whole_gpus`), so only a lease started beside
    /// another before the chain was told can end so.
    pub const ISOLATION_UNAVAILABLE: i32 = -6;
    /// Set by the program, not the host: the market's idle rule ended the lease after its GPUs
    /// stayed under the idle threshold for `idle_end_intervals` proofs in a row.
    pub const IDLE_ENDED: i32 = -7;
    /// A GPU of the lease failed (a fatal Xid error, or the driver asked for a reset or a
    /// reboot): the host ended the lease at once and paused its machine.
    pub const GPU_FAULT: i32 = -8;
    /// The lease's processes held more memory of a GPU it shares than its slice (and the room
    /// of a CUDA context): the host stopped it, so that its co-tenants keep theirs.
    pub const OVER_SLICE: i32 = -9;

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
            ISOLATION_UNAVAILABLE => {
                "the host cannot confine a lease to its slice of a shared GPU".into()
            }
            IDLE_ENDED => {
                "the market's idle rule ended the lease: its GPUs stayed idle for the intervals the rule allows".into()
            }
            GPU_FAULT => {
                "a GPU of the lease failed (the driver reported a fatal error); the host ended the lease at once and paused the machine".into()
            }
            OVER_SLICE => {
                "the lease held more memory of a GPU it shares than its slice; the host stopped it so its co-tenants keep theirs".into()
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
///
/// Every lease's intervals fall on one grid, the multiples of `interval_secs` in unix time: a
/// lease's first window runs from its start to the next boundary, and the windows of all the
/// leases of a machine close together, so one transaction proves them all.
pub fn interval_window(start: i64, interval_secs: u32, k: u32, stop: i64) -> Option<(i64, i64)> {
    span_window(start, interval_secs, k, 1, stop)
}

/// The window `[from, to)` of the `n` intervals from `k` on ([`interval_window`] of `k` to that
/// of `k + n − 1`), clipped at `stop`: what one proof of a span proves. `None` when `n` is 0 or
/// the lease had stopped before interval `k` began; intervals of the span after the stop add
/// nothing.
pub fn span_window(
    start: i64,
    interval_secs: u32,
    k: u32,
    n: u16,
    stop: i64,
) -> Option<(i64, i64)> {
    if interval_secs == 0 || n == 0 {
        return None;
    }
    let len = interval_secs as i64;
    let grid = grid_floor(start, interval_secs as u64)?;
    let boundary = |i: i64| grid.checked_add(len.checked_mul(i)?);
    let from = boundary(k as i64)?.max(start);
    let to = boundary(k as i64 + n as i64)?.min(stop);
    (from < to).then_some((from, to))
}

/// How many intervals one proof of a lease covers when its host is on time: as many as leave
/// one interval of the silence window for a proof that must be sent again (`silence_intervals
/// − 1`), at most [`MAX_PROOF_SPAN`], at least 1. Fewer proofs are fewer signatures: at the
/// recommended 3 intervals of silence, one every two intervals.
pub fn proof_span(silence_intervals: u16) -> u16 {
    silence_intervals.saturating_sub(1).clamp(1, MAX_PROOF_SPAN)
}

/// The most intervals an agent puts in one proof: the window a client waits for its lease's
/// next proof grows with it.
pub const MAX_PROOF_SPAN: u16 = 4;

/// The interval index that `unix_time` falls in for a lease started at `start` (0 before it),
/// on the grid of [`interval_window`].
pub fn interval_index(start: i64, interval_secs: u32, unix_time: i64) -> u64 {
    let len = interval_secs.max(1) as u64;
    match (grid_floor(start, len), grid_floor(unix_time, len)) {
        (Some(from), Some(at)) if unix_time >= start => at.abs_diff(from) / len,
        _ => 0,
    }
}

/// `t` rounded down to a multiple of `len`, in unsigned arithmetic (the SBF target has no
/// signed division).
fn grid_floor(t: i64, len: u64) -> Option<i64> {
    if t >= 0 {
        i64::try_from(t as u64 / len * len).ok()
    } else {
        let up = t.unsigned_abs().div_ceil(len).checked_mul(len)?;
        0i64.checked_sub_unsigned(up)
    }
}

/// The end of the interval that `unix_time` falls in, for a lease started at `start`: the next
/// boundary of the grid after it (`None` past the range of time).
pub fn interval_end(start: i64, interval_secs: u32, unix_time: i64) -> Option<i64> {
    let k = u32::try_from(interval_index(start, interval_secs, unix_time)).ok()?;
    interval_window(start, interval_secs, k, i64::MAX).map(|(_, to)| to)
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

/// Whether a proof's utilisation keeps the lease's idle streak going; returns the new streak. A
/// proof of `intervals` idle intervals adds them all.
pub fn idle_streak(
    streak: u16,
    avg_utilisation_bps: u16,
    threshold_bps: u16,
    intervals: u16,
) -> u16 {
    if avg_utilisation_bps < threshold_bps {
        streak.saturating_add(intervals)
    } else {
        0
    }
}

/// Where the market's idle rule (a lease ends after `end_intervals` idle intervals in a row; 0:
/// never) ends a lease within a proof of `intervals` intervals whose average utilisation is
/// `avg_utilisation_bps`, the lease's streak being `streak` before it: `Some(n)` when it ends
/// after the span's first `n` intervals, short of the span's end (the rest is not proven).
pub fn idle_end_within(
    streak: u16,
    avg_utilisation_bps: u16,
    threshold_bps: u16,
    end_intervals: u16,
    intervals: u16,
) -> Option<u16> {
    let idle = avg_utilisation_bps < threshold_bps;
    let left = end_intervals.checked_sub(streak)?;
    (idle && end_intervals > 0 && left >= 1 && left < intervals).then_some(left)
}

/// What one usage proof states about one billing interval of one lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageProof {
    /// The lease's interval index, counted from its start; strictly increasing.
    pub interval: u32,
    /// How many intervals from `interval` on the proof covers ([`span_window`]); at least 1.
    pub intervals: u16,
    pub gpu_seconds: u64,
    pub energy_j: u64,
    /// Energy the host's automatic power limit saved in the interval, in J (0 unless the bid
    /// opted in to auto power): the power the lease's GPUs drew at its stated limits, less what
    /// they drew under the lowered ones, over the time they ran lowered.
    pub energy_saved_j: u64,
    /// Average GPU utilisation over the interval, in bps.
    pub avg_utilisation_bps: u16,
    /// Peak power of each of the lease's GPUs, in W, in the lease's GPU order: the highest power
    /// it sustained in the interval ([`SustainedPeak`]).
    pub peak_power_w: Vec<u16>,
    /// The container's exit status when it ended in this interval.
    pub exit_code: Option<i32>,
    /// sha256 of the power readings the peaks come from
    /// ([`crate::evidence::PowerLog::encode`]); zero when the prover kept none.
    pub samples_hash: [u8; 32],
}

/// Bytes of a proof's chain preimage with `gpus` GPUs.
pub fn preimage_len(gpus: usize) -> usize {
    32 + 32 + 4 + 2 + 8 + 8 + 8 + 2 + 1 + 4 + 2 * gpus + 32
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
        out.extend_from_slice(&self.intervals.to_le_bytes());
        out.extend_from_slice(&self.gpu_seconds.to_le_bytes());
        out.extend_from_slice(&self.energy_j.to_le_bytes());
        out.extend_from_slice(&self.energy_saved_j.to_le_bytes());
        out.extend_from_slice(&self.avg_utilisation_bps.to_le_bytes());
        out.push(self.exit_code.is_some() as u8);
        out.extend_from_slice(&self.exit_code.unwrap_or(0).to_le_bytes());
        for w in &self.peak_power_w {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out.extend_from_slice(&self.samples_hash);
        out
    }

    /// Indices (in the lease's GPU order) whose peak power exceeded its agreed limit by more
    /// than [`POWER_TOLERANCE_BPS`].
    pub fn power_violations<'a>(&'a self, limits_w: &'a [u16]) -> impl Iterator<Item = usize> + 'a {
        self.peak_power_w
            .iter()
            .zip(limits_w)
            .enumerate()
            .filter(|(_, (&peak, &limit))| exceeds_power_limit(peak, limit))
            .map(|(i, _)| i)
    }
}

/// How far, in bps of the agreed limit, a proof's peak power may exceed that limit before the
/// proof counts as a power violation: 5 %. A GPU's power controller holds its limit as an
/// average, so boost transients overshoot it for tens to a few hundred milliseconds, and NVML's
/// power reading (a ~1 s average on recent GPUs, near-instantaneous on older ones) still shows
/// part of them; the peak a proof states is already a sustained one ([`SustainedPeak`]), and this
/// margin absorbs what is left of the transients and the meter's own error, so that only a GPU
/// run above its limit is slashed.
pub const POWER_TOLERANCE_BPS: u64 = 500;

/// Whether a peak of `peak_w` breaks a limit of `limit_w`: above it by more than
/// [`POWER_TOLERANCE_BPS`].
pub fn exceeds_power_limit(peak_w: u16, limit_w: u16) -> bool {
    peak_w as u64 * 10_000 > limit_w as u64 * (10_000 + POWER_TOLERANCE_BPS)
}

/// Consecutive power readings a sustained peak averages. The agent reads a lease's GPUs into
/// its record at most once a second, however often its loop wakes, so a window spans at least
/// 5 s: longer than any boost transient.
pub const SUSTAINED_READINGS: usize = 5;

/// The peak power one GPU sustained over a billing interval, from its readings one at a time:
/// the highest mean of [`SUSTAINED_READINGS`] consecutive readings ending in the interval, so
/// that a lone transient among readings at the limit is not taken for the GPU's peak. While the
/// lease has had fewer readings, the mean of all of them stands in. Constant memory: the last
/// readings and the peak. The readings carry over from one interval to the next
/// ([`SustainedPeak::next_interval`]); only the peak restarts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(deny_unknown_fields)
)]
pub struct SustainedPeak {
    /// The last readings in mW, a ring in which `next` is the slot the next reading replaces.
    recent_mw: [u32; SUSTAINED_READINGS],
    /// How many slots of `recent_mw` hold a reading (at most [`SUSTAINED_READINGS`]).
    len: u8,
    next: u8,
    /// The highest mean since the interval began; `None` before its first reading.
    peak_mw: Option<u32>,
}

impl SustainedPeak {
    /// Adds one reading, in mW.
    pub fn record(&mut self, power_mw: u32) {
        let was_full = self.filled() == SUSTAINED_READINGS;
        let slot = self.next as usize % SUSTAINED_READINGS;
        self.recent_mw[slot] = power_mw;
        self.next = ((slot + 1) % SUSTAINED_READINGS) as u8;
        self.len = (self.filled() + 1).min(SUSTAINED_READINGS) as u8;
        let mean = self.mean_mw();
        self.peak_mw = Some(match self.peak_mw {
            Some(peak) if was_full => peak.max(mean),
            // A shorter window (the lease's first readings) stands in only until a full one.
            _ => mean,
        });
    }

    /// The interval's sustained peak in mW; 0 before the interval's first reading.
    pub fn peak_mw(&self) -> u32 {
        self.peak_mw.unwrap_or(0)
    }

    /// The interval's sustained peak in whole W (floored), as a proof states it.
    pub fn peak_w(&self) -> u16 {
        (self.peak_mw() / 1_000).min(u16::MAX as u32) as u16
    }

    /// Starts the next interval: its peak counts from its own readings on, each averaged with
    /// the readings before it, which may be the previous interval's.
    pub fn next_interval(&mut self) {
        self.peak_mw = None;
    }

    fn filled(&self) -> usize {
        (self.len as usize).min(SUSTAINED_READINGS)
    }

    /// The mean of the readings in the window (floored); 0 when there are none.
    fn mean_mw(&self) -> u32 {
        let n = self.filled();
        let sum: u64 = self.recent_mw[..n].iter().map(|&mw| mw as u64).sum();
        sum.checked_div(n as u64).unwrap_or(0) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn windows_are_clipped_at_the_stop() {
        assert_eq!(interval_window(960, 60, 0, 2_000), Some((960, 1_020)));
        assert_eq!(interval_window(960, 60, 2, 1_110), Some((1_080, 1_110)));
        assert_eq!(interval_window(960, 60, 3, 1_110), None);
        assert_eq!(interval_window(960, 0, 0, 2_000), None);
        assert_eq!(interval_window(-70, 60, 0, 0), Some((-70, -60)));
        assert_eq!(interval_window(-70, 60, 1, 0), Some((-60, 0)));
        assert_eq!(interval_index(-70, 60, -60), 1);
        assert_eq!(
            interval_window(0, 60, u32::MAX, i64::MAX),
            Some((257_698_037_700, 257_698_037_760))
        );
        assert_eq!(interval_window(i64::MAX - 10, 60, 1, i64::MAX), None);
    }

    #[test]
    fn a_span_runs_from_its_first_window_to_its_last_clipped_at_the_stop() {
        // Started at 960: windows [960, 1020), [1020, 1080), [1080, 1140), ...
        assert_eq!(span_window(960, 60, 0, 2, 2_000), Some((960, 1_080)));
        assert_eq!(span_window(960, 60, 1, 2, 2_000), Some((1_020, 1_140)));
        // A span past the stop is clipped there; one that begins after it is empty.
        assert_eq!(span_window(960, 60, 1, 4, 1_110), Some((1_020, 1_110)));
        assert_eq!(span_window(960, 60, 3, 2, 1_110), None);
        assert_eq!(span_window(960, 60, 0, 0, 2_000), None, "no interval");
        assert_eq!(
            span_window(0, 60, u32::MAX, u16::MAX, i64::MAX),
            Some((257_698_037_700, 257_701_969_800))
        );
    }

    #[test]
    fn a_proof_spans_all_but_one_interval_of_the_silence_window_up_to_the_cap() {
        assert_eq!(proof_span(0), 1);
        assert_eq!(proof_span(2), 1, "the smallest silence window: no spans");
        assert_eq!(
            proof_span(3),
            2,
            "the recommended one: two intervals a proof"
        );
        assert_eq!(proof_span(5), MAX_PROOF_SPAN);
        assert_eq!(proof_span(u16::MAX), MAX_PROOF_SPAN);
    }

    #[test]
    fn interval_index_counts_from_the_start() {
        assert_eq!(interval_index(960, 60, 959), 0);
        assert_eq!(interval_index(960, 60, 1_019), 0);
        assert_eq!(interval_index(960, 60, 1_020), 1);
    }

    #[test]
    fn leases_share_one_grid_of_boundaries() {
        // Started at 1 000 and at 1 010 (60 s intervals): both first windows end at 1 020, and
        // every later one is the same minute for both.
        assert_eq!(interval_window(1_000, 60, 0, 2_000), Some((1_000, 1_020)));
        assert_eq!(interval_window(1_010, 60, 0, 2_000), Some((1_010, 1_020)));
        assert_eq!(interval_window(1_000, 60, 1, 2_000), Some((1_020, 1_080)));
        assert_eq!(interval_window(1_010, 60, 1, 2_000), Some((1_020, 1_080)));
        assert_eq!(interval_index(1_000, 60, 1_019), 0);
        assert_eq!(interval_index(1_000, 60, 1_020), 1);
        assert_eq!(interval_end(1_000, 60, 1_000), Some(1_020));
        assert_eq!(interval_end(1_000, 60, 1_020), Some(1_080));
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
    fn an_idle_span_that_passes_the_idle_rule_ends_where_single_proofs_would_have() {
        // Ends after 3 idle intervals; 1 so far: the third is the span's second.
        assert_eq!(idle_end_within(1, 100, 500, 3, 4), Some(2));
        assert_eq!(
            idle_end_within(1, 100, 500, 3, 2),
            None,
            "at the span's end"
        );
        assert_eq!(idle_end_within(1, 500, 500, 3, 4), None, "busy");
        assert_eq!(idle_end_within(1, 100, 500, 0, 4), None, "no idle rule");
        assert_eq!(idle_end_within(0, 100, 500, 1, 2), Some(1));
        assert_eq!(idle_end_within(5, 100, 500, 3, 2), None, "ended already");
    }

    #[test]
    fn idle_streaks_reset_on_a_busy_interval() {
        assert_eq!(idle_streak(0, 100, 500, 1), 1);
        assert_eq!(idle_streak(2, 499, 500, 1), 3);
        assert_eq!(idle_streak(2, 500, 500, 1), 0);
        assert_eq!(
            idle_streak(1, 499, 500, 2),
            3,
            "a span's intervals all count"
        );
        assert_eq!(idle_streak(u16::MAX - 1, 0, 500, 4), u16::MAX);
    }

    #[test]
    fn the_preimage_has_the_documented_length_and_binds_every_field() {
        let p = UsageProof {
            interval: 3,
            intervals: 2,
            gpu_seconds: 120,
            energy_j: 36_000,
            avg_utilisation_bps: 9_000,
            peak_power_w: vec![300, 310],
            exit_code: Some(0),
            samples_hash: [4; 32],
            energy_saved_j: 0,
        };
        let a = p.chain_preimage(&[1; 32], &[2; 32]);
        assert_eq!(a.len(), preimage_len(2));
        let mut q = p.clone();
        q.intervals = 1;
        assert_ne!(a, q.chain_preimage(&[1; 32], &[2; 32]));
        let mut q = p.clone();
        q.exit_code = None;
        assert_ne!(a, q.chain_preimage(&[1; 32], &[2; 32]));
        let mut q = p.clone();
        q.samples_hash = [5; 32];
        assert_ne!(a, q.chain_preimage(&[1; 32], &[2; 32]));
        assert_ne!(a, p.chain_preimage(&[1; 32], &[3; 32]));
        assert_eq!(p.power_violations(&[300, 295]).collect::<Vec<_>>(), vec![1]);
    }

    /// The sustained peak of `readings_w` (one interval from the lease's start), in W.
    fn sustained_w(readings_w: &[u32]) -> u16 {
        let mut peak = SustainedPeak::default();
        for &w in readings_w {
            peak.record(w * 1_000);
        }
        peak.peak_w()
    }

    fn violations(peak_w: u16, limit_w: u16) -> Vec<usize> {
        UsageProof {
            interval: 0,
            intervals: 1,
            gpu_seconds: 60,
            energy_j: 0,
            avg_utilisation_bps: 10_000,
            peak_power_w: vec![peak_w],
            exit_code: None,
            samples_hash: [0; 32],
            energy_saved_j: 0,
        }
        .power_violations(&[limit_w])
        .collect()
    }

    #[test]
    fn a_lone_spike_over_the_limit_is_not_a_violation() {
        let mut readings = vec![300; 10];
        readings[4] = 360;
        let peak = sustained_w(&readings);
        assert_eq!(
            peak, 312,
            "the spike averaged with four readings at the limit"
        );
        assert!(violations(peak, 300).is_empty());
    }

    #[test]
    fn power_sustained_over_the_limit_for_a_window_is_a_violation() {
        let mut readings = vec![300; 12];
        readings[3..3 + SUSTAINED_READINGS].fill(330);
        let peak = sustained_w(&readings);
        assert_eq!(peak, 330);
        assert_eq!(violations(peak, 300), vec![0]);
    }

    #[test]
    fn the_tolerance_is_five_percent_of_the_limit_inclusive() {
        assert!(violations(315, 300).is_empty(), "exactly limit × 1.05");
        assert_eq!(violations(316, 300), vec![0]);
        assert!(violations(300, 300).is_empty());
        assert!(!exceeds_power_limit(u16::MAX, u16::MAX));
        assert!(exceeds_power_limit(1, 0));
    }

    #[test]
    fn the_window_carries_over_intervals_and_a_short_lease_averages_what_it_has() {
        let mut p = SustainedPeak::default();
        assert_eq!(p.peak_mw(), 0);
        p.record(360_000);
        assert_eq!(p.peak_mw(), 360_000, "one reading is all there is");
        p.record(300_000);
        assert_eq!(
            p.peak_mw(),
            330_000,
            "the mean of both, not the first alone"
        );
        for _ in 0..3 {
            p.record(300_000);
        }
        assert_eq!(
            p.peak_mw(),
            312_000,
            "the first full window replaces the stand-in"
        );
        p.next_interval();
        assert_eq!(p.peak_mw(), 0, "no reading in the new interval yet");
        p.record(400_000);
        assert_eq!(
            p.peak_mw(),
            (300_000 * 4 + 400_000) / 5,
            "averaged with the previous interval's last readings"
        );
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
            ISOLATION_UNAVAILABLE,
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
        fn the_sustained_peak_is_the_highest_mean_of_a_full_window(
            readings in proptest::collection::vec(0u32..2_000_000, 1..40),
            split in 0usize..40,
        ) {
            let n = SUSTAINED_READINGS;
            let mean = |w: &[u32]| (w.iter().map(|&r| r as u64).sum::<u64>() / w.len() as u64) as u32;
            // Every window ending at reading i: the last n readings, or all of them before n.
            let window_mean = |i: usize| mean(&readings[(i + 1).saturating_sub(n)..=i]);
            let split = split.min(readings.len() - 1);
            let mut p = SustainedPeak::default();
            for &r in &readings[..split] {
                p.record(r);
            }
            p.next_interval();
            for &r in &readings[split..] {
                p.record(r);
            }
            let ends = split..readings.len();
            let expected = if readings.len() >= n {
                ends.filter(|&i| i + 1 >= n).map(window_mean).max().unwrap_or_else(|| window_mean(readings.len() - 1))
            } else {
                window_mean(readings.len() - 1)
            };
            prop_assert_eq!(p.peak_mw(), expected);
            prop_assert!(p.peak_mw() <= readings[split.saturating_sub(n - 1)..].iter().copied().max().unwrap());
        }

        #[test]
        fn consecutive_windows_tile_the_lease(start in 0i64..1 << 40, len in 1u32..100_000, dur in 1i64..10_000_000) {
            let stop = start + dur;
            let mut covered = 0i64;
            let mut k = 0u32;
            while let Some((from, to)) = interval_window(start, len, k, stop) {
                prop_assert_eq!(from, start + covered);
                // Past the first, a window starts on the grid; before the last, it ends on it.
                prop_assert!(k == 0 || from % len as i64 == 0);
                prop_assert!(to == stop || to % len as i64 == 0);
                prop_assert_eq!(interval_index(start, len, from), k as u64);
                covered += to - from;
                k += 1;
            }
            prop_assert_eq!(covered, dur);
        }

        #[test]
        fn a_span_is_its_intervals_windows_joined(start in 0i64..1 << 40, len in 1u32..100_000, dur in 1i64..10_000_000, k in 0u32..200, n in 1u16..8) {
            let stop = start + dur;
            let windows: Vec<_> = (k..k + n as u32).map_while(|i| interval_window(start, len, i, stop)).collect();
            let joined = windows.first().zip(windows.last()).map(|(a, b)| (a.0, b.1));
            prop_assert_eq!(span_window(start, len, k, n, stop), joined);
        }
    }
}
