//! Instruction builders for the GPU market program, one struct per instruction, built from the
//! program crate's own account and argument types (never hand-encoded). The CLI, the host agent
//! and the tests all build their transactions here. [`book`] reads a bid book in rank order;
//! [`envelope`] seals a bid's environment to the key that may read it.

pub mod book;
pub mod envelope;
pub mod instructions;

pub use instructions::*;
