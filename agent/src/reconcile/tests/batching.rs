//! A machine's proofs share transactions: one `submit_usage` every two intervals (at the
//! recommended silence window) proves all its leases, each proof covering both intervals (one
//! signature for the machine, not one per lease and interval: their windows close on one grid),
//! the proofs that land are its heartbeat, and the pay they accrue is claimed every
//! `claim_interval`.

use super::*;

#[tokio::test(start_paused = true)]
async fn four_leases_are_proven_by_one_transaction_every_two_intervals_which_is_the_heartbeat() {
    let h = Harness::new(&[0, 0, 1, 1]);
    for n in 1..=4 {
        h.chain
            .place_bid(bid(n, BidKind::Queue, 1, 1_000, power(250)));
    }
    let mut r = h.reconciler();
    r.tick(false).await.unwrap();
    h.run_for(&mut r, POLL).await;
    let leases: Vec<LeaseView> = (1..=4)
        .map(|n| h.chain.lease_of_bid(Key([n; 32])).expect("allocated"))
        .collect();
    assert_eq!(h.running().len(), 4, "all started");
    let (calls, heartbeats) = (h.chain.submit_calls(), h.chain.heartbeats());

    h.run_for(&mut r, 10 * INTERVAL as u64).await;
    for l in &leases {
        assert!(proven_intervals(&h, l.key).len() >= 9);
    }
    // Whenever each lease started, their windows close on the same boundaries: one
    // transaction every other boundary proves the four, two intervals each.
    let boundaries: std::collections::BTreeSet<i64> =
        h.chain.accepted().iter().map(|a| a.window.1).collect();
    assert!(boundaries.len() <= 6, "{boundaries:?}");
    assert_eq!(
        h.chain.submit_calls() - calls,
        boundaries.len() as u32,
        "one transaction for the four leases"
    );
    let gaps: Vec<i64> = boundaries
        .iter()
        .zip(boundaries.iter().skip(1))
        .map(|(a, b)| b - a)
        .collect();
    assert!(gaps.iter().all(|&g| g == 2 * INTERVAL as i64), "{gaps:?}");
    assert_eq!(
        h.chain.heartbeats(),
        heartbeats,
        "no heartbeat of its own while proofs land"
    );
}

/// On a cluster a round takes a while to confirm, and the loop ticks meanwhile (every poll,
/// and at each notification): the round on its way is the heartbeat, and none is sent beside
/// it. Before, each tick during the confirmation found the last heartbeat old and sent one: on
/// a validator, a heartbeat followed half the rounds, a signature each.
#[tokio::test(start_paused = true)]
async fn a_round_still_confirming_is_the_heartbeat_and_no_other_goes_beside_it() {
    let h = Harness::new(&[0, 0]);
    let (mut r, lease) =
        allocated_and_started(&h, bid(1, BidKind::Queue, 1, 1_000, power(250))).await;
    // Longer than two polls: ticks come while each round confirms.
    h.chain
        .set_submit_latency(std::time::Duration::from_secs(2 * POLL + 1));
    let heartbeats = h.chain.heartbeats();
    h.run_for(&mut r, 10 * INTERVAL as u64).await;
    assert!(proven_intervals(&h, lease.key).len() >= 8);
    assert_eq!(
        h.chain.heartbeats(),
        heartbeats,
        "no heartbeat beside a round on its way"
    );
}

/// A lease allocated between two rounds is proven with the others at the next: the machine
/// keeps one transaction every two intervals, whatever its leases' starts.
#[tokio::test(start_paused = true)]
async fn a_lease_started_between_rounds_joins_the_machines_next_round() {
    let h = Harness::new(&[0, 0]);
    let (mut r, first) =
        allocated_and_started(&h, bid(1, BidKind::Queue, 1, 1_000, power(250))).await;
    h.run_for(&mut r, INTERVAL as u64).await;
    h.chain
        .place_bid(bid(2, BidKind::Queue, 1, 1_000, power(250)));
    h.run_for(&mut r, 5 * INTERVAL as u64).await;
    let second = h.chain.lease_of_bid(Key([2; 32])).expect("allocated");
    let ends = |l: &LeaseView| -> Vec<i64> {
        h.chain
            .accepted()
            .iter()
            .filter(|a| a.lease == l.key)
            .map(|a| a.window.1)
            .collect()
    };
    let (a, b) = (ends(&first), ends(&second));
    assert_eq!(a.len(), 3, "{a:?}");
    assert_eq!(b, a, "the second lease's first proof went with the first's");
    assert_eq!(h.chain.submit_calls(), 3, "one transaction a round");
}

#[tokio::test(start_paused = true)]
async fn a_refused_proof_fails_its_lease_alone() {
    let h = Harness::new(&[0, 0]);
    for n in 1..=2 {
        h.chain
            .place_bid(bid(n, BidKind::Queue, 1, 1_000, power(250)));
    }
    let mut r = h.reconciler();
    r.tick(false).await.unwrap();
    h.run_for(&mut r, POLL).await;
    let (a, b) = (
        h.chain.lease_of_bid(Key([1; 32])).unwrap(),
        h.chain.lease_of_bid(Key([2; 32])).unwrap(),
    );
    // The program refuses lease a's proofs (for a reason that may pass): each batch is
    // refused, split, and b's proofs land alone, in time.
    h.chain
        .refuse_proofs_of(a.key, gpu_market::errors::MarketError::IntervalNotOver);
    let calls = h.chain.submit_calls();
    h.run_for(&mut r, 2 * INTERVAL as u64).await;
    assert_eq!(proven_intervals(&h, b.key), vec![0, 1]);
    assert!(proven_intervals(&h, a.key).is_empty());
    // The batch of both, refused; then each alone: b's lands, a's is refused (and sent
    // again after its back-off).
    assert!(
        h.chain.submit_calls() - calls >= 3,
        "the batch split in two"
    );
}

#[tokio::test(start_paused = true)]
async fn the_pay_proofs_accrue_is_claimed_every_claim_interval() {
    let h = Harness::new(&[0]);
    let (mut r, _) = allocated_and_started(&h, bid(1, BidKind::Queue, 1, 1_000, power(250))).await;
    h.run_for(&mut r, 2 * INTERVAL as u64).await;
    // The first proofs found nothing claimed yet: claimed at once.
    assert_eq!(h.chain.claims(), 1);
    h.run_for(&mut r, 1_800).await;
    assert_eq!(h.chain.claims(), 1, "not again within the hour");
    h.run_for(&mut r, 1_800).await;
    assert_eq!(h.chain.claims(), 2, "once an hour");
}

/// `/healthz` says whether a lease is close to its silence window's end: proofs every two
/// intervals (the recommended silence window of three) must never make it say so, or a
/// supervisor would restart a healthy agent at every round.
#[tokio::test(start_paused = true)]
async fn proofs_every_two_intervals_keep_the_health_check_green() {
    let h = Harness::new(&[0, 0]);
    let (mut r, lease) =
        allocated_and_started(&h, bid(1, BidKind::Queue, 2, 1_000, power(250))).await;
    for _ in 0..(8 * INTERVAL as u64) / POLL {
        // Read as a supervisor may, while a round is on its way: right after the tick.
        tokio::time::advance(Duration::from_secs(POLL)).await;
        r.tick(false).await.unwrap();
        let report = h.metrics.health().assess(crate::metrics::unix_now());
        assert!(
            report.proofs.secs_to_prove.is_some_and(|s| s > 0),
            "{:?} at {}; proven {:?}",
            report.proofs,
            h.chain.clock(),
            proven_intervals(&h, lease.key)
        );
        settle(&mut r).await;
    }
    assert!(proven_intervals(&h, lease.key).len() >= 6);
}
