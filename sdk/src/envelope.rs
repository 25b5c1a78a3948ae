//! Sealed environments: a bid's environment encrypted to one Solana key, so that only the holder
//! of that key (a machine's agent) can read it. The bid stores [`Environment::hash`]; the
//! client stores one sealed copy per machine that may run the bid on chain (`seal_env`), and
//! the agent opens the copy sealed to its key with [`open_env`], which checks it against the
//! bid's hash.
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
use solana_signer::{Signer, SignerError};

use crate::offchain;

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
    /// It opens, but it is not the environment the bid names (its hash differs).
    NotTheBids,
}

impl core::fmt::Display for EnvelopeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            EnvelopeError::BadRecipient => "the recipient is not an ed25519 public key",
            EnvelopeError::NotSealed => "not a sealed environment",
            EnvelopeError::CannotOpen => {
                "the sealed environment is not for this key, or was altered"
            }
            EnvelopeError::NotTheBids => {
                "the sealed environment is not the one the bid names (its hash differs)"
            }
        })
    }
}

impl std::error::Error for EnvelopeError {}

const SALT_LEN: usize = 32;
const SALT_LABEL: &[u8] = b"gpu-market env salt v2";

/// An environment (`KEY=VALUE` lines) as a bid carries it: a salt, then the text. The bid stores
/// sha256 of both ([`Environment::hash`]), so a host can check that what it opened is what the
/// client placed, and the salt keeps a guessable environment from being found from its hash.
///
/// The salt comes from the client's signature of [`salt_text`] (an off-chain message naming the
/// text's sha256), so a wallet that never gives its secret (a Ledger, a browser wallet's
/// `solana:signMessage`) makes it as a keypair does; ed25519 signs deterministically, so the
/// same wallet and file give the same hash later, and the client can seal the environment to
/// more machines from them alone. Nobody without the client's key can make that signature, so
/// nobody else can test a guess against the hash.
pub struct Environment {
    salted: Vec<u8>,
}

/// The text a client signs for its environment's salt: what its wallet shows.
pub fn salt_text(text: &[u8]) -> Vec<u8> {
    salt_text_of(&Sha256::digest(text).into())
}

/// [`salt_text`] of a text whose sha256 is `digest`: what the market page has its wallet sign,
/// the text itself staying in the browser.
pub fn salt_text_of(digest: &[u8; 32]) -> Vec<u8> {
    format!(
        "gpu-market: the salt of a sealed environment, sha256 {}. Signing it moves nothing.",
        hex::encode(digest)
    )
    .into_bytes()
}

impl Environment {
    /// `text` salted by `client`'s signature (a keypair's, or a device's: which may ask its
    /// owner, or refuse).
    pub fn new(text: &[u8], client: &dyn Signer) -> Result<Self, SignerError> {
        let signature = offchain::sign(client, &salt_text(text))?;
        let salt = Sha256::new()
            .chain_update(SALT_LABEL)
            .chain_update(signature.as_ref())
            .chain_update(text)
            .finalize();
        let mut salted = Vec::with_capacity(SALT_LEN + text.len());
        salted.extend_from_slice(&salt);
        salted.extend_from_slice(text);
        Ok(Self { salted })
    }

    /// What the bid stores (`env_hash`).
    pub fn hash(&self) -> [u8; 32] {
        Sha256::digest(&self.salted).into()
    }

    /// The copy for `recipient` (a machine's agent key).
    pub fn seal_to(&self, recipient: &Pubkey) -> Result<Vec<u8>, EnvelopeError> {
        seal(&self.salted, recipient)
    }
}

/// The environment text of a copy sealed to `recipient`, checked against the bid's
/// `env_hash`.
pub fn open_env(
    sealed: &[u8],
    recipient: &Keypair,
    env_hash: &[u8; 32],
) -> Result<Vec<u8>, EnvelopeError> {
    let salted = open(sealed, recipient)?;
    if salted.len() < SALT_LEN || <[u8; 32]>::from(Sha256::digest(&salted)) != *env_hash {
        return Err(EnvelopeError::NotTheBids);
    }
    Ok(salted[SALT_LEN..].to_vec())
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
    use crate::offchain::Device;

    #[test]
    fn only_the_recipient_opens_and_tampering_is_detected() {
        let agent = Keypair::new();
        let env = b"HF_TOKEN=s3cret\nMODE=fast\n";
        let sealed = seal(env, &agent.pubkey()).unwrap();
        assert!(sealed.starts_with(MAGIC));
        assert!(!sealed.windows(6).any(|w| w == b"s3cret"));
        assert_eq!(open(&sealed, &agent).unwrap(), env);
        // A fresh ephemeral key each time: same plaintext, different bytes.
        let again = seal(env, &agent.pubkey()).unwrap();
        assert_ne!(sealed, again);
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

    #[test]
    fn an_environment_opens_for_each_machine_with_the_bids_hash_only() {
        let client = Keypair::new();
        let (a, b) = (Keypair::new(), Keypair::new());
        let new = |text: &[u8], client: &dyn Signer| Environment::new(text, client).unwrap();
        let env = new(b"HF_TOKEN=s3cret\n", &client);
        // The same file and keypair give the same hash: the client can add machines later.
        assert_eq!(new(b"HF_TOKEN=s3cret\n", &client).hash(), env.hash());
        // So does a wallet of the same key that only signs (a Ledger, a browser wallet).
        let wallet = Device(client.insecure_clone());
        assert_eq!(new(b"HF_TOKEN=s3cret\n", &wallet).hash(), env.hash());
        // Another client's salt differs: the hash does not give a guessable value away.
        assert_ne!(
            new(b"HF_TOKEN=s3cret\n", &Keypair::new()).hash(),
            env.hash()
        );
        for agent in [&a, &b] {
            let sealed = env.seal_to(&agent.pubkey()).unwrap();
            assert_eq!(
                open_env(&sealed, agent, &env.hash()).unwrap(),
                b"HF_TOKEN=s3cret\n"
            );
        }
        let other = new(b"HF_TOKEN=other\n", &client);
        let sealed = other.seal_to(&a.pubkey()).unwrap();
        assert_eq!(
            open_env(&sealed, &a, &env.hash()),
            Err(EnvelopeError::NotTheBids)
        );
        assert_eq!(
            open_env(&sealed, &b, &other.hash()),
            Err(EnvelopeError::CannotOpen)
        );
    }
}
