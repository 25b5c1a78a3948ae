//! What `check` found: JSON for the record, a table for the operator.

use std::fmt::Write;

use gpu_market_sdk::table::columns;
use serde::Serialize;

use crate::gpu::{GpuInfo, Setting};

/// How one step came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Ok,
    /// The GPU or driver broke a promise the market makes with it: the row names the GPU and
    /// the setting.
    Failed,
    /// Worth the operator's attention, but no promise is broken (a driver without per-process
    /// accounting, a load too light to reach a limit).
    Warning,
    /// The driver does not support it: the `--gpus` file must not offer it.
    Unsupported,
    /// Not offered by this GPU (its range is empty), or not run (no load, no MPS).
    Skipped,
}

impl Outcome {
    fn word(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Failed => "FAILED",
            Outcome::Warning => "warning",
            Outcome::Unsupported => "unsupported",
            Outcome::Skipped => "skipped",
        }
    }
}

/// One step on one GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Row {
    pub gpu: u32,
    /// `initial`, `apply`, `holds_under_load`, `power_limit_holds`, `energy`, `utilisation`,
    /// `accounting`, `mps_within_slice`, `mps_over_slice`, `mps_accounting`, `reset`.
    pub step: &'static str,
    pub setting: Option<Setting>,
    pub asked: String,
    pub got: String,
    pub outcome: Outcome,
    pub detail: String,
}

/// A GPU as the check found it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuSummary {
    pub index: u32,
    pub uuid: String,
    pub name: String,
    pub memory_mib: u64,
    pub default_power_w: u16,
    pub power_w: [u16; 2],
    pub core_lock_mhz: [u16; 2],
    pub mem_lock_mhz: [u16; 2],
    pub core_offset_mhz: [i16; 2],
    pub mem_offset_mhz: [i16; 2],
}

impl GpuSummary {
    pub fn of(g: &GpuInfo) -> Self {
        let l = &g.limits;
        GpuSummary {
            index: g.index,
            uuid: gpu_market_sdk::gpus::format_uuid(&g.uuid),
            name: g.name.clone(),
            memory_mib: g.memory_mib,
            default_power_w: g.default_power_w,
            power_w: [l.power_w.min, l.power_w.max],
            core_lock_mhz: [l.core_lock_mhz.min, l.core_lock_mhz.max],
            mem_lock_mhz: [l.mem_lock_mhz.min, l.mem_lock_mhz.max],
            core_offset_mhz: [l.core_offset_mhz.min, l.core_offset_mhz.max],
            mem_offset_mhz: [l.mem_offset_mhz.min, l.mem_offset_mhz.max],
        }
    }
}

/// One GPU's power under load at a lowered limit, read as the agent reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PowerRun {
    pub gpu: u32,
    pub limit_w: u16,
    /// The agent's sampling interval (`billing_poll_interval_secs`), in ms.
    pub sample_every_ms: u64,
    /// The readings at the agent's rate, in mW: what a proof's power log would hold.
    pub agent_readings_mw: Vec<u32>,
    /// The sustained peak a proof would state (`PowerLog::peak_power_w`), in W.
    pub sustained_peak_w: u16,
    /// Whether the program would count that peak as a power violation and slash the host.
    pub slashable: bool,
    /// The fast trace's interval, in ms, and its readings: the transients the agent's rate
    /// misses.
    pub trace_every_ms: u64,
    pub trace_mw: Vec<u32>,
    pub max_reading_w: u16,
    pub mean_power_w: u16,
    pub mean_utilisation_pct: u8,
    /// Energy by the driver's counter over the run, and by the trace's readings integrated.
    pub energy_counter_j: u64,
    pub energy_from_trace_j: u64,
    pub max_core_mhz: u32,
    /// How long one reading of the GPU (the driver calls behind `GpuBackend::sample`) took, in
    /// µs: its median and its largest. The agent's loop makes one per GPU per tick.
    pub sample_call_us: [u32; 2],
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    pub backend: String,
    pub workload: String,
    pub sample_every_ms: u64,
    pub gpus: Vec<GpuSummary>,
    pub rows: Vec<Row>,
    pub power: Vec<PowerRun>,
    /// The `--gpus` file for `host register`, or why it could not be written.
    pub gpus_file: Option<String>,
    pub gpus_file_error: Option<String>,
    /// No row failed.
    pub passed: bool,
}

impl Report {
    pub fn failures(&self) -> impl Iterator<Item = &Row> {
        self.rows.iter().filter(|r| r.outcome == Outcome::Failed)
    }

    /// The operator's view: the GPUs, every step, the power runs, then the `--gpus` file.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "backend {}, workload {}, the agent samples every {} ms",
            self.backend, self.workload, self.sample_every_ms
        );
        out.push_str(&columns(
            &[
                "gpu",
                "uuid",
                "name",
                "memory_mib",
                "power_w",
                "default_w",
                "core_lock_mhz",
                "mem_lock_mhz",
                "core_offset_mhz",
                "mem_offset_mhz",
            ],
            &self
                .gpus
                .iter()
                .map(|g| {
                    vec![
                        g.index.to_string(),
                        g.uuid.clone(),
                        g.name.clone(),
                        g.memory_mib.to_string(),
                        range(g.power_w),
                        g.default_power_w.to_string(),
                        range(g.core_lock_mhz),
                        range(g.mem_lock_mhz),
                        range(g.core_offset_mhz),
                        range(g.mem_offset_mhz),
                    ]
                })
                .collect::<Vec<_>>(),
        ));
        out.push('\n');
        out.push_str(&columns(
            &[
                "gpu", "step", "setting", "asked", "got", "outcome", "detail",
            ],
            &self
                .rows
                .iter()
                .map(|r| {
                    vec![
                        r.gpu.to_string(),
                        r.step.to_string(),
                        r.setting.map_or("-", Setting::name).to_string(),
                        r.asked.clone(),
                        r.got.clone(),
                        r.outcome.word().to_string(),
                        r.detail.clone(),
                    ]
                })
                .collect::<Vec<_>>(),
        ));
        if !self.power.is_empty() {
            out.push('\n');
            out.push_str(&columns(
                &[
                    "gpu",
                    "limit_w",
                    "sustained_peak_w",
                    "slashable",
                    "max_reading_w",
                    "mean_w",
                    "util_pct",
                    "energy_counter_j",
                    "energy_trace_j",
                    "max_core_mhz",
                    "sample_call_us",
                    "readings",
                ],
                &self
                    .power
                    .iter()
                    .map(|p| {
                        vec![
                            p.gpu.to_string(),
                            p.limit_w.to_string(),
                            p.sustained_peak_w.to_string(),
                            p.slashable.to_string(),
                            p.max_reading_w.to_string(),
                            p.mean_power_w.to_string(),
                            p.mean_utilisation_pct.to_string(),
                            p.energy_counter_j.to_string(),
                            p.energy_from_trace_j.to_string(),
                            p.max_core_mhz.to_string(),
                            format!("{} (max {})", p.sample_call_us[0], p.sample_call_us[1]),
                            format!(
                                "{} + {} traced",
                                p.agent_readings_mw.len(),
                                p.trace_mw.len()
                            ),
                        ]
                    })
                    .collect::<Vec<_>>(),
            ));
        }
        out.push('\n');
        match (&self.gpus_file, &self.gpus_file_error) {
            (Some(file), _) => {
                out.push_str("the --gpus file for `gpu-market host register`:\n");
                out.push_str(file);
            }
            (None, Some(e)) => {
                let _ = writeln!(out, "no --gpus file: {e}");
            }
            (None, None) => {}
        }
        let failed = self.failures().count();
        let _ = match failed {
            0 => writeln!(out, "check passed: {} steps", self.rows.len()),
            n => writeln!(out, "check FAILED: {n} of {} steps", self.rows.len()),
        };
        out
    }
}

fn range<T: std::fmt::Display>(r: [T; 2]) -> String {
    format!("{}..{}", r[0], r[1])
}
