//! The container is readied while `allocate` confirms, and only started once it has.

use super::*;

fn created_for(h: &Harness, lease: Key) -> Vec<String> {
    h.runtime
        .containers()
        .into_iter()
        .filter(|(_, c)| {
            c.state == ContainerState::Created
                && c.spec.labels.get(LABEL_LEASE) == Some(&lease.to_string())
        })
        .map(|(id, _)| id)
        .collect()
}

fn count(h: &Harness, call: fn(&Call) -> bool) -> usize {
    h.runtime.calls().iter().filter(|c| call(c)).count()
}

#[tokio::test(start_paused = true)]
async fn the_container_is_created_while_allocate_confirms_and_started_once_it_has() {
    let h = Harness::new(&[0]);
    // A slot's worth of confirmation time.
    h.chain.set_allocate_latency(Duration::from_millis(400));
    let b = bid(1, BidKind::Queue, 1, 1_000, power(250));
    h.chain.place_bid(b.clone());
    let mut r = h.reconciler();
    r.tick(false).await.unwrap();
    let lease = h.chain.lease_of_bid(b.key).expect("allocated");

    // The tick that sent `allocate` ends with the container created (image pulled, environment
    // opened), not started: the lease was not on chain when the tick looked.
    let created = created_for(&h, lease.key);
    assert_eq!(created.len(), 1, "created while allocate confirmed");
    assert!(
        h.running().is_empty(),
        "not started before allocate confirmed"
    );

    settle(&mut r).await;
    let running: Vec<String> = h.running().into_iter().map(|(id, _)| id).collect();
    assert_eq!(running, created, "the readied container is the one started");
    assert_eq!(count(&h, |c| matches!(c, Call::Create { .. })), 1);
    assert_eq!(count(&h, |c| matches!(c, Call::Pull { .. })), 1);
    assert_eq!(count(&h, |c| matches!(c, Call::Start { .. })), 1);
    let record = &r.state().leases[&lease.key];
    assert_eq!(record.container_id.as_deref(), Some(created[0].as_str()));
}

/// A bid whose `allocate` the chain refuses while its container is readied, after one tick.
async fn refused_while_readied(h: &Harness) -> (Reconciler, BidView) {
    h.chain.set_allocate_latency(Duration::from_millis(400));
    h.chain.refuse_next_allocate();
    let b = bid(1, BidKind::Queue, 1, 1_000, power(250));
    h.chain.place_bid(b.clone());
    let mut r = h.reconciler();
    r.tick(false).await.unwrap();
    (r, b)
}

#[tokio::test(start_paused = true)]
async fn what_was_readied_for_a_bid_another_host_won_is_deleted_after_the_retention() {
    let h = Harness::new(&[0]);
    let (mut r, b) = refused_while_readied(&h).await;
    settle(&mut r).await;
    let lease = h.chain.lease_key(b.key);
    assert_eq!(
        crate::retention::client_of(h.dir.path(), &lease),
        Some(b.client)
    );
    // Its retention started when it was abandoned (before, never: its files and scratch
    // volume stayed for good).
    let later = std::time::SystemTime::now() + Duration::from_secs(7_200);
    let keep = crate::retention::Keep {
        period: Duration::from_secs(3_600),
        scratch_bytes: u64::MAX,
    };
    let live = BTreeSet::new();
    assert_eq!(
        crate::retention::sweep(h.dir.path(), keep, later, &live),
        vec![(lease, crate::retention::Swept::Ended)]
    );
}

#[tokio::test(start_paused = true)]
async fn a_refused_allocate_removes_the_container_readied_for_it() {
    let h = Harness::new(&[0]);
    let (mut r, b) = refused_while_readied(&h).await;
    assert!(h.chain.lease_of_bid(b.key).is_none(), "refused");
    let readied = created_for(&h, h.chain.lease_key(b.key));
    assert_eq!(readied.len(), 1, "readied while allocate was under way");

    // The next looks remove it, allocate the bid again, ready a new container and run it.
    h.run_for(&mut r, POLL).await;
    assert!(!h.runtime.containers().contains_key(&readied[0]), "removed");
    assert!(h.runtime.calls().contains(&Call::Remove {
        id: readied[0].clone()
    }));
    let lease = h.chain.lease_of_bid(b.key).expect("allocated");
    let running = h.running();
    assert_eq!(running.len(), 1);
    assert_ne!(running[0].0, readied[0]);
    assert_eq!(
        running[0].1.labels.get(LABEL_LEASE),
        Some(&lease.key.to_string())
    );
    assert_eq!(h.runtime.containers().len(), 1, "nothing else left");
}

#[tokio::test(start_paused = true)]
async fn a_lease_whose_image_cannot_be_had_while_readying_is_refused_without_a_second_pull() {
    let h = Harness::new(&[0]);
    h.chain.set_allocate_latency(Duration::from_millis(400));
    let b = bid(1, BidKind::Queue, 1, 1_000, power(250));
    h.runtime.refuse_pulls(&b.image_ref);
    h.chain.place_bid(b.clone());
    let mut r = h.reconciler();
    r.tick(false).await.unwrap();
    let lease = h.chain.lease_of_bid(b.key).expect("allocated");
    h.run_for(&mut r, 2 * POLL).await;

    assert!(h.runtime.containers().is_empty());
    assert_eq!(count(&h, |c| matches!(c, Call::Pull { .. })), 1, "one pull");
    let proofs = h.chain.accepted();
    assert_eq!(proofs.len(), 1);
    assert_eq!(proofs[0].lease, lease.key);
    assert_eq!(proofs[0].proof.exit_code, Some(exit::IMAGE_UNAVAILABLE));
}
