//! PDA seeds, in one place for the program and for off-chain code.

pub const MARKET: &[u8] = b"market";
pub const STAKE_VAULT: &[u8] = b"stake_vault";
pub const PAYMENT_VAULT: &[u8] = b"payment_vault";
pub const STAKE: &[u8] = b"stake";
pub const BID: &[u8] = b"bid";
pub const MACHINE: &[u8] = b"machine";
pub const LEASE: &[u8] = b"lease";
pub const SEALED_ENV: &[u8] = b"sealed_env";
