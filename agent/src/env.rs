//! A lease's environment. On chain there is only the hash of the client's encrypted environment;
//! the plaintext reaches the host off chain. Until that delivery exists, the operator places it
//! in `<data_dir>/env/<hex of the env hash>.env`, one `KEY=VALUE` a line (`#` starts a comment).
//! Values are secrets: no error or log line here carries one.

use std::path::{Path, PathBuf};

use crate::runtime::hex;

#[derive(Debug, thiserror::Error)]
pub enum EnvError {
    #[error("the environment file {path} cannot be read: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} line {line}: expected KEY=VALUE with a non-empty KEY")]
    Syntax { path: PathBuf, line: usize },
}

/// Where the environment with hash `env_hash` is expected.
pub fn env_path(data_dir: &Path, env_hash: &[u8; 32]) -> PathBuf {
    data_dir.join("env").join(format!("{}.env", hex(env_hash)))
}

/// The variables of the environment with hash `env_hash`; none for the all-zero hash (a lease
/// without an environment).
pub fn load_env(data_dir: &Path, env_hash: &[u8; 32]) -> Result<Vec<(String, String)>, EnvError> {
    if *env_hash == [0; 32] {
        return Ok(Vec::new());
    }
    let path = env_path(data_dir, env_hash);
    let text = std::fs::read_to_string(&path).map_err(|source| EnvError::Read {
        path: path.clone(),
        source,
    })?;
    parse_env(&text).map_err(|line| EnvError::Syntax { path, line })
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
    fn env_files_are_found_by_hash_and_errors_hide_values() {
        let dir = tempfile::tempdir().unwrap();
        let hash = [0xcd; 32];
        assert!(load_env(dir.path(), &[0; 32]).unwrap().is_empty());
        let err = load_env(dir.path(), &hash).unwrap_err();
        assert!(err.to_string().contains(&"cd".repeat(32)), "{err}");
        std::fs::create_dir_all(dir.path().join("env")).unwrap();
        let path = env_path(dir.path(), &hash);
        std::fs::write(&path, "# comment\nTOKEN=s3cret=x\n\nMODE = fast\n").unwrap();
        assert_eq!(
            load_env(dir.path(), &hash).unwrap(),
            vec![
                ("TOKEN".to_string(), "s3cret=x".to_string()),
                ("MODE".to_string(), " fast".to_string())
            ]
        );
        std::fs::write(&path, "TOKEN=s3cret\nnot a pair s3cret\n").unwrap();
        let err = load_env(dir.path(), &hash).unwrap_err();
        assert!(matches!(err, EnvError::Syntax { line: 2, .. }));
        assert!(!err.to_string().contains("s3cret"));
    }
}
