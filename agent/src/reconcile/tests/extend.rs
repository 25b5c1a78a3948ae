//! A lease its client extends (`lease extend`) runs, and is proven, to its new end.

use super::*;

/// The agent reads each lease's end from the chain on every look, not once at its start: a
/// three-interval lease extended by two after its first runs, and is proven for, five.
#[tokio::test(start_paused = true)]
async fn an_extended_lease_runs_and_is_proven_to_its_new_end() {
    let h = Harness::new(&[0]);
    let mut b = bid(1, BidKind::Queue, 1, 1_000, power(250));
    b.max_duration_secs = 3 * INTERVAL;
    let (mut r, lease) = allocated_and_started(&h, b).await;
    h.run_for(&mut r, INTERVAL as u64).await;
    h.chain.extend_lease(lease.key, 2 * INTERVAL as i64);

    // Past the end it started with: still running, nothing ended.
    h.run_for(&mut r, 3 * INTERVAL as u64).await;
    assert_eq!(h.running().len(), 1, "the container runs on");
    assert!(h.chain.ended().is_empty());

    // Past the new end: stopped, every interval proven up to it, the lease ended.
    h.run_for(&mut r, 2 * INTERVAL as u64).await;
    settle(&mut r).await;
    assert!(h.running().is_empty());
    assert_eq!(h.chain.ended(), vec![lease.key]);
    let proven = proven_intervals(&h, lease.key);
    let end = lease.ends_at + 2 * INTERVAL as i64;
    let last = gpu_market_core::lease::interval_index(lease.started_at, INTERVAL, end - 1) as u32;
    assert_eq!(proven, (0..=last).collect::<Vec<_>>());
}
