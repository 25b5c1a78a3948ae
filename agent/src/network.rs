//! A lease's network: its own bridge, the egress policy its machine declares, and the ports it
//! publishes.
//!
//! Each lease that may reach anything, or publishes a port, gets a bridge network of its own
//! (`gm-<lease>`, IPv4 only, no traffic between its containers), guarded by the agent's
//! firewall (`crate::firewall`); others run with no network at all. The network carries its
//! policy as a label, so that the firewall's guard re-asserts it after an agent restart, and a
//! lease under `none` or an allow-list is given DNS servers its firewall governs. The iptables
//! command is the same tool Docker itself drives; a host without it, or an agent without
//! `CAP_NET_ADMIN`, cannot start a lease with network (the lease ends with the reason).

use std::collections::{BTreeSet, HashMap};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use bollard::errors::Error as BollardError;
use bollard::models::{Ipam, IpamConfig, NetworkCreateRequest, PortBinding, PortMap};
use bollard::query_parameters::{
    InspectNetworkOptions, ListContainersOptions, ListNetworksOptions,
};
use gpu_market_sdk::api::PortMapping;

use crate::chain::{EgressView, Gang, Key};
use crate::docker::DockerEngine;
use crate::firewall::{self, FirewallError, LeasePolicy, Repairs};
use crate::netfilter::RuleChanges;
use crate::runtime::{ContainerRuntime, RuntimeError, LABEL_MANAGED};

/// What a lease's container gets of the network.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseNetwork {
    /// The machine's egress policy.
    pub egress: EgressView,
    /// Container ports (TCP) to publish on the host.
    pub ports: Vec<u16>,
    /// The other machines of its gang that it must reach (its first part's, for the
    /// rendezvous): open whatever the machine's policy, as their IPv4 addresses when the
    /// network is made.
    pub peers: Vec<Peer>,
}

/// A gang peer's machine: its public address (a name or an IPv4 address), and for the first
/// part's, the host port of its rendezvous there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub host: String,
    pub rendezvous_port: Option<u16>,
}

impl LeaseNetwork {
    /// Whether the lease needs a bridge at all (else it runs with no network).
    pub fn bridged(&self) -> bool {
        self.egress != EgressView::None || !self.ports.is_empty() || !self.peers.is_empty()
    }
}

/// The machines a gang's part reaches whatever its machine's egress policy: every other part's
/// (the first's at its rendezvous port).
pub fn gang_peers(gang: &Gang) -> Vec<Peer> {
    gang.hosts
        .iter()
        .enumerate()
        .filter(|&(part, host)| part != usize::from(gang.part) && !host.is_empty())
        .map(|(part, host)| Peer {
            host: host.clone(),
            rendezvous_port: (part == 0).then(|| gang.master_port()),
        })
        .collect()
}

/// The IPv4 addresses of `peers`, each with its rendezvous port if it has one (names are
/// looked up; one that does not resolve is left out, and logged: its part is then unreachable,
/// as it would be without this).
async fn resolve(peers: &[Peer]) -> Vec<(Ipv4Addr, Option<u16>)> {
    let mut out = Vec::new();
    for peer in peers {
        let host = peer.host.as_str();
        match tokio::net::lookup_host((host, 0)).await {
            Ok(addrs) => out.extend(addrs.filter_map(|a| match a.ip() {
                std::net::IpAddr::V4(ip) => Some((ip, peer.rendezvous_port)),
                std::net::IpAddr::V6(_) => None,
            })),
            Err(e) => tracing::warn!(%host, error = %e, "a gang peer's address does not resolve"),
        }
    }
    out.sort();
    out.dedup();
    out
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

/// Where leases' bridge subnets come from: one `/29` each (the gateway, the container, and room
/// for the engine's own), carved from a block of the agent's rather than the engine's default
/// address pools, which hold about 30 bridges (`[network] lease_pool`; 8,192 leases in the
/// default `/16`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeasePool {
    pub network: Ipv4Addr,
    pub prefix: u8,
}

/// The prefix length of each lease's subnet.
pub const LEASE_PREFIX: u8 = 29;

impl Default for LeasePool {
    fn default() -> Self {
        LeasePool {
            network: Ipv4Addr::new(10, 213, 0, 0),
            prefix: 16,
        }
    }
}

impl LeasePool {
    /// A lease subnet of the pool that overlaps none of `used` (address, prefix): the free one
    /// after `skip` others (the last free one where fewer are free).
    pub fn free_subnet(&self, used: &[(Ipv4Addr, u8)], skip: usize) -> Option<Ipv4Addr> {
        let span = |(a, p): (Ipv4Addr, u8)| {
            let size = 1u64 << (32 - u32::from(p.min(32)));
            let start = u64::from(u32::from(a)) & !(size - 1);
            (start, start + size)
        };
        let (first, end) = span((self.network, self.prefix));
        let step = 1u64 << (32 - LEASE_PREFIX);
        let used: Vec<(u64, u64)> = used.iter().map(|&u| span(u)).collect();
        (first..end)
            .step_by(step as usize)
            .filter(|&s| used.iter().all(|&(a, b)| s + step <= a || b <= s))
            .take(skip + 1)
            .last()
            .map(|s| Ipv4Addr::from(s as u32))
    }
}

/// How many free subnets attempt `attempt` at making `lease`'s network passes over: none the
/// first time, then up to 63, as the lease's key says.
fn spread(lease: &Key, attempt: usize) -> usize {
    match attempt {
        0 => 0,
        n => usize::from(lease.0[n % lease.0.len()]) % 64,
    }
}

/// The subnets (address, prefix) an engine's network list holds.
fn subnets_of(networks: &[bollard::models::Network]) -> Vec<(Ipv4Addr, u8)> {
    networks
        .iter()
        .filter_map(|n| n.ipam.as_ref()?.config.as_ref())
        .flatten()
        .filter_map(|c| {
            let (a, p) = c.subnet.as_deref()?.split_once('/')?;
            Some((a.parse().ok()?, p.parse().ok()?))
        })
        .collect()
}

/// The label on a lease network naming its firewall policy (`firewall::policy_label`).
pub const LABEL_EGRESS: &str = "io.gpu-market.egress";

/// The engine's option naming a bridge network's Linux bridge.
const BRIDGE_OPTION: &str = "com.docker.network.bridge.name";

/// How long a lease network no container uses is kept before the guard removes it.
pub const ORPHAN_GRACE: Duration = Duration::from_secs(300);

/// Runs a firewall change on a blocking thread, off the runtime's.
async fn off_thread<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, FirewallError> + Send + 'static,
) -> Result<T, RuntimeError> {
    crate::off_runtime(f).await.map_err(RuntimeError::Firewall)
}

/// The firewall's guard for as long as the agent runs: a [`DockerEngine::guard_pass`] as soon
/// as the host's rules change ([`RuleChanges`]: a firewall reload, the engine's restart,
/// anyone's `iptables`), once they have settled for [`SETTLE`], and every
/// [`firewall::GUARD_PERIOD`] regardless (the only trigger on hosts with legacy `iptables`,
/// which announce nothing). What it repairs is logged, and so is a pass that failed.
pub async fn guard(engine: std::sync::Arc<DockerEngine>) {
    let mut changes = RuleChanges::listen()
        .inspect_err(|e| {
            tracing::warn!(
                error = %e,
                period_s = firewall::GUARD_PERIOD.as_secs(),
                "firewall: the host announces no rule changes (legacy iptables?): the guard \
                 re-asserts the lease rules periodically only"
            )
        })
        .ok();
    let mut orphans = HashMap::new();
    let mut ticker = tokio::time::interval(firewall::GUARD_PERIOD);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            changed = next_change(changes.as_mut()) => match changed {
                Ok(()) => {
                    tokio::time::sleep(SETTLE).await;
                    changes.as_mut().map(RuleChanges::seen);
                }
                Err(e) => {
                    tracing::warn!(error = %e, "firewall: rule announcements stopped: periodic guard only");
                    changes = None;
                }
            },
        }
        match engine.guard_pass(&mut orphans).await {
            Ok(r) if r.any() => tracing::warn!(
                order = r.order,
                leases = r.leases,
                swept = r.swept,
                networks = r.networks,
                "firewall: rules or networks repaired"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "firewall: the guard's pass failed"),
        }
    }
}

/// How long the guard lets a burst of rule changes (a reload is hundreds) settle before it
/// re-asserts: one pass answers the burst, and bursts cost at most a pass each this often.
pub const SETTLE: Duration = Duration::from_millis(250);

/// The next announced rule change; never, where there are no announcements.
async fn next_change(
    changes: Option<&mut RuleChanges>,
) -> Result<(), tokio::sync::watch::error::RecvError> {
    match changes {
        Some(c) => c.changed().await,
        None => std::future::pending().await,
    }
}

/// The engine network of `lease`.
pub fn network_name(lease: &Key) -> String {
    format!("{NETWORK_PREFIX}{lease}")
}

/// The Linux bridge of `lease`'s network (interface names have at most 15 bytes).
pub fn bridge_name(lease: &Key) -> String {
    let text = lease.to_string();
    format!("gm{}", &text[..12.min(text.len())])
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
    /// Creates `lease`'s bridge network with its firewall (an existing one is reused when it
    /// carries the same policy); returns its name for the container's network mode.
    pub(crate) async fn lease_network(
        &self,
        lease: &Key,
        net: &LeaseNetwork,
    ) -> Result<String, RuntimeError> {
        let name = network_name(lease);
        let bridge = bridge_name(lease);
        let policy = self.lease_policy(net).await?;
        let label = firewall::policy_label(&policy);
        let mut request = NetworkCreateRequest {
            name: name.clone(),
            driver: Some("bridge".to_string()),
            enable_ipv6: Some(false),
            options: Some(HashMap::from([
                (BRIDGE_OPTION.to_string(), bridge.clone()),
                (
                    "com.docker.network.bridge.enable_icc".to_string(),
                    "false".to_string(),
                ),
            ])),
            labels: Some(HashMap::from([
                (LABEL_MANAGED.to_string(), self.scope().to_string()),
                (LABEL_EGRESS.to_string(), label.clone()),
            ])),
            ..Default::default()
        };
        // An existing one (a restart before its container was made) is reused if its policy
        // is the lease's: the guard re-asserts the policy its label names.
        let existing = self
            .docker
            .inspect_network(&name, None::<InspectNetworkOptions>)
            .await
            .ok()
            .map(|n| n.labels.unwrap_or_default().get(LABEL_EGRESS) == Some(&label));
        if existing == Some(false) {
            self.remove_lease_network(lease).await?;
        }
        if existing != Some(true) {
            // Another engine handle may take the same subnet between the listing and the
            // creation: the engine refuses the overlap, and a free one is tried again, the
            // first the first time, then one further on that the lease's own key picks (so
            // that several networks made at once stop picking the same one).
            let mut attempt = 0;
            loop {
                let networks = self
                    .docker
                    .list_networks(None::<ListNetworksOptions>)
                    .await
                    .map_err(|source| RuntimeError::Engine {
                        op: "network list",
                        source,
                    })?;
                let subnet = self
                    .pool
                    .free_subnet(&subnets_of(&networks), spread(lease, attempt))
                    .ok_or(RuntimeError::NoFreeSubnet(self.pool))?;
                request.ipam = Some(Ipam {
                    config: Some(vec![IpamConfig {
                        subnet: Some(format!("{subnet}/{LEASE_PREFIX}")),
                        ..Default::default()
                    }]),
                    ..Default::default()
                });
                match self.docker.create_network(request.clone()).await {
                    Ok(_) => break,
                    Err(_) if attempt < 8 => attempt += 1,
                    Err(source) => {
                        return Err(RuntimeError::Engine {
                            op: "network create",
                            source,
                        })
                    }
                }
            }
        }
        off_thread(move || firewall::install(&bridge, &policy)).await?;
        Ok(name)
    }

    /// The firewall policy of a lease network: its machine's egress policy, its gang's peers,
    /// and those of their rendezvous ports that this host's engine publishes itself (two
    /// machines of a gang on one host: the lease reaches the other part through the engine's
    /// proxy on the host, and only there).
    async fn lease_policy(&self, net: &LeaseNetwork) -> Result<LeasePolicy, RuntimeError> {
        let resolved = resolve(&net.peers).await;
        let mut peers: Vec<Ipv4Addr> = resolved.iter().map(|(ip, _)| *ip).collect();
        peers.dedup();
        let rendezvous: Vec<SocketAddrV4> = resolved
            .iter()
            .filter_map(|&(ip, port)| Some(SocketAddrV4::new(ip, port?)))
            .collect();
        let local_rendezvous = if rendezvous.is_empty() {
            Vec::new()
        } else {
            let published = self.published_addresses().await?;
            rendezvous
                .into_iter()
                .filter(|at| {
                    published.contains(at)
                        || published.contains(&SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, at.port()))
                })
                .collect()
        };
        Ok(LeasePolicy {
            egress: net.egress.clone(),
            peers,
            local_rendezvous,
        })
    }

    /// The IPv4 addresses and TCP ports the engine's running containers are published on.
    async fn published_addresses(&self) -> Result<BTreeSet<SocketAddrV4>, RuntimeError> {
        let containers = self
            .docker
            .list_containers(None::<ListContainersOptions>)
            .await
            .map_err(|source| RuntimeError::Engine { op: "list", source })?;
        Ok(containers
            .iter()
            .flat_map(|c| c.ports.iter().flatten())
            .filter(|p| p.typ == Some(bollard::models::PortSummaryTypeEnum::TCP))
            .filter_map(|p| {
                let ip = p.ip.as_deref()?.parse().ok()?;
                Some(SocketAddrV4::new(ip, p.public_port?))
            })
            .collect())
    }

    /// Removes `lease`'s network and its firewall rules, if it has them.
    pub(crate) async fn remove_lease_network(&self, lease: &Key) -> Result<(), RuntimeError> {
        let bridge = bridge_name(lease);
        off_thread(move || firewall::uninstall(&bridge)).await?;
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

    /// One pass of the firewall's guard: re-asserts the rules of every lease network of this
    /// engine handle's scope for the policy its label names, sweeps the rules of bridges no
    /// network of the engine has (nor any interface of the host), and removes this scope's
    /// lease networks that no container of the scope uses and that `orphans` has seen unused
    /// for [`ORPHAN_GRACE`] (a network is made just before its container; a creation that
    /// failed, or an agent killed between the two, left it).
    pub async fn guard_pass(
        &self,
        orphans: &mut HashMap<String, Instant>,
    ) -> Result<Repairs, RuntimeError> {
        let engine = |op| move |source| RuntimeError::Engine { op, source };
        let networks = self
            .docker
            .list_networks(None::<ListNetworksOptions>)
            .await
            .map_err(engine("network list"))?;
        let scope = self.scope().to_string();
        let mut bridges = BTreeSet::new();
        let mut leases = Vec::new();
        let mut ours = Vec::new();
        for n in &networks {
            let Some(bridge) = n.options.as_ref().and_then(|o| o.get(BRIDGE_OPTION)) else {
                continue;
            };
            bridges.insert(bridge.clone());
            let labels = n.labels.clone().unwrap_or_default();
            if labels.get(LABEL_MANAGED) != Some(&scope) {
                continue;
            }
            if let Some(policy) = labels
                .get(LABEL_EGRESS)
                .and_then(|l| firewall::parse_policy_label(l))
            {
                leases.push((bridge.clone(), policy));
            }
            if let Some(name) = n.name.as_ref().filter(|n| n.starts_with(NETWORK_PREFIX)) {
                ours.push(name.clone());
            }
        }
        let mut repairs = off_thread(move || {
            firewall::assert(&leases, |b| {
                bridges.contains(b) || std::path::Path::new("/sys/class/net").join(b).exists()
            })
        })
        .await?;
        let used: BTreeSet<String> = self
            .managed()
            .await?
            .iter()
            .filter_map(|c| c.lease.as_ref().map(network_name))
            .collect();
        let now = Instant::now();
        orphans.retain(|name, _| ours.contains(name) && !used.contains(name));
        for name in ours.iter().filter(|n| !used.contains(*n)) {
            let since = *orphans.entry(name.clone()).or_insert(now);
            if now.duration_since(since) < ORPHAN_GRACE {
                continue;
            }
            let lease: Option<Key> = name
                .strip_prefix(NETWORK_PREFIX)
                .and_then(|k| k.parse().ok());
            if let Some(lease) = lease {
                self.remove_lease_network(&lease).await?;
                orphans.remove(name);
                repairs.networks += 1;
            }
        }
        Ok(repairs)
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
    fn lease_subnets_are_the_pools_first_29s_that_nothing_overlaps() {
        let pool = LeasePool::default();
        let a = |s: &str| s.parse::<Ipv4Addr>().unwrap();
        assert_eq!(pool.free_subnet(&[], 0), Some(a("10.213.0.0")));
        // A retry passes over some free ones; past the last, the last free one.
        assert_eq!(pool.free_subnet(&[], 3), Some(a("10.213.0.24")));
        let used = [
            (a("10.213.0.0"), 29),
            (a("10.213.0.8"), 29),
            (a("172.17.0.0"), 16),
        ];
        assert_eq!(pool.free_subnet(&used, 0), Some(a("10.213.0.16")));
        assert_eq!(pool.free_subnet(&used, 1), Some(a("10.213.0.24")));
        // A wider network overlapping the pool's start (an operator's, or the engine's).
        assert_eq!(
            pool.free_subnet(&[(a("10.213.0.0"), 24)], 0),
            Some(a("10.213.1.0"))
        );
        assert_eq!(pool.free_subnet(&[(a("10.0.0.0"), 8)], 5), None);
        let one = LeasePool {
            network: a("192.0.2.64"),
            prefix: 29,
        };
        assert_eq!(one.free_subnet(&[], 7), Some(a("192.0.2.64")));
        assert_eq!(one.free_subnet(&[(a("192.0.2.64"), 29)], 0), None);
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
    fn every_part_of_a_gang_reaches_every_other_and_the_first_at_its_rendezvous() {
        let gang = Gang {
            part: 1,
            parts: 4,
            hosts: ["a.example", "b.example", "", "d.example"]
                .map(String::from)
                .to_vec(),
            port: 29_500,
            rendezvous: Some(31_007),
        };
        let peer = |host: &str, port| Peer {
            host: host.into(),
            rendezvous_port: port,
        };
        // Not itself, not a part whose lease is gone; the first at the port it published.
        assert_eq!(
            gang_peers(&gang),
            vec![peer("a.example", Some(31_007)), peer("d.example", None)]
        );
        let first = Gang { part: 0, ..gang };
        assert_eq!(
            gang_peers(&first),
            vec![peer("b.example", None), peer("d.example", None)]
        );
    }
}
