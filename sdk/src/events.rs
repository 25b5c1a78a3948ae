//! Reading the program's events back from transaction logs.

use anchor_lang::{AnchorDeserialize, Discriminator};
use base64::Engine;

/// The events of type `E` in a transaction's logs: Anchor's `emit!` writes each as a
/// `Program data: <base64>` line, the event's discriminator first.
pub fn from_logs<E: AnchorDeserialize + Discriminator>(logs: &[String]) -> Vec<E> {
    logs.iter()
        .filter_map(|l| l.strip_prefix("Program data: "))
        .filter_map(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
        .filter(|d| d.starts_with(E::DISCRIMINATOR))
        .filter_map(|d| E::deserialize(&mut &d[E::DISCRIMINATOR.len()..]).ok())
        .collect()
}
