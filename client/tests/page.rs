//! The market page of `gpu-market serve` on a real validator, read twice: as plain HTML (no
//! JavaScript), and in Debian's Chromium with a test wallet registered through the Wallet
//! Standard (client/tests/browser/page.mjs). What the page shows — each bid's score parts, each
//! machine's GPUs, the lease's paid and refundable amounts, the reserve price now — is checked
//! against the accounts on chain at the cluster time the page was rendered at; before and after
//! a new bid; and a stake placed through the page's form, signed by the test wallet, moves the
//! stake and the token balances by exactly its amount.
//!
//! Needs Chromium, Node.js and playwright-core: `bash scripts/browser.sh` installs them. Without
//! them the test fails, saying so.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use gpu_market::instructions::PlaceBidArgs;
use gpu_market::pda;
use gpu_market::state::{
    Bid, BidKind, GpuSpec, Lease, Machine, Market, MarketParams, OverclockTerms, StakeAccount,
};
use gpu_market_core::amount::format as tokens;
use gpu_market_core::math::normalise_bps;
use gpu_market_core::{score, settlement};
use gpu_market_sdk::book::read_book;
use gpu_market_sdk::gpus::format_uuid;
use gpu_market_sdk::Allocate;
use gpu_market_tests::live::{LiveMarket, Wallet};
use serde_json::Value;
use solana_signer::Signer;

const TOKEN: u64 = 1_000_000;

/// Two GPUs of class 0 (24 GiB, topology group 0) and two of class 1 (48 GiB, group 1).
fn gpus() -> Vec<GpuSpec> {
    (0..4u8)
        .map(|i| GpuSpec {
            uuid: [i + 1; 16],
            class: i / 2,
            topology_group: i / 2,
            memory_gib: 24 * (1 + i as u16 / 2),
            power_w: [150, 450],
            core_lock_mhz: [210, 2_520],
            mem_lock_mhz: [0, 0],
            core_offset_mhz: [-200, 200],
            mem_offset_mhz: [0, 1_500],
        })
        .collect()
}

/// A queue bid for `gpus` GPUs of the classes `classes` (a mask) at `price` per GPU-hour for
/// ten minutes, with `premium` paid for urgency.
fn queue_bid(now: i64, gpus: u8, classes: u8, price: u64, premium: u64) -> PlaceBidArgs {
    PlaceBidArgs {
        kind: BidKind::Queue,
        // Text the page must escape.
        image_ref: format!("registry.example/train:v{gpus}<b>&\"'"),
        image_digest: [0xab; 32],
        env_hash: [0; 32],
        gpu_count: gpus,
        gib_per_gpu: 16,
        accepted_classes: classes,
        overclock: vec![OverclockTerms {
            power_limit_w: 300,
            ..Default::default()
        }],
        price,
        max_duration_secs: 600,
        min_duration_secs: 600,
        deadline: now + 1_200,
        urgency_premium: premium,
        ports: vec![],
        scratch_gib: 0,
        cpu_milli: 0,
        memory_mib: 0,
        regions: Vec::new(),
        auto_power: None,
    }
}

/// What a page shows: each record (`data-record`, `data-key`) with its fields, and the cluster
/// time it was rendered at.
struct Shown {
    cluster_time: i64,
    records: HashMap<(String, String), HashMap<String, String>>,
}

impl Shown {
    fn field(&self, kind: &str, key: &str, field: &str) -> &str {
        self.records
            .get(&(kind.to_string(), key.to_string()))
            .unwrap_or_else(|| panic!("the page shows no {kind} {key}"))
            .get(field)
            .unwrap_or_else(|| panic!("the page shows no {field} of {kind} {key}"))
    }

    fn keys(&self, kind: &str) -> Vec<&str> {
        self.records
            .keys()
            .filter(|(k, _)| k == kind)
            .map(|(_, key)| key.as_str())
            .collect()
    }

    /// From the JSON page.mjs read out of the DOM.
    fn from_dom(read: &Value) -> Shown {
        let mut records = HashMap::new();
        for r in read["records"].as_array().unwrap() {
            let fields = r["fields"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                .collect();
            let id = (
                r["record"].as_str().unwrap().to_string(),
                r["key"].as_str().unwrap().to_string(),
            );
            records.insert(id, fields);
        }
        Shown {
            cluster_time: read["cluster_time"].as_i64().unwrap(),
            records,
        }
    }

    /// From the HTML as served, without running any script: the same markers the DOM reader
    /// uses (`data-record`, `data-key`, `data-field`, `data-value`).
    fn from_html(html: &str) -> Shown {
        let cluster_time = between(html, "data-cluster-time=\"", "\"").parse().unwrap();
        let mut records = HashMap::new();
        let marker = " data-record=\"";
        let mut rest = html;
        while let Some(at) = rest.find(marker) {
            let tag_start = rest[..at].rfind('<').unwrap();
            let tag = rest[tag_start + 1..at].split(' ').next().unwrap();
            let element = &rest[tag_start..];
            let end = element.find(&format!("</{tag}>")).unwrap();
            let element = &element[..end];
            let kind = between(element, "data-record=\"", "\"").to_string();
            let key = between(element, "data-key=\"", "\"").to_string();
            records.insert((kind, key), html_fields(element));
            rest = &rest[at + marker.len()..];
        }
        Shown {
            cluster_time,
            records,
        }
    }
}

fn between<'a>(s: &'a str, start: &str, end: &str) -> &'a str {
    let from = s.find(start).unwrap_or_else(|| panic!("no {start} in {s}")) + start.len();
    let len = s[from..].find(end).unwrap();
    &s[from..from + len]
}

/// Each field of an element's HTML: its `data-value`, else its text; the first of a name wins
/// (a record's own fields come before those of records nested in it).
fn html_fields(element: &str) -> HashMap<String, String> {
    let mut fields = HashMap::new();
    for part in element.split(" data-field=\"").skip(1) {
        let name = &part[..part.find('"').unwrap()];
        let open_end = part.find('>').unwrap();
        let value = if part[..open_end].contains("data-value=\"") {
            between(part, "data-value=\"", "\"").to_string()
        } else {
            let content = &part[open_end + 1..];
            let close = content
                .find("</td>")
                .or(content.find("</time>"))
                .unwrap_or(content.len());
            text(&content[..close])
        };
        fields.entry(name.to_string()).or_insert(value);
    }
    fields
}

/// HTML's text: tags removed, the escapes the page writes decoded.
fn text(html: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
        .trim()
        .to_string()
}

/// `GET path` over plain HTTP/1.0: the status and the body.
fn http_get(base: &str, path: &str) -> (u16, String) {
    let host = base.trim_start_matches("http://");
    let mut stream = TcpStream::connect(host).unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n").unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, body.to_string())
}

/// The chain as the page must show it at `shown.cluster_time`: the queue book in order with each
/// bid's score parts, each machine's GPUs, each lease's paid and refundable amounts, the reserve
/// price of each class now.
async fn check_against_chain(live: &LiveMarket, shown: &Shown) {
    let now = shown.cluster_time;
    let m: Market = live.market_state().await.unwrap();
    let c = &live.cluster;
    let book = read_book(&c.rpc().get_account_data(&live.queue_book).await.unwrap()).unwrap();
    assert_eq!(shown.keys("bid").len(), book.entries.len());
    for (rank, entry) in book.entries.iter().enumerate() {
        let b: Bid = c.account(&entry.bid).await.unwrap();
        let stake: StakeAccount = c
            .account(&pda::stake(&live.market, &b.client).0)
            .await
            .unwrap();
        let key = entry.bid.to_string();
        let spend = settlement::spend_per_hour(b.price, b.kind.unit(), b.gpu_count as u64).unwrap();
        let escrow = settlement::escrow_for(
            b.price,
            b.kind.unit(),
            b.gpu_count as u64,
            b.max_duration_secs as u64,
        )
        .unwrap();
        let i = m
            .params
            .score_inputs(stake.amount, spend, escrow, b.urgency_premium)
            .unwrap();
        let waited = m
            .interval_at(now)
            .saturating_sub(m.interval_at(b.placed_at));
        let p = &m.params;
        let expected = [
            ("rank", (rank + 1).to_string()),
            ("gpus", b.gpu_count.to_string()),
            ("price", tokens(b.price, 6)),
            ("escrow", tokens(b.escrow, 6)),
            ("score", b.score.to_string()),
            (
                "stake_bps",
                normalise_bps(i.stake, i.stake_bound).to_string(),
            ),
            (
                "urgency_bps",
                score::urgency_bps(i.urgency_premium, i.urgency_bound).to_string(),
            ),
            (
                "complexity_bps",
                score::complexity_bps(i.spend_per_hour, i.spend_bound).to_string(),
            ),
            (
                "aged_score",
                score::aged_score(
                    b.score,
                    p.aging_per_interval as u64,
                    waited,
                    p.aging_cap_bps as u64,
                )
                .to_string(),
            ),
        ];
        for (field, value) in expected {
            assert_eq!(
                shown.field("bid", &key, field),
                value,
                "{field} of bid {key}"
            );
        }
    }

    let mach: Machine = c.account(&live.machine).await.unwrap();
    let mkey = live.machine.to_string();
    assert_eq!(shown.keys("machine"), [mkey.as_str()]);
    assert_eq!(shown.field("machine", &mkey, "gpu_count"), "4");
    assert_eq!(shown.keys("gpu").len(), mach.gpus().len());
    for (i, g) in mach.gpus().iter().enumerate() {
        let key = format!("{mkey}/{i}");
        assert_eq!(shown.field("gpu", &key, "uuid"), format_uuid(&g.uuid));
        // By the name the market gives the class, else its number.
        let class = match g.class {
            0 => "H100".to_string(),
            c => format!("class {c}"),
        };
        assert_eq!(shown.field("gpu", &key, "class"), class);
        assert_eq!(
            shown.field("gpu", &key, "memory_gib"),
            g.memory_gib.to_string()
        );
        assert_eq!(
            shown.field("gpu", &key, "used_gib"),
            mach.used_gib[i].to_string()
        );
    }

    let leases = shown.keys("lease");
    assert!(!leases.is_empty(), "the page shows no lease");
    for key in leases {
        let l: Lease = c.account(&key.parse().unwrap()).await.unwrap();
        let escrow = l.escrow;
        let unproven = now.min(l.stop()).saturating_sub(l.proven_until).max(0) as u64;
        let owed = settlement::cost(l.price, l.kind.unit(), l.gpu_count as u64, unproven).unwrap();
        assert_eq!(shown.field("lease", key, "paid"), tokens(l.paid, 6));
        assert_eq!(
            shown.field("lease", key, "refundable"),
            tokens(escrow.saturating_sub(owed), 6),
            "lease {key} at {now}"
        );
        assert_eq!(shown.field("lease", key, "idle"), l.idle.to_string());
    }

    // Only the classes that exist: the machine's two (one of them named).
    let mut classes = shown.keys("reserve");
    classes.sort_unstable();
    assert_eq!(classes, ["0", "1"]);
    for class in 0..2u8 {
        assert_eq!(
            shown.field("reserve", &class.to_string(), "now"),
            tokens(m.reserve_price(class, now).unwrap(), 6),
            "the reserve price of class {class} at {now}"
        );
    }
    assert_eq!(shown.field("reserve", "0", "name"), "H100");
}

/// page.mjs in Chromium, driven a command at a time.
struct Browser {
    child: Child,
    /// `None` once closed: page.mjs ends at the end of its input.
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

impl Browser {
    fn start(url: &str, shots: &Path, wallet: &Wallet) -> Browser {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser");
        let missing = "run `bash scripts/browser.sh` to install it";
        assert!(
            Path::new("/usr/bin/chromium").exists(),
            "Chromium is missing: {missing}"
        );
        assert!(
            dir.join("node_modules/playwright-core").exists(),
            "playwright-core is missing: {missing}"
        );
        let secret: Vec<u8> = wallet.key.to_bytes().to_vec();
        let mut child = Command::new("node")
            .arg(dir.join("page.mjs"))
            .env("PAGE_URL", url)
            .env("SHOTS_DIR", shots)
            .env("WALLET_SECRET", serde_json::to_string(&secret).unwrap())
            .env("WALLET_ADDRESS", wallet.key.pubkey().to_string())
            .env("WALLET_CHAIN", "solana:localnet")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run node ({e}): {missing}"));
        Browser {
            stdin: child.stdin.take(),
            stdout: BufReader::new(child.stdout.take().unwrap()),
            child,
        }
    }

    /// Sends one command; its answer.
    fn ask(&mut self, command: &str) -> Value {
        writeln!(self.stdin.as_mut().unwrap(), "{command}").unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| {
            panic!("page.mjs answered {line:?} to {command:?} ({e}); see its stderr above")
        })
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = writeln!(stdin, "quit");
        }
        let _ = self.child.wait();
    }
}

/// Token balances a stake moves: the wallet's tokens, its stake, the stake vault.
async fn stake_balances(live: &LiveMarket, w: &Wallet) -> [u64; 3] {
    let c = &live.cluster;
    let m = live.market_state().await.unwrap();
    let stake: StakeAccount = c
        .account(&pda::stake(&live.market, &w.key.pubkey()).0)
        .await
        .unwrap();
    [
        c.token_balance(&w.tokens).await.unwrap(),
        stake.amount,
        c.token_balance(&m.stake_vault).await.unwrap(),
    ]
}

fn check_plots(read: &Value) {
    let plots = read["plots"].as_array().unwrap();
    let ids: Vec<&str> = plots.iter().map(|p| p["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["reserve-history", "reserve-by-hour"]);
    // One line per class the machine offers (0 and 1).
    assert!(plots.iter().all(|p| p["polylines"] == 2), "{plots:?}");
}

#[test]
fn the_market_page_shows_the_chain_and_stakes_through_a_wallet() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut params = MarketParams::recommended(5, 250, 60);
    params.base_price_per_gpu_hour = TOKEN / 10;
    params.min_host_stake = 10 * TOKEN;
    let live = rt
        .block_on(LiveMarket::start(
            params,
            gpus(),
            10 * TOKEN,
            TOKEN / 10,
            TOKEN / 5,
        ))
        .expect("a market with a machine on a local validator");

    // Three clients with stake; alice's 2-GPU bid runs (the agent allocates it), bob's and
    // carol's wait in the queue book.
    let (alice, bob, carol) = rt.block_on(async {
        (
            live.client(100 * TOKEN, 50 * TOKEN).await.unwrap(),
            live.client(100 * TOKEN, 20 * TOKEN).await.unwrap(),
            live.client(100 * TOKEN, 5 * TOKEN).await.unwrap(),
        )
    });
    let now = rt.block_on(live.cluster.now()).unwrap();
    let (lease, bob_bid) = rt.block_on(async {
        let bid = live
            .place(&alice, queue_bid(now, 2, 0b01, 2 * TOKEN, 0))
            .await
            .unwrap();
        let allocate = Allocate {
            agent: &live.agent,
            market: live.market,
            machine: live.machine,
            book: live.queue_book,
            bid,
            client: alice.key.pubkey(),
            gpus: vec![0, 1],
            evidence: vec![],
        };
        live.cluster.run(&allocate).await.unwrap();
        // Class 0 has a model name; class 1 none.
        let mut h100 = [0; 16];
        h100[..4].copy_from_slice(b"H100");
        let name = gpu_market_sdk::NameGpuClass {
            authority: &live.authority,
            market: live.market,
            class: 0,
            name: h100,
        };
        live.cluster.run(&name).await.unwrap();
        let bob_bid = live
            .place(&bob, queue_bid(now, 1, 0b10, 3 * TOKEN / 2, TOKEN / 10))
            .await
            .unwrap();
        live.place(&carol, queue_bid(now, 1, u8::MAX, TOKEN / 2, 0))
            .await
            .unwrap();
        (allocate.lease(), bob_bid.to_string())
    });
    let served = common::serve(&live.cluster.rpc_url, &live.market);

    // (1) The page as served, without JavaScript.
    let (status, html) = http_get(&served.url, "/");
    assert_eq!(status, 200, "{html}");
    let shown = Shown::from_html(&html);
    rt.block_on(check_against_chain(&live, &shown));
    assert_eq!(shown.keys("lease"), [lease.to_string().as_str()]);
    assert!(html.contains("<svg class=\"plot\" id=\"reserve-history\""));
    assert!(html.contains("<polyline data-series=\"H100\""));
    assert!(html.contains("<polyline data-series=\"class 1\""));
    assert!(html.contains("<script src=\"/wallet.js\" data-chain=\"solana:localnet\">"));
    assert!(!html.contains("<b>"), "unescaped text in the page");
    // In people's words (the machine values stay in data-value, which the reads above used):
    // labels, not field names; a cluster time as a date, a clock and how long ago; basis points
    // as percentages; prices per GPU-hour. The RPC URL (which often carries an API key) is not
    // on the page at all.
    for label in [
        "Last heartbeat",
        "Demand",
        "Score weights",
        "Base price per GPU hour",
    ] {
        assert!(
            html.contains(&format!("<th scope=\"row\">{label}</th>")),
            "{label}"
        );
    }
    assert!(!html.contains(">last_heartbeat<") && !html.contains(">demand_bps<"));
    let mach: Machine = rt.block_on(live.cluster.account(&live.machine)).unwrap();
    let heartbeat = format!(
        "data-field=\"last_heartbeat\" data-value=\"{}\"",
        mach.last_heartbeat
    );
    let cell = html.split(&heartbeat).nth(1).expect("the heartbeat's cell");
    let text = &cell[cell.find('>').unwrap() + 1..cell.find("</td>").unwrap()];
    assert!(text.ends_with(" ago)") && text.contains(" UTC ("), "{text}");
    let weights = html
        .split("data-field=\"score_weights_bps\"")
        .nth(1)
        .unwrap_or_default();
    assert!(
        weights.contains("complexity 30 %, stake 40 %, urgency 30 %"),
        "the weights: {}",
        &weights[..weights.len().min(200)]
    );
    assert!(html.contains(">0.1 per GPU-hour</td>"), "the base price");
    assert!(
        !html.contains(&live.cluster.rpc_url),
        "the RPC URL is on the page"
    );
    // A bid's page: its explain, and its image reference escaped.
    let (status, page) = http_get(&served.url, &format!("/bid/{bob_bid}"));
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("data-record=\"explain\""), "{page}");
    assert!(page.contains("v1&lt;b&gt;&amp;&quot;&#39;"), "{page}");
    let explained = Shown::from_html(&page);
    assert_eq!(
        explained.field("explain", &bob_bid, "machines_checked"),
        "1"
    );
    assert!(!explained.field("explain", &bob_bid, "summary").is_empty());
    let (status, _) = http_get(&served.url, "/wallet.js");
    assert_eq!(status, 200);

    // (2) In Chromium: before and after a new bid.
    let shots = tempfile::tempdir().unwrap();
    let mut browser = Browser::start(&served.url, shots.path(), &bob);
    let before = browser.ask("read before");
    assert_eq!(
        before["wallets"],
        serde_json::json!(["Test Wallet"]),
        "{before}"
    );
    assert!(before["forms"]
        .as_array()
        .unwrap()
        .iter()
        .all(|f| f["enabled"] == true));
    check_plots(&before);
    rt.block_on(check_against_chain(&live, &Shown::from_dom(&before)));
    let dave = rt.block_on(live.client(100 * TOKEN, 0)).unwrap();
    let daves = rt
        .block_on(live.place(&dave, queue_bid(now, 1, 0b10, TOKEN, TOKEN / 2)))
        .unwrap();
    let after = browser.ask("read after");
    let after_shown = Shown::from_dom(&after);
    assert!(after_shown
        .keys("bid")
        .contains(&daves.to_string().as_str()));
    rt.block_on(check_against_chain(&live, &after_shown));

    // (3) Bob stakes 5 through the page; the test wallet signs.
    let before = rt.block_on(stake_balances(&live, &bob));
    let staked = browser.ask("stake 5");
    assert_eq!(staked["status"]["state"], "done", "{staked}");
    assert_eq!(staked["wallet"]["connects"], 1, "{staked}");
    assert_eq!(
        staked["wallet"]["signed"],
        serde_json::json!([0]),
        "{staked}"
    );
    let signature = staked["status"]["signature"].as_str().unwrap();
    assert!(staked["status"]["text"]
        .as_str()
        .unwrap()
        .contains(signature));
    let after = rt.block_on(stake_balances(&live, &bob));
    assert_eq!(
        after,
        [
            before[0] - 5 * TOKEN,
            before[1] + 5 * TOKEN,
            before[2] + 5 * TOKEN
        ]
    );
    // The page read the market again after the stake: bob's stake part counts it.
    rt.block_on(check_against_chain(&live, &Shown::from_dom(&staked)));
    // Bob's console, from the link the page shows once his wallet is connected: his waiting
    // bid with `bid explain`'s answer and its forms, nobody else's, no lease, no machine.
    let console = browser.ask("console");
    assert!(
        console["url"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/wallet/{}", bob.key.pubkey())),
        "{console}"
    );
    let mine = Shown::from_dom(&console);
    assert_eq!(mine.keys("my-bid"), [bob_bid.as_str()]);
    assert!(!mine.field("my-bid", &bob_bid, "answer").is_empty());
    assert!(mine.keys("my-lease").is_empty() && mine.keys("my-machine").is_empty());
    let forms: Vec<&str> = console["forms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["action"].as_str().unwrap())
        .collect();
    assert!(
        forms.contains(&format!("/api/actions/cancel?bid={bob_bid}").as_str()),
        "{forms:?}"
    );
    drop(browser);
    for shot in ["before", "after", "stake", "console"] {
        let png = std::fs::read(shots.path().join(format!("{shot}.png"))).unwrap();
        assert!(png.starts_with(b"\x89PNG"), "{shot}.png is not a PNG");
    }
    if let Some(keep) = std::env::var_os("GPU_MARKET_PAGE_SHOTS") {
        for shot in ["before", "after", "stake", "console"] {
            let name = format!("{shot}.png");
            std::fs::copy(shots.path().join(&name), Path::new(&keep).join(&name)).unwrap();
        }
    }
}
