//! A lease that publishes a port, on a real validator with the real agent daemon: the machine
//! declares its network on chain, the client's bid asks for a port and scratch, and the client
//! reaches its container through the published port and the daemon's signed API (the pin being
//! the machine account's agent key), while a stranger is refused. A daemon whose machine
//! promises ports it has no range for refuses to start.

mod support;

use std::time::Duration;

use gpu_market::pda;
use gpu_market::state::{Lease, Machine};
use gpu_market_sdk::api::client::{ApiClient, ClientError};
use gpu_market_sdk::api::LogsQuery;
use gpu_market_tests::served::Served;
use http_body_util::BodyExt;
use solana_keypair::Keypair;
use solana_signer::Signer;
use support::*;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_reaches_its_lease_through_the_published_port_and_the_daemons_signed_api() {
    let live = live_market(1).await;
    let api_port = free_port();
    declare_network(&live, api_port).await;
    let dir = tempfile::tempdir().unwrap();
    let config = Agent::write_config(&live, dir.path(), 1);
    // The daemon's own configuration: its API where the machine says, and a range to publish from.
    let first = 31_500 + (std::process::id() % 400) as u16;
    publishing(&config, api_port, first, "127.0.0.1");
    let agent = Agent::start(&config);

    let client = live.client(10 * TOKEN, 0).await.unwrap();
    let now = live.cluster.now().await.unwrap();
    let (image_ref, image_digest) = seeded_image("SERVER");
    // Longer than all the waits below together: the lease must still run when the port, the
    // logs and the files are asked for. The test ends it by stopping the agent.
    let mut args = queue_bid(30 * INTERVAL, now);
    (args.image_ref, args.image_digest) = (image_ref, image_digest);
    (args.ports, args.scratch_gib) = (vec![8080], 1);
    let bid = live.place(&client, args).await.unwrap();
    let lease = pda::lease(&bid).0;
    wait_for("the lease", 30, &agent, || async {
        live.cluster.account::<Lease>(&lease).await.ok()
    })
    .await;

    // The API address and the pin come from the machine account, as the CLI takes them.
    let machine: Machine = live.cluster.account(&live.machine).await.unwrap();
    let api = ApiClient::new(
        format!("127.0.0.1:{}", machine.network.api_port),
        live.machine,
        &machine.agent,
    );
    let status = wait_for("the published port", 60, &agent, || async {
        let status = api.status(&client.key, &lease).await.ok()?;
        (!status.ports.is_empty()).then_some(status)
    })
    .await;
    let port = status.ports[0].host_port;
    assert_eq!(status.ports[0].container_port, 8080);
    assert!((first..=first + 9).contains(&port), "{port} from the range");
    let body = wait_for("the server answering", 30, &agent, || async {
        http_get(&format!("127.0.0.1:{port}"), "/result.txt")
    })
    .await;
    assert_eq!(body, "epoch 1 loss=0.25\n");

    let tail = LogsQuery {
        tail: Some(5),
        ..LogsQuery::default()
    };
    let logs = api.logs(&client.key, &lease, tail).await.unwrap();
    let logs = logs.collect().await.unwrap().to_bytes();
    assert!(
        String::from_utf8_lossy(&logs).contains("training done"),
        "{logs:?}"
    );
    // The result file, through the API, from the scratch volume the agent mounted.
    let archive = api
        .files(&client.key, &lease, "/workspace/result.txt")
        .await
        .unwrap();
    let archive = archive.collect().await.unwrap().to_bytes();
    let mut entries = tar::Archive::new(&archive[..]);
    let mut entry = entries.entries().unwrap().next().unwrap().unwrap();
    let mut content = String::new();
    std::io::Read::read_to_string(&mut entry, &mut content).unwrap();
    assert_eq!(content, "epoch 1 loss=0.25\n");

    // Another key, even the host's own, is refused; so is an API pinned to another agent key.
    let stranger = api.status(&live.host.key, &lease).await.err();
    assert!(
        matches!(&stranger, Some(ClientError::Refused { status: 403, .. })),
        "{stranger:?}"
    );
    let impostor = ApiClient::new(
        format!("127.0.0.1:{api_port}"),
        live.machine,
        &Keypair::new().pubkey(),
    );
    assert!(matches!(
        impostor.status(&client.key, &lease).await.err(),
        Some(ClientError::Tls { .. })
    ));
    let (status, log) = agent.terminate();
    assert!(status.success(), "SIGTERM stops cleanly; log:\n{log}");

    // The same machine with a daemon that has no range to publish from: it does not start.
    let bare = dir.path().join("bare.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    let text = text[..text.find("\n[network]").unwrap()].to_string()
        + &text[text.find("\n[container]").unwrap()..];
    std::fs::write(&bare, text.replace(&api_port.to_string(), "0")).unwrap();
    let (status, log) = Agent::start(&bare).wait_exit(Duration::from_secs(30));
    assert!(!status.success(), "{log}");
    assert!(log.contains("no [network] ports range"), "{log}");
}

/// The market page's driver (client/tests/browser/page.mjs) in Chromium, at a page of the
/// service, with a test wallet of a key (Wallet Standard, real ed25519 signatures).
struct Browser {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    stdout: std::io::BufReader<std::process::ChildStdout>,
    _shots: tempfile::TempDir,
}

impl Browser {
    fn start(url: &str, key: &Keypair) -> Browser {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../client/tests/browser");
        assert!(
            dir.join("node_modules/playwright-core").exists()
                && std::path::Path::new("/usr/bin/chromium").exists(),
            "Chromium or playwright-core is missing: run `bash scripts/browser.sh`"
        );
        let shots = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("node")
            .arg(dir.join("page.mjs"))
            .env("PAGE_URL", url)
            .env("SHOTS_DIR", shots.path())
            .env(
                "WALLET_SECRET",
                serde_json::to_string(&key.to_bytes().to_vec()).unwrap(),
            )
            .env("WALLET_ADDRESS", key.pubkey().to_string())
            .env("WALLET_CHAIN", "solana:localnet")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        Browser {
            stdin: child.stdin.take(),
            stdout: std::io::BufReader::new(child.stdout.take().unwrap()),
            child,
            _shots: shots,
        }
    }

    /// One command's answer (blocking this worker thread while Chromium works).
    fn ask(&mut self, command: &str) -> serde_json::Value {
        use std::io::{BufRead, Write};
        tokio::task::block_in_place(|| {
            writeln!(self.stdin.as_mut().unwrap(), "{command}").unwrap();
            let mut line = String::new();
            self.stdout.read_line(&mut line).unwrap();
            serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("page.mjs answered {line:?} to {command:?} ({e})"))
        })
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        use std::io::Write;
        if let Some(mut stdin) = self.stdin.take() {
            let _ = writeln!(stdin, "quit");
        }
        let _ = self.child.wait();
    }
}

/// A client with only a wallet (issue 36), in Chromium: on the market page it places a bid with
/// an environment, which the page seals in the browser (`seal.js`: the salt from the wallet's
/// `solana:signMessage`, a copy encrypted to each machine that may run it, stored by
/// transactions the wallet signs), so the service never sees its text; the real agent daemon
/// opens its copy and runs the lease with it. Then on its console it follows the lease's logs (a
/// line the container prints while the page watches appears), downloads a result file, and
/// types into a terminal on the container (its size following the element's, the sealed
/// variable in its environment), each request signed once by the wallet and sent by
/// `gpu-market serve` to the agent; the file's sha256, computed in the browser, is the
/// container's file's. Another wallet, on the same page, is refused before it is asked to sign
/// anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wallet_seals_its_bids_environment_follows_its_leases_logs_downloads_a_result_and_types_into_a_terminal_in_the_browser(
) {
    use gpu_market::state::{Bid, SealedEnv};
    use gpu_market_sdk::envelope::Environment;
    use sha2::Digest;
    let live = live_market(1).await;
    let api_port = free_port();
    declare_network(&live, api_port).await;
    let dir = tempfile::tempdir().unwrap();
    let config = Agent::write_config(&live, dir.path(), 1);
    let first = 32_100 + (std::process::id() % 400) as u16;
    publishing(&config, api_port, first, "127.0.0.1");
    let agent = Agent::start(&config);

    let client = live.client(10 * TOKEN, 0).await.unwrap();
    let cli = std::env::var_os("GPU_MARKET_CLI_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debug/gpu-market")
        });
    let served = Served::start(&cli, &live.cluster.rpc_url, &live.market);
    let console = format!("{}/wallet/{}", served.url, client.key.pubkey());
    let mut browser = Browser::start(&console, &client.key);

    // The bid, from the page's form, as `queue_bid` places it but for the server image, a port
    // and scratch; its environment typed into the form.
    let env = "GREETING=sealed-in-the-browser-7\nHF_TOKEN=hf_not_for_the_service\n";
    let (image, digest) = (
        std::env::var("GPU_MARKET_SERVER_IMAGE").unwrap(),
        std::env::var("GPU_MARKET_SERVER_DIGEST").unwrap(),
    );
    let placed = browser.ask(&format!(
        "bid {}",
        serde_json::json!({
            "fields": {
                "image": image, "image-digest": digest, "gpus": 1, "gib-per-gpu": 8,
                "overclock": "power=300", "price": "3.6",
                "duration": format!("{}s", 30 * INTERVAL),
                "deadline": "+15m", "class": 0, "port": 8080, "scratch-gib": 1,
            },
            "env": env,
        })
    ));
    assert_eq!(placed["status"]["state"], "done", "{placed}");
    assert_eq!(placed["status"]["sealed_to"], "1", "{placed}");
    // One signature of a message (the salt's), two of transactions (the bid, its one copy).
    assert_eq!(placed["wallet"]["messages"], 1, "{placed}");
    assert_eq!(
        placed["wallet"]["signed"].as_array().unwrap().len(),
        2,
        "{placed}"
    );
    let bid: solana_pubkey::Pubkey = placed["status"]["bid"].as_str().unwrap().parse().unwrap();
    // The hash the page computed is the CLI's for the same key and text: `bid seal --env FILE`
    // seals it to machines registered later.
    let b: Bid = live.cluster.account(&bid).await.unwrap();
    let expected = Environment::new(env.as_bytes(), &client.key).unwrap();
    assert_eq!(b.env_hash, expected.hash());
    let machine: Machine = live.cluster.account(&live.machine).await.unwrap();
    let copy: SealedEnv = live
        .cluster
        .account(&pda::sealed_env(&bid, &machine.agent).0)
        .await
        .unwrap();
    let secret = b"hf_not_for_the_service";
    assert!(
        !copy.sealed.windows(secret.len()).any(|w| w == secret),
        "the copy on chain is sealed"
    );
    let lease = pda::lease(&bid).0;
    let machine: Machine = wait_for("the lease", 30, &agent, || async {
        live.cluster.account::<Lease>(&lease).await.ok()?;
        live.cluster.account::<Machine>(&live.machine).await.ok()
    })
    .await;
    let api = ApiClient::new(
        format!("127.0.0.1:{}", machine.network.api_port),
        live.machine,
        &machine.agent,
    );
    wait_for("the container's result", 60, &agent, || async {
        let tail = LogsQuery::default();
        let logs = api.logs(&client.key, &lease, tail).await.ok()?;
        let logs = logs.collect().await.ok()?.to_bytes();
        String::from_utf8_lossy(&logs)
            .contains("training done")
            .then_some(())
    })
    .await;

    // The logs as printed: the container's first lines, then one it prints while the page
    // watches (written to its standard output by a command run in it).
    let logs = browser.ask(&format!("follow {lease} training done"));
    let printed = api
        .exec(
            &client.key,
            &lease,
            vec![
                "sh".into(),
                "-c".into(),
                "echo live-line-7 > /proc/1/fd/1".into(),
            ],
            None,
        )
        .await
        .unwrap();
    let (_keep, stdin) = tokio::io::duplex(1);
    let code = printed
        .run(
            stdin,
            tokio::io::sink(),
            tokio::io::sink(),
            futures_util::stream::pending(),
        )
        .await
        .unwrap();
    assert_eq!(code, 0);
    let followed = browser.ask(&format!("await {lease} live-line-7"));
    let connect = browser.ask(&format!("lease {lease} status"));
    let file = browser.ask(&format!("lease {lease} file /workspace/result.txt"));
    let folder = browser.ask(&format!("lease {lease} file /workspace"));
    let terminal = browser.ask(&format!("terminal {lease} GREETING"));
    drop(browser);
    let answers = [
        connect.clone(),
        logs.clone(),
        followed,
        file.clone(),
        folder.clone(),
        terminal.clone(),
    ];
    // Where to connect: the port the agent published for the container's 8080.
    let published = api.status(&client.key, &lease).await.unwrap().ports;
    assert_eq!(published.len(), 1);
    assert_eq!(
        connect["connect"],
        serde_json::json!([format!("8080/tcp -> 127.0.0.1:{}", published[0].host_port)]),
        "{connect}"
    );
    assert_eq!(logs["status"]["state"], "done", "{logs}");
    assert!(
        answers[2]["logs"]
            .as_str()
            .unwrap()
            .contains("training done: loss=0.25, serving /workspace on :8080\nlive-line-7\n"),
        "{}",
        answers[2]
    );
    assert_eq!(file["status"]["state"], "done", "{file}");
    assert_eq!(file["file"], "result.txt (18 bytes)", "{file}");
    let expected = hex::encode(sha2::Sha256::digest(b"epoch 1 loss=0.25\n"));
    assert_eq!(file["sha256"], expected.as_str(), "{file}");
    // A folder comes as the engine's archive of it, which holds the result.
    let archive = api.files(&client.key, &lease, "/workspace").await.unwrap();
    let archive = archive.collect().await.unwrap().to_bytes();
    assert_eq!(folder["status"]["state"], "done", "{folder}");
    assert_eq!(
        folder["file"],
        format!("workspace.tar ({} bytes)", archive.len()).as_str(),
        "{folder}"
    );
    assert_eq!(
        folder["sha256"],
        hex::encode(sha2::Sha256::digest(&archive)).as_str(),
        "{folder}"
    );
    let mut tar = tar::Archive::new(&archive[..]);
    let names: Vec<String> = tar
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.contains(&"workspace/result.txt".to_string()),
        "{names:?}"
    );
    // The terminal: a TTY of the page's size, which follows the element's when it is resized,
    // running what is typed into it, until `exit`.
    let text = terminal["text"].as_str().unwrap();
    let (first, second) = (
        terminal["first"].as_str().unwrap(),
        terminal["second"].as_str().unwrap(),
    );
    assert_ne!(first, second, "{terminal}");
    // The sealed environment, as the agent opened it, is the container's.
    for shown in [
        first,
        second,
        "hello-42",
        // "abcdef", four columns back, "XY": as a terminal emulator draws it.
        "\nabXYef\n",
        "GREETING=sealed-in-the-browser-7.",
        "[exited with 0]",
    ] {
        assert!(
            text.contains(shown),
            "{shown:?} not in the terminal:\n{text}"
        );
    }
    assert_eq!(terminal["status"]["state"], "done", "{terminal}");
    // One signature a request (each command loads the page afresh).
    for answer in &answers {
        assert_eq!(answer["wallet"]["messages"], 1, "{answer}");
    }

    // The host's wallet on the client's console, at each of the lease's forms: refused by the
    // service, never asked to sign, shown nothing.
    let console = format!("{}/wallet/{}", served.url, client.key.pubkey());
    let mut stranger = Browser::start(&console, &live.host.key);
    for call in [
        "status",
        "logs",
        "file /workspace/result.txt",
        "file /workspace",
        "terminal",
    ] {
        let refused = &stranger.ask(&format!("lease {lease} {call}"));
        assert_eq!(refused["status"]["state"], "error", "{call}: {refused}");
        assert!(
            refused["status"]["text"]
                .as_str()
                .unwrap()
                .contains("only the lease's client"),
            "{call}: {refused}"
        );
        assert_eq!(refused["wallet"]["messages"], 0, "{call}: {refused}");
        assert!(refused["sha256"].is_null(), "{call}: {refused}");
        assert!(refused["logs"].is_null(), "{call}: {refused}");
        assert_eq!(
            refused["connect"],
            serde_json::json!([]),
            "{call}: {refused}"
        );
    }
    drop(stranger);
    let (status, log) = agent.terminate();
    assert!(status.success(), "SIGTERM stops cleanly; log:\n{log}");
}
