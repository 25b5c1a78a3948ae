//! The agent's small HTTP server: `GET /metrics` (OpenMetrics text) and `GET /healthz` (200 or
//! 503 with a JSON body), one request a connection.
//!
//! A client gets [`ServerLimits::request_timeout`] to send its request head and as long to read
//! the answer, and at most [`ServerLimits::max_request_bytes`] of head: a client that connects
//! and sends nothing, or sends without end, costs one task for a bounded time, and at most
//! [`ServerLimits::max_connections`] are served at once (those over it are closed at once).
//! The head is parsed with `httparse`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::health::unix_now;
use super::Metrics;
use gpu_market_sdk::net::{accept_bounded, ConnectionCaps};

/// How the server bounds what one client may cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// Time to send the request head, and again to read the answer.
    pub request_timeout: Duration,
    /// The largest request head read; a longer one is answered 431.
    pub max_request_bytes: usize,
    /// Connections served at once.
    pub max_connections: usize,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            request_timeout: Duration::from_secs(5),
            max_request_bytes: 8 * 1024,
            max_connections: 64,
        }
    }
}

/// An HTTP answer.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Answer {
    status: u16,
    reason: &'static str,
    content_type: &'static str,
    body: String,
    extra_headers: &'static str,
}

impl Answer {
    fn empty(status: u16, reason: &'static str) -> Self {
        Answer {
            status,
            reason,
            content_type: "text/plain; charset=utf-8",
            body: String::new(),
            extra_headers: "",
        }
    }

    fn bytes(&self) -> Vec<u8> {
        format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{}Connection: close\r\n\r\n{}",
            self.status,
            self.reason,
            self.content_type,
            self.body.len(),
            self.extra_headers,
            self.body
        )
        .into_bytes()
    }
}

/// Serves `metrics` on `listener` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    limits: ServerLimits,
    shutdown: impl Future<Output = ()>,
) {
    accept_bounded(
        "metrics",
        listener,
        ConnectionCaps {
            total: limits.max_connections,
            per_peer: limits.max_connections,
        },
        shutdown,
        |socket| {
            let metrics = metrics.clone();
            async move { connection(socket, &metrics, limits).await }
        },
    )
    .await
}

async fn connection(mut socket: TcpStream, metrics: &Metrics, limits: ServerLimits) {
    let answer = match tokio::time::timeout(
        limits.request_timeout,
        read_head(&mut socket, limits.max_request_bytes),
    )
    .await
    {
        Err(_) => Answer::empty(408, "Request Timeout"),
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "metrics: reading a request failed");
            return;
        }
        Ok(Ok(Head::Closed)) => return,
        Ok(Ok(Head::TooLarge)) => Answer::empty(431, "Request Header Fields Too Large"),
        Ok(Ok(Head::Malformed)) => Answer::empty(400, "Bad Request"),
        Ok(Ok(Head::Request { method, path })) => route(&method, &path, metrics, unix_now()),
    };
    let written = tokio::time::timeout(limits.request_timeout, async {
        socket.write_all(&answer.bytes()).await?;
        socket.shutdown().await
    })
    .await;
    match written {
        Ok(Ok(())) => linger(&mut socket, limits).await,
        Ok(Err(e)) => tracing::debug!(error = %e, "metrics: writing an answer failed"),
        Err(_) => tracing::debug!("metrics: the client did not read its answer in time"),
    }
}

/// Reads and drops what the client still sends, within the limits, until it closes: closing
/// with unread request bytes (a head cut at the size bound) would reset the connection, which
/// can destroy the answer before the client reads it.
async fn linger(socket: &mut TcpStream, limits: ServerLimits) {
    let mut sink = [0u8; 1024];
    let mut left = limits.max_request_bytes;
    let _ = tokio::time::timeout(limits.request_timeout, async {
        while left > 0 {
            match socket.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    })
    .await;
}

/// What came in on a connection.
#[derive(Debug, PartialEq, Eq)]
enum Head {
    Request {
        method: String,
        path: String,
    },
    /// The client closed before a whole head.
    Closed,
    TooLarge,
    Malformed,
}

/// Reads one request head of at most `max` bytes.
async fn read_head(socket: &mut TcpStream, max: usize) -> std::io::Result<Head> {
    let mut buf = vec![0u8; max];
    let mut len = 0;
    loop {
        if len == max {
            return Ok(Head::TooLarge);
        }
        let n = socket.read(&mut buf[len..]).await?;
        if n == 0 {
            return Ok(Head::Closed);
        }
        len += n;
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut request = httparse::Request::new(&mut headers);
        match request.parse(&buf[..len]) {
            Ok(httparse::Status::Complete(_)) => {
                return Ok(Head::Request {
                    method: request.method.unwrap_or_default().to_string(),
                    path: request.path.unwrap_or_default().to_string(),
                })
            }
            Ok(httparse::Status::Partial) => continue,
            Err(httparse::Error::TooManyHeaders) => return Ok(Head::TooLarge),
            Err(_) => return Ok(Head::Malformed),
        }
    }
}

/// The answer to `method path` at `now` (unix seconds).
fn route(method: &str, path: &str, metrics: &Metrics, now: i64) -> Answer {
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    if !matches!(path, "/metrics" | "/healthz") {
        return Answer::empty(404, "Not Found");
    }
    if method != "GET" {
        return Answer {
            extra_headers: "Allow: GET\r\n",
            ..Answer::empty(405, "Method Not Allowed")
        };
    }
    if path == "/metrics" {
        return Answer {
            status: 200,
            reason: "OK",
            content_type: "application/openmetrics-text; version=1.0.0; charset=utf-8",
            body: metrics.render(now),
            extra_headers: "",
        };
    }
    let report = metrics.health().assess(now);
    let (status, reason) = if report.healthy {
        (200, "OK")
    } else {
        (503, "Service Unavailable")
    };
    Answer {
        status,
        reason,
        content_type: "application/json",
        body: serde_json::to_string(&report).expect("a health report serialises") + "\n",
        extra_headers: "",
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::time::Instant;

    use super::*;

    struct Server {
        addr: SocketAddr,
        metrics: Arc<Metrics>,
        stop: Option<tokio::sync::oneshot::Sender<()>>,
        task: tokio::task::JoinHandle<()>,
    }

    impl Server {
        async fn start(limits: ServerLimits) -> Server {
            let metrics = Arc::new(Metrics::default());
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let task = tokio::spawn(serve(listener, metrics.clone(), limits, async {
                stopped.await.ok();
            }));
            Server {
                addr,
                metrics,
                stop: Some(stop),
                task,
            }
        }

        /// Sends `request` and reads the answer up to the server's close (what came before a
        /// reset, if it resets).
        async fn ask(&self, request: &[u8]) -> String {
            let mut s = TcpStream::connect(self.addr).await.unwrap();
            if s.write_all(request).await.is_err() {
                return String::new();
            }
            let mut out = Vec::new();
            let _ = s.read_to_end(&mut out).await;
            String::from_utf8(out).unwrap()
        }

        async fn get(&self, path: &str) -> String {
            self.ask(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
                .await
        }

        async fn stop(mut self) {
            self.stop.take().unwrap().send(()).unwrap();
            self.task.await.unwrap();
        }
    }

    fn body(answer: &str) -> &str {
        answer.split_once("\r\n\r\n").unwrap().1
    }

    #[tokio::test]
    async fn metrics_are_served_in_the_openmetrics_text_format() {
        let server = Server::start(ServerLimits::default()).await;
        server.metrics.proof_accepted(1);
        let answer = server.get("/metrics").await;
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(
            answer.contains("Content-Type: application/openmetrics-text; version=1.0.0"),
            "{answer}"
        );
        assert!(
            body(&answer).contains("\ngpu_market_agent_proofs_accepted_total 1\n"),
            "{answer}"
        );
        assert!(body(&answer).ends_with("# EOF\n"), "{answer}");
        assert!(server.get("/").await.starts_with("HTTP/1.1 404"));
        let post = server
            .ask(b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
            .await;
        assert!(post.starts_with("HTTP/1.1 405"), "{post}");
        assert!(post.contains("Allow: GET\r\n"), "{post}");
        server.stop().await;
    }

    #[tokio::test]
    async fn healthz_answers_503_until_healthy_then_200_with_its_checks() {
        let server = Server::start(ServerLimits::default()).await;
        let answer = server.get("/healthz").await;
        assert!(
            answer.starts_with("HTTP/1.1 503 Service Unavailable\r\n"),
            "{answer}"
        );
        let report: serde_json::Value = serde_json::from_str(body(&answer)).unwrap();
        assert_eq!(report["healthy"], false);
        assert_eq!(report["engine"]["ok"], false);
        assert_eq!(
            report["websocket"]["secs_since_alive"],
            serde_json::Value::Null
        );

        server.metrics.health().engine_reachable(true);
        server.metrics.health().ws_alive(unix_now());
        let answer = server.get("/healthz").await;
        let report: serde_json::Value = serde_json::from_str(body(&answer)).unwrap();
        assert_eq!(report["tick"]["ok"], false, "the loop has not ticked yet");
        server.metrics.health().ticked(unix_now());
        let answer = server.get("/healthz?verbose").await;
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(answer.contains("Content-Type: application/json\r\n"));
        let report: serde_json::Value = serde_json::from_str(body(&answer)).unwrap();
        assert_eq!(report["healthy"], true, "{report}");
        assert_eq!(report["proofs"]["ok"], true);
        server.stop().await;
    }

    #[tokio::test]
    async fn a_silent_client_neither_holds_the_server_nor_its_connection_for_long() {
        let timeout = Duration::from_millis(300);
        let server = Server::start(ServerLimits {
            request_timeout: timeout,
            ..ServerLimits::default()
        })
        .await;
        let started = Instant::now();
        let mut silent = TcpStream::connect(server.addr).await.unwrap();
        // Others are served meanwhile, at once.
        let answer = server.get("/metrics").await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(started.elapsed() < timeout, "{:?}", started.elapsed());
        // The silent one is told 408 and closed once its time is up.
        let mut out = String::new();
        tokio::time::timeout(Duration::from_secs(5), silent.read_to_string(&mut out))
            .await
            .expect("the server closes a silent connection")
            .unwrap();
        assert!(out.starts_with("HTTP/1.1 408"), "{out}");
        assert!(started.elapsed() >= timeout);
        // A head sent byte by byte, too slowly, is cut off as well.
        let mut slow = TcpStream::connect(server.addr).await.unwrap();
        slow.write_all(b"GET /metr").await.unwrap();
        let mut out = String::new();
        tokio::time::timeout(Duration::from_secs(5), slow.read_to_string(&mut out))
            .await
            .unwrap()
            .unwrap();
        assert!(out.starts_with("HTTP/1.1 408"), "{out}");
        server.stop().await;
    }

    #[tokio::test]
    async fn oversized_and_malformed_requests_are_refused() {
        let server = Server::start(ServerLimits {
            max_request_bytes: 256,
            ..ServerLimits::default()
        })
        .await;
        let big = format!(
            "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Pad: {}\r\n\r\n",
            "a".repeat(300)
        );
        let answer = server.ask(big.as_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
        let answer = server.ask(b"\x00\x01 nonsense\r\n\r\n").await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
        // The server still serves after both.
        assert!(server.get("/healthz").await.starts_with("HTTP/1.1 503"));
        server.stop().await;
    }

    #[tokio::test]
    async fn connections_over_the_cap_are_closed_and_the_cap_frees_up() {
        let server = Server::start(ServerLimits {
            request_timeout: Duration::from_millis(300),
            max_connections: 1,
            ..ServerLimits::default()
        })
        .await;
        let holder = TcpStream::connect(server.addr).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let refused = server.get("/metrics").await;
        assert_eq!(refused, "", "closed without an answer");
        drop(holder);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(server.get("/metrics").await.starts_with("HTTP/1.1 200"));
        server.stop().await;
    }
}
