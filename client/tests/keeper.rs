//! `gpu-market keeper`, run by a stranger with no stake against a private
//! solana-test-validator: each duty (prune an expired bid, settle a proven lease, slash on
//! evidence, reclaim a silent host's lease for its client, close a sealed environment whose
//! bid is gone) is sent only once the program would accept it, with the funds going to their
//! owners, and counted in the metrics file.

mod common;

use std::collections::BTreeSet;

use common::*;
use gpu_market::pda;
use gpu_market::state::{Bid, BidStatus, Lease, Machine, Market};
use serde_json::Value;
use solana_pubkey::Pubkey;
use solana_signer::Signer;

/// One `keeper --once` round: each action it logged, as (duty, target).
fn keep(
    t: &T,
    keeper: &std::path::Path,
    s: &MarketSetup,
    prom: &std::path::Path,
) -> BTreeSet<(String, Pubkey)> {
    let out = t.run(
        keeper,
        &[
            "keeper",
            "--market",
            &s.m(),
            "--once",
            "--metrics-file",
            prom.to_str().unwrap(),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "keeper failed: {stderr}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}"));
            assert!(v.get("error").is_none(), "refused: {v}");
            assert!(!v["reason"].as_str().unwrap().is_empty(), "{v}");
            (v["duty"].as_str().unwrap().to_string(), pk(&v["target"]))
        })
        .collect()
}

fn set(items: &[(&str, Pubkey)]) -> BTreeSet<(String, Pubkey)> {
    items.iter().map(|(d, k)| (d.to_string(), *k)).collect()
}

#[test]
fn the_keeper_does_each_duty_only_once_the_program_would_accept_it() {
    let t = T::start();
    // 2 s intervals; silent after 30 of them (60 s: longer than any run of the steps below on a
    // loaded machine); 2 pieces of evidence slash 10 %.
    let s = MarketSetup::new(
        &t,
        &[
            "--billing-interval-secs",
            "2",
            "--silence-intervals",
            "30",
            "--slash-evidence",
            "2",
            "--slash-bps",
            "1000",
        ],
    );
    let host = register_host(&t, &s);
    let client = t.wallet("client");
    let tokens = s.fund(&t, &client, "100");
    let keeper = t.wallet("keeper");
    let prom = t.path("keeper.prom");
    let m = s.m();
    assert!(keep(&t, &keeper, &s, &prom).is_empty(), "nothing is due");

    // A 4 s lease its host proves in full; a lease whose host skips intervals 0 and 1.
    let short = leased_for(&t, &s, &host, &client, "11", "4");
    let skipping = leased(&t, &s, &host, &client, "12");
    // A bid that expires in 20 s (its latest start 18 s after the CLI reads the cluster's clock,
    // however long placing and sealing take), with an environment sealed to the machine.
    let env = t.path("job.env");
    std::fs::write(&env, "TOKEN=s3cret\n").unwrap();
    let out = t.ok(
        &client,
        &[
            "bid",
            "place",
            "--market",
            &m,
            "--image",
            "registry.example/train:v3",
            "--image-digest",
            DIGEST,
            "--gib-per-gpu",
            "40",
            "--duration",
            "2",
            "--deadline",
            "+20",
            "--overclock",
            "power=250",
            "--price",
            "3",
            "--nonce",
            "10",
            "--env",
            env.to_str().unwrap(),
        ],
    );
    let expiring = pk(&out["bid"]);
    let deadline = t.account::<Bid>(&expiring).deadline;
    let copy = pda::sealed_env(&expiring, &key_of(&host.agent).pubkey()).0;
    assert!(t.exists(&copy));
    let now = t.cluster_time();
    assert!(
        keep(&t, &keeper, &s, &prom).is_empty(),
        "nothing is due yet (cluster clock {now}, the bid's deadline {deadline})"
    );

    prove_to_stop(&t, &s, &host, short);
    let l: Lease = t.account(&skipping);
    wait_until(&t, l.started_at + 6);
    prove(&t, &s, &host, skipping, 2);
    // The bid has expired on the chain's clock: its pruning is due.
    wait_until(&t, deadline);
    let funds = t.balance(&tokens);
    let stake = host_stake(&t, &s, &host);
    assert_eq!(
        keep(&t, &keeper, &s, &prom),
        set(&[
            ("prune", expiring),
            ("settle", short),
            ("slash", host.machine)
        ])
    );
    assert!(
        !t.exists(&expiring) && !t.exists(&short),
        "pruned and settled"
    );
    assert!(
        t.balance(&tokens) > funds,
        "the escrows went back to the client"
    );
    assert_eq!(
        stake.amount - host_stake(&t, &s, &host).amount,
        stake.amount / 10,
        "10 % for 2 pieces of evidence"
    );

    // A lease whose host proves its first interval, then falls silent.
    let silent = leased(&t, &s, &host, &client, "13");
    let l: Lease = t.account(&silent);
    wait_until(&t, l.started_at + 2);
    prove(&t, &s, &host, silent, 0);
    // The expired bid's sealed copy is closed (rent to the client); the silent lease is not
    // touched before its window.
    let lamports = t.rpc().get_balance(&key_of(&client).pubkey()).unwrap();
    assert_eq!(keep(&t, &keeper, &s, &prom), set(&[("close_env", copy)]));
    assert!(!t.exists(&copy));
    assert!(t.rpc().get_balance(&key_of(&client).pubkey()).unwrap() > lamports);
    assert!(t.exists(&silent));

    // Once silent, both running leases (the skipping one fell silent too) are reclaimed: their
    // bids, which may still start, go back to the queue with their unproven escrow (failover).
    let proven: Lease = t.account(&silent);
    let skipped: Lease = t.account(&skipping);
    wait_until(&t, proven.silent_from());
    let funds = t.balance(&tokens);
    assert_eq!(
        keep(&t, &keeper, &s, &prom),
        set(&[("reclaim", silent), ("reclaim", skipping)])
    );
    assert!(!t.exists(&silent) && !t.exists(&skipping));
    assert_eq!(t.balance(&tokens), funds, "no refund: the bids fail over");
    for l in [&proven, &skipped] {
        let b: Bid = t.account(&l.bid);
        assert_eq!(b.status, BidStatus::Open, "waits again");
        assert_eq!(b.escrow, l.escrow, "with the escrow its lease had left");
    }

    // The counters of the process (one round with `--once`), as the textfile collector reads
    // them.
    let metrics = std::fs::read_to_string(&prom).unwrap();
    for line in [
        "gpu_market_keeper_actions_total{duty=\"reclaim\",outcome=\"sent\"} 2",
        "gpu_market_keeper_rounds_total 1",
        "gpu_market_keeper_failed_rounds_total 0",
    ] {
        assert!(metrics.contains(line), "{line} in:\n{metrics}");
    }
}

/// Issue 30: a retired machine's waiting spot bid would otherwise keep its book (and the
/// host's bond) until its deadline; the keeper, a stranger, refunds it at once, and the owner
/// then closes the machine.
#[test]
fn the_keeper_refunds_a_retired_machines_spot_bids_so_that_it_closes() {
    let t = T::start();
    let s = MarketSetup::new(&t, &[]);
    let host = register_host(&t, &s);
    let client = t.wallet("client");
    let tokens = s.fund(&t, &client, "100");
    let keeper = t.wallet("keeper");
    let prom = t.path("keeper.prom");
    let (m, mc) = (s.m(), host.machine.to_string());
    let out = t.ok(
        &client,
        &place_args(
            &m,
            &[
                "--machine",
                &mc,
                "--overclock",
                "power=250",
                "--price",
                "24",
                "--nonce",
                "1",
            ],
        ),
    );
    let spot = pk(&out["bid"]);
    assert!(keep(&t, &keeper, &s, &prom).is_empty(), "it waits");
    let owner = t.path("host.json");
    t.ok(&owner, &["host", "retire", &mc]);
    let e = t.fails(&owner, &["host", "close", &mc]);
    assert!(e.contains("book"), "{e}");
    let funds = t.balance(&tokens);
    let escrow = t.account::<Bid>(&spot).escrow;
    assert_eq!(keep(&t, &keeper, &s, &prom), set(&[("prune", spot)]));
    assert!(!t.exists(&spot));
    assert_eq!(
        t.balance(&tokens),
        funds + escrow,
        "the escrow back in full"
    );
    t.ok(&owner, &["host", "close", &mc]);
    assert!(!t.exists(&host.machine));
}

/// A reservation whose bid left the book holds nothing: the keeper clears it (`unreserve`),
/// and leaves alone one that still holds its bid.
#[test]
fn the_keeper_clears_a_reservation_that_holds_nothing_and_only_that() {
    let t = T::start();
    let s = MarketSetup::new(&t, &[]);
    let host = register_host(&t, &s);
    let client = t.wallet("client");
    s.fund(&t, &client, "100");
    let keeper = t.wallet("keeper");
    let prom = t.path("keeper.prom");
    let m = s.m();
    // A lease on GPU 0 at 250 W; a queue bid for that GPU at 300 W cannot share it (one power
    // limit a GPU), and GPU 1 is of another class: it waits for the lease's end.
    let lease = leased(&t, &s, &host, &client, "1");
    let out = t.ok(
        &client,
        &place_args(
            &m,
            &[
                "--overclock",
                "power=300",
                "--price",
                "3",
                "--class",
                "0",
                "--nonce",
                "2",
            ],
        ),
    );
    let waiting = pk(&out["bid"]);
    let market: Market = t.account(&s.market);
    let reserve = gpu_market_sdk::Reserve::of(
        s.market,
        market.queue_book,
        (host.machine, waiting),
        Pubkey::default(),
        &[(lease, t.account::<Lease>(&lease))],
        vec![],
    );
    t.send(&key_of(&keeper), &[&reserve]);
    let held = t.account::<Machine>(&host.machine).reservation;
    assert_eq!(held.bid, waiting);
    assert!(keep(&t, &keeper, &s, &prom).is_empty(), "it holds its bid");

    t.ok(&client, &["bid", "cancel", &waiting.to_string()]);
    assert_eq!(
        keep(&t, &keeper, &s, &prom),
        set(&[("unreserve", host.machine)])
    );
    assert!(!t.account::<Machine>(&host.machine).reservation.is_set());
    let metrics = std::fs::read_to_string(&prom).unwrap();
    assert!(
        metrics.contains(r#"duty="unreserve",outcome="sent"} 1"#),
        "{metrics}"
    );
    assert!(keep(&t, &keeper, &s, &prom).is_empty(), "once");
}

/// A retired machine whose proofs accrued pay nobody has claimed: the program refuses to close
/// it (`PayUnclaimed`), so `host close` claims the pay for its owner first, in the same command,
/// then closes it; the fee waits in the market for `collect_fees`.
#[test]
fn closing_a_machine_claims_the_pay_its_proofs_accrued_first() {
    let t = T::start();
    let s = MarketSetup::new(&t, &["--billing-interval-secs", "2"]);
    let host = register_host(&t, &s);
    let client = t.wallet("client");
    s.fund(&t, &client, "100");
    let lease = leased_for(&t, &s, &host, &client, "1", "4s");
    prove_to_stop(&t, &s, &host, lease);
    t.ok(&client, &["lease", "end", &lease.to_string()]);
    assert!(!t.exists(&lease), "proven to its stop: settled");
    let accrued: Machine = t.account(&host.machine);
    assert!(accrued.unclaimed_pay > 0 && accrued.unclaimed_fee > 0);
    let (owner, mc) = (t.path("host.json"), host.machine.to_string());
    t.ok(&owner, &["host", "retire", &mc]);
    let (tokens, fees) = (
        t.balance(&host.tokens),
        t.account::<Market>(&s.market).fees_due,
    );
    let out = t.ok(&owner, &["host", "close", &mc]);
    assert!(!t.exists(&host.machine), "closed");
    assert_eq!(
        out["paid"],
        gpu_market_core::amount::format(accrued.unclaimed_pay, 6).as_str(),
        "{out}"
    );
    assert_eq!(
        t.balance(&host.tokens) - tokens,
        accrued.unclaimed_pay,
        "the owner was paid what the proofs accrued"
    );
    assert_eq!(
        t.account::<Market>(&s.market).fees_due - fees,
        accrued.unclaimed_fee
    );
}
