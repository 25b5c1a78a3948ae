//! Instruction builders for the GPU market program, one struct per instruction, built from the
//! program crate's own account and argument types (never hand-encoded). The CLI, the host agent
//! and the tests all build their transactions here.

pub mod accounts;
pub mod instructions;
pub mod token;

pub use instructions::*;
