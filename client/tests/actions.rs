//! `gpu-market serve`'s Solana Actions on a real validator, used as a wallet uses them: each
//! action's metadata read, its transaction asked for with `{"account"}`, signed with the
//! account's keypair as a wallet would, sent (to the cluster, or through `/api/send`), and the
//! balances and accounts checked. Bad requests get an error object, build nothing and move
//! nothing.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;

use base64::Engine as _;
use common::*;
use gpu_market::pda;
use gpu_market::state::{Bid, Lease, MachineStatus, StakeAccount};
use serde_json::{json, Value};
use solana_keypair::Keypair;
use solana_pubkey::Pubkey;
use solana_signer::Signer;
use solana_transaction::Transaction;

/// The service's answers, asked over plain HTTP/1.1.
trait Ask {
    fn request(&self, method: &str, path: &str, body: Option<&Value>) -> Answer;
    fn get(&self, path: &str) -> Answer;
    fn transaction(&self, path: &str, account: &Pubkey) -> (Transaction, String);
    fn refused(&self, path: &str, body: &Value) -> String;
}

impl Ask for Served {
    /// One HTTP/1.1 request: the status, the headers (names lower-cased) and the body.
    fn request(&self, method: &str, path: &str, body: Option<&Value>) -> Answer {
        let mut stream = TcpStream::connect(self.addr()).unwrap();
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            self.addr(),
            body.len()
        )
        .unwrap();
        let mut raw = String::new();
        stream.read_to_string(&mut raw).unwrap();
        let (head, body) = raw.split_once("\r\n\r\n").unwrap();
        let mut lines = head.lines();
        let status = lines
            .next()
            .unwrap()
            .split(' ')
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        let headers = lines
            .filter_map(|l| l.split_once(": "))
            .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string()))
            .collect();
        Answer {
            status,
            headers,
            body: body.to_string(),
        }
    }

    fn get(&self, path: &str) -> Answer {
        self.request("GET", path, None)
    }

    /// POSTs `{"account": account}` to an action: its unsigned transaction and message.
    fn transaction(&self, path: &str, account: &Pubkey) -> (Transaction, String) {
        let a = self.request(
            "POST",
            path,
            Some(&json!({ "account": account.to_string() })),
        );
        assert_eq!(a.status, 200, "{path}: {}", a.body);
        let v = a.json();
        assert_eq!(v["type"], "transaction", "{v}");
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(v["transaction"].as_str().unwrap())
            .unwrap();
        let tx: Transaction = bincode::deserialize(&bytes).unwrap();
        // It asks for the compute units and account data it uses (`sdk::budget::sized`), not
        // the runtime's 200,000 units and 64 MiB.
        let asked = gpu_market_tests::asked_budget(&tx.clone().into());
        assert!(
            asked.units.is_some_and(|u| u < 200_000) && asked.loaded_bytes.is_some(),
            "{path}: {asked:?}"
        );
        (tx, v["message"].as_str().unwrap().to_string())
    }

    /// An action's refusal: a client error whose body is only the spec's `{"message"}`.
    fn refused(&self, path: &str, body: &Value) -> String {
        let a = self.request("POST", path, Some(body));
        assert!(
            (400..500).contains(&a.status),
            "{path}: {} {}",
            a.status,
            a.body
        );
        let v = a.json();
        let object = v.as_object().unwrap();
        assert_eq!(object.len(), 1, "{v}");
        v["message"].as_str().unwrap().to_string()
    }
}

struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Signs `tx` with `wallet` as a wallet does (the fee payer's is the only signature asked for)
/// and sends it to the cluster.
fn sign_and_send(t: &T, wallet: &Keypair, mut tx: Transaction) {
    assert_eq!(tx.message.account_keys[0], wallet.pubkey(), "the fee payer");
    assert_eq!(tx.message.header.num_required_signatures, 1);
    assert!(
        tx.signatures.iter().all(|s| *s == Default::default()),
        "the service signs nothing"
    );
    let blockhash = tx.message.recent_blockhash;
    tx.try_sign(&[wallet], blockhash).unwrap();
    t.rpc()
        .send_and_confirm_transaction(&tx)
        .unwrap_or_else(|e| panic!("the signed transaction failed: {e}"));
}

fn stake_of(t: &T, market: &Pubkey, owner: &Pubkey) -> StakeAccount {
    t.account(&pda::stake(market, owner).0)
}

const BID_QUERY: &str = "image=registry.example%2Ftrain%3Av3&image-digest=abababababababababababababababababababababababababababababababab&gpus=1&gib-per-gpu=40&overclock=power%3D250&price=3&duration=1h&class=0";

#[test]
fn each_action_builds_the_transaction_a_wallet_signs_and_bad_requests_build_nothing() {
    let t = T::start();
    // A cooldown of 30 s: the withdraw action is asked for right after the unstake and must
    // still find it running, on a machine that stalls for a while.
    let s = MarketSetup::new(&t, &["--unstake-cooldown-secs", "30"]);
    let host = register_host(&t, &s);
    // The machine gives its leases CPU and memory: the bid below reserves some, and a queue bid
    // names a machine it could run on.
    let machine = host.machine.to_string();
    t.ok(
        &t.path("host.json"),
        &[
            "host", "update", &machine, "--cpus", "16", "--memory", "64GiB",
        ],
    );
    let alice_file = t.wallet("alice");
    let alice = key_of(&alice_file);
    let tokens = s.fund(&t, &alice_file, "100");
    let bob_file = t.wallet("bob");
    s.fund(&t, &bob_file, "100");
    // The cluster's URL as an RPC provider gives it, with its API key (the validator ignores
    // the query): no page or error shows the key.
    let rpc_url = format!("{}/?api-key=s3cret-key", t.cluster.rpc_url);
    let served = serve(&rpc_url, &s.market);
    let home = served.get("/");
    assert_eq!(home.status, 200, "{}", home.body);
    assert!(!home.body.contains("s3cret"), "the page shows the RPC key");
    // Headers that keep the page from being framed, sniffed or loading from elsewhere.
    assert_eq!(home.header("x-frame-options"), Some("DENY"));
    assert_eq!(home.header("x-content-type-options"), Some("nosniff"));
    let csp = home.header("content-security-policy").unwrap_or_default();
    assert!(
        csp.contains("frame-ancestors 'none'") && csp.contains("script-src 'self'"),
        "{csp}"
    );

    // The Actions discovery file, and an action's metadata with the spec's headers.
    let rules = served.get("/actions.json").json();
    assert_eq!(rules["rules"][0]["apiPath"], "/api/actions/**");
    let meta = served.get("/api/actions/stake");
    assert_eq!(meta.status, 200);
    assert_eq!(meta.header("access-control-allow-origin"), Some("*"));
    assert!(meta.header("x-action-version").is_some());
    let genesis = t.rpc().get_genesis_hash().unwrap().to_string();
    assert_eq!(
        meta.header("x-blockchain-ids"),
        Some(format!("solana:{}", &genesis[..32]).as_str())
    );
    let link = &meta.json()["links"]["actions"][0];
    assert_eq!(link["href"], "/api/actions/stake?amount={amount}");
    assert!(meta.json()["icon"].as_str().unwrap().ends_with("/icon.svg"));
    assert_eq!(served.get("/icon.svg").status, 200);
    assert_eq!(
        served.request("OPTIONS", "/api/actions/stake", None).status,
        200
    );

    // Stake: the stake account opened and 12.5 tokens locked.
    let (tx, message) = served.transaction("/api/actions/stake?amount=12.5", &alice.pubkey());
    assert!(message.contains("12.5"), "{message}");
    sign_and_send(&t, &alice, tx);
    assert_eq!(t.balance(&tokens), 87_500_000);
    assert_eq!(stake_of(&t, &s.market, &alice.pubkey()).amount, 12_500_000);

    // Bad requests: an error object each, no transaction, nothing moved.
    let me = json!({ "account": alice.pubkey().to_string() });
    for (path, body, says) in [
        ("/api/actions/stake?amount=-1", &me, "not a decimal number"),
        (
            "/api/actions/stake?amount=1000",
            &me,
            "insufficient balance",
        ),
        ("/api/actions/stake", &me, "needs amount"),
        ("/api/actions/stake?amount=1&market=x", &me, "no parameter"),
        (
            "/api/actions/stake?amount=1",
            &json!({"account": "nobody"}),
            "not a public key",
        ),
        ("/api/actions/stake?amount=1", &json!({}), "no account"),
        ("/api/actions/withdraw", &me, "nothing is waiting"),
        ("/api/actions/bid?gpus=1", &me, "not provided: image"),
        ("/api/actions/cancel?bid=notakey", &me, "not a public key"),
    ] {
        let m = served.refused(path, body);
        assert!(m.contains(says), "{path}: {m}");
    }
    let not_json = served.request("POST", "/api/actions/stake?amount=1", None);
    assert_eq!(not_json.status, 400);
    assert!(not_json.json()["message"]
        .as_str()
        .unwrap()
        .contains("not JSON"));
    assert_eq!(served.get("/api/actions/steal").status, 404);
    assert_eq!(t.balance(&tokens), 87_500_000);
    assert_eq!(stake_of(&t, &s.market, &alice.pubkey()).amount, 12_500_000);

    // Unstake, then withdraw: refused until the cooldown ends, then paid out.
    let (tx, _) = served.transaction("/api/actions/unstake?amount=2.5", &alice.pubkey());
    sign_and_send(&t, &alice, tx);
    let st = stake_of(&t, &s.market, &alice.pubkey());
    assert_eq!((st.amount, st.pending_unstake), (10_000_000, 2_500_000));
    let now = t.cluster_time();
    assert!(
        now < st.unlocks_at,
        "the cooldown ended (at {}) before it could be checked: the cluster's clock reads {now}",
        st.unlocks_at
    );
    let early = served.refused("/api/actions/withdraw", &me);
    assert!(early.contains("cooldown"), "{early}");
    wait_until(&t, st.unlocks_at);
    let (tx, _) = served.transaction("/api/actions/withdraw", &alice.pubkey());
    sign_and_send(&t, &alice, tx);
    assert_eq!(t.balance(&tokens), 90_000_000);
    assert_eq!(stake_of(&t, &s.market, &alice.pubkey()).pending_unstake, 0);

    // A bid (3 tokens per GPU-hour, one GPU, one hour: 3 in escrow for its run, up to 3 more for
    // the hour it may wait), topped up by 1 through the relay (a wallet that only signs), then
    // cancelled: all of it back.
    // It reserves 2 cores and 8 GiB, with `bid place`'s own flags.
    let path = format!("/api/actions/bid?{BID_QUERY}&nonce=7&cpus=2&memory=8GiB");
    let (tx, message) = served.transaction(&path, &alice.pubkey());
    let bid = pda::bid(&s.market, &alice.pubkey(), 7).0;
    assert!(message.contains(&bid.to_string()), "{message}");
    sign_and_send(&t, &alice, tx);
    let placed = t.account::<Bid>(&bid);
    let escrow = placed_escrow(&placed);
    assert_eq!(placed.escrow, escrow);
    assert!((3_000_000..=6_000_000).contains(&escrow), "{escrow}");
    assert_eq!((placed.cpu_milli, placed.memory_mib), (2_000, 8_192));
    assert_eq!(t.balance(&tokens), 90_000_000 - escrow);
    let (mut tx, _) = served.transaction(
        &format!("/api/actions/top-up?bid={bid}&amount=1"),
        &alice.pubkey(),
    );
    let blockhash = tx.message.recent_blockhash;
    tx.try_sign(&[&alice], blockhash).unwrap();
    let signed = base64::engine::general_purpose::STANDARD.encode(bincode::serialize(&tx).unwrap());
    let relayed = served.request("POST", "/api/send", Some(&json!({ "transaction": signed })));
    assert_eq!(relayed.status, 200, "{}", relayed.body);
    assert_eq!(relayed.json()["signature"], tx.signatures[0].to_string());
    assert_eq!(t.account::<Bid>(&bid).escrow, escrow + 1_000_000);
    let unsigned = served
        .transaction(&format!("/api/actions/cancel?bid={bid}"), &alice.pubkey())
        .0;
    let forged =
        base64::engine::general_purpose::STANDARD.encode(bincode::serialize(&unsigned).unwrap());
    let m = served.refused("/api/send", &json!({ "transaction": forged }));
    assert!(m.contains("transaction failed"), "{m}");
    // Signed, but not the market's: the relay sends nothing, and nothing moves.
    let bob_key = key_of(&bob_file).pubkey();
    let before = t.rpc().get_balance(&bob_key).unwrap();
    let mut transfer = Transaction::new_with_payer(
        &[solana_system_interface::instruction::transfer(
            &alice.pubkey(),
            &bob_key,
            1_000,
        )],
        Some(&alice.pubkey()),
    );
    transfer.sign(&[&alice], blockhash);
    let foreign =
        base64::engine::general_purpose::STANDARD.encode(bincode::serialize(&transfer).unwrap());
    let m = served.refused("/api/send", &json!({ "transaction": foreign }));
    assert!(m.contains("relays only the market's transactions"), "{m}");
    assert_eq!(t.rpc().get_balance(&bob_key).unwrap(), before);
    // Bob may not cancel alice's bid.
    let bob = key_of(&bob_file);
    let theirs = served.refused(
        &format!("/api/actions/cancel?bid={bid}"),
        &json!({ "account": bob.pubkey().to_string() }),
    );
    assert!(theirs.contains("belongs to"), "{theirs}");
    let (tx, message) =
        served.transaction(&format!("/api/actions/cancel?bid={bid}"), &alice.pubkey());
    let refunded = format!("{} refunded", shown(escrow + 1_000_000));
    assert!(message.contains(&refunded), "{message}");
    sign_and_send(&t, &alice, tx);
    assert!(!t.exists(&bid));
    assert_eq!(t.balance(&tokens), 90_000_000);

    // A running lease, ended by its client through the action (a stranger is refused).
    let path = format!("/api/actions/bid?{BID_QUERY}&nonce=8");
    let (tx, _) = served.transaction(&path, &alice.pubkey());
    sign_and_send(&t, &alice, tx);
    let lease = allocate_as_agent(
        &t,
        &s,
        &host,
        pda::bid(&s.market, &alice.pubkey(), 8).0,
        alice.pubkey(),
    );
    let stranger = served.refused(
        &format!("/api/actions/end-lease?lease={lease}"),
        &json!({ "account": bob.pubkey().to_string() }),
    );
    assert!(stranger.contains("only the lease's client"), "{stranger}");
    assert_eq!(t.account::<Lease>(&lease).paid, 0);
    let (tx, _) = served.transaction(
        &format!("/api/actions/end-lease?lease={lease}"),
        &alice.pubkey(),
    );
    let ends_at = t.account::<Lease>(&lease).ends_at;
    sign_and_send(&t, &alice, tx);
    if t.exists(&lease) {
        // Some of its time had passed: it stops now, and settles once the host proves it.
        let l = t.account::<Lease>(&lease);
        assert!(
            l.stop() < ends_at && l.stop() <= t.cluster_time(),
            "it stops now"
        );
    } else {
        // Ended within the second it started: settled at once, the whole escrow back.
        assert_eq!(t.balance(&tokens), 90_000_000);
    }

    // Alice's console: her lease (while it is open), none of her bids waiting, no machine.
    let console = served.get(&format!("/wallet/{}", alice.pubkey()));
    assert_eq!(console.status, 200, "{}", console.body);
    assert_eq!(
        console
            .body
            .contains(&format!("data-record=\"my-lease\" data-key=\"{lease}\"")),
        t.exists(&lease)
    );
    assert!(
        console.body.contains("data-list=\"my-bid\">(none)"),
        "{}",
        console.body
    );
    assert!(console.body.contains("data-list=\"my-machine\">(none)"));

    // A host's machine, paused, resumed and retired through the actions its wallet signs; a
    // stranger is refused, and a retired machine stays retired.
    let owner = key_of(&t.path("host.json"));
    let status = || {
        t.account::<gpu_market::state::Machine>(&host.machine)
            .status
    };
    let theirs = served.refused(
        &format!("/api/actions/pause?machine={machine}"),
        &json!({ "account": bob.pubkey().to_string() }),
    );
    assert!(theirs.contains("belongs to"), "{theirs}");
    let console = served.get(&format!("/wallet/{}", owner.pubkey()));
    let row = format!("data-record=\"my-machine\" data-key=\"{machine}\"");
    assert!(console.body.contains(&row), "{}", console.body);
    assert!(console.body.contains(&format!(
        "data-action=\"/api/actions/pause?machine={machine}\""
    )));
    for (action, expected) in [
        ("pause", MachineStatus::Paused),
        ("resume", MachineStatus::Active),
        ("retire", MachineStatus::Retired),
    ] {
        let path = format!("/api/actions/{action}?machine={machine}");
        let (tx, message) = served.transaction(&path, &owner.pubkey());
        assert!(message.contains(&machine), "{message}");
        sign_and_send(&t, &owner, tx);
        assert_eq!(status(), expected, "{action}");
    }
    let retired = served.refused(
        &format!("/api/actions/resume?machine={machine}"),
        &json!({ "account": owner.pubkey().to_string() }),
    );
    assert!(retired.contains("retired"), "{retired}");
    let console = served.get(&format!("/wallet/{}", owner.pubkey()));
    assert!(
        !console.body.contains("/api/actions/resume?machine="),
        "no form for a retired machine"
    );
}

/// The market page's sealed environment, through the service's endpoints as `wallet.js` uses
/// them (the sealing itself, done by `seal.js` in the browser, done here by the sdk: the two are
/// checked against each other in `seal.rs`): the salt's message for the text's sha256, the bid
/// placed with the hash, the machines that may run it, and each copy stored by a transaction
/// the client signs. A stranger, bytes that are not a sealed environment, one too large, and a
/// bad hash are refused and store nothing.
#[test]
fn a_bid_sealed_in_the_browser_stores_its_copies_for_its_client_only() {
    use gpu_market::state::{Machine, SealedEnv};
    use gpu_market_sdk::envelope::{self, Environment};
    use gpu_market_sdk::offchain;
    use sha2::Digest;
    let t = T::start();
    let s = MarketSetup::new(&t, &[]);
    let host = register_host(&t, &s);
    let alice_file = t.wallet("alice");
    let alice = key_of(&alice_file);
    s.fund(&t, &alice_file, "100");
    let bob = key_of(&t.wallet("bob"));
    let served = serve(&t.cluster.rpc_url, &s.market);
    let me = json!({ "account": alice.pubkey().to_string() });
    let text = b"HF_TOKEN=hf_secret\n";

    // The salt's message: what the CLI signs for the same text.
    let salt = served.request(
        "POST",
        "/api/env/salt",
        Some(&json!({ "sha256": hex::encode(sha2::Sha256::digest(text)) })),
    );
    assert_eq!(salt.status, 200, "{}", salt.body);
    let message = base64::engine::general_purpose::STANDARD
        .decode(salt.json()["message"].as_str().unwrap())
        .unwrap();
    assert_eq!(message, offchain::wrap(&envelope::salt_text(text)).unwrap());
    let m = served.refused("/api/env/salt", &json!({ "sha256": "abc" }));
    assert!(m.contains("64 hex digits"), "{m}");

    // A bad hash builds no bid.
    for (hash, says) in [("zz", "64 hex digits"), (&"0".repeat(64)[..], "is zero")] {
        let m = served.refused(
            &format!("/api/actions/bid?{BID_QUERY}&nonce=3&env-hash={hash}"),
            &me,
        );
        assert!(m.contains(says), "{m}");
    }
    let env = Environment::new(text, &alice).unwrap();
    let path = format!(
        "/api/actions/bid?{BID_QUERY}&nonce=3&env-hash={}",
        hex::encode(env.hash())
    );
    let (tx, _) = served.transaction(&path, &alice.pubkey());
    sign_and_send(&t, &alice, tx);
    let bid = pda::bid(&s.market, &alice.pubkey(), 3).0;
    assert_eq!(t.account::<Bid>(&bid).env_hash, env.hash());

    // The machine that may run it, and its agent key in bytes for the browser.
    let agent = t.account::<Machine>(&host.machine).agent;
    let able = served.get(&format!("/api/env/{bid}")).json();
    assert_eq!(able["machines"][0]["machine"], host.machine.to_string());
    assert_eq!(able["machines"][0]["agent"], agent.to_string());
    assert_eq!(
        able["machines"][0]["agent_bytes"],
        base64::engine::general_purpose::STANDARD.encode(agent)
    );
    let copy = pda::sealed_env(&bid, &agent).0;
    let seal_path = format!("/api/env/{bid}/seal");
    let sealed = base64::engine::general_purpose::STANDARD.encode(env.seal_to(&agent).unwrap());
    let body = |account: &Pubkey, sealed: &str| json!({ "account": account.to_string(), "recipient": agent.to_string(), "sealed": sealed });
    let refusals = [
        (body(&bob.pubkey(), &sealed), "only the bid's client"),
        (
            body(
                &alice.pubkey(),
                &base64::engine::general_purpose::STANDARD.encode(text),
            ),
            "not a sealed environment",
        ),
        (
            body(
                &alice.pubkey(),
                &base64::engine::general_purpose::STANDARD
                    .encode([envelope::MAGIC.as_slice(), &[7; 900]].concat()),
            ),
            "too large to travel on chain",
        ),
    ];
    for (request, says) in refusals {
        let m = served.refused(&seal_path, &request);
        assert!(m.contains(says), "{m}");
    }
    assert!(!t.exists(&copy));
    let stored = served.request("POST", &seal_path, Some(&body(&alice.pubkey(), &sealed)));
    assert_eq!(stored.status, 200, "{}", stored.body);
    let tx: Transaction = bincode::deserialize(
        &base64::engine::general_purpose::STANDARD
            .decode(stored.json()["transaction"].as_str().unwrap())
            .unwrap(),
    )
    .unwrap();
    sign_and_send(&t, &alice, tx);
    let on_chain = t.account::<SealedEnv>(&copy);
    assert_eq!(
        envelope::open_env(&on_chain.sealed, &key_of(&host.agent), &env.hash()).unwrap(),
        text
    );
    // Sealed to every machine that may run it: none left.
    let able = served.get(&format!("/api/env/{bid}")).json();
    assert_eq!(able["machines"], json!([]));

    // A bid without an environment has nothing to seal.
    let (tx, _) = served.transaction(
        &format!("/api/actions/bid?{BID_QUERY}&nonce=4"),
        &alice.pubkey(),
    );
    sign_and_send(&t, &alice, tx);
    let plain = pda::bid(&s.market, &alice.pubkey(), 4).0;
    let m = served.get(&format!("/api/env/{plain}")).json();
    assert!(
        m["message"]
            .as_str()
            .unwrap()
            .contains("has no environment"),
        "{m}"
    );
}
