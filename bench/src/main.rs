//! `gpu-market-bench fgd [--traces DIR]`: the FGD protocol on the openb trace.
//! `gpu-market-bench throughput`: placement speed of our policy on a synthetic cluster.
//! `gpu-market-bench jct [--traces DIR]`: job completion time on the Philly-derived traces.
//! `gpu-market-bench colocate [--traces DIR]`: the interference model on Lucid's pairs.
//! `gpu-market-bench forecast [--traces DIR]`: the demand forecast on Philly and openb arrivals.
//! `gpu-market-bench micro`: ns per call of the score, the reserve price and feasibility.

mod colocate;
mod fgd;
mod forecast;
mod jct;
mod json;
mod micro;
mod philly;
mod throughput;
mod trace;

use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str =
    "usage: gpu-market-bench [--traces DIR] fgd | throughput | jct | colocate | forecast | micro";

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
        Some("fgd") => fgd::main(&traces),
        Some("throughput") => throughput::main(),
        Some("jct") => jct::main(&traces),
        Some("colocate") => colocate::main(&traces),
        Some("forecast") => forecast::main(&traces),
        Some("micro") => micro::main(),
        _ => return fail(USAGE),
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
