//! The rules that enforce a host's promises, used from the CLI against a private
//! solana-test-validator: a client takes back the escrow of a lease whose host went silent
//! (`lease reclaim`), and anyone slashes a host on the evidence its own proofs left (`host
//! slash`); each refused, with nothing sent, until the program would accept it.

mod common;

use common::*;
use gpu_market::state::{Bid, Lease};
use gpu_market_core::evidence::{GpuPowerLog, PowerLog};
use gpu_market_sdk::evidence::{samples_hash, IntervalEvidence};
use serde_json::Value;
use solana_signer::Signer;

#[test]
fn a_silent_hosts_lease_is_reclaimed_and_skipped_intervals_are_slashed() {
    let t = T::start();
    // 2 s intervals; silent after 10 of them (20 s: the reclaims refused right after a proof
    // must come before the window ends, on a machine that stalls for a while); 2 pieces of
    // evidence slash 10 %.
    let s = MarketSetup::new(
        &t,
        &[
            "--billing-interval-secs",
            "2",
            "--silence-intervals",
            "10",
            "--slash-evidence",
            "2",
            "--slash-bps",
            "1000",
        ],
    );
    let host = register_host(&t, &s);
    let client = t.wallet("client");
    s.fund(&t, &client, "100");
    let stranger = t.wallet("stranger");
    s.fund(&t, &stranger, "1");

    // A lease whose host proves its first interval, then nothing: reclaimable once silent for
    // the window (20 s), by anyone: the escrow can only go back to the client.
    let lease = leased(&t, &s, &host, &client, "1");
    let l = lease.to_string();
    let e = t.fails(&stranger, &["lease", "reclaim", &l]);
    assert!(e.contains("counts as silent from"), "{e}");
    let first: Lease = t.account(&lease);
    wait_until(&t, first.started_at + 3);
    prove(&t, &s, &host, lease, 0);
    let proven: Lease = t.account(&lease);
    let now = t.cluster_time();
    assert!(
        now < proven.silent_from(),
        "the host counted as silent (from {}) before the refusal could be checked: the cluster's clock reads {now}",
        proven.silent_from()
    );
    let e = t.fails(&client, &["lease", "reclaim", &l]);
    assert!(e.contains("counts as silent from"), "{e}");
    assert!(t.exists(&lease), "nothing sent");
    // Only the client may take its escrow back rather than fail over.
    let e = t.fails(&stranger, &["lease", "reclaim", &l, "--refund"]);
    assert!(
        e.contains("only the lease's client") && e.contains("may take the escrow back"),
        "{e}"
    );
    let stake_before = host_stake(&t, &s, &host);
    // What the proof left of the escrow (the lease holds it): all of it comes back.
    let bid = t.account::<Bid>(&proven.bid);
    assert!(
        proven.escrow < placed_escrow(&bid),
        "the proven interval was paid"
    );
    wait_until(&t, proven.silent_from());
    let out = t.ok(&client, &["lease", "reclaim", &l, "--refund"]);
    assert_eq!(
        out["refund"],
        shown(proven.escrow).as_str(),
        "the escrow less the proven interval: {out}"
    );
    assert!(!t.exists(&lease), "settled at once");
    let stake_after = host_stake(&t, &s, &host);
    assert!(
        stake_after.amount < stake_before.amount,
        "the silence is slashed: {} → {}",
        stake_before.amount,
        stake_after.amount
    );

    // A lease whose host proves interval 2 first: intervals 0 and 1 were skipped, evidence
    // anyone may slash with, once.
    let lease = leased(&t, &s, &host, &client, "2");
    let m = host.machine.to_string();
    let e = t.fails(&stranger, &["host", "slash", &m]);
    assert!(e.contains("no slashing evidence"), "{e}");
    let l_on_chain: Lease = t.account(&lease);
    wait_until(&t, l_on_chain.started_at + 7);
    prove(&t, &s, &host, lease, 2);
    let before = host_stake(&t, &s, &host);
    let out: Value = t.ok(&stranger, &["host", "slash", &m]);
    assert_eq!(out["skipped_intervals"], 2, "{out}");
    let after = host_stake(&t, &s, &host);
    assert_eq!(
        before.amount - after.amount,
        before.amount / 10,
        "10 % for 2 pieces"
    );
    let e = t.fails(&stranger, &["host", "slash", &m]);
    assert!(e.contains("no slashing evidence"), "{e}");
    assert_eq!(
        host_stake(&t, &s, &host),
        after,
        "a refused slash moves nothing"
    );
}

#[test]
fn idle_leases_are_listed_then_ended_by_the_idle_rule_and_quiet_clients_are_shown() {
    let t = T::start();
    // 2 s intervals; flagged idle after 1 proof under 10 %, ended after 2.
    let s = MarketSetup::new(
        &t,
        &[
            "--billing-interval-secs",
            "2",
            "--idle-utilisation-bps",
            "1000",
            "--idle-intervals",
            "1",
            "--idle-end-intervals",
            "2",
        ],
    );
    let m = s.m();
    let host = register_host(&t, &s);
    let client = t.wallet("client");
    s.fund(&t, &client, "100");
    let lease = leased(&t, &s, &host, &client, "1");
    let l = lease.to_string();
    let idle_list = || t.ok(&client, &["lease", "list", "--market", &m, "--idle"]);
    assert_eq!(idle_list(), serde_json::json!([]), "not idle yet");

    let started: Lease = t.account(&lease);
    wait_until(&t, started.started_at + 2);
    prove_with(
        &t,
        &s,
        &host,
        lease,
        0,
        Stated {
            utilisation_bps: 500,
            ..BUSY
        },
    );
    let listed = idle_list();
    assert_eq!(listed[0]["lease"], l, "{listed}");
    assert_eq!(
        t.account::<Lease>(&lease).stop(),
        started.ends_at,
        "warned only"
    );
    wait_until(&t, started.started_at + 4);
    prove_with(
        &t,
        &s,
        &host,
        lease,
        1,
        Stated {
            utilisation_bps: 500,
            ..BUSY
        },
    );
    let ended: Lease = t.account(&lease);
    assert_eq!(
        ended.stop(),
        window_end(&started, 1),
        "ended with its second idle window"
    );
    // Proven to its stop: anyone settles it, the unused escrow back to the client.
    let stranger = t.wallet("stranger");
    let out = t.ok(&stranger, &["lease", "end", &l]);
    assert_eq!(out["status"], "settled", "{out}");
    assert_eq!(out["exit_code"], gpu_market_core::lease::exit::IDLE_ENDED);
    assert!(
        out["exit_reason"].as_str().unwrap().contains("idle rule"),
        "{out}"
    );

    // Every stake account acted within the hour; the client's is the latest (its bid).
    let quiet = t.ok(&stranger, &["market", "inactive", &m, "--for", "1h"]);
    assert_eq!(quiet, serde_json::json!([]));
    let all = t.ok(&stranger, &["market", "inactive", &m, "--for", "0"]);
    let owners: Vec<&str> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["owner"].as_str().unwrap())
        .collect();
    let client_key = key_of(&client).pubkey().to_string();
    assert_eq!(owners.last(), Some(&client_key.as_str()), "{all}");
    let e = t.fails(&stranger, &["market", "inactive", &m, "--for", "soon"]);
    assert!(e.contains("bad duration"), "{e}");
}

/// A power log of one GPU reading `mw` `n` times in the interval.
fn log_of(mw: u32, n: usize) -> PowerLog {
    PowerLog {
        gpus: vec![GpuPowerLog {
            carried_mw: vec![],
            readings_mw: vec![mw; n],
        }],
    }
}

/// Writes `log` as the agent keeps interval `k` of `lease`.
fn keep(dir: &std::path::Path, lease: &solana_pubkey::Pubkey, k: u32, log: &PowerLog) {
    let e = IntervalEvidence {
        lease: lease.to_string(),
        interval: k,
        samples_hash: hex::encode(samples_hash(log)),
        log: log.clone(),
    };
    std::fs::write(
        dir.join(format!("{k}.json")),
        serde_json::to_vec(&e).unwrap(),
    )
    .unwrap();
}

#[test]
fn a_proofs_power_log_is_checked_against_the_chain_by_anyone() {
    let t = T::start();
    let s = MarketSetup::new(&t, &["--billing-interval-secs", "2"]);
    let host = register_host(&t, &s);
    let client = t.wallet("client");
    s.fund(&t, &client, "100");
    let lease = leased(&t, &s, &host, &client, "1");
    let started: Lease = t.account(&lease);
    wait_until(&t, started.started_at + 10);
    let dir = t.path("evidence");
    std::fs::create_dir_all(&dir).unwrap();

    // Interval 0: at its limit (250 W), stated as such.
    let at_limit = log_of(250_000, 6);
    let stated = |peak_power_w, log: &PowerLog| Stated {
        peak_power_w,
        samples_hash: samples_hash(log),
        ..BUSY
    };
    prove_with(&t, &s, &host, lease, 0, stated(250, &at_limit));
    keep(&dir, &lease, 0, &at_limit);
    // Interval 1: the log shows 320 W sustained, the proof states 250 W (no violation).
    let over = log_of(320_000, 6);
    prove_with(&t, &s, &host, lease, 1, stated(250, &over));
    keep(&dir, &lease, 1, &over);
    // Interval 2: the proof commits to one log, the file holds another.
    prove_with(&t, &s, &host, lease, 2, stated(250, &at_limit));
    keep(&dir, &lease, 2, &log_of(240_000, 6));
    // Intervals 3 and 4 in one proof (as the agent joins them): one log, named by the first.
    let both = log_of(250_000, 12);
    let span = Stated {
        intervals: 2,
        ..stated(250, &both)
    };
    prove_with(&t, &s, &host, lease, 3, span);
    keep(&dir, &lease, 3, &both);

    let stranger = t.wallet("stranger");
    let out = t.ok(
        &stranger,
        &[
            "lease",
            "audit",
            &lease.to_string(),
            "--evidence",
            dir.to_str().unwrap(),
        ],
    );
    let rows = out.as_array().unwrap();
    let verdicts: Vec<&str> = rows
        .iter()
        .map(|r| r["verdict"].as_str().unwrap())
        .collect();
    assert_eq!(
        verdicts,
        [
            "consistent",
            "the proof misstates its own log",
            "not the log the proof committed to",
            "consistent"
        ],
        "{out}"
    );
    assert_eq!(rows[3]["interval"], 3);
    assert_eq!(rows[3]["intervals"], 2);
    assert_eq!(rows[1]["log_peak_w"], serde_json::json!([320]));
    assert_eq!(rows[1]["violation_by_log"], true);
    assert_eq!(rows[1]["violation_on_chain"], false);

    // A file of another lease is refused.
    keep(&dir, &solana_pubkey::Pubkey::new_unique(), 5, &at_limit);
    let e = t.fails(
        &stranger,
        &[
            "lease",
            "audit",
            &lease.to_string(),
            "--evidence",
            dir.to_str().unwrap(),
        ],
    );
    assert!(e.contains("is the log of lease"), "{e}");
}

/// `lease extend`: the client buys half an hour more of its running lease at its price (3 per
/// GPU-hour: 1.5), paid into the lease's escrow; anyone else is refused before anything is sent.
#[test]
fn a_client_extends_its_running_lease() {
    let t = T::start();
    let s = MarketSetup::new(&t, &[]);
    let host = register_host(&t, &s);
    let client = t.wallet("client");
    let tokens = s.fund(&t, &client, "100");
    let stranger = t.wallet("stranger");
    s.fund(&t, &stranger, "10");
    let lease = leased(&t, &s, &host, &client, "1");
    let l = lease.to_string();
    let before: Lease = t.account(&lease);

    let e = t.fails(&stranger, &["lease", "extend", &l, "--by", "30m"]);
    assert!(e.contains("only the lease's client"), "{e}");
    let e = t.fails(&client, &["lease", "extend", &l, "--by", "0"]);
    assert!(e.contains("must be more than zero"), "{e}");
    assert_eq!(
        t.account::<Lease>(&lease).ends_at,
        before.ends_at,
        "nothing sent"
    );

    let balance = t.balance(&tokens);
    let out = t.ok(&client, &["lease", "extend", &l, "--by", "30m"]);
    assert_eq!(out["extended_by_secs"], 1_800, "{out}");
    assert_eq!(out["paid"], "1.5", "{out}");
    let after: Lease = t.account(&lease);
    assert_eq!(after.ends_at, before.ends_at + 1_800);
    assert_eq!(out["ends_at"], after.ends_at, "{out}");
    assert_eq!(after.escrow, before.escrow + 1_500_000);
    assert_eq!(t.balance(&tokens), balance - 1_500_000);

    // A bid of the same class at other power terms cannot share the lease's GPU: `bid explain`
    // says it could start at the earliest when the extended lease ends (its latest start, in
    // two hours, comes after; with the default hour it would not, and explain says so).
    let out = t.ok(
        &stranger,
        &place_args(
            &s.m(),
            &[
                "--overclock",
                "power=300",
                "--price",
                "3",
                "--class",
                "0",
                "--deadline",
                "+3h",
            ],
        ),
    );
    let ex = t.ok(&stranger, &["bid", "explain", out["bid"].as_str().unwrap()]);
    assert_eq!(ex["earliest_start"], after.ends_at, "{ex}");
    assert_eq!(
        ex["earliest_start_machine"],
        host.machine.to_string(),
        "{ex}"
    );
    assert!(
        ex["summary"].as_str().unwrap().contains(&format!(
            "at the earliest at {} on machine {}",
            after.ends_at, host.machine
        )),
        "{ex}"
    );
    assert_eq!(ex["reserved_on"], Value::Null, "{ex}");

    // Once the machine holds its GPUs for it (`reserve`, as its agent sends it), explain says
    // where and from when.
    let waiting = pk(&out["bid"]);
    let b: Bid = t.account(&waiting);
    let queue_book = t.account::<gpu_market::state::Market>(&s.market).queue_book;
    let reserve = gpu_market_sdk::Reserve::of(
        s.market,
        queue_book,
        (host.machine, waiting),
        b.reserved_on,
        &[(lease, after.clone())],
        vec![],
    );
    t.send(&key_of(&stranger), &[&reserve]);
    let ex = t.ok(&stranger, &["bid", "explain", &waiting.to_string()]);
    assert_eq!(ex["reserved_on"], host.machine.to_string(), "{ex}");
    assert_eq!(ex["reserved_from"], after.ends_at, "{ex}");
    assert!(
        ex["summary"].as_str().unwrap().contains(&format!(
            "machine {} holds its GPUs for it from {} (its reservation)",
            host.machine, after.ends_at
        )),
        "{ex}"
    );
    // And the machine's page says for which bid, from when, on which GPU.
    let shown = t.ok(&stranger, &["host", "show", &host.machine.to_string()]);
    let r = &shown["reservation"];
    assert_eq!(r["bid"], waiting.to_string(), "{shown}");
    assert_eq!(r["start"], after.ends_at, "{shown}");
    assert_eq!(r["gpus"], serde_json::json!(after.gpus()), "{shown}");
}
