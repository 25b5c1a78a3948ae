//! Gang bids from the CLI against a private solana-test-validator: `bid place --machines N`
//! places one bid for N machines at once (refused where the market has fewer that could run a
//! part), `bid show` and `bid explain` say what the gang waits for and where the packing policy
//! puts its parts.

mod common;

use common::*;
use gpu_market::state::{Bid, Lease, Market};
use gpu_market_core::settlement;
use gpu_market_sdk::{AllocateGang, ReserveGang, SetRendezvous};
use serde_json::json;
use solana_pubkey::Pubkey;
use solana_signer::Signer;

#[test]
fn a_gang_bid_is_placed_for_several_machines_and_explained() {
    let t = T::start();
    let s = MarketSetup::new(&t, &[]);
    let m = s.m();
    // Machines that publish a port for each lease: a gang's first port is its rendezvous.
    let published = ["--public-host", "127.0.0.1", "--ports-per-lease", "1"];
    let first = register_host_as(&t, &s, ("host", "agent"), &published);
    let client = t.wallet("client");
    let tokens = s.fund(&t, &client, "100");
    let gang_with = |extra: &[&'static str]| {
        let mut args = place_args(
            &m,
            &[
                "--overclock",
                "power=300",
                "--price",
                "2",
                "--machines",
                "2",
            ],
        );
        args.extend_from_slice(extra);
        args
    };
    let gang = |nonce: &'static str| gang_with(&["--port", "29500", "--nonce", nonce]);
    // One machine cannot run a gang of two: refused before anything is sent.
    let e = t.fails(&client, &gang("1"));
    assert!(
        e.contains("a gang of 2 machines: only 1 active machine(s)"),
        "{e}"
    );
    assert_eq!(t.balance(&tokens), 100_000_000);

    let second = register_host_as(&t, &s, ("host2", "agent2"), &published);
    // A gang names its rendezvous port.
    let e = t.fails(&client, &gang_with(&["--nonce", "3"]));
    assert!(e.contains("needs a --port"), "{e}");
    let out = t.ok(&client, &gang("2"));
    let bid = pk(&out["bid"]);
    let b: Bid = t.account(&bid);
    assert_eq!((b.parts, b.gpu_count), (2, 1));
    assert_eq!(out["machines"], 2, "{out}");
    // Its escrow pays for both machines' GPUs: twice a one-machine bid's for its run and wait.
    let wait = (b.latest_start() - b.placed_at) as u64;
    let one = settlement::bid_escrow(b.price, b.unit(), 1, 3_600, wait).unwrap();
    assert_eq!(
        b.escrow,
        settlement::bid_escrow(b.price, b.unit(), 2, 3_600, wait).unwrap()
    );
    assert!(b.escrow >= 2 * one - 1 && b.escrow <= 2 * one + 1);
    assert_eq!(t.balance(&tokens), 100_000_000 - b.escrow);

    // Both agents alive: the policy places a part on each, and the first part's agent starts
    // them together.
    heartbeat(&t, &first);
    heartbeat(&t, &second);
    let ex = t.ok(&client, &["bid", "explain", &bid.to_string()]);
    assert_eq!(ex["machines_wanted"], 2, "{ex}");
    assert_eq!(ex["machines_fitting"], 2, "{ex}");
    let parts = ex["policy_parts"].as_array().expect("each part's machine");
    let mut placed: Vec<String> = parts.iter().map(|p| p.as_str().unwrap().into()).collect();
    assert_eq!(ex["policy_machine"], parts[0], "{ex}");
    placed.sort();
    let mut both = vec![first.machine.to_string(), second.machine.to_string()];
    both.sort();
    assert_eq!(placed, both, "{ex}");
    assert!(
        ex["summary"]
            .as_str()
            .unwrap()
            .starts_with("a gang of 2 machines × 1 GPUs: it fits 2 of 2 machines now"),
        "{ex}"
    );

    // The first part's agent starts both parts (as its daemon would); `lease show` gives each
    // part its place in the gang, and the first part's rendezvous once its agent recorded it.
    let (lead, other) = match parts[0].as_str() == Some(&first.machine.to_string()) {
        true => (&first, &second),
        false => (&second, &first),
    };
    let agent = key_of(&lead.agent);
    let market: Market = t.account(&s.market);
    let start = AllocateGang {
        agent: &agent,
        market: s.market,
        book: market.queue_book,
        bid,
        client: key_of(&client).pubkey(),
        parts: vec![(lead.machine, vec![0]), (other.machine, vec![0])],
        evidence: Vec::new(),
    };
    t.send(&agent, &[&start]);
    let leases = start.leases();
    let show = |lease: &Pubkey| t.ok(&client, &["lease", "show", &lease.to_string()]);
    let part = show(&leases[1]);
    assert_eq!(
        part["gang"],
        json!({"part": 1, "parts": 2, "rendezvous_port": null}),
        "{part}"
    );
    assert_eq!(part["machine"], other.machine.to_string());
    t.send(
        &agent,
        &[&SetRendezvous {
            agent: &agent,
            machine: lead.machine,
            lease: leases[0],
            port: 31_000,
        }],
    );
    let first_part = show(&leases[0]);
    assert_eq!(
        first_part["gang"],
        json!({"part": 0, "parts": 2, "rendezvous_port": 31000}),
        "{first_part}"
    );

    // A second gang that needs GPU 0 of both machines at other power terms (so it cannot
    // share them) waits for the first: `bid explain` says when both are free. Once they hold
    // their GPUs for it (`reserve_gang`, as the agents send it), it says which machines and
    // from when.
    let second_gang = place_args(
        &m,
        &[
            "--overclock",
            "power=350",
            "--price",
            "2",
            "--machines",
            "2",
            "--class",
            "0",
            "--port",
            "29500",
            "--nonce",
            "4",
        ],
    );
    let out = t.ok(&client, &second_gang);
    let waiting = pk(&out["bid"]);
    let running: Vec<Lease> = leases.iter().map(|l| t.account::<Lease>(l)).collect();
    let ends = running[0].stop();
    let ex = t.ok(&client, &["bid", "explain", &waiting.to_string()]);
    assert_eq!(ex["earliest_start"], ends, "{ex}");
    let mut wanted: Vec<String> = ex["earliest_start_parts"]
        .as_array()
        .expect("the parts' machines")
        .iter()
        .map(|p| p.as_str().unwrap().into())
        .collect();
    wanted.sort();
    assert_eq!(wanted, both, "{ex}");
    assert_eq!(ex["reserved_parts"], json!(null), "{ex}");
    let b: Bid = t.account(&waiting);
    let on = [lead.machine, other.machine];
    let reserve = ReserveGang::of(
        s.market,
        market.queue_book,
        waiting,
        b.reserved_on,
        (&on, &running),
        vec![],
    );
    t.send(&key_of(&client), &[&reserve]);
    let ex = t.ok(&client, &["bid", "explain", &waiting.to_string()]);
    assert_eq!(
        ex["reserved_parts"],
        json!([lead.machine.to_string(), other.machine.to_string()]),
        "{ex}"
    );
    assert_eq!(ex["reserved_from"], ends, "{ex}");
    assert!(
        ex["summary"].as_str().unwrap().contains(&format!(
            "machines {}, {} hold its GPUs for it from {ends} (its reservation)",
            lead.machine, other.machine
        )),
        "{ex}"
    );
}
