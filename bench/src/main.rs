//! `gpu-market-bench fgd [--traces DIR]`: the FGD protocol on the openb trace.
//! `gpu-market-bench throughput`: placement speed of our policy on a synthetic cluster.
//! `gpu-market-bench jct [--traces DIR]`: job completion time on the Philly-derived traces.
//! `gpu-market-bench colocate [--traces DIR]`: the interference model on Lucid's pairs.
//! `gpu-market-bench batching [--traces DIR]`: smart batching in the market's machine choice.
//! `gpu-market-bench forecast [--traces DIR]`: the demand forecast on Philly and openb arrivals.
//! `gpu-market-bench replay [--traces DIR]`: the FGD protocol through the market's own code.
//! `gpu-market-bench chain [--traces DIR]`: one market of 10,000 machines on a cluster's limits.
//! `gpu-market-bench policy [--traces DIR]`: the packing policy's CPU time at 1,213 and 10,000 machines.
//! `gpu-market-bench plan`: `bid plan`'s memory model beside published figures, and its speed.
//! `gpu-market-bench micro`: ns per call of the score, the reserve price and feasibility.
//! `gpu-market-bench all [--traces DIR]`: every one of the above (throughput first).

mod batching;
mod chain;
mod colocate;
mod fgd;
mod forecast;
mod jct;
mod json;
mod market_jct;
mod micro;
mod philly;
mod plan;
mod policy;
mod replay;
mod throughput;
mod trace;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

const USAGE: &str =
    "usage: gpu-market-bench [--traces DIR] fgd | replay | throughput | jct | colocate | batching | forecast | chain | policy | plan | micro | all";

/// Every benchmark, by name, in the order `all` runs them: throughput first, as its memory
/// figure is the process's peak so far.
const BENCHMARKS: [&str; 11] = [
    "throughput",
    "fgd",
    "replay",
    "jct",
    "colocate",
    "batching",
    "forecast",
    "chain",
    "policy",
    "plan",
    "micro",
];

fn bench(name: &str, traces: &Path) -> Option<Result<(), String>> {
    Some(match name {
        "fgd" => fgd::main(traces),
        "throughput" => throughput::main(),
        "jct" => jct::main(traces),
        "colocate" => colocate::main(traces),
        "batching" => batching::main(traces),
        "forecast" => forecast::main(traces),
        "chain" => chain::main(traces),
        "policy" => policy::main(traces),
        "plan" => plan::main(),
        "micro" => micro::main(),
        "replay" => replay::main(traces),
        _ => return None,
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut traces = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/traces"));
    let mut command = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--traces" => match it.next() {
                Some(dir) => traces = PathBuf::from(dir),
                None => return fail(USAGE),
            },
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            c if command.is_none() => command = Some(c.to_string()),
            _ => return fail(USAGE),
        }
    }
    let result = match command.as_deref() {
        Some("all") => BENCHMARKS.iter().try_for_each(|name| {
            println!("\n# gpu-market-bench {name}\n");
            bench(name, &traces).unwrap_or_else(|| Err(format!("no benchmark {name}")))
        }),
        Some(name) => match bench(name, &traces) {
            Some(result) => result,
            None => return fail(USAGE),
        },
        None => return fail(USAGE),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

fn fail(msg: &str) -> ExitCode {
    eprintln!("{msg}");
    ExitCode::FAILURE
}
