//! The lease owner's API on a host's agent (issue 17): the requests a lease's client may make of
//! its container, how each is signed, how the agent checks it, and the framing of an exec
//! session. The agent ([`verify`], [`NonceCache`], [`Endpoint::parse`]) and the CLI ([`sign`],
//! [`client::ApiClient`]) share this one definition.
//!
//! A request carries `Authorization: GM-Ed25519 signer=<base58>,nonce=<32 hex>,expires=<unix
//! seconds>,sig=<base58>`: the signer's ed25519 signature over [`message`] as an off-chain
//! message ([`crate::offchain`]: what a hardware wallet or a browser wallet signs, and never a
//! transaction), which names the machine (a request made for one host is refused by every other), the method, the path with
//! its query, the nonce and the expiry. The agent refuses a request past its expiry or expiring
//! more than [`MAX_TTL_SECS`] from now, and one whose nonce it has seen ([`NonceCache`]); it
//! serves a lease only to the lease's client. The connection is TLS with the agent's key pinned
//! ([`crate::tls`]).

pub mod client;

use std::collections::{BTreeSet, HashSet};
use std::fmt;
use std::str::FromStr;

use aes_gcm_siv::aead::{rand_core::RngCore, OsRng};
use serde::{Deserialize, Serialize};
use solana_pubkey::Pubkey;
use solana_signature::Signature;
use solana_signer::{Signer, SignerError};

use crate::offchain;
use tokio::io::{AsyncRead, AsyncReadExt};
use url::form_urlencoded;

/// The scheme word of the `Authorization` header.
pub const SCHEME: &str = "GM-Ed25519";
/// The first line of every signed message: a signature for this API is good for nothing else.
pub const DOMAIN: &str = "gpu-market-api/v1";
/// The furthest ahead a request may expire: a captured request is good for at most this long,
/// and the agent remembers its nonce as long.
pub const MAX_TTL_SECS: i64 = 300;
/// How long the requests the CLI signs stay good.
pub const DEFAULT_TTL_SECS: i64 = 60;
/// The `Upgrade` protocol of an exec session.
pub const EXEC_PROTOCOL: &str = "gpu-market-exec";
/// The most payload one exec frame carries; longer output is sent in several frames.
pub const MAX_FRAME_LEN: usize = 64 * 1024;

/// Why a request's `Authorization` is refused (401).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    #[error("the request is not signed (no Authorization header)")]
    Missing,
    #[error("malformed Authorization header: {0}")]
    Malformed(&'static str),
    #[error("the signature does not match the request")]
    BadSignature,
    #[error("the request expired at {expires} (now {now})")]
    Expired { expires: i64, now: i64 },
    #[error(
        "the request expires at {expires}, more than {MAX_TTL_SECS} s after now ({now}): \
         is this machine's clock right?"
    )]
    TooFarInFuture { expires: i64, now: i64 },
}

/// A request's nonce: 16 random bytes, written as 32 lower-case hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Nonce(pub [u8; 16]);

impl Nonce {
    pub fn random() -> Self {
        let mut bytes = [0u8; 16];
        OsRng.fill_bytes(&mut bytes);
        Nonce(bytes)
    }
}

impl fmt::Display for Nonce {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl fmt::Debug for Nonce {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Nonce({self})")
    }
}

impl FromStr for Nonce {
    type Err = AuthError;
    fn from_str(s: &str) -> Result<Self, AuthError> {
        let bad = AuthError::Malformed("nonce is not 32 lower-case hex digits");
        if s.len() != 32 || s.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err(bad);
        }
        let bytes = hex::decode(s).map_err(|_| bad.clone())?;
        bytes.try_into().map(Nonce).map_err(|_| bad)
    }
}

/// The parts of an `Authorization` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authorization {
    pub signer: Pubkey,
    pub nonce: Nonce,
    /// Unix seconds.
    pub expires: i64,
    pub signature: Signature,
}

impl fmt::Display for Authorization {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{SCHEME} signer={},nonce={},expires={},sig={}",
            self.signer, self.nonce, self.expires, self.signature
        )
    }
}

impl FromStr for Authorization {
    type Err = AuthError;
    /// Each of the four parameters exactly once, in any order, and nothing else.
    fn from_str(header: &str) -> Result<Self, AuthError> {
        let params = header
            .strip_prefix(SCHEME)
            .and_then(|rest| rest.strip_prefix(' '))
            .ok_or(AuthError::Malformed("not the GM-Ed25519 scheme"))?;
        let (mut signer, mut nonce, mut expires, mut sig) = (None, None, None, None);
        for param in params.split(',') {
            let (key, value) = param
                .split_once('=')
                .ok_or(AuthError::Malformed("a parameter is not key=value"))?;
            let slot = match key {
                "signer" => &mut signer,
                "nonce" => &mut nonce,
                "expires" => &mut expires,
                "sig" => &mut sig,
                _ => return Err(AuthError::Malformed("unknown parameter")),
            };
            if slot.replace(value).is_some() {
                return Err(AuthError::Malformed("a parameter is repeated"));
            }
        }
        let (Some(signer), Some(nonce), Some(expires), Some(sig)) = (signer, nonce, expires, sig)
        else {
            return Err(AuthError::Malformed("a parameter is missing"));
        };
        Ok(Authorization {
            signer: signer
                .parse()
                .map_err(|_| AuthError::Malformed("signer is not a base58 key"))?,
            nonce: nonce.parse()?,
            expires: expires
                .parse()
                .ok()
                .filter(|e: &i64| e.to_string() == expires)
                .ok_or(AuthError::Malformed("expires is not unix seconds"))?,
            signature: sig
                .parse()
                .map_err(|_| AuthError::Malformed("sig is not a base58 signature"))?,
        })
    }
}

/// The bytes a request's signer signs: the request bound to one machine, one method, one path
/// and query, one nonce and one expiry.
pub fn message(
    machine: &Pubkey,
    method: &str,
    path_and_query: &str,
    nonce: &Nonce,
    expires: i64,
) -> Vec<u8> {
    format!("{DOMAIN}\n{machine}\n{method}\n{path_and_query}\n{nonce}\n{expires}").into_bytes()
}

/// The `Authorization` header value of `method path_and_query` to `machine`, signed by `signer`
/// (a keypair or a wallet: a device may ask its owner, or refuse) with a fresh nonce, good for
/// `ttl_secs` from `now_unix`.
pub fn sign(
    signer: &dyn Signer,
    machine: &Pubkey,
    method: &str,
    path_and_query: &str,
    now_unix: i64,
    ttl_secs: i64,
) -> Result<String, SignerError> {
    let nonce = Nonce::random();
    let expires = now_unix.saturating_add(ttl_secs);
    let text = message(machine, method, path_and_query, &nonce, expires);
    Ok(Authorization {
        signer: signer.try_pubkey()?,
        nonce,
        expires,
        signature: offchain::sign(signer, &text)?,
    }
    .to_string())
}

/// Checks the `Authorization` header of `method path_and_query` received by `machine` at
/// `now_unix`: well formed, signed by the key it names over this very request, and neither
/// expired nor expiring more than [`MAX_TTL_SECS`] ahead. Returns it; whether its nonce is new
/// is the [`NonceCache`]'s to say.
pub fn verify(
    header: &str,
    machine: &Pubkey,
    method: &str,
    path_and_query: &str,
    now_unix: i64,
) -> Result<Authorization, AuthError> {
    let auth: Authorization = header.parse()?;
    let text = message(machine, method, path_and_query, &auth.nonce, auth.expires);
    let signed = offchain::wrap(&text)
        .map_err(|_| AuthError::Malformed("the request is too long to sign"))?;
    if !auth.signature.verify(auth.signer.as_ref(), &signed) {
        return Err(AuthError::BadSignature);
    }
    let (expires, now) = (auth.expires, now_unix);
    if expires <= now {
        return Err(AuthError::Expired { expires, now });
    }
    if expires > now.saturating_add(MAX_TTL_SECS) {
        return Err(AuthError::TooFarInFuture { expires, now });
    }
    Ok(auth)
}

/// Why a request's nonce is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
    #[error("this request was already made (its nonce was seen)")]
    Replayed,
    #[error("too many requests in flight ({capacity} nonces not yet expired); try again later")]
    Full { capacity: usize },
}

/// The nonces of the requests admitted, each kept until its request expires: a request seen
/// once is refused after. Bounded: once `capacity` nonces are kept and none has expired, new
/// requests are refused ([`ReplayError::Full`]) rather than the memory grow.
#[derive(Debug)]
pub struct NonceCache {
    capacity: usize,
    seen: HashSet<Nonce>,
    /// The same nonces by expiry, the earliest first: what to forget next.
    by_expiry: BTreeSet<(i64, Nonce)>,
}

impl NonceCache {
    pub fn new(capacity: usize) -> Self {
        NonceCache {
            capacity,
            seen: HashSet::new(),
            by_expiry: BTreeSet::new(),
        }
    }

    /// Admits the request of `auth` at `now_unix` unless its nonce was seen.
    pub fn admit(&mut self, auth: &Authorization, now_unix: i64) -> Result<(), ReplayError> {
        self.forget_expired(now_unix);
        if self.seen.contains(&auth.nonce) {
            return Err(ReplayError::Replayed);
        }
        if self.seen.len() >= self.capacity {
            return Err(ReplayError::Full {
                capacity: self.capacity,
            });
        }
        self.seen.insert(auth.nonce);
        self.by_expiry.insert((auth.expires, auth.nonce));
        Ok(())
    }

    /// The nonces kept.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }

    /// Forgets the nonces of requests expired at `now_unix`: [`verify`] refuses those anyway.
    pub fn forget_expired(&mut self, now_unix: i64) {
        while let Some(&(expires, nonce)) = self.by_expiry.first() {
            if expires > now_unix {
                break;
            }
            self.by_expiry.pop_first();
            self.seen.remove(&nonce);
        }
    }
}

/// What a request path names, before its query is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Status,
    Logs,
    Exec,
    Files,
}

/// Why a request names no endpoint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error("no such endpoint")]
    NotFound,
    #[error("the endpoint takes {allowed}")]
    MethodNotAllowed { allowed: &'static str },
}

/// Why a request's query is refused (400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad query: {0}")]
pub struct QueryError(pub String);

impl Endpoint {
    /// The endpoint of `method path` (no query), and the lease it is about.
    pub fn parse(method: &str, path: &str) -> Result<(Endpoint, Pubkey), RouteError> {
        let rest = path
            .strip_prefix("/v1/leases/")
            .ok_or(RouteError::NotFound)?;
        let (lease, tail) = rest.split_once('/').unwrap_or((rest, ""));
        let lease = lease.parse().map_err(|_| RouteError::NotFound)?;
        let endpoint = match tail {
            "" => Endpoint::Status,
            "logs" => Endpoint::Logs,
            "exec" => Endpoint::Exec,
            "files" => Endpoint::Files,
            _ => return Err(RouteError::NotFound),
        };
        if method != endpoint.method() {
            return Err(RouteError::MethodNotAllowed {
                allowed: endpoint.method(),
            });
        }
        Ok((endpoint, lease))
    }

    pub fn method(self) -> &'static str {
        match self {
            Endpoint::Exec => "POST",
            Endpoint::Status | Endpoint::Logs | Endpoint::Files => "GET",
        }
    }

    fn path(self, lease: &Pubkey) -> String {
        let tail = match self {
            Endpoint::Status => "",
            Endpoint::Logs => "/logs",
            Endpoint::Exec => "/exec",
            Endpoint::Files => "/files",
        };
        format!("/v1/leases/{lease}{tail}")
    }
}

/// Which of a container's output `logs` streams.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogsQuery {
    /// Only the last this many lines; all when `None`.
    pub tail: Option<u64>,
    /// Only what was printed from this unix second on.
    pub since: Option<i64>,
    /// Goes on streaming what the container prints until it stops.
    pub follow: bool,
}

/// A request of a lease's container, with its parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// `GET /v1/leases/{lease}`: the container's state and ports, a [`LeaseStatus`].
    Status,
    /// `GET /v1/leases/{lease}/logs?tail=N&since=UNIX&follow=true`: its stdout and stderr.
    Logs(LogsQuery),
    /// `POST /v1/leases/{lease}/exec?cmd=<JSON array of strings>[&tty=ROWSxCOLS]`, upgraded to
    /// [`EXEC_PROTOCOL`]: a command run in it, framed as [`ExecFrame`]s both ways; with `tty`,
    /// on a terminal of that size (its output one stream, resized by the client's frames).
    Exec {
        cmd: Vec<String>,
        tty: Option<TermSize>,
    },
    /// `GET /v1/leases/{lease}/files?path=…`: the engine's tar archive of a path in it.
    Files(String),
}

impl Call {
    pub fn endpoint(&self) -> Endpoint {
        match self {
            Call::Status => Endpoint::Status,
            Call::Logs(_) => Endpoint::Logs,
            Call::Exec { .. } => Endpoint::Exec,
            Call::Files(_) => Endpoint::Files,
        }
    }

    /// The request's path and query, as signed and sent.
    pub fn path_and_query(&self, lease: &Pubkey) -> String {
        let mut query = form_urlencoded::Serializer::new(String::new());
        match self {
            Call::Status => {}
            Call::Logs(q) => {
                if let Some(tail) = q.tail {
                    query.append_pair("tail", &tail.to_string());
                }
                if let Some(since) = q.since {
                    query.append_pair("since", &since.to_string());
                }
                if q.follow {
                    query.append_pair("follow", "true");
                }
            }
            Call::Exec { cmd, tty } => {
                query.append_pair("cmd", &serde_json::Value::from(cmd.clone()).to_string());
                if let Some(size) = tty {
                    query.append_pair("tty", &size.to_string());
                }
            }
            Call::Files(path) => {
                query.append_pair("path", path);
            }
        }
        let query = query.finish();
        let path = self.endpoint().path(lease);
        if query.is_empty() {
            path
        } else {
            format!("{path}?{query}")
        }
    }

    /// The call of `endpoint` with `query` (the part after `?`): each parameter of the endpoint
    /// at most once, and no other.
    pub fn parse(endpoint: Endpoint, query: &str) -> Result<Call, QueryError> {
        let mut params = std::collections::BTreeMap::new();
        for (key, value) in form_urlencoded::parse(query.as_bytes()) {
            if params.insert(key.clone(), value).is_some() {
                return Err(QueryError(format!("{key} is repeated")));
            }
        }
        let allowed: &[&str] = match endpoint {
            Endpoint::Status => &[],
            Endpoint::Logs => &["tail", "since", "follow"],
            Endpoint::Exec => &["cmd", "tty"],
            Endpoint::Files => &["path"],
        };
        if let Some(key) = params.keys().find(|k| !allowed.contains(&k.as_ref())) {
            return Err(QueryError(format!("unknown parameter {key}")));
        }
        let param = |key: &str| params.get(key).map(|v| v.as_ref());
        Ok(match endpoint {
            Endpoint::Status => Call::Status,
            Endpoint::Logs => Call::Logs(LogsQuery {
                tail: param("tail").map(number).transpose()?,
                since: param("since").map(number).transpose()?,
                follow: match param("follow") {
                    None | Some("false") => false,
                    Some("true") => true,
                    Some(other) => return Err(QueryError(format!("follow={other}"))),
                },
            }),
            Endpoint::Exec => Call::Exec {
                cmd: command(param("cmd"))?,
                tty: param("tty").map(str::parse).transpose()?,
            },
            Endpoint::Files => match param("path") {
                Some(path) if !path.is_empty() => Call::Files(path.to_string()),
                _ => return Err(QueryError("path is missing".into())),
            },
        })
    }
}

/// A non-negative decimal number.
fn number<T: TryFrom<u64>>(s: &str) -> Result<T, QueryError> {
    s.parse::<u64>()
        .ok()
        .and_then(|n| T::try_from(n).ok())
        .ok_or_else(|| QueryError(format!("{s:?} is not a number in range")))
}

/// An exec's command: a non-empty JSON array of strings.
fn command(json: Option<&str>) -> Result<Vec<String>, QueryError> {
    let json = json.ok_or_else(|| QueryError("cmd is missing".into()))?;
    match serde_json::from_str::<Vec<String>>(json) {
        Ok(cmd) if !cmd.is_empty() => Ok(cmd),
        _ => Err(QueryError(
            "cmd is not a non-empty JSON array of strings".into(),
        )),
    }
}

/// A terminal's size, in character cells: what an exec session with a TTY starts with and
/// what [`ExecFrame::Resize`] changes it to. Written `ROWSxCOLS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TermSize {
    pub rows: u16,
    pub cols: u16,
}

impl fmt::Display for TermSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}", self.rows, self.cols)
    }
}

impl FromStr for TermSize {
    type Err = QueryError;

    fn from_str(s: &str) -> Result<Self, QueryError> {
        let bad = || QueryError(format!("tty={s} is not ROWSxCOLS of positive numbers"));
        let (rows, cols) = s.split_once('x').ok_or_else(bad)?;
        let size = TermSize {
            rows: number(rows).map_err(|_| bad())?,
            cols: number(cols).map_err(|_| bad())?,
        };
        if size.rows == 0 || size.cols == 0 {
            return Err(bad());
        }
        Ok(size)
    }
}

/// A lease's container as `GET /v1/leases/{lease}` answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseStatus {
    #[serde(flatten)]
    pub state: ContainerStatus,
    /// The container's ports published on the host.
    pub ports: Vec<PortMapping>,
    /// Where the container's scratch volume is mounted: what `files` serves.
    pub scratch: String,
}

/// Whether a lease's container runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ContainerStatus {
    /// Created, not started yet.
    Created,
    /// Running (or paused, or restarting).
    Running,
    Exited {
        exit_code: i64,
    },
    /// Being removed, or dead: nothing more comes of it.
    Gone,
}

/// A container port published on the host.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PortMapping {
    pub container_port: u16,
    pub host_port: u16,
    /// `tcp` or `udp`.
    pub protocol: String,
}

/// The body of every refusal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
}

/// One frame of an exec session, server to client: `[kind u8][len u32 BE][payload]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecFrame {
    /// The command's output (with a TTY: all of it).
    Stdout(Vec<u8>),
    Stderr(Vec<u8>),
    /// The command's exit code (payload: i64 BE); the session ends after it.
    Exit(i64),
    /// From the client: the command's input. The client's half-close ends it.
    Stdin(Vec<u8>),
    /// From the client: its terminal's new size (payload: rows and columns, u16 BE each).
    Resize(TermSize),
}

/// Why an exec session's stream is not a sequence of [`ExecFrame`]s.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("the exec stream broke: {0}")]
    Io(#[from] std::io::Error),
    #[error("the exec stream sent frame kind {0}")]
    UnknownKind(u8),
    #[error("the exec stream sent a frame of kind {kind} with {len} bytes")]
    BadLength { kind: u8, len: usize },
}

impl ExecFrame {
    const STDOUT: u8 = 1;
    const STDERR: u8 = 2;
    const EXIT: u8 = 3;
    const STDIN: u8 = 4;
    const RESIZE: u8 = 5;

    /// Appends the frame to `out`; data longer than [`MAX_FRAME_LEN`] goes in several frames.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let size;
        let (kind, payload) = match self {
            ExecFrame::Stdout(data) => (Self::STDOUT, data.as_slice()),
            ExecFrame::Stderr(data) => (Self::STDERR, data.as_slice()),
            ExecFrame::Exit(code) => (Self::EXIT, &code.to_be_bytes()[..]),
            ExecFrame::Stdin(data) => (Self::STDIN, data.as_slice()),
            ExecFrame::Resize(s) => {
                size = [s.rows.to_be_bytes(), s.cols.to_be_bytes()].concat();
                (Self::RESIZE, size.as_slice())
            }
        };
        for part in payload.chunks(MAX_FRAME_LEN) {
            out.push(kind);
            out.extend_from_slice(&(part.len() as u32).to_be_bytes());
            out.extend_from_slice(part);
        }
    }

    /// Reads the next frame; `None` when the stream ends between frames.
    pub async fn read<R: AsyncRead + Unpin>(r: &mut R) -> Result<Option<ExecFrame>, FrameError> {
        let mut kind = [0u8; 1];
        if r.read(&mut kind).await? == 0 {
            return Ok(None);
        }
        let kind = kind[0];
        let len = r.read_u32().await? as usize;
        match kind {
            Self::STDOUT | Self::STDERR | Self::STDIN if len <= MAX_FRAME_LEN => {
                let mut payload = vec![0u8; len];
                r.read_exact(&mut payload).await?;
                Ok(Some(match kind {
                    Self::STDOUT => ExecFrame::Stdout(payload),
                    Self::STDERR => ExecFrame::Stderr(payload),
                    _ => ExecFrame::Stdin(payload),
                }))
            }
            Self::EXIT if len == 8 => Ok(Some(ExecFrame::Exit(r.read_i64().await?))),
            Self::RESIZE if len == 4 => Ok(Some(ExecFrame::Resize(TermSize {
                rows: r.read_u16().await?,
                cols: r.read_u16().await?,
            }))),
            Self::STDOUT | Self::STDERR | Self::STDIN | Self::EXIT | Self::RESIZE => {
                Err(FrameError::BadLength { kind, len })
            }
            other => Err(FrameError::UnknownKind(other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use solana_keypair::Keypair;

    use super::*;
    use crate::offchain::Device;

    const NOW: i64 = 1_800_000_000;

    fn signed(key: &Keypair, machine: &Pubkey, method: &str, path: &str) -> String {
        sign(key, machine, method, path, NOW, 60).unwrap()
    }

    #[test]
    fn a_wallet_signs_requests_as_off_chain_messages_and_only_that_form_is_accepted() {
        let (device, machine) = (Device(Keypair::new()), Pubkey::new_unique());
        let path = "/v1/leases/x/exec";
        let header = sign(&device, &machine, "POST", path, NOW, 60).unwrap();
        let auth = verify(&header, &machine, "POST", path, NOW).unwrap();
        assert_eq!(auth.signer, device.0.pubkey());
        // The request's text signed as it is (not as an off-chain message) is refused: one
        // form, which no transaction shares.
        let text = message(&machine, "POST", path, &auth.nonce, auth.expires);
        let raw = Authorization {
            signature: device.0.sign_message(&text),
            ..auth
        };
        assert_eq!(
            verify(&raw.to_string(), &machine, "POST", path, NOW).unwrap_err(),
            AuthError::BadSignature
        );
        // A device that refuses: no header, the device's reason.
        struct Refusing;
        impl Signer for Refusing {
            fn try_pubkey(&self) -> Result<Pubkey, SignerError> {
                Ok(Pubkey::new_unique())
            }
            fn try_sign_message(&self, _: &[u8]) -> Result<Signature, SignerError> {
                Err(SignerError::Custom("refused on the device".into()))
            }
            fn is_interactive(&self) -> bool {
                true
            }
        }
        let e = sign(&Refusing, &machine, "GET", path, NOW, 60).unwrap_err();
        assert!(e.to_string().contains("refused on the device"), "{e}");
    }

    #[test]
    fn a_signed_request_verifies_and_names_its_signer() {
        let (client, machine) = (Keypair::new(), Pubkey::new_unique());
        let header = signed(&client, &machine, "GET", "/v1/leases/x/logs?tail=5");
        assert!(header.starts_with("GM-Ed25519 signer="), "{header}");
        let auth = verify(&header, &machine, "GET", "/v1/leases/x/logs?tail=5", NOW).unwrap();
        assert_eq!(auth.signer, client.pubkey());
        assert_eq!(auth.expires, NOW + 60);
        assert_eq!(auth.to_string(), header, "the header round-trips");
    }

    #[test]
    fn a_request_changed_in_any_part_is_refused() {
        let (client, machine) = (Keypair::new(), Pubkey::new_unique());
        let header = signed(
            &client,
            &machine,
            "GET",
            "/v1/leases/x/files?path=/workspace/a",
        );
        let check = |machine: &Pubkey, method: &str, path: &str| {
            verify(&header, machine, method, path, NOW).unwrap_err()
        };
        let path = "/v1/leases/x/files?path=/workspace/a";
        assert_eq!(
            check(&machine, "GET", "/v1/leases/x/files?path=/workspace/b"),
            AuthError::BadSignature
        );
        assert_eq!(check(&machine, "POST", path), AuthError::BadSignature);
        assert_eq!(
            check(&Pubkey::new_unique(), "GET", path),
            AuthError::BadSignature,
            "another machine"
        );
        // Another signer named in the header: the signature is not its.
        let other = Keypair::new().pubkey().to_string();
        let forged = header.replace(&client.pubkey().to_string(), &other);
        assert_eq!(
            verify(&forged, &machine, "GET", path, NOW).unwrap_err(),
            AuthError::BadSignature
        );
        // A later expiry than the one signed.
        let auth: Authorization = header.parse().unwrap();
        let stretched = Authorization {
            expires: auth.expires + 1,
            ..auth
        };
        assert_eq!(
            verify(&stretched.to_string(), &machine, "GET", path, NOW).unwrap_err(),
            AuthError::BadSignature
        );
    }

    #[test]
    fn expired_and_far_future_requests_are_refused() {
        let (client, machine) = (Keypair::new(), Pubkey::new_unique());
        let at = |now: i64, ttl: i64| sign(&client, &machine, "GET", "/p", now, ttl).unwrap();
        assert_eq!(
            verify(&at(NOW - 100, 60), &machine, "GET", "/p", NOW).unwrap_err(),
            AuthError::Expired {
                expires: NOW - 40,
                now: NOW
            }
        );
        assert_eq!(
            verify(&at(NOW, 0), &machine, "GET", "/p", NOW).unwrap_err(),
            AuthError::Expired {
                expires: NOW,
                now: NOW
            },
            "expiring now is expired"
        );
        assert!(verify(&at(NOW, MAX_TTL_SECS), &machine, "GET", "/p", NOW).is_ok());
        assert_eq!(
            verify(&at(NOW, MAX_TTL_SECS + 1), &machine, "GET", "/p", NOW).unwrap_err(),
            AuthError::TooFarInFuture {
                expires: NOW + MAX_TTL_SECS + 1,
                now: NOW
            }
        );
    }

    #[test]
    fn malformed_headers_are_refused_by_what_is_wrong() {
        let (client, machine) = (Keypair::new(), Pubkey::new_unique());
        let good = signed(&client, &machine, "GET", "/p");
        let malformed = |header: &str| match verify(header, &machine, "GET", "/p", NOW) {
            Err(AuthError::Malformed(why)) => why,
            other => panic!("{header}: {other:?}"),
        };
        assert_eq!(malformed("Bearer abc"), "not the GM-Ed25519 scheme");
        assert_eq!(
            malformed(&good.replace(",sig=", ",extra=1,sig=")),
            "unknown parameter"
        );
        assert_eq!(
            malformed(&format!("{good},nonce={}", Nonce([0; 16]))),
            "a parameter is repeated"
        );
        let auth: Authorization = good.parse().unwrap();
        let without_sig = good.split(",sig=").next().unwrap();
        assert_eq!(malformed(without_sig), "a parameter is missing");
        let upper = good.replace(
            &auth.nonce.to_string(),
            &auth.nonce.to_string().to_uppercase(),
        );
        if upper != good {
            assert_eq!(malformed(&upper), "nonce is not 32 lower-case hex digits");
        }
        assert_eq!(
            malformed(&good.replace(&format!("expires={}", auth.expires), "expires=+1")),
            "expires is not unix seconds"
        );
        assert_eq!(
            malformed(&good.replace("signer=", "signer=0")),
            "signer is not a base58 key"
        );
    }

    fn auth(nonce: u8, expires: i64) -> Authorization {
        Authorization {
            signer: Pubkey::new_unique(),
            nonce: Nonce([nonce; 16]),
            expires,
            signature: Signature::default(),
        }
    }

    #[test]
    fn the_cache_refuses_a_replay_until_the_request_expires() {
        let mut cache = NonceCache::new(8);
        cache.admit(&auth(1, NOW + 60), NOW).unwrap();
        assert_eq!(
            cache.admit(&auth(1, NOW + 60), NOW + 59),
            Err(ReplayError::Replayed)
        );
        cache.admit(&auth(2, NOW + 60), NOW).unwrap();
        // Once expired, the request itself is refused by `verify`: its nonce is forgotten.
        cache.admit(&auth(3, NOW + 200), NOW + 60).unwrap();
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn a_full_cache_refuses_new_requests_until_some_expire() {
        let mut cache = NonceCache::new(2);
        cache.admit(&auth(1, NOW + 10), NOW).unwrap();
        cache.admit(&auth(2, NOW + 20), NOW).unwrap();
        assert_eq!(
            cache.admit(&auth(3, NOW + 30), NOW),
            Err(ReplayError::Full { capacity: 2 })
        );
        assert_eq!(cache.len(), 2, "the refused one is not kept");
        cache.admit(&auth(3, NOW + 30), NOW + 10).unwrap();
        assert_eq!(
            cache.admit(&auth(2, NOW + 20), NOW + 10),
            Err(ReplayError::Replayed),
            "the unexpired one is still known"
        );
    }

    #[test]
    fn calls_round_trip_through_their_path_and_query() {
        let lease = Pubkey::new_unique();
        let calls = [
            Call::Status,
            Call::Logs(LogsQuery::default()),
            Call::Logs(LogsQuery {
                tail: Some(10),
                since: Some(NOW),
                follow: true,
            }),
            Call::Exec {
                cmd: vec!["sh".into(), "-c".into(), "echo a&b=c; exit 3".into()],
                tty: None,
            },
            Call::Exec {
                cmd: vec!["bash".into()],
                tty: Some(TermSize {
                    rows: 50,
                    cols: 132,
                }),
            },
            Call::Files("/workspace/out dir/r&d.txt".into()),
        ];
        for call in calls {
            let target = call.path_and_query(&lease);
            let (path, query) = target.split_once('?').unwrap_or((&target, ""));
            let (endpoint, parsed_lease) = Endpoint::parse(call.endpoint().method(), path).unwrap();
            assert_eq!(parsed_lease, lease);
            assert_eq!(Call::parse(endpoint, query).unwrap(), call, "{target}");
        }
    }

    #[test]
    fn unknown_paths_methods_and_queries_are_refused() {
        let lease = Pubkey::new_unique();
        assert_eq!(
            Endpoint::parse("GET", "/v1/leases/not-a-key/logs"),
            Err(RouteError::NotFound)
        );
        assert_eq!(
            Endpoint::parse("GET", &format!("/v1/leases/{lease}/top")),
            Err(RouteError::NotFound)
        );
        assert_eq!(
            Endpoint::parse("GET", &format!("/v1/leases/{lease}/exec")),
            Err(RouteError::MethodNotAllowed { allowed: "POST" })
        );
        for (endpoint, query) in [
            (Endpoint::Logs, "tail=-1"),
            (Endpoint::Logs, "follow=yes"),
            (Endpoint::Logs, "tail=1&tail=2"),
            (Endpoint::Logs, "lines=3"),
            (Endpoint::Exec, ""),
            (Endpoint::Exec, "cmd=%5B%5D"),
            (Endpoint::Exec, "cmd=ls"),
            (Endpoint::Exec, "cmd=%5B%22sh%22%5D&tty=24"),
            (Endpoint::Exec, "cmd=%5B%22sh%22%5D&tty=0x80"),
            (Endpoint::Exec, "cmd=%5B%22sh%22%5D&tty=24x70000"),
            (Endpoint::Files, ""),
            (Endpoint::Status, "x=1"),
        ] {
            assert!(Call::parse(endpoint, query).is_err(), "{query}");
        }
    }

    #[tokio::test]
    async fn exec_frames_round_trip_and_long_output_is_split() {
        let long = vec![7u8; MAX_FRAME_LEN + 5];
        let mut wire = Vec::new();
        for frame in [
            ExecFrame::Stdout(b"hello".to_vec()),
            ExecFrame::Stderr(long.clone()),
            ExecFrame::Stdin(b"ls\r".to_vec()),
            ExecFrame::Resize(TermSize {
                rows: 40,
                cols: 120,
            }),
            ExecFrame::Exit(-3),
        ] {
            frame.encode(&mut wire);
        }
        let mut r = wire.as_slice();
        let mut frames = Vec::new();
        while let Some(frame) = ExecFrame::read(&mut r).await.unwrap() {
            frames.push(frame);
        }
        assert_eq!(
            frames,
            [
                ExecFrame::Stdout(b"hello".to_vec()),
                ExecFrame::Stderr(long[..MAX_FRAME_LEN].to_vec()),
                ExecFrame::Stderr(vec![7; 5]),
                ExecFrame::Stdin(b"ls\r".to_vec()),
                ExecFrame::Resize(TermSize {
                    rows: 40,
                    cols: 120
                }),
                ExecFrame::Exit(-3),
            ]
        );
        let mut bad: &[u8] = &[5, 0, 0, 0, 2, 0, 9];
        assert!(matches!(
            ExecFrame::read(&mut bad).await,
            Err(FrameError::BadLength { kind: 5, len: 2 })
        ));
        let mut bad: &[u8] = &[9, 0, 0, 0, 0];
        assert!(matches!(
            ExecFrame::read(&mut bad).await,
            Err(FrameError::UnknownKind(9))
        ));
        let mut bad: &[u8] = &[3, 0, 0, 0, 4, 0, 0, 0, 0];
        assert!(matches!(
            ExecFrame::read(&mut bad).await,
            Err(FrameError::BadLength { kind: 3, len: 4 })
        ));
    }
}
