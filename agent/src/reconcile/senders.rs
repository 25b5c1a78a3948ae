//! Proof submissions run beside the loop, one round per lease at a time: a round sends the
//! lease's closed proofs oldest first (each one confirmed transaction, chained to the one
//! before), the leases side by side, and the next tick takes what was accepted. A tick never
//! waits for a confirmation, so a new bid's allocation or a container's start does not queue
//! behind the proofs of every running lease.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::chain::{Chain, ChainError, Key};
use crate::state::ProofRecord;

/// What one round of a lease's submissions got.
#[derive(Debug)]
pub struct Round {
    /// The proofs the chain accepted, oldest first, with the chain hash each left.
    pub accepted: Vec<(ProofRecord, [u8; 32])>,
    /// Why the round stopped early, if it did (the rest is sent again later).
    pub failed: Option<ChainError>,
}

#[derive(Default)]
pub struct Senders {
    rounds: BTreeMap<Key, JoinHandle<Round>>,
    /// Notified as each round ends: the loop takes its result at once.
    done: Arc<Notify>,
}

impl Senders {
    pub fn is_sending(&self, lease: &Key) -> bool {
        self.rounds.contains_key(lease)
    }

    /// Sends `pending` for `lease`, the first chained to `prev`, unless a round is under way.
    pub fn submit(
        &mut self,
        chain: Arc<dyn Chain>,
        lease: Key,
        mut prev: [u8; 32],
        pending: Vec<ProofRecord>,
    ) {
        let done = self.done.clone();
        self.rounds.entry(lease).or_insert_with(|| {
            tokio::spawn(async move {
                let mut round = Round {
                    accepted: Vec::new(),
                    failed: None,
                };
                for p in pending {
                    match chain.submit_usage(lease, &p.proof(), prev).await {
                        Ok(hash) => {
                            round.accepted.push((p, hash));
                            prev = hash;
                        }
                        Err(e) => {
                            round.failed = Some(e);
                            break;
                        }
                    }
                }
                done.notify_one();
                round
            })
        });
    }

    /// The rounds that ended since the last call.
    pub async fn finished(&mut self) -> Vec<(Key, Round)> {
        let done: Vec<Key> = self
            .rounds
            .iter()
            .filter(|(_, h)| h.is_finished())
            .map(|(k, _)| *k)
            .collect();
        let mut out = Vec::with_capacity(done.len());
        for lease in done {
            let handle = self.rounds.remove(&lease).expect("listed above");
            let round = handle.await.unwrap_or_else(|e| Round {
                accepted: Vec::new(),
                failed: Some(ChainError::Unavailable(format!(
                    "the submission task failed: {e}"
                ))),
            });
            out.push((lease, round));
        }
        out
    }

    /// Completes when a round has ended since the last call.
    pub async fn one_finished(&self) {
        self.done.notified().await
    }

    /// Whether every round has ended (tests).
    #[cfg(test)]
    pub fn all_finished(&self) -> bool {
        self.rounds.values().all(|h| h.is_finished())
    }

    /// Whether a round has ended and waits to be taken (tests).
    #[cfg(test)]
    pub fn any_finished(&self) -> bool {
        self.rounds.values().any(|h| h.is_finished())
    }
}
