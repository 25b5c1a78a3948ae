//! What a wallet signs when the market asks for a signature that is not a transaction's: a
//! lease API request ([`crate::api`]) and the salt of a sealed environment
//! ([`crate::envelope`]).
//!
//! Every such text is signed as Solana's off-chain message (version 0:
//! `\xffsolana offchain`, the version, the text's format and length, the text), built by the
//! `solana-offchain-message` crate the Solana CLI and the remote-wallet library use. That form
//! is what a hardware wallet signs besides transactions (a Ledger takes the leading `0xff` as the
//! mark of one and shows the text), and what the Wallet Standard's `solana:signMessage` is
//! given by the market page. Its first byte is one no transaction message starts with (a legacy
//! message starts with its signature count, below 128; a versioned one with `0x80` and its
//! version, and version 127 does not exist), so no signature made for the market can ever
//! authorise a transaction.

use solana_offchain_message::OffchainMessage;
use solana_signature::Signature;
use solana_signer::{Signer, SignerError};

/// `text` as the off-chain message a signer signs. `text` is the market's own UTF-8 (at most
/// 65,515 bytes; a Ledger shows at most 1,212).
pub fn wrap(text: &[u8]) -> Result<Vec<u8>, SignerError> {
    OffchainMessage::new(0, text)
        .and_then(|m| m.serialize())
        .map_err(|e| SignerError::InvalidInput(format!("not an off-chain message: {e}")))
}

/// `signer`'s signature of `text` as an off-chain message: a keypair's, or a device's (which may
/// ask its owner first, and may refuse).
pub fn sign(signer: &dyn Signer, text: &[u8]) -> Result<Signature, SignerError> {
    signer.try_sign_message(&wrap(text)?)
}

/// A test wallet: a real ed25519 key behind a signer that never gives its secret and, as a
/// Ledger does, signs only off-chain messages (bytes starting with `0xff`) besides transactions.
#[cfg(test)]
pub(crate) struct Device(pub solana_keypair::Keypair);

#[cfg(test)]
impl Signer for Device {
    fn try_pubkey(&self) -> Result<solana_pubkey::Pubkey, SignerError> {
        Ok(self.0.pubkey())
    }
    fn try_sign_message(&self, message: &[u8]) -> Result<Signature, SignerError> {
        if message.first() != Some(&0xff) {
            return Err(SignerError::Custom("not an off-chain message".into()));
        }
        self.0.try_sign_message(message)
    }
    fn is_interactive(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use solana_keypair::Keypair;
    use solana_message::VersionedMessage;

    use super::*;

    #[test]
    fn a_signed_text_is_an_off_chain_message_and_never_a_transaction() {
        let text = b"gpu-market-api/v1\nmachine\nGET\n/v1/leases/x/status\nnonce\n1";
        let wrapped = wrap(text).unwrap();
        assert!(wrapped.starts_with(OffchainMessage::SIGNING_DOMAIN));
        assert_eq!(
            OffchainMessage::deserialize(&wrapped)
                .unwrap()
                .get_message()
                .as_slice(),
            text
        );
        assert!(
            wincode::deserialize::<VersionedMessage>(&wrapped).is_err(),
            "no transaction message reads from it"
        );
        let key = Keypair::new();
        let signature = sign(&key, text).unwrap();
        assert!(signature.verify(key.pubkey().as_ref(), &wrapped));
        assert!(!signature.verify(key.pubkey().as_ref(), text));
        // ed25519 signs deterministically: the same key and text give the same signature.
        assert_eq!(sign(&key, text).unwrap(), signature);
        assert!(wrap(b"").is_err());
    }
}
