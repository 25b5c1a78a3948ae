//! A lease's container for a wallet: its logs and its files, through the service, signed by
//! the lease's client in the browser. The agent's API answers only requests that the lease's
//! client signs (`gpu_market_sdk::api`: an off-chain message over the request, its machine, a
//! nonce and an expiry) over TLS pinned to the machine account's agent key, which a browser
//! cannot pin. So the page asks the service for the bytes to sign (`sign`: the very message the
//! sdk's `api::sign` makes, wrapped as a Solana off-chain message), the wallet signs them
//! (Wallet Standard `solana:signMessage`; an off-chain message can never be a transaction), and
//! the service sends the request with that signature (`send`) and answers with what the agent
//! answered. The service holds no key and cannot sign for anyone: a request it sends is the
//! client's, once, for a minute.

use std::io::Read;

use anyhow::{anyhow, bail, Context, Result};
use base64::Engine as _;
use futures_util::{SinkExt, StreamExt};
use gpu_market::state::{Lease, Machine};
use gpu_market_sdk::api::client::{ApiClient, ClientError};
use gpu_market_sdk::api::{
    self, Authorization, Call, LeaseStatus, LogsQuery, Nonce, TermSize, DEFAULT_TTL_SECS,
};
use gpu_market_sdk::offchain;
use http_body_util::{BodyExt, Limited};
use serde::Deserialize;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use solana_pubkey::Pubkey;
use solana_signature::Signature;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use crate::config::Config;
use crate::lease::remote::{api_address, connect_lines};

/// What a terminal runs: the container's bash where it has one, else its sh.
const TERMINAL: [&str; 3] = [
    "sh",
    "-c",
    "if command -v bash >/dev/null; then exec bash; else exec sh; fi",
];

/// Lines of a container's output one request reads (its last ones).
pub const LOG_LINES: u64 = 500;
/// The most bytes of logs, or of a file, one answer the service passes on holds.
pub const MAX_ANSWER: usize = 64 << 20;

/// What the page asks of a lease, and (for `send`) the wallet's signature of it.
#[derive(Deserialize)]
pub struct LeaseRequest {
    /// The wallet's key: the lease's client.
    account: String,
    /// `logs` or `file`.
    call: String,
    /// The file, for `file`: a path in the container (its scratch is `/workspace`).
    path: Option<String>,
    /// The terminal's size, `ROWSxCOLS`, for `terminal`.
    tty: Option<String>,
    nonce: Option<String>,
    expires: Option<i64>,
    /// The wallet's signature of `sign`'s message, base64.
    signature: Option<String>,
}

/// What `send` answers.
pub enum Sent {
    /// A file, or a folder's archive: its bytes, its name and its sha256.
    File {
        bytes: Vec<u8>,
        file: (String, String),
    },
    /// The container's state, and where the client connects to its published ports.
    Status(Value),
}

impl LeaseRequest {
    fn call(&self) -> Result<Call> {
        match (self.call.as_str(), &self.path) {
            ("logs", _) => Ok(Call::Logs(LogsQuery {
                tail: Some(LOG_LINES),
                follow: true,
                ..LogsQuery::default()
            })),
            ("file", Some(path)) if path.starts_with('/') => Ok(Call::Files(path.clone())),
            ("file", _) => {
                bail!("a file is named by its path in the container, e.g. /workspace/result.txt")
            }
            ("status", _) => Ok(Call::Status),
            ("terminal", _) => Ok(Call::Exec {
                cmd: TERMINAL.iter().map(|s| s.to_string()).collect(),
                tty: Some(
                    self.tty
                        .as_deref()
                        .unwrap_or_default()
                        .parse()
                        .map_err(|e| anyhow!("tty: {e}"))?,
                ),
            }),
            (other, _) => {
                bail!("the page asks a lease for its status, logs, a file or a terminal, not {other:?}")
            }
        }
    }

    fn account(&self) -> Result<Pubkey> {
        self.account
            .parse()
            .map_err(|_| anyhow!("account is not a public key"))
    }
}

/// The lease of `market` at `lease`, its machine, and the agent API's address; refused unless
/// `account` is the lease's client (the agent would refuse it anyway: this saves the wallet a
/// signature that could only be turned away).
fn lease_of(
    config: &Config,
    market: &Pubkey,
    lease: &Pubkey,
    account: &Pubkey,
) -> Result<(Lease, Machine, String)> {
    let l: Lease = config.fetch(lease, "lease")?;
    if l.market != *market {
        bail!("lease {lease} is not in market {market}");
    }
    if l.client != *account {
        bail!("only the lease's client {} reads its container", l.client);
    }
    let machine: Machine = config.fetch(&l.machine, "machine")?;
    let addr = api_address(&machine).ok_or_else(|| {
        anyhow!(
            "machine {} publishes no address for its agent's API",
            l.machine
        )
    })?;
    Ok((l, machine, addr))
}

/// `POST /api/lease/LEASE/sign`: the bytes the wallet signs for `request` (base64), with the
/// nonce and expiry they name.
pub fn sign(config: &Config, market: &Pubkey, lease: &Pubkey, body: &[u8]) -> Result<Value> {
    let request: LeaseRequest = serde_json::from_slice(body).context("the request body")?;
    let account = request.account()?;
    let (l, _, _) = lease_of(config, market, lease, &account)?;
    let call = request.call()?;
    let nonce = Nonce::random();
    let expires = unix_now() + DEFAULT_TTL_SECS;
    let text = api::message(
        &l.machine,
        call.endpoint().method(),
        &call.path_and_query(lease),
        &nonce,
        expires,
    );
    let message = offchain::wrap(&text).map_err(|e| anyhow!("cannot wrap the request: {e}"))?;
    Ok(json!({
        "message": base64::engine::general_purpose::STANDARD.encode(message),
        "nonce": nonce.to_string(),
        "expires": expires,
    }))
}

/// What sends a request the wallet signed: the lease's agent, the call, and its
/// `Authorization`.
pub struct Signed {
    pub api: ApiClient,
    pub call: Call,
    pub authorization: String,
    /// The lease's machine.
    pub machine: Machine,
}

/// `request` (with the wallet's signature) made ready to send to `lease`'s agent.
pub fn signed(
    config: &Config,
    market: &Pubkey,
    lease: &Pubkey,
    request: &LeaseRequest,
) -> Result<Signed> {
    let account = request.account()?;
    let (l, machine, addr) = lease_of(config, market, lease, &account)?;
    let call = request.call()?;
    let signature = request
        .signature
        .as_deref()
        .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
        .and_then(|b| Signature::try_from(b.as_slice()).ok())
        .ok_or_else(|| anyhow!("signature is not a base64 ed25519 signature"))?;
    let authorization = Authorization {
        signer: account,
        nonce: request
            .nonce
            .as_deref()
            .unwrap_or_default()
            .parse()
            .map_err(|e| anyhow!("nonce: {e}"))?,
        expires: request
            .expires
            .ok_or_else(|| anyhow!("expires is missing"))?,
        signature,
    }
    .to_string();
    Ok(Signed {
        api: ApiClient::new(addr, l.machine, &machine.agent),
        call,
        authorization,
        machine,
    })
}

/// `POST /api/lease/LEASE/send`: `request` (a file's, or the lease's status) sent to the
/// lease's agent with the wallet's signature; what the path names ([`download`]), with its
/// sha256, or the container's state with where to connect to its ports (`lease show`'s
/// `connect`). The agent's refusal is the error.
pub fn send(config: &Config, market: &Pubkey, lease: &Pubkey, body: &[u8]) -> Result<Sent> {
    let request: LeaseRequest = serde_json::from_slice(body).context("the request body")?;
    let Signed {
        api,
        call,
        authorization,
        machine,
    } = signed(config, market, lease, &request)?;
    if !matches!(call, Call::Files(_) | Call::Status) {
        bail!("a lease's logs and terminal stream: a WebSocket of /api/lease/LEASE/stream");
    }
    let bytes = tokio::runtime::Handle::current().block_on(async {
        let response = api.send(lease, &call, Some(&authorization)).await?;
        let status = response.status();
        let body = Limited::new(response.into_body(), MAX_ANSWER)
            .collect()
            .await
            .map_err(|e| anyhow!("the agent's answer: {e}"))?
            .to_bytes();
        if !status.is_success() {
            let message = serde_json::from_slice::<api::ErrorBody>(&body)
                .map(|e| e.error)
                .unwrap_or_else(|_| String::from_utf8_lossy(&body).into_owned());
            return Err(anyhow!(ClientError::Refused {
                status: status.as_u16(),
                message,
            }));
        }
        Ok(body.to_vec())
    })?;
    let Call::Files(path) = &call else {
        let status: LeaseStatus =
            serde_json::from_slice(&bytes).context("the agent's status of the lease")?;
        return Ok(Sent::Status(json!({
            "state": status.state,
            "connect": connect_lines(&status, &machine),
            "scratch": status.scratch,
        })));
    };
    let (name, bytes) = download(&bytes, path)?;
    let sha256 = hex::encode(Sha256::digest(&bytes));
    Ok(Sent::File {
        bytes,
        file: (name, sha256),
    })
}

/// What the page downloads of the engine's archive of `path` (a tar whose first entry is what
/// the path names): a regular file as itself, by its name; a folder as that archive, named
/// `FOLDER.tar` (`tar -xf` unpacks it as `gpu-market lease cp` copies it). Anything else (a
/// link, a device) is refused.
fn download(archive: &[u8], path: &str) -> Result<(String, Vec<u8>)> {
    let mut tar = tar::Archive::new(archive);
    let mut entries = tar.entries().context("the agent's archive")?;
    let mut entry = entries
        .next()
        .ok_or_else(|| anyhow!("{path}: the archive is empty"))?
        .context("the agent's archive")?;
    let name = entry
        .path()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
    let kind = entry.header().entry_type();
    if kind.is_dir() {
        return Ok((
            format!("{}.tar", name.unwrap_or_else(|| "folder".into())),
            archive.to_vec(),
        ));
    }
    if !kind.is_file() {
        bail!("{path} is neither a file nor a folder");
    }
    let mut bytes = Vec::new();
    entry
        .read_to_end(&mut bytes)
        .context("the agent's archive")?;
    Ok((name.unwrap_or_else(|| "file".into()), bytes))
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// `GET /api/lease/LEASE/stream` as a WebSocket, its first message the signed request: the
/// container's logs as they are printed (binary messages, from its last [`LOG_LINES`] on), or a
/// terminal ([`terminal`]). It ends with a text message `{"exit": CODE}` for a terminal,
/// `{"end": true}` for logs whose container stopped, or `{"error": "…"}`.
pub async fn stream<S>(ws: WebSocketStream<S>, lease: Pubkey, signed: Result<Signed>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    match signed {
        Ok(s) if matches!(s.call, Call::Logs(_)) => logs(ws, lease, s).await,
        signed => terminal(ws, lease, signed).await,
    }
}

/// The container's output as the agent streams it, to the browser until either stops.
async fn logs<S>(ws: WebSocketStream<S>, lease: Pubkey, s: Signed)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut to_browser, mut from_browser) = ws.split();
    let body = match s.api.send(&lease, &s.call, Some(&s.authorization)).await {
        Ok(r) if r.status().is_success() => Ok(r.into_body()),
        Ok(r) => {
            let status = r.status();
            let body = Limited::new(r.into_body(), 64 * 1024).collect().await;
            let said = body
                .ok()
                .and_then(|b| serde_json::from_slice::<api::ErrorBody>(&b.to_bytes()).ok())
                .map_or_else(|| status.to_string(), |e| e.error);
            Err(anyhow!("the agent refused: {said}"))
        }
        Err(e) => Err(anyhow!(e)),
    };
    let said = match body {
        Ok(mut body) => loop {
            tokio::select! {
                frame = body.frame() => match frame {
                    Some(Ok(frame)) => {
                        let Ok(data) = frame.into_data() else { continue };
                        if to_browser.send(Message::Binary(data)).await.is_err() {
                            return;
                        }
                    }
                    Some(Err(e)) => break json!({ "error": format!("the log stream broke off: {e}") }),
                    None => break json!({ "end": true }),
                },
                // The browser gone (or closing): nothing more to send.
                message = from_browser.next() => if !matches!(message, Some(Ok(_))) { return },
            }
        },
        Err(e) => json!({ "error": format!("{e:#}") }),
    };
    let _ = to_browser
        .send(Message::Text(said.to_string().into()))
        .await;
    let _ = to_browser.close().await;
}

/// A terminal's session between the browser's WebSocket `ws` and the command the agent runs
/// (`signed`, a [`Call::Exec`] on a TTY): the browser's binary messages are its input, its text
/// messages `{"rows", "cols"}` resize it; its output goes back as binary messages, and its exit
/// as a last text message `{"exit": CODE}` (or `{"error": "…"}`).
async fn terminal<S>(ws: WebSocketStream<S>, lease: Pubkey, signed: Result<Signed>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut to_browser, mut from_browser) = ws.split();
    let session = match signed {
        Ok(s) => s
            .api
            .exec_authorized(&lease, s.call, &s.authorization)
            .await
            .map_err(anyhow::Error::from),
        Err(e) => Err(e),
    };
    let session = match session {
        Ok(session) => session,
        Err(e) => {
            let said = json!({ "error": format!("{e:#}") }).to_string();
            let _ = to_browser.send(Message::Text(said.into())).await;
            let _ = to_browser.close().await;
            return;
        }
    };
    let (mut typed, input) = tokio::io::duplex(64 * 1024);
    let (output, mut shown) = tokio::io::duplex(64 * 1024);
    let (resized, resizes) = tokio::sync::mpsc::channel::<TermSize>(16);
    // The browser's keys and sizes, until it goes (then the command's input ends).
    let keyboard = tokio::spawn(async move {
        while let Some(Ok(message)) = from_browser.next().await {
            let fed = match message {
                Message::Binary(bytes) => typed.write_all(&bytes).await.is_ok(),
                Message::Text(text) => match terminal_size(&text) {
                    Some(size) => resized.send(size).await.is_ok(),
                    None => true,
                },
                Message::Close(_) => false,
                _ => true,
            };
            if !fed {
                break;
            }
        }
    });
    let resizes = futures_util::stream::unfold(resizes, |mut r| async move {
        r.recv().await.map(|size| (size, r))
    });
    let run = session.run(input, output, tokio::io::sink(), resizes);
    let screen = async {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match shown.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let sent = to_browser.send(Message::Binary(buf[..n].to_vec().into()));
                    if sent.await.is_err() {
                        break;
                    }
                }
            }
        }
    };
    let (code, ()) = tokio::join!(run, screen);
    keyboard.abort();
    let said = match code {
        Ok(code) => json!({ "exit": code }),
        Err(e) => json!({ "error": e.to_string() }),
    };
    let _ = to_browser
        .send(Message::Text(said.to_string().into()))
        .await;
    let _ = to_browser.close().await;
}

/// A browser's resize message, `{"rows": R, "cols": C}`.
fn terminal_size(text: &str) -> Option<TermSize> {
    let v: Value = serde_json::from_str(text).ok()?;
    let cells = |k: &str| v[k].as_u64().and_then(|n| u16::try_from(n).ok());
    Some(TermSize {
        rows: cells("rows")?,
        cols: cells("cols")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tar archive of `entries` (path, kind, bytes), as the engine answers for a path.
    fn archive(entries: &[(&str, tar::EntryType, &[u8])]) -> Vec<u8> {
        let mut tar = tar::Builder::new(Vec::new());
        for (path, kind, bytes) in entries {
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(*kind);
            header.set_size(bytes.len() as u64);
            header.set_mode(0o644);
            if kind.is_symlink() {
                header.set_link_name("/etc/passwd").unwrap();
            }
            tar.append_data(&mut header, path, *bytes).unwrap();
        }
        tar.into_inner().unwrap()
    }

    #[test]
    fn a_file_downloads_as_itself_a_folder_as_its_archive_and_nothing_else_at_all() {
        let file = archive(&[("result.txt", tar::EntryType::Regular, b"loss=0.25\n")]);
        assert_eq!(
            download(&file, "/workspace/result.txt").unwrap(),
            ("result.txt".to_string(), b"loss=0.25\n".to_vec())
        );
        let folder = archive(&[
            ("out/", tar::EntryType::Directory, b""),
            ("out/a.txt", tar::EntryType::Regular, b"a"),
            ("out/b/c.txt", tar::EntryType::Regular, b"c"),
        ]);
        assert_eq!(
            download(&folder, "/workspace/out").unwrap(),
            ("out.tar".to_string(), folder.clone())
        );
        let link = archive(&[("key", tar::EntryType::Symlink, b"")]);
        let refused = download(&link, "/workspace/key").unwrap_err();
        assert!(refused.to_string().contains("neither a file nor a folder"));
        assert!(download(&[0u8; 1024], "/workspace/none").is_err());
    }
}
