//! The power run: the GPU loaded under a lowered limit, read as the agent reads it.

use std::time::Duration;

use gpu_market_core::evidence::PowerLog;
use gpu_market_core::lease::exceeds_power_limit;
use gpu_market_core::overclock::OverclockTerms;

use super::load::Running;
use super::report::{Outcome, PowerRun};
use super::GpuCheck;
use crate::gpu::{apply_and_verify, mw_to_w, GpuError, ProcessUse, Setting};

impl GpuCheck<'_> {
    /// The power limit a client asks below the default: halfway down to the minimum.
    fn lowered_limit(&self) -> u16 {
        let min = self.gpu.limits.power_w.min;
        let default = self.gpu.default_power_w;
        min + (default.saturating_sub(min)) / 2
    }

    /// Loads the GPU under a lowered limit and reads it as the agent does.
    pub(super) async fn power(&mut self) -> Option<PowerRun> {
        let limit_w = self.lowered_limit();
        let terms = OverclockTerms {
            power_limit_w: limit_w,
            ..self.defaults()
        };
        let traced = self.traced(&terms).await;
        self.restore(Setting::PowerLimit);
        match traced {
            Ok(trace) => Some(self.judge_power(limit_w, trace)),
            Err((outcome, detail)) => {
                let asked = format!("{limit_w} W");
                let setting = Some(Setting::PowerLimit);
                self.row(
                    "power_limit_holds",
                    setting,
                    asked,
                    "-".into(),
                    outcome,
                    detail,
                );
                None
            }
        }
    }

    /// The loaded GPU's trace under `terms`, or how the power run ended without one.
    async fn traced(&mut self, terms: &OverclockTerms) -> Result<Trace, (Outcome, String)> {
        let failed = |e: &dyn std::fmt::Display| (Outcome::Failed, e.to_string());
        apply_and_verify(self.backend, self.gpu.index, terms).map_err(|e| failed(&e))?;
        let running = match self.load.burn(self.gpu).await {
            Ok(Some(running)) => running,
            Ok(None) => {
                let detail = "no workload to load the GPU with (--workload)".to_string();
                return Err((Outcome::Skipped, detail));
            }
            Err(e) => return Err(failed(&e)),
        };
        let trace = self.trace(&running).await;
        running.stop().await;
        trace.map_err(|e| failed(&e))
    }

    /// Reads the loaded GPU for `load_for`: every `trace_every`, and at the agent's rate.
    async fn trace(&mut self, running: &Running) -> Result<Trace, GpuError> {
        let index = self.gpu.index;
        let first = self.backend.sample(index)?;
        let start = tokio::time::Instant::now();
        let mut trace = Trace {
            first_energy_mj: first.energy_mj,
            ..Trace::default()
        };
        let mut next_agent_reading = start;
        let mut listed = None;
        // One clock reading per round decides both whether the run is over and whether this
        // round is an agent reading: the agent's readings are those at 0, 1, … sampling
        // intervals into the run, however long the driver takes to answer.
        loop {
            let at = start.elapsed();
            if at >= self.options.load_for {
                break;
            }
            let asked = std::time::Instant::now();
            let s = self.backend.sample(index)?;
            trace
                .sample_us
                .push(asked.elapsed().as_micros().min(u32::MAX as u128) as u32);
            trace.trace_mw.push(s.power_mw);
            trace.last_energy_mj = s.energy_mj;
            trace.elapsed = start.elapsed();
            if start + at >= next_agent_reading {
                trace.agent_mw.push(s.power_mw);
                trace.utilisation_pct.push(s.utilisation_pct);
                trace.max_core_mhz = trace.max_core_mhz.max(self.backend.clocks(index)?.core_mhz);
                next_agent_reading += self.options.sample_every;
            }
            if listed.is_none() && at >= self.options.load_for / 2 {
                listed = Some(self.backend.processes(index));
            }
            tokio::time::sleep(self.options.trace_every).await;
        }
        self.accounting("accounting", running.pid(), listed);
        Ok(trace)
    }

    /// Whether the driver lists process `pid` on the GPU: what splits a shared GPU's readings
    /// among its leases.
    pub(super) fn accounting(
        &mut self,
        step: &'static str,
        pid: u32,
        listed: Option<Result<Vec<ProcessUse>, GpuError>>,
    ) {
        let asked = format!("pid {pid}");
        match listed {
            Some(Ok(list)) => match list.iter().find(|p| p.pid == pid) {
                Some(p) => {
                    let got = format!(
                        "{} MiB, sm {}",
                        p.memory_bytes >> 20,
                        p.sm_util_pct.map_or("-".into(), |u| format!("{u} %"))
                    );
                    self.row(
                        step,
                        None,
                        asked,
                        got,
                        Outcome::Ok,
                        "listed by the driver".into(),
                    );
                }
                None => {
                    let pids: Vec<String> = list.iter().map(|p| p.pid.to_string()).collect();
                    let detail = format!(
                        "not listed (the driver lists [{}]): leases sharing this GPU would be metered as one",
                        pids.join(", ")
                    );
                    self.row(step, None, asked, "-".into(), Outcome::Warning, detail);
                }
            },
            Some(Err(e)) => self.row(
                step,
                None,
                asked,
                "-".into(),
                Outcome::Warning,
                e.to_string(),
            ),
            None => self.row(
                step,
                None,
                asked,
                "-".into(),
                Outcome::Skipped,
                "the load ended before the processes were read".into(),
            ),
        }
    }

    fn judge_power(&mut self, limit_w: u16, trace: Trace) -> PowerRun {
        let mut log = PowerLog::new(1);
        for &mw in &trace.agent_mw {
            log.record(0, mw);
        }
        let sustained_peak_w = log.peak_power_w()[0];
        let slashable = exceeds_power_limit(sustained_peak_w, limit_w);
        let max_reading_w = mw_to_w(trace.trace_mw.iter().copied().max().unwrap_or(0));
        let mean_mw = mean(&trace.trace_mw);
        let energy_counter_j = trace.last_energy_mj.saturating_sub(trace.first_energy_mj) / 1_000;
        let trace_secs = trace.elapsed.as_secs_f64();
        let energy_from_trace_j = (mean_mw as f64 / 1_000.0 * trace_secs) as u64;
        let util: Vec<u32> = trace.utilisation_pct.iter().map(|&u| u as u32).collect();
        let mean_utilisation_pct = mean(&util).min(100) as u8;
        let asked = format!("{limit_w} W");
        let (outcome, detail) = if slashable {
            (Outcome::Failed, format!("a proof would state {sustained_peak_w} W against a limit of {limit_w} W: the program would slash an honest host"))
        } else if mean_mw < limit_w as u32 * 900 {
            (
                Outcome::Warning,
                format!(
                    "the load drew {} W on average, under the limit: the limit was not reached",
                    mw_to_w(mean_mw)
                ),
            )
        } else {
            (
                Outcome::Ok,
                format!("held under full load; the fastest reading peaked at {max_reading_w} W"),
            )
        };
        self.row(
            "power_limit_holds",
            Some(Setting::PowerLimit),
            asked,
            format!("{sustained_peak_w} W sustained"),
            outcome,
            detail,
        );
        let (outcome, detail) = energy_agrees(energy_counter_j, energy_from_trace_j);
        self.row(
            "energy",
            None,
            format!("{energy_from_trace_j} J by readings"),
            format!("{energy_counter_j} J by counter"),
            outcome,
            detail,
        );
        let (outcome, detail) = if mean_utilisation_pct >= 50 {
            (Outcome::Ok, "the load shows as utilisation".to_string())
        } else {
            (
                Outcome::Warning,
                "the loaded GPU reads mostly idle: idle flags would be wrong".to_string(),
            )
        };
        self.row(
            "utilisation",
            None,
            "busy".into(),
            format!("{mean_utilisation_pct} %"),
            outcome,
            detail,
        );
        PowerRun {
            gpu: self.gpu.index,
            limit_w,
            sample_every_ms: self.options.sample_every.as_millis() as u64,
            agent_readings_mw: trace.agent_mw,
            sustained_peak_w,
            slashable,
            trace_every_ms: self.options.trace_every.as_millis() as u64,
            trace_mw: trace.trace_mw,
            max_reading_w,
            mean_power_w: mw_to_w(mean_mw),
            mean_utilisation_pct,
            energy_counter_j,
            energy_from_trace_j,
            max_core_mhz: trace.max_core_mhz,
            sample_call_us: percentiles(&trace.sample_us),
        }
    }
}

#[derive(Debug, Default)]
struct Trace {
    trace_mw: Vec<u32>,
    agent_mw: Vec<u32>,
    utilisation_pct: Vec<u8>,
    first_energy_mj: u64,
    last_energy_mj: u64,
    max_core_mhz: u32,
    /// How long each `sample` (the driver calls the agent makes per GPU per tick) took, in µs.
    sample_us: Vec<u32>,
    elapsed: Duration,
}

/// The driver's energy counter against the readings integrated: the proofs bill energy from the
/// counter, so it must tell the same story as the power readings (within 15 %).
fn energy_agrees(counter_j: u64, from_readings_j: u64) -> (Outcome, String) {
    let (hi, lo) = (
        counter_j.max(from_readings_j),
        counter_j.min(from_readings_j),
    );
    if hi == 0 {
        return (Outcome::Warning, "no energy counted".into());
    }
    let off_pct = (hi - lo) * 100 / hi;
    if off_pct <= 15 {
        (
            Outcome::Ok,
            format!("the counter and the readings agree within {off_pct} %"),
        )
    } else {
        (
            Outcome::Failed,
            format!("the counter and the readings differ by {off_pct} %: proofs bill the counter"),
        )
    }
}

fn mean(v: &[u32]) -> u32 {
    match v.len() {
        0 => 0,
        n => (v.iter().map(|&x| x as u64).sum::<u64>() / n as u64) as u32,
    }
}

/// The median and the largest of `v`.
fn percentiles(v: &[u32]) -> [u32; 2] {
    let mut v = v.to_vec();
    v.sort_unstable();
    [
        v.get(v.len() / 2).copied().unwrap_or(0),
        v.last().copied().unwrap_or(0),
    ]
}
