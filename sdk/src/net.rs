//! Serving connections with bounds: at most so many at once, and so many from one address
//! ([`accept_bounded`]), through per-key quotas ([`Quota`]) that also bound what one key holds
//! of anything else (a lease's exec sessions in the agent's API).

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// At most `max` slots held at once per key.
#[derive(Debug)]
pub struct Quota<K: Eq + Hash + Clone> {
    held: Arc<Mutex<HashMap<K, usize>>>,
    max: usize,
}

impl<K: Eq + Hash + Clone> Quota<K> {
    pub fn new(max: usize) -> Self {
        Quota {
            held: Arc::default(),
            max,
        }
    }

    /// One more slot of `key`; `None` when it holds its most.
    pub fn take(&self, key: K) -> Option<Slot<K>> {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let n = held.entry(key.clone()).or_default();
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(Slot {
            held: self.held.clone(),
            key,
        })
    }
}

/// A slot of a [`Quota`], given back when dropped.
#[derive(Debug)]
pub struct Slot<K: Eq + Hash + Clone> {
    held: Arc<Mutex<HashMap<K, usize>>>,
    key: K,
}

impl<K: Eq + Hash + Clone> Drop for Slot<K> {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = held.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.key);
            }
        }
    }
}

/// At most how many connections a server takes, and how many of them from one address.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionCaps {
    pub total: usize,
    pub per_peer: usize,
}

/// Accepts connections on `listener` until `shutdown` completes, each handed to `serve` beside
/// the loop; at most `caps.total` at once, and `caps.per_peer` from one IP address (one over
/// either is closed at once, so that a flood cannot take the server's memory, and one peer
/// cannot take every slot). `what` names the server in the log.
pub async fn accept_bounded<F, Fut>(
    what: &'static str,
    listener: TcpListener,
    caps: ConnectionCaps,
    shutdown: impl Future<Output = ()>,
    serve: F,
) where
    F: Fn(TcpStream) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let permits = Arc::new(Semaphore::new(caps.total));
    let peers = Quota::new(caps.per_peer);
    tokio::pin!(shutdown);
    loop {
        let (socket, peer) = tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok((socket, addr)) => (socket, addr.ip()),
                Err(e) => {
                    tracing::warn!(error = %e, "{what}: accept failed");
                    continue;
                }
            },
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            tracing::debug!("{what}: too many connections; closing a new one");
            continue;
        };
        let Some(slot) = peers.take(peer) else {
            tracing::debug!(%peer, "{what}: too many connections from one address; closing a new one");
            continue;
        };
        let served = serve(socket);
        tokio::spawn(async move {
            served.await;
            drop((permit, slot));
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_key_holds_at_most_its_quota_and_gives_its_slots_back() {
        let quota = Quota::new(3);
        let held: Vec<Slot<&str>> = (0..3)
            .map(|_| quota.take("a").expect("within the quota"))
            .collect();
        assert!(quota.take("a").is_none(), "over the quota");
        let other = quota.take("b").expect("another key is not counted with it");
        drop(held);
        assert!(quota.take("a").is_some(), "its slots came back");
        drop(other);
        assert!(
            quota.held.lock().unwrap().is_empty(),
            "nothing kept for keys gone"
        );
    }
}
