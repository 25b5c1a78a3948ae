//! The agent's configuration: a TOML file parsed by one pure function.
//!
//! The file is read into raw serde structs that refuse unknown keys, then every value is checked
//! and turned into the typed [`Config`]; each refusal names the key it is about.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use gpu_market_core::fit::Host;
use gpu_market_core::overclock::{GpuLimits, OverclockError, Range};
use serde::Deserialize;

use crate::chain::Key;
use crate::gpu::mps::Mps;
use crate::metrics::health::{
    HealthLimits, DEFAULT_PROOF_STALENESS_SECS, DEFAULT_TICK_STALENESS_SECS,
    DEFAULT_WEBSOCKET_SILENCE_SECS,
};
use crate::network::{LeasePool, Publishing};
use crate::redact::{redact_url, SecretUrl};
use crate::runtime::Sandbox;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// May carry the provider's API key: shown redacted.
    pub rpc_url: SecretUrl,
    pub ws_url: SecretUrl,
    pub keypair: PathBuf,
    pub market: Key,
    pub machine: Key,
    /// The payment-token account of the machine's owner that proofs pay; `None`: the owner's
    /// first such account (by address) that the cluster lists.
    pub host_token_account: Option<Key>,
    pub commitment: Commitment,
    /// The most compute-unit price, in micro-lamports, a transaction offers as its priority
    /// fee (`chain::fees`); 0 offers none.
    pub max_priority_fee_micro_lamports: u64,
    pub gpu: GpuBackendConfig,
    /// The host's NVIDIA MPS (`[gpu] mps_control`), from which each lease that shares a GPU
    /// gets a daemon of its own, confining it to its slice (`gpu::mps`), in
    /// `<data_dir>/mps`; `None`: such leases are refused.
    pub mps: Option<Mps>,
    /// Whether a GPU no lease uses is parked at its least power limit (`[gpu] park_idle`,
    /// default `true`) instead of its default one.
    pub park_idle_gpus: bool,
    /// The container engine's socket, `unix:///path`.
    pub engine_socket: String,
    pub container: ContainerLimits,
    /// Credentials per registry host (`ghcr.io`, `127.0.0.1:5000`).
    pub registries: BTreeMap<String, RegistryAuth>,
    /// What a lease's image may cost to get.
    pub images: ImageBudget,
    /// The host's electricity cost per kWh in payment-token base units (the spot rule uses it).
    pub electricity_cost_per_kwh: u64,
    pub data_dir: PathBuf,
    pub metrics_listen: SocketAddr,
    /// How often the reconcile loop runs (and samples the GPUs).
    pub billing_poll_interval: Duration,
    /// How often the agent heartbeats; never less often than every two thirds of the market's
    /// silence window, after which the packing policy leaves the machine out. Proof rounds (one
    /// every two intervals at the recommended parameters) count as heartbeats.
    pub heartbeat_interval: Duration,
    /// How often the agent claims the pay its proofs accrued (`claim_pay`, one signature):
    /// proofs accrue pay to the machine, and only a claim moves tokens to the host.
    pub claim_interval: Duration,
    /// How long a bid the market's packing policy gives another machine waits for it before
    /// this machine takes it (`core::placement::GRACE_SECS` by default), times this machine's
    /// turn among the others that fit.
    pub placement_grace: Duration,
    /// How long a SIGTERM drain may take before the agent exits anyway.
    pub drain_deadline: Duration,
    pub log_format: LogFormat,
    /// When `/healthz` reports the agent unhealthy.
    pub health: HealthLimits,
    /// Leases' published ports and what is kept for their clients.
    pub network: NetworkConfig,
    /// The lease owner's API (`[api]`).
    pub api: ApiConfig,
}

/// The lease owner's API (`crate::api`): each lease's client reads its container's logs, runs
/// commands in it and copies files out of it, over TLS with the agent's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiConfig {
    /// Where the API listens (`[api] listen`).
    pub listen: SocketAddr,
}

/// Where the API listens unless `[api] listen` says otherwise: every interface, as its clients
/// are elsewhere.
pub const DEFAULT_API_LISTEN: &str = "0.0.0.0:7450";

/// The `[network]` section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetworkConfig {
    /// Host ports leases' published ports come from (`ports = "30000-30999"`), on
    /// `publish_ip`; `None`: leases that ask for ports cannot start here.
    pub publishing: Option<Publishing>,
    /// How long a lease's scratch volume and logs stay for its client after it ends.
    pub retention: Duration,
    /// The most memory the scratch volumes of ended leases may hold together; over it, the
    /// oldest are deleted before their retention ends. Not offered to leases
    /// ([`HostCapacity::for_leases`]).
    pub retained_scratch_mib: u64,
    /// Where leases' bridge subnets are carved from.
    pub lease_pool: LeasePool,
}

/// What a check of the host's memory for leases leaves out.
const MEMORY_NOTE: &str =
    " (its memory less [network] retained_scratch_mib, which ended leases' scratch volumes may hold)";

/// `[network] retained_scratch_mib` by default: 4 GiB.
pub const DEFAULT_RETAINED_SCRATCH_MIB: u64 = 4_096;

/// The commitment of every read and confirmation. Not `processed`: the agent decides from its
/// reads that a lease is gone or a proof landed, and must not act on a fork that can be undone
/// ([`ConfigError::ProcessedCommitment`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Commitment {
    Confirmed,
    Finalized,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuBackendConfig {
    /// GPUs modelled in software, for tests and machines without NVIDIA GPUs.
    Simulated(Vec<SimulatedGpuConfig>),
    /// The NVIDIA driver through libnvidia-ml.so; `classes` maps the GPU model names NVML
    /// reports to the market's GPU classes (for `detect`).
    Nvml { classes: BTreeMap<String, u8> },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimulatedGpuConfig {
    pub class: u8,
    pub memory_gib: u16,
    pub topology_group: u8,
    pub limits: GpuLimits,
    pub default_power_w: u16,
}

/// Limits each container gets, scaled by its number of GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContainerLimits {
    pub memory_mib_per_gpu: u64,
    /// Thousandths of a CPU.
    pub millicpus_per_gpu: u64,
    pub pids_limit: i64,
    /// How long a stopping container gets between SIGTERM and SIGKILL.
    pub stop_grace: Duration,
    /// Where each container may write and how much it may log.
    pub sandbox: Sandbox,
}

/// What the host has for its containers: its CPUs and its memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostCapacity {
    pub cpus: u64,
    pub memory_bytes: u64,
}

impl HostCapacity {
    /// What is left of it for running leases when the scratch volumes of leases that ended may
    /// hold `retained_scratch_mib` of its memory for their retention (a tmpfs keeps its pages
    /// after its container is gone): its memory less that.
    pub fn for_leases(self, retained_scratch_mib: u64) -> Self {
        HostCapacity {
            memory_bytes: self
                .memory_bytes
                .saturating_sub(retained_scratch_mib.saturating_mul(1 << 20)),
            ..self
        }
    }

    /// This host's: the CPUs this process may use (`available_parallelism`, which honours CPU
    /// affinity and cgroup quotas) and `MemTotal` of `/proc/meminfo`.
    pub fn this_host() -> Result<Self, ConfigError> {
        let unknown =
            |what: &'static str, reason: String| ConfigError::HostUnknown { what, reason };
        let cpus = std::thread::available_parallelism()
            .map_err(|e| unknown("CPU count", e.to_string()))?
            .get() as u64;
        let meminfo = std::fs::read_to_string("/proc/meminfo")
            .map_err(|e| unknown("memory", format!("/proc/meminfo: {e}")))?;
        let memory_bytes = mem_total_bytes(&meminfo)
            .ok_or_else(|| unknown("memory", "/proc/meminfo has no MemTotal line".into()))?;
        Ok(HostCapacity { cpus, memory_bytes })
    }

    /// Checks that the CPU and memory the machine account gives its leases in all
    /// (`host register|update --cpus --memory`), which the agent sets as its containers'
    /// limits, are on this host.
    pub fn check_declared(&self, declared: Host) -> Result<(), ConfigError> {
        let over = |what, flag, declared: u64, have: u64, unit, note| {
            (declared > have).then_some(ConfigError::DeclaredOverHost {
                what,
                flag,
                declared,
                have,
                unit,
                note,
            })
        };
        let cpus = over(
            "CPU",
            "cpus",
            declared.cpu_milli as u64,
            self.cpus.saturating_mul(1_000),
            "millicpus",
            "",
        );
        let memory = over(
            "memory",
            "memory",
            declared.memory_mib as u64,
            self.memory_bytes >> 20,
            "MiB",
            MEMORY_NOTE,
        );
        cpus.or(memory).map_or(Ok(()), Err)
    }
}

/// `MemTotal` of a `/proc/meminfo` text, in bytes (the file counts in kB, meaning KiB).
fn mem_total_bytes(meminfo: &str) -> Option<u64> {
    meminfo.lines().find_map(|l| {
        let rest = l.strip_prefix("MemTotal:")?.trim();
        let kib = rest
            .strip_suffix("kB")
            .unwrap_or(rest)
            .trim()
            .parse::<u64>()
            .ok()?;
        kib.checked_mul(1024)
    })
}

impl ContainerLimits {
    /// Checks that the containers of leases on all `gpus` GPUs of the machine at once fit
    /// `host`: their CPUs and their memory together at most the host's. The GPU count is known
    /// once the GPU backend is up, so this runs after [`Config::parse`].
    pub fn check_host(&self, gpus: usize, host: HostCapacity) -> Result<(), ConfigError> {
        let gpus_u = gpus as u64;
        let cpu_need = self.millicpus_per_gpu.saturating_mul(gpus_u);
        let cpu_have = host.cpus.saturating_mul(1_000);
        if cpu_need > cpu_have {
            return Err(ConfigError::OverHost {
                key: "container.millicpus_per_gpu".into(),
                gpus,
                need: cpu_need,
                have: cpu_have,
                unit: "millicpus",
                note: "",
            });
        }
        let mem_need = self.memory_mib_per_gpu.saturating_mul(gpus_u);
        let mem_have = host.memory_bytes >> 20;
        if mem_need > mem_have {
            return Err(ConfigError::OverHost {
                key: "container.memory_mib_per_gpu".into(),
                gpus,
                need: mem_need,
                have: mem_have,
                unit: "MiB",
                note: MEMORY_NOTE,
            });
        }
        Ok(())
    }
}

/// How long a lease's start may spend getting its image (and its sealed environment), and how
/// big the image may be. A lease whose image cannot be had within it ends with a final proof
/// and its client is refunded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageBudget {
    pub pull_timeout: Duration,
    pub max_image_bytes: u64,
    /// What the engine's image store may hold before the agent removes its images no lease
    /// uses (`ContainerRuntime::collect_images`).
    pub max_store_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistryAuth {
    pub username: String,
    pub password: RegistryPassword,
}

#[derive(Clone, PartialEq, Eq)]
pub enum RegistryPassword {
    Inline(String),
    File(PathBuf),
}

impl std::fmt::Debug for RegistryPassword {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RegistryPassword::Inline(_) => f.write_str("Inline(<redacted>)"),
            RegistryPassword::File(p) => write!(f, "File({p:?})"),
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// Not TOML, an unknown key, a missing key or a value of the wrong type; toml's message
    /// names the key and the line.
    #[error("{0}")]
    Syntax(String),
    #[error("{key}: {value:?} must start with one of {expected:?}")]
    BadUrlScheme {
        key: String,
        value: String,
        expected: &'static [&'static str],
    },
    #[error("{key}: must not be empty")]
    Empty { key: String },
    #[error("{key}: must be above zero")]
    Zero { key: String },
    #[error("{key}: {value:?} is not one of {expected:?}")]
    UnknownVariant {
        key: String,
        value: String,
        expected: &'static [&'static str],
    },
    #[error("{key}: {value:?} is not a base58 account key ({reason})")]
    BadKey {
        key: String,
        value: String,
        reason: String,
    },
    #[error("{key}: {value:?} is not an address like 127.0.0.1:9464")]
    BadAddress { key: String, value: String },
    #[error("{key}: {reason}")]
    BadGpu { key: String, reason: String },
    #[error("{key}: {reason}")]
    BadRegistry { key: String, reason: String },
    #[error("{key}: {value:?} {reason}")]
    BadPortRange {
        key: String,
        value: String,
        reason: String,
    },
    /// The limits of containers on every GPU of the machine add up to more than the host has.
    #[error(
        "{key}: containers on all {gpus} GPUs would get {need} {unit}, more than the host's \
         {have}{note}"
    )]
    OverHost {
        key: String,
        gpus: usize,
        need: u64,
        have: u64,
        unit: &'static str,
        /// What `have` leaves out ([`MEMORY_NOTE`] for memory).
        note: &'static str,
    },
    #[error("cannot read the host's {what}: {reason}")]
    HostUnknown { what: &'static str, reason: String },
    /// The machine account gives its leases more CPU or memory than this host has.
    #[error(
        "the machine account gives its leases {declared} {unit} of {what}, more than this \
         host's {have}{note}: lower it with `gpu-market host update MACHINE --{flag} ...`"
    )]
    DeclaredOverHost {
        what: &'static str,
        flag: &'static str,
        declared: u64,
        have: u64,
        unit: &'static str,
        /// What `have` leaves out ([`MEMORY_NOTE`] for memory).
        note: &'static str,
    },
    #[error(
        "{key}: \"processed\" is refused: the agent decides from what it reads that a lease is \
         gone or a proof landed, and a processed read can show a fork that is later undone; use \
         \"confirmed\" or \"finalized\""
    )]
    ProcessedCommitment { key: String },
}

fn default_engine_socket() -> String {
    "unix:///var/run/docker.sock".to_string()
}
/// `heartbeat_interval_secs` unless set: a round of proofs (every two intervals at the
/// recommended parameters) is the heartbeat, so a machine with leases sends none of its own.
pub const DEFAULT_HEARTBEAT_SECS: u64 = 120;

fn default_heartbeat() -> u64 {
    DEFAULT_HEARTBEAT_SECS
}
/// `claim_interval_secs` unless set: one `claim_pay` signature an hour.
pub const DEFAULT_CLAIM_INTERVAL_SECS: u64 = 3_600;

fn default_claim_interval() -> u64 {
    DEFAULT_CLAIM_INTERVAL_SECS
}
fn default_placement_grace() -> u64 {
    gpu_market_core::placement::GRACE_SECS
}
fn default_log_format() -> String {
    "text".to_string()
}
fn default_commitment() -> String {
    "confirmed".to_string()
}
fn default_max_priority_fee() -> u64 {
    100_000
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    rpc_url: String,
    ws_url: String,
    keypair: PathBuf,
    market: String,
    machine: String,
    host_token_account: Option<String>,
    #[serde(default = "default_commitment")]
    commitment: String,
    #[serde(default = "default_max_priority_fee")]
    max_priority_fee_micro_lamports: u64,
    gpu: RawGpu,
    #[serde(default = "default_engine_socket")]
    engine_socket: String,
    #[serde(default)]
    container: RawContainer,
    #[serde(default)]
    registries: BTreeMap<String, RawRegistry>,
    #[serde(default)]
    images: RawImages,
    electricity_cost_per_kwh: u64,
    data_dir: PathBuf,
    metrics_listen: String,
    billing_poll_interval_secs: u64,
    #[serde(default = "default_heartbeat")]
    heartbeat_interval_secs: u64,
    #[serde(default = "default_claim_interval")]
    claim_interval_secs: u64,
    #[serde(default = "default_placement_grace")]
    placement_grace_secs: u64,
    drain_deadline_secs: u64,
    #[serde(default = "default_log_format")]
    log_format: String,
    #[serde(default)]
    health: RawHealth,
    #[serde(default)]
    network: RawNetwork,
    #[serde(default)]
    api: RawApi,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawApi {
    listen: String,
}

impl Default for RawApi {
    fn default() -> Self {
        RawApi {
            listen: DEFAULT_API_LISTEN.to_string(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawNetwork {
    ports: Option<String>,
    publish_ip: String,
    retention_secs: u64,
    retained_scratch_mib: u64,
    lease_pool: String,
}

impl Default for RawNetwork {
    fn default() -> Self {
        RawNetwork {
            ports: None,
            publish_ip: "0.0.0.0".to_string(),
            retention_secs: 3_600,
            retained_scratch_mib: DEFAULT_RETAINED_SCRATCH_MIB,
            lease_pool: {
                let p = LeasePool::default();
                format!("{}/{}", p.network, p.prefix)
            },
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawHealth {
    proof_staleness_secs: u64,
    websocket_silence_secs: u64,
    tick_staleness_secs: u64,
}

impl Default for RawHealth {
    fn default() -> Self {
        RawHealth {
            proof_staleness_secs: DEFAULT_PROOF_STALENESS_SECS,
            websocket_silence_secs: DEFAULT_WEBSOCKET_SILENCE_SECS,
            tick_staleness_secs: DEFAULT_TICK_STALENESS_SECS,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGpu {
    backend: String,
    #[serde(default)]
    simulated: Vec<RawSimulatedGpu>,
    /// NVML: the market class of each GPU model, by the name NVML reports.
    #[serde(default)]
    classes: BTreeMap<String, u8>,
    /// `nvidia-cuda-mps-control`: each lease that shares a GPU gets a daemon of its own.
    mps_control: Option<PathBuf>,
    /// Gone: one daemon for every tenant let each end the others' GPU work. Named only to say so.
    mps_pipe_dir: Option<PathBuf>,
    mps_shm_dir: Option<PathBuf>,
    /// Whether a GPU no lease uses runs at its least power limit (default) or at its default.
    #[serde(default = "yes")]
    park_idle: bool,
}

fn yes() -> bool {
    true
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSimulatedGpu {
    class: u8,
    memory_gib: u16,
    topology_group: u8,
    power_w: [u16; 2],
    default_power_w: u16,
    #[serde(default)]
    core_lock_mhz: [u16; 2],
    #[serde(default)]
    mem_lock_mhz: [u16; 2],
    #[serde(default)]
    core_offset_mhz: [i16; 2],
    #[serde(default)]
    mem_offset_mhz: [i16; 2],
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawContainer {
    memory_mib_per_gpu: u64,
    millicpus_per_gpu: u64,
    pids_limit: i64,
    stop_grace_secs: u64,
    read_only_root: bool,
    tmp_mib: u64,
    scratch_mib: u64,
    writable_layer_mib: u64,
    log_max_mib: u64,
    log_max_files: u32,
}

impl Default for RawContainer {
    fn default() -> Self {
        let sandbox = Sandbox::default();
        RawContainer {
            memory_mib_per_gpu: 16 * 1024,
            millicpus_per_gpu: 4_000,
            pids_limit: 4_096,
            stop_grace_secs: 10,
            read_only_root: sandbox.read_only_root,
            tmp_mib: sandbox.tmp_bytes >> 20,
            scratch_mib: sandbox.scratch_bytes >> 20,
            writable_layer_mib: sandbox.writable_layer_bytes >> 20,
            log_max_mib: sandbox.log_max_bytes >> 20,
            log_max_files: sandbox.log_max_files,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawImages {
    pull_timeout_secs: u64,
    max_image_mib: u64,
    max_store_mib: u64,
}

impl RawImages {
    fn budget(&self) -> Result<ImageBudget, ConfigError> {
        Ok(ImageBudget {
            pull_timeout: Duration::from_secs(nonzero(
                "images.pull_timeout_secs",
                self.pull_timeout_secs,
            )?),
            max_image_bytes: nonzero("images.max_image_mib", self.max_image_mib)?
                .saturating_mul(1 << 20),
            max_store_bytes: nonzero("images.max_store_mib", self.max_store_mib)?
                .saturating_mul(1 << 20),
        })
    }
}

impl Default for ImageBudget {
    /// What an agent configured without `[images]` gets.
    fn default() -> Self {
        RawImages::default()
            .budget()
            .expect("the default budget is not zero")
    }
}

impl Default for RawImages {
    fn default() -> Self {
        RawImages {
            pull_timeout_secs: 600,
            max_image_mib: 50 * 1024,
            max_store_mib: 200 * 1024,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRegistry {
    username: String,
    password: Option<String>,
    password_file: Option<PathBuf>,
}

/// What `detect` and `check` read of a configuration: its `[gpu]` section and its sampling rate.
/// The rest (the chain, the machine, the engine) is not read, so a host can check and describe
/// its GPUs before it has registered a machine to name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuSection {
    pub gpu: GpuBackendConfig,
    pub mps: Option<Mps>,
    /// How often the agent samples its GPUs (`billing_poll_interval_secs`).
    pub billing_poll_interval: Duration,
}

#[derive(Deserialize)]
struct RawGpuSection {
    gpu: RawGpu,
    billing_poll_interval_secs: u64,
}

impl GpuSection {
    /// Parses the `[gpu]` section and `billing_poll_interval_secs` of a configuration's text;
    /// other keys are left unread.
    pub fn parse(text: &str) -> Result<GpuSection, ConfigError> {
        let raw: RawGpuSection =
            toml::from_str(text).map_err(|e| ConfigError::Syntax(e.to_string()))?;
        Ok(GpuSection {
            // `check` runs its daemons where nothing of an agent's is.
            mps: mps(&raw.gpu, std::env::temp_dir().join("gpu-market-check-mps"))?,
            gpu: gpu(raw.gpu)?,
            billing_poll_interval: Duration::from_secs(nonzero(
                "billing_poll_interval_secs",
                raw.billing_poll_interval_secs,
            )?),
        })
    }
}

impl Config {
    /// Parses and checks a configuration file's text.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let raw: Raw = toml::from_str(text).map_err(|e| ConfigError::Syntax(e.to_string()))?;
        let rpc_url = SecretUrl::new(url("rpc_url", raw.rpc_url, &["http://", "https://"])?);
        let ws_url = SecretUrl::new(url("ws_url", raw.ws_url, &["ws://", "wss://"])?);
        if raw.commitment == "processed" {
            return Err(ConfigError::ProcessedCommitment {
                key: "commitment".into(),
            });
        }
        if raw.keypair.as_os_str().is_empty() {
            return Err(ConfigError::Empty {
                key: "keypair".into(),
            });
        }
        let engine_socket = url("engine_socket", raw.engine_socket, &["unix://"])?;
        if raw.data_dir.as_os_str().is_empty() {
            return Err(ConfigError::Empty {
                key: "data_dir".into(),
            });
        }
        let metrics_listen = address("metrics_listen", &raw.metrics_listen)?;
        let api = ApiConfig {
            listen: address("api.listen", &raw.api.listen)?,
        };
        let network = network(&raw.network, &[metrics_listen.port(), api.listen.port()])?;
        let c = &raw.container;
        if c.pids_limit <= 0 {
            return Err(ConfigError::Zero {
                key: "container.pids_limit".into(),
            });
        }
        let container = ContainerLimits {
            memory_mib_per_gpu: nonzero("container.memory_mib_per_gpu", c.memory_mib_per_gpu)?,
            millicpus_per_gpu: nonzero("container.millicpus_per_gpu", c.millicpus_per_gpu)?,
            pids_limit: c.pids_limit,
            stop_grace: Duration::from_secs(c.stop_grace_secs),
            sandbox: Sandbox {
                read_only_root: c.read_only_root,
                tmp_bytes: mib("container.tmp_mib", c.tmp_mib)?,
                scratch_bytes: mib("container.scratch_mib", c.scratch_mib)?,
                writable_layer_bytes: mib("container.writable_layer_mib", c.writable_layer_mib)?,
                log_max_bytes: mib("container.log_max_mib", c.log_max_mib)?,
                log_max_files: nonzero("container.log_max_files", c.log_max_files as u64)? as u32,
            },
        };
        Ok(Config {
            rpc_url,
            ws_url,
            keypair: raw.keypair,
            market: key("market", &raw.market)?,
            machine: key("machine", &raw.machine)?,
            host_token_account: raw
                .host_token_account
                .as_deref()
                .map(|k| key("host_token_account", k))
                .transpose()?,
            commitment: variant(
                "commitment",
                &raw.commitment,
                &["confirmed", "finalized"],
                &[Commitment::Confirmed, Commitment::Finalized],
            )?,
            max_priority_fee_micro_lamports: raw.max_priority_fee_micro_lamports,
            mps: mps(&raw.gpu, raw.data_dir.join("mps"))?,
            park_idle_gpus: raw.gpu.park_idle,
            gpu: gpu(raw.gpu)?,
            engine_socket,
            container,
            registries: registries(raw.registries)?,
            images: raw.images.budget()?,
            electricity_cost_per_kwh: raw.electricity_cost_per_kwh,
            data_dir: raw.data_dir,
            metrics_listen,
            billing_poll_interval: Duration::from_secs(nonzero(
                "billing_poll_interval_secs",
                raw.billing_poll_interval_secs,
            )?),
            heartbeat_interval: Duration::from_secs(nonzero(
                "heartbeat_interval_secs",
                raw.heartbeat_interval_secs,
            )?),
            claim_interval: Duration::from_secs(nonzero(
                "claim_interval_secs",
                raw.claim_interval_secs,
            )?),
            placement_grace: Duration::from_secs(raw.placement_grace_secs),
            drain_deadline: Duration::from_secs(nonzero(
                "drain_deadline_secs",
                raw.drain_deadline_secs,
            )?),
            log_format: variant(
                "log_format",
                &raw.log_format,
                &["text", "json"],
                &[LogFormat::Text, LogFormat::Json],
            )?,
            health: HealthLimits {
                proof_staleness: Duration::from_secs(nonzero(
                    "health.proof_staleness_secs",
                    raw.health.proof_staleness_secs,
                )?),
                websocket_silence: Duration::from_secs(nonzero(
                    "health.websocket_silence_secs",
                    raw.health.websocket_silence_secs,
                )?),
                // The loop ticks at least every poll: three polls without one is stuck.
                tick_staleness: Duration::from_secs(
                    nonzero("health.tick_staleness_secs", raw.health.tick_staleness_secs)?
                        .max(raw.billing_poll_interval_secs.saturating_mul(3)),
                ),
            },
            network,
            api,
        })
    }
}

/// The `[network]` section: a publishing range of unprivileged ports that holds none of the
/// agent's own (`own`), on an IPv4 address.
fn network(raw: &RawNetwork, own: &[u16]) -> Result<NetworkConfig, ConfigError> {
    let bad = |key: &str, value: &str, reason: &str| ConfigError::BadPortRange {
        key: key.into(),
        value: value.into(),
        reason: reason.into(),
    };
    let ip = raw.publish_ip.parse().map_err(|_| {
        bad(
            "network.publish_ip",
            &raw.publish_ip,
            "is not an IPv4 address",
        )
    })?;
    let publishing = match &raw.ports {
        None => None,
        Some(text) => {
            let key = "network.ports";
            let (first, last) = text
                .split_once('-')
                .and_then(|(a, b)| Some((a.trim().parse::<u16>().ok()?, b.trim().parse().ok()?)))
                .ok_or_else(|| bad(key, text, "is not a range like 30000-30999"))?;
            if first < 1024 || first > last {
                return Err(bad(key, text, "must go up from 1024 or above"));
            }
            let p = Publishing { first, last, ip };
            if let Some(port) = own.iter().find(|&&port| p.contains(port)) {
                return Err(bad(
                    key,
                    text,
                    &format!("holds the agent's own port {port}"),
                ));
            }
            Some(p)
        }
    };
    let lease_pool = raw
        .lease_pool
        .split_once('/')
        .and_then(|(a, p)| Some((a.parse().ok()?, p.parse::<u8>().ok()?)))
        .filter(|&(_, p)| p <= crate::network::LEASE_PREFIX)
        .map(|(network, prefix)| LeasePool { network, prefix })
        .ok_or_else(|| {
            bad(
                "network.lease_pool",
                &raw.lease_pool,
                "is not an IPv4 block of /29 or wider, like 10.213.0.0/16",
            )
        })?;
    Ok(NetworkConfig {
        publishing,
        retention: Duration::from_secs(raw.retention_secs),
        retained_scratch_mib: raw.retained_scratch_mib,
        lease_pool,
    })
}

fn url(key: &str, value: String, schemes: &'static [&'static str]) -> Result<String, ConfigError> {
    match schemes.iter().find(|s| value.starts_with(**s)) {
        Some(s) if value.len() > s.len() => Ok(value),
        _ => Err(ConfigError::BadUrlScheme {
            key: key.into(),
            // A mistyped scheme does not make the key in the URL less secret.
            value: redact_url(&value),
            expected: schemes,
        }),
    }
}

fn address(key: &str, value: &str) -> Result<SocketAddr, ConfigError> {
    value.parse().map_err(|_| ConfigError::BadAddress {
        key: key.into(),
        value: value.into(),
    })
}

fn nonzero(key: &str, v: u64) -> Result<u64, ConfigError> {
    if v == 0 {
        Err(ConfigError::Zero { key: key.into() })
    } else {
        Ok(v)
    }
}

/// A non-zero size in MiB, in bytes.
fn mib(key: &str, v: u64) -> Result<u64, ConfigError> {
    Ok(nonzero(key, v)?.saturating_mul(1 << 20))
}

fn key(name: &str, value: &str) -> Result<Key, ConfigError> {
    value
        .parse()
        .map_err(|e: crate::chain::KeyError| ConfigError::BadKey {
            key: name.into(),
            value: value.into(),
            reason: e.to_string(),
        })
}

/// `value` looked up in `names`; the value at the same position of `values`.
fn variant<T: Copy>(
    key: &str,
    value: &str,
    names: &'static [&'static str],
    values: &[T],
) -> Result<T, ConfigError> {
    names
        .iter()
        .position(|name| *name == value)
        .map(|i| values[i])
        .ok_or_else(|| ConfigError::UnknownVariant {
            key: key.into(),
            value: value.into(),
            expected: names,
        })
}

fn gpu(raw: RawGpu) -> Result<GpuBackendConfig, ConfigError> {
    const BACKENDS: &[&str] = &["simulated", "nvml"];
    match raw.backend.as_str() {
        "nvml" if raw.simulated.is_empty() => Ok(GpuBackendConfig::Nvml {
            classes: raw.classes,
        }),
        "nvml" => Err(ConfigError::BadGpu {
            key: "gpu.simulated".into(),
            reason: "simulated GPUs are only for backend = \"simulated\"".into(),
        }),
        "simulated" if raw.simulated.is_empty() => Err(ConfigError::Empty {
            key: "gpu.simulated".into(),
        }),
        "simulated" if !raw.classes.is_empty() => Err(ConfigError::BadGpu {
            key: "gpu.classes".into(),
            reason: "simulated GPUs state their class themselves".into(),
        }),
        "simulated" => raw
            .simulated
            .iter()
            .enumerate()
            .map(|(i, g)| simulated_gpu(i, g))
            .collect::<Result<_, _>>()
            .map(GpuBackendConfig::Simulated),
        other => Err(ConfigError::UnknownVariant {
            key: "gpu.backend".into(),
            value: other.into(),
            expected: BACKENDS,
        }),
    }
}

/// The host's MPS from `[gpu] mps_control`, the lease daemons' folders under `root`.
fn mps(raw: &RawGpu, root: PathBuf) -> Result<Option<Mps>, ConfigError> {
    if raw.mps_pipe_dir.is_some() || raw.mps_shm_dir.is_some() {
        return Err(ConfigError::BadGpu {
            key: "gpu.mps_pipe_dir".into(),
            reason: "one MPS daemon shared by every lease is no longer run (a tenant could end \
                     the others' GPU work through it): remove mps_pipe_dir and mps_shm_dir, stop \
                     that daemon, and set mps_control to the nvidia-cuda-mps-control program; \
                     the agent starts one daemon per lease that shares a GPU"
                .into(),
        });
    }
    match &raw.mps_control {
        None => Ok(None),
        Some(control) if control.is_absolute() => Ok(Some(Mps {
            control: control.clone(),
            root,
        })),
        Some(control) => Err(ConfigError::BadGpu {
            key: "gpu.mps_control".into(),
            reason: format!("{} is not an absolute path", control.display()),
        }),
    }
}

fn simulated_gpu(i: usize, g: &RawSimulatedGpu) -> Result<SimulatedGpuConfig, ConfigError> {
    let key = |field: &str| format!("gpu.simulated[{i}].{field}");
    let range_u = |r: [u16; 2]| Range {
        min: r[0],
        max: r[1],
    };
    let range_i = |r: [i16; 2]| Range {
        min: r[0],
        max: r[1],
    };
    let limits = GpuLimits {
        power_w: range_u(g.power_w),
        core_lock_mhz: range_u(g.core_lock_mhz),
        mem_lock_mhz: range_u(g.mem_lock_mhz),
        core_offset_mhz: range_i(g.core_offset_mhz),
        mem_offset_mhz: range_i(g.mem_offset_mhz),
    };
    if g.memory_gib == 0 {
        return Err(ConfigError::Zero {
            key: key("memory_gib"),
        });
    }
    limits
        .validate()
        .map_err(|e: OverclockError| ConfigError::BadGpu {
            key: key("power_w"),
            reason: e.to_string(),
        })?;
    if !limits.power_w.contains(g.default_power_w) {
        return Err(ConfigError::BadGpu {
            key: key("default_power_w"),
            reason: format!("{} W is outside power_w {:?}", g.default_power_w, g.power_w),
        });
    }
    Ok(SimulatedGpuConfig {
        class: g.class,
        memory_gib: g.memory_gib,
        topology_group: g.topology_group,
        limits,
        default_power_w: g.default_power_w,
    })
}

fn registries(
    raw: BTreeMap<String, RawRegistry>,
) -> Result<BTreeMap<String, RegistryAuth>, ConfigError> {
    raw.into_iter()
        .map(|(host, r)| {
            let key = format!("registries.{host:?}");
            if host.is_empty() || host.contains('/') {
                return Err(ConfigError::BadRegistry {
                    key,
                    reason: "the table name must be a registry host such as ghcr.io".into(),
                });
            }
            if r.username.is_empty() {
                return Err(ConfigError::Empty {
                    key: format!("{key}.username"),
                });
            }
            let password = match (r.password, r.password_file) {
                (Some(p), None) => RegistryPassword::Inline(p),
                (None, Some(f)) if !f.as_os_str().is_empty() => RegistryPassword::File(f),
                (None, Some(_)) => {
                    return Err(ConfigError::Empty {
                        key: format!("{key}.password_file"),
                    })
                }
                _ => {
                    return Err(ConfigError::BadRegistry {
                        key,
                        reason: "give exactly one of password and password_file".into(),
                    })
                }
            };
            Ok((
                host,
                RegistryAuth {
                    username: r.username,
                    password,
                },
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    const MARKET: &str = "11111111111111111111111111111111";
    const MACHINE: &str = "SysvarC1ock11111111111111111111111111111111";

    fn good() -> String {
        format!(
            r#"
rpc_url = "http://127.0.0.1:8899"
ws_url = "ws://127.0.0.1:8900"
keypair = "/etc/gpu-market/agent.json"
market = "{MARKET}"
machine = "{MACHINE}"
commitment = "finalized"
electricity_cost_per_kwh = 500
data_dir = "/var/lib/gpu-market-agent"
metrics_listen = "127.0.0.1:9464"
billing_poll_interval_secs = 5
drain_deadline_secs = 60
log_format = "json"

[gpu]
backend = "simulated"
[[gpu.simulated]]
class = 0
memory_gib = 80
topology_group = 1
power_w = [150, 450]
default_power_w = 400
core_lock_mhz = [210, 1980]

[registries."127.0.0.1:5000"]
username = "agent"
password_file = "/etc/gpu-market/registry.pass"
"#
        )
    }

    fn with(find: &str, replace: &str) -> Result<Config, ConfigError> {
        let text = good();
        assert!(text.contains(find), "fixture lacks {find}");
        Config::parse(&text.replacen(find, replace, 1))
    }

    #[test]
    fn a_complete_file_parses_into_typed_values() {
        let c = Config::parse(&good()).unwrap();
        assert_eq!(c.commitment, Commitment::Finalized);
        assert_eq!(c.log_format, LogFormat::Json);
        assert_eq!(c.market.to_string(), MARKET);
        assert_eq!(c.machine.to_string(), MACHINE);
        assert_eq!(c.billing_poll_interval, Duration::from_secs(5));
        assert_eq!(c.heartbeat_interval, Duration::from_secs(120), "default");
        assert_eq!(c.claim_interval, Duration::from_secs(3_600), "default");
        assert_eq!(c.placement_grace, Duration::from_secs(10), "default");
        assert_eq!(c.engine_socket, "unix:///var/run/docker.sock", "default");
        assert_eq!(c.metrics_listen, "127.0.0.1:9464".parse().unwrap());
        let GpuBackendConfig::Simulated(gpus) = &c.gpu else {
            panic!("{:?}", c.gpu)
        };
        assert_eq!(gpus[0].limits.power_w, Range { min: 150, max: 450 });
        assert_eq!(
            gpus[0].limits.core_lock_mhz,
            Range {
                min: 210,
                max: 1980
            }
        );
        assert_eq!(gpus[0].limits.mem_lock_mhz, Range { min: 0, max: 0 });
        assert_eq!(gpus[0].topology_group, 1);
        let auth = &c.registries["127.0.0.1:5000"];
        assert_eq!(
            auth.password,
            RegistryPassword::File("/etc/gpu-market/registry.pass".into())
        );
    }

    #[test]
    fn the_publishing_range_is_unprivileged_ordered_and_free_of_the_agents_own_ports() {
        let net = |section: &str| {
            let text = format!("{}\n[network]\n{section}\n", good());
            Config::parse(&text).map(|c| c.network)
        };
        assert_eq!(
            net("").unwrap().retained_scratch_mib,
            DEFAULT_RETAINED_SCRATCH_MIB
        );
        assert_eq!(
            net("retained_scratch_mib = 0")
                .unwrap()
                .retained_scratch_mib,
            0
        );
        let n = net("ports = \"30000-30099\"\nretention_secs = 60").unwrap();
        let p = n.publishing.unwrap();
        assert_eq!(
            (p.first, p.last, p.ip),
            (30_000, 30_099, Ipv4Addr::UNSPECIFIED)
        );
        assert_eq!(n.retention, Duration::from_secs(60));
        assert_eq!(Config::parse(&good()).unwrap().network.publishing, None);
        for (range, why) in [
            ("\"80-90\"", "must go up from 1024"),
            ("\"30099-30000\"", "must go up from 1024"),
            ("\"9000-9999\"", "the agent's own port 9464"),
            ("\"30000\"", "a range like"),
        ] {
            let e = net(&format!("ports = {range}")).unwrap_err();
            assert!(
                matches!(&e, ConfigError::BadPortRange { key, .. } if key == "network.ports"),
                "{e}"
            );
            assert!(e.to_string().contains(why), "{e}");
        }
        // The lease pool: the default, another block, and blocks too narrow or not IPv4.
        assert_eq!(
            Config::parse(&good()).unwrap().network.lease_pool,
            LeasePool::default()
        );
        let n = net("lease_pool = \"100.72.0.0/20\"").unwrap();
        assert_eq!(
            (n.lease_pool.network, n.lease_pool.prefix),
            (Ipv4Addr::new(100, 72, 0, 0), 20)
        );
        for pool in ["\"10.0.0.0/30\"", "\"fd00::/64\"", "\"10.0.0.0\""] {
            let e = net(&format!("lease_pool = {pool}")).unwrap_err();
            assert!(e.to_string().contains("network.lease_pool"), "{e}");
        }
    }

    #[test]
    fn bad_url_schemes_name_the_key() {
        let e = with("http://127.0.0.1:8899", "ftp://x").unwrap_err();
        assert!(
            matches!(&e, ConfigError::BadUrlScheme { key, .. } if key == "rpc_url"),
            "{e}"
        );
        let e = with("ws://127.0.0.1:8900", "http://x").unwrap_err();
        assert!(
            matches!(&e, ConfigError::BadUrlScheme { key, .. } if key == "ws_url"),
            "{e}"
        );
        let e = with("http://127.0.0.1:8899", "http://").unwrap_err();
        assert!(
            matches!(&e, ConfigError::BadUrlScheme { key, .. } if key == "rpc_url"),
            "{e}"
        );
    }

    #[test]
    fn empty_paths_and_zero_intervals_are_refused() {
        assert_eq!(
            with("/etc/gpu-market/agent.json", "").unwrap_err(),
            ConfigError::Empty {
                key: "keypair".into()
            }
        );
        assert_eq!(
            with(
                "billing_poll_interval_secs = 5",
                "billing_poll_interval_secs = 0"
            )
            .unwrap_err(),
            ConfigError::Zero {
                key: "billing_poll_interval_secs".into()
            }
        );
        assert_eq!(
            with("drain_deadline_secs = 60", "drain_deadline_secs = 0").unwrap_err(),
            ConfigError::Zero {
                key: "drain_deadline_secs".into()
            }
        );
    }

    #[test]
    fn unknown_words_and_keys_are_refused() {
        let e = with("backend = \"simulated\"", "backend = \"rocm\"").unwrap_err();
        assert!(
            matches!(&e, ConfigError::UnknownVariant { key, .. } if key == "gpu.backend"),
            "{e}"
        );
        let e = with("\"finalized\"", "\"final\"").unwrap_err();
        assert!(
            matches!(&e, ConfigError::UnknownVariant { key, .. } if key == "commitment"),
            "{e}"
        );
        let e = with("\"json\"", "\"yaml\"").unwrap_err();
        assert!(
            matches!(&e, ConfigError::UnknownVariant { key, .. } if key == "log_format"),
            "{e}"
        );
        let e = with("log_format", "colour = true\nlog_format").unwrap_err();
        assert!(
            matches!(&e, ConfigError::Syntax(m) if m.contains("colour")),
            "{e}"
        );
        let e = with("class = 0", "class = 0\nfan = 1").unwrap_err();
        assert!(
            matches!(&e, ConfigError::Syntax(m) if m.contains("fan")),
            "{e}"
        );
    }

    #[test]
    fn keys_addresses_gpus_and_registries_are_checked() {
        let e = with(MARKET, "not-base58-0OIl").unwrap_err();
        assert!(
            matches!(&e, ConfigError::BadKey { key, .. } if key == "market"),
            "{e}"
        );
        let e = with(MACHINE, "abc").unwrap_err();
        assert!(
            matches!(&e, ConfigError::BadKey { key, .. } if key == "machine"),
            "{e}"
        );
        let e = with(
            "commitment = ",
            "host_token_account = \"xyz0\"\ncommitment = ",
        )
        .unwrap_err();
        assert!(
            matches!(&e, ConfigError::BadKey { key, .. } if key == "host_token_account"),
            "{e}"
        );
        let c = with(
            "commitment = ",
            &format!("host_token_account = \"{MARKET}\"\ncommitment = "),
        )
        .unwrap();
        assert_eq!(c.host_token_account, Some(MARKET.parse().unwrap()));
        assert_eq!(Config::parse(&good()).unwrap().host_token_account, None);
        let e = with("127.0.0.1:9464", "localhost").unwrap_err();
        assert!(
            matches!(&e, ConfigError::BadAddress { key, .. } if key == "metrics_listen"),
            "{e}"
        );
        let e = with("default_power_w = 400", "default_power_w = 500").unwrap_err();
        assert!(
            matches!(&e, ConfigError::BadGpu { key, .. } if key == "gpu.simulated[0].default_power_w"),
            "{e}"
        );
        let e = with("power_w = [150, 450]", "power_w = [450, 150]").unwrap_err();
        assert!(
            matches!(&e, ConfigError::BadGpu { key, .. } if key == "gpu.simulated[0].power_w"),
            "{e}"
        );
        let e = with("memory_gib = 80", "memory_gib = 0").unwrap_err();
        assert!(
            matches!(&e, ConfigError::Zero { key } if key == "gpu.simulated[0].memory_gib"),
            "{e}"
        );
        let e = with("password_file", "password = \"x\"\npassword_file").unwrap_err();
        assert!(
            matches!(&e, ConfigError::BadRegistry { key, .. } if key.starts_with("registries.")),
            "{e}"
        );
        let e = with("backend = \"simulated\"", "backend = \"nvml\"").unwrap_err();
        assert!(
            matches!(&e, ConfigError::BadGpu { key, .. } if key == "gpu.simulated"),
            "{e}"
        );
    }

    #[test]
    fn nvml_needs_no_gpu_list_and_maps_model_names_to_classes() {
        let text = good();
        let start = text.find("[gpu]").unwrap();
        let end = text.find("[registries").unwrap();
        let nvml = |gpu: &str| format!("{}{gpu}\n{}", &text[..start], &text[end..]);
        assert_eq!(
            Config::parse(&nvml("[gpu]\nbackend = \"nvml\"\n"))
                .unwrap()
                .gpu,
            GpuBackendConfig::Nvml {
                classes: BTreeMap::new()
            }
        );
        let with_classes =
            nvml("[gpu]\nbackend = \"nvml\"\n[gpu.classes]\n\"NVIDIA H100 80GB HBM3\" = 0\n");
        assert_eq!(
            Config::parse(&with_classes).unwrap().gpu,
            GpuBackendConfig::Nvml {
                classes: [("NVIDIA H100 80GB HBM3".to_string(), 0)].into()
            }
        );
        let e = with(
            "backend = \"simulated\"",
            "backend = \"simulated\"\nclasses = { x = 1 }",
        )
        .unwrap_err();
        assert!(
            matches!(&e, ConfigError::BadGpu { key, .. } if key == "gpu.classes"),
            "{e}"
        );
    }

    #[test]
    fn idle_gpus_are_parked_unless_the_host_says_not() {
        assert!(Config::parse(&good()).unwrap().park_idle_gpus, "default");
        let c = with(
            "backend = \"simulated\"",
            "backend = \"simulated\"\npark_idle = false",
        )
        .unwrap();
        assert!(!c.park_idle_gpus);
    }

    #[test]
    fn mps_takes_the_control_program_as_an_absolute_path_and_refuses_the_shared_daemon() {
        assert_eq!(Config::parse(&good()).unwrap().mps, None);
        let c = with(
            "backend = \"simulated\"",
            "backend = \"simulated\"\nmps_control = \"/usr/bin/nvidia-cuda-mps-control\"",
        )
        .unwrap();
        assert_eq!(
            c.mps,
            Some(Mps {
                control: "/usr/bin/nvidia-cuda-mps-control".into(),
                root: "/var/lib/gpu-market-agent/mps".into(),
            })
        );
        let e = with(
            "backend = \"simulated\"",
            "backend = \"simulated\"\nmps_control = \"nvidia-cuda-mps-control\"",
        )
        .unwrap_err();
        assert!(
            matches!(&e, ConfigError::BadGpu { key, .. } if key == "gpu.mps_control"),
            "{e}"
        );
        // A configuration of the shared daemon is refused with what to do instead.
        let e = with(
            "backend = \"simulated\"",
            "backend = \"simulated\"\nmps_pipe_dir = \"/run/nvidia-mps/pipe\"\n\
             mps_shm_dir = \"/run/nvidia-mps/shm\"",
        )
        .unwrap_err();
        assert!(
            matches!(&e, ConfigError::BadGpu { key, .. } if key == "gpu.mps_pipe_dir"),
            "{e}"
        );
        assert!(e.to_string().contains("mps_control"), "{e}");
    }

    #[test]
    fn containers_are_sandboxed_by_default_and_the_sandbox_is_configurable() {
        let c = Config::parse(&good()).unwrap();
        assert_eq!(c.container.sandbox, Sandbox::default());
        assert!(
            c.container.sandbox.read_only_root,
            "read-only root by default"
        );
        let c = with(
            "[gpu]",
            "[container]\nread_only_root = false\ntmp_mib = 64\nscratch_mib = 2048\n\
             writable_layer_mib = 4096\nlog_max_mib = 8\nlog_max_files = 3\n[gpu]",
        )
        .unwrap();
        assert_eq!(
            c.container.sandbox,
            Sandbox {
                read_only_root: false,
                tmp_bytes: 64 << 20,
                scratch_bytes: 2048 << 20,
                writable_layer_bytes: 4096 << 20,
                log_max_bytes: 8 << 20,
                log_max_files: 3,
            }
        );
        for key in [
            "tmp_mib",
            "scratch_mib",
            "writable_layer_mib",
            "log_max_mib",
            "log_max_files",
        ] {
            assert_eq!(
                with("[gpu]", &format!("[container]\n{key} = 0\n[gpu]")).unwrap_err(),
                ConfigError::Zero {
                    key: format!("container.{key}")
                }
            );
        }
    }

    fn limits(millicpus_per_gpu: u64, memory_mib_per_gpu: u64) -> ContainerLimits {
        ContainerLimits {
            memory_mib_per_gpu,
            millicpus_per_gpu,
            pids_limit: 1,
            stop_grace: Duration::ZERO,
            sandbox: Sandbox::default(),
        }
    }

    const HOST: HostCapacity = HostCapacity {
        cpus: 32,
        memory_bytes: 256 << 30,
    };

    #[test]
    fn container_cpus_on_every_gpu_must_fit_the_hosts_cpus() {
        assert_eq!(limits(4_000, 1).check_host(8, HOST), Ok(()), "exactly 32");
        assert_eq!(
            limits(4_001, 1).check_host(8, HOST).unwrap_err(),
            ConfigError::OverHost {
                key: "container.millicpus_per_gpu".into(),
                gpus: 8,
                need: 32_008,
                have: 32_000,
                unit: "millicpus",
                note: "",
            }
        );
        assert_eq!(limits(u64::MAX, 1).check_host(0, HOST), Ok(()), "no GPUs");
    }

    #[test]
    fn container_memory_on_every_gpu_must_fit_the_hosts_memory() {
        assert_eq!(
            limits(1, 32 * 1024).check_host(8, HOST),
            Ok(()),
            "exactly 256 GiB"
        );
        let e = limits(1, 32 * 1024 + 1).check_host(8, HOST).unwrap_err();
        assert!(
            matches!(&e, ConfigError::OverHost { key, need: 262_152, have: 262_144, .. } if key == "container.memory_mib_per_gpu"),
            "{e}"
        );
        assert!(
            e.to_string().starts_with("container.memory_mib_per_gpu: "),
            "{e}"
        );
        // What ended leases' scratch volumes may hold is not given to running leases.
        let e = limits(1, 32 * 1024)
            .check_host(8, HOST.for_leases(DEFAULT_RETAINED_SCRATCH_MIB))
            .unwrap_err();
        assert!(
            matches!(
                &e,
                ConfigError::OverHost {
                    need: 262_144,
                    have: 258_048,
                    ..
                }
            ),
            "{e}"
        );
        assert!(
            e.to_string()
                .ends_with("retained_scratch_mib, which ended leases' scratch volumes may hold)"),
            "{e}"
        );
    }

    #[test]
    fn the_cpu_and_memory_a_machine_declares_must_be_on_the_host() {
        let declared = |cpu_milli, memory_mib| Host {
            cpu_milli,
            memory_mib,
        };
        assert_eq!(HOST.check_declared(declared(32_000, 262_144)), Ok(()));
        assert_eq!(HOST.check_declared(declared(0, 0)), Ok(()), "none declared");
        let e = HOST.check_declared(declared(32_001, 1)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "the machine account gives its leases 32001 millicpus of CPU, more than this host's \
             32000: lower it with `gpu-market host update MACHINE --cpus ...`"
        );
        let e = HOST.check_declared(declared(1, 262_145)).unwrap_err();
        assert!(
            matches!(e, ConfigError::DeclaredOverHost { what: "memory", .. }),
            "{e}"
        );
    }

    #[test]
    fn the_hosts_memory_is_memtotal() {
        let meminfo = "MemTotal:       24576000 kB\nMemFree:        20000000 kB\n";
        assert_eq!(mem_total_bytes(meminfo), Some(24_576_000 * 1024));
        assert_eq!(mem_total_bytes("MemFree: 1 kB\n"), None);
        let this = HostCapacity::this_host().unwrap();
        assert!(this.cpus >= 1 && this.memory_bytes > 0, "{this:?}");
    }

    #[test]
    fn inline_passwords_are_not_printed() {
        let p = RegistryPassword::Inline("hunter2".into());
        assert!(!format!("{p:?}").contains("hunter2"));
    }

    #[test]
    fn urls_with_keys_are_not_printed() {
        let secret = "https://rpc.example/?api-key=s3cret";
        let c = with("http://127.0.0.1:8899", secret).unwrap();
        assert!(!format!("{c:?}").contains("s3cret"));
        assert_eq!(c.rpc_url.expose(), secret);
        let e = with(
            "http://127.0.0.1:8899",
            "htps://rpc.example/?api-key=s3cret",
        )
        .unwrap_err();
        assert!(!e.to_string().contains("s3cret"), "{e}");
    }

    #[test]
    fn processed_commitment_is_refused_with_its_reason() {
        let e = with("\"finalized\"", "\"processed\"").unwrap_err();
        assert_eq!(
            e,
            ConfigError::ProcessedCommitment {
                key: "commitment".into()
            }
        );
        assert!(e.to_string().contains("fork"), "{e}");
        let c = with("\"finalized\"", "\"confirmed\"").unwrap();
        assert_eq!(c.commitment, Commitment::Confirmed);
    }

    #[test]
    fn the_api_listens_on_every_interface_by_default_and_its_address_is_checked() {
        let c = Config::parse(&good()).unwrap();
        assert_eq!(c.api.listen, DEFAULT_API_LISTEN.parse().unwrap());
        assert_eq!(c.api.listen.port(), 7450);
        let c = with("[gpu]", "[api]\nlisten = \"127.0.0.1:8443\"\n\n[gpu]").unwrap();
        assert_eq!(c.api.listen, "127.0.0.1:8443".parse().unwrap());
        let e = with("[gpu]", "[api]\nlisten = \"localhost\"\n\n[gpu]").unwrap_err();
        assert_eq!(
            e,
            ConfigError::BadAddress {
                key: "api.listen".into(),
                value: "localhost".into()
            }
        );
        let e = with("[gpu]", "[api]\nport = 1\n\n[gpu]").unwrap_err();
        assert!(
            matches!(&e, ConfigError::Syntax(m) if m.contains("port")),
            "{e}"
        );
    }

    #[test]
    fn health_bounds_and_the_priority_fee_cap_have_defaults_and_are_checked() {
        let c = Config::parse(&good()).unwrap();
        assert_eq!(c.health, HealthLimits::default());
        assert_eq!(c.max_priority_fee_micro_lamports, 100_000);
        let c = with(
            "log_format",
            "max_priority_fee_micro_lamports = 0\nlog_format",
        )
        .unwrap();
        assert_eq!(c.max_priority_fee_micro_lamports, 0, "0 offers no fee");
        let health = "[health]\nproof_staleness_secs = 120\nwebsocket_silence_secs = 10\ntick_staleness_secs = 20\n\n[gpu]";
        let c = with("[gpu]", health).unwrap();
        assert_eq!(
            c.health,
            HealthLimits {
                proof_staleness: Duration::from_secs(120),
                websocket_silence: Duration::from_secs(10),
                tick_staleness: Duration::from_secs(20),
            }
        );
        let e = with("[gpu]", "[health]\nwebsocket_silence_secs = 0\n\n[gpu]").unwrap_err();
        assert_eq!(
            e,
            ConfigError::Zero {
                key: "health.websocket_silence_secs".into()
            }
        );
    }
}
