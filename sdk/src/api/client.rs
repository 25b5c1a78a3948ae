//! The client of an agent's API: one TLS connection a request, pinned to the agent's key
//! ([`crate::tls::client_config`]), each request signed by the lease's client ([`sign`]).

use futures_util::{Stream, StreamExt};
use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{AUTHORIZATION, CONNECTION, HOST, UPGRADE};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use solana_pubkey::Pubkey;
use solana_signer::Signer;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::{
    sign, Call, ErrorBody, ExecFrame, FrameError, LeaseStatus, LogsQuery, TermSize,
    DEFAULT_TTL_SECS, EXEC_PROTOCOL,
};
use crate::tls::{client_config, SERVER_NAME};

/// The most of a status or refusal body read.
const MAX_SMALL_BODY: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot connect to the agent's API at {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    /// The server is not the machine's agent (its key is not the pinned one), or TLS failed.
    #[error(
        "TLS with the agent's API at {addr} failed (a server without the machine's agent key \
         is refused): {source}"
    )]
    Tls {
        addr: String,
        source: std::io::Error,
    },
    #[error("the agent's API at {addr} broke off: {source}")]
    Http { addr: String, source: hyper::Error },
    #[error("the agent refused ({status}): {message}")]
    Refused { status: u16, message: String },
    #[error("the agent's answer cannot be read: {0}")]
    BadAnswer(String),
    #[error("the wallet did not sign the request: {0}")]
    Sign(String),
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error("the exec session ended without the command's exit code")]
    NoExitCode,
    #[error("cannot write the command's output: {0}")]
    Output(std::io::Error),
}

/// The API of one machine's agent at `addr` (`HOST:PORT`).
pub struct ApiClient {
    addr: String,
    machine: Pubkey,
    tls: TlsConnector,
}

impl ApiClient {
    /// The API at `addr` of `machine`, whose agent key (`Machine.agent`) is `agent`.
    pub fn new(addr: impl Into<String>, machine: Pubkey, agent: &Pubkey) -> Self {
        ApiClient {
            addr: addr.into(),
            machine,
            tls: TlsConnector::from(client_config(agent)),
        }
    }

    /// The machine requests are signed for.
    pub fn machine(&self) -> &Pubkey {
        &self.machine
    }

    /// `lease`'s container: its state and ports.
    pub async fn status(
        &self,
        signer: &dyn Signer,
        lease: &Pubkey,
    ) -> Result<LeaseStatus, ClientError> {
        let body = self.call(signer, lease, &Call::Status).await?.into_body();
        serde_json::from_slice(&read_small(body).await?)
            .map_err(|e| ClientError::BadAnswer(e.to_string()))
    }

    /// `lease`'s container's output (stdout and stderr), as the body streams it.
    pub async fn logs(
        &self,
        signer: &dyn Signer,
        lease: &Pubkey,
        query: LogsQuery,
    ) -> Result<Incoming, ClientError> {
        let response = self.call(signer, lease, &Call::Logs(query)).await?;
        Ok(response.into_body())
    }

    /// The engine's tar archive of `path` in `lease`'s container, as the body streams it.
    pub async fn files(
        &self,
        signer: &dyn Signer,
        lease: &Pubkey,
        path: &str,
    ) -> Result<Incoming, ClientError> {
        let response = self.call(signer, lease, &Call::Files(path.into())).await?;
        Ok(response.into_body())
    }

    /// Starts `cmd` in `lease`'s container, on a terminal of size `tty` if given;
    /// [`ExecSession::run`] feeds and reads it.
    pub async fn exec(
        &self,
        signer: &dyn Signer,
        lease: &Pubkey,
        cmd: Vec<String>,
        tty: Option<TermSize>,
    ) -> Result<ExecSession, ClientError> {
        let call = Call::Exec { cmd, tty };
        let authorization = self.sign(signer, lease, &call)?;
        self.exec_authorized(lease, call, &authorization).await
    }

    /// [`ApiClient::exec`] of `call` (a [`Call::Exec`]) with an `Authorization` its client
    /// signed elsewhere (a browser's wallet, through `gpu-market serve`).
    pub async fn exec_authorized(
        &self,
        lease: &Pubkey,
        call: Call,
        authorization: &str,
    ) -> Result<ExecSession, ClientError> {
        let response = self.checked(lease, &call, authorization).await?;
        let upgraded = hyper::upgrade::on(response)
            .await
            .map_err(|source| self.http_error(source))?;
        Ok(ExecSession {
            io: TokioIo::new(upgraded),
        })
    }

    /// `call` for `lease`, signed by `signer` now; the answer when it is a success, else the
    /// agent's refusal.
    async fn call(
        &self,
        signer: &dyn Signer,
        lease: &Pubkey,
        call: &Call,
    ) -> Result<Response<Incoming>, ClientError> {
        let authorization = self.sign(signer, lease, call)?;
        self.checked(lease, call, &authorization).await
    }

    /// The `Authorization` of `call` for `lease`, signed by `signer` now.
    fn sign(
        &self,
        signer: &dyn Signer,
        lease: &Pubkey,
        call: &Call,
    ) -> Result<String, ClientError> {
        sign(
            signer,
            &self.machine,
            call.endpoint().method(),
            &call.path_and_query(lease),
            unix_now(),
            DEFAULT_TTL_SECS,
        )
        .map_err(|e| ClientError::Sign(e.to_string()))
    }

    /// `call` for `lease` with `authorization`; the answer when it is a success, else the
    /// agent's refusal.
    async fn checked(
        &self,
        lease: &Pubkey,
        call: &Call,
        authorization: &str,
    ) -> Result<Response<Incoming>, ClientError> {
        let response = self.send(lease, call, Some(authorization)).await?;
        let status = response.status();
        if status.is_success() || status == StatusCode::SWITCHING_PROTOCOLS {
            return Ok(response);
        }
        let body = read_small(response.into_body()).await?;
        let message = serde_json::from_slice::<ErrorBody>(&body)
            .map(|b| b.error)
            .unwrap_or_else(|_| String::from_utf8_lossy(&body).into_owned());
        Err(ClientError::Refused {
            status: status.as_u16(),
            message,
        })
    }

    /// Sends `call` for `lease` with `authorization` as given (none: unsigned), and returns the
    /// answer whatever its status.
    pub async fn send(
        &self,
        lease: &Pubkey,
        call: &Call,
        authorization: Option<&str>,
    ) -> Result<Response<Incoming>, ClientError> {
        let mut request = Request::builder()
            .method(call.endpoint().method())
            .uri(call.path_and_query(lease))
            .header(HOST, &self.addr);
        if let Some(authorization) = authorization {
            request = request.header(AUTHORIZATION, authorization);
        }
        if let Call::Exec { .. } = call {
            request = request
                .header(CONNECTION, "Upgrade")
                .header(UPGRADE, EXEC_PROTOCOL);
        }
        let request = request
            .body(Empty::new())
            .map_err(|e| ClientError::BadAnswer(format!("cannot build the request: {e}")))?;
        self.connect()
            .await?
            .send_request(request)
            .await
            .map_err(|source| self.http_error(source))
    }

    /// A new HTTP/1.1 connection over TLS to the agent, driven by a task of its own.
    async fn connect(&self) -> Result<SendRequest<Empty<Bytes>>, ClientError> {
        let tcp = TcpStream::connect(&self.addr)
            .await
            .map_err(|source| ClientError::Connect {
                addr: self.addr.clone(),
                source,
            })?;
        let name = ServerName::try_from(SERVER_NAME).expect("SERVER_NAME is a DNS name");
        let tls = self
            .tls
            .connect(name, tcp)
            .await
            .map_err(|source| ClientError::Tls {
                addr: self.addr.clone(),
                source,
            })?;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
            .await
            .map_err(|source| self.http_error(source))?;
        // Its errors reach the request or the body that it was serving.
        tokio::spawn(connection.with_upgrades());
        Ok(sender)
    }

    fn http_error(&self, source: hyper::Error) -> ClientError {
        ClientError::Http {
            addr: self.addr.clone(),
            source,
        }
    }
}

/// A body of at most [`MAX_SMALL_BODY`] bytes.
async fn read_small(body: Incoming) -> Result<Bytes, ClientError> {
    Limited::new(body, MAX_SMALL_BODY)
        .collect()
        .await
        .map(|collected| collected.to_bytes())
        .map_err(|e| ClientError::BadAnswer(e.to_string()))
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// A command started in a lease's container, its stream upgraded from the request's.
pub struct ExecSession {
    io: TokioIo<hyper::upgrade::Upgraded>,
}

impl ExecSession {
    /// Feeds `stdin` to the command (its end, or a failure to read or send it, ends the
    /// command's input) and each size of `resizes` to its terminal, while writing its output to
    /// `stdout` and `stderr` as it comes; returns its exit code once it exits, whether or not
    /// `stdin` was all read.
    pub async fn run(
        self,
        mut stdin: impl AsyncRead + Unpin + Send,
        mut stdout: impl AsyncWrite + Unpin + Send,
        mut stderr: impl AsyncWrite + Unpin + Send,
        resizes: impl Stream<Item = TermSize> + Send,
    ) -> Result<i64, ClientError> {
        let (mut from_agent, mut to_agent) = tokio::io::split(self.io);
        let feed = async {
            tokio::pin!(resizes);
            let mut buf = vec![0u8; 8 * 1024];
            loop {
                let frame = tokio::select! {
                    // A resize before the input that followed it, when both wait.
                    biased;
                    Some(size) = resizes.next() => ExecFrame::Resize(size),
                    read = stdin.read(&mut buf) => match read {
                        Ok(0) | Err(_) => break,
                        Ok(n) => ExecFrame::Stdin(buf[..n].to_vec()),
                    },
                };
                let mut wire = Vec::new();
                frame.encode(&mut wire);
                if to_agent.write_all(&wire).await.is_err() || to_agent.flush().await.is_err() {
                    break;
                }
            }
            let _ = to_agent.shutdown().await;
        };
        let drain = async {
            loop {
                let (out, data): (&mut (dyn AsyncWrite + Unpin + Send), _) =
                    match ExecFrame::read(&mut from_agent).await? {
                        Some(ExecFrame::Stdout(data)) => (&mut stdout, data),
                        Some(ExecFrame::Stderr(data)) => (&mut stderr, data),
                        Some(ExecFrame::Exit(code)) => return Ok(code),
                        Some(ExecFrame::Stdin(_) | ExecFrame::Resize(_)) => {
                            return Err(ClientError::BadAnswer(
                                "the agent sent a frame only a client sends".into(),
                            ))
                        }
                        None => return Err(ClientError::NoExitCode),
                    };
                out.write_all(&data).await.map_err(ClientError::Output)?;
                out.flush().await.map_err(ClientError::Output)?;
            }
        };
        tokio::pin!(feed, drain);
        let mut fed = false;
        loop {
            tokio::select! {
                () = &mut feed, if !fed => fed = true,
                code = &mut drain => return code,
            }
        }
    }
}
