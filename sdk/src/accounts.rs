//! Reading the program's accounts off chain, with the program's own types.

use anchor_lang::AccountDeserialize;

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
