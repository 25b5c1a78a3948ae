//! "The internet" for the network tests: a network namespace of the test's own, joined to the
//! host by a veth pair on a benchmarking range (198.18.0.0/15, public as far as the firewall
//! knows), serving HTTP with Python's standard library on each of its addresses (a cloud's
//! metadata address among them where a test asks).

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::http_get;

pub fn sh(cmd: &str) {
    let status = Command::new("sh").args(["-c", cmd]).status().unwrap();
    assert!(status.success(), "{cmd}");
}

/// A namespace joined to the host by a veth pair: the host end is 198.18.`n`.1/30, the far
/// end 198.18.`n`.2/30 with extra addresses, each serving HTTP on port 8000.
pub struct FarNet {
    ns: String,
    host_if: String,
    servers: Vec<Child>,
    routes: Vec<String>,
}

impl FarNet {
    pub fn new(n: u8, extra: &[&str]) -> FarNet {
        let ns = format!("gmtest{n}-{}", std::process::id());
        let host_if = format!("gmth{n}");
        sh(&format!(
            "ip netns add {ns} && ip link add {host_if} type veth peer name gmtp{n} && \
             ip link set gmtp{n} netns {ns} && ip addr add 198.18.{n}.1/30 dev {host_if} && \
             ip link set {host_if} up && \
             ip netns exec {ns} ip addr add 198.18.{n}.2/30 dev gmtp{n} && \
             ip netns exec {ns} ip link set gmtp{n} up && ip netns exec {ns} ip link set lo up && \
             ip netns exec {ns} ip route add default via 198.18.{n}.1"
        ));
        let mut net = FarNet {
            ns,
            host_if,
            servers: Vec::new(),
            routes: Vec::new(),
        };
        let mut addresses = vec![format!("198.18.{n}.2")];
        for a in extra {
            sh(&format!(
                "ip netns exec {} ip addr add {a}/32 dev gmtp{n}",
                net.ns
            ));
            sh(&format!("ip route replace {a}/32 via 198.18.{n}.2"));
            net.routes.push(a.to_string());
            addresses.push(a.to_string());
        }
        let root = tempfile::tempdir().unwrap().keep();
        std::fs::write(root.join("index.html"), "far side\n").unwrap();
        // Python's `http.server` command looks its address up in DNS first, which a namespace
        // without a resolver waits out: the plain threading server does not.
        let serve = "import http.server as h, socketserver as s, sys; \
                     s.ThreadingTCPServer.allow_reuse_address = True; \
                     s.ThreadingTCPServer((sys.argv[1], 8000), h.SimpleHTTPRequestHandler).serve_forever()";
        for a in addresses {
            let child = Command::new("ip")
                .args(["netns", "exec", &net.ns, "python3", "-c", serve, &a])
                .current_dir(&root)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            net.servers.push(child);
            // Up once the host reaches it (no firewall stands between the host and it).
            wait_until(|| http_get(&format!("{a}:8000"), "/").is_some());
        }
        net
    }
}

impl Drop for FarNet {
    fn drop(&mut self) {
        for s in &mut self.servers {
            let _ = s.kill();
            let _ = s.wait();
        }
        for r in &self.routes {
            let _ = Command::new("ip")
                .args(["route", "del", &format!("{r}/32")])
                .status();
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .status();
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
    }
}

/// Polls `ok` until it holds. A minute: a server starting on a busy machine may take a while to
/// answer, and only one that never does should fail the test.
pub fn wait_until(mut ok: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out: not within 60 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A shell loop printing `<target> open` or `<target> closed` for each `host:port` of
/// `targets`: whether a TCP connection opens within 2 s (busybox `nc`; this busybox's `wget`
/// cannot resolve). `GATEWAY` in a target stands for the container's default gateway (the host's
/// end of its bridge); the line names the target as given.
pub fn probes(targets: &[String]) -> String {
    let list = targets.join(" ");
    format!(
        "GATEWAY=$(ip route | awk '/default/ {{print $3}}'); \
         for t in {list}; do a=$(echo $t | sed \"s/GATEWAY/$GATEWAY/\"); \
         if nc -w 2 ${{a%:*}} ${{a##*:}} </dev/null >/dev/null 2>&1; \
         then echo \"$t open\"; else echo \"$t closed\"; fi; done"
    )
}

/// What [`probes`] printed of `target`: `"open"` or `"closed"`.
pub fn verdict(out: &str, target: &str) -> &'static str {
    match out.lines().find(|l| l.starts_with(&format!("{target} "))) {
        Some(l) if l.ends_with(" open") => "open",
        Some(_) => "closed",
        None => panic!("{target} not probed in {out}"),
    }
}
