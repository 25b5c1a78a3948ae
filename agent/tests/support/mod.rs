//! What the agent's integration tests and its benchmark share: a market with a machine on a
//! local validator, the agent binary run as a process with a generated configuration, and the
//! engine's view of the lease containers.
#![allow(dead_code)] // each user (test binary, bench) uses a part

pub mod farnet;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bollard::query_parameters::ListContainersOptions;
use bollard::Docker;
use futures_util::{StreamExt, TryStreamExt};
use gpu_market::instructions::PlaceBidArgs;
use gpu_market::state::{BidKind, GpuSpec, MarketParams, OverclockTerms};
use gpu_market_agent::gpu::mps::Mps;
use gpu_market_tests::live::{LiveMarket, Wallet};
use solana_pubkey::Pubkey;

pub const TOKEN: u64 = 1_000_000;
pub const INTERVAL: u32 = 4;
/// Per GPU-hour: 1 000 base units per GPU-second.
pub const PRICE: u64 = 3_600_000;

/// `n` GPUs of class 0 in one topology group, 24 GiB each.
pub fn gpus(n: u8) -> Vec<GpuSpec> {
    (0..n)
        .map(|i| GpuSpec {
            // As `detect` prints the SIMULATED GPUs the tests' agents drive.
            uuid: gpu_market_agent::gpu::simulated::uuid(i as u16),
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

pub fn params() -> MarketParams {
    let mut p = MarketParams::recommended(INTERVAL, 250, 600);
    p.base_price_per_gpu_hour = TOKEN / 10;
    p.min_host_stake = 10 * TOKEN;
    p
}

/// A market on a new local validator with a registered machine of `n` GPUs.
pub async fn live_market(n: u8) -> LiveMarket {
    LiveMarket::start(params(), gpus(n), 10 * TOKEN, TOKEN / 10, TOKEN / 5)
        .await
        .expect("a market with a registered machine on a local validator")
}

pub fn engine_env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: start the engine with scripts/engine.sh start and eval \"$(scripts/engine.sh env)\"")
    })
}

/// The `worker` image (keeps its CPU share busy), pinned: reference and digest.
pub fn worker_image() -> (String, [u8; 32]) {
    seeded_image("WORKER")
}

/// The seeded image `GPU_MARKET_<name>_IMAGE` (`WORKER`, `IDLER`), pinned.
pub fn seeded_image(name: &str) -> (String, [u8; 32]) {
    (
        engine_env(&format!("GPU_MARKET_{name}_IMAGE")),
        sha256_digest(&engine_env(&format!("GPU_MARKET_{name}_DIGEST"))),
    )
}

/// The digest after the last `sha256:` of `text` (`sha256:…`, or `repo@sha256:…`).
pub fn sha256_digest(text: &str) -> [u8; 32] {
    let hex = text
        .trim()
        .rsplit_once("sha256:")
        .expect("a sha256 digest")
        .1;
    let mut digest = [0; 32];
    hex::decode_to_slice(hex, &mut digest).expect("64 hex digits");
    digest
}

/// How long a test's queue bid may wait to start: well within the aging cap of [`params`]
/// (`aging_cap_bps / aging_per_interval` = 300 intervals), which bounds a queue bid's deadline.
pub const QUEUE_WAIT_SECS: i64 = 600;

/// A queue bid for one GPU × 8 GiB at 300 W for `secs`, that may start up to
/// [`QUEUE_WAIT_SECS`] after `now`.
pub fn queue_bid(secs: u32, now: i64) -> PlaceBidArgs {
    let (image_ref, image_digest) = worker_image();
    PlaceBidArgs {
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
        min_duration_secs: secs,
        deadline: now + QUEUE_WAIT_SECS + secs as i64,
        urgency_premium: 0,
        ports: vec![],
        scratch_gib: 0,
        cpu_milli: 0,
        memory_mib: 0,
        regions: Vec::new(),
        auto_power: None,
    }
}

/// The agent binary: the one cargo built for this test, else `$GPU_MARKET_AGENT_BIN`, else the
/// workspace's release build (what the benchmark measures).
fn agent_binary() -> PathBuf {
    if let Some(built) = option_env!("CARGO_BIN_EXE_gpu-market-agent") {
        return PathBuf::from(built);
    }
    std::env::var_os("GPU_MARKET_AGENT_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/gpu-market-agent")
        })
}

/// One simulated GPU as [`gpus`] declares it on chain (SIMULATED GPU: no hardware here).
const SIMULATED_GPU: &str = r#"
[[gpu.simulated]]
class = 0
memory_gib = 24
topology_group = 0
power_w = [150, 450]
default_power_w = 350
core_lock_mhz = [210, 2520]
core_offset_mhz = [-200, 200]
mem_offset_mhz = [0, 1500]
"#;

/// The agent process and its log.
pub struct Agent {
    child: Child,
    log: PathBuf,
    /// The machine and the engine of its configuration: when the test is over, the containers
    /// the agent left are removed (a killed agent cannot; left running, each would spend its CPU
    /// share through every later test).
    machine: String,
    engine: String,
    /// Set by [`Agent::kill9`]: its containers are meant to outlive it, for the next agent.
    keep_containers: bool,
    /// Its shared leases' MPS daemons, stopped with its containers.
    mps: Mps,
}

/// The SIMULATED `nvidia-cuda-mps-control` of the tests.
fn simulated_mps_control() -> PathBuf {
    gpu_market_agent::gpu::mps::simulated(Path::new("/")).control
}

impl Agent {
    /// Writes the agent's keypair and a configuration for `gpu_count` simulated GPUs (as
    /// [`gpus`] declares them on chain) into `dir`.
    pub fn write_config(live: &LiveMarket, dir: &Path, gpu_count: usize) -> PathBuf {
        Self::write_config_for(live, dir, gpu_count, &live.agent, &live.machine)
    }

    /// [`Agent::write_config`] for `machine` of the market, whose agent key is `agent`.
    pub fn write_config_for(
        live: &LiveMarket,
        dir: &Path,
        gpu_count: usize,
        agent: &solana_keypair::Keypair,
        machine: &Pubkey,
    ) -> PathBuf {
        let keypair = dir.join("agent.json");
        solana_keypair::write_keypair_file(agent, &keypair).unwrap();
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

[api]
listen = "127.0.0.1:0"

[container]
memory_mib_per_gpu = 64
# A tenth of a CPU: with less, the CPU quota throttles the runtime's own set-up of each
# container (a start takes ~0.3 s more at 0.05 CPU on an idle machine, far more on a busy one).
millicpus_per_gpu = 100
pids_limit = 64
stop_grace_secs = 2

[gpu]
backend = "simulated"
# The tests' bids take 8 GiB slices: shared GPUs need MPS. SIMULATED: each shared lease's
# daemon is the simulated control program's (processes and pipes, no server, no GPU).
mps_control = "{mps}"
{gpus}"#,
            rpc = live.cluster.rpc_url,
            ws = live.cluster.ws_url,
            keypair = keypair.display(),
            market = live.market,
            machine = machine,
            cost = TOKEN / 5,
            data = dir.join("data").display(),
            engine = engine_env("DOCKER_HOST"),
            gpus = SIMULATED_GPU.repeat(gpu_count),
            mps = simulated_mps_control().display(),
        );
        let path = dir.join("agent.toml");
        std::fs::write(&path, config).unwrap();
        path
    }

    pub fn start(config: &Path) -> Agent {
        let log = config.with_extension(format!(
            "{}.log",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(agent_binary())
            .args(["run", "--config"])
            .arg(config)
            .env("RUST_LOG", "info,gpu_market_agent::chain::solana=debug")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("start the agent");
        Agent {
            child,
            log,
            machine: setting(config, "machine"),
            engine: setting(config, "engine_socket"),
            keep_containers: false,
            mps: mps_of(config),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// kill -9: no drain, no cleanup (its containers stay for the agent started next).
    pub fn kill9(mut self) -> String {
        self.keep_containers = true;
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        self.log()
    }

    /// The address of the agent's `/metrics` and `/healthz`, from its configuration.
    pub fn metrics_address(config: &Path) -> String {
        setting(config, "metrics_listen")
    }

    /// `gpu-market-agent drain` with the agent's configuration: its output and status, then
    /// the agent's own exit status and log.
    pub fn drain(
        mut self,
        config: &Path,
    ) -> (std::process::Output, std::process::ExitStatus, String) {
        let verb = Command::new(agent_binary())
            .args(["drain", "--config"])
            .arg(config)
            .output()
            .expect("run gpu-market-agent drain");
        let status = self.child.wait().unwrap();
        (verb, status, self.log())
    }

    /// Waits up to `limit` for the agent to exit on its own (a refused start), then its exit
    /// status and log; kills it past the limit.
    pub fn wait_exit(mut self, limit: Duration) -> (std::process::ExitStatus, String) {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return (status, self.log());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        self.child.kill().unwrap();
        let status = self.child.wait().unwrap();
        (status, self.log())
    }

    /// SIGTERM (the agent stops; its leases keep running), and its exit status.
    pub fn terminate(mut self) -> (std::process::ExitStatus, String) {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        let status = self.child.wait().unwrap();
        (status, self.log())
    }
}

/// Rewrites the agent's configuration `config` (as [`Agent::write_config`] wrote it) to serve
/// its API on `api_port` of loopback (0: any) and publish leases' ports from the ten ports from
/// `first`, on `publish_ip`.
pub fn publishing(config: &Path, api_port: u16, first: u16, publish_ip: &str) {
    let text = std::fs::read_to_string(config).unwrap().replace(
        "listen = \"127.0.0.1:0\"",
        &format!(
            "listen = \"127.0.0.1:{api_port}\"\n\n[network]\nports = \"{first}-{}\"\npublish_ip = \"{publish_ip}\"",
            first + 9
        ),
    );
    std::fs::write(config, text).unwrap();
}

/// The machine of `live` now declares loopback with its API on `api_port`, one port and 1 GiB
/// of scratch per lease, and open egress.
pub async fn declare_network(live: &LiveMarket, api_port: u16) {
    live.update_machine(|terms| {
        terms.network = gpu_market::state::MachineNetwork {
            host: "127.0.0.1".into(),
            api_port,
            ports_per_lease: 1,
            scratch_gib: 1,
            egress: gpu_market::state::Egress::Open,
            allow: Vec::new(),
        }
    })
    .await
    .unwrap();
}

/// A top-level string setting of the agent's configuration file (as [`Agent::config`] writes it).
fn setting(config: &Path, key: &str) -> String {
    std::fs::read_to_string(config)
        .unwrap()
        .lines()
        .find_map(|l| {
            l.strip_prefix(&format!("{key} = "))
                .map(|v| v.trim_matches('"').to_string())
        })
        .unwrap_or_else(|| panic!("no {key} in the agent's configuration"))
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if !self.keep_containers {
            remove_containers(&self.engine, &self.machine);
            gpu_market_agent::gpu::mps::sweep(&self.mps, &Default::default());
        }
    }
}

/// Removes the lease containers and stops the MPS daemons the agent of `config` left (one
/// killed with no successor).
pub fn remove_containers_of(config: &Path) {
    remove_containers(
        &setting(config, "engine_socket"),
        &setting(config, "machine"),
    );
    gpu_market_agent::gpu::mps::sweep(&mps_of(config), &Default::default());
}

/// The simulated MPS of the agent of `config`: its daemons' folders in its data folder.
fn mps_of(config: &Path) -> Mps {
    gpu_market_agent::gpu::mps::simulated(&Path::new(&setting(config, "data_dir")).join("mps"))
}

/// Removes the lease containers of `machine` on `engine`.
fn remove_containers(engine: &str, machine: &str) {
    let docker = |args: &[&str]| {
        Command::new("docker")
            .args(["--host", engine])
            .args(args)
            .output()
            .ok()
    };
    let filter = format!("label=io.gpu-market.managed={machine}");
    if let Some(out) = docker(&["ps", "-aq", "--filter", &filter]) {
        let ids = String::from_utf8_lossy(&out.stdout).into_owned();
        let ids: Vec<&str> = ids.split_whitespace().collect();
        if !ids.is_empty() {
            docker(&[&["rm", "-f"], ids.as_slice()].concat());
        }
    }
}

/// Polls `check` every 200 ms until it yields a value; panics with the agent's log after
/// `secs`.
pub async fn wait_for<T, F, Fut>(what: &str, secs: u64, agent: &Agent, mut check: F) -> T
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

/// Polls `check` every 200 ms until it yields a value; panics with the agent's log once the
/// cluster's clock, read before a check that yielded nothing, is past `until`. For what the
/// market schedules in its own time: the validator's clock runs behind this machine's under
/// load (41 of its seconds took 71 here beside the hostile-tenant test), so a limit in wall
/// time failed before the chain got there. Stops too after [`CHAIN_WAIT_CAP`] of wall time,
/// should the chain stall.
pub async fn wait_for_chain<T, F, Fut>(
    what: &str,
    live: &LiveMarket,
    until: i64,
    agent: &Agent,
    mut check: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let cap = Instant::now() + CHAIN_WAIT_CAP;
    loop {
        let now = live.cluster.now().await.unwrap();
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            now <= until && Instant::now() < cap,
            "{what}: not by {until} on the cluster's clock (it reads {now}); agent log:\n{}",
            agent.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// How long [`wait_for_chain`] waits in wall time at most.
pub const CHAIN_WAIT_CAP: Duration = Duration::from_secs(300);

pub async fn docker() -> Docker {
    Docker::connect_with_unix(&engine_env("DOCKER_HOST"), 60, bollard::API_DEFAULT_VERSION)
        .unwrap()
        .negotiate_version()
        .await
        .unwrap()
}

/// The body of `GET http://addr{path}` from the test process (the host), if it answers
/// within a few seconds.
pub fn http_get(addr: &str, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let addr = addr.parse().ok()?;
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(3))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    out.split("\r\n\r\n").nth(1).map(str::to_string)
}

/// Containers (running or not) labelled with `lease`: (id, running).
pub async fn containers_of(docker: &Docker, lease: &Pubkey) -> Vec<(String, bool)> {
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

pub async fn account_exists(live: &LiveMarket, key: &Pubkey) -> bool {
    live.cluster
        .rpc()
        .get_account_with_commitment(key, solana_commitment_config::CommitmentConfig::confirmed())
        .await
        .map(|r| r.value.is_some())
        .unwrap_or(true)
}

/// Places queue `bids` of `client` (each one transaction, 24 at a time), each naming
/// `witness` as a machine it could run on; returns their addresses.
pub async fn place_all(
    live: &LiveMarket,
    client: &Wallet,
    witness: Pubkey,
    bids: Vec<PlaceBidArgs>,
) -> Vec<Pubkey> {
    futures_util::stream::iter(
        bids.into_iter()
            .map(|args| async move { live.place_via(client, witness, args).await }),
    )
    .buffer_unordered(24)
    .try_collect()
    .await
    .expect("every bid placed")
}

/// A region label, zero-padded.
pub fn region(label: &str) -> [u8; 16] {
    let mut r = [0; 16];
    r[..label.len()].copy_from_slice(label.as_bytes());
    r
}

/// The kinds of [`unservable`] bid.
pub const UNSERVABLE_KINDS: u64 = 8;

/// Queue bids a class-0 machine of `machine_gpus` 24 GiB GPUs (150..450 W, no ports, no CPU
/// given to leases, no region) can never serve, yet priced at the reserve price of their
/// classes and more, each until `deadline`, in turn: another class, 48 GiB per GPU, 500 W, a
/// region it is not in (`us-east`), a published port, 64 CPU cores, one GPU more than it has,
/// and per-GPU power limits of 50 W and 300 W (the last two kinds a summary of old could not
/// decide). [`attacker_witness`] fits every one.
pub fn unservable(
    nonces: std::ops::Range<u64>,
    secs: u32,
    deadline: i64,
    machine_gpus: u8,
) -> Vec<PlaceBidArgs> {
    nonces
        .map(|nonce| {
            let mut b = queue_bid(secs, deadline);
            b.deadline = deadline;
            match nonce % UNSERVABLE_KINDS {
                0 => b.accepted_classes = 0b10,
                1 => b.gib_per_gpu = 48,
                2 => b.overclock[0].power_limit_w = 500,
                3 => b.regions = vec![region("us-east")],
                4 => b.ports = vec![8080],
                5 => b.cpu_milli = 64_000,
                6 => b.gpu_count = machine_gpus + 1,
                _ => {
                    b.gpu_count = 2;
                    b.overclock = [50, 300]
                        .map(|w| OverclockTerms {
                            power_limit_w: w,
                            core_lock_mhz: 1_800,
                            ..Default::default()
                        })
                        .to_vec();
                }
            }
            b
        })
        .collect()
}

/// An attacker's machine in `us-east` that every [`unservable`] bid fits: it stakes the bond,
/// registers it, and returns its owner and the machine (pause it once the bids are placed:
/// they then fit no active machine).
pub async fn attacker_witness(live: &LiveMarket) -> (Wallet, Pubkey) {
    witness_machine(live, region("us-east")).await
}

/// A roomy machine in `label` (listed first if the market does not list it yet): 8 GPUs of
/// 48 GiB in classes 0 and 1, 50..500 W, 4 ports a lease, 128 cores, 1 TiB of memory. A queue
/// bid no other machine of a test fits names it as its witness; returns its owner and the
/// machine.
pub async fn witness_machine(live: &LiveMarket, label: [u8; 16]) -> (Wallet, Pubkey) {
    let m = live.market_state().await.unwrap();
    if !m.regions.contains(&label) {
        live.add_region(label).await.expect("add_region");
    }
    let owner = live
        .client(m.params.min_host_stake, m.params.min_host_stake)
        .await
        .unwrap();
    let (machine, _) = live
        .register_machine(&owner.key, Pubkey::new_unique(), |t| {
            t.region = label;
            t.gpus = (0..8u8)
                .map(|i| GpuSpec {
                    uuid: [0xa0 + i; 16],
                    class: i % 2,
                    topology_group: 0,
                    memory_gib: 48,
                    power_w: [50, 500],
                    core_lock_mhz: [210, 2_520],
                    mem_lock_mhz: [0, 0],
                    core_offset_mhz: [-200, 200],
                    mem_offset_mhz: [0, 1_500],
                })
                .collect();
            t.network.host = "witness.example".into();
            t.network.ports_per_lease = 4;
            t.cpu_milli = 128_000;
            t.memory_mib = 1 << 20;
        })
        .await
        .expect("the witness machine");
    (owner, machine)
}

/// `docker exec` of `script` in container `id` (on the engine of `DOCKER_HOST`): its standard
/// output.
pub fn exec(id: &str, script: &str) -> String {
    let out = std::process::Command::new("docker")
        .args(["exec", id, "sh", "-c", script])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `docker logs` of container `id`: its standard output so far.
pub fn container_log(id: &str) -> String {
    let out = std::process::Command::new("docker")
        .args(["logs", id])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// This host's IPv4 address towards its default route: where another machine of its network
/// would reach it (a lease's containers reach it too, through the engine's proxy).
pub fn host_address() -> std::net::Ipv4Addr {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
    socket
        .connect("198.51.100.1:9")
        .expect("this test needs an IPv4 default route: the address a gang's parts meet at");
    match socket.local_addr().unwrap().ip() {
        std::net::IpAddr::V4(ip) if !ip.is_loopback() => ip,
        other => panic!("no non-loopback IPv4 address towards the default route: {other}"),
    }
}

/// An image of the test's own in the local registry (busybox, a file naming `name`, `env` as
/// its own `ENV`, and `filler` random bytes, which no compression shrinks), pushed and gone
/// from the engine's store: its reference and digest. Its own, so that removing it touches no
/// image another test uses beside this one.
pub fn pushed_image(name: &str, env: &[&str], filler: usize) -> (String, [u8; 32]) {
    let registry = engine_env("GPU_MARKET_REGISTRY");
    let reference = format!("{registry}/gpu-market/{name}-{}:latest", std::process::id());
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("bin")).unwrap();
    std::fs::copy("/bin/busybox", root.path().join("bin/busybox")).unwrap();
    std::fs::write(root.path().join(name), reference.as_bytes()).unwrap();
    if filler > 0 {
        let status = std::process::Command::new("head")
            .args(["-c", &filler.to_string(), "/dev/urandom"])
            .stdout(std::fs::File::create(root.path().join("filler")).unwrap())
            .status()
            .unwrap();
        assert!(status.success());
    }
    let changes: String = env.iter().map(|e| format!(" -c 'ENV {e}'")).collect();
    let script = format!(
        "tar -C {dir} -c . | docker import{changes} -c 'CMD [\"/bin/busybox\", \"env\"]' - {reference} >/dev/null && \
         docker push {reference} >/dev/null && \
         docker inspect --format '{{{{index .RepoDigests 0}}}}' {reference} && docker rmi -f {reference} >/dev/null",
        dir = root.path().display()
    );
    let out = std::process::Command::new("sh")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    (reference, sha256_digest(&text))
}
