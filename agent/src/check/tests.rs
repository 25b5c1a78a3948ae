//! The check on SIMULATED GPUs, healthy and with each fault it must find. Time is tokio's
//! paused clock: the runs take the agent's default sampling interval (5 s) in no real time.

use std::sync::Arc;

use gpu_market_core::overclock::{GpuLimits, Range};

use super::load::Load;
use super::report::{Outcome, Report, Row};
use super::*;
use crate::config::SimulatedGpuConfig;
use crate::gpu::simulated::{SimulatedGpu, TokioTime};

/// The README's example configuration's sampling interval.
const AGENT_POLL: Duration = Duration::from_secs(5);

fn config() -> SimulatedGpuConfig {
    SimulatedGpuConfig {
        class: 0,
        memory_gib: 80,
        topology_group: 0,
        limits: GpuLimits {
            power_w: Range { min: 100, max: 400 },
            core_lock_mhz: Range {
                min: 300,
                max: 1_800,
            },
            mem_lock_mhz: Range {
                min: 1_000,
                max: 2_600,
            },
            core_offset_mhz: Range {
                min: -100,
                max: 100,
            },
            mem_offset_mhz: Range { min: 0, max: 0 },
        },
        default_power_w: 300,
    }
}

fn gpus(n: usize) -> Arc<SimulatedGpu> {
    Arc::new(SimulatedGpu::new(
        &vec![config(); n],
        Arc::new(TokioTime::new()),
    ))
}

fn mps() -> Mps {
    crate::gpu::mps::simulated(&std::env::temp_dir().join("gpu-market-check-test-mps"))
}

async fn check(gpus: &Arc<SimulatedGpu>, mps: Option<Mps>) -> Report {
    let mut options = CheckOptions::new(AGENT_POLL, "SIMULATED");
    options.mps = mps;
    run(gpus.as_ref(), &Load::Simulated(gpus.clone()), &options).await
}

fn rows<'a>(report: &'a Report, step: &str, setting: Option<Setting>) -> Vec<&'a Row> {
    report
        .rows
        .iter()
        .filter(|r| r.step == step && r.setting == setting)
        .collect()
}

fn failed(report: &Report) -> Vec<(u32, &'static str, Option<Setting>)> {
    report
        .failures()
        .map(|r| (r.gpu, r.step, r.setting))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn healthy_gpus_pass_every_step_at_the_agents_rate() {
    let gpus = gpus(2);
    let report = check(&gpus, Some(mps())).await;
    assert!(report.passed, "{}", report.table());
    assert_eq!(failed(&report), vec![]);
    for gpu in 0..2 {
        let of = |step, setting| {
            report
                .rows
                .iter()
                .filter(|r| r.gpu == gpu && r.step == step && r.setting == setting)
                .map(|r| r.outcome)
                .collect::<Vec<_>>()
        };
        // The power range's two ends, each read back.
        let power = Some(Setting::PowerLimit);
        assert_eq!(of("apply", power), vec![Outcome::Ok, Outcome::Ok]);
        assert_eq!(
            of("holds_under_load", Some(Setting::CoreLock)),
            vec![Outcome::Ok]
        );
        assert_eq!(
            of("holds_under_load", Some(Setting::MemLock)),
            vec![Outcome::Ok]
        );
        assert_eq!(of("apply", Some(Setting::CoreOffset)), vec![Outcome::Ok]);
        assert_eq!(
            of("apply", Some(Setting::MemOffset)),
            vec![Outcome::Skipped]
        );
        assert_eq!(of("power_limit_holds", power), vec![Outcome::Ok]);
        assert_eq!(of("energy", None), vec![Outcome::Ok]);
        assert_eq!(of("accounting", None), vec![Outcome::Ok]);
        assert_eq!(of("mps_within_slice", None), vec![Outcome::Ok]);
        assert_eq!(of("mps_over_slice", None), vec![Outcome::Ok]);
        assert_eq!(of("mps_accounting", None), vec![Outcome::Ok]);
        assert_eq!(of("reset", None), vec![Outcome::Ok]);
    }
    // The power run: halfway from the minimum to the default, read at the agent's rate for the
    // sustained window plus two readings, the peak a proof would state exactly the limit.
    let run = &report.power[0];
    assert_eq!(run.limit_w, 200);
    assert_eq!(run.sample_every_ms, 5_000);
    assert_eq!(run.agent_readings_mw.len(), SUSTAINED_READINGS + 2);
    assert_eq!(run.sustained_peak_w, 200);
    assert!(!run.slashable);
    assert_eq!(run.mean_utilisation_pct, 100);
    // Back at the defaults, the GPUs hold no simulated process.
    for gpu in 0..2 {
        assert_eq!(gpus.read_back(gpu).unwrap(), config_defaults());
        assert!(gpus.processes(gpu).unwrap().is_empty());
    }
    let file = report.gpus_file.as_deref().expect("a --gpus file");
    assert!(file.contains("power_w = [100, 400]"), "{file}");
    let table = report.table();
    assert!(table.contains("check passed"), "{table}");
}

fn config_defaults() -> OverclockTerms {
    OverclockTerms {
        power_limit_w: 300,
        ..OverclockTerms::default()
    }
}

#[tokio::test(start_paused = true)]
async fn a_power_limit_the_driver_does_not_take_fails_naming_the_gpu_and_setting() {
    let gpus = gpus(2);
    gpus.stick_power_limit(1).unwrap();
    let report = check(&gpus, None).await;
    assert!(!report.passed);
    let f = failed(&report);
    assert!(
        f.contains(&(1, "apply", Some(Setting::PowerLimit))),
        "{f:?}"
    );
    assert!(
        f.contains(&(1, "power_limit_holds", Some(Setting::PowerLimit))),
        "{f:?}"
    );
    assert!(
        f.iter().all(|&(gpu, _, _)| gpu == 1),
        "GPU 0 is healthy: {f:?}"
    );
    let line = rows(&report, "apply", Some(Setting::PowerLimit))
        .into_iter()
        .find(|r| r.gpu == 1 && r.outcome == Outcome::Failed)
        .unwrap();
    assert_eq!((line.asked.as_str(), line.got.as_str()), ("100 W", "300 W"));
}

#[tokio::test(start_paused = true)]
async fn a_clock_lock_that_reads_back_but_does_not_hold_under_load_fails() {
    let gpus = gpus(1);
    // As on NVIDIA GPUs, the lock cannot be read back: the record says it took.
    gpus.hide_clock_locks(0).unwrap();
    gpus.slip_clock_locks(0).unwrap();
    let record = tempfile::tempdir().unwrap();
    let backend = crate::gpu::locks::RecordedLocks::open(gpus.clone(), record.path()).unwrap();
    let options = CheckOptions::new(AGENT_POLL, "SIMULATED");
    let report = run(&backend, &Load::Simulated(gpus.clone()), &options).await;
    let applied = rows(&report, "apply", Some(Setting::CoreLock));
    assert_eq!(applied[0].outcome, Outcome::Ok, "the read-back cannot tell");
    let held = rows(&report, "holds_under_load", Some(Setting::CoreLock));
    assert_eq!(held[0].outcome, Outcome::Failed, "{}", report.table());
    assert_eq!(held[0].asked, "800 MHz");
    assert_eq!(held[0].got, "1800 MHz", "the unlocked boost clock");
    assert_eq!(
        rows(&report, "holds_under_load", Some(Setting::MemLock))[0].outcome,
        Outcome::Failed
    );
    // The record is cleared by the reset: nothing left for the agent to undo.
    assert_eq!(backend.recorded(0).unwrap(), Default::default());
}

#[tokio::test(start_paused = true)]
async fn a_setting_the_driver_refuses_fails_with_the_drivers_words() {
    let gpus = gpus(1);
    gpus.refuse(0, Setting::MemLock, "Insufficient Permissions")
        .unwrap();
    let report = check(&gpus, None).await;
    assert_eq!(failed(&report), vec![(0, "apply", Some(Setting::MemLock))]);
    let row = rows(&report, "apply", Some(Setting::MemLock))[0];
    assert!(
        row.detail.contains("Insufficient Permissions"),
        "{}",
        row.detail
    );
    // The other settings were checked all the same.
    assert_eq!(
        rows(&report, "holds_under_load", Some(Setting::CoreLock))[0].outcome,
        Outcome::Ok
    );
}

/// A GPU whose readings overshoot its limit from `at` on, by `extra_mw`, for `readings`
/// readings; read once per agent interval.
async fn overshoot_run(at: Duration, extra_mw: u32, readings: u32) -> Report {
    let gpus = gpus(1);
    let mut options = CheckOptions::new(AGENT_POLL, "SIMULATED");
    // One reading per agent interval, so that the overshoot lands in the agent's readings.
    options.trace_every = AGENT_POLL;
    options.settle = Duration::from_secs(1);
    let overshooting = gpus.clone();
    tokio::spawn(async move {
        tokio::time::sleep(at).await;
        overshooting.overshoot(0, extra_mw, readings).unwrap();
    });
    run(gpus.as_ref(), &Load::Simulated(gpus.clone()), &options).await
}

#[tokio::test(start_paused = true)]
async fn a_boost_transient_is_not_a_violation_a_sustained_overrun_is() {
    // One reading 10 % over a 200 W limit, in the power run (after the locks' loads): a
    // transient the sustained window absorbs.
    let report = overshoot_run(Duration::from_secs(20), 20_000, 1).await;
    let run = &report.power[0];
    assert_eq!(run.max_reading_w, 220, "{:?}", run.agent_readings_mw);
    assert_eq!(run.sustained_peak_w, 204);
    assert!(!run.slashable);
    assert!(report.passed, "{}", report.table());
    // 10 % over for every reading: the program would slash it, and the check says so.
    let report = overshoot_run(Duration::ZERO, 20_000, 1_000).await;
    let run = &report.power[0];
    assert_eq!(run.sustained_peak_w, 220);
    assert!(run.slashable);
    assert_eq!(
        failed(&report),
        vec![(0, "power_limit_holds", Some(Setting::PowerLimit))]
    );
}

#[tokio::test(start_paused = true)]
async fn a_setting_the_driver_does_not_support_is_left_out_of_the_gpus_file() {
    let gpus = gpus(1);
    // As an H100 answers a memory clock lock, though it lists its memory clocks.
    gpus.refuse_unsupported(0, Setting::MemLock).unwrap();
    let report = check(&gpus, None).await;
    assert!(report.passed, "{}", report.table());
    let row = rows(&report, "apply", Some(Setting::MemLock))[0];
    assert_eq!(row.outcome, Outcome::Unsupported);
    let file = report.gpus_file.as_deref().unwrap();
    assert!(file.contains("mem_lock_mhz = [0, 0]"), "{file}");
    assert!(file.contains("core_lock_mhz = [300, 1800]"), "{file}");
}

#[tokio::test(start_paused = true)]
async fn without_mps_or_a_workload_the_steps_that_need_them_are_skipped_not_passed() {
    let gpus = gpus(1);
    let options = CheckOptions::new(AGENT_POLL, "nvml");
    let report = run(gpus.as_ref(), &Load::None, &options).await;
    for (step, setting) in [
        ("holds_under_load", Some(Setting::CoreLock)),
        ("power_limit_holds", Some(Setting::PowerLimit)),
        ("mps_over_slice", None),
    ] {
        assert_eq!(
            rows(&report, step, setting)[0].outcome,
            Outcome::Skipped,
            "{step}"
        );
    }
    assert!(report.power.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_gpu_whose_reads_fail_fails_every_read_and_is_still_reset() {
    let gpus = gpus(1);
    gpus.fail_reads(0, true).unwrap();
    let report = check(&gpus, None).await;
    let f = failed(&report);
    assert!(f.contains(&(0, "initial", None)), "{f:?}");
    assert!(f.contains(&(0, "reset", None)), "{f:?}");
    let table = report.table();
    assert!(table.contains("check FAILED"), "{table}");
    assert!(table.contains("GPU is lost"), "{table}");
}
