//! What the API serves of a lease whose container is gone, from what the agent retains of it
//! (`crate::retention`) until its retention ends: its saved logs and its scratch folder.
//!
//! No process of the lease runs any more, so nothing changes the folder while it is read; a
//! path is still resolved on the host and must stay inside the folder, and links inside it are
//! archived as links, never followed.

use std::path::{Path, PathBuf};

use hyper::body::Bytes;
use tokio_util::io::ReaderStream;

use super::routes::{streamed, Body, Refusal};
use crate::chain::Key;
use crate::runtime::SCRATCH_DIR;

/// The lease's saved logs, the last `tail` lines of them when asked.
pub(super) async fn logs(
    data_dir: &Path,
    lease: &Key,
    tail: Option<u64>,
) -> Result<hyper::Response<Body>, Refusal> {
    let path = crate::reconcile::logs_path(data_dir, lease);
    let text = tokio::fs::read(&path)
        .await
        .map_err(|_| Refusal::NoSuchPath("saved log".into()))?;
    let start = match tail {
        None => 0,
        Some(n) => tail_start(&text, n),
    };
    let body = Bytes::from(text).slice(start..);
    Ok(streamed(
        "application/octet-stream",
        futures_util::stream::iter([Ok::<_, std::io::Error>(body)]),
    ))
}

/// Where the last `n` lines of `text` start.
fn tail_start(text: &[u8], n: u64) -> usize {
    let body = text.strip_suffix(b"\n").unwrap_or(text);
    let mut seen = 0;
    for (i, &b) in body.iter().enumerate().rev() {
        if b == b'\n' {
            seen += 1;
            if seen == n {
                return i + 1;
            }
        }
    }
    if n == 0 {
        text.len()
    } else {
        0
    }
}

/// The host path of `path` (a path under [`SCRATCH_DIR`]) in the retained folder `scratch`,
/// refused when it resolves outside it.
fn resolve(scratch: &Path, path: &str) -> Result<PathBuf, Refusal> {
    let missing = || Refusal::NoSuchPath(path.to_string());
    let rest = path.strip_prefix(SCRATCH_DIR).unwrap_or(path);
    let root = std::fs::canonicalize(scratch).map_err(|_| missing())?;
    let full =
        std::fs::canonicalize(root.join(rest.trim_start_matches('/'))).map_err(|_| missing())?;
    if !full.starts_with(&root) {
        return Err(missing());
    }
    Ok(full)
}

/// A tar archive of `path` in the retained folder `scratch`, named as the engine names it
/// (the last component of the path), streamed as it is written.
pub(super) fn files(scratch: &Path, path: &str) -> Result<hyper::Response<Body>, Refusal> {
    let full = resolve(scratch, path)?;
    let name = Path::new(path)
        .file_name()
        .map_or_else(|| PathBuf::from("workspace"), PathBuf::from);
    let (reader, writer) = std::io::pipe().map_err(|e| Refusal::Io(e.to_string()))?;
    tokio::task::spawn_blocking(move || {
        let mut tar = tar::Builder::new(writer);
        tar.follow_symlinks(false);
        let written = if full.is_dir() {
            tar.append_dir_all(&name, &full)
        } else {
            tar.append_path_with_name(&full, &name)
        };
        if let Err(e) = written.and_then(|()| tar.finish()) {
            tracing::warn!(error = %e, "api: archiving a retained scratch folder failed");
        }
    });
    let reader = tokio::net::unix::pipe::Receiver::from_owned_fd(reader.into())
        .map_err(|e| Refusal::Io(e.to_string()))?;
    Ok(streamed("application/x-tar", ReaderStream::new(reader)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_starts_after_the_nth_last_line_break() {
        let text = b"a\nb\nc\n";
        assert_eq!(&text[tail_start(text, 1)..], b"c\n");
        assert_eq!(&text[tail_start(text, 2)..], b"b\nc\n");
        assert_eq!(&text[tail_start(text, 9)..], text);
        assert_eq!(&text[tail_start(text, 0)..], b"");
        assert_eq!(&b"x"[tail_start(b"x", 1)..], b"x");
    }

    #[test]
    fn paths_resolving_outside_the_folder_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let scratch = dir.path().join("scratch");
        std::fs::create_dir_all(scratch.join("out")).unwrap();
        std::fs::write(scratch.join("out/r.txt"), "r").unwrap();
        std::os::unix::fs::symlink("/etc", scratch.join("escape")).unwrap();
        assert_eq!(
            resolve(&scratch, "/workspace/out/r.txt").unwrap(),
            std::fs::canonicalize(scratch.join("out/r.txt")).unwrap()
        );
        assert!(resolve(&scratch, "/workspace").is_ok());
        assert!(resolve(&scratch, "/workspace/escape/passwd").is_err());
        assert!(resolve(&scratch, "/workspace/missing").is_err());
    }
}
