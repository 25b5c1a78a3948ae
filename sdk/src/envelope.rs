//! Sealed environments: a bid's environment encrypted to one Solana key, so that only the holder
//! of that key (a machine's agent, or whoever the client names) can read it. The chain stores
//! only [`env_hash`] of the sealed bytes; the sealed file travels off chain.
//!
//! The recipient's ed25519 public key is mapped to its X25519 (Montgomery) form, as libsodium's
//! `crypto_sign_ed25519_pk_to_curve25519` does; the sender adds a fresh ephemeral X25519 key, and
//! the shared secret, hashed with both public keys, keys AES-256-GCM-SIV for this one message.
//! Layout: [`MAGIC`] ‖ ephemeral public key (32) ‖ ciphertext with its 16-byte tag.

use aes_gcm_siv::aead::{rand_core::RngCore, Aead, KeyInit, OsRng};
use aes_gcm_siv::{Aes256GcmSiv, Nonce};
use curve25519_dalek::edwards::CompressedEdwardsY;
use curve25519_dalek::montgomery::MontgomeryPoint;
use sha2::{Digest, Sha256, Sha512};
use solana_keypair::Keypair;
use solana_pubkey::Pubkey;
use solana_signer::Signer;

/// The first bytes of a sealed environment (format version 1).
pub const MAGIC: &[u8; 8] = b"GMENV\0\0\x01";
const EPHEMERAL_LEN: usize = 32;
const TAG_LEN: usize = 16;
const KDF_LABEL: &[u8] = b"gpu-market sealed env v1";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvelopeError {
    /// The recipient key is not a point of the curve (not an ed25519 public key).
    BadRecipient,
    /// The bytes are not a sealed environment of this version.
    NotSealed,
    /// Wrong key, or the bytes were changed.
    CannotOpen,
}

impl core::fmt::Display for EnvelopeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            EnvelopeError::BadRecipient => "the recipient is not an ed25519 public key",
            EnvelopeError::NotSealed => "not a sealed environment",
            EnvelopeError::CannotOpen => {
                "the sealed environment is not for this key, or was altered"
            }
        })
    }
}

impl std::error::Error for EnvelopeError {}

/// The hash a bid stores for a sealed environment (sha256 of the sealed bytes).
pub fn env_hash(sealed: &[u8]) -> [u8; 32] {
    Sha256::digest(sealed).into()
}

fn cipher(
    shared: &MontgomeryPoint,
    ephemeral: &MontgomeryPoint,
    recipient: &Pubkey,
) -> Aes256GcmSiv {
    let key = Sha256::new()
        .chain_update(KDF_LABEL)
        .chain_update(shared.as_bytes())
        .chain_update(ephemeral.as_bytes())
        .chain_update(recipient.as_ref())
        .finalize();
    Aes256GcmSiv::new(&key)
}

/// Each key encrypts exactly one message, so the nonce may be fixed.
fn nonce() -> Nonce {
    Nonce::default()
}

/// Encrypts `plaintext` to `recipient` (an ed25519 key: a machine's agent, a market authority).
pub fn seal(plaintext: &[u8], recipient: &Pubkey) -> Result<Vec<u8>, EnvelopeError> {
    let point = CompressedEdwardsY(recipient.to_bytes())
        .decompress()
        .ok_or(EnvelopeError::BadRecipient)?;
    if point.is_small_order() {
        return Err(EnvelopeError::BadRecipient);
    }
    let mut secret = [0u8; 32];
    OsRng.fill_bytes(&mut secret);
    let ephemeral = MontgomeryPoint::mul_base_clamped(secret);
    let shared = point.to_montgomery().mul_clamped(secret);
    let ciphertext = cipher(&shared, &ephemeral, recipient)
        .encrypt(&nonce(), plaintext)
        .map_err(|_| EnvelopeError::CannotOpen)?;
    let mut out = Vec::with_capacity(MAGIC.len() + EPHEMERAL_LEN + ciphertext.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(ephemeral.as_bytes());
    out.extend_from_slice(&ciphertext);
    Ok(out)
}

/// Decrypts what [`seal`] made for `recipient`'s public key.
pub fn open(sealed: &[u8], recipient: &Keypair) -> Result<Vec<u8>, EnvelopeError> {
    let rest = sealed
        .strip_prefix(MAGIC.as_slice())
        .filter(|r| r.len() >= EPHEMERAL_LEN + TAG_LEN)
        .ok_or(EnvelopeError::NotSealed)?;
    let (ephemeral, ciphertext) = rest.split_at(EPHEMERAL_LEN);
    let ephemeral = MontgomeryPoint(ephemeral.try_into().map_err(|_| EnvelopeError::NotSealed)?);
    // The X25519 scalar of an ed25519 key: the first half of sha512(seed), clamped.
    let hashed = Sha512::digest(recipient.secret_bytes());
    let mut scalar = [0u8; 32];
    scalar.copy_from_slice(&hashed[..32]);
    let shared = ephemeral.mul_clamped(scalar);
    cipher(&shared, &ephemeral, &recipient.pubkey())
        .decrypt(&nonce(), ciphertext)
        .map_err(|_| EnvelopeError::CannotOpen)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_recipient_opens_and_tampering_is_detected() {
        let agent = Keypair::new();
        let env = b"HF_TOKEN=s3cret\nMODE=fast\n";
        let sealed = seal(env, &agent.pubkey()).unwrap();
        assert!(sealed.starts_with(MAGIC));
        assert!(!sealed.windows(6).any(|w| w == b"s3cret"));
        assert_eq!(open(&sealed, &agent).unwrap(), env);
        // A fresh ephemeral key each time: same plaintext, different bytes and hash.
        let again = seal(env, &agent.pubkey()).unwrap();
        assert_ne!(env_hash(&sealed), env_hash(&again));
        assert_eq!(
            open(&sealed, &Keypair::new()),
            Err(EnvelopeError::CannotOpen)
        );
        let mut altered = sealed.clone();
        *altered.last_mut().unwrap() ^= 1;
        assert_eq!(open(&altered, &agent), Err(EnvelopeError::CannotOpen));
        assert_eq!(open(b"KEY=VALUE", &agent), Err(EnvelopeError::NotSealed));
        assert_eq!(open(b"", &agent), Err(EnvelopeError::NotSealed));
    }

    #[test]
    fn a_key_off_the_curve_is_refused() {
        // y = 2 is not the y-coordinate of a curve point.
        let mut bytes = [0u8; 32];
        bytes[0] = 2;
        assert_eq!(
            seal(b"x", &Pubkey::new_from_array(bytes)),
            Err(EnvelopeError::BadRecipient)
        );
        // The identity (y = 1) is on the curve but of small order.
        bytes[0] = 1;
        assert_eq!(
            seal(b"x", &Pubkey::new_from_array(bytes)),
            Err(EnvelopeError::BadRecipient)
        );
    }
}
