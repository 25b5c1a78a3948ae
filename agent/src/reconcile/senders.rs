//! Proof submissions run beside the loop, one round per lease at a time: a round sends the
//! lease's closed proofs oldest first (each one confirmed transaction, chained to the one
//! before), the leases side by side, and the next tick takes what was accepted. A tick never
//! waits for a confirmation, so a new bid's allocation or a container's start does not queue
//! behind the proofs of every running lease.
//!
//! A round that failed is classified ([`Fate`]): a proof the program refuses for a reason that
//! cannot change is dropped, once; anything else is sent again, at the next look at the chain
//! after a first failure, then backing off (1 s, 2 s, 4 s, ... at most [`MAX_BACKOFF`]) until
//! one of the lease's rounds gets through.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use gpu_market::errors::MarketError;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::chain::{Chain, ChainError, Key};
use crate::state::ProofRecord;

/// What one round of a lease's submissions got.
#[derive(Debug)]
pub struct Round {
    /// The proofs the chain accepted, oldest first, with the chain hash each left.
    pub accepted: Vec<(ProofRecord, [u8; 32])>,
    /// Why the round stopped early, if it did, with the interval of the proof that failed (it
    /// and the rest are sent again later, unless [`Fate::of`] says otherwise).
    pub failed: Option<(u32, ChainError)>,
}

/// What becomes of a proof whose submission failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// The chain is past it (a later proof, or this one, was accepted): drop it.
    Drop,
    /// The lease stopped before its interval: drop it and every later one, none can land.
    DropFromHere,
    /// It may pass later (the cluster did not answer, the chain moved on since the proof was
    /// chained, the clock has not reached its end): send it again, after a back-off.
    Retry,
}

impl Fate {
    pub fn of(e: &ChainError) -> Fate {
        if e.refused_with(MarketError::StaleInterval)
            || e.refused_with(MarketError::BadProofGpuCount)
        {
            Fate::Drop
        } else if e.refused_with(MarketError::IntervalAfterStop) {
            Fate::DropFromHere
        } else {
            Fate::Retry
        }
    }
}

/// The longest a lease waits before its proofs are sent again.
pub const MAX_BACKOFF: Duration = Duration::from_secs(16);

#[derive(Default)]
pub struct Senders {
    rounds: BTreeMap<Key, JoinHandle<Round>>,
    /// Leases whose last round failed: failures in a row, and when to send again.
    backoff: BTreeMap<Key, (u32, Instant)>,
    /// Notified as each round ends: the loop takes its result at once.
    done: Arc<Notify>,
}

impl Senders {
    /// Whether a round of `lease` is under way, or its back-off is not over.
    pub fn is_sending(&self, lease: &Key) -> bool {
        self.rounds.contains_key(lease)
            || self
                .backoff
                .get(lease)
                .is_some_and(|(_, at)| Instant::now() < *at)
    }

    /// `lease`'s round failed for a reason worth retrying: its next waits longer.
    pub fn back_off(&mut self, lease: Key) -> Duration {
        let (n, at) = self.backoff.entry(lease).or_insert((0, Instant::now()));
        let wait = match *n {
            0 => Duration::ZERO,
            n => Duration::from_secs(1 << (n - 1).min(10)).min(MAX_BACKOFF),
        };
        *n += 1;
        *at = Instant::now() + wait;
        wait
    }

    /// `lease`'s round got through (or its failure is settled): no back-off.
    pub fn clear_backoff(&mut self, lease: &Key) {
        self.backoff.remove(lease);
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
                            round.failed = Some((p.interval, e));
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
                failed: Some((
                    0,
                    ChainError::Unavailable(format!("the submission task failed: {e}")),
                )),
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
