//! A machine's proofs share transactions: one `submit_usage` an interval proves all its leases
//! (one signature for the machine, not one per lease: their windows close on one grid), the proofs that land are its heartbeat,
//! and the pay they accrue is claimed every `claim_interval`.

use super::*;

#[tokio::test(start_paused = true)]
async fn four_leases_are_proven_by_one_transaction_an_interval_which_is_the_heartbeat() {
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

    h.run_for(&mut r, 5 * INTERVAL as u64).await;
    for l in &leases {
        assert!(proven_intervals(&h, l.key).len() >= 5);
    }
    // Whenever each lease started, their windows close on the same boundaries: one
    // transaction a boundary proves the four.
    let boundaries: std::collections::BTreeSet<i64> =
        h.chain.accepted().iter().map(|a| a.window.1).collect();
    assert!(boundaries.len() <= 6, "{boundaries:?}");
    assert_eq!(
        h.chain.submit_calls() - calls,
        boundaries.len() as u32,
        "one transaction an interval for the four leases"
    );
    assert_eq!(
        h.chain.heartbeats(),
        heartbeats,
        "no heartbeat of its own while proofs land"
    );
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
    assert!(
        h.chain.submit_calls() - calls >= 6,
        "each batch split in two"
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
