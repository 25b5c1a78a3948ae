//! The plan's preemptions: a queue bid that fits only once a running spot lease ends stops it
//! at once (queue leases outrank spot leases), in the chain's ranking order; a more profitable
//! spot bid takes what is left.

use super::*;

/// A spot lease `n` of `gpus` (whole 80 GiB GPUs at 250 W), `price` per GPU-day, running
/// since `T0 - 30`.
fn spot_lease(n: u8, gpus: Vec<u8>, price: u64) -> LeaseView {
    LeaseView {
        key: Key([n; 32]),
        bid: Key([n + 100; 32]),
        kind: BidKind::Spot,
        price,
        overclock: vec![power(250); gpus.len()],
        gpu_indices: gpus,
        ..one_gpu_lease(T0 - 30, T0 + 3_600)
    }
}

/// The agent's record of each of `leases`, its container running.
fn running(leases: &[LeaseView]) -> (AgentState, Vec<ObservedContainer>) {
    let mut local = AgentState::default();
    let mut containers = Vec::new();
    for l in leases {
        let id = format!("c-{}", l.key);
        let mut record = LeaseRecord::new(l, &vec![Sample::default(); l.gpu_indices.len()]);
        record.container_id = Some(id.clone());
        local.leases.insert(l.key, record);
        containers.push(ObservedContainer {
            host_ports: Vec::new(),
            id,
            lease: Some(l.key),
            state: ContainerState::Running,
        });
    }
    (local, containers)
}

/// The plan of a 2-GPU machine running `leases` (the GPUs they do not hold free) with `bids`
/// in the books, best ranked first.
fn plan_with(leases: Vec<LeaseView>, bids: Vec<BidView>) -> Vec<Action> {
    let mut free = vec![80, 80];
    for l in &leases {
        for &g in &l.gpu_indices {
            free[g as usize] = 0;
        }
    }
    let (local, containers) = running(&leases);
    let chain = ChainObserved {
        machine: machine(&[0, 0], free),
        leases,
        closed: BTreeSet::new(),
        bids,
        expired: Vec::new(),
        reservation: None,
    };
    let mut o = observed(Some(chain), local);
    o.containers = Some(containers);
    plan(&o)
}

/// The `(lease, better bid)` of the preemptions among `actions`.
fn preemptions(actions: &[Action]) -> Vec<(Key, Key)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Preempt { lease, better_bid } => Some((*lease, *better_bid)),
            _ => None,
        })
        .collect()
}

/// Bid `n` of `kind` for one GPU that fits once one of `leases` ends.
fn waiting(n: u8, kind: BidKind, price: u64, leases: &[&LeaseView]) -> BidView {
    BidView {
        fits_if_ended: leases.iter().map(|l| l.key).collect(),
        elsewhere: None,
        ..bid(n, kind, 1, price, power(250))
    }
}

#[test]
fn a_queue_bid_that_fits_only_once_a_spot_lease_ends_preempts_it() {
    let lease = spot_lease(1, vec![0, 1], 10_000);
    let queue = waiting(2, BidKind::Queue, 1_000, &[&lease]);
    let actions = plan_with(vec![lease.clone()], vec![queue.clone()]);
    assert_eq!(preemptions(&actions), vec![(lease.key, queue.key)]);
    assert!(allocations(&actions).is_empty(), "{actions:?}");
}

#[test]
fn a_queue_bid_the_policy_gives_an_idle_machine_preempts_nothing_during_its_grace() {
    let lease = spot_lease(1, vec![0, 1], 10_000);
    let queue = BidView {
        elsewhere: Some(Elsewhere {
            machine: Key([77; 32]),
            turn: 1,
        }),
        ..waiting(2, BidKind::Queue, 1_000, &[&lease])
    };
    // Before, the agent stopped its own spot lease for a bid another machine runs at once.
    let actions = plan_with(vec![lease.clone()], vec![queue.clone()]);
    assert!(preemptions(&actions).is_empty(), "{actions:?}");
}

#[test]
fn queue_bids_preempt_best_ranked_first_each_lease_once_then_the_spot_rule() {
    let cheap = spot_lease(1, vec![0], 10_000);
    let dear = spot_lease(2, vec![1], 20_000);
    // In the chain's order: queue bids outrank spot bids.
    let first = waiting(3, BidKind::Queue, 1_000, &[&dear, &cheap]);
    let second = waiting(4, BidKind::Queue, 1_000, &[&cheap]);
    let spot = waiting(5, BidKind::Spot, 50_000, &[&cheap, &dear]);
    let actions = plan_with(
        vec![cheap.clone(), dear.clone()],
        vec![first.clone(), second, spot.clone()],
    );
    assert_eq!(
        preemptions(&actions),
        vec![(cheap.key, first.key), (dear.key, spot.key)],
        "the best-ranked queue bid stops the spot lease that earns the host least; the second \
         fits only there and waits; the spot bid outbids the lease left"
    );
}

#[test]
fn a_queue_bid_that_fits_now_is_allocated_and_preempts_nothing() {
    let lease = spot_lease(1, vec![0], 10_000);
    let queue = BidView {
        gpus: Some(vec![1]),
        ..bid(2, BidKind::Queue, 1, 1_000, power(250))
    };
    let actions = plan_with(vec![lease], vec![queue.clone()]);
    assert_eq!(allocations(&actions), vec![(queue.key, vec![1])]);
    assert!(preemptions(&actions).is_empty(), "{actions:?}");
}

#[test]
fn a_spot_lease_already_stopping_is_not_preempted_again() {
    let lease = LeaseView {
        stop_at: Some(T0 + 30),
        ..spot_lease(1, vec![0, 1], 10_000)
    };
    let queue = waiting(2, BidKind::Queue, 1_000, &[&lease]);
    let actions = plan_with(vec![lease], vec![queue]);
    assert!(preemptions(&actions).is_empty(), "{actions:?}");
}
