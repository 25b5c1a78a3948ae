//! Auto power's controller (`gpu_market_agent::gpu::dvfs`, the code the agent runs) on the
//! SIMULATED GPU model, over loads from compute-bound to memory-bound and the tolerances a bid
//! may give: the limit it holds, the throughput the work keeps (the model's truth, which the
//! controller never sees), the energy drawn and the share the proofs would state as saved.
//! A model's answer, not a GPU's: BENCHMARKS.md says what a real GPU would add.
//!
//! `cargo run --release -p gpu-market-agent --example auto_power`. Prints a table.

use std::sync::Arc;

use gpu_market_agent::config::SimulatedGpuConfig;
use gpu_market_agent::gpu::dvfs::{drive, AutoPower};
use gpu_market_agent::gpu::simulated::{Demand, ManualTime, SimulatedGpu};
use gpu_market_core::overclock::{GpuLimits, OverclockTerms, Range};

/// Seconds each run lasts: a baseline, the probes, and most of a hold.
const SECS: u32 = 240;

/// An H100 SXM-like GPU as NVML reports its ranges: 200–700 W, default 700 W.
fn gpu() -> SimulatedGpuConfig {
    SimulatedGpuConfig {
        class: 0,
        memory_gib: 80,
        topology_group: 0,
        limits: GpuLimits {
            power_w: Range { min: 200, max: 700 },
            core_lock_mhz: Range {
                min: 345,
                max: 1_980,
            },
            mem_lock_mhz: Range {
                min: 2_619,
                max: 2_619,
            },
            core_offset_mhz: Range { min: 0, max: 0 },
            mem_offset_mhz: Range { min: 0, max: 0 },
        },
        default_power_w: 700,
    }
}

fn main() {
    let loads: [(&str, Option<Demand>); 4] = [
        ("compute-bound, draws its limit", None),
        (
            "compute-bound, draws 550 W",
            Some(Demand {
                draw_w: 550,
                memory_bound_pct: 0,
            }),
        ),
        (
            "memory-bound 40 %, draws 450 W",
            Some(Demand {
                draw_w: 450,
                memory_bound_pct: 40,
            }),
        ),
        (
            "memory-bound 70 %, draws 350 W",
            Some(Demand {
                draw_w: 350,
                memory_bound_pct: 70,
            }),
        ),
    ];
    println!("| load (stated limit 700 W) | tolerance | limit held | throughput kept | energy drawn | saved (share of drawn + saved) |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, demand) in loads {
        for tolerance_bps in [0u16, 500, 2_000] {
            let time = Arc::new(ManualTime::default());
            let gpus = SimulatedGpu::new(&[gpu()], time.clone());
            gpus.set_load(0, 1_000).expect("GPU 0");
            if let Some(d) = demand {
                gpus.set_demand(0, d).expect("GPU 0");
            }
            let stated = OverclockTerms {
                power_limit_w: 700,
                ..Default::default()
            };
            let mut control = AutoPower::new(700, 200, tolerance_bps);
            let t = drive(&gpus, &time, 0, stated, &mut control, SECS).expect("simulated GPU");
            let drawn_kj = t.energy_mj as f64 / 1e6;
            let saved_kj = t.saved_mj as f64 / 1e6;
            println!(
                "| {name} | {:.0} % | {} W | {:.1} % | {drawn_kj:.1} kJ | {saved_kj:.1} kJ ({:.1} %) |",
                tolerance_bps as f64 / 100.0,
                t.limits.last().copied().unwrap_or(700),
                t.throughput_permille as f64 / 10.0,
                100.0 * saved_kj / (drawn_kj + saved_kj).max(f64::MIN_POSITIVE),
            );
        }
    }
    println!(
        "({SECS} one-second readings per run; the first {} are the baseline at the stated limit)",
        gpu_market_agent::gpu::dvfs::STEP_READINGS
    );
}
