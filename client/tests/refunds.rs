//! A lease whose container never ran, against a private solana-test-validator: the host's
//! final proof says why (`exit::IMAGE_UNAVAILABLE`, no GPU time), the client, who closed its
//! token account meanwhile, still ends and settles it, `lease show` explains the exit and the
//! full refund even after the lease account is gone, and `stake claim` pays the refund that
//! waited in the client's stake.

mod common;

use common::*;
use gpu_market::instructions::UsageProofArgs;
use gpu_market::state::{Bid, Machine, Market, StakeAccount};
use gpu_market_core::lease::exit;
use gpu_market_sdk::{token, SubmitUsage};
use serde_json::Value;
use solana_signer::Signer;

#[test]
fn a_lease_whose_image_never_pulled_says_why_and_refunds_in_full_even_to_a_closed_account() {
    let t = T::start();
    let s = MarketSetup::new(&t, &["--billing-interval-secs", "1"]);
    let m = s.m();
    let host = register_host(&t, &s);
    let client = t.wallet("client");
    let tokens = s.fund(&t, &client, "100");
    let client_key = key_of(&client);
    // 3 tokens per GPU-hour, one GPU, one hour: 3 tokens of escrow.
    let out = t.ok(
        &client,
        &place_args(
            &m,
            &["--overclock", "power=250", "--price", "3", "--class", "0"],
        ),
    );
    let bid = pk(&out["bid"]);
    // Its run and the wait it was allowed, from when it landed.
    let escrow = placed_escrow(&t.account::<Bid>(&bid));
    let agent = key_of(&host.agent);
    let lease = allocate_as_agent(&t, &s, &host, bid, client_key.pubkey());

    // The host could not pull the image: its final proof, for interval 0, has no GPU time.
    t.submit_usage(&SubmitUsage {
        agent: &agent,
        market: s.market,
        machine: host.machine,
        proofs: vec![(
            lease,
            UsageProofArgs {
                interval: 0,
                intervals: 1,
                gpu_seconds: 0,
                energy_j: 0,
                avg_utilisation_bps: 0,
                peak_power_w: vec![0],
                exit_code: Some(exit::IMAGE_UNAVAILABLE),
                samples_hash: [0; 32],
                energy_saved_j: 0,
            },
        )],
    });
    let reason = exit::reason(exit::IMAGE_UNAVAILABLE);
    let show = t.ok(&client, &["lease", "show", &lease.to_string()]);
    assert_eq!(show["exit_code"], exit::IMAGE_UNAVAILABLE, "{show}");
    assert_eq!(show["exit_reason"], reason.as_str());
    assert_eq!(show["paid"], "0");

    // The client gives its tokens away and closes the account its escrow came from: it holds
    // no token account of the mint any more.
    let friend = s.fund(&t, &s.authority, "0");
    let me = client_key.pubkey();
    t.send_instructions(
        &client_key,
        &[
            token::transfer(&tokens, &s.mint, &friend, &me, t.balance(&tokens), 6),
            token::close_account(&tokens, &me, &me),
        ],
        &[],
    );
    assert!(!t.exists(&tokens));

    // It ends the lease all the same: settled, the refund waiting in its stake.
    let out = t.ok(&client, &["lease", "end", &lease.to_string()]);
    assert_eq!(out["status"], "settled", "{out}");
    assert_eq!(out["refund"], shown(escrow).as_str());
    assert_eq!(out["refund_in_stake"], true);
    assert_eq!(out["exit_reason"], reason.as_str());
    assert!(
        out["note"].as_str().unwrap().contains("stake claim"),
        "{out}"
    );
    assert!(!t.exists(&lease) && !t.exists(&bid));
    assert_eq!(t.account::<Machine>(&host.machine).leases, 0);

    // The lease account is gone: `lease show` reads its settlement back from the chain.
    let show = t.ok(&client, &["lease", "show", &lease.to_string()]);
    assert_eq!(show["status"], "settled", "{show}");
    assert_eq!(show["paid"], "0");
    assert_eq!(show["refund"], shown(escrow).as_str(), "a full refund");
    assert_eq!(show["refund_in_stake"], true);
    assert_eq!(show["exit_code"], exit::IMAGE_UNAVAILABLE);
    assert_eq!(show["exit_reason"], reason.as_str());
    assert_eq!(pk(&show["client"]), me);
    assert_eq!(pk(&show["market"]), s.market);
    assert_eq!(show["signature"], out["signature"]);
    assert_eq!(show["preempted"], false, "{show}");

    // The stake holds the refund; it cannot close before it is claimed.
    let stake = t.ok(&client, &["stake", "show", "--market", &m]);
    assert_eq!(stake["refunds_due"], shown(escrow).as_str(), "{stake}");
    let e = t.fails(&client, &["stake", "close", "--market", &m]);
    assert!(e.contains("stake claim"), "{e}");
    let e = t.fails(&client, &["stake", "claim", "--market", &m]);
    assert!(e.contains("has no token account"), "{e}");
    let vault = t.account::<Market>(&s.market).payment_vault;
    let in_vault = t.balance(&vault);

    // A new token account, and the claim pays exactly the refund into it.
    let fresh = s.fund(&t, &client, "0");
    let out = t.ok(&client, &["stake", "claim", "--market", &m]);
    assert_eq!(out["claimed"], shown(escrow).as_str(), "{out}");
    assert_eq!(pk(&out["to"]), fresh);
    assert_eq!(t.balance(&fresh), escrow);
    assert_eq!(t.balance(&vault), in_vault - escrow);
    let st: StakeAccount = t.account(&gpu_market::pda::stake(&s.market, &me).0);
    assert_eq!(st.refunds_due, 0);
    assert_eq!(t.account::<Market>(&s.market).refunds_due, 0);
    let e = t.fails(&client, &["stake", "claim", "--market", &m]);
    assert!(e.contains("nothing to claim"), "{e}");
    assert_eq!(t.balance(&fresh), escrow);
    let stake = t.ok(&client, &["stake", "show", "--market", &m]);
    assert_eq!(stake["refunds_due"], "0");
    assert_eq!(stake["gpus_held"], Value::from(0));
}
