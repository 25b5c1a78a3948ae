//! The hostile-tenant suite (issue 32): on a real validator, the real agent daemon and the real
//! engine with its own iptables management on (IPv4 and IPv6), one tenant tries every attack at
//! once while an honest tenant's lease runs beside it on the same machine:
//! - inside its container, a loop that keeps swapping a scratch folder for a link to a host
//!   folder holding a canary file, while its client copies through the folder 2,000 times;
//! - probes of the cloud metadata address, a service of the host (on the bridge's gateway and on
//!   the host's own address), the honest lease's container, and IPv6;
//! - 2,000 exec requests, a flood of signed requests that fills its nonce cache, and a terminal
//!   session flooded with resize frames;
//! - a lease of an image half as big again as the host's limit on one image.
//!
//! What must hold: no byte of the canary reaches the tenant, no probe opens (while the internet
//! does: the machine's egress is open), the honest tenant is served (logs, exec) and its lease
//! is proven for every second of the attack, the huge image is refused while it is fetched (its
//! lease refunded in full, nothing of it kept), and the agent's descriptors and memory stay
//! bounded.

mod support;

use std::net::TcpListener;
use std::time::Duration;

use futures_util::StreamExt;
use gpu_market::pda;
use gpu_market::state::Lease;
use gpu_market_agent::api::{MAX_EXEC_SESSIONS, NONCE_CAPACITY};
use gpu_market_sdk::api::client::{ApiClient, ClientError};
use gpu_market_sdk::api::{LogsQuery, TermSize};
use gpu_market_tests::live::{LiveMarket, Wallet};
use http_body_util::BodyExt;
use solana_pubkey::Pubkey;
use support::farnet::{probes, verdict, FarNet};
use support::*;

/// Runs `cmd` in `lease`'s container as `client` through `api`, with no input: its exit code
/// and standard output.
async fn exec(api: &ApiClient, client: &Wallet, lease: &Pubkey, script: &str) -> (i64, String) {
    let cmd = vec!["sh".into(), "-c".into(), script.into()];
    let session = api.exec(&client.key, lease, cmd, None).await.unwrap();
    let mut stdout = Vec::new();
    let run = session.run(
        &b""[..],
        &mut stdout,
        Vec::new(),
        futures_util::stream::pending(),
    );
    let code = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the exec ended within a minute")
        .unwrap();
    (code, String::from_utf8_lossy(&stdout).into_owned())
}

/// The bytes of the files under `dir`, however deep.
fn disk_use(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries
            .flatten()
            .map(|e| match e.file_type() {
                Ok(t) if t.is_dir() => disk_use(&e.path()),
                Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
                _ => 0,
            })
            .sum()
    })
}

/// Open file descriptors and resident memory (KiB) of process `pid`.
fn footprint(pid: u32) -> (usize, u64) {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
    let rss = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmRSS:"))?.to_string();
            line.split_whitespace().nth(1)?.parse().ok()
        })
        .unwrap_or(0);
    (fds, rss)
}

async fn lease_of(live: &LiveMarket, bid: &Pubkey, agent: &Agent) -> (Pubkey, Lease) {
    let key = pda::lease(bid).0;
    let lease = wait_for("the lease", 60, agent, || async {
        live.cluster.account::<Lease>(&key).await.ok()
    })
    .await;
    (key, lease)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hostile_tenant_trying_everything_at_once_reaches_nothing_and_the_honest_lease_is_proven_throughout(
) {
    // The internet, with a cloud's metadata address, beside the host.
    let _far = FarNet::new(46, &["169.254.169.254"]);
    let internet = "198.18.46.2:8000".to_string();
    let metadata = "169.254.169.254:8000".to_string();
    // A service of the host's own (as SSH or an engine on TCP would listen), and a canary file
    // of the host's that no tenant may read.
    let service = TcpListener::bind("0.0.0.0:0").unwrap();
    let service_port = service.local_addr().unwrap().port();
    let canary_dir = tempfile::tempdir().unwrap();
    let canary = format!("canary-{}", Pubkey::new_unique());
    std::fs::write(canary_dir.path().join("secret"), &canary).unwrap();

    let live = live_market(2).await;
    let api_port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    declare_network(&live, api_port).await;
    let dir = tempfile::tempdir().unwrap();
    let config = Agent::write_config(&live, dir.path(), 2);
    // The host's limit on one image: 64 MiB (a host with a small disk sets it so; the default
    // is 50 GiB, more than a test machine's disk). The attacker's image is half as big again.
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("\n[images]\nmax_image_mib = 64\n");
    std::fs::write(&config, text).unwrap();
    let huge = pushed_image("huge", &[], 96 << 20);
    let first = 33_000 + (std::process::id() % 400) as u16 * 10;
    publishing(&config, api_port, first, "127.0.0.1");
    let agent = Agent::start(&config);
    let machine: gpu_market::state::Machine = live.cluster.account(&live.machine).await.unwrap();
    let api = ApiClient::new(
        format!("127.0.0.1:{api_port}"),
        live.machine,
        &machine.agent,
    );

    // Both leases run for longer than the attack takes.
    let now = live.cluster.now().await.unwrap();
    let place = |image: &str| {
        let mut args = queue_bid(120 * INTERVAL, now);
        (args.image_ref, args.image_digest) = seeded_image(image);
        (args.ports, args.scratch_gib) = (vec![8080], 1);
        args
    };
    let honest = live.client(100 * TOKEN, 0).await.unwrap();
    let attacker = live.client(100 * TOKEN, 0).await.unwrap();
    let honest_bid = live.place(&honest, place("SERVER")).await.unwrap();
    let attacker_bid = live.place(&attacker, place("IDLER")).await.unwrap();
    let (honest_lease, _) = lease_of(&live, &honest_bid, &agent).await;
    let (attacker_lease, _) = lease_of(&live, &attacker_bid, &agent).await;
    for (client, lease) in [(&honest, &honest_lease), (&attacker, &attacker_lease)] {
        wait_for("the container", 60, &agent, || async {
            let status = api.status(&client.key, lease).await.ok()?;
            (status.state == gpu_market_sdk::api::ContainerStatus::Running).then_some(())
        })
        .await;
    }
    let docker = docker().await;
    let honest_id = containers_of(&docker, &honest_lease).await[0].0.clone();
    let honest_ip = docker
        .inspect_container(&honest_id, None)
        .await
        .unwrap()
        .network_settings
        .and_then(|n| n.networks)
        .and_then(|n| n.values().next().and_then(|e| e.ip_address.clone()))
        .unwrap();
    wait_for("the honest server", 30, &agent, || async {
        http_get(&format!("{honest_ip}:8080"), "/result.txt")
    })
    .await;
    // The baseline: a proof past the window the container started in, which is paid only from
    // the start (on a busy machine a start takes seconds of that window).
    let up = live.cluster.now().await.unwrap();
    let before: Lease = wait_for(
        "the honest lease proven past its start",
        60,
        &agent,
        || async {
            let l: Lease = live.cluster.account(&honest_lease).await.ok()?;
            (l.proven_until >= up + INTERVAL as i64).then_some(l)
        },
    )
    .await;

    // Inside: the folder-for-a-link loop, left running; then every probe.
    let swap = format!(
        "mkdir -p /workspace/d && echo tenant > /workspace/d/secret && \
         while :; do mv /workspace/d /workspace/x; ln -s {} /workspace/d; \
         rm /workspace/d; mv /workspace/x /workspace/d; done",
        canary_dir.path().display()
    );
    // Its own session, for as long as the attack lasts (a loop an exec started in the background
    // did not outlive its session here).
    let swapping = api
        .exec(
            &attacker.key,
            &attacker_lease,
            vec!["sh".into(), "-c".into(), swap],
            None,
        )
        .await
        .unwrap();
    let swapper = async move {
        let pending = futures_util::stream::pending();
        let (_keep, stdin) = tokio::io::duplex(1);
        let _ = swapping
            .run(stdin, tokio::io::sink(), tokio::io::sink(), pending)
            .await;
    };
    let gateway_service = format!("GATEWAY:{service_port}");
    let host_service = format!("198.18.46.1:{service_port}");
    let other_lease = format!("{honest_ip}:8080");
    let targets = [
        internet.clone(),
        metadata.clone(),
        gateway_service.clone(),
        host_service.clone(),
        other_lease.clone(),
    ];
    let probes = format!(
        "{}; echo \"ipv6 $(ip -o -6 addr | grep -vc ' lo ')\"",
        probes(&targets)
    );
    // The probes' session is opened before the floods take every exec slot of the lease.
    let probing = api
        .exec(
            &attacker.key,
            &attacker_lease,
            vec!["sh".into(), "-c".into(), probes],
            None,
        )
        .await
        .unwrap();
    let probed = async move {
        let mut stdout = Vec::new();
        let pending = futures_util::stream::pending();
        let run = probing.run(&b""[..], &mut stdout, Vec::new(), pending);
        tokio::time::timeout(Duration::from_secs(120), run)
            .await
            .expect("the probes ended")
            .unwrap();
        String::from_utf8_lossy(&stdout).into_owned()
    };
    let floods = async {
        // A terminal flooded with 5,000 resizes at once: the command still sees the last size.
        let session = api
            .exec(
                &attacker.key,
                &attacker_lease,
                vec!["sh".into(), "-c".into(), "sleep 2; stty size".into()],
                Some(TermSize { rows: 24, cols: 80 }),
            )
            .await
            .unwrap();
        let sizes = (1..=5_000u16).map(|rows| TermSize { rows, cols: 100 });
        let mut screen = Vec::new();
        // Input left open, as a terminal's is: its end would end the terminal's session.
        let (_typing, keyboard) = tokio::io::duplex(1);
        let code = session
            .run(
                keyboard,
                &mut screen,
                Vec::new(),
                futures_util::stream::iter(sizes),
            )
            .await
            .unwrap();
        let screen = String::from_utf8_lossy(&screen).into_owned();
        assert_eq!((code, screen.trim()), (0, "5000 100"), "{screen}");
        // 150 MiB of random bytes (nothing a compressor shrinks) into its own log, which the
        // engine keeps on the host's disk.
        let flood = "head -c 157286400 /dev/urandom > /proc/1/fd/1; echo $?";
        let (code, out) = exec(&api, &attacker, &attacker_lease, flood).await;
        assert_eq!((code, out.trim()), (0, "0"), "the log flood did not run");

        // Outside, all at once: 2,000 copies through the swapping folder and 2,000 exec requests;
        // then the nonce flood.
        let copies = futures_util::stream::iter(0..2_000)
            .map(|_| api.files(&attacker.key, &attacker_lease, "/workspace/d/secret"))
            .buffer_unordered(8)
            .then(|r| async move {
                match r {
                    Ok(body) => body.collect().await.map(|b| b.to_bytes().to_vec()).ok(),
                    Err(_) => None,
                }
            })
            .collect::<Vec<_>>();
        let sleep = vec!["sleep".to_string(), "600".into()];
        let execs = futures_util::stream::iter(0..2_000)
            .map(|_| api.exec(&attacker.key, &attacker_lease, sleep.clone(), None))
            .buffer_unordered(16)
            .collect::<Vec<_>>();
        let (copies, execs) = tokio::join!(copies, execs);
        let (open_sessions, refused): (Vec<_>, Vec<_>) = execs.into_iter().partition(Result::is_ok);
        assert!(
            open_sessions.len() < MAX_EXEC_SESSIONS,
            "the probes hold a slot"
        );
        // Refused by the lease's session quota (429), or, past 32 connections from one address
        // at once (the copies' and the requests' together here), closed before the handshake.
        let quota =
            |r: &Result<_, ClientError>| matches!(r, Err(ClientError::Refused { status: 429, .. }));
        let capped = |r: &Result<_, ClientError>| matches!(r, Err(ClientError::Tls { .. }));
        assert!(
            refused.iter().all(|r| quota(r) || capped(r)),
            "only the session quota and the connection cap refuse: {:?}",
            refused
                .iter()
                .filter(|r| !quota(r) && !capped(r))
                .map(|r| r.as_ref().err().map(ToString::to_string))
                .take(5)
                .collect::<Vec<_>>()
        );
        assert!(refused.iter().filter(|r| quota(r)).count() > 1_000);
        let (peak_fds, peak_rss) = footprint(agent.pid());
        let leaked = copies
            .iter()
            .flatten()
            .filter(|tar| String::from_utf8_lossy(tar).contains(&canary))
            .count();
        assert_eq!(leaked, 0, "the host's canary reached the tenant");
        let copied = copies.iter().flatten().count();
        // The race was on: some copies found the tenant's file, others the link or nothing.
        let found = copies
            .iter()
            .flatten()
            .filter(|tar| String::from_utf8_lossy(tar).contains("tenant\n"))
            .count();
        assert!(
            found > 0 && found < copied,
            "{found} of {copied} copies found the file"
        );
        let nonces = futures_util::stream::iter(0..NONCE_CAPACITY + 100)
            .map(|_| api.status(&attacker.key, &attacker_lease))
            .buffer_unordered(16)
            .collect::<Vec<_>>()
            .await;
        assert!(
            nonces
                .iter()
                .all(|r| r.is_ok() || matches!(r, Err(ClientError::Refused { status: 503, .. }))),
            "only a full nonce cache refuses"
        );
        drop(open_sessions);
        (copied, found, peak_fds, peak_rss)
    };
    // And a lease of an image over the host's limit, placed as the floods begin.
    let attacker_tokens = live.cluster.token_balance(&attacker.tokens).await.unwrap();
    let mut huge_args = place("IDLER");
    (huge_args.image_ref, huge_args.image_digest) = huge.clone();
    let huge_bid = live.place(&attacker, huge_args).await.unwrap();
    let attack = async { tokio::join!(probed, floods) };
    let (probed, (copied, found, peak_fds, peak_rss)) = tokio::select! {
        () = swapper => panic!("the swapping loop ended"),
        done = attack => done,
    };

    // The honest tenant, during all of this: served.
    let logs = api
        .logs(&honest.key, &honest_lease, LogsQuery::default())
        .await
        .unwrap();
    let logs = logs.collect().await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&logs).contains("training done"));
    assert_eq!(
        exec(&api, &honest, &honest_lease, "echo served").await,
        (0, "served\n".to_string())
    );
    // And proven for every second since the attack began, without a gap.
    let attack_ended = live.cluster.now().await.unwrap();
    let after: Lease = wait_for(
        "the honest lease proven past the attack",
        120,
        &agent,
        || async {
            let l: Lease = live.cluster.account(&honest_lease).await.ok()?;
            (l.proven_until >= attack_ended).then_some(l)
        },
    )
    .await;
    assert_eq!(
        after.billed_secs - before.billed_secs,
        (after.proven_until - before.proven_until) as u64,
        "every proven second of the honest lease was paid: none skipped during the attack"
    );

    // The huge image: refused as it was fetched, its lease ended before it ran, the attacker
    // refunded in full, and nothing of it kept in the engine's store.
    let huge_lease = pda::lease(&huge_bid).0;
    wait_for("the huge image's lease refused", 120, &agent, || async {
        let gone =
            !account_exists(&live, &huge_bid).await && !account_exists(&live, &huge_lease).await;
        let tokens = live.cluster.token_balance(&attacker.tokens).await.ok()?;
        (gone && tokens == attacker_tokens).then_some(())
    })
    .await;
    let pinned = gpu_market_agent::runtime::pinned_reference(&huge.0, &huge.1).unwrap();
    assert!(
        docker.inspect_image(&pinned).await.is_err(),
        "the refused image is in the store"
    );
    let log = agent.log();
    assert!(
        log.contains("over the host's limit of 67108864"),
        "the agent did not say why it refused the lease:\n{log}"
    );

    // Nothing opened but the internet; no IPv6.
    assert_eq!(verdict(&probed, &internet), "open", "{probed}");
    for target in [&metadata, &host_service, &other_lease] {
        assert_eq!(verdict(&probed, target), "closed", "{probed}");
    }
    assert_eq!(verdict(&probed, &gateway_service), "closed", "{probed}");
    assert!(probed.contains("ipv6 0"), "{probed}");
    // Disk: the attacker's log at most its rotation's files (20 MiB × 5 by default, and the
    // entries' framing), the agent's data folder small.
    let root = docker.info().await.unwrap().docker_root_dir.unwrap();
    let attacker_id = containers_of(&docker, &attacker_lease).await[0].0.clone();
    let log_bytes = disk_use(
        &std::path::Path::new(&root)
            .join("containers")
            .join(&attacker_id),
    );
    let data_bytes = disk_use(&dir.path().join("data"));
    assert!(
        log_bytes <= 105 << 20,
        "the attacker's log takes {log_bytes} bytes"
    );
    assert!(
        data_bytes <= 16 << 20,
        "the agent's data folder takes {data_bytes} bytes"
    );
    let (fds, rss) = footprint(agent.pid());
    println!(
        "hostile suite: {copied} of 2,000 copies answered ({found} with the tenant's file), none with \
         the canary; the agent at the flood's peak: {peak_fds} descriptors, {} MiB resident; after: {fds}, {} MiB; \
         the attacker's log {} MiB on disk after 150 MiB written, the agent's data {} KiB; probes:\n{probed}",
        peak_rss / 1024,
        rss / 1024,
        log_bytes >> 20,
        data_bytes >> 10
    );
    assert!(peak_fds < 512, "{peak_fds} descriptors at the flood's peak");
    assert!(peak_rss < 512 * 1024, "{peak_rss} KiB at the flood's peak");
    drop(service);
}
