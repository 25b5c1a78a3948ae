//! The one place where the market's formulas live.
//!
//! Everything here is integer arithmetic on basis points (1 bps = 1/10 000), checked, and free of
//! floats and of signed 128-bit division so that the same code runs natively and in the SBF program.
//! No Solana, no async runtime: the program, the agent, the client and the benchmarks all call it.
//!
//! One exception, off-chain only: [`colocate`] fits and applies a regression in `f64`. The
//! program never calls it.

#![forbid(unsafe_code)]

pub mod amount;
pub mod colocate;
pub mod evidence;
pub mod fit;
pub mod forecast;
pub mod lease;
pub mod matching;
pub mod math;
pub mod overclock;
pub mod parallelism;
pub mod placement;
pub mod pricing;
pub mod score;
pub mod settlement;

pub use math::{MathError, BPS};
