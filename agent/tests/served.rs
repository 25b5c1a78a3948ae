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
    let mut args = queue_bid(1, 30 * INTERVAL, now);
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

/// The market page's driver (client/tests/browser/page.mjs) in Chromium, at `url`, with a
/// test wallet of `key` (Wallet Standard, real ed25519 signatures): each command's answer.
fn browse(url: &str, key: &Keypair, commands: &[String]) -> Vec<serde_json::Value> {
    use std::io::{BufRead, Write};
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
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let answers = commands
        .iter()
        .map(|c| {
            writeln!(stdin, "{c}").unwrap();
            let mut line = String::new();
            stdout.read_line(&mut line).unwrap();
            serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("page.mjs answered {line:?} to {c:?} ({e})"))
        })
        .collect();
    let _ = writeln!(stdin, "quit");
    drop(stdin);
    let _ = child.wait();
    answers
}

/// A client with only a wallet (issue 36): on its console page in Chromium, it reads its
/// running lease's logs and downloads a result file, each request signed by the wallet's
/// `solana:signMessage` and sent by `gpu-market serve` to the real agent daemon; the file's
/// sha256, computed in the browser, is the container's file's. Another wallet, on the same page,
/// is refused before it is asked to sign anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wallet_reads_its_leases_logs_and_downloads_a_result_in_the_browser_and_a_stranger_is_refused(
) {
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
    let now = live.cluster.now().await.unwrap();
    let mut args = queue_bid(1, 30 * INTERVAL, now);
    (args.image_ref, args.image_digest) = seeded_image("SERVER");
    (args.ports, args.scratch_gib) = (vec![8080], 1);
    let bid = live.place(&client, args).await.unwrap();
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

    let cli = std::env::var_os("GPU_MARKET_CLI_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debug/gpu-market")
        });
    let served = Served::start(&cli, &live.cluster.rpc_url, &live.market);
    let console = format!("{}/wallet/{}", served.url, client.key.pubkey());
    let commands = [
        format!("lease {lease} logs"),
        format!("lease {lease} file /workspace/result.txt"),
        format!("terminal {lease}"),
    ];
    let key = client.key.insecure_clone();
    let answers = tokio::task::spawn_blocking(move || browse(&console, &key, &commands))
        .await
        .unwrap();
    let (logs, file, terminal) = (&answers[0], &answers[1], &answers[2]);
    assert_eq!(logs["status"]["state"], "done", "{logs}");
    assert!(
        logs["logs"].as_str().unwrap().contains("training done"),
        "{logs}"
    );
    assert_eq!(file["status"]["state"], "done", "{file}");
    assert_eq!(file["file"], "result.txt (18 bytes)", "{file}");
    let expected = hex::encode(sha2::Sha256::digest(b"epoch 1 loss=0.25\n"));
    assert_eq!(file["sha256"], expected.as_str(), "{file}");
    // The terminal: a TTY of the page's size, which follows the element's when it is resized,
    // running what is typed into it, until `exit`.
    let text = terminal["text"].as_str().unwrap();
    let (first, second) = (
        terminal["first"].as_str().unwrap(),
        terminal["second"].as_str().unwrap(),
    );
    assert_ne!(first, second, "{terminal}");
    for shown in [first, second, "hello-42", "[exited with 0]"] {
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

    // The host's wallet on the client's console: refused by the service, never asked to sign.
    let console = format!("{}/wallet/{}", served.url, client.key.pubkey());
    let host = live.host.key.insecure_clone();
    let command = [format!("lease {lease} logs")];
    let refused = tokio::task::spawn_blocking(move || browse(&console, &host, &command))
        .await
        .unwrap();
    let refused = &refused[0];
    assert_eq!(refused["status"]["state"], "error", "{refused}");
    assert!(
        refused["status"]["text"]
            .as_str()
            .unwrap()
            .contains("only the lease's client"),
        "{refused}"
    );
    assert_eq!(refused["wallet"]["messages"], 0, "{refused}");
    assert!(refused["logs"].is_null(), "{refused}");
    let (status, log) = agent.terminate();
    assert!(status.success(), "SIGTERM stops cleanly; log:\n{log}");
}
