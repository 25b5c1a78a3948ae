//! A lease's environment. The bid stores the hash of the client's environment
//! (`gpu_market_sdk::envelope::Environment`); the client stores a copy sealed to this machine's
//! agent key on chain (`seal_env`), which the agent reads ([`Chain::sealed_env`]), opens with
//! its own keypair, checks against the bid's hash, and reads one `KEY=VALUE` a line (`#` starts
//! a comment). Nobody copies a file. Values are secrets: no error or log line here carries one.
//!
//! Keys must be environment variable names, and some are the host's: those that steer the
//! dynamic loader, the NVIDIA container toolkit or NVIDIA MPS ([`reserved_key`]). An environment
//! with such a key is refused whole, naming the key.

use gpu_market_sdk::envelope::{self, EnvelopeError};
use solana_keypair::Keypair;

use crate::chain::{Chain, Key};
use crate::gpu::isolation::MPS_ENV_PREFIX;

#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    /// Not for this key, altered, or not the environment the bid names.
    #[error("the sealed environment of bid {bid} cannot be used: {source}")]
    Open { bid: Key, source: EnvelopeError },
    #[error("the environment of bid {bid}, line {line}: expected KEY=VALUE with a non-empty KEY")]
    Syntax { bid: Key, line: usize },
    /// The key is not a name: not letters, digits and `_`, or starting with a digit. (A stray
    /// line may be a secret: the key is not repeated.)
    #[error("the environment of bid {bid}, line {line}: the key is not an environment variable name (letters, digits and _, not starting with a digit)")]
    BadName { bid: Key, line: usize },
    #[error("the environment of bid {bid}, line {line}: {key} is reserved to the host: it steers the dynamic loader, the NVIDIA container toolkit or NVIDIA MPS")]
    ReservedKey { bid: Key, line: usize, key: String },
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

/// Whether an image's own `ENV` may not set `key`: what makes the dynamic loader load code
/// (`LD_PRELOAD`, `LD_AUDIT`, and [`RESERVED_KEYS`]), in the container and in the NVIDIA
/// container toolkit's hooks, which run on the host with the container's environment
/// (CVE-2025-23266 took the host with an image's `ENV LD_PRELOAD`), and NVIDIA MPS's keys.
/// Other `LD_` and `NVIDIA_` keys stay the image's: CUDA images set `LD_LIBRARY_PATH` and
/// `NVIDIA_REQUIRE_CUDA`, and the engine's own `NVIDIA_VISIBLE_DEVICES` and
/// `NVIDIA_DRIVER_CAPABILITIES`, set after the image's, decide (`crate::docker`).
pub fn forbidden_in_image(key: &str) -> bool {
    let upper = key.to_ascii_uppercase();
    ["LD_PRELOAD", "LD_AUDIT"].contains(&&*upper)
        || RESERVED_KEYS.contains(&&*upper)
        || upper.starts_with(MPS_ENV_PREFIX)
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

/// The variables of `bid`'s environment (hash `env_hash`) as the chain holds it sealed to
/// `key`: none for the all-zero hash (a bid without an environment); `Ok(None)` while its copy
/// is not on chain (the client may still be storing it) or the chain did not answer.
pub async fn fetch_env(
    chain: &dyn Chain,
    bid: Key,
    env_hash: &[u8; 32],
    key: &Keypair,
) -> Result<Option<Vec<(String, String)>>, EnvError> {
    if *env_hash == [0; 32] {
        return Ok(Some(Vec::new()));
    }
    match chain.sealed_env(bid).await {
        Ok(Some(sealed)) => open_env(&sealed, env_hash, key, bid).map(Some),
        Ok(None) => Ok(None),
        Err(e) => {
            tracing::debug!(%bid, error = %e, "the sealed environment cannot be read yet");
            Ok(None)
        }
    }
}

/// The variables of a copy sealed to `key`, checked against the bid's `env_hash`.
pub fn open_env(
    sealed: &[u8],
    env_hash: &[u8; 32],
    key: &Keypair,
    bid: Key,
) -> Result<Vec<(String, String)>, EnvError> {
    let plain = envelope::open_env(sealed, key, env_hash)
        .map_err(|source| EnvError::Open { bid, source })?;
    parse_env(&String::from_utf8_lossy(&plain), bid)
}

/// The `KEY=VALUE` lines of `text` (the environment of `bid`); the first bad line refused.
fn parse_env(text: &str, bid: Key) -> Result<Vec<(String, String)>, EnvError> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .map(|(i, l)| {
            let line = i + 1;
            let (key, value) = match l.split_once('=') {
                Some((k, v)) if !k.trim().is_empty() => (k.trim(), v),
                _ => return Err(EnvError::Syntax { bid, line }),
            };
            if !valid_name(key) {
                return Err(EnvError::BadName { bid, line });
            }
            if reserved_key(key) {
                return Err(EnvError::ReservedKey {
                    bid,
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

    use gpu_market_sdk::envelope::Environment;
    use solana_signer::Signer;

    /// `text` sealed to `agent` as a client stores it: the bid's hash and the copy.
    fn sealed(text: &str, agent: &Keypair) -> ([u8; 32], Vec<u8>) {
        let env = Environment::new(text.as_bytes(), &Keypair::new()).unwrap();
        (env.hash(), env.seal_to(&agent.pubkey()).unwrap())
    }

    #[test]
    fn a_sealed_env_opens_with_the_agent_key_against_the_bids_hash_and_errors_hide_values() {
        let agent = Keypair::new();
        let bid = Key([5; 32]);
        let (hash, copy) = sealed("# comment\nTOKEN=s3cret=x\n\nMODE = fast\n", &agent);
        assert_eq!(
            open_env(&copy, &hash, &agent, bid).unwrap(),
            vec![
                ("TOKEN".to_string(), "s3cret=x".to_string()),
                ("MODE".to_string(), " fast".to_string())
            ]
        );
        // Another key cannot open it, and the error says so without the value.
        let err = open_env(&copy, &hash, &Keypair::new(), bid).unwrap_err();
        assert!(
            matches!(
                err,
                EnvError::Open {
                    source: EnvelopeError::CannotOpen,
                    ..
                }
            ),
            "{err}"
        );
        assert!(!err.to_string().contains("s3cret"));
        // A copy of another environment is refused under the bid's hash.
        let (_, other) = sealed("TOKEN=other\n", &agent);
        let err = open_env(&other, &hash, &agent, bid).unwrap_err();
        assert!(
            matches!(
                err,
                EnvError::Open {
                    source: EnvelopeError::NotTheBids,
                    ..
                }
            ),
            "{err}"
        );

        let (bad, copy) = sealed("TOKEN=s3cret\nnot a pair s3cret\n", &agent);
        let err = open_env(&copy, &bad, &agent, bid).unwrap_err();
        assert!(matches!(err, EnvError::Syntax { line: 2, .. }));
        assert!(!err.to_string().contains("s3cret"));
    }

    /// The error `open_env` gives for an environment of `text`.
    fn refusal(text: &str) -> EnvError {
        let agent = Keypair::new();
        let (hash, copy) = sealed(text, &agent);
        open_env(&copy, &hash, &agent, Key([5; 32])).unwrap_err()
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
        let agent = Keypair::new();
        let (hash, copy) = sealed("CUDA_VISIBLE_DEVICES=1\n", &agent);
        assert_eq!(
            open_env(&copy, &hash, &agent, Key([5; 32])).unwrap(),
            vec![("CUDA_VISIBLE_DEVICES".to_string(), "1".to_string())]
        );
    }
}
