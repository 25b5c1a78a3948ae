//! The README's demo, end to end: `scripts/demo.sh` on the suite's validator under `anchor test`
//! (else on a validator of its own, on free ports), the engine and the registry of
//! `scripts/engine.sh`, the real CLI and agent binaries. Checks,
//! from the JSON summary it writes and independently of the script's own check, that the token
//! is conserved to the last base unit, that a spot lease was preempted at an interval boundary
//! and its challenger ran after it, that the idle container's lease was flagged idle, then
//! ended by the market's idle rule, that the sealed secret was read back inside its container,
//! that every power log kept for a lease matches its proof on chain, and that a client reached
//! its lease's published port and fetched its result file after the lease.
//!
//! Needs what `scripts/test.sh` provides: the engine's variables (`eval "$(scripts/engine.sh
//! env)"`), `target/deploy/gpu_market.so`, solana-test-validator, and the workspace's binaries
//! built (`cargo nextest run --workspace` builds them; set `DEMO_BIN_DIR` to use others).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// Where the workspace's binaries are: `DEMO_BIN_DIR`, or the directory above this test's
/// `deps/` when both binaries are there (then the script builds nothing).
fn bin_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("DEMO_BIN_DIR") {
        return Some(dir.into());
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?.parent()?.to_path_buf();
    ["gpu-market", "gpu-market-agent"]
        .iter()
        .all(|b| dir.join(b).is_file())
        .then_some(dir)
}

fn u64_of(v: &Value, what: &str) -> u64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("{what} is not a count: {v}"))
}

fn i64_of(v: &Value, what: &str) -> i64 {
    v.as_i64()
        .unwrap_or_else(|| panic!("{what} is not a time: {v}"))
}

#[test]
fn the_demo_conserves_the_token_preempts_at_a_boundary_and_flags_and_ends_the_idle_lease() {
    for var in [
        "DOCKER_HOST",
        "GPU_MARKET_WORKER_DIGEST",
        "GPU_MARKET_IDLER_DIGEST",
        "GPU_MARKET_SERVER_DIGEST",
    ] {
        assert!(
            std::env::var_os(var).is_some(),
            "{var} is not set: start the engine with scripts/engine.sh start and eval \"$(scripts/engine.sh env)\""
        );
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let summary_path = dir.path().join("summary.json");
    let mut cmd = Command::new("bash");
    cmd.arg(root.join("scripts/demo.sh"))
        .current_dir(root)
        .env("DEMO_DIR", dir.path().join("demo"))
        .env("DEMO_SUMMARY", &summary_path);
    // Under `anchor test` the demo runs on the suite's validator (two validators on a 2-core
    // machine would only slow it); else on one of its own, on ports it finds free.
    if let Ok(url) = std::env::var("ANCHOR_PROVIDER_URL") {
        cmd.env("DEMO_URL", url);
    }
    if let Some(bins) = bin_dir() {
        cmd.env("DEMO_BIN_DIR", bins);
    }
    let started = std::time::Instant::now();
    let out = cmd.output().expect("run scripts/demo.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the demo failed ({}):\n{stdout}\n--- stderr ---\n{stderr}",
        out.status
    );
    println!(
        "the demo ran in {:.0} s; its end:\n{}",
        started.elapsed().as_secs_f64(),
        stdout
            .lines()
            .rev()
            .take(30)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n")
    );

    let s: Value = serde_json::from_str(&std::fs::read_to_string(&summary_path).unwrap())
        .expect("the summary is JSON");

    // Conservation, to the last base unit: every token account of the mint, before and after.
    let supply_before = u64_of(&s["supply_before"], "supply_before");
    let supply_after = u64_of(&s["supply_after"], "supply_after");
    let accounts = s["accounts"].as_array().expect("accounts");
    let mut seen = BTreeMap::new();
    for a in accounts {
        let key = a["account"].as_str().unwrap().to_string();
        assert!(
            seen.insert(key, ()).is_none(),
            "an account listed twice: {a}"
        );
    }
    let before: u64 = accounts
        .iter()
        .map(|a| u64_of(&a["before"], "before"))
        .sum();
    let after: u64 = accounts.iter().map(|a| u64_of(&a["after"], "after")).sum();
    assert_eq!(
        supply_before, supply_after,
        "the demo mints nothing after the start"
    );
    assert_eq!(before, supply_before, "Σ before == mint supply");
    assert_eq!(after, supply_after, "Σ after == mint supply");
    let label = |name: &str| {
        accounts
            .iter()
            .find(|a| a["label"] == name)
            .unwrap_or_else(|| panic!("no {name} row"))
    };
    assert_eq!(
        u64_of(&label("payment vault (escrow)")["after"], "vault"),
        0,
        "no escrow is left once every bid ended"
    );
    assert!(
        u64_of(&label("host")["after"], "host") > u64_of(&label("host")["before"], "host"),
        "the host was paid"
    );
    assert!(
        u64_of(&label("treasury (fees)")["after"], "treasury") > 0,
        "fees collected into the treasury by `market collect`"
    );
    let stakes: u64 = s["stakes_after"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| u64_of(v, "stake"))
        .sum();
    assert_eq!(
        stakes,
        u64_of(&label("stake vault")["after"], "stake vault"),
        "the stake vault holds exactly the stakes"
    );

    // The spot preemption: stopped at an interval boundary (a multiple of the interval: every
    // lease's windows fall on one grid) after its start, and the challenger started after that
    // and was proven.
    let p = &s["preemption"];
    assert_eq!(p["observed"], true, "{p}");
    let interval = i64_of(&s["interval_secs"], "interval_secs");
    let started_at = i64_of(&p["started_at"], "started_at");
    let stop_at = i64_of(&p["stop_at"], "stop_at");
    assert!(
        stop_at > started_at && stop_at % interval == 0,
        "the preempted lease stops at an interval boundary: started {started_at}, stop {stop_at}, interval {interval}"
    );
    // (`observed` is what the chain says, live or from its history once the lease settled; the
    // poller's last look may have come before the preemption.)
    assert_eq!(p["last_seen"]["kind"], "spot");
    let c = &p["challenger"];
    assert_ne!(c["lease"], p["lease"]);
    assert!(
        i64_of(&c["started_at"], "challenger started_at") >= stop_at,
        "the challenger starts once the preempted lease stopped: {c}"
    );
    assert!(
        u64_of(&c["proofs"], "challenger proofs") >= 1,
        "the challenger ran and was proven: {c}"
    );

    // The idle flag, on the lease whose container sleeps.
    let idle = &s["idle"];
    assert_eq!(
        idle["flagged"], true,
        "the idle container's lease is flagged; leases: {:#}",
        s["leases"]
    );
    assert_eq!(idle["last_seen"]["idle"], true, "{idle}");
    // Then ended by the market's idle rule (4 idle intervals of its 6), the rest refunded.
    let settled = &idle["settled"];
    assert_eq!(settled["status"], "settled", "{settled}");
    assert_eq!(
        settled["exit_code"],
        gpu_market_core::lease::exit::IDLE_ENDED,
        "{settled}"
    );
    assert_ne!(settled["refund"], "0", "{settled}");
    assert_eq!(
        s["busy"]["flagged"], false,
        "the busy worker's lease is not flagged idle; leases: {:#}",
        s["leases"]
    );
    assert_ne!(s["busy"]["lease"], idle["lease"]);

    // Alice's sealed secret, read back inside her container.
    assert_eq!(
        s["secret"], "only-the-agent-can-read-this",
        "{}",
        s["secret"]
    );
    // Every power log the agent kept for her lease is the one its proof on chain committed to.
    let audit = s["audit"].as_array().expect("audit rows");
    assert!(!audit.is_empty(), "the audit checked no interval");
    for row in audit {
        assert_eq!(row["verdict"], "consistent", "{row}");
    }

    // `lease exec -t` ran its command on a terminal (a pseudo-terminal in the container), at the
    // size the client's terminal has (script(1)'s tells none: 24 rows of 80).
    let tty = s["tty"].as_str().expect("the terminal's output");
    assert!(
        tty.contains("24 80") && tty.contains("/dev/pts/"),
        "{tty:?}"
    );

    // The client of a served lease reached its published port, and fetched its result file
    // through the agent's signed API after the lease had settled, with the hash of what it got.
    let served = &s["served"];
    let result = "epoch 1 loss=0.25\n";
    assert_eq!(served["http_body"], result.trim_end(), "{served}");
    assert_eq!(served["fetched"], result, "{served}");
    let copied = &served["copied"][0];
    let sha = solana_sha256_hasher::hash(result.as_bytes()).to_bytes();
    let hex: String = sha.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(copied["sha256"], hex.as_str(), "{served}");
}
