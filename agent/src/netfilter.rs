//! Word of every change to the host's packet-filter rules, from the kernel.
//!
//! A host firewall reload (`firewall-cmd --reload`, `iptables-restore`, `nft -f`) or the
//! engine's restart rewrites the rules the lease firewall relies on. Waiting for the guard's
//! next periodic pass left leases unconfined for up to [`crate::firewall::GUARD_PERIOD`]. On
//! hosts whose `iptables` is the nf_tables one (the default of current distributions), every
//! rule change, whoever makes it and through whichever tool, is announced on the netlink
//! group `NFNLGRP_NFTABLES`; [`RuleChanges`] listens to it so that the guard re-asserts the
//! rules as soon as they change. Hosts on legacy `iptables` announce nothing: there the guard
//! stays periodic, and [`RuleChanges::listen`] says why it could not listen.

use std::os::fd::OwnedFd;

use rustix::net::netlink::{self, SocketAddrNetlink};
use rustix::net::{AddressFamily, RecvFlags, SocketFlags, SocketType};
use tokio::sync::watch;

/// `NFNLGRP_NFTABLES` (`linux/netfilter/nfnetlink.h`): the nf_tables ruleset's changes.
const NFNLGRP_NFTABLES: u32 = 7;

/// A subscription to the kernel's announcements of nf_tables rule changes. A thread of its own
/// blocks on the netlink socket and counts what it receives (a receive buffer that overflowed,
/// `ENOBUFS`, lost changes and counts as one); the count is what the guard watches.
pub struct RuleChanges {
    count: watch::Receiver<u64>,
}

impl RuleChanges {
    /// Subscribes (needs `CAP_NET_ADMIN`, as the firewall itself does).
    pub fn listen() -> std::io::Result<Self> {
        let socket = rustix::net::socket_with(
            AddressFamily::NETLINK,
            SocketType::RAW,
            SocketFlags::CLOEXEC,
            Some(netlink::NETFILTER),
        )?;
        rustix::net::bind(
            &socket,
            &SocketAddrNetlink::new(0, 1 << (NFNLGRP_NFTABLES - 1)),
        )?;
        let (tx, count) = watch::channel(0);
        std::thread::Builder::new()
            .name("netfilter-changes".into())
            .spawn(move || Self::receive(&socket, &tx))?;
        Ok(Self { count })
    }

    /// Counts announcements until the guard stops listening or the socket fails (the error is
    /// logged; the guard then sees the count's sender gone).
    fn receive(socket: &OwnedFd, count: &watch::Sender<u64>) {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match rustix::net::recv(socket, &mut buf[..], RecvFlags::empty()) {
                Ok(_) | Err(rustix::io::Errno::NOBUFS) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "firewall: reading rule announcements failed");
                    return;
                }
            }
            count.send_modify(|c| *c += 1);
            if count.is_closed() {
                return;
            }
        }
    }

    /// Waits for a change not yet seen; an error once announcements have stopped.
    pub async fn changed(&mut self) -> Result<(), watch::error::RecvError> {
        self.count.changed().await
    }

    /// Marks every change announced so far as seen: a reload is hundreds of messages, and
    /// the pass that follows answers them all.
    pub fn seen(&mut self) {
        self.count.borrow_and_update();
    }
}
