//! `gpu-market lease logs|exec|cp`: a lease's container through its host's agent (its API,
//! `gpu_market_sdk::api`), over TLS pinned to the machine account's agent key and signed by
//! the lease's client (`-k`). The lease account names the machine (`--machine` does for a lease
//! that has settled, whose files the agent keeps a while), the machine account its agent key
//! and the API's address ([`api_address`], or `--api`).
//!
//! `logs` and `exec` write the container's and the command's bytes as they come, whatever
//! `--output` says; `cp` prints what it wrote as a record list.

use std::future::Future;
use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::pin::Pin;

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use futures_util::{Stream, TryStreamExt};
use gpu_market::state::{Lease, Machine};
use gpu_market_sdk::api::client::ApiClient;
use gpu_market_sdk::api::{LeaseStatus, LogsQuery, TermSize};
use http_body_util::{BodyDataStream, BodyExt};
use serde_json::Value;
use sha2::{Digest, Sha256};
use solana_pubkey::Pubkey;
use solana_signer::Signer;
use tokio::io::AsyncWriteExt;
use tokio_util::io::{StreamReader, SyncIoBridge};

use super::terminal;
use crate::config::{Config, Wallet};
use crate::output::{print_list, text, Fields};

/// Where the lease's agent is, when the chain does not say or should not be asked.
#[derive(Args, Debug)]
pub struct Remote {
    /// The agent API's address instead of the one the machine account publishes.
    #[arg(long, value_name = "HOST:PORT", hide = true)]
    api: Option<String>,
    /// The lease's machine, for a lease that has settled (its account closed): its agent keeps
    /// the container's logs and scratch files for a while.
    #[arg(long, value_name = "MACHINE")]
    machine: Option<Pubkey>,
}

/// Why `lease cp` failed.
#[derive(Debug, thiserror::Error)]
pub enum CpError {
    #[error("{0:?} is not LEASE:/workspace/PATH")]
    BadSource(String),
    #[error(
        "the archive's entry {0} would land outside the destination folder: the copy stopped there"
    )]
    Escapes(PathBuf),
    #[error("{path}: its sha256 is {got}, not the expected {expected}; the file was deleted")]
    Mismatch {
        path: PathBuf,
        expected: String,
        got: String,
    },
    #[error("--expect-sha256 checks a single file, and {0} files were copied")]
    NotOneFile(usize),
    #[error("unpacking the archive: {0}")]
    Archive(#[from] std::io::Error),
}

/// The address (`HOST:PORT`) of the API that `machine` publishes; `None` while the machine
/// account publishes none.
pub fn api_address(machine: &Machine) -> Option<String> {
    let n = &machine.network;
    if n.host.is_empty() || n.api_port == 0 {
        return None;
    }
    Some(host_port(&n.host, n.api_port))
}

/// `host:port`, an IPv6 address in brackets.
pub fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Where the client of `lease` (running on `machine`) connects to its published ports, as the
/// machine's agent reports them: `8080/tcp -> host:30001`. Asked with the CLI's keypair, which
/// must be the lease's client (the agent tells no one else).
pub fn connect_addresses(
    config: &Config,
    lease: &Pubkey,
    (key, machine): (Pubkey, &Machine),
) -> Result<Vec<String>> {
    let signer = config.signer()?;
    let addr = api_address(machine)
        .ok_or_else(|| anyhow!("the machine publishes no address for its agent's API"))?;
    let api = ApiClient::new(addr, key, &machine.agent);
    let status = block_on(async { Ok(api.status(&signer, lease).await?) })?;
    Ok(connect_lines(&status, machine))
}

/// Where a client connects to each port `status` (its agent's answer) says is published on
/// `machine`: `8080/tcp -> host:30001`.
pub fn connect_lines(status: &LeaseStatus, machine: &Machine) -> Vec<String> {
    status
        .ports
        .iter()
        .map(|p| {
            format!(
                "{}/{} -> {}",
                p.container_port,
                p.protocol,
                host_port(&machine.network.host, p.host_port)
            )
        })
        .collect()
}

/// `lease logs`: writes the container's output as the agent streams it.
pub fn logs(config: &Config, lease: &Pubkey, query: LogsQuery, remote: &Remote) -> Result<()> {
    let (api, signer) = connect(config, lease, remote)?;
    block_on(async {
        let mut body = api.logs(&signer, lease, query).await?;
        let mut stdout = tokio::io::stdout();
        while let Some(frame) = body.frame().await {
            let frame = frame.context("the agent's log stream broke off")?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            let written = async {
                stdout.write_all(&data).await?;
                stdout.flush().await
            };
            match written.await {
                // A reader that went away (`| head`) ends the command quietly.
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
                written => written.context("cannot write to standard output")?,
            }
        }
        Ok(())
    })
}

/// `lease exec`: runs `cmd` in the lease's container, our standard input piped to it and its
/// output to ours (with `tty`, on our terminal in raw mode), and exits with its exit code
/// (clamped to 0..=255).
pub fn exec(
    config: &Config,
    lease: &Pubkey,
    cmd: Vec<String>,
    tty: bool,
    remote: &Remote,
) -> Result<()> {
    let (api, signer) = connect(config, lease, remote)?;
    let raw = tty.then(terminal::RawTerminal::enter).transpose()?;
    let code = block_on(async {
        let size = raw.as_ref().map(|_| terminal::size());
        let session = api.exec(&signer, lease, cmd, size).await?;
        let resizes: Pin<Box<dyn Stream<Item = TermSize> + Send>> = match raw {
            Some(_) => Box::pin(terminal::resizes()?),
            None => Box::pin(futures_util::stream::pending()),
        };
        let stdio = (tokio::io::stdin(), tokio::io::stdout(), tokio::io::stderr());
        Ok(session.run(stdio.0, stdio.1, stdio.2, resizes).await?)
    });
    // The terminal as it was, before anything is printed or the process exits.
    drop(raw);
    // Now, not on return: the thread reading our standard input may still wait for input the
    // command never read.
    std::process::exit(exit_status(code?))
}

/// A command's exit code as a process exit status.
fn exit_status(code: i64) -> i32 {
    code.clamp(0, 255) as i32
}

/// `lease cp LEASE:/workspace/PATH DIR`: unpacks the agent's archive of the path into `dir`,
/// and prints each file written with its sha256; with `expect_sha256`, the one file copied must
/// have it.
pub fn cp(
    config: &Config,
    source: &str,
    dir: &Path,
    expect_sha256: Option<[u8; 32]>,
    remote: &Remote,
) -> Result<()> {
    let (lease, path) = parse_source(source)?;
    let (api, signer) = connect(config, &lease, remote)?;
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create the folder {}", dir.display()))?;
    let copied = block_on(async {
        let body = api.files(&signer, &lease, path).await?;
        let stream = BodyDataStream::new(body).map_err(std::io::Error::other);
        let archive = SyncIoBridge::new(StreamReader::new(stream));
        let dir = dir.to_path_buf();
        Ok(tokio::task::spawn_blocking(move || unpack(archive, &dir)).await??)
    })?;
    if let Some(expected) = expect_sha256 {
        check_single(&copied, &expected)?;
    }
    let rows: Vec<Fields> = copied.iter().map(Copied::fields).collect();
    print_list(config.output, &["path", "bytes", "sha256", "note"], &rows);
    Ok(())
}

/// `LEASE:/workspace/PATH` as the lease and the path.
fn parse_source(source: &str) -> Result<(Pubkey, &str), CpError> {
    let bad = || CpError::BadSource(source.to_string());
    let (lease, path) = source.split_once(':').ok_or_else(bad)?;
    let lease = lease.parse().map_err(|_| bad())?;
    if !path.starts_with('/') {
        return Err(bad());
    }
    Ok((lease, path))
}

/// A hex sha256 (`--expect-sha256`).
pub fn parse_sha256(hex: &str) -> Result<[u8; 32], String> {
    hex::decode(hex)
        .ok()
        .and_then(|bytes| bytes.try_into().ok())
        .ok_or_else(|| format!("{hex:?} is not a sha256 (64 hex digits)"))
}

/// What `cp` did with one entry of the archive.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Copied {
    /// Where it is, under the destination folder.
    path: PathBuf,
    /// A regular file's length and sha256; `None` for an entry skipped.
    file: Option<(u64, [u8; 32])>,
    /// Why it was skipped (not a regular file or a folder).
    skipped: Option<&'static str>,
}

impl Copied {
    fn fields(&self) -> Fields {
        let (bytes, sha256) = match self.file {
            Some((bytes, sha256)) => (Value::from(bytes), text(hex::encode(sha256))),
            None => (Value::Null, Value::Null),
        };
        vec![
            ("path", text(self.path.display())),
            ("bytes", bytes),
            ("sha256", sha256),
            ("note", self.skipped.map_or(Value::Null, text)),
        ]
    }
}

/// Unpacks the tar `archive` into `dir`: its regular files (each hashed) and folders. Links
/// and special files are skipped, and an entry whose path would leave `dir` stops the copy.
fn unpack(archive: impl Read, dir: &Path) -> Result<Vec<Copied>, CpError> {
    let mut archive = tar::Archive::new(archive);
    let mut copied = Vec::new();
    for entry in archive.entries()? {
        let mut entry = entry?;
        let relative = entry.path()?.into_owned();
        if !stays_inside(&relative) {
            return Err(CpError::Escapes(relative));
        }
        let path = dir.join(&relative);
        let kind = entry.header().entry_type();
        if !(kind.is_file() || kind.is_dir()) {
            let skipped = if kind.is_symlink() || kind.is_hard_link() {
                "a link: not copied"
            } else {
                "not a regular file: not copied"
            };
            copied.push(Copied {
                path,
                file: None,
                skipped: Some(skipped),
            });
            continue;
        }
        // `unpack_in` also refuses to write through a link already in `dir` that leads out.
        if !entry.unpack_in(dir)? {
            return Err(CpError::Escapes(relative));
        }
        if kind.is_file() {
            let file = Some(sha256_of(&path)?);
            copied.push(Copied {
                path,
                file,
                skipped: None,
            });
        }
    }
    Ok(copied)
}

/// Whether a relative archive path stays under the folder it is unpacked in.
fn stays_inside(path: &Path) -> bool {
    path.components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

/// The length and sha256 of the file at `path`.
fn sha256_of(path: &Path) -> std::io::Result<(u64, [u8; 32])> {
    let mut hasher = Sha256::new();
    let bytes = std::io::copy(&mut std::fs::File::open(path)?, &mut hasher)?;
    Ok((bytes, hasher.finalize().into()))
}

/// `--expect-sha256`: the one file copied has `expected`, or is deleted.
fn check_single(copied: &[Copied], expected: &[u8; 32]) -> Result<(), CpError> {
    let files: Vec<(&PathBuf, [u8; 32])> = copied
        .iter()
        .filter_map(|c| c.file.map(|(_, sha256)| (&c.path, sha256)))
        .collect();
    let [(path, got)] = files[..] else {
        return Err(CpError::NotOneFile(files.len()));
    };
    if got == *expected {
        return Ok(());
    }
    std::fs::remove_file(path)?;
    Err(CpError::Mismatch {
        path: path.clone(),
        expected: hex::encode(expected),
        got: hex::encode(got),
    })
}

/// The API of `lease`'s machine, pinned to its agent key, and the signer (`-k`), which must be
/// the lease's client. Reads the chain: call it before [`block_on`].
fn connect(config: &Config, lease: &Pubkey, remote: &Remote) -> Result<(ApiClient, Wallet)> {
    let signer = config.signer()?;
    let machine = match (
        config.fetch_if_any::<Lease>(lease, "lease")?,
        remote.machine,
    ) {
        (Some(l), _) if l.client != signer.pubkey() => bail!(
            "lease {lease} is its client {}'s; the keypair is {}",
            l.client,
            signer.pubkey()
        ),
        (Some(l), _) => l.machine,
        (None, Some(machine)) => machine,
        (None, None) => bail!(
            "lease {lease} does not exist on {} (settled?): name its machine with --machine",
            config.url
        ),
    };
    let m: Machine = config.fetch(&machine, "machine")?;
    let addr = remote
        .api
        .clone()
        .or_else(|| api_address(&m))
        .ok_or_else(|| anyhow!("machine {machine} publishes no address for its agent's API"))?;
    Ok((ApiClient::new(addr, machine, &m.agent), signer))
}

/// Runs `f` to its end on a runtime of its own, then leaves the runtime without waiting for
/// its blocking reads: one of our standard input may wait for input that never comes (a
/// terminal, or a pipe the command did not read to its end), and dropping the runtime would
/// wait for it (`lease exec` from a terminal hung after its command ended until Enter).
fn block_on<T>(f: impl Future<Output = Result<T>>) -> Result<T> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let out = runtime.block_on(f);
    runtime.shutdown_background();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tar archive of `entries`: (path, content) for files, content `None` for a symlink to
    /// `/etc`. Paths are written raw, as a hostile server could.
    fn archive(entries: &[(&str, Option<&[u8]>)]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (path, content) in entries {
            let mut header = tar::Header::new_gnu();
            let name = &mut header.as_old_mut().name;
            name[..path.len()].copy_from_slice(path.as_bytes());
            match content {
                Some(content) => {
                    header.set_entry_type(tar::EntryType::Regular);
                    header.set_size(content.len() as u64);
                    header.set_mode(0o644);
                    header.set_cksum();
                    builder.append(&header, *content).unwrap();
                }
                None => {
                    header.set_entry_type(tar::EntryType::Symlink);
                    header.set_link_name("/etc").unwrap();
                    header.set_size(0);
                    header.set_cksum();
                    builder.append(&header, &[][..]).unwrap();
                }
            }
        }
        builder.into_inner().unwrap()
    }

    fn sha256(content: &[u8]) -> [u8; 32] {
        Sha256::digest(content).into()
    }

    #[test]
    fn files_are_unpacked_and_hashed_and_links_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let tar = archive(&[("out/r.txt", Some(b"loss=0.25\n")), ("out/etc", None)]);
        let copied = unpack(tar.as_slice(), dir.path()).unwrap();
        let file = dir.path().join("out/r.txt");
        assert_eq!(std::fs::read(&file).unwrap(), b"loss=0.25\n");
        assert_eq!(
            copied,
            vec![
                Copied {
                    path: file,
                    file: Some((10, sha256(b"loss=0.25\n"))),
                    skipped: None,
                },
                Copied {
                    path: dir.path().join("out/etc"),
                    file: None,
                    skipped: Some("a link: not copied"),
                },
            ]
        );
        assert!(!dir.path().join("out/etc").exists(), "the link is not made");
    }

    #[test]
    fn an_entry_leaving_the_folder_stops_the_copy() {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("dest");
        std::fs::create_dir(&dir).unwrap();
        for path in ["../escaped.txt", "/tmp/escaped.txt", "a/../../escaped.txt"] {
            let tar = archive(&[(path, Some(b"x"))]);
            let e = unpack(tar.as_slice(), &dir).unwrap_err();
            assert!(matches!(e, CpError::Escapes(_)), "{path}: {e}");
        }
        assert!(!parent.path().join("escaped.txt").exists());
    }

    #[test]
    fn a_single_file_must_have_the_expected_sha256_or_is_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let tar = archive(&[("r.txt", Some(b"data"))]);
        let copied = unpack(tar.as_slice(), dir.path()).unwrap();
        check_single(&copied, &sha256(b"data")).unwrap();
        let e = check_single(&copied, &sha256(b"other")).unwrap_err();
        assert!(matches!(e, CpError::Mismatch { .. }), "{e}");
        assert!(!dir.path().join("r.txt").exists(), "deleted");
        let two = archive(&[("a", Some(b"1")), ("b", Some(b"2"))]);
        let copied = unpack(two.as_slice(), dir.path()).unwrap();
        assert!(matches!(
            check_single(&copied, &sha256(b"1")),
            Err(CpError::NotOneFile(2))
        ));
    }

    #[test]
    fn sources_hashes_and_exit_codes_are_read_strictly() {
        let lease = Pubkey::new_unique();
        let source = format!("{lease}:/workspace/out");
        assert_eq!(parse_source(&source).unwrap(), (lease, "/workspace/out"));
        for bad in [
            "/workspace/out".to_string(),
            format!("{lease}/workspace"),
            format!("{lease}:workspace/out"),
            "nope:/workspace".to_string(),
        ] {
            assert!(parse_source(&bad).is_err(), "{bad}");
        }
        assert_eq!(parse_sha256(&"ab".repeat(32)), Ok([0xab; 32]));
        assert!(parse_sha256("abc").is_err());
        assert_eq!(
            [-1, 0, 3, 255, 256, i64::MAX].map(exit_status),
            [0, 0, 3, 255, 255, 255]
        );
    }
}
