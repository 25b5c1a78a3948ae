//! The agent's configuration: a TOML file parsed by one pure function.
//!
//! The file is read into raw serde structs that refuse unknown keys, then every value is checked
//! and turned into the typed [`Config`]; each refusal names the key it is about.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use gpu_market_core::overclock::{GpuLimits, OverclockError, Range};
use serde::Deserialize;

use crate::chain::Key;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub rpc_url: String,
    pub ws_url: String,
    pub keypair: PathBuf,
    pub market: Key,
    pub machine: Key,
    /// The payment-token account of the machine's owner that proofs pay; `None`: the owner's
    /// first such account (by address) that the cluster lists.
    pub host_token_account: Option<Key>,
    pub commitment: Commitment,
    pub gpu: GpuBackendConfig,
    /// The container engine's socket, `unix:///path`.
    pub engine_socket: String,
    pub container: ContainerLimits,
    /// Credentials per registry host (`ghcr.io`, `127.0.0.1:5000`).
    pub registries: BTreeMap<String, RegistryAuth>,
    /// The host's electricity cost per kWh in payment-token base units (the spot rule uses it).
    pub electricity_cost_per_kwh: u64,
    pub data_dir: PathBuf,
    pub metrics_listen: SocketAddr,
    /// How often the reconcile loop runs (and samples the GPUs).
    pub billing_poll_interval: Duration,
    pub heartbeat_interval: Duration,
    /// How long a SIGTERM drain may take before the agent exits anyway.
    pub drain_deadline: Duration,
    pub log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Commitment {
    Processed,
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
}

fn default_engine_socket() -> String {
    "unix:///var/run/docker.sock".to_string()
}
fn default_heartbeat() -> u64 {
    60
}
fn default_log_format() -> String {
    "text".to_string()
}
fn default_commitment() -> String {
    "confirmed".to_string()
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
    gpu: RawGpu,
    #[serde(default = "default_engine_socket")]
    engine_socket: String,
    #[serde(default)]
    container: RawContainer,
    #[serde(default)]
    registries: BTreeMap<String, RawRegistry>,
    electricity_cost_per_kwh: u64,
    data_dir: PathBuf,
    metrics_listen: String,
    billing_poll_interval_secs: u64,
    #[serde(default = "default_heartbeat")]
    heartbeat_interval_secs: u64,
    drain_deadline_secs: u64,
    #[serde(default = "default_log_format")]
    log_format: String,
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
}

impl Default for RawContainer {
    fn default() -> Self {
        RawContainer {
            memory_mib_per_gpu: 16 * 1024,
            millicpus_per_gpu: 4_000,
            pids_limit: 4_096,
            stop_grace_secs: 10,
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

impl Config {
    /// Parses and checks a configuration file's text.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let raw: Raw = toml::from_str(text).map_err(|e| ConfigError::Syntax(e.to_string()))?;
        let rpc_url = url("rpc_url", raw.rpc_url, &["http://", "https://"])?;
        let ws_url = url("ws_url", raw.ws_url, &["ws://", "wss://"])?;
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
        let metrics_listen = raw
            .metrics_listen
            .parse()
            .map_err(|_| ConfigError::BadAddress {
                key: "metrics_listen".into(),
                value: raw.metrics_listen.clone(),
            })?;
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
                &["processed", "confirmed", "finalized"],
                &[
                    Commitment::Processed,
                    Commitment::Confirmed,
                    Commitment::Finalized,
                ],
            )?,
            gpu: gpu(raw.gpu)?,
            engine_socket,
            container,
            registries: registries(raw.registries)?,
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
        })
    }
}

fn url(key: &str, value: String, schemes: &'static [&'static str]) -> Result<String, ConfigError> {
    match schemes.iter().find(|s| value.starts_with(**s)) {
        Some(s) if value.len() > s.len() => Ok(value),
        _ => Err(ConfigError::BadUrlScheme {
            key: key.into(),
            value,
            expected: schemes,
        }),
    }
}

fn nonzero(key: &str, v: u64) -> Result<u64, ConfigError> {
    if v == 0 {
        Err(ConfigError::Zero { key: key.into() })
    } else {
        Ok(v)
    }
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
        assert_eq!(c.heartbeat_interval, Duration::from_secs(60), "default");
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
    fn inline_passwords_are_not_printed() {
        let p = RegistryPassword::Inline("hunter2".into());
        assert!(!format!("{p:?}").contains("hunter2"));
    }
}
