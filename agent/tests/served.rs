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
