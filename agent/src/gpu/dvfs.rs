//! Auto power: the power limit of a lease's GPU lowered toward what its work needs, within the
//! throughput the client's bid lets the host trade for energy (the seeds' DVFS, GigaSPOT's
//! example: a memory-bound job on a 450 W GPU draws 280 W, so a 280 W cap costs it nothing).
//!
//! One [`AutoPower`] per GPU of a lease that opted in. It works in steps of
//! [`STEP_READINGS`] readings: a *baseline* step at the bid's stated limit measures the work's
//! power and throughput; *probe* steps then lower the limit (first to just above the power the
//! work drew, then by [`step_w`] at a time) for as long as the throughput stays within the
//! tolerance; the last limit within it is *held*. Work that changes (its utilisation moves by
//! [`UTILISATION_DRIFT_PCT`] points, or its throughput falls out of tolerance), and every
//! [`HOLD_STEPS`] steps in any case, takes a new baseline at the stated limit. The limit is never
//! above the stated one nor below the GPU's least.
//!
//! NVML has no throughput counter, so it is estimated from what NVML reads: the SMs' work
//! (utilisation × core clock) and the memory's (memory utilisation × memory clock). A lower
//! limit slows the core clock; work whose throughput follows the memory keeps its memory
//! utilisation, work that follows the SMs loses both. The estimate is the better of the two
//! ratios to the baseline: a step is within tolerance when either held.
//!
//! The energy saved is what the baseline step drew less what each reading under a lowered limit
//! drew, over the time between readings; never negative. Pure: the agent feeds readings and
//! applies the limits it returns.

use gpu_market_core::overclock::OverclockTerms;

use super::simulated::{ManualTime, SimulatedGpu, TimeSource};
use super::{apply_and_verify, Clocks, GpuBackend, GpuError, Sample};

/// Readings per step: as many as a proof's sustained peak averages.
pub const STEP_READINGS: u32 = gpu_market_core::lease::SUSTAINED_READINGS as u32;

/// Steps a limit is held before a new baseline is taken (about 5 minutes at one reading a
/// second).
pub const HOLD_STEPS: u32 = 60;

/// A change of this many points of utilisation means the work changed: a new baseline.
pub const UTILISATION_DRIFT_PCT: u32 = 10;

/// The first lowered limit sits this far (bps) above the power the work drew at the baseline.
pub const DRAW_MARGIN_BPS: u32 = 500;

/// One reading of a GPU, with the time it was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reading {
    /// Milliseconds on a monotonic clock.
    pub at_ms: u64,
    pub power_mw: u32,
    pub utilisation_pct: u8,
    pub mem_utilisation_pct: u8,
    pub core_mhz: u32,
    pub mem_mhz: u32,
}

impl Reading {
    /// A GPU's reading `s` and its clocks, taken at `at_ms`.
    pub fn of(at_ms: u64, s: &Sample, clocks: &Clocks) -> Self {
        Reading {
            at_ms,
            power_mw: s.power_mw,
            utilisation_pct: s.utilisation_pct,
            mem_utilisation_pct: s.mem_utilisation_pct,
            core_mhz: clocks.core_mhz,
            mem_mhz: clocks.mem_mhz,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Baseline,
    Probe,
    Hold { steps: u32 },
}

/// The means of one step's readings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Means {
    power_mw: u64,
    utilisation_pct: u64,
    /// Utilisation × core clock, and memory utilisation × memory clock.
    sm_work: u64,
    mem_work: u64,
}

/// The controller of one GPU (see the module).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AutoPower {
    stated_w: u16,
    least_w: u16,
    tolerance_bps: u16,
    limit_w: u16,
    /// The lowest limit seen within tolerance since the baseline.
    good_w: u16,
    phase: Phase,
    baseline: Option<Means>,
    sums: Means,
    readings: u32,
    last_at_ms: Option<u64>,
    saved_mj: u64,
}

/// How far one probe lowers the limit: 5 % of the stated limit, at least 5 W.
pub fn step_w(stated_w: u16) -> u16 {
    (stated_w / 20).max(5)
}

impl AutoPower {
    /// A controller for a GPU whose bid states `stated_w` on a GPU whose least limit is
    /// `least_w`, trading at most `tolerance_bps` of throughput. It starts with a baseline at
    /// the stated limit, which the GPU must run at when it is created.
    pub fn new(stated_w: u16, least_w: u16, tolerance_bps: u16) -> Self {
        AutoPower {
            stated_w,
            least_w: least_w.clamp(1, stated_w.max(1)),
            tolerance_bps: tolerance_bps.min(10_000),
            limit_w: stated_w,
            good_w: stated_w,
            phase: Phase::Baseline,
            baseline: None,
            sums: Means::default(),
            readings: 0,
            last_at_ms: None,
            saved_mj: 0,
        }
    }

    /// The limit the GPU should run at now.
    pub fn limit_w(&self) -> u16 {
        self.limit_w
    }

    /// Takes the energy saved since the last call, in mJ.
    pub fn take_saved_mj(&mut self) -> u64 {
        std::mem::take(&mut self.saved_mj)
    }

    /// Takes one reading; returns the new limit when it changes.
    pub fn observe(&mut self, r: &Reading) -> Option<u16> {
        self.count_saving(r);
        self.sums.power_mw += r.power_mw as u64;
        self.sums.utilisation_pct += r.utilisation_pct as u64;
        self.sums.sm_work += r.utilisation_pct as u64 * r.core_mhz as u64;
        self.sums.mem_work += r.mem_utilisation_pct as u64 * r.mem_mhz as u64;
        self.readings += 1;
        if self.readings < STEP_READINGS {
            return None;
        }
        let n = self.readings as u64;
        let step = Means {
            power_mw: self.sums.power_mw / n,
            utilisation_pct: self.sums.utilisation_pct / n,
            sm_work: self.sums.sm_work / n,
            mem_work: self.sums.mem_work / n,
        };
        self.sums = Means::default();
        self.readings = 0;
        let before = self.limit_w;
        self.decide(&step);
        (self.limit_w != before).then_some(self.limit_w)
    }

    /// Energy saved by reading `r` since the one before: only under a lowered limit.
    fn count_saving(&mut self, r: &Reading) {
        let last = self.last_at_ms.replace(r.at_ms);
        let (Some(last), Some(base)) = (last, self.baseline) else {
            return;
        };
        if self.phase == Phase::Baseline {
            return;
        }
        let dt_ms = r.at_ms.saturating_sub(last);
        let less_mw = base.power_mw.saturating_sub(r.power_mw as u64);
        // mW × ms = µJ.
        self.saved_mj = self.saved_mj.saturating_add(less_mw * dt_ms / 1_000);
    }

    fn decide(&mut self, step: &Means) {
        let step_w = step_w(self.stated_w);
        match self.phase {
            Phase::Baseline => {
                self.baseline = Some(*step);
                self.good_w = self.stated_w;
                let drawn_w = step.power_mw * (10_000 + DRAW_MARGIN_BPS as u64) / 10_000_000;
                let first =
                    (drawn_w.min(u16::MAX as u64) as u16).min(self.stated_w.saturating_sub(step_w));
                self.lower_to(first);
            }
            Phase::Probe => {
                if self.within(step) {
                    self.good_w = self.limit_w;
                    let next = self.limit_w.saturating_sub(step_w);
                    self.lower_to(next);
                } else {
                    self.limit_w = self.good_w;
                    self.phase = Phase::Hold { steps: 0 };
                }
            }
            Phase::Hold { steps } => {
                if steps + 1 >= HOLD_STEPS || !self.within(step) || self.drifted(step) {
                    self.rebaseline();
                } else {
                    self.phase = Phase::Hold { steps: steps + 1 };
                }
            }
        }
    }

    /// Probes `w` (at least the GPU's least limit), or holds where no lower limit is left.
    fn lower_to(&mut self, w: u16) {
        let w = w.max(self.least_w);
        if w >= self.limit_w {
            self.phase = Phase::Hold { steps: 0 };
        } else {
            self.limit_w = w;
            self.phase = Phase::Probe;
        }
    }

    fn rebaseline(&mut self) {
        self.limit_w = self.stated_w;
        self.phase = Phase::Baseline;
    }

    /// The step's throughput estimate is within tolerance of the baseline's: the SMs' work or
    /// the memory's held.
    fn within(&self, step: &Means) -> bool {
        let Some(base) = self.baseline else {
            return true;
        };
        let keep = 10_000 - self.tolerance_bps as u64;
        let held = |now: u64, then: u64| then > 0 && now * 10_000 >= then * keep;
        (base.sm_work == 0 && base.mem_work == 0)
            || held(step.sm_work, base.sm_work)
            || held(step.mem_work, base.mem_work)
    }

    /// The work's utilisation moved since the baseline: it is other work now.
    fn drifted(&self, step: &Means) -> bool {
        self.baseline.is_some_and(|base| {
            base.utilisation_pct.abs_diff(step.utilisation_pct) >= UTILISATION_DRIFT_PCT as u64
        })
    }
}

/// What [`drive`] saw of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    /// The stated limit, then each limit the controller set, in order.
    pub limits: Vec<u16>,
    /// The energy the GPU drew, and the energy the controller says it saved, in mJ.
    pub energy_mj: u64,
    pub saved_mj: u64,
    /// The work's throughput at the end, in thousandths of its full speed (the model's).
    pub throughput_permille: u32,
}

/// Runs `control` on SIMULATED GPU `index` for `readings` readings a second apart on `time`,
/// applying each limit it returns over `stated` as the agent does (read back and checked): the
/// loop of auto power's tests and of its benchmark (`--example auto_power`).
pub fn drive(
    gpus: &SimulatedGpu,
    time: &ManualTime,
    index: u32,
    stated: OverclockTerms,
    control: &mut AutoPower,
    readings: u32,
) -> Result<Trace, GpuError> {
    apply_and_verify(gpus, index, &stated)?;
    let start_mj = gpus.sample(index)?.energy_mj;
    let mut limits = vec![stated.power_limit_w];
    let mut saved_mj = 0;
    for _ in 0..readings {
        time.advance_secs(1);
        let reading = Reading::of(time.now_ms(), &gpus.sample(index)?, &gpus.clocks(index)?);
        if let Some(w) = control.observe(&reading) {
            let lowered = OverclockTerms {
                power_limit_w: w,
                ..stated
            };
            apply_and_verify(gpus, index, &lowered)?;
            limits.push(w);
        }
        saved_mj += control.take_saved_mj();
    }
    Ok(Trace {
        limits,
        energy_mj: gpus.sample(index)?.energy_mj - start_mj,
        saved_mj,
        throughput_permille: gpus.throughput_permille(index)?,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use gpu_market_core::overclock::{GpuLimits, Range};
    use proptest::prelude::*;

    use super::*;
    use crate::gpu::simulated::Demand;

    /// A 450 W GPU (least limit 150 W, default 400 W) running `demand` at full load.
    fn machine(demand: Option<Demand>) -> (Arc<ManualTime>, SimulatedGpu) {
        let time = Arc::new(ManualTime::default());
        let config = crate::config::SimulatedGpuConfig {
            class: 0,
            memory_gib: 24,
            topology_group: 0,
            limits: GpuLimits {
                power_w: Range { min: 150, max: 450 },
                core_lock_mhz: Range {
                    min: 210,
                    max: 2_520,
                },
                mem_lock_mhz: Range {
                    min: 405,
                    max: 10_501,
                },
                core_offset_mhz: Range { min: 0, max: 0 },
                mem_offset_mhz: Range { min: 0, max: 0 },
            },
            default_power_w: 400,
        };
        let gpu = SimulatedGpu::new(&[config], time.clone());
        gpu.set_load(0, 1_000).unwrap();
        if let Some(d) = demand {
            gpu.set_demand(0, d).unwrap();
        }
        (time, gpu)
    }

    fn stated(w: u16) -> OverclockTerms {
        OverclockTerms {
            power_limit_w: w,
            ..Default::default()
        }
    }

    /// Runs a controller at a stated `stated_w` and tolerance `tol` for `readings` seconds.
    fn run(demand: Option<Demand>, stated_w: u16, tol: u16, readings: u32) -> Trace {
        let (time, gpu) = machine(demand);
        let mut c = AutoPower::new(stated_w, 150, tol);
        let trace = drive(&gpu, &time, 0, stated(stated_w), &mut c, readings).unwrap();
        for &w in &trace.limits {
            assert!(
                (150..=stated_w).contains(&w),
                "limit {w} outside 150..={stated_w}"
            );
        }
        trace
    }

    /// GigaSPOT's example: 280 W of a 450 W GPU, 40 % of its time on memory.
    const MEMORY_BOUND: Demand = Demand {
        draw_w: 280,
        memory_bound_pct: 40,
    };

    #[test]
    fn a_memory_bound_load_is_capped_near_its_draw_and_below_at_no_cost() {
        let r = run(Some(MEMORY_BOUND), 400, 0, 200);
        // First just above its draw (280 W + 5 %), then lower while the memory keeps the pace.
        assert_eq!(r.limits[1], 294);
        let held = *r.limits.last().unwrap();
        assert!(held < 280, "held {held} W");
        // Nothing lost with a tolerance of 0, and the saving is real: what the work drew at
        // the stated limit (280 W) less what it drew, over the time it ran lowered.
        assert_eq!(r.throughput_permille, 1_000);
        assert!(r.saved_mj > 0);
        assert!(
            r.energy_mj + r.saved_mj <= (280 * 200 + 280) * 1_000,
            "{} + {}",
            r.energy_mj,
            r.saved_mj
        );
    }

    #[test]
    fn a_compute_bound_load_keeps_its_limit_without_tolerance_and_trades_within_one() {
        let strict = run(None, 400, 0, 100);
        // Every probe slows the SMs as much as it saves: with no tolerance the limit comes back.
        assert_eq!(strict.throughput_permille, 1_000);
        assert_eq!(*strict.limits.last().unwrap(), 400);
        let loose = run(None, 400, 1_000, 100);
        assert!(*loose.limits.iter().min().unwrap() < 400);
        assert!(
            loose.throughput_permille >= 900,
            "throughput {}",
            loose.throughput_permille
        );
        assert!(loose.saved_mj > 0);
    }

    #[test]
    fn work_that_changes_takes_a_new_baseline_at_the_stated_limit() {
        let (time, gpu) = machine(Some(MEMORY_BOUND));
        gpu.set_load(0, 200).unwrap();
        let mut c = AutoPower::new(400, 150, 0);
        let light = drive(&gpu, &time, 0, stated(400), &mut c, 100).unwrap();
        let limit = *light.limits.last().unwrap();
        assert!(limit < 250, "light work holds a low limit: {limit}");
        // `drive` starts from the stated limit: set the held one back, as the GPU runs it.
        apply_and_verify(&gpu, 0, &stated(limit)).unwrap();
        gpu.set_load(0, 1_000).unwrap();
        let mut back = false;
        for _ in 0..2 * STEP_READINGS {
            time.advance_secs(1);
            let (s, k) = (gpu.sample(0).unwrap(), gpu.clocks(0).unwrap());
            c.observe(&Reading::of(time.now_ms(), &s, &k));
            back |= c.limit_w() == 400;
        }
        assert!(
            back,
            "the heavier work got the stated limit back for a new baseline"
        );
    }

    proptest! {
        /// Whatever the readings, the limit stays between the GPU's least and the stated one,
        /// and the saving never exceeds what the baseline would have drawn.
        #[test]
        fn the_limit_stays_within_the_stated_and_the_least(
            stated in 100u16..700,
            least in 1u16..700,
            tol in 0u16..=2_000,
            readings in proptest::collection::vec((0u32..800_000, 0u8..=100, 0u8..=100, 0u32..3_000, 0u32..12_000), 1..400),
        ) {
            let mut c = AutoPower::new(stated, least, tol);
            let mut saved = 0u64;
            let mut peak_mw = 0u64;
            for (i, (p, u, m, core, mem)) in readings.iter().enumerate() {
                peak_mw = peak_mw.max(*p as u64);
                let r = Reading { at_ms: i as u64 * 1_000, power_mw: *p, utilisation_pct: *u, mem_utilisation_pct: *m, core_mhz: *core, mem_mhz: *mem };
                c.observe(&r);
                prop_assert!(c.limit_w() <= stated);
                prop_assert!(c.limit_w() >= least.min(stated));
                saved += c.take_saved_mj();
            }
            prop_assert!(saved <= peak_mw * readings.len() as u64);
        }
    }
}
