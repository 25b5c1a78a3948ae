//! Program-derived addresses, for off-chain code (the client, the agent, the tests). The program
//! itself stores every bump and never searches for one.

use anchor_lang::prelude::Pubkey;

use crate::state::seeds;
use crate::ID;

pub fn market(authority: &Pubkey, id: u64) -> (Pubkey, u8) {
    Pubkey::find_program_address(&[seeds::MARKET, authority.as_ref(), &id.to_le_bytes()], &ID)
}

pub fn stake_vault(market: &Pubkey) -> (Pubkey, u8) {
    Pubkey::find_program_address(&[seeds::STAKE_VAULT, market.as_ref()], &ID)
}

pub fn payment_vault(market: &Pubkey) -> (Pubkey, u8) {
    Pubkey::find_program_address(&[seeds::PAYMENT_VAULT, market.as_ref()], &ID)
}

pub fn stake(market: &Pubkey, owner: &Pubkey) -> (Pubkey, u8) {
    Pubkey::find_program_address(&[seeds::STAKE, market.as_ref(), owner.as_ref()], &ID)
}

pub fn machine(market: &Pubkey, owner: &Pubkey, id: u64) -> (Pubkey, u8) {
    Pubkey::find_program_address(
        &[
            seeds::MACHINE,
            market.as_ref(),
            owner.as_ref(),
            &id.to_le_bytes(),
        ],
        &ID,
    )
}

pub fn bid(market: &Pubkey, client: &Pubkey, nonce: u64) -> (Pubkey, u8) {
    Pubkey::find_program_address(
        &[
            seeds::BID,
            market.as_ref(),
            client.as_ref(),
            &nonce.to_le_bytes(),
        ],
        &ID,
    )
}

pub fn lease(bid: &Pubkey) -> (Pubkey, u8) {
    Pubkey::find_program_address(&[seeds::LEASE, bid.as_ref()], &ID)
}

/// The lease of part `part` of a gang bid (`allocate_gang`).
pub fn gang_lease(bid: &Pubkey, part: u8) -> (Pubkey, u8) {
    Pubkey::find_program_address(&[seeds::LEASE, bid.as_ref(), &[part]], &ID)
}

pub fn sealed_env(bid: &Pubkey, recipient: &Pubkey) -> (Pubkey, u8) {
    Pubkey::find_program_address(&[seeds::SEALED_ENV, bid.as_ref(), recipient.as_ref()], &ID)
}
