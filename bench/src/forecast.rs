//! `gpu-market-bench forecast`: the hour-of-day demand forecast on two real arrival series,
//! one step (one hour) ahead, against naive baselines.
//!
//! - Philly: GPUs requested per hour by the jobs arriving in it (all 15 virtual clusters).
//! - openb: milli-GPUs requested per hour by the pods created in it (`creation_time`).
//!
//! Hours are counted from the trace start (its wall-clock hour is unknown: the profile is
//! relative to it). The first week is warm-up and not scored.

use std::path::Path;
use std::time::Instant;

use gpu_market_core::forecast::{HourlyForecast, HOURS};

use crate::trace::{num, read_csv};

const WARM_UP_H: usize = 7 * 24;

fn hourly(events: impl Iterator<Item = (f64, u64)>) -> Vec<u64> {
    let mut series = Vec::new();
    for (t, amount) in events {
        let h = (t.max(0.0) / 3_600.0) as usize;
        if series.len() <= h {
            series.resize(h + 1, 0);
        }
        series[h] += amount;
    }
    series
}

/// Mean absolute one-step error of `predict(history) -> forecast for the next hour`.
fn mae(series: &[u64], mut predict: impl FnMut(&[u64]) -> u64) -> f64 {
    let mut err = 0.0;
    for h in WARM_UP_H..series.len() {
        err += predict(&series[..h]).abs_diff(series[h]) as f64;
    }
    err / (series.len() - WARM_UP_H).max(1) as f64
}

fn smoothing(series: &[u64], alpha: u64, gamma: u64) -> (f64, HourlyForecast) {
    let mut f = HourlyForecast::new(alpha, gamma);
    let mut seen = 0;
    let e = mae(series, |past| {
        for (h, &x) in past.iter().enumerate().skip(seen) {
            f.observe(h, x);
        }
        seen = past.len();
        f.forecast(past.len())
    });
    (e, f)
}

fn report(name: &str, unit: &str, series: &[u64]) -> HourlyForecast {
    let start = Instant::now();
    let naive = mae(series, |p| *p.last().unwrap_or(&0));
    let rows: Vec<(String, f64)> = vec![
        ("last hour".into(), naive),
        (
            "same hour yesterday".into(),
            mae(series, |p| p[p.len() - HOURS]),
        ),
        (
            "mean of the last 24 h".into(),
            mae(series, |p| {
                p[p.len() - HOURS..].iter().sum::<u64>() / HOURS as u64
            }),
        ),
    ];
    let mut best: Option<(f64, HourlyForecast, String)> = None;
    let mut all = rows;
    for (a, g) in [(500, 500), (1_000, 1_000), (2_000, 1_000), (3_000, 2_000)] {
        let (e, f) = smoothing(series, a, g);
        let label = format!(
            "smoothing α = {:.2}, γ = {:.2}",
            a as f64 / 1e4,
            g as f64 / 1e4
        );
        if best.as_ref().is_none_or(|b| e < b.0) {
            best = Some((e, f, label.clone()));
        }
        all.push((label, e));
    }
    let mean = series[WARM_UP_H..].iter().sum::<u64>() as f64 / (series.len() - WARM_UP_H) as f64;
    println!(
        "\n{name}: {} hours, mean {mean:.1} {unit} per hour (scored from hour {WARM_UP_H}; wall time {:.3} s)\n",
        series.len(),
        start.elapsed().as_secs_f64()
    );
    println!("| predictor | MAE ({unit}/h) | MAE ÷ last-hour MAE |");
    println!("|---|---:|---:|");
    for (label, e) in &all {
        println!("| {label} | {e:.1} | {:.3} |", e / naive);
    }
    let (_, f, label) = best.expect("four smoothing runs");
    println!("\nHour-of-day profile after the whole series ({label}), bps:\n");
    print!("|");
    for h in 0..HOURS {
        print!(" {h} |");
    }
    println!();
    println!("{}", "|---:".repeat(HOURS) + "|");
    print!("|");
    for v in f.profile_bps() {
        print!(" {v} |");
    }
    println!();
    f
}

pub fn main(traces: &Path) -> Result<(), String> {
    let w = crate::philly::load(traces)?;
    let philly = hourly(w.jobs.iter().map(|j| (j.arrival, j.gpus as u64)));
    let f = report("Philly arrivals", "GPUs", &philly);
    println!(
        "\nPrice factors for the next hour ({}) on the {} GPUs offered: Demand {} bps (cap 20 000), \
         Seasonal {} bps (band 8 000..=12 000)",
        philly.len() % HOURS,
        w.gpus,
        f.demand_bps(philly.len(), w.gpus as u64, 20_000),
        f.seasonal_bps(philly.len(), 8_000, 12_000)
    );

    let path = traces.join("alibaba-gpu-v2023/openb_pod_list_default.csv");
    let pods = read_csv(&path)?;
    let events = pods
        .iter()
        .map(|r| {
            let n: u64 = num(r, "num_gpu")?;
            let milli: u64 = num(r, "gpu_milli")?;
            Ok((num::<f64>(r, "creation_time")?, n * milli))
        })
        .collect::<Result<Vec<_>, String>>()?;
    report(
        "openb pod creations",
        "milli-GPU",
        &hourly(events.into_iter()),
    );
    Ok(())
}
