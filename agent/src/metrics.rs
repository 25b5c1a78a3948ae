//! The agent's `/metrics` endpoint in Prometheus' text format, served with a bare tokio listener:
//! one request a connection, `GET /metrics` or 404.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::gpu::Sample;

#[derive(Debug, Default)]
pub struct Metrics {
    pub leases_running: AtomicU64,
    pub proofs_sent: AtomicU64,
    pub proofs_failed: AtomicU64,
    pub rpc_errors: AtomicU64,
    gpus: Mutex<Vec<(u32, Sample)>>,
}

impl Metrics {
    pub fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The latest reading of every GPU.
    pub fn set_gpus(&self, samples: Vec<(u32, Sample)>) {
        *self.gpus.lock().expect("metrics lock") = samples;
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        let mut metric = |name: &str, kind: &str, help: &str, rows: Vec<(String, u64)>| {
            out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
            for (labels, v) in rows {
                out.push_str(&format!("{name}{labels} {v}\n"));
            }
        };
        let one = |c: &AtomicU64| vec![(String::new(), c.load(Ordering::Relaxed))];
        metric(
            "gpu_market_leases_running",
            "gauge",
            "Leases whose container runs on this machine.",
            one(&self.leases_running),
        );
        metric(
            "gpu_market_proofs_sent_total",
            "counter",
            "Usage proofs the chain accepted.",
            one(&self.proofs_sent),
        );
        metric(
            "gpu_market_proofs_failed_total",
            "counter",
            "Usage proof submissions that failed (each retried later).",
            one(&self.proofs_failed),
        );
        metric(
            "gpu_market_rpc_errors_total",
            "counter",
            "Calls to the cluster that failed.",
            one(&self.rpc_errors),
        );
        let gpus = self.gpus.lock().expect("metrics lock").clone();
        let per_gpu = |f: fn(&Sample) -> u64| {
            gpus.iter()
                .map(|(i, s)| (format!("{{gpu=\"{i}\"}}"), f(s)))
                .collect()
        };
        metric(
            "gpu_market_gpu_power_milliwatts",
            "gauge",
            "Power draw per GPU.",
            per_gpu(|s| s.power_mw as u64),
        );
        metric(
            "gpu_market_gpu_energy_millijoules_total",
            "counter",
            "Energy counter per GPU since the driver loaded.",
            per_gpu(|s| s.energy_mj),
        );
        metric(
            "gpu_market_gpu_utilisation_percent",
            "gauge",
            "Utilisation per GPU.",
            per_gpu(|s| s.utilisation_pct as u64),
        );
        out
    }
}

/// Serves `metrics` on `listener` until `shutdown` completes.
pub async fn serve(
    listener: TcpListener,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()>,
) {
    tokio::pin!(shutdown);
    loop {
        let (mut socket, _) = tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "metrics: accept failed");
                    continue;
                }
            },
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 1024];
            let n = socket.read(&mut buf).await.unwrap_or(0);
            let request = String::from_utf8_lossy(&buf[..n]);
            let response = if request.starts_with("GET /metrics ") {
                let body = metrics.render();
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                )
            } else {
                "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    .to_string()
            };
            if let Err(e) = socket.write_all(response.as_bytes()).await {
                tracing::debug!(error = %e, "metrics: write failed");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn get(addr: std::net::SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn metrics_are_served_in_prometheus_text_format() {
        let metrics = Arc::new(Metrics::default());
        Metrics::inc(&metrics.proofs_sent);
        Metrics::inc(&metrics.proofs_sent);
        metrics.set_gpus(vec![(
            1,
            Sample {
                power_mw: 250_000,
                energy_mj: 42,
                utilisation_pct: 97,
            },
        )]);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, metrics, async {
            stopped.await.ok();
        }));
        let body = get(addr, "/metrics").await;
        assert!(body.starts_with("HTTP/1.1 200 OK"), "{body}");
        assert!(
            body.contains("\ngpu_market_proofs_sent_total 2\n"),
            "{body}"
        );
        assert!(
            body.contains("# TYPE gpu_market_rpc_errors_total counter"),
            "{body}"
        );
        assert!(
            body.contains("gpu_market_gpu_power_milliwatts{gpu=\"1\"} 250000"),
            "{body}"
        );
        assert!(
            body.contains("gpu_market_gpu_utilisation_percent{gpu=\"1\"} 97"),
            "{body}"
        );
        assert!(get(addr, "/").await.starts_with("HTTP/1.1 404"));
        stop.send(()).unwrap();
        server.await.unwrap();
    }
}
