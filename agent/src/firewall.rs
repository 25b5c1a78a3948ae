//! The lease firewall: iptables and ip6tables rules of the agent's own, for every lease bridge.
//!
//! Where they sit. The host's `INPUT` chain jumps to [`INPUT_CHAIN`] first. Forwarded traffic
//! goes through the engine's documented hook for user rules, [`USER_CHAIN`] (`DOCKER-USER`):
//! Docker evaluates it before any rule of its own in `FORWARD` and puts its jump back first
//! whenever it rewrites its rules (a restart, a new network). Its per-bridge `ACCEPT` rules,
//! inserted above anything else in `FORWARD`, would otherwise decide before the agent's (they
//! did: with the engine's iptables management on, a lease under `egress none` reached the
//! internet and the metadata address). `DOCKER-USER` then jumps to [`FORWARD_CHAIN`] first.
//! Where the engine manages no iptables, the agent makes the same path itself.
//!
//! What they hold, for each lease bridge, whatever the policy:
//! - nothing from the bridge reaches the host itself (its agent API, `/metrics`, an engine on
//!   TCP, SSH): only answers to connections the host opened (published ports) come back;
//! - nothing reaches link-local addresses (cloud metadata at 169.254.169.254), private, shared
//!   or loopback ranges (the host's LAN, other leases' bridges, other Docker networks), unless
//!   the machine's allow-list names them;
//! - with egress `none` no connection leaves at all; with an allow-list only to its networks;
//!   with `open` to any other (public) address;
//! - no IPv6 at all: lease networks are IPv4 only, and every IPv6 packet from a lease bridge is
//!   dropped (the host's services listening on `::` are not reachable over link-local);
//! - a gang part reaches its first part's machine whatever the policy: its address in `FORWARD`
//!   (another host), and, where the engine of this host publishes the first part's rendezvous
//!   port itself (both machines on one host), that one TCP port through `INPUT`, where the
//!   engine's proxy answers for containers on other bridges ([`LeasePolicy`]).
//!
//! The rules only drop or return: what Docker's own chains decide afterwards still applies.
//! They are written in one `iptables-restore --noflush` transaction per change, so a lease is
//! never half-guarded. Rules can be lost (a host firewall reload) or outranked (the engine's
//! restart), so [`guard`] re-asserts the order and each lease's rules as soon as the kernel
//! announces a rule change ([`crate::netfilter`]) and every [`GUARD_PERIOD`], and sweeps the
//! rules of bridges that no longer exist.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use rustix::process::{kill_process, Pid, Signal};

use crate::chain::EgressView;

/// The agent's chain that the host's `INPUT` chain jumps to first.
pub const INPUT_CHAIN: &str = "GPU-MARKET-INPUT";
/// The agent's chain that [`USER_CHAIN`] jumps to first.
pub const FORWARD_CHAIN: &str = "GPU-MARKET-FORWARD";
/// The engine's hook for user rules, evaluated first in `FORWARD`.
pub const USER_CHAIN: &str = "DOCKER-USER";
/// How often [`guard`] re-asserts the rules.
pub const GUARD_PERIOD: Duration = Duration::from_secs(15);

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

#[derive(Debug, thiserror::Error)]
pub enum FirewallError {
    #[error("cannot run {tool} (the agent needs it and CAP_NET_ADMIN for leases with network): {source}")]
    Spawn {
        tool: &'static str,
        source: std::io::Error,
    },
    #[error("{tool} did not finish within {secs} s and was killed")]
    TimedOut { tool: &'static str, secs: u64 },
    #[error("{tool} {args} failed: {stderr}")]
    Refused {
        tool: &'static str,
        args: String,
        stderr: String,
    },
}

/// An address family the firewall guards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    fn tool(self) -> &'static str {
        match self {
            Family::V4 => "iptables",
            Family::V6 => "ip6tables",
        }
    }

    fn restore_tool(self) -> &'static str {
        match self {
            Family::V4 => "iptables-restore",
            Family::V6 => "ip6tables-restore",
        }
    }

    /// The families of this host: IPv6 wherever the kernel has it.
    pub fn present() -> Vec<Family> {
        let mut out = vec![Family::V4];
        if Path::new("/proc/net/if_inet6").exists() {
            out.push(Family::V6);
        }
        out
    }
}

/// How long iptables waits for the xtables lock another program holds (`-w`), in seconds.
const LOCK_WAIT: &str = "5";

/// How long one firewall command may run, its wait for the lock included: a command that
/// hangs (a stuck netlink call) is killed and reported, so that no firewall change holds a
/// thread of the agent for good.
pub const COMMAND_LIMIT: Duration = Duration::from_secs(15);

fn run(family: Family, args: &[&str]) -> Result<String, FirewallError> {
    let tool = family.tool();
    let mut command = Command::new(tool);
    command.args(["-w", LOCK_WAIT]).args(args);
    let out = output_within(tool, command, None, COMMAND_LIMIT)?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    Err(FirewallError::Refused {
        tool,
        args: args.join(" "),
        stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
    })
}

/// Applies `lines` (`-A`, `-D`, `-I` commands of the filter table) in one transaction.
fn restore(family: Family, lines: &[String]) -> Result<(), FirewallError> {
    if lines.is_empty() {
        return Ok(());
    }
    let tool = family.restore_tool();
    let mut command = Command::new(tool);
    command.args(["-w", LOCK_WAIT, "--noflush"]);
    let script = format!("*filter\n{}\nCOMMIT\n", lines.join("\n"));
    let out = output_within(
        tool,
        command,
        Some(script.clone().into_bytes()),
        COMMAND_LIMIT,
    )?;
    if out.status.success() {
        return Ok(());
    }
    Err(FirewallError::Refused {
        tool,
        args: script,
        stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
    })
}

/// Runs `command` (`tool`) with `input` on its standard input, and its output, unless it runs
/// past `limit`: then it is killed and [`FirewallError::TimedOut`].
fn output_within(
    tool: &'static str,
    mut command: Command,
    input: Option<Vec<u8>>,
    limit: Duration,
) -> Result<Output, FirewallError> {
    let spawn = |source| FirewallError::Spawn { tool, source };
    let mut child = command
        .stdin(match input {
            Some(_) => Stdio::piped(),
            None => Stdio::null(),
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(spawn)?;
    let pid = Pid::from_child(&child);
    let (done, finished) = std::sync::mpsc::channel();
    // The child is waited for (and its input written) on a thread of its own, so that a child
    // that never ends can be killed: until that thread reaps it, its pid stays its own.
    if let (Some(mut stdin), Some(input)) = (child.stdin.take(), input) {
        // Written beside the reads, so that neither pipe fills while the other waits; a child
        // that exits without reading it all says why in its output.
        std::thread::spawn(move || stdin.write_all(&input));
    }
    std::thread::spawn(move || done.send(child.wait_with_output()));
    match finished.recv_timeout(limit) {
        Ok(out) => out.map_err(spawn),
        Err(_) => {
            let _ = kill_process(pid, Signal::KILL);
            Err(FirewallError::TimedOut {
                tool,
                secs: limit.as_secs(),
            })
        }
    }
}

/// The filter table as `iptables -S` lists it: its chains, and each chain's rules in order
/// (whole lines, `-A CHAIN ...`).
#[derive(Debug, Default)]
struct Table {
    chains: BTreeSet<String>,
    rules: BTreeMap<String, Vec<String>>,
}

impl Table {
    fn parse(listing: &str) -> Table {
        let mut t = Table::default();
        for line in listing.lines() {
            let mut words = line.split_whitespace();
            match (words.next(), words.next()) {
                (Some("-P" | "-N"), Some(chain)) => {
                    t.chains.insert(chain.to_string());
                }
                (Some("-A"), Some(chain)) => {
                    t.rules
                        .entry(chain.to_string())
                        .or_default()
                        .push(line.to_string());
                }
                _ => {}
            }
        }
        t
    }

    fn read(family: Family) -> Result<Table, FirewallError> {
        Ok(Table::parse(&run(family, &["-S"])?))
    }

    fn rules(&self, chain: &str) -> &[String] {
        self.rules.get(chain).map_or(&[], Vec::as_slice)
    }

    /// The agent's rules of `bridge`, [`INPUT_CHAIN`]'s then [`FORWARD_CHAIN`]'s.
    fn of_bridge(&self, bridge: &str) -> Vec<String> {
        let mark = format!(" -i {bridge} ");
        [INPUT_CHAIN, FORWARD_CHAIN]
            .iter()
            .flat_map(|c| self.rules(c))
            .filter(|r| format!("{r} ").contains(&mark))
            .cloned()
            .collect()
    }

    /// The bridges the agent's chains hold rules for.
    fn bridges(&self) -> BTreeSet<String> {
        [INPUT_CHAIN, FORWARD_CHAIN]
            .iter()
            .flat_map(|c| self.rules(c))
            .filter_map(|r| {
                let mut words = r.split_whitespace();
                words.find(|w| *w == "-i")?;
                words.next().map(str::to_string)
            })
            .collect()
    }
}

/// An allow-list entry as `iptables -S` prints it: the network's address (host bits cleared)
/// and its prefix; `None` for `/0`, which iptables prints as no address match at all.
fn network(addr: Ipv4Addr, prefix: u8) -> Option<String> {
    let prefix = prefix.min(32);
    if prefix == 0 {
        return None;
    }
    let mask = u32::MAX << (32 - u32::from(prefix));
    Some(format!(
        "{}/{prefix}",
        Ipv4Addr::from(u32::from(addr) & mask)
    ))
}

/// What one lease bridge may reach: its machine's egress policy, and its gang's peers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeasePolicy {
    pub egress: EgressView,
    /// The gang's other machines, each reached whatever `egress` allows (`FORWARD`).
    pub peers: Vec<Ipv4Addr>,
    /// Rendezvous ports that the engine of this very host publishes for a peer (both machines
    /// on one host): the lease reaches the engine's proxy on that address and TCP port
    /// (`INPUT`), and nothing else of the host.
    pub local_rendezvous: Vec<SocketAddrV4>,
}

impl LeasePolicy {
    /// The policy of a lease that is no gang part: its machine's.
    pub fn of(egress: EgressView) -> LeasePolicy {
        LeasePolicy {
            egress,
            ..LeasePolicy::default()
        }
    }
}

/// The rules of one lease bridge, in order, [`INPUT_CHAIN`]'s then [`FORWARD_CHAIN`]'s, as
/// `iptables -S` prints them (so a listing is compared with them line for line).
pub fn rules(family: Family, bridge: &str, policy: &LeasePolicy) -> Vec<String> {
    let rule = |chain: &str, to: Option<&str>, rest: &str| match to {
        Some(net) => format!("-A {chain} -d {net} -i {bridge} {rest}"),
        None => format!("-A {chain} -i {bridge} {rest}"),
    };
    if family == Family::V6 {
        return vec![
            rule(INPUT_CHAIN, None, "-j DROP"),
            rule(FORWARD_CHAIN, None, "-j DROP"),
        ];
    }
    // Answers to connections the host or the lease opened come back, whatever follows.
    let established = "-m conntrack --ctstate RELATED,ESTABLISHED -j RETURN";
    let mut out = vec![rule(INPUT_CHAIN, None, established)];
    for peer in &policy.local_rendezvous {
        out.push(rule(
            INPUT_CHAIN,
            Some(&format!("{}/32", peer.ip())),
            &format!("-p tcp -m tcp --dport {} -j RETURN", peer.port()),
        ));
    }
    out.extend([
        rule(INPUT_CHAIN, None, "-j DROP"),
        rule(FORWARD_CHAIN, None, established),
        // Metadata before any allow-list entry: no policy opens it.
        rule(FORWARD_CHAIN, Some(CLOSED[0]), "-j DROP"),
    ]);
    let egress = with_peers(&policy.egress, &policy.peers);
    if let EgressView::AllowList(list) = &egress {
        for (addr, prefix) in list {
            out.push(rule(
                FORWARD_CHAIN,
                network(*addr, *prefix).as_deref(),
                "-j RETURN",
            ));
        }
    }
    for net in &CLOSED[1..] {
        out.push(rule(FORWARD_CHAIN, Some(net), "-j DROP"));
    }
    let last = match egress {
        EgressView::Open => "-j RETURN",
        EgressView::None | EgressView::AllowList(_) => "-j DROP",
    };
    out.push(rule(FORWARD_CHAIN, None, last));
    out
}

/// `egress` opened to `peers` too (each as a /32): the policy of a gang part's network, which must
/// reach its gang's other machines whatever its own machine allows.
fn with_peers(egress: &EgressView, peers: &[Ipv4Addr]) -> EgressView {
    let peers = peers.iter().map(|ip| (*ip, 32));
    match egress {
        EgressView::Open => EgressView::Open,
        _ if peers.len() == 0 => egress.clone(),
        EgressView::None => EgressView::AllowList(peers.collect()),
        EgressView::AllowList(list) => {
            EgressView::AllowList(list.iter().copied().chain(peers).collect())
        }
    }
}

/// `-A CHAIN rule` as the command that deletes it.
fn deletion(line: &str) -> String {
    format!("-D{}", line.strip_prefix("-A").unwrap_or(line))
}

/// What makes the agent's chains exist and be jumped to first (`INPUT` → [`INPUT_CHAIN`],
/// `FORWARD` → [`USER_CHAIN`] → [`FORWARD_CHAIN`]), given `table`: chains to create, and the
/// commands that put each jump first, once. Empty when all is in place.
fn order(table: &Table) -> (Vec<&'static str>, Vec<String>) {
    let missing = [INPUT_CHAIN, FORWARD_CHAIN, USER_CHAIN]
        .into_iter()
        .filter(|c| !table.chains.contains(*c))
        .collect();
    let mut script = Vec::new();
    for (parent, target) in [
        ("INPUT", INPUT_CHAIN),
        ("FORWARD", USER_CHAIN),
        (USER_CHAIN, FORWARD_CHAIN),
    ] {
        let jump = format!("-A {parent} -j {target}");
        let rules = table.rules(parent);
        let times = rules.iter().filter(|r| **r == jump).count();
        if rules.first() != Some(&jump) || times != 1 {
            script.extend((0..times).map(|_| deletion(&jump)));
            script.push(format!("-I {parent} 1 -j {target}"));
        }
    }
    // Agents before this one jumped from FORWARD to their chain directly.
    let old = format!("-A FORWARD -j {FORWARD_CHAIN}");
    script.extend(
        table
            .rules("FORWARD")
            .iter()
            .filter(|r| **r == old)
            .map(|r| deletion(r)),
    );
    (missing, script)
}

/// Makes the agent's chains exist and be jumped to first; returns the table as it is then,
/// and whether anything had to change.
fn ensure_chains(family: Family) -> Result<(Table, bool), FirewallError> {
    let table = Table::read(family)?;
    let (missing, script) = order(&table);
    if missing.is_empty() && script.is_empty() {
        return Ok((table, false));
    }
    for chain in missing {
        run(family, &["-N", chain])?;
    }
    let table = Table::read(family)?;
    restore(family, &order(&table).1)?;
    Ok((Table::read(family)?, true))
}

/// The commands that make `bridge`'s rules in `table` exactly `want` (none: removed).
fn rewrite(table: &Table, bridge: &str, want: &[String]) -> Vec<String> {
    let have = table.of_bridge(bridge);
    if have == want {
        return Vec::new();
    }
    have.iter()
        .map(|r| deletion(r))
        .chain(want.iter().cloned())
        .collect()
}

/// Installs the rules of `bridge` for `policy` in every family (replacing any it had).
pub fn install(bridge: &str, policy: &LeasePolicy) -> Result<(), FirewallError> {
    for family in Family::present() {
        let (table, _) = ensure_chains(family)?;
        restore(
            family,
            &rewrite(&table, bridge, &rules(family, bridge, policy)),
        )?;
    }
    Ok(())
}

/// Removes every rule of `bridge` from the agent's chains, whatever policy installed them.
pub fn uninstall(bridge: &str) -> Result<(), FirewallError> {
    for family in Family::present() {
        let table = Table::read(family)?;
        restore(family, &rewrite(&table, bridge, &[]))?;
    }
    Ok(())
}

/// What one [`assert`] changed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Repairs {
    /// Chains made or jumps put back first.
    pub order: usize,
    /// Lease bridges whose rules were missing, changed or out of order, written again.
    pub leases: usize,
    /// Bridges gone whose rules were removed.
    pub swept: usize,
    /// Lease networks no container used, removed (`DockerEngine::guard_pass`).
    pub networks: usize,
}

impl Repairs {
    pub fn any(&self) -> bool {
        *self != Repairs::default()
    }
}

/// Re-asserts the firewall in every family: the chains and their jumps first, exactly the
/// rules of each bridge of `leases` for its policy, and no rules for a bridge that `exists`
/// says is gone.
pub fn assert(
    leases: &[(String, LeasePolicy)],
    exists: impl Fn(&str) -> bool,
) -> Result<Repairs, FirewallError> {
    let mut repairs = Repairs::default();
    for family in Family::present() {
        let (table, reordered) = ensure_chains(family)?;
        repairs.order += usize::from(reordered);
        let mut script = Vec::new();
        let mut known = BTreeSet::new();
        for (bridge, policy) in leases {
            known.insert(bridge.as_str());
            let fix = rewrite(&table, bridge, &rules(family, bridge, policy));
            repairs.leases += usize::from(!fix.is_empty());
            script.extend(fix);
        }
        for bridge in table.bridges() {
            if !known.contains(bridge.as_str()) && !exists(&bridge) {
                script.extend(rewrite(&table, &bridge, &[]));
                repairs.swept += 1;
            }
        }
        restore(family, &script)?;
    }
    Ok(repairs)
}

/// The label that keeps a lease network's policy on the network itself, so that the guard
/// re-asserts it after an agent restart: the egress policy (`none`, `open`, `allow:NET,…`),
/// then `;peers:IP,…` and `;rendezvous:IP:PORT,…` where it has them.
pub fn policy_label(policy: &LeasePolicy) -> String {
    let mut label = match &policy.egress {
        EgressView::None => "none".to_string(),
        EgressView::Open => "open".to_string(),
        EgressView::AllowList(list) => {
            let nets: Vec<String> = list.iter().map(|(a, p)| format!("{a}/{p}")).collect();
            format!("allow:{}", nets.join(","))
        }
    };
    let join = |items: Vec<String>| items.join(",");
    if !policy.peers.is_empty() {
        label += &format!(
            ";peers:{}",
            join(policy.peers.iter().map(|p| p.to_string()).collect())
        );
    }
    if !policy.local_rendezvous.is_empty() {
        let at = policy
            .local_rendezvous
            .iter()
            .map(|p| p.to_string())
            .collect();
        label += &format!(";rendezvous:{}", join(at));
    }
    label
}

/// The policy of a [`policy_label`]; `None` for anything else.
pub fn parse_policy_label(text: &str) -> Option<LeasePolicy> {
    let mut parts = text.split(';');
    let egress = match parts.next()? {
        "none" => EgressView::None,
        "open" => EgressView::Open,
        other => {
            let list = other.strip_prefix("allow:")?;
            let nets = items(list)
                .map(|n| {
                    let (a, p) = n.split_once('/')?;
                    Some((a.parse().ok()?, p.parse().ok()?))
                })
                .collect::<Option<Vec<_>>>()?;
            EgressView::AllowList(nets)
        }
    };
    let mut policy = LeasePolicy::of(egress);
    for part in parts {
        if let Some(list) = part.strip_prefix("peers:") {
            policy.peers = items(list).map(|a| a.parse().ok()).collect::<Option<_>>()?;
        } else if let Some(list) = part.strip_prefix("rendezvous:") {
            policy.local_rendezvous = items(list).map(|a| a.parse().ok()).collect::<Option<_>>()?;
        } else {
            return None;
        }
    }
    Some(policy)
}

/// The comma-separated items of a label's list.
fn items(list: &str) -> impl Iterator<Item = &str> {
    list.split(',').filter(|n| !n.is_empty())
}

/// The non-loopback IPv4 resolvers `resolv_conf` names.
fn upstream_resolvers(resolv_conf: &str) -> Vec<String> {
    resolv_conf
        .lines()
        .filter_map(|l| l.trim().strip_prefix("nameserver"))
        .filter_map(|a| a.trim().parse::<Ipv4Addr>().ok())
        .filter(|a| !a.is_loopback() && !a.is_unspecified())
        .map(|a| a.to_string())
        .collect()
}

/// The DNS servers a lease under `egress` is given: none named for `open` (the engine's own);
/// otherwise the host's non-loopback IPv4 resolvers (from `resolv_conf`), or, where it has
/// none, an address that never answers (TEST-NET-1). A loopback resolver would be asked from
/// the host's own namespace by newer engines, past the lease's firewall.
pub fn lease_dns(egress: &EgressView, resolv_conf: &str) -> Option<Vec<String>> {
    if *egress == EgressView::Open {
        return None;
    }
    let servers = upstream_resolvers(resolv_conf);
    Some(if servers.is_empty() {
        vec![Ipv4Addr::new(192, 0, 2, 1).to_string()]
    } else {
        servers
    })
}

/// The host's resolver configuration as the engine reads it: `/etc/resolv.conf`, or where it
/// names only a local stub, the upstream list systemd-resolved keeps.
pub fn host_resolv_conf() -> String {
    let main = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
    if !upstream_resolvers(&main).is_empty() {
        return main;
    }
    std::fs::read_to_string("/run/systemd/resolve/resolv.conf").unwrap_or(main)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_firewall_command_that_hangs_is_killed_at_its_limit_and_big_io_does_not_deadlock() {
        // A command that never ends (iptables stuck in the kernel, or waiting on a lock without
        // a bound, as `-w` alone did) holds the agent's thread only until the limit.
        let started = std::time::Instant::now();
        let mut sleeper = Command::new("sleep");
        sleeper.arg("600");
        let e = output_within("sleep", sleeper, None, Duration::from_millis(300)).unwrap_err();
        assert!(
            matches!(e, FirewallError::TimedOut { tool: "sleep", .. }),
            "{e}"
        );
        assert!(started.elapsed() < Duration::from_secs(5));
        let running = || {
            let out = Command::new("pgrep")
                .args(["-x", "-f", "sleep 600"])
                .output();
            !out.unwrap().stdout.is_empty()
        };
        // Killed, and reaped by the thread that waited for it.
        let killed = std::time::Instant::now();
        while running() {
            assert!(killed.elapsed() < Duration::from_secs(2), "left running");
            std::thread::sleep(Duration::from_millis(20));
        }
        // A restore script larger than a pipe holds goes in while the output comes out.
        let script: Vec<u8> = (0..200_000u32)
            .flat_map(|i| format!("{i}\n").into_bytes())
            .collect();
        let out = output_within(
            "cat",
            Command::new("cat"),
            Some(script.clone()),
            COMMAND_LIMIT,
        )
        .unwrap();
        assert!(out.status.success());
        assert_eq!(out.stdout, script);
    }

    #[test]
    fn metadata_is_dropped_before_any_allow_list_entry_and_the_policy_decides_last() {
        let allow = EgressView::AllowList(vec![(Ipv4Addr::new(169, 254, 7, 9), 16)]);
        let forward: Vec<String> = rules(Family::V4, "gmX", &LeasePolicy::of(allow))
            .into_iter()
            .filter(|r| r.starts_with(&format!("-A {FORWARD_CHAIN} ")))
            .collect();
        let metadata = forward
            .iter()
            .position(|x| x.contains("169.254.0.0/16 -i gmX -j DROP"))
            .unwrap();
        let allowed = forward
            .iter()
            .position(|x| x.contains("169.254.0.0/16 -i gmX -j RETURN"))
            .unwrap();
        assert!(metadata < allowed);
        assert_eq!(
            forward.last().unwrap(),
            &format!("-A {FORWARD_CHAIN} -i gmX -j DROP")
        );
        let open = rules(Family::V4, "gmX", &LeasePolicy::of(EgressView::Open));
        assert_eq!(
            open.last().unwrap(),
            &format!("-A {FORWARD_CHAIN} -i gmX -j RETURN")
        );
        assert_eq!(open[1], format!("-A {INPUT_CHAIN} -i gmX -j DROP"));
        // IPv6: nothing from a lease bridge, to the host or beyond, whatever the policy.
        assert_eq!(
            rules(Family::V6, "gmX", &LeasePolicy::of(EgressView::Open)),
            vec![
                format!("-A {INPUT_CHAIN} -i gmX -j DROP"),
                format!("-A {FORWARD_CHAIN} -i gmX -j DROP")
            ]
        );
    }

    #[test]
    fn allow_list_entries_are_written_as_iptables_lists_them() {
        assert_eq!(
            network(Ipv4Addr::new(10, 1, 2, 3), 24).as_deref(),
            Some("10.1.2.0/24")
        );
        assert_eq!(
            network(Ipv4Addr::new(10, 1, 2, 3), 32).as_deref(),
            Some("10.1.2.3/32")
        );
        assert_eq!(network(Ipv4Addr::new(10, 1, 2, 3), 0), None);
        let r = rules(
            Family::V4,
            "gmX",
            &LeasePolicy::of(EgressView::AllowList(vec![(Ipv4Addr::new(0, 0, 0, 0), 0)])),
        );
        assert!(r.contains(&format!("-A {FORWARD_CHAIN} -i gmX -j RETURN")));
    }

    /// What `iptables -S` printed on an engine with its iptables management on, after it had
    /// put its own per-bridge rules first.
    const OUTRANKED: &str = "-P INPUT ACCEPT\n-P FORWARD DROP\n-P OUTPUT ACCEPT\n\
        -N DOCKER\n-N GPU-MARKET-FORWARD\n-N GPU-MARKET-INPUT\n\
        -A INPUT -j GPU-MARKET-INPUT\n\
        -A FORWARD -o gmA -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n\
        -A FORWARD -i gmA ! -o gmA -j ACCEPT\n\
        -A FORWARD -j GPU-MARKET-FORWARD\n\
        -A GPU-MARKET-INPUT -i gmA -j DROP\n\
        -A GPU-MARKET-FORWARD -i gmA -j DROP\n\
        -A GPU-MARKET-FORWARD -i gmGone -j DROP\n";

    #[test]
    fn jumps_outranked_by_the_engine_are_put_first_through_its_user_chain() {
        let table = Table::parse(OUTRANKED);
        let (missing, script) = order(&table);
        assert_eq!(missing, vec![USER_CHAIN]);
        assert_eq!(
            script,
            vec![
                format!("-I FORWARD 1 -j {USER_CHAIN}"),
                format!("-I {USER_CHAIN} 1 -j {FORWARD_CHAIN}"),
                format!("-D FORWARD -j {FORWARD_CHAIN}"),
            ]
        );
        let fixed = Table::parse(&format!(
            "{OUTRANKED}-N {USER_CHAIN}\n-A {USER_CHAIN} -j {FORWARD_CHAIN}\n-A {USER_CHAIN} -j RETURN\n"
        )
        .replace(
            "-A FORWARD -o gmA",
            &format!("-A FORWARD -j {USER_CHAIN}\n-A FORWARD -o gmA"),
        )
        .replace(&format!("-A FORWARD -j {FORWARD_CHAIN}\n"), ""));
        assert_eq!(order(&fixed), (vec![], vec![]));
    }

    #[test]
    fn a_bridge_is_rewritten_only_when_its_rules_differ() {
        let table = Table::parse(OUTRANKED);
        assert_eq!(
            table.bridges(),
            BTreeSet::from(["gmA".into(), "gmGone".into()])
        );
        let want = rules(Family::V6, "gmA", &LeasePolicy::default());
        assert!(rewrite(&table, "gmA", &want).is_empty());
        let v4 = rules(Family::V4, "gmA", &LeasePolicy::default());
        let fix = rewrite(&table, "gmA", &v4);
        assert_eq!(fix[0], format!("-D {INPUT_CHAIN} -i gmA -j DROP"));
        assert_eq!(fix[1], format!("-D {FORWARD_CHAIN} -i gmA -j DROP"));
        assert_eq!(&fix[2..], v4.as_slice());
        assert_eq!(
            rewrite(&table, "gmGone", &[]),
            vec![format!("-D {FORWARD_CHAIN} -i gmGone -j DROP")]
        );
    }

    #[test]
    fn a_gang_part_reaches_its_peers_whatever_its_machine_allows() {
        let peer = Ipv4Addr::new(203, 0, 113, 7);
        assert_eq!(
            with_peers(&EgressView::None, &[peer]),
            EgressView::AllowList(vec![(peer, 32)])
        );
        let listed = (Ipv4Addr::new(198, 51, 100, 0), 24);
        assert_eq!(
            with_peers(&EgressView::AllowList(vec![listed]), &[peer]),
            EgressView::AllowList(vec![listed, (peer, 32)])
        );
        assert_eq!(with_peers(&EgressView::Open, &[peer]), EgressView::Open);
        assert_eq!(with_peers(&EgressView::None, &[]), EgressView::None);
        // The peer comes before the closed networks: a private peer is reached, the rest not.
        let gang = LeasePolicy {
            peers: vec![peer],
            ..LeasePolicy::default()
        };
        let rules = rules(Family::V4, "gm0", &gang);
        let at = |needle: &str| rules.iter().position(|r| r.contains(needle)).unwrap();
        assert!(at("203.0.113.7/32") < at(CLOSED[1]), "{rules:?}");
        assert!(rules.last().unwrap().ends_with("-j DROP"));
        // Nothing of the host is opened for a peer on another host.
        assert!(!rules
            .iter()
            .any(|r| r.starts_with(&format!("-A {INPUT_CHAIN}"))
                && r.ends_with("-j RETURN")
                && !r.contains("ESTABLISHED")));
    }

    #[test]
    fn a_gang_part_on_its_first_parts_host_reaches_the_rendezvous_port_alone() {
        let at = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 2), 31_005);
        let policy = LeasePolicy {
            peers: vec![*at.ip()],
            local_rendezvous: vec![at],
            ..LeasePolicy::default()
        };
        let input: Vec<String> = rules(Family::V4, "gm0", &policy)
            .into_iter()
            .filter(|r| r.starts_with(&format!("-A {INPUT_CHAIN} ")))
            .collect();
        // As `iptables -S` prints it, between the answers and the drop of everything else.
        assert_eq!(
            input,
            vec![
                format!(
                    "-A {INPUT_CHAIN} -i gm0 -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN"
                ),
                format!(
                    "-A {INPUT_CHAIN} -d 192.0.2.2/32 -i gm0 -p tcp -m tcp --dport 31005 -j RETURN"
                ),
                format!("-A {INPUT_CHAIN} -i gm0 -j DROP"),
            ]
        );
        // IPv6 stays closed whatever the gang.
        assert!(rules(Family::V6, "gm0", &policy)
            .iter()
            .all(|r| r.ends_with("-j DROP")));
    }

    #[test]
    fn policy_labels_round_trip() {
        let at = SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, 2), 31_005);
        for egress in [
            EgressView::None,
            EgressView::Open,
            EgressView::AllowList(vec![]),
            EgressView::AllowList(vec![
                (Ipv4Addr::new(198, 18, 0, 0), 15),
                (Ipv4Addr::new(8, 8, 8, 8), 32),
            ]),
        ] {
            let plain = LeasePolicy::of(egress.clone());
            assert_eq!(parse_policy_label(&policy_label(&plain)), Some(plain));
            let gang = LeasePolicy {
                egress,
                peers: vec![*at.ip(), Ipv4Addr::new(203, 0, 113, 7)],
                local_rendezvous: vec![at],
            };
            assert_eq!(parse_policy_label(&policy_label(&gang)), Some(gang));
        }
        assert_eq!(
            policy_label(&LeasePolicy {
                peers: vec![*at.ip()],
                local_rendezvous: vec![at],
                ..LeasePolicy::default()
            }),
            "none;peers:192.0.2.2;rendezvous:192.0.2.2:31005"
        );
        assert_eq!(parse_policy_label("allow:1.2.3.4"), None);
        assert_eq!(parse_policy_label("closed"), None);
        assert_eq!(parse_policy_label("none;ports:1"), None);
        assert_eq!(parse_policy_label("none;rendezvous:192.0.2.2"), None);
    }

    #[test]
    fn leases_without_open_egress_never_get_a_loopback_resolver() {
        let stub = "# systemd-resolved\nnameserver 127.0.0.53\noptions edns0\n";
        let upstream = "nameserver 10.0.0.2\nnameserver ::1\nnameserver 9.9.9.9\n";
        assert_eq!(lease_dns(&EgressView::Open, stub), None);
        assert_eq!(
            lease_dns(&EgressView::None, stub),
            Some(vec!["192.0.2.1".to_string()])
        );
        assert_eq!(
            lease_dns(&EgressView::AllowList(vec![]), upstream),
            Some(vec!["10.0.0.2".to_string(), "9.9.9.9".to_string()])
        );
    }
}
