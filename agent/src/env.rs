//! A lease's environment. On chain there is only the hash of the client's sealed environment
//! (`gpu_market_sdk::envelope`: encrypted to this machine's agent key, or to the key the client
//! named); the sealed bytes reach the host off chain and are placed in
//! `<data_dir>/env/<hex of the env hash>.sealed`. The agent checks the hash, opens the envelope
//! with its own keypair, and reads one `KEY=VALUE` a line (`#` starts a comment).
//! Values are secrets: no error or log line here carries one.

use std::path::{Path, PathBuf};

use gpu_market_sdk::envelope::{self, EnvelopeError};
use solana_keypair::Keypair;

use crate::runtime::hex;

#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    #[error("the sealed environment {path} cannot be read: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the sealed environment {path} is not the one the bid names (its hash differs)")]
    HashMismatch { path: PathBuf },
    #[error("the sealed environment {path} cannot be opened: {source}")]
    Open {
        path: PathBuf,
        source: EnvelopeError,
    },
    #[error("{path} line {line}: expected KEY=VALUE with a non-empty KEY")]
    Syntax { path: PathBuf, line: usize },
}

/// Where the sealed environment with hash `env_hash` is expected.
pub fn env_path(data_dir: &Path, env_hash: &[u8; 32]) -> PathBuf {
    data_dir
        .join("env")
        .join(format!("{}.sealed", hex(env_hash)))
}

/// The variables of the environment with hash `env_hash`, opened with `key`; none for the
/// all-zero hash (a lease without an environment).
pub fn load_env(
    data_dir: &Path,
    env_hash: &[u8; 32],
    key: &Keypair,
) -> Result<Vec<(String, String)>, EnvError> {
    if *env_hash == [0; 32] {
        return Ok(Vec::new());
    }
    let path = env_path(data_dir, env_hash);
    let sealed = std::fs::read(&path).map_err(|source| EnvError::Read {
        path: path.clone(),
        source,
    })?;
    if envelope::env_hash(&sealed) != *env_hash {
        return Err(EnvError::HashMismatch { path });
    }
    let plain = envelope::open(&sealed, key).map_err(|source| EnvError::Open {
        path: path.clone(),
        source,
    })?;
    parse_env(&String::from_utf8_lossy(&plain)).map_err(|line| EnvError::Syntax { path, line })
}

/// Seals `text` to `key`'s public key and places it where [`load_env`] looks; returns its hash
/// (what a bid would carry). For tests and for operators placing an environment by hand.
pub fn place_sealed(data_dir: &Path, text: &str, recipient: &Keypair) -> [u8; 32] {
    use solana_signer::Signer;
    let sealed = envelope::seal(text.as_bytes(), &recipient.pubkey())
        .expect("an ed25519 keypair's public key is a curve point");
    let hash = envelope::env_hash(&sealed);
    let path = env_path(data_dir, &hash);
    std::fs::create_dir_all(path.parent().expect("env folder")).expect("create the env folder");
    std::fs::write(&path, sealed).expect("write the sealed environment");
    hash
}

/// `KEY=VALUE` lines; the number of the first bad line otherwise.
fn parse_env(text: &str) -> Result<Vec<(String, String)>, usize> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .map(|(i, l)| match l.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
            _ => Err(i + 1),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_envs_are_found_by_hash_opened_with_the_agent_key_and_errors_hide_values() {
        let dir = tempfile::tempdir().unwrap();
        let agent = Keypair::new();
        assert!(load_env(dir.path(), &[0; 32], &agent).unwrap().is_empty());
        let err = load_env(dir.path(), &[0xcd; 32], &agent).unwrap_err();
        assert!(err.to_string().contains(&"cd".repeat(32)), "{err}");

        let hash = place_sealed(
            dir.path(),
            "# comment\nTOKEN=s3cret=x\n\nMODE = fast\n",
            &agent,
        );
        assert_eq!(
            load_env(dir.path(), &hash, &agent).unwrap(),
            vec![
                ("TOKEN".to_string(), "s3cret=x".to_string()),
                ("MODE".to_string(), " fast".to_string())
            ]
        );
        // Another key cannot open it, and the error says so without the value.
        let err = load_env(dir.path(), &hash, &Keypair::new()).unwrap_err();
        assert!(matches!(err, EnvError::Open { .. }), "{err}");
        assert!(!err.to_string().contains("s3cret"));
        // A file swapped under the hash is refused.
        let other = place_sealed(dir.path(), "TOKEN=other\n", &agent);
        std::fs::copy(env_path(dir.path(), &other), env_path(dir.path(), &hash)).unwrap();
        let err = load_env(dir.path(), &hash, &agent).unwrap_err();
        assert!(matches!(err, EnvError::HashMismatch { .. }), "{err}");

        let bad = place_sealed(dir.path(), "TOKEN=s3cret\nnot a pair s3cret\n", &agent);
        let err = load_env(dir.path(), &bad, &agent).unwrap_err();
        assert!(matches!(err, EnvError::Syntax { line: 2, .. }));
        assert!(!err.to_string().contains("s3cret"));
    }
}
