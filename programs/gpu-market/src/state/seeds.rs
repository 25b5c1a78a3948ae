//! PDA seeds, in one place for the program and for off-chain code.

use anchor_lang::prelude::constant;

#[constant]
pub const MARKET: &[u8] = b"market";
#[constant]
pub const STAKE_VAULT: &[u8] = b"stake_vault";
#[constant]
pub const PAYMENT_VAULT: &[u8] = b"payment_vault";
#[constant]
pub const STAKE: &[u8] = b"stake";
#[constant]
pub const BID: &[u8] = b"bid";
#[constant]
pub const MACHINE: &[u8] = b"machine";
#[constant]
pub const LEASE: &[u8] = b"lease";
#[constant]
pub const SEALED_ENV: &[u8] = b"sealed_env";
