//! A lease's environment. On chain there is only the hash of the client's sealed environment
//! (`gpu_market_sdk::envelope`: encrypted to this machine's agent key, or to the key the client
//! named); the sealed bytes reach the host off chain and are placed in
//! `<data_dir>/env/<hex of the env hash>.sealed`. The agent checks the hash, opens the envelope
//! with its own keypair, and reads one `KEY=VALUE` a line (`#` starts a comment).
//! Values are secrets: no error or log line here carries one.
//!
//! Keys must be environment variable names, and some are the host's: those that steer the
//! dynamic loader, the NVIDIA container toolkit or NVIDIA MPS ([`reserved_key`]). An environment
//! with such a key is refused whole, naming the key.

use std::path::{Path, PathBuf};

use gpu_market_sdk::envelope::{self, EnvelopeError};
use solana_keypair::Keypair;

use crate::gpu::isolation::MPS_ENV_PREFIX;
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
    /// The key is not a name: not letters, digits and `_`, or starting with a digit. (A stray
    /// line may be a secret: the key is not repeated.)
    #[error("{path} line {line}: the key is not an environment variable name (letters, digits and _, not starting with a digit)")]
    BadName { path: PathBuf, line: usize },
    #[error("{path} line {line}: {key} is reserved to the host: it steers the dynamic loader, the NVIDIA container toolkit or NVIDIA MPS")]
    ReservedKey {
        path: PathBuf,
        line: usize,
        key: String,
    },
}

/// Prefixes of the keys a lease's environment may not set, compared regardless of case:
/// - `LD_` steers the dynamic loader (`LD_PRELOAD`, `LD_LIBRARY_PATH`, `LD_AUDIT`, …), in the
///   container and in the NVIDIA container toolkit's hooks, which run on the host with the
///   container's environment: CVE-2025-23266 preloaded a library into the toolkit's
///   `createContainer` hook this way.
/// - `NVIDIA_` steers the toolkit itself: `NVIDIA_VISIBLE_DEVICES` could expose other leases'
///   GPUs, `NVIDIA_DRIVER_CAPABILITIES` more of the driver, `NVIDIA_REQUIRE_*`, `NVIDIA_MIG_*` …
/// - `CUDA_MPS_` steers NVIDIA MPS, which confines a lease on a shared GPU to its slice
///   (`crate::gpu::isolation`): `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT` would lift its memory limit,
///   `CUDA_MPS_PIPE_DIRECTORY` take it off the host's MPS server.
///
/// `CUDA_VISIBLE_DEVICES` stays the client's: the CUDA runtime reads it inside the container,
/// where it can only narrow the GPUs the lease was given.
pub const RESERVED_PREFIXES: &[&str] = &["LD_", "NVIDIA_", MPS_ENV_PREFIX];

/// Keys the dynamic loader or the C library load code by, outside [`RESERVED_PREFIXES`]:
/// `GLIBC_TUNABLES` is parsed by the loader itself (CVE-2023-4911), `GCONV_PATH` names shared
/// objects that iconv loads.
pub const RESERVED_KEYS: &[&str] = &["GLIBC_TUNABLES", "GCONV_PATH"];

/// Whether `key` is the host's to set (see [`RESERVED_PREFIXES`] and [`RESERVED_KEYS`]).
pub fn reserved_key(key: &str) -> bool {
    let upper = key.to_ascii_uppercase();
    RESERVED_PREFIXES.iter().any(|p| upper.starts_with(p)) || RESERVED_KEYS.contains(&&*upper)
}

/// Whether `key` is an environment variable name: ASCII letters, digits and `_`, not starting
/// with a digit (POSIX's portable names).
pub fn valid_name(key: &str) -> bool {
    let mut chars = key.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
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
    parse_env(&String::from_utf8_lossy(&plain), &path)
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

/// The `KEY=VALUE` lines of `text` (the environment at `path`); the first bad line refused.
fn parse_env(text: &str, path: &Path) -> Result<Vec<(String, String)>, EnvError> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .map(|(i, l)| {
            let (path, line) = (path.to_path_buf(), i + 1);
            let (key, value) = match l.split_once('=') {
                Some((k, v)) if !k.trim().is_empty() => (k.trim(), v),
                _ => return Err(EnvError::Syntax { path, line }),
            };
            if !valid_name(key) {
                return Err(EnvError::BadName { path, line });
            }
            if reserved_key(key) {
                return Err(EnvError::ReservedKey {
                    path,
                    line,
                    key: key.to_string(),
                });
            }
            Ok((key.to_string(), value.to_string()))
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

    /// The error `load_env` gives for an environment of `text`.
    fn refusal(text: &str) -> EnvError {
        let dir = tempfile::tempdir().unwrap();
        let agent = Keypair::new();
        let hash = place_sealed(dir.path(), text, &agent);
        load_env(dir.path(), &hash, &agent).unwrap_err()
    }

    fn assert_reserved(text: &str, expected_key: &str) {
        let err = refusal(text);
        assert!(
            matches!(&err, EnvError::ReservedKey { key, line: 2, .. } if key == expected_key),
            "{err}"
        );
        assert!(err.to_string().contains(expected_key), "{err}");
        assert!(!err.to_string().contains("s3cret"), "{err}");
    }

    #[test]
    fn keys_that_steer_the_dynamic_loader_are_refused_by_name_without_the_value() {
        assert_reserved("MODE=fast\nLD_PRELOAD=/tmp/s3cret.so\n", "LD_PRELOAD");
        assert_reserved("MODE=fast\nLD_LIBRARY_PATH=/s3cret\n", "LD_LIBRARY_PATH");
        assert_reserved("MODE=fast\nLD_AUDIT=/s3cret.so\n", "LD_AUDIT");
        assert_reserved("MODE=fast\nLD_BIND_NOW=s3cret\n", "LD_BIND_NOW");
        assert_reserved("MODE=fast\nld_preload=/s3cret.so\n", "ld_preload");
        assert_reserved("MODE=fast\n GLIBC_TUNABLES = s3cret\n", "GLIBC_TUNABLES");
        assert_reserved("MODE=fast\nGCONV_PATH=/s3cret\n", "GCONV_PATH");
    }

    #[test]
    fn keys_that_steer_the_nvidia_container_toolkit_are_refused() {
        assert_reserved(
            "MODE=fast\nNVIDIA_VISIBLE_DEVICES=all\n",
            "NVIDIA_VISIBLE_DEVICES",
        );
        assert_reserved(
            "MODE=fast\nNVIDIA_DRIVER_CAPABILITIES=all\n",
            "NVIDIA_DRIVER_CAPABILITIES",
        );
        assert_reserved(
            "MODE=fast\nNVIDIA_REQUIRE_CUDA=s3cret\n",
            "NVIDIA_REQUIRE_CUDA",
        );
    }

    #[test]
    fn keys_that_steer_nvidia_mps_are_refused() {
        assert_reserved(
            "MODE=fast\nCUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=80G\n",
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
        );
        assert_reserved(
            "MODE=fast\nCUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100\n",
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
        );
        assert_reserved(
            "MODE=fast\ncuda_mps_pipe_directory=/s3cret\n",
            "cuda_mps_pipe_directory",
        );
    }

    #[test]
    fn keys_that_are_not_variable_names_are_refused_without_repeating_them() {
        for key in ["s3cret key", "1ST", "A-B", "A.B", "caf\u{e9}", "A\tB"] {
            let err = refusal(&format!("MODE=fast\n{key}=v\n"));
            assert!(
                matches!(err, EnvError::BadName { line: 2, .. }),
                "{key:?}: {err}"
            );
            assert!(!err.to_string().contains(key), "{err}");
        }
    }

    #[test]
    fn ordinary_names_and_cuda_visible_devices_are_the_clients() {
        for key in [
            "CUDA_VISIBLE_DEVICES",
            "_X",
            "a1",
            "HF_TOKEN",
            "XLD_PRELOAD",
            "MY_NVIDIA_KEY",
            "CUDA_MODULE_LOADING",
        ] {
            assert!(valid_name(key) && !reserved_key(key), "{key}");
        }
        let dir = tempfile::tempdir().unwrap();
        let agent = Keypair::new();
        let hash = place_sealed(dir.path(), "CUDA_VISIBLE_DEVICES=1\n", &agent);
        assert_eq!(
            load_env(dir.path(), &hash, &agent).unwrap(),
            vec![("CUDA_VISIBLE_DEVICES".to_string(), "1".to_string())]
        );
    }
}
