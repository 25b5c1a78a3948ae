//! A bid's environment delivered through the chain, from the CLI against a private
//! solana-test-validator: `bid place --env` seals it to each machine that may run the bid,
//! `bid seal` to machines registered later; the agents open their copies against the bid's
//! hash, and the chain never holds the plaintext.

mod common;

use common::*;
use gpu_market::pda;
use gpu_market::state::{Bid, SealedEnv};
use gpu_market_sdk::envelope;
use solana_signer::Signer;

#[test]
fn a_queue_bids_environment_reaches_each_machine_that_may_run_it_including_later_ones() {
    let t = T::start();
    let s = MarketSetup::new(&t, &[]);
    let m = s.m();
    let host = register_host(&t, &s);
    let client = t.wallet("client");
    s.fund(&t, &client, "100");
    let env = t.path("job.env");
    std::fs::write(&env, "HF_TOKEN=s3cret\n").unwrap();
    let out = t.ok(
        &client,
        &place_args(
            &m,
            &[
                "--overclock",
                "power=300",
                "--price",
                "2",
                "--env",
                env.to_str().unwrap(),
            ],
        ),
    );
    let bid = pk(&out["bid"]);
    let b: Bid = t.account(&bid);
    assert_eq!(
        out["env_sealed_to"],
        serde_json::json!([host.machine.to_string()])
    );
    let agent = key_of(&host.agent);
    let copy: SealedEnv = t.account(&pda::sealed_env(&bid, &agent.pubkey()).0);
    assert_eq!(
        envelope::open_env(&copy.sealed, &agent, &b.env_hash).unwrap(),
        b"HF_TOKEN=s3cret\n"
    );
    assert!(!String::from_utf8_lossy(&copy.sealed).contains("s3cret"));

    // A second machine registers after the bid was placed.
    let owner = t.wallet("host2");
    let agent2 = t.wallet("agent2");
    s.fund(&t, &owner, "100");
    t.ok(&owner, &["stake", "deposit", "10", "--market", &m]);
    let gpus = t.path("gpus.toml");
    let agent2_key = key_of(&agent2).pubkey().to_string();
    let second = t.ok(
        &owner,
        &[
            "host",
            "register",
            "--market",
            &m,
            "--gpus",
            gpus.to_str().unwrap(),
            "--agent",
            &agent2_key,
            "--price-floor",
            "0.5",
        ],
    );
    // Another file, or another keypair, is refused with nothing stored.
    let other = t.path("other.env");
    std::fs::write(&other, "HF_TOKEN=other\n").unwrap();
    let b58 = bid.to_string();
    let e = t.fails(
        &client,
        &["bid", "seal", &b58, "--env", other.to_str().unwrap()],
    );
    assert!(e.contains("is not the environment bid"), "{e}");
    let e = t.fails(
        &owner,
        &["bid", "seal", &b58, "--env", env.to_str().unwrap()],
    );
    assert!(e.contains("only the bid's client"), "{e}");
    let second_copy = pda::sealed_env(&bid, &key_of(&agent2).pubkey()).0;
    assert!(!t.exists(&second_copy), "nothing stored");
    // `bid seal` adds the machines with no copy yet: the new one.
    let out = t.ok(
        &client,
        &["bid", "seal", &b58, "--env", env.to_str().unwrap()],
    );
    assert_eq!(out["sealed_to"], serde_json::json!([second["machine"]]));
    assert_eq!(out["already_sealed"], 1);
    let copy: SealedEnv = t.account(&second_copy);
    assert_eq!(
        envelope::open_env(&copy.sealed, &key_of(&agent2), &b.env_hash).unwrap(),
        b"HF_TOKEN=s3cret\n"
    );
}
