//! `gpu-market-agent check`: what a host runs on its GPUs before it lists a machine. With the
//! backend the agent runs (NVML, wrapped in the clock-lock record, or the SIMULATED GPUs), on
//! each GPU it:
//! 1. describes the GPU and writes the `--gpus` file `host register` takes (`crate::detect`);
//! 2. applies each kind of term a bid may ask, one at a time, through the agent's own
//!    `apply` and `read_back`, and checks that a clock lock holds under load (NVML cannot read a
//!    lock back: the clock a loaded GPU runs at is the only evidence);
//! 3. lowers the power limit, loads the GPU and reads it at the agent's sampling rate, feeding
//!    the readings to the proofs' own power log (`PowerLog`), so that it shows the sustained
//!    peak a proof would state against the limit and whether the program would slash an honest
//!    host for it; a fast trace beside shows the transients the agent's rate misses, and the
//!    driver's energy counter is checked against the readings;
//! 4. with the host's MPS daemon, runs two clients confined to a slice as a shared lease's
//!    container is (`gpu::isolation`): one within its slice, one asking more, which the MPS
//!    server must refuse; and checks that the driver lists each client for per-process
//!    accounting;
//! 5. resets the GPU and checks it is back at its defaults.
//!
//! A broken promise is a failed row naming the GPU and the setting.

pub mod load;
mod mps;
mod power;
pub mod report;

use std::collections::BTreeMap;
use std::time::Duration;

use gpu_market_core::lease::SUSTAINED_READINGS;
use gpu_market_core::overclock::{OverclockTerms, Range};

use crate::detect::gpus_file;
use crate::gpu::mps::Mps;
use crate::gpu::{GpuBackend, GpuError, GpuInfo, Setting};
use load::Load;
use report::{GpuSummary, Outcome, Report, Row};

/// How `check` runs.
pub struct CheckOptions {
    /// The agent's sampling interval (`billing_poll_interval_secs`).
    pub sample_every: Duration,
    /// How often the fast power trace reads.
    pub trace_every: Duration,
    /// How long the power run loads each GPU: by default long enough for the sustained window
    /// to fill and move on twice at the agent's rate.
    pub load_for: Duration,
    /// How long a lock's GPU is loaded before its clock is read.
    pub settle: Duration,
    pub mps: Option<Mps>,
    /// Model names to market classes (`[gpu.classes]`), for the `--gpus` file.
    pub classes: BTreeMap<String, u8>,
    pub backend: String,
}

impl CheckOptions {
    pub fn new(sample_every: Duration, backend: &str) -> Self {
        CheckOptions {
            sample_every,
            trace_every: Duration::from_millis(100),
            load_for: sample_every * (SUSTAINED_READINGS as u32 + 2),
            settle: Duration::from_secs(3),
            mps: None,
            classes: BTreeMap::new(),
            backend: backend.to_string(),
        }
    }
}

/// How far a loaded GPU's clock may be from its lock and the lock still count as holding: the
/// driver rounds a lock to a clock the GPU supports (steps of 15 MHz on recent NVIDIA GPUs).
fn lock_tolerance_mhz(asked: u32) -> u32 {
    (asked / 50).max(30)
}

/// Runs the check on every GPU of `backend`.
pub async fn run(backend: &dyn GpuBackend, load: &Load, options: &CheckOptions) -> Report {
    let gpus = backend.gpus();
    let mut rows = Vec::new();
    let mut power = Vec::new();
    for gpu in &gpus {
        let mut check = GpuCheck {
            backend,
            load,
            options,
            gpu,
            rows: &mut rows,
        };
        check.initial();
        for setting in Setting::ALL {
            check.setting(setting).await;
        }
        if let Some(run) = check.power().await {
            power.push(run);
        }
        check.mps(&gpus).await;
        check.reset();
    }
    let declared: Vec<GpuInfo> = gpus.iter().map(|g| as_found(g, &rows)).collect();
    let (gpus_file, gpus_file_error) = match gpus_file(&declared, &options.classes) {
        Ok(text) => (Some(text), None),
        Err(e) => (None, Some(e.to_string())),
    };
    Report {
        backend: options.backend.clone(),
        workload: load.describe(),
        sample_every_ms: options.sample_every.as_millis() as u64,
        gpus: gpus.iter().map(GpuSummary::of).collect(),
        passed: !rows.iter().any(|r| r.outcome == Outcome::Failed),
        rows,
        power,
        gpus_file,
        gpus_file_error,
    }
}

struct GpuCheck<'a> {
    backend: &'a dyn GpuBackend,
    load: &'a Load,
    options: &'a CheckOptions,
    gpu: &'a GpuInfo,
    rows: &'a mut Vec<Row>,
}

/// What a GPU's terms read back as, or why they could not be read.
type ReadBack = Result<OverclockTerms, GpuError>;

impl GpuCheck<'_> {
    fn row(
        &mut self,
        step: &'static str,
        setting: Option<Setting>,
        asked: String,
        got: String,
        outcome: Outcome,
        detail: String,
    ) {
        self.rows.push(Row {
            gpu: self.gpu.index,
            step,
            setting,
            asked,
            got,
            outcome,
            detail,
        });
    }

    fn defaults(&self) -> OverclockTerms {
        self.gpu.defaults()
    }

    /// The GPU's settings before the check: another program's (or a crashed agent's) leftovers
    /// are worth knowing; the check ends with a reset either way.
    fn initial(&mut self) {
        let defaults = self.defaults();
        match self.backend.read_back(self.gpu.index) {
            Ok(read) => {
                let off = off_defaults(&read, &defaults);
                let (outcome, detail) = if off.is_empty() {
                    (Outcome::Ok, "at the host defaults".to_string())
                } else {
                    (
                        Outcome::Warning,
                        format!("not at the defaults ({off}); the check resets it"),
                    )
                };
                self.row(
                    "initial",
                    None,
                    terms_text(&defaults),
                    terms_text(&read),
                    outcome,
                    detail,
                );
            }
            Err(e) => self.row(
                "initial",
                None,
                terms_text(&defaults),
                "-".into(),
                Outcome::Failed,
                e.to_string(),
            ),
        }
    }

    /// The values of `setting` the check asks: none where the GPU does not offer it.
    fn asks(&self, setting: Setting) -> Vec<OverclockTerms> {
        let l = &self.gpu.limits;
        let with = |f: &dyn Fn(&mut OverclockTerms)| {
            let mut t = self.defaults();
            f(&mut t);
            t
        };
        match setting {
            Setting::PowerLimit => [l.power_w.min, l.power_w.max]
                .into_iter()
                .filter(|&w| w != self.gpu.default_power_w)
                .map(|w| with(&|t| t.power_limit_w = w))
                .collect(),
            Setting::CoreLock if l.core_lock_mhz.max > 0 => {
                let mhz = lock_to_ask(l.core_lock_mhz);
                vec![with(&|t| t.core_lock_mhz = Some(mhz))]
            }
            Setting::MemLock if l.mem_lock_mhz.max > 0 => {
                let mhz = lock_to_ask(l.mem_lock_mhz);
                vec![with(&|t| t.mem_lock_mhz = Some(mhz))]
            }
            Setting::CoreOffset if l.core_offset_mhz != (Range { min: 0, max: 0 }) => {
                let mhz = offset_to_ask(l.core_offset_mhz.min, l.core_offset_mhz.max);
                vec![with(&|t| t.core_offset_mhz = Some(mhz))]
            }
            Setting::MemOffset if l.mem_offset_mhz != (Range { min: 0, max: 0 }) => {
                let mhz = offset_to_ask(l.mem_offset_mhz.min, l.mem_offset_mhz.max);
                vec![with(&|t| t.mem_offset_mhz = Some(mhz))]
            }
            _ => Vec::new(),
        }
    }

    /// Applies each value of `setting` the check asks, reads it back, checks a lock under load,
    /// and restores the defaults.
    async fn setting(&mut self, setting: Setting) {
        let asks = self.asks(setting);
        if asks.is_empty() {
            let detail = match setting {
                Setting::PowerLimit => "the GPU's only power limit is its default",
                _ => "not offered: the GPU's range for it is empty",
            };
            let asked = "-".to_string();
            self.row(
                "apply",
                Some(setting),
                asked,
                "-".into(),
                Outcome::Skipped,
                detail.into(),
            );
            return;
        }
        for terms in asks {
            let asked = setting.value_in(&terms);
            let applied = self
                .backend
                .apply(self.gpu.index, &terms)
                .and_then(|()| self.backend.read_back(self.gpu.index));
            match applied {
                Ok(read) if setting.same_in(&read, &terms) => {
                    self.row(
                        "apply",
                        Some(setting),
                        asked,
                        setting.value_in(&read),
                        Outcome::Ok,
                        "read back as asked".into(),
                    );
                    if let Some(mhz) = lock_of(setting, &terms) {
                        self.lock_holds(setting, mhz).await;
                    }
                }
                Ok(read) => self.row(
                    "apply",
                    Some(setting),
                    asked,
                    setting.value_in(&read),
                    Outcome::Failed,
                    "the driver took the call but the setting reads back otherwise".into(),
                ),
                Err(e @ GpuError::Unsupported { .. }) if setting != Setting::PowerLimit => self
                    .row(
                        "apply",
                        Some(setting),
                        asked,
                        "-".into(),
                        Outcome::Unsupported,
                        format!("{e}: the --gpus file below declares its range empty"),
                    ),
                Err(e) => self.row(
                    "apply",
                    Some(setting),
                    asked,
                    "-".into(),
                    Outcome::Failed,
                    e.to_string(),
                ),
            }
            self.restore(setting);
        }
    }

    /// Puts the GPU back at its defaults after a step; a failure is a row of its own.
    fn restore(&mut self, setting: Setting) {
        if let Err(e) = self.backend.apply(self.gpu.index, &self.defaults()) {
            let asked = terms_text(&self.defaults());
            self.row(
                "restore",
                Some(setting),
                asked,
                "-".into(),
                Outcome::Failed,
                e.to_string(),
            );
        }
    }

    /// Loads the GPU with a lock of `mhz` applied and checks that its clock follows the lock.
    async fn lock_holds(&mut self, setting: Setting, mhz: u16) {
        let asked = format!("{mhz} MHz");
        let tolerance = lock_tolerance_mhz(mhz as u32);
        let (got, outcome, detail) = match self.loaded_clock(setting).await {
            Ok(median) if median.abs_diff(mhz as u32) <= tolerance => (
                format!("{median} MHz"),
                Outcome::Ok,
                format!("the loaded GPU runs at its lock (within {tolerance} MHz)"),
            ),
            Ok(median) => (
                format!("{median} MHz"),
                Outcome::Failed,
                format!("the lock did not take: the loaded GPU runs at {median} MHz, not within {tolerance} MHz of it"),
            ),
            Err((outcome, detail)) => ("-".into(), outcome, detail),
        };
        self.row(
            "holds_under_load",
            Some(setting),
            asked,
            got,
            outcome,
            detail,
        );
    }

    /// The median clock `setting` locks (core or memory) on the loaded GPU, or how the reading
    /// ended without one.
    async fn loaded_clock(&mut self, setting: Setting) -> Result<u32, (Outcome, String)> {
        let running = match self.load.burn(self.gpu).await {
            Ok(Some(running)) => running,
            Ok(None) => {
                let detail = "no workload to load the GPU with (--workload)".to_string();
                return Err((Outcome::Skipped, detail));
            }
            Err(e) => return Err((Outcome::Failed, e.to_string())),
        };
        tokio::time::sleep(self.options.settle).await;
        let mut seen = Vec::new();
        let mut error = None;
        for _ in 0..5 {
            match self.backend.clocks(self.gpu.index) {
                Ok(c) => seen.push(match setting {
                    Setting::MemLock => c.mem_mhz,
                    _ => c.core_mhz,
                }),
                Err(e) => error = Some(e),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        running.stop().await;
        sorted(&seen).get(seen.len() / 2).copied().ok_or_else(|| {
            let detail = error.map_or_else(|| "no clock read".to_string(), |e| e.to_string());
            (Outcome::Failed, detail)
        })
    }

    /// Resets the GPU and checks each setting is back at its default.
    fn reset(&mut self) {
        let defaults = self.defaults();
        let asked = terms_text(&defaults);
        let read: ReadBack = self
            .backend
            .reset(self.gpu.index)
            .and_then(|()| self.backend.read_back(self.gpu.index));
        match read {
            Ok(read) => {
                let off = off_defaults(&read, &defaults);
                let (outcome, detail) = if off.is_empty() {
                    (Outcome::Ok, "back at the host defaults".to_string())
                } else {
                    (Outcome::Failed, format!("not back at the defaults: {off}"))
                };
                self.row("reset", None, asked, terms_text(&read), outcome, detail);
            }
            Err(e) => self.row(
                "reset",
                None,
                asked,
                "-".into(),
                Outcome::Failed,
                e.to_string(),
            ),
        }
    }
}

/// `gpu` as the `--gpus` file should declare it: a setting the driver answered as unsupported
/// gets an empty range, so that no bid is matched to terms the GPU cannot apply. (The ranges
/// come from the driver's lists, which can list what it then refuses to set: an H100's memory
/// clocks.)
fn as_found(gpu: &GpuInfo, rows: &[Row]) -> GpuInfo {
    let mut gpu = gpu.clone();
    let unsupported = rows
        .iter()
        .filter(|r| r.gpu == gpu.index && r.outcome == Outcome::Unsupported)
        .filter_map(|r| r.setting);
    for setting in unsupported {
        let l = &mut gpu.limits;
        match setting {
            // A GPU whose power limit cannot be set fails the check instead.
            Setting::PowerLimit => {}
            Setting::CoreLock => l.core_lock_mhz = Range { min: 0, max: 0 },
            Setting::MemLock => l.mem_lock_mhz = Range { min: 0, max: 0 },
            Setting::CoreOffset => l.core_offset_mhz = Range { min: 0, max: 0 },
            Setting::MemOffset => l.mem_offset_mhz = Range { min: 0, max: 0 },
        }
    }
    gpu
}

/// The lock a term asks, for the settings that are locks.
fn lock_of(setting: Setting, terms: &OverclockTerms) -> Option<u16> {
    match setting {
        Setting::CoreLock => terms.core_lock_mhz,
        Setting::MemLock => terms.mem_lock_mhz,
        _ => None,
    }
}

/// The lock the check asks: a third of the way up the GPU's range. Low enough that a loaded GPU
/// stays under its power limit at it (a loaded H100 at its 700 W default runs at about 1,370 MHz:
/// a lock above that is capped by power, and an unlocked GPU would look the same), high enough
/// to be a real clock.
fn lock_to_ask(r: Range<u16>) -> u16 {
    r.min + (r.max - r.min) / 3
}

/// A small offset inside the GPU's range: half its positive end, or half its negative one.
fn offset_to_ask(min: i16, max: i16) -> i16 {
    if max > 0 {
        (max / 2).max(1)
    } else {
        (min / 2).min(-1)
    }
}

/// The settings in which `read` is not at `defaults`, by name.
fn off_defaults(read: &OverclockTerms, defaults: &OverclockTerms) -> String {
    Setting::ALL
        .into_iter()
        .filter(|s| !s.same_in(read, defaults))
        .map(Setting::name)
        .collect::<Vec<_>>()
        .join(", ")
}

fn terms_text(t: &OverclockTerms) -> String {
    Setting::ALL
        .into_iter()
        .filter(|s| *s == Setting::PowerLimit || s.value_in(t) != "-")
        .map(|s| format!("{} {}", s.name(), s.value_in(t)))
        .collect::<Vec<_>>()
        .join(", ")
}

fn sorted(v: &[u32]) -> Vec<u32> {
    let mut v = v.to_vec();
    v.sort_unstable();
    v
}

#[cfg(test)]
mod tests;
