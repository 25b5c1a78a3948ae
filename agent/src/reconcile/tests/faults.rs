//! One bad bid, a slow registry, an engine or a GPU that stops answering, a lagging RPC node:
//! each hurts only what it must.

use super::*;

/// A second bid, on its own image, for the GPU next to the first lease's.
fn other_bid(n: u8, image: &str) -> BidView {
    let mut b = bid(n, BidKind::Queue, 1, 1_000, power(250));
    b.image_ref = image.into();
    b
}

const STALLED: &str = "127.0.0.1:5000/gpu-market/huge:v1";

/// The leases' final proofs: (interval, exit code, GPU-seconds).
fn final_proof(h: &Harness, lease: Key) -> Option<(u32, Option<i32>, u64)> {
    proofs(h, lease)
        .into_iter()
        .rfind(|(_, exit_code, _)| exit_code.is_some())
}

/// The lease's accepted proofs: (interval, exit code, GPU-seconds), in order.
fn proofs(h: &Harness, lease: Key) -> Vec<(u32, Option<i32>, u64)> {
    h.chain
        .accepted()
        .into_iter()
        .filter(|a| a.lease == lease)
        .map(|a| (a.proof.interval, a.proof.exit_code, a.proof.gpu_seconds))
        .collect()
}

/// Asserts that `lease` was proven for every interval from its allocation, with nothing used,
/// up to its final proof, which covers `last` and carries `exit_code`.
fn proven_empty_until(h: &Harness, lease: Key, last: u32, exit_code: i32) {
    assert_eq!(
        proven_intervals(h, lease),
        (0..=last).collect::<Vec<_>>(),
        "{:?}",
        proofs(h, lease)
    );
    let proofs = proofs(h, lease);
    let (final_proof, before) = proofs.split_last().expect("proven");
    assert_eq!(final_proof.1, Some(exit_code));
    assert!(before.iter().all(|p| p.1.is_none()), "{proofs:?}");
    assert!(proofs.iter().all(|p| p.2 == 0), "nothing used: {proofs:?}");
}

#[tokio::test(start_paused = true)]
async fn a_pull_that_never_finishes_delays_no_other_leases_proofs_and_ends_its_own_lease() {
    let h = Harness::new(&[0, 0]);
    let (mut r, a) = allocated_and_started(&h, bid(1, BidKind::Queue, 1, 1_000, power(250))).await;
    h.runtime.stall_pulls(STALLED);
    let b = other_bid(2, STALLED);
    h.chain.place_bid(b.clone());
    // Before the fix the tick awaited the pull and never came back.
    tokio::time::timeout(Duration::from_secs(60), h.run_for(&mut r, POLL))
        .await
        .expect("the loop waited for a pull");
    let b_lease = h.chain.lease_of_bid(b.key).expect("allocated").key;
    // The agent's default budget, 600 s: B's image pulls for all of it while both leases are
    // proven every interval (B's windows empty), so neither client can call the host silent
    // (`run_for` checks after every tick); before the fix B went unproven for the whole pull.
    let budget = pull_timeout_secs() as u64;
    h.run_for(&mut r, budget + INTERVAL as u64).await;
    let last = (budget / INTERVAL as u64) as u32;
    proven_empty_until(&h, b_lease, last, exit::IMAGE_UNAVAILABLE);
    // A's proofs go every two intervals: its last interval waits for the next round.
    let proven = proven_intervals(&h, a.key);
    assert!(
        proven.len() >= last as usize,
        "A proven on time: {proven:?}"
    );
    assert_eq!(proven, (0..proven.len() as u32).collect::<Vec<_>>());
    assert!(h.chain.ended().contains(&b_lease));
    assert_eq!(h.running().len(), 1, "only A runs");
    assert!(!r.state().leases.contains_key(&b_lease));
}

#[tokio::test(start_paused = true)]
async fn a_lease_whose_image_is_still_pulling_at_its_stop_is_ended_with_the_reason() {
    let h = Harness::new(&[0]);
    h.runtime.stall_pulls(STALLED);
    let mut b = other_bid(1, STALLED);
    // Stops long before the 600 s pull budget runs out: the pull is given up at its stop.
    b.max_duration_secs = 20;
    let (lease, _) = refused_lease(&h, b).await;
    // Before the fix the lease, unrecorded while its container was readied, was never started
    // once past its stop, nor proven, nor ended.
    assert_eq!(
        final_proof(&h, lease),
        Some((0, Some(exit::IMAGE_UNAVAILABLE), 0))
    );
}

/// Places one bid the runtime cannot start and returns its lease once the agent gave up on it,
/// with the seconds that took.
async fn refused_lease(h: &Harness, b: BidView) -> (Key, i64) {
    h.chain.place_bid(b.clone());
    let mut r = h.reconciler();
    r.tick(false).await.unwrap();
    let lease = h.chain.lease_of_bid(b.key).expect("allocated");
    let from = h.chain.clock();
    while !h.chain.ended().contains(&lease.key) {
        assert!(
            h.chain.clock() - from < 2 * pull_timeout_secs(),
            "never ended"
        );
        h.run_for(&mut r, POLL).await;
    }
    let took = h.chain.clock() - from;
    assert!(h.running().is_empty());
    assert_eq!(
        h.applied(lease.gpu_indices[0] as u32),
        parked(),
        "GPU reset and parked"
    );
    h.run_for(&mut r, POLL).await;
    assert!(r.state().leases.is_empty());
    (lease.key, took)
}

#[tokio::test(start_paused = true)]
async fn an_image_the_registry_does_not_have_ends_the_lease_at_once_with_its_reason() {
    let h = Harness::new(&[0]);
    h.runtime.refuse_pulls(STALLED);
    let (lease, took) = refused_lease(&h, other_bid(1, STALLED)).await;
    assert_eq!(
        final_proof(&h, lease),
        Some((0, Some(exit::IMAGE_UNAVAILABLE), 0))
    );
    assert!(took <= 2 * POLL as i64, "{took} s: a 404 is not retried");
}

/// A client that never seals its environment (on purpose, to reclaim its escrow and slash the
/// host for the silence) gets neither: the lease is proven empty while the agent waits, and
/// ends with its reason one interval before the client could call the host silent.
#[tokio::test(start_paused = true)]
async fn an_environment_never_sealed_ends_the_lease_before_its_client_could_call_the_host_silent() {
    let h = Harness::new(&[0]);
    let mut b = bid(1, BidKind::Queue, 1, 1_000, power(250));
    b.env_hash = [9; 32];
    let (lease, took) = refused_lease(&h, b).await;
    // `refused_lease` ran the loop with `run_for`, which checks after every tick that no
    // lease is reclaimable: before the fix this lease was, from 180 s on.
    let waits = (3 - 1) * INTERVAL as i64;
    assert!(took <= waits + POLL as i64, "{took} s");
    proven_empty_until(&h, lease, 2, exit::ENVIRONMENT_UNAVAILABLE);
    assert!(h.chain.reclaimed().is_empty());
}

/// The environment may come late (the client seals it after the allocation, within the wait
/// the lease allows): the image is pulled meanwhile, and the lease runs once it arrives.
#[tokio::test(start_paused = true)]
async fn an_environment_sealed_after_the_allocation_is_taken_while_the_lease_waits() {
    let h = Harness::new(&[0]);
    let mut b = bid(1, BidKind::Queue, 1, 1_000, power(250));
    let env = gpu_market_sdk::envelope::Environment::new(
        b"TOKEN=late\n",
        &solana_keypair::Keypair::new(),
    )
    .unwrap();
    b.env_hash = env.hash();
    h.chain.place_bid(b.clone());
    let mut r = h.reconciler();
    h.run_for(&mut r, INTERVAL as u64 + POLL).await;
    let lease = h.chain.lease_of_bid(b.key).expect("allocated");
    assert!(h.running().is_empty(), "waiting for the environment");
    let closed: Vec<_> = r.state().leases[&lease.key]
        .pending
        .iter()
        .map(|p| (p.interval, p.gpu_seconds))
        .collect();
    assert_eq!(closed, vec![(0, 0)], "closed empty meanwhile");
    use solana_signer::Signer;
    let sealed = env.seal_to(&h.env_key.pubkey()).expect("a curve point");
    h.chain.store_sealed_env(b.key, sealed);
    h.run_for(&mut r, 4 * POLL).await;
    let running = h.running();
    assert_eq!(running.len(), 1, "started once the environment came");
    assert_eq!(
        running[0].1.env,
        vec![("TOKEN".to_string(), "late".to_string())]
    );
}

/// An engine that takes a create request and never answers is given up on after
/// `ENGINE_CALL_TIMEOUT`; the lease, proven empty meanwhile, ends with its reason.
#[tokio::test(start_paused = true)]
async fn an_engine_that_hangs_on_create_ends_the_lease_and_never_silences_the_host() {
    let h = Harness::new(&[0]);
    h.runtime.hang_creates(true);
    let (lease, took) = refused_lease(&h, bid(1, BidKind::Queue, 1, 1_000, power(250))).await;
    let bound = super::jobs::ENGINE_CALL_TIMEOUT.as_secs() as i64;
    assert!(took <= bound + 2 * POLL as i64, "{took} s");
    proven_empty_until(&h, lease, 1, exit::ENGINE_REFUSED);
}

#[tokio::test(start_paused = true)]
async fn an_environment_on_chain_that_is_not_the_bids_ends_the_lease_at_once() {
    let h = Harness::new(&[0]);
    let mut b = bid(1, BidKind::Queue, 1, 1_000, power(250));
    h.seal_env(b.key, "TOKEN=other\n");
    b.env_hash = [9; 32];
    let (lease, took) = refused_lease(&h, b).await;
    assert_eq!(
        final_proof(&h, lease),
        Some((0, Some(exit::ENVIRONMENT_UNAVAILABLE), 0))
    );
    assert!(
        took <= 2 * POLL as i64,
        "{took} s: a wrong copy is not waited for"
    );
}

#[tokio::test(start_paused = true)]
async fn a_container_the_engine_refuses_ends_the_lease_at_once() {
    let h = Harness::new(&[0]);
    h.runtime
        .refuse_creates("range of CPUs is from 0.01 to 2.00");
    let (lease, took) = refused_lease(&h, bid(1, BidKind::Queue, 1, 1_000, power(250))).await;
    assert_eq!(
        final_proof(&h, lease),
        Some((0, Some(exit::ENGINE_REFUSED), 0))
    );
    assert!(took <= 2 * POLL as i64, "{took} s");
}

#[tokio::test(start_paused = true)]
async fn what_was_prepared_for_a_lease_refused_before_its_container_ran_is_swept_after_its_retention(
) {
    let h = Harness::new(&[0]);
    h.runtime.refuse_creates("no such runtime");
    let b = bid(1, BidKind::Queue, 1, 1_000, power(250));
    let (lease, _) = refused_lease(&h, b).await;
    // The agent had recorded the client (and would have mounted a scratch volume) before the
    // engine refused; the lease's end starts the retention, after which it is all deleted.
    let mut r = h.reconciler();
    h.run_for(&mut r, 2 * POLL).await;
    let later = std::time::SystemTime::now() + Duration::from_secs(7_200);
    let keep = crate::retention::Keep {
        period: Duration::from_secs(3_600),
        scratch_bytes: u64::MAX,
    };
    assert_eq!(
        crate::retention::sweep(h.dir.path(), keep, later, &BTreeSet::new()),
        vec![(lease, crate::retention::Swept::Ended)]
    );
}

#[tokio::test(start_paused = true)]
async fn a_container_stops_at_its_leases_stop_whatever_the_chain_does() {
    let h = Harness::new(&[0]);
    let mut b = bid(1, BidKind::Queue, 1, 1_000, power(250));
    b.max_duration_secs = 120;
    let (mut r, lease) = allocated_and_started(&h, b).await;
    h.run_for(&mut r, 100).await;
    // The cluster stops answering before the lease's end: no proof or end can land.
    h.chain.set_outage(true);
    h.run_for(&mut r, 40).await;
    assert!(h.running().is_empty(), "the container outlived its lease");
    assert!(h
        .runtime
        .calls()
        .iter()
        .any(|c| matches!(c, Call::Stop { .. })));
    assert!(h.chain.ended().is_empty());
    // Back: the last proofs go out and the lease ends.
    h.chain.set_outage(false);
    h.run_for(&mut r, 2 * POLL).await;
    assert_eq!(proven_intervals(&h, lease.key), vec![0, 1]);
    assert_eq!(h.chain.ended(), vec![lease.key]);
}

#[tokio::test(start_paused = true)]
async fn a_lease_the_listing_omits_keeps_its_container_and_its_proofs() {
    let h = Harness::new(&[0]);
    let (mut r, lease) =
        allocated_and_started(&h, bid(1, BidKind::Queue, 1, 1_000, power(250))).await;
    let (id, _) = h.running().pop().unwrap();
    // A lagging node leaves the lease out for two intervals.
    h.chain.hide_lease(lease.key, true);
    h.run_for(&mut r, 2 * INTERVAL as u64).await;
    assert_eq!(
        h.running().pop().map(|(i, _)| i),
        Some(id.clone()),
        "not killed"
    );
    assert!(!h
        .runtime
        .calls()
        .iter()
        .any(|c| matches!(c, Call::Stop { .. } | Call::Remove { .. })));
    assert_eq!(r.state().leases[&lease.key].pending.len(), 2, "proofs kept");
    h.chain.hide_lease(lease.key, false);
    h.run_for(&mut r, POLL).await;
    assert_eq!(proven_intervals(&h, lease.key), vec![0, 1]);
}

#[tokio::test(start_paused = true)]
async fn an_engine_outage_does_not_stop_the_proofs() {
    let h = Harness::new(&[0]);
    let (mut r, lease) =
        allocated_and_started(&h, bid(1, BidKind::Queue, 1, 1_000, power(250))).await;
    h.runtime.set_engine_down(true);
    h.run_for(&mut r, 2 * INTERVAL as u64).await;
    assert_eq!(proven_intervals(&h, lease.key), vec![0, 1]);
    h.runtime.set_engine_down(false);
    h.run_for(&mut r, 2 * INTERVAL as u64).await;
    assert_eq!(proven_intervals(&h, lease.key), vec![0, 1, 2, 3]);
    assert_eq!(h.running().len(), 1, "the container ran on (live-restore)");
}

/// Two one-GPU leases, A and B, running on a 2-GPU machine.
async fn two_leases(h: &Harness) -> (Reconciler, LeaseView, LeaseView) {
    let (mut r, a) = allocated_and_started(h, bid(1, BidKind::Queue, 1, 1_000, power(250))).await;
    h.chain
        .place_bid(bid(2, BidKind::Queue, 1, 1_000, power(250)));
    h.run_for(&mut r, POLL).await;
    let b = h.chain.lease_of_bid(Key([2; 32])).expect("allocated");
    (r, a, b)
}

#[tokio::test(start_paused = true)]
async fn a_gpu_that_cannot_be_read_does_not_stop_any_leases_proofs() {
    let h = Harness::new(&[0, 1]);
    let (mut r, a, b) = two_leases(&h).await;
    h.gpus.fail_reads(a.gpu_indices[0] as u32, true).unwrap();
    h.run_for(&mut r, 2 * INTERVAL as u64).await;
    assert_eq!(proven_intervals(&h, a.key), vec![0, 1]);
    assert!(proven_intervals(&h, b.key).len() >= 2);
}

#[tokio::test(start_paused = true)]
async fn a_gpu_whose_driver_hangs_is_reported_and_holds_up_no_leases_proofs() {
    let h = Harness::new(&[0, 1]);
    let (mut r, a, b) = two_leases(&h).await;
    let stuck = a.gpu_indices[0] as u32;
    // A driver call that never returns (a GPU in reset): before the watchdog, the loop's
    // first read of the GPU blocked it, and with it every lease's proofs, for good.
    h.gpus.hang(stuck, true);
    h.run_for(&mut r, 2 * INTERVAL as u64).await;
    assert_eq!(proven_intervals(&h, a.key), vec![0, 1]);
    assert!(proven_intervals(&h, b.key).len() >= 2);
    let report = h.metrics.health().assess(crate::metrics::unix_now());
    assert_eq!(report.gpus.hung, vec![stuck]);
    assert!(!report.healthy && !report.gpus.ok);
    // The driver comes back: the GPU is read again and the report clears.
    h.gpus.hang(stuck, false);
    let back = std::time::Instant::now();
    loop {
        h.run_for(&mut r, POLL).await;
        let report = h.metrics.health().assess(crate::metrics::unix_now());
        if report.gpus.ok {
            break;
        }
        assert!(back.elapsed() < Duration::from_secs(5), "{report:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    h.run_for(&mut r, 2 * INTERVAL as u64).await;
    assert_eq!(proven_intervals(&h, a.key), vec![0, 1, 2, 3]);
}

#[tokio::test(start_paused = true)]
async fn a_container_created_but_never_started_is_replaced_and_billing_starts_at_its_start() {
    let h = Harness::new(&[0]);
    let b = bid(1, BidKind::Queue, 1, 1_000, power(250));
    h.chain.place_bid(b.clone());
    // The image takes 20 s to pull.
    h.runtime.delay_pulls(Duration::from_secs(20));
    let mut r = h.reconciler();
    r.tick(false).await.unwrap();
    let lease = h.chain.lease_of_bid(b.key).unwrap();
    // An agent killed between creating and starting the container left this behind.
    let created = h
        .runtime
        .create(&ContainerSpec {
            labels: [(LABEL_LEASE.to_string(), lease.key.to_string())].into(),
            ..Default::default()
        })
        .await
        .unwrap();
    h.run_for(&mut r, 2 * INTERVAL as u64 + POLL).await;
    assert!(!h.runtime.containers().contains_key(&created), "removed");
    assert_eq!(h.running().len(), 1, "started afresh");
    let first = &h.chain.accepted()[0];
    // The image pulled from the allocation on (beside the loop), the leftover removed one poll
    // after it, the container running once the pull is done: 95 of the first proof's 120 s
    // are billed, not the pull.
    assert_eq!(first.proof.intervals, 2);
    assert_eq!(first.proof.gpu_seconds, 120 - POLL - 20);
}

#[tokio::test(start_paused = true)]
async fn an_image_over_the_size_limit_is_refused() {
    let h = Harness::new(&[0]);
    h.runtime
        .set_image_size(STALLED, ImageBudget::default().max_image_bytes + 1);
    let (lease, _) = refused_lease(&h, other_bid(1, STALLED)).await;
    assert_eq!(
        final_proof(&h, lease),
        Some((0, Some(exit::IMAGE_UNAVAILABLE), 0))
    );
}

#[tokio::test(start_paused = true)]
async fn a_boost_transient_over_the_limit_is_not_reported_as_the_intervals_peak() {
    let h = Harness::new(&[0]);
    let (mut r, _) = allocated_and_started(&h, bid(1, BidKind::Queue, 1, 1_000, power(250))).await;
    let (id, _) = h.running().pop().unwrap();
    // Full load: the GPU draws its 250 W limit; one reading shows a 30 W (12 %) boost transient
    // on top, as real GPUs' one-second averages do.
    h.runtime.set_cpu_rate(&id, 2_000);
    h.run_for(&mut r, 3 * POLL).await;
    h.gpus.overshoot(0, 30_000, 1).unwrap();
    h.run_for(&mut r, 2 * INTERVAL as u64).await;
    let proof = &h.chain.accepted()[0].proof;
    assert_eq!(proof.peak_power_w.len(), 1);
    assert!(
        proof.peak_power_w[0] <= 250 + 250 * 5 / 100,
        "peak {} W",
        proof.peak_power_w[0]
    );
    assert_eq!(proof.power_violations(&[250]).count(), 0);
}

/// An RPC node that will not list the books (a provider refusing `getProgramAccounts`) stops
/// allocation, not the proofs: the leases need only the machine's own accounts.
#[tokio::test(start_paused = true)]
async fn books_that_cannot_be_read_stop_no_proofs() {
    let h = Harness::new(&[0]);
    let (mut r, lease) =
        allocated_and_started(&h, bid(1, BidKind::Queue, 1, 1_000, power(250))).await;
    h.chain.set_books_unreadable(true);
    // Before the fix the whole chain view failed with the books, and the lease went unproven
    // until its client could call the host silent (`run_for` checks every tick).
    h.run_for(&mut r, 4 * INTERVAL as u64).await;
    assert_eq!(proven_intervals(&h, lease.key), vec![0, 1, 2, 3]);
}

/// An `allocate` the cluster refuses every time (a transaction too large) is tried again after
/// a growing wait, not in a loop; it is sent at once again when it can pass.
#[tokio::test(start_paused = true)]
async fn a_refused_allocate_is_retried_with_a_growing_wait() {
    let h = Harness::new(&[0]);
    h.chain.refuse_allocates(true);
    let b = bid(1, BidKind::Queue, 1, 1_000, power(250));
    h.chain.place_bid(b.clone());
    let mut r = h.reconciler();
    h.run_for(&mut r, 10 * INTERVAL as u64).await;
    // Waits of 5, 10, 20, 40, 80, 160 and 300 s: 7 tries in 600 s. Before the fix every tick
    // sent it again, and each refusal's readying job, ending, woke another tick at once: this
    // test never ended.
    let calls = h.chain.allocate_calls();
    assert!((5..=8).contains(&calls), "{calls} allocate calls");
    // A book that cannot be read for a tick does not reset the wait: the next try is still
    // the one due (before, the unread book forgot the back-off and the bid was sent at once).
    let calls = h.chain.allocate_calls();
    h.chain.set_books_unreadable(true);
    h.run_for(&mut r, POLL).await;
    h.chain.set_books_unreadable(false);
    h.run_for(&mut r, POLL).await;
    assert_eq!(h.chain.allocate_calls(), calls, "still held back");
    h.chain.refuse_allocates(false);
    h.run_for(&mut r, 300 + POLL).await;
    assert!(
        h.chain.lease_of_bid(b.key).is_some(),
        "allocated once it could be"
    );
}

/// The engine down when a lease ends: its clean-up fails at once, and is tried again after a
/// growing wait, not at once in a loop (the daemon ticks again as soon as a job ends).
#[tokio::test(start_paused = true)]
async fn container_work_that_fails_at_once_is_retried_with_a_wait_not_in_a_loop() {
    let h = Harness::new(&[0]);
    let mut b = bid(1, BidKind::Queue, 1, 1_000, power(250));
    b.max_duration_secs = INTERVAL;
    let (mut r, lease) = allocated_and_started(&h, b).await;
    h.runtime.set_engine_down(true);
    // Before the fix `settle` found a busy loop here: the lease ended, its clean-up failed at
    // once, and the next tick (woken by that job's end) started it again.
    h.run_for(&mut r, 2 * INTERVAL as u64).await;
    assert!(h.chain.ended().contains(&lease.key));
    h.runtime.set_engine_down(false);
    h.run_for(&mut r, INTERVAL as u64).await;
    assert!(
        h.runtime.containers().is_empty(),
        "removed once the engine answered"
    );
    assert!(r.state().leases.is_empty());
}

/// The machine account stops declaring this host's GPUs (a `host update` with another host's
/// GPUs file, a board swapped): the agent takes no new bid, and the lease it runs is proven on;
/// once the declaration matches again, bids are taken again. Before the fix the GPUs were
/// compared only at start, and only when the chain answered then.
#[tokio::test(start_paused = true)]
async fn a_machine_that_does_not_declare_this_hosts_gpus_takes_no_bid() {
    let h = Harness::new(&[0, 0]);
    let (mut r, a) = allocated_and_started(&h, bid(1, BidKind::Queue, 1, 1_000, power(250))).await;
    h.chain.set_gpu_uuid(1, [0xee; 16]);
    let b = other_bid(2, "127.0.0.1:5000/gpu-market/train:v1");
    h.chain.place_bid(b.clone());
    h.run_for(&mut r, 2 * INTERVAL as u64).await;
    assert!(h.chain.lease_of_bid(b.key).is_none(), "no bid taken");
    assert_eq!(
        proven_intervals(&h, a.key),
        vec![0, 1],
        "the running lease proven on"
    );
    h.chain.set_gpu_uuid(1, crate::gpu::simulated::uuid(1));
    h.run_for(&mut r, 2 * POLL).await;
    assert!(
        h.chain.lease_of_bid(b.key).is_some(),
        "taken once the GPUs match"
    );
}
