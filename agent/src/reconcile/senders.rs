//! Proof submissions run beside the loop, one round for the whole machine at a time: a round
//! sends the closed proofs of every lease together (each covering the consecutive intervals the
//! loop joined: two at the recommended silence window), the oldest of each lease in one
//! `submit_usage` (one signature for the machine, however many leases it runs), then the next
//! oldest, and so on; the next tick takes what was accepted. A tick never waits for a
//! confirmation, so a new bid's allocation or a container's start does not queue behind the
//! proofs.
//!
//! One refused proof refuses its whole transaction, so a transaction the program refuses is
//! sent again lease by lease, and only the lease whose proof is at fault fails. A failure is
//! classified ([`Fate`]): a proof the program refuses for a reason that cannot change is
//! dropped, once; anything else is sent again, at the next look at the chain after a first
//! failure, then backing off (1 s, 2 s, 4 s, ... at most [`MAX_BACKOFF`]) until one of the
//! lease's rounds gets through.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use gpu_market::errors::MarketError;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::chain::{proof_hash, Chain, ChainError, Key};
use crate::state::ProofRecord;

/// What one round got for one lease.
#[derive(Debug, Default)]
pub struct Round {
    /// The proofs the chain accepted, oldest first, with the chain hash each left.
    pub accepted: Vec<(ProofRecord, [u8; 32])>,
    /// Why the lease's proofs stopped early, if they did, with the interval of the proof that
    /// failed (it and the rest are sent again later, unless [`Fate::of`] says otherwise).
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

/// A lease's proofs in a round: its chain hash so far and what is left to send.
struct Queue {
    lease: Key,
    prev: [u8; 32],
    pending: VecDeque<ProofRecord>,
    round: Round,
}

impl Queue {
    fn accept(&mut self) {
        let p = self.pending.pop_front().expect("a proof was sent");
        let hash = proof_hash(&self.lease, &p.proof(), &self.prev);
        self.prev = hash;
        self.round.accepted.push((p, hash));
    }

    fn fail(&mut self, e: ChainError) {
        let interval = self.pending.front().expect("a proof was sent").interval;
        self.round.failed = Some((interval, e));
        self.pending.clear();
    }
}

/// Sends the oldest pending proof of each lease in `queues` together, until none is left or
/// every lease failed.
async fn send_round(chain: &dyn Chain, queues: &mut [Queue]) {
    loop {
        let live: Vec<usize> = (0..queues.len())
            .filter(|&i| !queues[i].pending.is_empty())
            .collect();
        if live.is_empty() {
            return;
        }
        let batch: Vec<(Key, _)> = live
            .iter()
            .map(|&i| (queues[i].lease, queues[i].pending[0].proof()))
            .collect();
        match chain.submit_usage(&batch).await {
            Ok(()) => live.iter().for_each(|&i| queues[i].accept()),
            // The cluster did not answer, or one lease alone was refused: that is all there
            // is to learn.
            Err(e) if e.is_transient() || live.len() == 1 => {
                live.iter().for_each(|&i| queues[i].fail(e.clone()))
            }
            // Refused: find the lease at fault by sending each alone.
            Err(_) => {
                for &i in &live {
                    let q = &mut queues[i];
                    let one = [(q.lease, q.pending[0].proof())];
                    match chain.submit_usage(&one).await {
                        Ok(()) => q.accept(),
                        Err(e) => q.fail(e),
                    }
                }
            }
        }
    }
}

#[derive(Default)]
pub struct Senders {
    round: Option<JoinHandle<Vec<(Key, Round)>>>,
    /// Leases whose last round failed: failures in a row, and when to send again.
    backoff: BTreeMap<Key, (u32, Instant)>,
    /// Notified as each round ends: the loop takes its result at once.
    done: Arc<Notify>,
}

impl Senders {
    /// Whether a round is under way (the machine's proofs go in one), or `lease`'s back-off is
    /// not over.
    pub fn is_sending(&self, lease: &Key) -> bool {
        self.round.is_some()
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

    /// Sends the `pending` proofs of each lease, the first chained to its `prev`, in one round,
    /// unless a round is under way.
    pub fn submit(
        &mut self,
        chain: Arc<dyn Chain>,
        leases: Vec<(Key, [u8; 32], Vec<ProofRecord>)>,
    ) {
        if self.round.is_some() || leases.is_empty() {
            return;
        }
        let done = self.done.clone();
        self.round = Some(tokio::spawn(async move {
            let mut queues: Vec<Queue> = leases
                .into_iter()
                .map(|(lease, prev, pending)| Queue {
                    lease,
                    prev,
                    pending: pending.into(),
                    round: Round::default(),
                })
                .collect();
            send_round(chain.as_ref(), &mut queues).await;
            done.notify_one();
            queues.into_iter().map(|q| (q.lease, q.round)).collect()
        }));
    }

    /// What the round got for each of its leases, once it ended (nothing while it runs).
    pub async fn finished(&mut self) -> Vec<(Key, Round)> {
        if !self.round.as_ref().is_some_and(|h| h.is_finished()) {
            return Vec::new();
        }
        let handle = self.round.take().expect("checked above");
        handle.await.unwrap_or_else(|e| {
            tracing::error!(error = %e, "the proof round failed");
            Vec::new()
        })
    }

    /// Completes when a round has ended since the last call.
    pub async fn one_finished(&self) {
        self.done.notified().await
    }

    /// Whether the round (if any) has ended (tests).
    #[cfg(test)]
    pub fn all_finished(&self) -> bool {
        self.round.as_ref().is_none_or(|h| h.is_finished())
    }

    /// Whether a round has ended and waits to be taken (tests).
    #[cfg(test)]
    pub fn any_finished(&self) -> bool {
        self.round.as_ref().is_some_and(|h| h.is_finished())
    }
}
