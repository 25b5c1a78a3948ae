//! Reading the program's accounts off chain, with the program's own types.

use anchor_lang::__private::bytemuck;
use anchor_lang::{AccountDeserialize, Discriminator};
use gpu_market::state::BidBook;
use solana_pubkey::Pubkey;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// The data is not an account of that type (wrong discriminator or layout).
    NotA(&'static str),
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::NotA(what) => write!(f, "the account is not a {what}"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// An Anchor account of the program (discriminator checked).
pub fn decode<T: AccountDeserialize>(data: &[u8], what: &'static str) -> Result<T, DecodeError> {
    T::try_deserialize(&mut &data[..]).map_err(|_| DecodeError::NotA(what))
}

/// The bids of a bid book account, best ranked first.
pub fn book_order(data: &[u8]) -> Result<Vec<Pubkey>, DecodeError> {
    let size = std::mem::size_of::<BidBook>();
    if data.len() < 8 + size || data[..8] != *BidBook::DISCRIMINATOR {
        return Err(DecodeError::NotA("bid book"));
    }
    // The account data is only byte-aligned; the book's integers want 8.
    let mut aligned = vec![0u64; size.div_ceil(8)];
    bytemuck::cast_slice_mut::<u64, u8>(&mut aligned)[..size].copy_from_slice(&data[8..8 + size]);
    let book: &BidBook = bytemuck::from_bytes(&bytemuck::cast_slice(&aligned)[..size]);
    Ok(book.iter().map(|leaf| leaf.bid).collect())
}
