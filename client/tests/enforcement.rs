//! The rules that enforce a host's promises, used from the CLI against a private
//! solana-test-validator: a client takes back the escrow of a lease whose host went silent
//! (`lease reclaim`), and anyone slashes a host on the evidence its own proofs left (`host
//! slash`); each refused, with nothing sent, until the program would accept it.

mod common;

use common::*;
use gpu_market::instructions::SubmitUsageArgs;
use gpu_market::pda;
use gpu_market::state::{Lease, Machine, StakeAccount};
use gpu_market_sdk::SubmitUsage;
use serde_json::Value;
use solana_pubkey::Pubkey;
use solana_signer::Signer;

/// A 1-GPU queue bid of `client`, allocated by the host's agent; returns the lease.
fn leased(t: &T, s: &MarketSetup, host: &Host, client: &std::path::Path, nonce: &str) -> Pubkey {
    let out = t.ok(
        client,
        &place_args(
            &s.m(),
            &[
                "--overclock",
                "power=250",
                "--price",
                "3",
                "--class",
                "0",
                "--nonce",
                nonce,
            ],
        ),
    );
    allocate_as_agent(t, s, host, pk(&out["bid"]), key_of(client).pubkey())
}

/// The host's agent proves interval `k` of `lease` in full (1 GPU at 250 W for 2 s).
fn prove(t: &T, s: &MarketSetup, host: &Host, lease: Pubkey, k: u32) {
    let l: Lease = t.account(&lease);
    let agent = key_of(&host.agent);
    t.submit_usage(&SubmitUsage {
        agent: &agent,
        market: s.market,
        machine: host.machine,
        lease,
        bid: l.bid,
        payment_mint: s.mint,
        host_tokens: host.tokens,
        args: SubmitUsageArgs {
            interval: k,
            gpu_seconds: 2,
            energy_j: 500,
            avg_utilisation_bps: 10_000,
            peak_power_w: vec![250],
            exit_code: None,
            prev_hash: l.proof_hash,
        },
    });
}

fn host_stake(t: &T, s: &MarketSetup, host: &Host) -> StakeAccount {
    let m: Machine = t.account(&host.machine);
    t.account(&pda::stake(&s.market, &m.owner).0)
}

/// Waits until the cluster's clock reads `at` or later.
fn wait_until(t: &T, at: i64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while t.cluster_time() < at {
        assert!(
            std::time::Instant::now() < deadline,
            "the cluster's clock stands still"
        );
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
}

#[test]
fn a_silent_hosts_lease_is_reclaimed_and_skipped_intervals_are_slashed() {
    let t = T::start();
    // 2 s intervals; silent after 5 of them; 2 pieces of evidence slash 10 %.
    let s = MarketSetup::new(
        &t,
        &[
            "--billing-interval-secs",
            "2",
            "--silence-intervals",
            "5",
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
    // the window (10 s), by its client only.
    let lease = leased(&t, &s, &host, &client, "1");
    let l = lease.to_string();
    let e = t.fails(&stranger, &["lease", "reclaim", &l]);
    assert!(e.contains("only the lease's client"), "{e}");
    let first: Lease = t.account(&lease);
    wait_until(&t, first.started_at + 3);
    prove(&t, &s, &host, lease, 0);
    let proven: Lease = t.account(&lease);
    let e = t.fails(&client, &["lease", "reclaim", &l]);
    assert!(e.contains("counts as silent from"), "{e}");
    assert!(t.exists(&lease), "nothing sent");
    let stake_before = host_stake(&t, &s, &host);
    wait_until(&t, proven.proven_until + 11);
    let out = t.ok(&client, &["lease", "reclaim", &l]);
    let refund: f64 = out["refund"].as_str().unwrap().parse().unwrap();
    assert!(
        refund > 2.99 && refund < 3.0,
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
