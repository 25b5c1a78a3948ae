//! Whether the agent is doing its job, for `/healthz`: its loop ticks, its proofs land (each
//! lease proven well before its client could call the host silent), its websocket feed is
//! alive, and the container engine answers.
//!
//! The reconcile loop and the websocket watcher report what they see through [`Health`]'s
//! setters; [`assess`] decides, as a pure function of what they reported and the time.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// What no report yet is stored as.
const NEVER: i64 = i64::MIN;

/// The defaults of the configuration's `[health]` keys.
pub const DEFAULT_PROOF_STALENESS_SECS: u64 = 1_800;
pub const DEFAULT_WEBSOCKET_SILENCE_SECS: u64 = 30;
pub const DEFAULT_TICK_STALENESS_SECS: u64 = 60;

/// How old each sign of life may be before the agent is unhealthy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthLimits {
    /// While a lease needs proofs: the longest since the chain last accepted one. Set it above
    /// the market's billing interval (a lease is proven once an interval).
    pub proof_staleness: Duration,
    /// The longest the websocket feed may go without a notification (a live node sends slot
    /// updates several times a second); the watcher then subscribes anew.
    pub websocket_silence: Duration,
    /// The longest since the reconcile loop last finished a tick (a loop stuck on a call); at
    /// least three billing polls.
    pub tick_staleness: Duration,
}

impl Default for HealthLimits {
    fn default() -> Self {
        HealthLimits {
            proof_staleness: Duration::from_secs(DEFAULT_PROOF_STALENESS_SECS),
            websocket_silence: Duration::from_secs(DEFAULT_WEBSOCKET_SILENCE_SECS),
            tick_staleness: Duration::from_secs(DEFAULT_TICK_STALENESS_SECS),
        }
    }
}

/// Seconds since the Unix epoch by this machine's clock.
pub fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The latest reports, shared by the reporters and the HTTP server.
#[derive(Debug)]
pub struct Health {
    limits: HealthLimits,
    last_proof_accepted: AtomicI64,
    leases_needing_proofs: AtomicU64,
    /// When the number of leases needing proofs last went up from zero.
    needing_since: AtomicI64,
    engine_reachable: AtomicBool,
    ws_alive: AtomicI64,
    /// By when (unix seconds) the lease closest to its silence must be proven: one billing
    /// interval before its client could reclaim the escrow and slash the host.
    prove_by: AtomicI64,
    last_tick: AtomicI64,
    /// The GPUs whose driver call hangs, one bit each by index.
    gpus_hung: AtomicU64,
}

impl Health {
    /// No proof accepted, no lease needing one, the engine not yet looked at (unreachable) and
    /// the websocket never alive: unhealthy until the agent has seen the engine and subscribed.
    pub fn new(limits: HealthLimits) -> Self {
        Health {
            limits,
            last_proof_accepted: AtomicI64::new(NEVER),
            leases_needing_proofs: AtomicU64::new(0),
            needing_since: AtomicI64::new(NEVER),
            engine_reachable: AtomicBool::new(false),
            ws_alive: AtomicI64::new(NEVER),
            prove_by: AtomicI64::new(NEVER),
            last_tick: AtomicI64::new(NEVER),
            gpus_hung: AtomicU64::new(0),
        }
    }

    pub fn limits(&self) -> HealthLimits {
        self.limits
    }

    /// The chain accepted a usage proof at `unix_secs`.
    pub fn proof_accepted(&self, unix_secs: i64) {
        self.last_proof_accepted
            .fetch_max(unix_secs, Ordering::Relaxed);
    }

    /// `n` leases need proofs as of `unix_secs`. A first one gives the agent the staleness bound
    /// to land its first proof, whenever the last proof before it was accepted.
    pub fn leases_needing_proofs(&self, n: u64, unix_secs: i64) {
        let before = self.leases_needing_proofs.swap(n, Ordering::Relaxed);
        if before == 0 && n > 0 {
            self.needing_since.store(unix_secs, Ordering::Relaxed);
        }
    }

    /// The lease closest to its silence must be proven by `unix_secs` (`None`: no lease owes a
    /// proof).
    pub fn prove_by(&self, unix_secs: Option<i64>) {
        self.prove_by
            .store(unix_secs.unwrap_or(NEVER), Ordering::Relaxed);
    }

    /// The reconcile loop finished a tick at `unix_secs`.
    pub fn ticked(&self, unix_secs: i64) {
        self.last_tick.fetch_max(unix_secs, Ordering::Relaxed);
    }

    /// The GPUs whose driver call hangs now ([`crate::gpu::watchdog`]).
    pub fn gpus_hung(&self, gpus: &[u32]) {
        let bits = gpus.iter().filter(|&&g| g < 64).fold(0, |b, g| b | 1 << g);
        self.gpus_hung.store(bits, Ordering::Relaxed);
    }

    /// Whether the container engine answered the agent's last call.
    pub fn engine_reachable(&self, reachable: bool) {
        self.engine_reachable.store(reachable, Ordering::Relaxed);
    }

    /// The websocket feed showed life at `unix_secs`: a notification, or a (re)subscription
    /// the node confirmed.
    pub fn ws_alive(&self, unix_secs: i64) {
        self.ws_alive.fetch_max(unix_secs, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> HealthSnapshot {
        let known = |v: i64| (v != NEVER).then_some(v);
        HealthSnapshot {
            last_proof_accepted: known(self.last_proof_accepted.load(Ordering::Relaxed)),
            leases_needing_proofs: self.leases_needing_proofs.load(Ordering::Relaxed),
            needing_since: known(self.needing_since.load(Ordering::Relaxed)),
            engine_reachable: self.engine_reachable.load(Ordering::Relaxed),
            ws_alive: known(self.ws_alive.load(Ordering::Relaxed)),
            prove_by: known(self.prove_by.load(Ordering::Relaxed)),
            last_tick: known(self.last_tick.load(Ordering::Relaxed)),
            gpus_hung: self.gpus_hung.load(Ordering::Relaxed),
        }
    }

    /// The verdict at `now` (unix seconds).
    pub fn assess(&self, now: i64) -> HealthReport {
        assess(&self.snapshot(), &self.limits, now)
    }
}

/// What the reporters last said; times in unix seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HealthSnapshot {
    pub last_proof_accepted: Option<i64>,
    pub leases_needing_proofs: u64,
    pub needing_since: Option<i64>,
    pub engine_reachable: bool,
    pub ws_alive: Option<i64>,
    pub prove_by: Option<i64>,
    pub last_tick: Option<i64>,
    /// The GPUs whose driver call hangs, one bit each by index.
    pub gpus_hung: u64,
}

/// `/healthz`'s answer: the verdict and each check behind it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HealthReport {
    pub healthy: bool,
    pub tick: Check,
    pub proofs: ProofCheck,
    pub websocket: Check,
    pub engine: EngineCheck,
    pub gpus: GpuCheck,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProofCheck {
    pub ok: bool,
    pub leases_needing_proofs: u64,
    /// Seconds since the chain last accepted a proof (`None`: never, since the agent started).
    pub secs_since_accepted: Option<i64>,
    pub stale_after_secs: u64,
    /// Seconds left to prove the lease closest to its silence before it is half an interval
    /// from reclaimable (negative: late; `None`: no lease owes a proof).
    pub secs_to_prove: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    pub ok: bool,
    /// Seconds since the last sign of life (`None`: none yet).
    pub secs_since_alive: Option<i64>,
    pub silent_after_secs: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EngineCheck {
    pub ok: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuCheck {
    pub ok: bool,
    /// The GPUs whose driver call has not returned within its budget: left alone (their
    /// leases metered with their last reading) until it does.
    pub hung: Vec<u32>,
}

/// Whether `at` (unix seconds) lies within `bound` of `now`.
fn within(at: Option<i64>, bound: Duration, now: i64) -> bool {
    at.is_some_and(|t| now.saturating_sub(t) <= bound.as_secs() as i64)
}

/// The verdict on `s` at `now`: healthy when
/// - the reconcile loop finished a tick within `limits.tick_staleness`;
/// - no lease needs a proof, or the chain accepted one within `limits.proof_staleness` of now,
///   counting from when leases began needing proofs if that is later (a first lease's first
///   proof comes only after its first interval);
/// - no lease is within half an interval of its silence window's end (`prove_by`);
/// - the websocket showed life within `limits.websocket_silence`;
/// - the container engine answered the last call made to it;
/// - no GPU's driver call hangs.
pub fn assess(s: &HealthSnapshot, limits: &HealthLimits, now: i64) -> HealthReport {
    let since_proof_due = s.last_proof_accepted.max(s.needing_since);
    let fresh =
        s.leases_needing_proofs == 0 || within(since_proof_due, limits.proof_staleness, now);
    let proofs = ProofCheck {
        ok: fresh && s.prove_by.is_none_or(|by| now < by),
        leases_needing_proofs: s.leases_needing_proofs,
        secs_since_accepted: s.last_proof_accepted.map(|t| now.saturating_sub(t)),
        stale_after_secs: limits.proof_staleness.as_secs(),
        secs_to_prove: s.prove_by.map(|by| by.saturating_sub(now)),
    };
    let tick = Check {
        ok: within(s.last_tick, limits.tick_staleness, now),
        secs_since_alive: s.last_tick.map(|t| now.saturating_sub(t)),
        silent_after_secs: limits.tick_staleness.as_secs(),
    };
    let websocket = Check {
        ok: within(s.ws_alive, limits.websocket_silence, now),
        secs_since_alive: s.ws_alive.map(|t| now.saturating_sub(t)),
        silent_after_secs: limits.websocket_silence.as_secs(),
    };
    let engine = EngineCheck {
        ok: s.engine_reachable,
    };
    let hung: Vec<u32> = (0..64).filter(|g| s.gpus_hung & 1 << g != 0).collect();
    let gpus = GpuCheck {
        ok: hung.is_empty(),
        hung,
    };
    HealthReport {
        healthy: tick.ok && proofs.ok && websocket.ok && engine.ok && gpus.ok,
        tick,
        proofs,
        websocket,
        engine,
        gpus,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> HealthLimits {
        HealthLimits {
            proof_staleness: Duration::from_secs(600),
            websocket_silence: Duration::from_secs(30),
            tick_staleness: Duration::from_secs(60),
        }
    }

    /// Everything fine at t = 1000: no lease, websocket alive at 990, a tick at 995, engine up.
    fn fine() -> HealthSnapshot {
        HealthSnapshot {
            engine_reachable: true,
            ws_alive: Some(990),
            last_tick: Some(995),
            ..Default::default()
        }
    }

    #[test]
    fn a_lease_one_interval_from_its_silence_or_a_stuck_loop_is_unhealthy() {
        // Before the fix a lease could go 30 minutes unproven (the staleness bound) while
        // its client could reclaim after 3 intervals: /healthz said healthy throughout.
        let s = HealthSnapshot {
            leases_needing_proofs: 1,
            needing_since: Some(990),
            prove_by: Some(1_060),
            ..fine()
        };
        let r = assess(&s, &limits(), 1_000);
        assert!(r.healthy, "{r:?}");
        assert_eq!(r.proofs.secs_to_prove, Some(60));
        let r = assess(&s, &limits(), 1_060);
        assert!(!r.healthy && !r.proofs.ok, "{r:?}");
        let r = assess(&fine(), &limits(), 1_056);
        assert!(!r.healthy && !r.tick.ok && r.proofs.ok, "{r:?}");
        assert_eq!(r.tick.secs_since_alive, Some(61));
    }

    #[test]
    fn without_leases_needing_proofs_no_proof_is_needed() {
        let r = assess(&fine(), &limits(), 1_000);
        assert!(r.healthy, "{r:?}");
        assert_eq!(r.proofs.secs_since_accepted, None);
    }

    #[test]
    fn a_proof_older_than_the_staleness_bound_is_unhealthy() {
        let s = HealthSnapshot {
            leases_needing_proofs: 2,
            needing_since: Some(0),
            last_proof_accepted: Some(400),
            ..fine()
        };
        assert!(assess(&s, &limits(), 1_000).healthy, "600 s: at the bound");
        let r = assess(&s, &limits(), 1_001);
        assert!(!r.healthy && !r.proofs.ok && r.websocket.ok, "{r:?}");
        assert_eq!(r.proofs.secs_since_accepted, Some(601));
    }

    #[test]
    fn a_first_lease_gets_the_bound_to_land_its_first_proof() {
        let s = HealthSnapshot {
            leases_needing_proofs: 1,
            needing_since: Some(900),
            last_proof_accepted: None,
            ..fine()
        };
        assert!(assess(&s, &limits(), 1_000).proofs.ok);
        assert!(!assess(&s, &limits(), 1_501).proofs.ok);
        // A proof long ago does not shorten the new lease's grace.
        let s = HealthSnapshot {
            last_proof_accepted: Some(10),
            ..s
        };
        assert!(assess(&s, &limits(), 1_000).proofs.ok);
    }

    #[test]
    fn a_silent_websocket_or_an_unreachable_engine_is_unhealthy() {
        let r = assess(&fine(), &limits(), 1_021);
        assert!(!r.healthy && !r.websocket.ok, "{r:?}");
        assert_eq!(r.websocket.secs_since_alive, Some(31));
        let never = HealthSnapshot {
            ws_alive: None,
            ..fine()
        };
        assert!(!assess(&never, &limits(), 1_000).websocket.ok);
        let down = HealthSnapshot {
            engine_reachable: false,
            ..fine()
        };
        let r = assess(&down, &limits(), 1_000);
        assert!(!r.healthy && !r.engine.ok && r.websocket.ok, "{r:?}");
    }

    #[test]
    fn the_setters_feed_the_verdict() {
        let h = Health::new(limits());
        assert!(!h.assess(1_000).healthy, "nothing seen yet");
        h.ticked(1_590);
        h.engine_reachable(true);
        h.ws_alive(995);
        h.ws_alive(990);
        assert_eq!(h.snapshot().ws_alive, Some(995), "times never go back");
        assert!(h.assess(1_000).healthy);
        h.leases_needing_proofs(1, 1_000);
        h.leases_needing_proofs(2, 1_500);
        assert_eq!(
            h.snapshot().needing_since,
            Some(1_000),
            "only 0 → n starts it"
        );
        h.ws_alive(1_600);
        assert!(!h.assess(1_601).proofs.ok);
        h.proof_accepted(1_590);
        assert!(h.assess(1_601).healthy);
        h.leases_needing_proofs(0, 1_700);
        h.leases_needing_proofs(1, 2_000);
        assert_eq!(h.snapshot().needing_since, Some(2_000));
    }
}
