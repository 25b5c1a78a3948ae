//! What the agent tells its operator: Prometheus metrics at `/metrics` and a health verdict at
//! `/healthz` ([`server::serve`]).
//!
//! Metrics are in base units (seconds, watts, joules, ratios 0..1), counters end in `_total`,
//! and every family has HELP and TYPE lines: the OpenMetrics text format, written by the
//! `prometheus-client` crate. Latencies are histograms, not summaries: Prometheus can aggregate
//! histograms across a fleet of hosts and compute any quantile afterwards, which summaries'
//! precomputed per-process quantiles do not allow.
//!
//! The reconcile loop and the websocket watcher report through [`Metrics`]' methods; each
//! method names the event (`proof_accepted`, `observe_pull`, ...), not the metric it moves.

pub mod health;
pub mod server;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gpu_market_core::lease::exit;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

pub use self::health::{unix_now, Health, HealthLimits, HealthReport};
pub use self::server::{serve, ServerLimits};
use crate::chain::traffic::Traffic;
use crate::gpu::Sample;

/// The prefix of every metric the agent exports.
pub const PREFIX: &str = "gpu_market_agent";

/// Upper bounds (seconds) of the buckets of image pulls and container starts: from a cached
/// image's start (under a second) to a pull of tens of GB over a slow link (half an hour).
const LATENCY_BUCKETS: [f64; 12] = [
    0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0,
];

/// A label set of one label with a fixed value.
type Label = [(&'static str, &'static str); 1];

/// Why a call to the cluster failed, as `ChainError::is_transient` tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RpcErrorKind {
    /// No answer, or an answer that may change on retry (node behind, blockhash expired).
    Unavailable,
    /// The node or the program refused the request as it stands.
    Refused,
}

impl RpcErrorKind {
    pub fn label(self) -> &'static str {
        match self {
            RpcErrorKind::Unavailable => "unavailable",
            RpcErrorKind::Refused => "refused",
        }
    }
}

/// The `reason` label of a lease that ended with `code` (the final proof's exit code,
/// `gpu_market_core::lease::exit`): one short word per host-side code, and a few classes of
/// container exits, so that the label has a bounded number of values.
pub fn exit_label(code: i32) -> &'static str {
    match code {
        0 => "completed",
        exit::SETTINGS_REFUSED => "settings_refused",
        exit::CONTAINER_LOST => "container_lost",
        exit::IMAGE_UNAVAILABLE => "image_unavailable",
        exit::ENVIRONMENT_UNAVAILABLE => "environment_unavailable",
        exit::ENGINE_REFUSED => "engine_refused",
        exit::ISOLATION_UNAVAILABLE => "isolation_unavailable",
        exit::OVER_SLICE => "over_slice",
        c if c > 128 && c <= 128 + 64 => "killed_by_signal",
        c if c > 0 => "failed",
        _ => "host_other",
    }
}

/// Everything the agent measures, shared by the loop, the watcher and the HTTP server.
#[derive(Debug)]
pub struct Metrics {
    leases_running: AtomicU64,
    proofs_sent: AtomicU64,
    proofs_failed: AtomicU64,
    rpc_requests: AtomicU64,

    rpc_errors_by_kind: Family<Label, Counter>,
    leases_ended: Family<Label, Counter>,
    pulls_failed: Counter,
    pull_seconds: Histogram,
    start_seconds: Histogram,
    tick_seconds: Histogram,
    ws_resubscriptions: Counter,
    traffic: Arc<Traffic>,
    gpus: Mutex<Vec<(u32, Sample)>>,
    health: Health,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new(HealthLimits::default())
    }
}

impl Metrics {
    pub fn new(limits: HealthLimits) -> Self {
        Metrics {
            leases_running: AtomicU64::new(0),
            proofs_sent: AtomicU64::new(0),
            proofs_failed: AtomicU64::new(0),
            rpc_requests: AtomicU64::new(0),
            rpc_errors_by_kind: Family::default(),
            leases_ended: Family::default(),
            pulls_failed: Counter::default(),
            pull_seconds: Histogram::new(LATENCY_BUCKETS),
            start_seconds: Histogram::new(LATENCY_BUCKETS),
            // 10 ms to 41 s: a tick is a few RPC round trips, more when it starts containers.
            tick_seconds: Histogram::new(exponential_buckets(0.01, 2.0, 13)),
            ws_resubscriptions: Counter::default(),
            traffic: Arc::default(),
            gpus: Mutex::new(Vec::new()),
            health: Health::new(limits),
        }
    }

    pub fn health(&self) -> &Health {
        &self.health
    }

    /// The bytes exchanged with the RPC node (the chain client's transport and the websocket
    /// feed add to it).
    pub fn traffic(&self) -> &Arc<Traffic> {
        &self.traffic
    }

    /// `n` leases have a running container on this machine.
    pub fn set_leases_running(&self, n: u64) {
        self.leases_running.store(n, Ordering::Relaxed);
    }

    /// The chain accepted a usage proof at `unix_secs` (the loop's chain clock).
    pub fn proof_accepted(&self, unix_secs: i64) {
        self.proofs_sent.fetch_add(1, Ordering::Relaxed);
        self.health.proof_accepted(unix_secs);
    }

    /// A usage proof submission failed (it is retried later).
    pub fn proof_failed(&self) {
        self.proofs_failed.fetch_add(1, Ordering::Relaxed);
    }

    /// `n` JSON-RPC requests were sent to the cluster so far.
    pub fn set_rpc_requests(&self, n: u64) {
        self.rpc_requests.store(n, Ordering::Relaxed);
    }

    /// A call to the cluster failed; `transient` as `ChainError::is_transient` says.
    pub fn rpc_error(&self, transient: bool) {
        let kind = if transient {
            RpcErrorKind::Unavailable
        } else {
            RpcErrorKind::Refused
        };
        self.rpc_errors_by_kind
            .get_or_create(&[("kind", kind.label())])
            .inc();
    }

    /// An image pull that succeeded took `took`.
    pub fn observe_pull(&self, took: Duration) {
        self.pull_seconds.observe(took.as_secs_f64());
    }

    /// An image pull failed.
    pub fn pull_failed(&self) {
        self.pulls_failed.inc();
    }

    /// A lease's container was running `took` after its bid was confirmed allocated.
    pub fn observe_start(&self, took: Duration) {
        self.start_seconds.observe(took.as_secs_f64());
    }

    /// A reconcile tick took `took`.
    pub fn observe_tick(&self, took: Duration) {
        self.tick_seconds.observe(took.as_secs_f64());
    }

    /// A lease ended with exit code `code` (`gpu_market_core::lease::exit`).
    pub fn lease_ended(&self, code: i32) {
        self.leases_ended
            .get_or_create(&[("reason", exit_label(code))])
            .inc();
    }

    /// The websocket watcher subscribed anew after its feed failed or went silent.
    pub fn ws_resubscribed(&self) {
        self.ws_resubscriptions.inc();
    }

    /// The latest reading of every GPU.
    pub fn set_gpus(&self, samples: Vec<(u32, Sample)>) {
        *self.gpus.lock().expect("metrics lock") = samples;
    }

    /// Proofs the chain accepted so far.
    pub fn proofs_accepted(&self) -> u64 {
        self.proofs_sent.load(Ordering::Relaxed)
    }

    /// Proof submissions that failed so far.
    pub fn proofs_failed(&self) -> u64 {
        self.proofs_failed.load(Ordering::Relaxed)
    }

    /// Calls to the cluster that failed with `kind` so far.
    pub fn rpc_errors_of(&self, kind: RpcErrorKind) -> u64 {
        self.rpc_errors_by_kind
            .get(&[("kind", kind.label())])
            .map_or(0, |c| c.get())
    }

    /// The OpenMetrics text of every metric, the health verdict at `now` (unix seconds)
    /// included.
    pub fn render(&self, now: i64) -> String {
        let mut r = Registry::with_prefix(PREFIX);
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        r.register(
            "leases_running",
            "Leases whose container runs on this machine",
            ConstGauge::new(load(&self.leases_running) as i64),
        );
        r.register(
            "proofs_accepted",
            "Usage proofs the chain accepted",
            ConstCounter::new(load(&self.proofs_sent)),
        );
        r.register(
            "proofs_failed",
            "Usage proof submissions that failed (each is retried later)",
            ConstCounter::new(load(&self.proofs_failed)),
        );
        r.register(
            "rpc_requests",
            "JSON-RPC requests sent to the cluster (websocket notifications not counted)",
            ConstCounter::new(load(&self.rpc_requests)),
        );
        r.register(
            "rpc_bytes",
            "Bytes of JSON-RPC requests and answers exchanged with the cluster over HTTP",
            ConstCounter::new(self.traffic.http_bytes()),
        );
        r.register(
            "websocket_bytes",
            "Bytes of the websocket feed's notifications",
            ConstCounter::new(self.traffic.websocket_bytes()),
        );
        r.register(
            "rpc_errors",
            "Calls to the cluster that failed, by kind: unavailable (no answer, or one that may \
             change on retry) or refused",
            self.rpc_errors_by_kind.clone(),
        );
        r.register(
            "image_pulls_failed",
            "Image pulls that failed",
            self.pulls_failed.clone(),
        );
        r.register_with_unit(
            "image_pull",
            "Time an image pull that succeeded took",
            Unit::Seconds,
            self.pull_seconds.clone(),
        );
        r.register_with_unit(
            "container_start",
            "Time from a bid's allocation being confirmed to its container running",
            Unit::Seconds,
            self.start_seconds.clone(),
        );
        r.register_with_unit(
            "tick",
            "Time a reconcile tick took",
            Unit::Seconds,
            self.tick_seconds.clone(),
        );
        r.register(
            "leases_ended",
            "Leases this machine ended, by the reason of their final proof's exit code",
            self.leases_ended.clone(),
        );
        r.register(
            "websocket_resubscriptions",
            "Times the websocket watcher subscribed anew after its feed failed or went silent",
            self.ws_resubscriptions.clone(),
        );
        r.register(
            "healthy",
            "1 when /healthz answers 200, else 0",
            ConstGauge::new(self.health.assess(now).healthy as i64),
        );
        self.register_gpus(&mut r);
        let mut out = String::new();
        encode(&mut out, &r).expect("writing into a String does not fail");
        out
    }

    fn register_gpus(&self, r: &mut Registry) {
        type PerGpu<M> = Family<[(&'static str, String); 1], M>;
        let power: PerGpu<Gauge<f64, AtomicU64>> = Family::default();
        let energy: PerGpu<Counter<f64, AtomicU64>> = Family::default();
        let utilisation: PerGpu<Gauge<f64, AtomicU64>> = Family::default();
        for (index, s) in self.gpus.lock().expect("metrics lock").iter() {
            let gpu = [("gpu", index.to_string())];
            power.get_or_create(&gpu).set(s.power_mw as f64 / 1e3);
            energy.get_or_create(&gpu).inc_by(s.energy_mj as f64 / 1e3);
            utilisation
                .get_or_create(&gpu)
                .set(s.utilisation_pct as f64 / 100.0);
        }
        r.register_with_unit(
            "gpu_power",
            "Power draw per GPU",
            Unit::Other("watts".into()),
            power,
        );
        r.register_with_unit(
            "gpu_energy",
            "Energy each GPU used since its driver loaded",
            Unit::Joules,
            energy,
        );
        r.register_with_unit(
            "gpu_utilisation",
            "Share of time each GPU was busy, 0 to 1",
            Unit::Other("ratio".into()),
            utilisation,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exposition's lines, for exact matches.
    fn lines(text: &str) -> Vec<&str> {
        text.lines().collect()
    }

    #[test]
    fn the_exposition_is_in_base_units_with_help_type_and_total() {
        let m = Metrics::default();
        m.set_leases_running(2);
        m.proof_accepted(100);
        m.proof_accepted(160);
        m.proof_failed();
        m.rpc_error(true);
        m.rpc_error(true);
        m.rpc_error(false);
        m.set_gpus(vec![(
            1,
            Sample {
                power_mw: 250_500,
                energy_mj: 42_000,
                utilisation_pct: 97,
                mem_utilisation_pct: 0,
            },
        )]);
        let text = m.render(200);
        let l = lines(&text);
        for expected in [
            "# HELP gpu_market_agent_leases_running Leases whose container runs on this machine.",
            "# TYPE gpu_market_agent_leases_running gauge",
            "gpu_market_agent_leases_running 2",
            "# TYPE gpu_market_agent_proofs_accepted counter",
            "gpu_market_agent_proofs_accepted_total 2",
            "gpu_market_agent_proofs_failed_total 1",
            "# TYPE gpu_market_agent_rpc_errors counter",
            "gpu_market_agent_rpc_errors_total{kind=\"unavailable\"} 2",
            "gpu_market_agent_rpc_errors_total{kind=\"refused\"} 1",
            "# TYPE gpu_market_agent_gpu_power_watts gauge",
            "# UNIT gpu_market_agent_gpu_power_watts watts",
            "gpu_market_agent_gpu_power_watts{gpu=\"1\"} 250.5",
            "# TYPE gpu_market_agent_gpu_energy_joules counter",
            "gpu_market_agent_gpu_energy_joules_total{gpu=\"1\"} 42.0",
            "gpu_market_agent_gpu_utilisation_ratio{gpu=\"1\"} 0.97",
            "gpu_market_agent_healthy 0",
            "# EOF",
        ] {
            assert!(l.contains(&expected), "no line {expected:?} in\n{text}");
        }
        assert!(
            !text.contains("milli") && !text.contains("percent"),
            "{text}"
        );
        assert_eq!(m.proofs_accepted(), 2);
        assert_eq!(m.proofs_failed(), 1);
        assert_eq!(m.rpc_errors_of(RpcErrorKind::Unavailable), 2);
        assert_eq!(m.rpc_errors_of(RpcErrorKind::Refused), 1);
    }

    #[test]
    fn latencies_are_histograms_in_seconds() {
        let m = Metrics::default();
        m.observe_pull(Duration::from_millis(7_500));
        m.observe_pull(Duration::from_secs(400));
        m.pull_failed();
        m.observe_start(Duration::from_millis(800));
        m.observe_tick(Duration::from_millis(15));
        let text = m.render(0);
        let l = lines(&text);
        for expected in [
            "# TYPE gpu_market_agent_image_pull_seconds histogram",
            "# UNIT gpu_market_agent_image_pull_seconds seconds",
            "gpu_market_agent_image_pull_seconds_sum 407.5",
            "gpu_market_agent_image_pull_seconds_count 2",
            "gpu_market_agent_image_pull_seconds_bucket{le=\"5.0\"} 0",
            "gpu_market_agent_image_pull_seconds_bucket{le=\"10.0\"} 1",
            "gpu_market_agent_image_pull_seconds_bucket{le=\"600.0\"} 2",
            "gpu_market_agent_image_pull_seconds_bucket{le=\"+Inf\"} 2",
            "gpu_market_agent_image_pulls_failed_total 1",
            "gpu_market_agent_container_start_seconds_bucket{le=\"1.0\"} 1",
            "gpu_market_agent_tick_seconds_bucket{le=\"0.01\"} 0",
            "gpu_market_agent_tick_seconds_bucket{le=\"0.02\"} 1",
        ] {
            assert!(l.contains(&expected), "no line {expected:?} in\n{text}");
        }
    }

    #[test]
    fn leases_ended_are_counted_by_a_bounded_reason() {
        let m = Metrics::default();
        for code in [0, 0, exit::IMAGE_UNAVAILABLE, 137, 1, -99] {
            m.lease_ended(code);
        }
        let text = m.render(0);
        let l = lines(&text);
        for expected in [
            "gpu_market_agent_leases_ended_total{reason=\"completed\"} 2",
            "gpu_market_agent_leases_ended_total{reason=\"image_unavailable\"} 1",
            "gpu_market_agent_leases_ended_total{reason=\"killed_by_signal\"} 1",
            "gpu_market_agent_leases_ended_total{reason=\"failed\"} 1",
            "gpu_market_agent_leases_ended_total{reason=\"host_other\"} 1",
        ] {
            assert!(l.contains(&expected), "no line {expected:?} in\n{text}");
        }
        for (code, label) in [
            (exit::SETTINGS_REFUSED, "settings_refused"),
            (exit::CONTAINER_LOST, "container_lost"),
            (exit::ENVIRONMENT_UNAVAILABLE, "environment_unavailable"),
            (exit::ENGINE_REFUSED, "engine_refused"),
            (exit::ISOLATION_UNAVAILABLE, "isolation_unavailable"),
            (exit::OVER_SLICE, "over_slice"),
            (128 + 64, "killed_by_signal"),
            (128 + 65, "failed"),
        ] {
            assert_eq!(exit_label(code), label, "code {code}");
        }
    }

    #[test]
    fn the_healthy_gauge_follows_the_health_verdict() {
        let m = Metrics::default();
        m.health().engine_reachable(true);
        m.health().ws_alive(100);
        m.health().ticked(100);
        assert!(lines(&m.render(100)).contains(&"gpu_market_agent_healthy 1"));
        m.ws_resubscribed();
        let text = m.render(100_000);
        assert!(
            lines(&text).contains(&"gpu_market_agent_healthy 0"),
            "{text}"
        );
        assert!(lines(&text).contains(&"gpu_market_agent_websocket_resubscriptions_total 1"));
    }
}
