//! An exec session: the request is answered `101 Switching Protocols`, then the connection
//! carries [`ExecFrame`]s: the command's input from the client (until the client half-closes)
//! and, for a session with a terminal, the terminal's new sizes; the command's output to the
//! client, its exit code last.
//!
//! The command is created before the answer, so that a container that is not running is
//! refused with a status. It runs as the container's user, unprivileged; with `tty`, on a
//! terminal of the size the request gave (`docker exec -t`), its output one stream.
//! A client that goes away stops its input and output, not the command; the session holds one
//! of its lease's exec slots (`super::MAX_EXEC_SESSIONS`) until the command ends.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bollard::container::LogOutput;
use bollard::errors::Error as BollardError;
use futures_util::StreamExt;
use gpu_market_sdk::api::{ExecFrame, TermSize, EXEC_PROTOCOL};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderValue, CONNECTION, UPGRADE};
use hyper::upgrade::Upgraded;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

use super::engine::{engine_status, ExecInput, ExecOutput};
use super::routes::{with_type, Body, Refusal};
use crate::docker::DockerEngine;
use gpu_market_sdk::net::Slot;
use solana_pubkey::Pubkey;

#[derive(Debug, thiserror::Error)]
enum SessionError {
    #[error("the connection was not upgraded: {0}")]
    Upgrade(#[from] hyper::Error),
    #[error("the engine: {0}")]
    Engine(#[from] BollardError),
    #[error("the client's stream: {0}")]
    Client(#[from] std::io::Error),
}

/// What to run: the command, and the size of its terminal if it has one.
pub(super) type Command = (Vec<String>, Option<TermSize>);

/// Answers an exec request for `cmd` in container `id`: creates the command, answers 101, and
/// runs the session once the connection is handed over.
pub(super) async fn upgrade(
    engine: Arc<DockerEngine>,
    id: &str,
    (cmd, tty): Command,
    request: Request<Incoming>,
    slot: Slot<Pubkey>,
) -> Result<Response<Body>, Refusal> {
    if !asks_for_exec(request.headers()) {
        return Err(Refusal::NoUpgrade);
    }
    let exec_id = engine
        .create_exec(id, cmd, tty)
        .await
        .map_err(|e| match engine_status(&e) {
            // 409: stopped; 404: removed meanwhile.
            Some(404 | 409) => Refusal::NotRunning,
            _ => Refusal::Engine(e),
        })?;
    let upgrade = hyper::upgrade::on(request);
    tokio::spawn(async move {
        let session = match upgrade.await {
            Ok(upgraded) => session(&engine, &exec_id, tty, TokioIo::new(upgraded)).await,
            Err(e) => Err(e.into()),
        };
        if let Err(e) = session {
            tracing::debug!(error = %e, exec = %exec_id, "api: an exec session ended early");
        }
        drop(slot);
    });
    let empty = Empty::new().map_err(|never| match never {});
    let mut response = with_type("application/octet-stream", BodyExt::boxed_unsync(empty));
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = response.headers_mut();
    headers.insert(CONNECTION, HeaderValue::from_static("Upgrade"));
    headers.insert(UPGRADE, HeaderValue::from_static(EXEC_PROTOCOL));
    Ok(response)
}

/// Whether the request asks to upgrade its connection to [`EXEC_PROTOCOL`].
fn asks_for_exec(headers: &HeaderMap) -> bool {
    let has = |name, token: &str| {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    };
    has(CONNECTION, "upgrade") && has(UPGRADE, EXEC_PROTOCOL)
}

/// Starts exec `exec_id` (on a terminal of size `tty` if given) and relays it over `io` until
/// it exits; sends its exit code.
async fn session(
    engine: &Arc<DockerEngine>,
    exec_id: &str,
    tty: Option<TermSize>,
    io: TokioIo<Upgraded>,
) -> Result<(), SessionError> {
    let (mut output, input) = engine.start_exec(exec_id, tty.is_some()).await?;
    // Engines before API 1.42 (Docker 23) ignore the size given at creation: set it now, before
    // any of the client's input reaches the command (its first instant may still see none).
    if let Some(size) = tty {
        engine.resize_exec(exec_id, size).await?;
    }
    let (from_client, mut to_client) = tokio::io::split(io);
    let terminal = tty.map(|_| {
        let (engine, exec_id) = (engine.clone(), exec_id.to_string());
        move |size| {
            let (engine, exec_id) = (engine.clone(), exec_id.clone());
            async move {
                if let Err(e) = engine.resize_exec(&exec_id, size).await {
                    tracing::debug!(error = %e, exec = %exec_id, "api: a resize was refused");
                }
            }
        }
    });
    let feed = tokio::spawn(feed(terminal, from_client, input));
    let relayed = relay(&mut output, &mut to_client).await;
    feed.abort();
    relayed?;
    let code = engine.exec_exit_code(exec_id).await?;
    send(&mut to_client, ExecFrame::Exit(code)).await?;
    to_client.shutdown().await?;
    Ok(())
}

/// The most often a session's terminal is resized. A client sends a frame for each change of
/// its window (a drag sends dozens a second; a hostile one, as many as its link carries), and
/// each resize is an engine call that the agent's own calls (the proofs' readings among them)
/// queue behind; the sizes between two calls are skipped, and the last one is always applied.
const RESIZE_PERIOD: Duration = Duration::from_millis(100);

/// The client's frames into the command: its input, and for a session with a terminal
/// (`resize`, which sets its size), its new sizes, at most one a [`RESIZE_PERIOD`]: a size that
/// comes sooner waits, replaced by any later one, until the period is over or input follows it
/// (a resize goes before the input the client sent after it). The client's half-close, its
/// going away, or a frame it should not send (a resize without a terminal) is the command's end
/// of input.
async fn feed<F, Fut>(resize: Option<F>, from_client: impl AsyncRead + Unpin, mut input: ExecInput)
where
    F: Fn(TermSize) -> Fut,
    Fut: Future<Output = ()>,
{
    // A stream of frames, so that waiting for the next one can be given up for a due resize
    // without losing what was read of it.
    let frames = futures_util::stream::unfold(from_client, |mut from| async move {
        match ExecFrame::read(&mut from).await {
            Ok(Some(frame)) => Some((frame, from)),
            _ => None,
        }
    });
    tokio::pin!(frames);
    let mut waiting: Option<TermSize> = None;
    let mut next_resize = Instant::now();
    loop {
        let frame = tokio::select! {
            frame = frames.next() => frame,
            () = tokio::time::sleep_until(next_resize), if waiting.is_some() => {
                if let (Some(resize), Some(size)) = (&resize, waiting.take()) {
                    resize(size).await;
                }
                next_resize = Instant::now() + RESIZE_PERIOD;
                continue;
            }
        };
        let fed = match (frame, &resize) {
            (Some(ExecFrame::Stdin(data)), _) => {
                if let (Some(resize), Some(size)) = (&resize, waiting.take()) {
                    tokio::time::sleep_until(next_resize).await;
                    resize(size).await;
                    next_resize = Instant::now() + RESIZE_PERIOD;
                }
                input.write_all(&data).await.is_ok()
            }
            (Some(ExecFrame::Resize(size)), Some(resize)) => {
                if waiting.is_none() && Instant::now() >= next_resize {
                    resize(size).await;
                    next_resize = Instant::now() + RESIZE_PERIOD;
                } else {
                    waiting = Some(size);
                }
                true
            }
            _ => false,
        };
        if !fed {
            break;
        }
    }
    let _ = input.shutdown().await;
}

/// Sends the command's output as it comes, until it ends.
async fn relay(
    output: &mut ExecOutput,
    to_client: &mut (impl AsyncWrite + Unpin),
) -> Result<(), SessionError> {
    while let Some(chunk) = output.next().await {
        let frame = match chunk? {
            LogOutput::StdErr { message } => ExecFrame::Stderr(message.to_vec()),
            other => ExecFrame::Stdout(other.into_bytes().to_vec()),
        };
        send(to_client, frame).await?;
    }
    Ok(())
}

async fn send(to_client: &mut (impl AsyncWrite + Unpin), frame: ExecFrame) -> std::io::Result<()> {
    let mut wire = Vec::new();
    frame.encode(&mut wire);
    to_client.write_all(&wire).await?;
    to_client.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exec_request_must_ask_for_the_exec_upgrade() {
        let headers = |pairs: &[(&'static str, &'static str)]| {
            let mut map = HeaderMap::new();
            for (name, value) in pairs {
                map.append(*name, HeaderValue::from_static(value));
            }
            map
        };
        assert!(asks_for_exec(&headers(&[
            ("connection", "keep-alive, Upgrade"),
            ("upgrade", "gpu-market-exec"),
        ])));
        assert!(!asks_for_exec(&headers(&[("upgrade", "gpu-market-exec")])));
        assert!(!asks_for_exec(&headers(&[
            ("connection", "upgrade"),
            ("upgrade", "websocket"),
        ])));
    }

    /// What the command and its terminal got, in order: `resize ROWS` and `input TEXT`.
    #[derive(Clone, Default)]
    struct Seen(Arc<std::sync::Mutex<Vec<String>>>);

    impl Seen {
        fn push(&self, what: String) {
            self.0.lock().unwrap().push(what);
        }

        fn all(&self) -> Vec<String> {
            self.0.lock().unwrap().clone()
        }
    }

    impl AsyncWrite for Seen {
        fn poll_write(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            self.push(format!("input {}", String::from_utf8_lossy(buf)));
            std::task::Poll::Ready(Ok(buf.len()))
        }

        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }

        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    /// A client floods a terminal session with a resize frame every millisecond for two
    /// seconds, then types: the engine is asked to resize at most once a period, the last size
    /// is applied, and before the input that followed it. Before, each of the 2,000 frames was
    /// an engine call, one after another.
    #[tokio::test(start_paused = true)]
    async fn a_flood_of_resizes_is_at_most_one_engine_call_a_period_and_the_last_size_wins() {
        let size = |rows: u16| TermSize { rows, cols: 80 };
        let seen = Seen::default();
        let record = seen.clone();
        let resize = move |size: TermSize| {
            let record = record.clone();
            async move { record.push(format!("resize {}", size.rows)) }
        };
        let (mut client, from_client) = tokio::io::duplex(1 << 16);
        let flood = tokio::spawn(async move {
            let send = |frame: ExecFrame| {
                let mut wire = Vec::new();
                frame.encode(&mut wire);
                wire
            };
            for rows in 1..=2_000 {
                client
                    .write_all(&send(ExecFrame::Resize(size(rows))))
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            client
                .write_all(&send(ExecFrame::Stdin(b"ls".to_vec())))
                .await
                .unwrap();
        });
        let started = Instant::now();
        feed(Some(resize), from_client, Box::pin(seen.clone())).await;
        flood.await.unwrap();
        let seen = seen.all();
        let resizes = seen.iter().filter(|s| s.starts_with("resize")).count();
        let periods = started.elapsed().as_millis() / RESIZE_PERIOD.as_millis() + 1;
        assert!(
            (resizes as u128) <= periods && periods < 40,
            "{resizes} engine calls in {periods} periods"
        );
        assert_eq!(
            seen[seen.len() - 2..],
            ["resize 2000".to_string(), "input ls".to_string()],
            "{seen:?}"
        );
    }
}
