use anchor_lang::prelude::*;

/// A bid's environment sealed to one recipient (a machine's agent key): ciphertext only, never
/// the plaintext (`gpu_market_sdk::envelope`). The bid's client writes one per machine that may
/// run the bid; the agent that runs the lease reads the one sealed to its key and checks it
/// against the bid's `env_hash`. Address: `[seeds::SEALED_ENV, bid, recipient]`.
#[account]
#[derive(Debug)]
pub struct SealedEnv {
    /// The bid's market (first, so a keeper finds a market's copies with one filter).
    pub market: Pubkey,
    pub bid: Pubkey,
    /// The bid's client: it wrote the account, and it gets the rent back.
    pub client: Pubkey,
    /// The key that can open `sealed`.
    pub recipient: Pubkey,
    pub bump: u8,
    pub sealed: Vec<u8>,
}

impl SealedEnv {
    /// The largest sealed environment: what one transaction carries with room for its accounts
    /// (an environment of about 700 bytes of `KEY=VALUE` lines once sealed).
    pub const MAX_SEALED: usize = 800;

    /// Account size for `len` sealed bytes.
    pub const fn space(len: usize) -> usize {
        8 + 32 * 4 + 1 + 4 + len
    }
}
