//! The power readings behind a proof, as the agent keeps them for the lease
//! (`gpu_market_core::evidence::PowerLog`): the hash a proof carries, and the file of one
//! proven interval that `gpu-market lease audit` checks against the chain.

use gpu_market_core::evidence::PowerLog;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The `samples_hash` a proof carries for `log`: sha256 of its encoding.
pub fn samples_hash(log: &PowerLog) -> [u8; 32] {
    Sha256::digest(log.encode()).into()
}

/// One proven interval's power log, as the agent writes it
/// (`<data_dir>/evidence/<lease>/<interval>.json`, seen by the lease's container).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntervalEvidence {
    pub lease: String,
    pub interval: u32,
    /// Hex of [`samples_hash`] of `log`, as the agent computed it.
    pub samples_hash: String,
    pub log: PowerLog,
}
