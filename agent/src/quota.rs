//! Per-key quotas: at most so many of something held at once for one key (connections of one
//! peer address, exec sessions of one lease), each counted while its [`Slot`] is held.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};

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
