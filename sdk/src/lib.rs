//! Instruction builders for the GPU market program, one struct per instruction, built from the
//! program crate's own account and argument types (never hand-encoded). The CLI, the host agent
//! and the tests all build their transactions here. [`accounts`] decodes the program's accounts,
//! [`events`] its events in transaction logs, and [`book`] a bid book in rank order;
//! [`envelope`] seals a bid's environment to the key that may read it; [`evidence`] is the power
//! log a proof commits to, as the agent keeps it; [`token`] builds the SPL token accounts around
//! the market and tells a live one; [`placement`] is the market's machine choice from its
//! accounts. [`api`] is the lease owner's signed API on a host's agent,
//! served over [`tls`] pinned to the agent's key.

pub mod accounts;
pub mod api;
pub mod book;
pub mod budget;
pub mod envelope;
pub mod events;
pub mod evidence;
pub mod gpus;
pub mod instructions;
pub mod net;
pub mod offchain;
pub mod placement;
pub mod redact;
pub mod table;
pub mod tls;
pub mod token;

pub use instructions::*;
