//! What the API serves from the host's copy of a lease: its saved logs once its container is
//! gone (`crate::retention`), and its scratch folder, while the container runs and after.
//!
//! The scratch folder is the tenant's: its container, root inside, may change it while it is
//! read, swapping a folder for a link to a host path between any two steps of the agent's.
//! So nothing in it is ever reached by a path the host resolves: the folder is opened once, and
//! everything in it by descriptor beneath it without following a link (`openat2` with
//! `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`); links are archived as links; only regular files are
//! read, opened non-blocking, so a FIFO or a device in their place is left out, never waited on.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{openat2, statat, AtFlags, FileType, Mode, OFlags, ResolveFlags};
use tokio_util::io::ReaderStream;

use super::routes::{streamed, Body, Refusal};
use crate::chain::Key;
use crate::runtime::SCRATCH_DIR;

/// The lease's saved logs, the last `tail` lines of them when asked: streamed from the file,
/// never read whole (a saved log may be as large as the host lets a container log).
pub(super) async fn logs(
    data_dir: &Path,
    lease: &Key,
    tail: Option<u64>,
) -> Result<hyper::Response<Body>, Refusal> {
    let path = crate::reconcile::logs_path(data_dir, lease);
    let opened = tokio::task::spawn_blocking(move || -> std::io::Result<Option<File>> {
        let Ok(mut file) = File::open(&path) else {
            return Ok(None);
        };
        let start = match tail {
            None => 0,
            Some(n) => tail_start(&mut file, n)?,
        };
        file.seek(SeekFrom::Start(start))?;
        Ok(Some(file))
    })
    .await
    .map_err(|e| Refusal::Io(e.to_string()))?
    .map_err(|e| Refusal::Io(e.to_string()))?;
    let file = opened.ok_or_else(|| Refusal::NoSuchPath("saved log".into()))?;
    Ok(streamed(
        "application/octet-stream",
        ReaderStream::new(tokio::fs::File::from_std(file)),
    ))
}

/// How much of a saved log is read at a time while looking for where its tail starts.
const TAIL_CHUNK: usize = 64 << 10;

/// Where the last `n` lines of `text` start, read backwards from its end a chunk at a time.
fn tail_start(text: &mut (impl Read + Seek), n: u64) -> std::io::Result<u64> {
    let len = text.seek(SeekFrom::End(0))?;
    if n == 0 {
        return Ok(len);
    }
    let mut chunk = vec![0u8; TAIL_CHUNK];
    let mut end = len;
    let mut seen = 0;
    let mut last = true;
    while end > 0 {
        let size = usize::try_from(end).map_or(TAIL_CHUNK, |e| e.min(TAIL_CHUNK));
        let from = end - size as u64;
        text.seek(SeekFrom::Start(from))?;
        text.read_exact(&mut chunk[..size])?;
        let mut bytes = &chunk[..size];
        // The text's own last line break ends its last line; it starts none.
        if std::mem::take(&mut last) {
            bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
        }
        for (i, &b) in bytes.iter().enumerate().rev() {
            if b == b'\n' {
                seen += 1;
                if seen == n {
                    return Ok(from + i as u64 + 1);
                }
            }
        }
        end = from;
    }
    Ok(0)
}

/// Opens `path` (relative) beneath the folder `dir`, following no link on the way or at its
/// end, without blocking on a FIFO.
fn open_beneath(dir: BorrowedFd<'_>, path: &Path) -> std::io::Result<OwnedFd> {
    let path = if path.as_os_str().is_empty() {
        Path::new(".")
    } else {
        path
    };
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::NOCTTY;
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    Ok(openat2(
        dir,
        path,
        flags | OFlags::CLOEXEC,
        Mode::empty(),
        resolve,
    )?)
}

/// A tar header for an entry of `kind` with the mode and time of `stat`.
fn header(kind: tar::EntryType, stat: &rustix::fs::Stat, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(stat.st_mode & 0o7777);
    h.set_mtime(stat.st_mtime.max(0) as u64);
    h.set_size(size);
    h
}

/// Writes the tar archive of `rel` (relative to the folder `root`) to `out`, named `name`: a
/// folder with everything beneath it, a regular file with its bytes. Every step opens by
/// descriptor beneath `root` without following links; an entry that changed under the walk
/// (gone, or a link now) is left out; only `root` stays open, so a deep tree holds no more
/// descriptors than a flat one.
fn write_archive(
    root: &OwnedFd,
    rel: PathBuf,
    name: PathBuf,
    out: impl Write,
) -> std::io::Result<()> {
    let mut tar = tar::Builder::new(out);
    let mut pending = vec![(rel, name)];
    let mut first = true;
    while let Some((rel, name)) = pending.pop() {
        let fd = match open_beneath(root.as_fd(), &rel) {
            Ok(fd) => fd,
            // The path asked for itself: refused before the answer (`files`); anything under it
            // that went away meanwhile is simply left out.
            Err(e) if first => return Err(e),
            Err(_) => continue,
        };
        first = false;
        let stat = rustix::fs::fstat(&fd)?;
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::RegularFile => {
                let size = stat.st_size.max(0) as u64;
                // Exactly `size` bytes, whatever the tenant does to the file meanwhile.
                let bytes = File::from(fd)
                    .take(size)
                    .chain(std::io::repeat(0))
                    .take(size);
                tar.append_data(
                    &mut header(tar::EntryType::Regular, &stat, size),
                    &name,
                    bytes,
                )?;
            }
            FileType::Directory => {
                tar.append_data(
                    &mut header(tar::EntryType::Directory, &stat, 0),
                    &name,
                    std::io::empty(),
                )?;
                let mut children = Vec::new();
                for entry in rustix::fs::Dir::read_from(&fd)? {
                    let entry = entry?;
                    let child = entry.file_name().to_bytes();
                    if child != b"." && child != b".." {
                        children.push(PathBuf::from(std::ffi::OsStr::from_bytes(child)));
                    }
                }
                children.sort();
                for child in children.into_iter().rev() {
                    let Ok(st) = statat(&fd, &child, AtFlags::SYMLINK_NOFOLLOW) else {
                        continue;
                    };
                    if FileType::from_raw_mode(st.st_mode) == FileType::Symlink {
                        let Ok(target) = rustix::fs::readlinkat(&fd, &child, Vec::new()) else {
                            continue;
                        };
                        let target = PathBuf::from(std::ffi::OsStr::from_bytes(target.to_bytes()));
                        let mut h = header(tar::EntryType::Symlink, &st, 0);
                        tar.append_link(&mut h, name.join(&child), target)?;
                    } else {
                        pending.push((rel.join(&child), name.join(&child)));
                    }
                }
            }
            // A FIFO, a socket, a device: never read.
            _ => {}
        }
    }
    tar.finish()
}

/// A tar archive of `path` in the scratch folder `scratch` (the host's copy of the lease's
/// [`SCRATCH_DIR`]), named as the engine names it (the last component of the path), streamed
/// as it is written; refused when `path` is not there, or is a link (or passes through one).
pub(super) fn files(scratch: &Path, path: &str) -> Result<hyper::Response<Body>, Refusal> {
    let missing = || Refusal::NoSuchPath(path.to_string());
    let rest = path.strip_prefix(SCRATCH_DIR).unwrap_or(path);
    let rel = PathBuf::from(rest.trim_start_matches('/'));
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let root: OwnedFd = rustix::fs::open(scratch, flags, Mode::empty()).map_err(|_| missing())?;
    // Checked here so that a missing path is refused before the answer starts; the walk opens
    // it again by descriptor, and leaves out whatever changed in between.
    open_beneath(root.as_fd(), &rel).map_err(|_| missing())?;
    let name = Path::new(path)
        .file_name()
        .map_or_else(|| PathBuf::from("workspace"), PathBuf::from);
    let (reader, writer) = std::io::pipe().map_err(|e| Refusal::Io(e.to_string()))?;
    tokio::task::spawn_blocking(move || {
        if let Err(e) = write_archive(&root, rel, name, writer) {
            tracing::warn!(error = %e, "api: archiving a lease's scratch folder failed");
        }
    });
    let reader = tokio::net::unix::pipe::Receiver::from_owned_fd(reader.into())
        .map_err(|e| Refusal::Io(e.to_string()))?;
    Ok(streamed("application/x-tar", ReaderStream::new(reader)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tail(text: &[u8], n: u64) -> &[u8] {
        let start = tail_start(&mut std::io::Cursor::new(text), n).unwrap();
        &text[start as usize..]
    }

    #[test]
    fn the_tail_starts_after_the_nth_last_line_break() {
        let text = b"a\nb\nc\n";
        assert_eq!(tail(text, 1), b"c\n");
        assert_eq!(tail(text, 2), b"b\nc\n");
        assert_eq!(tail(text, 9), text);
        assert_eq!(tail(text, 0), b"");
        assert_eq!(tail(b"x", 1), b"x");
        assert_eq!(tail(b"", 3), b"");
    }

    #[test]
    fn a_tail_is_found_across_chunks_of_a_log_larger_than_one() {
        // Lines of every length around the chunk's, so that breaks fall on its edges.
        let lines: Vec<String> = (0..400)
            .map(|i| "x".repeat((i * 997) % (TAIL_CHUNK + 3)))
            .collect();
        let text = lines.iter().map(|l| format!("{l}\n")).collect::<String>();
        for n in [1u64, 2, 7, 150, 399, 400, 401] {
            let kept = lines.len().saturating_sub(n as usize);
            let want: String = lines[kept..].iter().map(|l| format!("{l}\n")).collect();
            assert_eq!(tail(text.as_bytes(), n), want.as_bytes(), "{n} lines");
        }
        // No final line break: the last line counts all the same.
        let text = text.trim_end_matches('\n');
        assert_eq!(tail(text.as_bytes(), 1), lines[399].as_bytes());
    }

    /// The archive `files` streams for `path`, collected (at most 30 s).
    async fn archive(scratch: &Path, path: &str) -> Result<Vec<u8>, Refusal> {
        use http_body_util::BodyExt;
        let body = files(scratch, path)?.into_body();
        let collected = tokio::time::timeout(std::time::Duration::from_secs(30), body.collect())
            .await
            .expect("the archive was written within 30 s");
        Ok(collected.map(|c| c.to_bytes().to_vec()).unwrap_or_default())
    }

    /// A tenant whose container still runs swaps a folder of its scratch volume for a link to a
    /// host folder, as fast as it can, while its client copies from it: no byte of the host
    /// folder ever reaches the archive.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_folder_swapped_for_a_link_while_it_is_copied_never_leads_outside() {
        let dir = tempfile::tempdir().unwrap();
        let (scratch, host) = (dir.path().join("scratch"), dir.path().join("host"));
        std::fs::create_dir_all(scratch.join("d")).unwrap();
        std::fs::create_dir_all(&host).unwrap();
        std::fs::write(scratch.join("d/hostname"), "inside").unwrap();
        std::fs::write(host.join("hostname"), "HOST-CANARY").unwrap();
        std::os::unix::fs::symlink(&host, scratch.join("x")).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let swaps = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        // `d` is always there, a folder one instant and a link to the host's folder the next
        // (one atomic exchange of the two names, as `mv` in a loop does it in two steps). In
        // bursts of 64 exchanges as fast as it can, each followed by a pause of 200 µs: with no
        // pause, on a loaded machine every copy met an exchange and was refused, and a run in
        // which nothing was served proves nothing about leaks (the suite saw that once).
        let swapper = {
            let (scratch, stop, swaps) = (scratch.clone(), stop.clone(), swaps.clone());
            std::thread::spawn(move || {
                let (d, x) = (scratch.join("d"), scratch.join("x"));
                let cwd = rustix::fs::CWD;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    rustix::fs::renameat_with(cwd, &d, cwd, &x, rustix::fs::RenameFlags::EXCHANGE)
                        .unwrap();
                    if swaps.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 64 == 63 {
                        std::thread::sleep(std::time::Duration::from_micros(200));
                    }
                }
            })
        };
        // At least 2,000 copies, and on until the two names have traded places 2,000 times: a
        // busy machine that seldom schedules the swapper makes the test longer, never weaker.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        let (mut copies, mut served, mut leaked) = (0, 0, 0);
        while copies < 2_000 || swaps.load(std::sync::atomic::Ordering::Relaxed) < 2_000 {
            assert!(
                std::time::Instant::now() < deadline,
                "the folder and the link traded places only {} times in 120 s",
                swaps.load(std::sync::atomic::Ordering::Relaxed)
            );
            let path = if copies % 2 == 0 {
                "/workspace/d/hostname"
            } else {
                "/workspace/d"
            };
            if let Ok(bytes) = archive(&scratch, path).await {
                served += usize::from(!bytes.is_empty());
                leaked += usize::from(bytes.windows(11).any(|w| w == b"HOST-CANARY"));
            }
            copies += 1;
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        swapper.join().unwrap();
        assert!(
            served > 0,
            "no copy was served at all, of {copies} with {} exchanges",
            swaps.load(std::sync::atomic::Ordering::Relaxed)
        );
        assert_eq!(
            leaked, 0,
            "{leaked} of {served} copies carried the host's file"
        );
    }

    /// A FIFO (or any file but a regular one) in the scratch folder is left out of an archive,
    /// never opened for reading: nothing waits on it.
    #[tokio::test]
    async fn a_fifo_is_left_out_and_never_waited_on() {
        let dir = tempfile::tempdir().unwrap();
        let scratch = dir.path().join("scratch");
        std::fs::create_dir_all(&scratch).unwrap();
        std::fs::write(scratch.join("r.txt"), "result").unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            scratch.join("pipe"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        for path in ["/workspace", "/workspace/pipe"] {
            let bytes = archive(&scratch, path).await.unwrap_or_default();
            let entries: Vec<String> = tar::Archive::new(bytes.as_slice())
                .entries()
                .unwrap()
                .map(|e| e.unwrap().path().unwrap().display().to_string())
                .collect();
            assert!(
                !entries.iter().any(|e| e.ends_with("pipe")),
                "{path}: {entries:?}"
            );
        }
    }

    #[tokio::test]
    async fn paths_through_links_or_outside_the_folder_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let scratch = dir.path().join("scratch");
        std::fs::create_dir_all(scratch.join("out")).unwrap();
        std::fs::write(scratch.join("out/r.txt"), "r").unwrap();
        std::os::unix::fs::symlink("/etc", scratch.join("escape")).unwrap();
        std::os::unix::fs::symlink("out/r.txt", scratch.join("alias")).unwrap();
        let whole = archive(&scratch, "/workspace").await.unwrap();
        let mut entries: Vec<(String, tar::EntryType)> = tar::Archive::new(whole.as_slice())
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.path().unwrap().display().to_string(),
                    e.header().entry_type(),
                )
            })
            .collect();
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            entries,
            [
                ("workspace".to_string(), tar::EntryType::Directory),
                ("workspace/alias".to_string(), tar::EntryType::Symlink),
                ("workspace/escape".to_string(), tar::EntryType::Symlink),
                ("workspace/out".to_string(), tar::EntryType::Directory),
                ("workspace/out/r.txt".to_string(), tar::EntryType::Regular),
            ],
            "links are archived as links"
        );
        let one = archive(&scratch, "/workspace/out/r.txt").await.unwrap();
        let mut file = tar::Archive::new(one.as_slice());
        let mut entry = file.entries().unwrap().next().unwrap().unwrap();
        let mut text = String::new();
        entry.read_to_string(&mut text).unwrap();
        assert_eq!(
            (entry.path().unwrap().display().to_string(), text),
            ("r.txt".into(), "r".into())
        );
        for path in [
            "/workspace/escape/passwd",
            "/workspace/escape",
            "/workspace/alias",
            "/workspace/missing",
        ] {
            assert!(
                matches!(archive(&scratch, path).await, Err(Refusal::NoSuchPath(_))),
                "{path}"
            );
        }
    }
}
