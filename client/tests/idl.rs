//! Integrators' clients from `idl/gpu_market.json` alone, against a private
//! solana-test-validator, each decoding each kind of account (the queue book's entries
//! included) and sending `top_up_bid`, `place_bid`, `cancel_bid` and `allocate`; this checks what
//! each read and did against the chain:
//! - Anchor's TypeScript client (`client/tests/idl/integrate.mjs`, `@anchor-lang/core` 1.2,
//!   pinned in its package-lock.json). Before the market's accounts named their fields'
//!   accounts with explicit constraints, the IDL claimed relations Anchor's client cannot follow
//!   (the fields sit under `data`) and `top_up_bid` failed: "Reached maximum depth for account
//!   resolution".
//! - A client Codama generates (`client/tests/codama`: `@codama/renderers-js` on `@solana/kit`,
//!   type-checked by tsc). Before the addresses' seeds were top-level instruction arguments
//!   (`place_bid`'s `nonce`, `init_market`'s `id`, `seal_env`'s `recipient`), Codama dropped them
//!   (`args.nonce`) and could not derive a new bid's address; before the book's entries were in
//!   the IDL, neither client could read a book's bids.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;
use gpu_market::state::{Bid, Lease, Machine, Market};
use serde_json::Value;
use solana_signer::Signer;

#[test]
fn anchors_typescript_client_reads_the_accounts_and_sends_the_bid_and_lease_instructions() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/idl");
    assert!(
        dir.join("node_modules/@anchor-lang/core").exists(),
        "@anchor-lang/core is missing: {MISSING}"
    );
    integrates(&dir.join("integrate.mjs"));
}

#[test]
fn a_client_codama_generates_reads_the_accounts_and_sends_the_bid_and_lease_instructions() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/codama");
    assert!(
        dir.join("node_modules/codama").exists(),
        "Codama is missing: {MISSING}"
    );
    integrates(&dir.join("run.mjs"));
}

const MISSING: &str = "run `bash scripts/browser.sh` to install it";

/// Runs the integrator's `script` (Node) against a market with a machine and a waiting bid,
/// and checks what it says it read and did against the chain.
fn integrates(script: &Path) {
    let t = T::start();
    let s = MarketSetup::new(&t, &[]);
    // Another market with a staker of its own: a client reads this market's accounts only (the
    // suite's validator holds many markets).
    let (mint, treasury) = (s.mint.to_string(), s.treasury.to_string());
    let other = t.ok(
        &s.authority,
        &[
            "market",
            "init",
            "--id",
            "1",
            "--stake-mint",
            &mint,
            "--treasury",
            &treasury,
        ],
    );
    let staker = t.wallet("other-staker");
    s.fund(&t, &staker, "10");
    let other = other["market"].as_str().unwrap();
    t.ok(&staker, &["stake", "deposit", "1", "--market", other]);
    let host = register_host(&t, &s);
    let client = t.wallet("client");
    let tokens = s.fund(&t, &client, "100");
    let m = s.m();
    let out = t.ok(
        &client,
        &place_args(
            &m,
            &["--overclock", "power=300", "--price", "2", "--nonce", "1"],
        ),
    );
    let bid = pk(&out["bid"]);
    let escrow_before = t.account::<Bid>(&bid).escrow;
    let funds_before = t.balance(&tokens);

    let secret = |path: &Path| serde_json::to_string(&key_of(path).to_bytes().to_vec()).unwrap();
    let run = Command::new("node")
        .arg(script)
        .env("RPC_URL", t.rpc().url())
        .env(
            "IDL",
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../idl/gpu_market.json"),
        )
        .env("MARKET", &m)
        .env("MACHINE", host.machine.to_string())
        .env("BID", bid.to_string())
        .env("CLIENT_SECRET", secret(&client))
        .env("AGENT_SECRET", secret(&host.agent))
        .output()
        .unwrap_or_else(|e| panic!("cannot run node ({e}): {MISSING}"));
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success(),
        "{} failed: {stderr}",
        script.display()
    );
    let got: Value = serde_json::from_slice(&run.stdout).unwrap();

    // What it decoded is what the chain holds.
    let market: Market = t.account(&s.market);
    let machine: Machine = t.account(&host.machine);
    let decoded = &got["decoded"];
    assert_eq!(decoded["market_queue_book"], market.queue_book.to_string());
    assert_eq!(
        decoded["market_payment_mint"],
        market.payment_mint.to_string()
    );
    assert_eq!(decoded["machine_gpu_count"], machine.gpu_count);
    assert_eq!(decoded["machine_owner"], machine.owner.to_string());
    assert_eq!(decoded["bid_price"], "2000000");
    assert_eq!(decoded["bid_escrow"], escrow_before.to_string());
    assert_eq!(decoded["book_market"], m);
    assert_eq!(
        decoded["book_entries"],
        serde_json::json!([bid.to_string()])
    );
    assert_eq!(decoded["stakes"], 2, "the host's and the client's");

    // The top-up went into the first bid's escrow; the second bid was placed and cancelled, its
    // escrow back in full; the first bid runs on GPU 0 as the agent allocated it.
    let placed = pk(&got["placed_bid"]);
    let placed_escrow: u64 = got["placed_escrow"].as_str().unwrap().parse().unwrap();
    assert!(placed_escrow > 0);
    assert!(!t.exists(&placed), "cancelled");
    assert_eq!(
        t.balance(&tokens),
        funds_before - 1000,
        "the top-up left the client's tokens; the cancelled bid's escrow came back"
    );
    let lease = pk(&got["lease"]);
    let l: Lease = t.account(&lease);
    assert_eq!((l.bid, l.machine), (bid, host.machine));
    assert_eq!(got["lease_bid"], bid.to_string());
    assert_eq!(l.client, key_of(&client).pubkey());
}
