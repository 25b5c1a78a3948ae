//! The agent binary against the real parts: the program on a local solana-test-validator, the
//! Docker engine and the registry on 127.0.0.1:5000 (`scripts/engine.sh start`), and the
//! simulated GPU backend (SIMULATED GPU: this machine has none). A client's bid is allocated by
//! the agent, its image pulled and run with a GPU device request, its usage proven each billing
//! interval and paid to the host; a kill -9 in the middle loses and doubles nothing.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bollard::query_parameters::{InspectContainerOptions, ListContainersOptions};
use bollard::Docker;
use gpu_market::events::UsageProven;
use gpu_market::instructions::PlaceBidArgs;
use gpu_market::pda;
use gpu_market::state::{Bid, BidKind, GpuSpec, Lease, Machine, MarketParams, OverclockTerms};
use gpu_market_tests::live::{LiveMarket, Wallet};
use solana_pubkey::Pubkey;

const TOKEN: u64 = 1_000_000;
const INTERVAL: u32 = 4;
/// Per GPU-hour: 1 000 base units per GPU-second.
const PRICE: u64 = 3_600_000;

fn gpus() -> Vec<GpuSpec> {
    (0..2u8)
        .map(|i| GpuSpec {
            uuid: [i + 1; 16],
            class: 0,
            topology_group: 0,
            memory_gib: 24,
            power_w: [150, 450],
            core_lock_mhz: [210, 2_520],
            mem_lock_mhz: [0, 0],
            core_offset_mhz: [-200, 200],
            mem_offset_mhz: [0, 1_500],
        })
        .collect()
}

fn params() -> MarketParams {
    let mut p = MarketParams::recommended(INTERVAL, 250, 600);
    p.base_price_per_gpu_hour = TOKEN / 10;
    p.min_host_stake = 10 * TOKEN;
    p
}

async fn live_market() -> LiveMarket {
    LiveMarket::start(params(), gpus(), 10 * TOKEN, TOKEN / 10, TOKEN / 5)
        .await
        .expect("a market with a registered machine on a local validator")
}

fn engine_env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: start the engine with scripts/engine.sh start and eval \"$(scripts/engine.sh env)\"")
    })
}

fn worker_image() -> (String, [u8; 32]) {
    let digest = engine_env("GPU_MARKET_WORKER_DIGEST");
    let hex = digest.strip_prefix("sha256:").expect("a sha256 digest");
    let bytes: Vec<u8> = (0..32)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    (
        engine_env("GPU_MARKET_WORKER_IMAGE"),
        bytes.try_into().unwrap(),
    )
}

/// A queue bid for one GPU × 8 GiB at 300 W for `secs`.
fn queue_bid(nonce: u64, secs: u32, now: i64) -> PlaceBidArgs {
    let (image_ref, image_digest) = worker_image();
    PlaceBidArgs {
        nonce,
        kind: BidKind::Queue,
        image_ref,
        image_digest,
        env_hash: [0; 32],
        gpu_count: 1,
        gib_per_gpu: 8,
        accepted_classes: 1,
        overclock: vec![OverclockTerms {
            power_limit_w: 300,
            core_lock_mhz: 1_800,
            ..Default::default()
        }],
        price: PRICE,
        max_duration_secs: secs,
        deadline: now + 3_600,
    }
}

/// The agent process, its data folder and its log.
struct Agent {
    child: Child,
    log: PathBuf,
}

impl Agent {
    fn write_config(live: &LiveMarket, dir: &Path) -> PathBuf {
        let keypair = dir.join("agent.json");
        solana_keypair::write_keypair_file(&live.agent, &keypair).unwrap();
        let metrics = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let config = format!(
            r#"
rpc_url = "{rpc}"
ws_url = "{ws}"
keypair = "{keypair}"
market = "{market}"
machine = "{machine}"
commitment = "confirmed"
electricity_cost_per_kwh = {cost}
data_dir = "{data}"
metrics_listen = "{metrics}"
billing_poll_interval_secs = 1
heartbeat_interval_secs = 30
drain_deadline_secs = 20
engine_socket = "{engine}"

[container]
memory_mib_per_gpu = 64
millicpus_per_gpu = 50
pids_limit = 64
stop_grace_secs = 2

[gpu]
backend = "simulated"
[[gpu.simulated]]
class = 0
memory_gib = 24
topology_group = 0
power_w = [150, 450]
default_power_w = 350
core_lock_mhz = [210, 2520]
core_offset_mhz = [-200, 200]
mem_offset_mhz = [0, 1500]
[[gpu.simulated]]
class = 0
memory_gib = 24
topology_group = 0
power_w = [150, 450]
default_power_w = 350
core_lock_mhz = [210, 2520]
core_offset_mhz = [-200, 200]
mem_offset_mhz = [0, 1500]
"#,
            rpc = live.cluster.rpc_url,
            ws = live.cluster.ws_url,
            keypair = keypair.display(),
            market = live.market,
            machine = live.machine,
            cost = TOKEN / 5,
            data = dir.join("data").display(),
            engine = engine_env("DOCKER_HOST"),
        );
        let path = dir.join("agent.toml");
        std::fs::write(&path, config).unwrap();
        path
    }

    fn start(config: &Path) -> Agent {
        let log = config.with_extension(format!(
            "{}.log",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_gpu-market-agent"))
            .args(["run", "--config"])
            .arg(config)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("start the agent");
        Agent { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// kill -9: no drain, no cleanup.
    fn kill9(mut self) -> String {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        self.log()
    }

    /// SIGTERM, and the exit status of the drain.
    fn terminate(mut self) -> (std::process::ExitStatus, String) {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        let status = self.child.wait().unwrap();
        (status, self.log())
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `check` every 200 ms until it yields a value; panics with the agent's log after
/// `secs`.
async fn wait_for<T, F, Fut>(what: &str, secs: u64, agent: &Agent, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within {secs} s; agent log:\n{}",
            agent.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn docker() -> Docker {
    Docker::connect_with_unix(&engine_env("DOCKER_HOST"), 60, bollard::API_DEFAULT_VERSION)
        .unwrap()
        .negotiate_version()
        .await
        .unwrap()
}

/// Containers (running or not) labelled with `lease`: (id, running).
async fn containers_of(docker: &Docker, lease: &Pubkey) -> Vec<(String, bool)> {
    let filters = HashMap::from([(
        "label".to_string(),
        vec![format!("io.gpu-market.lease={lease}")],
    )]);
    docker
        .list_containers(Some(ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..Default::default()
        }))
        .await
        .unwrap()
        .into_iter()
        .map(|c| {
            (
                c.id.unwrap_or_default(),
                c.state.map(|s| s.to_string()) == Some("running".into()),
            )
        })
        .collect()
}

async fn account_exists(live: &LiveMarket, key: &Pubkey) -> bool {
    live.cluster
        .rpc()
        .get_account_with_commitment(key, solana_commitment_config::CommitmentConfig::confirmed())
        .await
        .map(|r| r.value.is_some())
        .unwrap_or(true)
}

/// What a lease's proofs paid, checked against the token balances they moved.
struct Settled {
    proofs: Vec<UsageProven>,
    host_delta: u64,
    treasury_delta: u64,
    client_delta: u64,
}

async fn settle_and_check(
    live: &LiveMarket,
    client: &Wallet,
    lease: &Pubkey,
    escrow: u64,
    host_before: u64,
    treasury_before: u64,
    client_before: u64,
) -> Settled {
    let c = &live.cluster;
    let proofs = live.usage_proofs(lease).await.unwrap();
    let host_delta = c.token_balance(&live.host.tokens).await.unwrap() - host_before;
    let treasury_delta = c.token_balance(&live.treasury).await.unwrap() - treasury_before;
    let client_delta = c.token_balance(&client.tokens).await.unwrap() - client_before;
    let to_host: u64 = proofs.iter().map(|p| p.paid_to_host).sum();
    let fees: u64 = proofs.iter().map(|p| p.fee).sum();
    assert_eq!(
        host_delta, to_host,
        "the host receives exactly what the proofs pay"
    );
    assert_eq!(treasury_delta, fees, "the treasury receives the fees");
    assert_eq!(
        client_delta,
        escrow - to_host - fees,
        "the client gets back the escrow the proofs did not spend"
    );
    let intervals: Vec<u32> = proofs.iter().map(|p| p.interval).collect();
    let expected: Vec<u32> = (0..intervals.len() as u32).collect();
    assert_eq!(
        intervals, expected,
        "one proof per interval, none missing, none twice"
    );
    Settled {
        proofs,
        host_delta,
        treasury_delta,
        client_delta,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bid_is_allocated_run_on_the_engine_proven_and_paid() {
    let live = live_market().await;
    let client = live.client(10 * TOKEN, 0).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = Agent::write_config(&live, dir.path());
    let agent = Agent::start(&config);
    let docker = docker().await;

    let now = live.cluster.now().await.unwrap();
    let bid = live
        .place(&client, queue_bid(1, 3 * INTERVAL, now))
        .await
        .unwrap();
    let escrow = live.cluster.account::<Bid>(&bid).await.unwrap().escrow;
    let c = &live.cluster;
    let host_before = c.token_balance(&live.host.tokens).await.unwrap();
    let treasury_before = c.token_balance(&live.treasury).await.unwrap();
    let client_before = c.token_balance(&client.tokens).await.unwrap();
    let lease = pda::lease(&bid).0;

    // The agent allocates the bid and runs its image with exactly the lease's GPU.
    let l: Lease = wait_for("the lease", 30, &agent, || async {
        live.cluster.account::<Lease>(&lease).await.ok()
    })
    .await;
    assert_eq!(l.gpu_count, 1);
    assert_eq!(l.power_limits_w[0], 300);
    let id = wait_for("the lease's container running", 60, &agent, || async {
        containers_of(&docker, &lease)
            .await
            .into_iter()
            .find(|(_, running)| *running)
            .map(|(id, _)| id)
    })
    .await;
    let inspect = docker
        .inspect_container(&id, None::<InspectContainerOptions>)
        .await
        .unwrap();
    let host_config = inspect.host_config.unwrap();
    let requests = host_config.device_requests.unwrap();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].driver.as_deref(), Some("nvidia"));
    assert_eq!(
        requests[0].device_ids.as_deref(),
        Some(&[l.gpus[0].to_string()][..]),
        "the device request names exactly the leased GPU"
    );
    let image = inspect.config.unwrap().image.unwrap();
    assert!(
        image.ends_with(&engine_env("GPU_MARKET_WORKER_DIGEST")),
        "pulled by digest: {image}"
    );

    // Proofs each interval; at the end the lease is settled and closed, the container gone.
    wait_for("the lease settled and closed", 60, &agent, || async {
        (!account_exists(&live, &lease).await).then_some(())
    })
    .await;
    wait_for("the container removed", 20, &agent, || async {
        containers_of(&docker, &lease)
            .await
            .is_empty()
            .then_some(())
    })
    .await;
    let settled = settle_and_check(
        &live,
        &client,
        &lease,
        escrow,
        host_before,
        treasury_before,
        client_before,
    )
    .await;
    assert!(
        settled.proofs.len() >= 3,
        "a 3-interval lease is proven in at least 3 proofs: {}",
        settled.proofs.len()
    );
    assert!(settled.host_delta > 0 && settled.treasury_delta > 0);
    assert!(settled.client_delta < escrow);
    let machine: Machine = live.cluster.account(&live.machine).await.unwrap();
    assert_eq!(machine.leases, 0);
    assert_eq!(machine.missed_intervals, 0, "no interval went unproven");
    assert_eq!(machine.violations, 0);

    let (status, log) = agent.terminate();
    assert!(status.success(), "SIGTERM drains cleanly; log:\n{log}");
    println!(
        "lease {lease}: {} proofs, host +{}, treasury +{}, client refund {} of escrow {escrow}",
        settled.proofs.len(),
        settled.host_delta,
        settled.treasury_delta,
        settled.client_delta
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_and_restart_lose_and_double_nothing() {
    let live = live_market().await;
    let client = live.client(10 * TOKEN, 0).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = Agent::write_config(&live, dir.path());
    let agent = Agent::start(&config);
    let docker = docker().await;

    let now = live.cluster.now().await.unwrap();
    let bid = live
        .place(&client, queue_bid(1, 5 * INTERVAL, now))
        .await
        .unwrap();
    let escrow = live.cluster.account::<Bid>(&bid).await.unwrap().escrow;
    let c = &live.cluster;
    let host_before = c.token_balance(&live.host.tokens).await.unwrap();
    let treasury_before = c.token_balance(&live.treasury).await.unwrap();
    let client_before = c.token_balance(&client.tokens).await.unwrap();
    let lease = pda::lease(&bid).0;

    // Kill the agent right after its first proof landed, container still running.
    wait_for("the first proof", 60, &agent, || async {
        live.cluster
            .account::<Lease>(&lease)
            .await
            .ok()
            .filter(|l| l.next_interval >= 1)
    })
    .await;
    let before: Vec<(String, bool)> = containers_of(&docker, &lease).await;
    assert_eq!(before.len(), 1, "one container for the lease");
    let first_log = agent.kill9();

    // Restart from the same state file: the container is adopted, not started twice.
    let agent = Agent::start(&config);
    wait_for(
        "the lease settled and closed after the restart",
        90,
        &agent,
        || async { (!account_exists(&live, &lease).await).then_some(()) },
    )
    .await;
    wait_for("the container removed", 20, &agent, || async {
        containers_of(&docker, &lease)
            .await
            .is_empty()
            .then_some(())
    })
    .await;
    let log = agent.log();
    assert!(
        !log.contains("lease started"),
        "the restarted agent adopted the running container instead of starting another:\n{log}"
    );
    let settled = settle_and_check(
        &live,
        &client,
        &lease,
        escrow,
        host_before,
        treasury_before,
        client_before,
    )
    .await;
    assert!(
        settled.proofs.len() >= 5,
        "every interval of the 5-interval lease proven: {} proofs\nfirst run:\n{first_log}\nsecond run:\n{log}",
        settled.proofs.len()
    );
    let machine: Machine = live.cluster.account(&live.machine).await.unwrap();
    assert_eq!(machine.missed_intervals, 0, "no interval lost to the kill");
    assert_eq!(machine.leases, 0);
    let (status, log) = agent.terminate();
    assert!(status.success(), "SIGTERM drains cleanly; log:\n{log}");
}
