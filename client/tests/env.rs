//! A bid's environment delivered through the chain, from the CLI against a private
//! solana-test-validator: `bid place --env` seals it to each machine that may run the bid,
//! `bid seal` to machines registered later, `--seal-to` to the machines its client names; the
//! agents open their copies against the bid's hash, and the chain never holds the plaintext.

mod common;

use common::*;
use gpu_market::pda;
use gpu_market::state::{Bid, SealedEnv};
use gpu_market_sdk::envelope;
use solana_pubkey::Pubkey;
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

/// `bid place --env FILE --seal-to MACHINE`: of two idle machines, the bid's environment goes to
/// the one named only, though the market's packing policy would give an unsealed bid the other;
/// `bid explain` names the machine it is sealed to, and the policy gives the bid to it. A
/// `--seal-to` naming a machine that could not run the bid is refused before anything is sent:
/// no bid, no copy, no token moved.
#[test]
fn a_queue_bid_sealed_to_a_chosen_machine_is_sealed_and_given_to_it_alone() {
    let t = T::start();
    let s = MarketSetup::new(&t, &[]);
    let m = s.m();
    let first = register_host(&t, &s);
    let second = register_host_as(&t, &s, ("host2", "agent2"), &[]);
    let client = t.wallet("client");
    let client_tokens = s.fund(&t, &client, "100");
    let env = t.path("job.env");
    std::fs::write(&env, "HF_TOKEN=s3cret\n").unwrap();
    let env = env.to_str().unwrap();
    let terms = ["--overclock", "power=300", "--price", "2"];
    let place = |extra: &[&str]| {
        let mut args = terms.to_vec();
        args.extend_from_slice(extra);
        t.ok(&client, &place_args(&m, &args))
    };
    let explain = |bid: &Pubkey| {
        for host in [&first, &second] {
            heartbeat(&t, host);
        }
        t.ok(&client, &["bid", "explain", &bid.to_string()])
    };
    // Unsealed, the policy gives the bid one of the two: the other is the one chosen below.
    let open = pk(&place(&["--nonce", "1"])["bid"]);
    let preferred = pk(&explain(&open)["policy_machine"]);
    let (chosen, passed) = match preferred == first.machine {
        true => (&second, &first),
        false => (&first, &second),
    };
    t.ok(&client, &["bid", "cancel", &open.to_string()]);
    let chosen_key = chosen.machine.to_string();

    let out = place(&["--nonce", "2", "--env", env, "--seal-to", &chosen_key]);
    let bid = pk(&out["bid"]);
    assert_eq!(out["env_sealed_to"], serde_json::json!([chosen_key]));
    let copy = |host: &Host| pda::sealed_env(&bid, &key_of(&host.agent).pubkey()).0;
    let b: Bid = t.account(&bid);
    let sealed: SealedEnv = t.account(&copy(chosen));
    assert_eq!(
        envelope::open_env(&sealed.sealed, &key_of(&chosen.agent), &b.env_hash).unwrap(),
        b"HF_TOKEN=s3cret\n"
    );
    assert!(!t.exists(&copy(passed)), "sealed to the other machine too");
    let ex = explain(&bid);
    assert_eq!(
        ex["sealed_to_machines"],
        serde_json::json!([chosen_key]),
        "{ex}"
    );
    assert_eq!(ex["policy_machine"], chosen_key.as_str(), "{ex}");

    // A machine that could not run it: refused, nothing sent.
    let tokens = t.balance(&client_tokens);
    let stranger = Pubkey::new_unique().to_string();
    let mut args = terms.to_vec();
    args.extend_from_slice(&["--nonce", "3", "--env", env, "--seal-to", &stranger]);
    let e = t.fails(&client, &place_args(&m, &args));
    assert!(e.contains("could not run this bid"), "{e}");
    assert!(!t.exists(&pda::bid(&s.market, &key_of(&client).pubkey(), 3).0));
    assert_eq!(t.balance(&client_tokens), tokens);
}
