//! TLS between a lease's client and a host's agent, without a certificate authority: the agent's
//! hot key, whose public half the machine account holds as `Machine.agent`, is its TLS key. The
//! agent serves a self-signed ed25519 certificate of that key ([`server_config`]); a client
//! accepts a server only when the certificate's key is the one the chain names and the
//! handshake is signed with it ([`client_config`]). Both sides use the ring provider, never the
//! process default.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{ring, CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, OtherError, ServerConfig,
    SignatureScheme,
};
use solana_keypair::Keypair;
use solana_pubkey::Pubkey;

/// The name the agent's certificate is made for and the client asks for. The key, not the
/// name, identifies the agent: the client ignores it.
pub const SERVER_NAME: &str = "gpu-market-agent";

/// The DER of an ed25519 SubjectPublicKeyInfo (RFC 8410) before its 32 key bytes.
const ED25519_SPKI_PREFIX: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];
/// The DER of an ed25519 PKCS#8 v1 private key (RFC 8410) before its 32 seed bytes.
const ED25519_PKCS8_PREFIX: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot make the agent's certificate: {0}")]
    Certificate(#[from] rcgen::Error),
    #[error("cannot serve TLS with the agent's key: {0}")]
    Config(#[from] rustls::Error),
}

/// The certificate's key is not the machine's agent key.
#[derive(Debug, thiserror::Error)]
#[error("the server's key is not the machine's agent key")]
struct NotThePinnedKey;

fn provider() -> Arc<CryptoProvider> {
    Arc::new(ring::default_provider())
}

/// The ed25519 SubjectPublicKeyInfo of `key`, as a certificate carries it.
fn ed25519_spki(key: &Pubkey) -> Vec<u8> {
    [&ED25519_SPKI_PREFIX[..], key.as_ref()].concat()
}

/// TLS 1.3 only: both ends are ours, so nothing needs 1.2, and 1.3 leaves out its weaker
/// handshakes and cipher suites.
const PROTOCOL_VERSIONS: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS13];

/// The agent's TLS: a self-signed certificate of `agent`'s key for [`SERVER_NAME`], signed and
/// served with that key; no client certificates (requests are signed instead).
pub fn server_config(agent: &Keypair) -> Result<Arc<ServerConfig>, TlsError> {
    let pkcs8 =
        PrivatePkcs8KeyDer::from([&ED25519_PKCS8_PREFIX[..], agent.secret_bytes()].concat());
    let signing_key = rcgen::KeyPair::from_pkcs8_der_and_sign_algo(&pkcs8, &rcgen::PKCS_ED25519)?;
    let certificate =
        rcgen::CertificateParams::new(vec![SERVER_NAME.to_string()])?.self_signed(&signing_key)?;
    let config = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(PROTOCOL_VERSIONS)?
        .with_no_client_auth()
        .with_single_cert(vec![certificate.der().clone()], PrivateKeyDer::Pkcs8(pkcs8))?;
    Ok(Arc::new(config))
}

/// A client's TLS to the agent whose key is `pinned` (the machine account's `agent`): any other
/// server is refused during the handshake.
pub fn client_config(pinned: &Pubkey) -> Arc<ClientConfig> {
    let provider = provider();
    let verifier = Arc::new(PinnedKey {
        spki: ed25519_spki(pinned),
        algorithms: provider.signature_verification_algorithms,
    });
    let config = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(PROTOCOL_VERSIONS)
        .expect("the ring provider supports TLS 1.3")
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Arc::new(config)
}

/// Accepts the one server certificate whose key is the pinned one, whatever its name, issuer
/// or validity dates, and handshakes signed with that key.
#[derive(Debug)]
struct PinnedKey {
    spki: Vec<u8>,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for PinnedKey {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let certificate = ParsedCertificate::try_from(end_entity)?;
        if certificate.subject_public_key_info().as_ref() != self.spki.as_slice() {
            return Err(CertificateError::Other(OtherError(Arc::new(NotThePinnedKey))).into());
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    /// The pinned key is ed25519: no other scheme can be signed with it.
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        vec![SignatureScheme::ED25519]
    }
}

#[cfg(test)]
mod tests {
    use solana_signer::Signer;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    use tokio_rustls::{TlsAcceptor, TlsConnector};

    use super::*;

    /// Serves one TLS connection as `agent` on loopback, echoing a byte, while a client pinned
    /// to `pinned` connects; the client's outcome.
    async fn handshake(agent: &Keypair, pinned: &Pubkey) -> std::io::Result<u8> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let acceptor = TlsAcceptor::from(server_config(agent).unwrap());
        let server = tokio::spawn(async move {
            let (socket, _) = listener.accept().await?;
            let mut tls = acceptor.accept(socket).await?;
            let byte = tls.read_u8().await?;
            tls.write_u8(byte + 1).await?;
            tls.shutdown().await
        });
        let connector = TlsConnector::from(client_config(pinned));
        let name = ServerName::try_from(SERVER_NAME).unwrap();
        let client = async {
            let mut tls = connector
                .connect(name, TcpStream::connect(addr).await?)
                .await?;
            tls.write_u8(41).await?;
            tls.read_u8().await
        };
        let answer = client.await;
        if answer.is_ok() {
            server.await.unwrap()?;
        }
        answer
    }

    #[tokio::test]
    async fn a_client_pinned_to_the_agents_key_connects() {
        let agent = Keypair::new();
        assert_eq!(handshake(&agent, &agent.pubkey()).await.unwrap(), 42);
    }

    #[tokio::test]
    async fn a_client_that_offers_only_tls_1_2_is_refused() {
        let agent = Keypair::new();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let acceptor = TlsAcceptor::from(server_config(&agent).unwrap());
        let server = tokio::spawn(async move {
            let (socket, _) = listener.accept().await.unwrap();
            acceptor.accept(socket).await.map(drop)
        });
        let mut old = ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS12])
            .unwrap()
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(PinnedKey {
                spki: ed25519_spki(&agent.pubkey()),
                algorithms: provider().signature_verification_algorithms,
            }))
            .with_no_client_auth();
        old.enable_sni = false;
        let connector = TlsConnector::from(Arc::new(old));
        let name = ServerName::try_from(SERVER_NAME).unwrap();
        let client = connector
            .connect(name, TcpStream::connect(addr).await.unwrap())
            .await;
        assert!(client.is_err(), "a TLS 1.2 handshake succeeded");
        assert!(server.await.unwrap().is_err());
    }

    #[tokio::test]
    async fn a_client_pinned_to_another_key_refuses_the_server() {
        let agent = Keypair::new();
        let err = handshake(&agent, &Keypair::new().pubkey())
            .await
            .unwrap_err();
        let refusal = err
            .get_ref()
            .and_then(|e| e.downcast_ref::<rustls::Error>());
        assert!(
            matches!(
                refusal,
                Some(rustls::Error::InvalidCertificate(CertificateError::Other(e)))
                    if e.0.is::<NotThePinnedKey>()
            ),
            "{err}"
        );
    }
}
