//! A lease's network: its own bridge, the egress policy its machine declares, and the ports it
//! publishes.
//!
//! Each lease that may reach anything, or publishes a port, gets a bridge network of its own
//! (`gm-<lease>`); others run with no network at all. The agent's firewall (iptables, in two
//! chains of its own that the host's `INPUT` and `FORWARD` chains jump to first) then holds, for
//! every lease bridge, whatever the policy:
//! - nothing from the bridge reaches the host itself (its agent API, `/metrics`, an engine on
//!   TCP, SSH): only answers to connections the host opened (published ports) come back;
//! - nothing reaches link-local addresses (cloud metadata at 169.254.169.254), private, shared
//!   or loopback ranges (the host's LAN, other leases' bridges, other Docker networks), unless
//!   the machine's allow-list names them;
//! - with egress `none` no connection leaves at all; with an allow-list only to its networks;
//!   with `open` to any other (public) address.
//!
//! The rules only drop or return: what Docker's own chains decide afterwards still applies. The
//! iptables command is the same tool Docker itself drives; a host without it, or an agent
//! without `CAP_NET_ADMIN`, cannot start a lease with network (the lease ends with the reason).

use std::collections::{BTreeSet, HashMap};
use std::net::Ipv4Addr;
use std::process::Command;

use bollard::errors::Error as BollardError;
use bollard::models::{NetworkCreateRequest, PortBinding, PortMap};
use bollard::query_parameters::{InspectNetworkOptions, ListContainersOptions};
use gpu_market_sdk::api::PortMapping;

use crate::chain::{EgressView, Key};
use crate::docker::DockerEngine;
use crate::runtime::RuntimeError;

/// The agent's chain that the host's `INPUT` chain jumps to first.
pub const INPUT_CHAIN: &str = "GPU-MARKET-INPUT";
/// The agent's chain that the host's `FORWARD` chain jumps to first.
pub const FORWARD_CHAIN: &str = "GPU-MARKET-FORWARD";

/// Ranges a lease never reaches unless the allow-list names them: link-local (cloud metadata)
/// first, then private, shared (CGNAT), loopback, "this network" and multicast.
const CLOSED: [&str; 8] = [
    "169.254.0.0/16",
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "0.0.0.0/8",
    "224.0.0.0/4",
];

/// What a lease's container gets of the network.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseNetwork {
    /// The machine's egress policy.
    pub egress: EgressView,
    /// Container ports (TCP) to publish on the host.
    pub ports: Vec<u16>,
}

impl LeaseNetwork {
    /// Whether the lease needs a bridge at all (else it runs with no network).
    pub fn bridged(&self) -> bool {
        self.egress != EgressView::None || !self.ports.is_empty()
    }
}

/// The host ports published leases' ports are taken from, and the address they listen on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Publishing {
    pub first: u16,
    pub last: u16,
    pub ip: Ipv4Addr,
}

impl Publishing {
    /// `count` ports of the range that `used` does not hold, lowest first.
    pub fn free_ports(&self, used: &BTreeSet<u16>, count: usize) -> Option<Vec<u16>> {
        let free: Vec<u16> = (self.first..=self.last)
            .filter(|p| !used.contains(p))
            .take(count)
            .collect();
        (free.len() == count).then_some(free)
    }

    /// Whether `port` is one this agent may publish on.
    pub fn contains(&self, port: u16) -> bool {
        (self.first..=self.last).contains(&port)
    }
}

/// What every lease network's name starts with.
pub const NETWORK_PREFIX: &str = "gm-";

/// The engine network of `lease`.
pub fn network_name(lease: &Key) -> String {
    format!("{NETWORK_PREFIX}{lease}")
}

/// The Linux bridge of `lease`'s network (interface names have at most 15 bytes).
pub fn bridge_name(lease: &Key) -> String {
    let text = lease.to_string();
    format!("gm{}", &text[..12.min(text.len())])
}

#[derive(Debug, thiserror::Error)]
pub enum FirewallError {
    #[error(
        "cannot run iptables (the agent needs it and CAP_NET_ADMIN for leases with network): {0}"
    )]
    Spawn(std::io::Error),
    #[error("iptables {args} failed: {stderr}")]
    Refused { args: String, stderr: String },
}

fn iptables(args: &[&str]) -> Result<(), FirewallError> {
    let out = Command::new("iptables")
        .arg("-w")
        .args(args)
        .output()
        .map_err(FirewallError::Spawn)?;
    if out.status.success() {
        return Ok(());
    }
    Err(FirewallError::Refused {
        args: args.join(" "),
        stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
    })
}

fn iptables_ok(args: &[&str]) -> bool {
    iptables(args).is_ok()
}

/// The rules of one lease bridge, in order, for `chain`.
fn rules(bridge: &str, egress: &EgressView) -> Vec<(&'static str, Vec<String>)> {
    let from = |rest: &[&str]| {
        let mut r = vec!["-i".to_string(), bridge.to_string()];
        r.extend(rest.iter().map(|s| s.to_string()));
        r
    };
    // Answers to connections the host or the lease opened come back, whatever follows.
    let established = from(&[
        "-m",
        "conntrack",
        "--ctstate",
        "ESTABLISHED,RELATED",
        "-j",
        "RETURN",
    ]);
    let mut out = vec![
        (INPUT_CHAIN, established.clone()),
        (INPUT_CHAIN, from(&["-j", "DROP"])),
        (FORWARD_CHAIN, established),
        // Metadata before any allow-list entry: no policy opens it.
        (FORWARD_CHAIN, from(&["-d", CLOSED[0], "-j", "DROP"])),
    ];
    let allowed: Vec<String> = match egress {
        EgressView::AllowList(list) => list.iter().map(|(a, p)| format!("{a}/{p}")).collect(),
        _ => Vec::new(),
    };
    for net in &allowed {
        out.push((FORWARD_CHAIN, from(&["-d", net, "-j", "RETURN"])));
    }
    for net in &CLOSED[1..] {
        out.push((FORWARD_CHAIN, from(&["-d", net, "-j", "DROP"])));
    }
    let last = match egress {
        EgressView::Open => "RETURN",
        EgressView::None | EgressView::AllowList(_) => "DROP",
    };
    out.push((FORWARD_CHAIN, from(&["-j", last])));
    out
}

/// The agent's chains exist and the host's chains jump to them first.
fn ensure_chains() -> Result<(), FirewallError> {
    for (chain, parent) in [(INPUT_CHAIN, "INPUT"), (FORWARD_CHAIN, "FORWARD")] {
        if !iptables_ok(&["-n", "-L", chain]) {
            iptables(&["-N", chain])?;
        }
        if !iptables_ok(&["-C", parent, "-j", chain]) {
            iptables(&["-I", parent, "1", "-j", chain])?;
        }
    }
    Ok(())
}

/// Installs the rules of `bridge` for `egress` (replacing any it had).
pub fn install(bridge: &str, egress: &EgressView) -> Result<(), FirewallError> {
    ensure_chains()?;
    uninstall(bridge)?;
    for (chain, rule) in rules(bridge, egress) {
        let mut args = vec!["-A", chain];
        args.extend(rule.iter().map(String::as_str));
        iptables(&args)?;
    }
    Ok(())
}

/// Removes every rule of `bridge` from the agent's chains, whatever policy installed them.
pub fn uninstall(bridge: &str) -> Result<(), FirewallError> {
    let mine = format!("-i {bridge} ");
    for chain in [INPUT_CHAIN, FORWARD_CHAIN] {
        let out = Command::new("iptables")
            .args(["-w", "-S", chain])
            .output()
            .map_err(FirewallError::Spawn)?;
        // No chain yet: no rule either.
        if !out.status.success() {
            continue;
        }
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            if let Some(rule) = line.strip_prefix(&format!("-A {chain} ")) {
                if format!("{rule} ").contains(&mine) {
                    let mut args = vec!["-D", chain];
                    args.extend(rule.split_whitespace());
                    iptables(&args)?;
                }
            }
        }
    }
    Ok(())
}

/// The host ports of an inspected container's port map (`"8080/tcp"` → its bindings), once
/// each however many addresses they are bound on (IPv4 and IPv6).
pub fn published_ports(ports: &PortMap) -> Vec<PortMapping> {
    let mut mappings = BTreeSet::new();
    for (key, bindings) in ports {
        let (port, protocol) = key.split_once('/').unwrap_or((key, "tcp"));
        let Ok(container_port) = port.parse() else {
            continue;
        };
        for binding in bindings.iter().flatten() {
            if let Some(host_port) = binding.host_port.as_deref().and_then(|p| p.parse().ok()) {
                mappings.insert(PortMapping {
                    container_port,
                    host_port,
                    protocol: protocol.to_string(),
                });
            }
        }
    }
    mappings.into_iter().collect()
}

impl DockerEngine {
    /// Creates `lease`'s bridge network with its firewall (an existing one is reused); returns
    /// its name for the container's network mode.
    pub(crate) async fn lease_network(
        &self,
        lease: &Key,
        net: &LeaseNetwork,
    ) -> Result<String, RuntimeError> {
        let name = network_name(lease);
        let bridge = bridge_name(lease);
        let request = NetworkCreateRequest {
            name: name.clone(),
            driver: Some("bridge".to_string()),
            options: Some(HashMap::from([
                ("com.docker.network.bridge.name".to_string(), bridge.clone()),
                (
                    "com.docker.network.bridge.enable_icc".to_string(),
                    "false".to_string(),
                ),
            ])),
            labels: Some(HashMap::from([(
                crate::runtime::LABEL_MANAGED.to_string(),
                self.scope().to_string(),
            )])),
            ..Default::default()
        };
        // An existing one (a restart before its container was made) is reused.
        let exists = self
            .docker
            .inspect_network(&name, None::<InspectNetworkOptions>)
            .await
            .is_ok();
        if !exists {
            self.docker
                .create_network(request)
                .await
                .map_err(|source| RuntimeError::Engine {
                    op: "network create",
                    source,
                })?;
        }
        install(&bridge, &net.egress).map_err(RuntimeError::Firewall)?;
        Ok(name)
    }

    /// Removes `lease`'s network and its firewall rules, if it has them.
    pub(crate) async fn remove_lease_network(&self, lease: &Key) -> Result<(), RuntimeError> {
        uninstall(&bridge_name(lease)).map_err(RuntimeError::Firewall)?;
        match self.docker.remove_network(&network_name(lease)).await {
            Ok(())
            | Err(BollardError::DockerResponseServerError {
                status_code: 404, ..
            }) => Ok(()),
            Err(source) => Err(RuntimeError::Engine {
                op: "network remove",
                source,
            }),
        }
    }

    /// Host ports for `ports` from the publishing range, none of which a container of the
    /// engine publishes now or was given by the agent (a container created, not started yet,
    /// publishes nothing: `LABEL_HOST_PORTS`), bound on the range's address.
    pub(crate) async fn port_bindings(
        &self,
        publishing: &Publishing,
        ports: &[u16],
    ) -> Result<HashMap<String, Option<Vec<PortBinding>>>, RuntimeError> {
        let options = ListContainersOptions {
            all: true,
            ..Default::default()
        };
        let used: BTreeSet<u16> = self
            .docker
            .list_containers(Some(options))
            .await
            .map_err(|source| RuntimeError::Engine { op: "list", source })?
            .iter()
            .flat_map(|c| {
                let published = c.ports.iter().flatten().filter_map(|p| p.public_port);
                let given = c
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(crate::runtime::LABEL_HOST_PORTS))
                    .into_iter()
                    .flat_map(|v| v.split(','))
                    .filter_map(|p| p.parse().ok());
                published.chain(given).collect::<Vec<u16>>()
            })
            .collect();
        let host = publishing
            .free_ports(&used, ports.len())
            .ok_or(RuntimeError::NoFreePort {
                first: publishing.first,
                last: publishing.last,
            })?;
        Ok(ports
            .iter()
            .zip(host)
            .map(|(c, h)| {
                let binding = PortBinding {
                    host_ip: Some(publishing.ip.to_string()),
                    host_port: Some(h.to_string()),
                };
                (format!("{c}/tcp"), Some(vec![binding]))
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding(ip: &str, port: &str) -> PortBinding {
        PortBinding {
            host_ip: Some(ip.into()),
            host_port: Some(port.into()),
        }
    }

    #[test]
    fn published_ports_are_listed_once_per_mapping_in_order() {
        let ports = PortMap::from([
            (
                "8080/tcp".to_string(),
                Some(vec![binding("0.0.0.0", "30001"), binding("::", "30001")]),
            ),
            (
                "22/tcp".to_string(),
                Some(vec![binding("0.0.0.0", "30000")]),
            ),
            // Exposed, not published.
            ("9000/tcp".to_string(), None),
        ]);
        let mapping = |container_port, host_port| PortMapping {
            container_port,
            host_port,
            protocol: "tcp".into(),
        };
        assert_eq!(
            published_ports(&ports),
            vec![mapping(22, 30000), mapping(8080, 30001)]
        );
    }

    #[test]
    fn free_ports_come_from_the_range_and_skip_used_ones() {
        let p = Publishing {
            first: 30_000,
            last: 30_003,
            ip: Ipv4Addr::UNSPECIFIED,
        };
        let used = BTreeSet::from([30_000, 30_002]);
        assert_eq!(p.free_ports(&used, 2), Some(vec![30_001, 30_003]));
        assert_eq!(p.free_ports(&used, 3), None);
        assert!(p.contains(30_003) && !p.contains(30_004) && !p.contains(29_999));
    }

    #[test]
    fn metadata_is_dropped_before_any_allow_list_entry_and_the_policy_decides_last() {
        let allow = EgressView::AllowList(vec![(Ipv4Addr::new(169, 254, 0, 0), 16)]);
        let r = rules("gmX", &allow);
        let forward: Vec<String> = r
            .iter()
            .filter(|(c, _)| *c == FORWARD_CHAIN)
            .map(|(_, rule)| rule.join(" "))
            .collect();
        let metadata = forward
            .iter()
            .position(|x| x.contains("169.254.0.0/16 -j DROP"))
            .unwrap();
        let allowed = forward
            .iter()
            .position(|x| x.contains("169.254.0.0/16 -j RETURN"))
            .unwrap();
        assert!(metadata < allowed);
        assert_eq!(forward.last().unwrap(), "-i gmX -j DROP");
        let open = rules("gmX", &EgressView::Open);
        assert_eq!(open.last().unwrap().1.join(" "), "-i gmX -j RETURN");
        let input: Vec<String> = open
            .iter()
            .filter(|(c, _)| *c == INPUT_CHAIN)
            .map(|(_, rule)| rule.join(" "))
            .collect();
        assert_eq!(input.last().unwrap(), "-i gmX -j DROP");
    }
}
