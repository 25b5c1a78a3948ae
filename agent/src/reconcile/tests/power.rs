//! Auto power and GPU faults through the reconcile loop, on the fake chain and SIMULATED GPUs.

use super::*;
use crate::gpu::faults::Recovery;
use crate::gpu::simulated::Demand;

/// Waits (in real time: the watcher is a thread) until the fault watcher has handed on what was
/// injected.
fn until_delivered(r: &Reconciler) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while r.faults.is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the fault never arrived"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[tokio::test(start_paused = true)]
async fn a_fatal_gpu_fault_ends_its_lease_at_once_pauses_the_machine_and_spares_the_others() {
    let h = Harness::new(&[0, 1]);
    h.chain
        .place_bid(bid(1, BidKind::Queue, 1, 1_000, power(250)));
    h.chain
        .place_bid(bid(2, BidKind::Queue, 1, 1_000, power(250)));
    let mut r = h.reconciler();
    h.run_for(&mut r, POLL).await;
    let (a, b) = (
        h.chain.lease_of_bid(Key([1; 32])).expect("allocated"),
        h.chain.lease_of_bid(Key([2; 32])).expect("allocated"),
    );
    h.run_for(&mut r, 70).await;
    assert_eq!(h.running().len(), 2);
    let gpu = a.gpu_indices[0] as u32;

    // An error the tenant's own program can cause (Xid 13, an illegal address) ends nothing.
    h.gpus.inject_xid(gpu, 13, None);
    until_delivered(&r);
    let actions = h.run_for(&mut r, POLL).await;
    assert!(!actions
        .iter()
        .any(|a| matches!(a, Action::Finish { .. } | Action::ReportFault { .. })));
    assert!(h.chain.faults().is_empty());

    // The GPU falls off the bus.
    h.gpus.inject_xid(gpu, 79, None);
    until_delivered(&r);
    let seen_at = h.chain.clock() + POLL as i64;
    let actions = h.run_for(&mut r, POLL).await;
    assert!(actions.contains(&Action::Finish {
        lease: a.key,
        exit_code: exit::GPU_FAULT
    }));
    assert!(actions.contains(&Action::ReportFault {
        gpu: gpu as u8,
        xid: 79
    }));
    h.run_for(&mut r, 2 * POLL).await;
    assert_eq!(h.chain.faults(), vec![(gpu as u8, 79)]);
    let last = h
        .chain
        .accepted()
        .into_iter()
        .rfind(|p| p.lease == a.key)
        .unwrap();
    assert_eq!(last.proof.exit_code, Some(exit::GPU_FAULT));
    // Nothing after the tick that saw the fault is billed.
    assert_eq!(last.window.1, seen_at);
    assert_eq!(h.chain.ended(), vec![a.key]);
    // The failed GPU is left as it is (a driver call to a GPU that fell off the bus may hang):
    // neither reset nor parked when its lease is cleaned up.
    assert!(!r.state().leases.contains_key(&a.key));
    assert_eq!(h.applied(gpu), power(250));
    // The other lease runs on, proven every two intervals.
    assert_eq!(h.running().len(), 1);
    h.run_for(&mut r, 2 * INTERVAL as u64).await;
    assert!(proven_intervals(&h, b.key).len() >= 2);
    assert!(!r.state().leases.contains_key(&a.key));

    // The machine is paused: a new bid waits, though a GPU is free.
    h.chain
        .place_bid(bid(3, BidKind::Queue, 1, 1_000, power(250)));
    h.run_for(&mut r, 3 * POLL).await;
    assert!(h.chain.lease_of_bid(Key([3; 32])).is_none());
}

#[tokio::test(start_paused = true)]
async fn the_drivers_recovery_action_makes_any_xid_fatal() {
    let h = Harness::new(&[0]);
    let (mut r, lease) =
        allocated_and_started(&h, bid(1, BidKind::Queue, 1, 1_000, power(250))).await;
    h.gpus.inject_xid(0, 31, Some(Recovery::DrainAndReset));
    until_delivered(&r);
    let actions = h.run_for(&mut r, POLL).await;
    assert!(actions.contains(&Action::Finish {
        lease: lease.key,
        exit_code: exit::GPU_FAULT
    }));
    h.run_for(&mut r, POLL).await;
    assert_eq!(h.chain.faults(), vec![(0, 31)]);
}

/// Runs a lease of `bid` on one GPU whose work draws 200 W, 40 % memory-bound, its container
/// using its whole CPU share; returns the lease and the power limits seen at each tick.
async fn memory_bound_lease(h: &Harness, b: BidView, secs: u64) -> (LeaseView, Vec<u16>) {
    h.gpus
        .set_demand(
            0,
            Demand {
                draw_w: 200,
                memory_bound_pct: 40,
            },
        )
        .unwrap();
    let (mut r, lease) = allocated_and_started(h, b).await;
    let (id, _) = h.running().pop().unwrap();
    h.runtime.set_cpu_rate(&id, 2_000);
    let mut limits = Vec::new();
    for _ in 0..secs / POLL {
        h.run_for(&mut r, POLL).await;
        limits.push(h.applied(0).power_limit_w);
    }
    (lease, limits)
}

#[tokio::test(start_paused = true)]
async fn auto_power_lowers_the_limit_toward_the_work_and_the_proofs_state_the_saving() {
    let h = Harness::new(&[0]);
    let mut opted = bid(1, BidKind::Queue, 1, 1_000, power(300));
    opted.auto_power = Some(0);
    let (lease, limits) = memory_bound_lease(&h, opted, 6 * INTERVAL as u64).await;
    // Never above the stated 300 W nor below the GPU's least 100 W; lowered below the 200 W the
    // work draws, where its memory still keeps the pace.
    assert!(
        limits.iter().all(|&w| (100..=300).contains(&w)),
        "{limits:?}"
    );
    let held = *limits.last().unwrap();
    assert!(held < 200, "{limits:?}");
    let proofs: Vec<_> = h
        .chain
        .accepted()
        .into_iter()
        .filter(|p| p.lease == lease.key)
        .collect();
    assert!(proven_intervals(&h, lease.key).len() >= 5, "{proofs:?}");
    let saved: u64 = proofs.iter().map(|p| p.proof.energy_saved_j).sum();
    let used: u64 = proofs.iter().map(|p| p.proof.energy_j).sum();
    assert!(saved > 0, "saved {saved} J of {used} J");
    // What was saved and what was drawn never exceed what the work drew at its stated limit.
    let secs: u64 = proofs
        .iter()
        .map(|p| (p.window.1 - p.window.0) as u64)
        .sum();
    assert!(
        saved + used <= 200 * secs + 200 * POLL,
        "{saved} + {used} over {secs} s"
    );
    for p in &proofs {
        assert!(p.proof.peak_power_w[0] <= 300);
    }
}

#[tokio::test(start_paused = true)]
async fn without_auto_power_the_stated_limit_holds_and_nothing_is_claimed() {
    let h = Harness::new(&[0]);
    let (lease, limits) = memory_bound_lease(
        &h,
        bid(1, BidKind::Queue, 1, 1_000, power(300)),
        3 * INTERVAL as u64,
    )
    .await;
    assert!(limits.iter().all(|&w| w == 300), "{limits:?}");
    assert!(h
        .chain
        .accepted()
        .iter()
        .filter(|p| p.lease == lease.key)
        .all(|p| p.proof.energy_saved_j == 0));
}

#[tokio::test(start_paused = true)]
async fn a_lowered_limit_the_driver_refuses_turns_auto_power_off_at_the_stated_limit() {
    let h = Harness::new(&[0]);
    let mut opted = bid(1, BidKind::Queue, 1, 1_000, power(300));
    opted.auto_power = Some(500);
    h.gpus.set_load(0, 1_000).unwrap();
    // The driver acknowledges limits but keeps the stated one: the read-back catches it.
    let (mut r, lease) = allocated_and_started(&h, opted).await;
    h.gpus.stick_power_limit(0).unwrap();
    h.run_for(&mut r, 2 * INTERVAL as u64).await;
    assert_eq!(h.applied(0).power_limit_w, 300);
    assert!(r.auto_power_off.contains(&lease.key));
    assert!(proven_intervals(&h, lease.key).len() >= 2, "proofs go on");
}

#[tokio::test(start_paused = true)]
async fn a_leases_gpus_are_read_into_its_record_at_most_once_a_second_however_often_the_loop_wakes()
{
    let h = Harness::new(&[0]);
    let (mut r, lease) =
        allocated_and_started(&h, bid(1, BidKind::Queue, 1, 1_000, power(250))).await;
    let readings = |r: &Reconciler| {
        r.state().leases[&lease.key].power_log.gpus[0]
            .readings_mw
            .len()
    };
    let before = readings(&r);
    // Twenty wakes in two seconds (notifications, finished jobs): before, twenty readings,
    // and five of them could hold one boost transient as a "sustained" peak.
    for _ in 0..20 {
        tokio::time::advance(Duration::from_millis(100)).await;
        r.tick(false).await.unwrap();
    }
    assert_eq!(readings(&r) - before, 2);
}

/// Issue 31, part 5: a tick that only reads the GPUs leaves the state file as it is (every tick
/// rewrote it, twice fsynced, before); the readings go to the lease's journal, and an agent
/// killed in the middle of an interval comes back with every reading it had taken.
#[tokio::test(start_paused = true)]
async fn readings_go_to_the_journal_not_the_state_file_and_a_kill_loses_none() {
    let h = Harness::new(&[0]);
    let (mut r, lease) =
        allocated_and_started(&h, bid(1, BidKind::Queue, 1, 1_000, power(250))).await;
    let file = h.dir.path().join("state.json");
    let before = r.state().leases[&lease.key].clone();
    let written = std::fs::read(&file).unwrap();
    // Six ticks inside the lease's first interval (it started one poll into it).
    h.run_for(&mut r, 6 * POLL).await;
    let record = r.state().leases[&lease.key].clone();
    assert_eq!(record.open_interval, before.open_interval, "one interval");
    assert_eq!(record.samples, before.samples + 6, "a reading a tick");
    assert_eq!(
        std::fs::read(&file).unwrap(),
        written,
        "the state file is not rewritten for readings"
    );
    let journal = crate::readings::path(h.dir.path(), &lease.key);
    assert!(journal.exists());

    // Killed: nothing saved since. The next agent has every reading back.
    drop(r);
    let mut r = h.reconciler();
    let back = &r.state().leases[&lease.key];
    assert_eq!(
        (back.samples, back.utilisation_sum_pct, &back.power_log),
        (
            record.samples,
            record.utilisation_sum_pct,
            &record.power_log
        )
    );
    // Once the interval closes (and is saved), its journal is cleared.
    h.run_for(&mut r, INTERVAL as u64).await;
    let closed = &r.state().leases[&lease.key];
    assert!(closed.open_interval > record.open_interval);
    let saved: crate::state::AgentState =
        serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(saved.without_readings(), r.state().without_readings());
    let lines = std::fs::read_to_string(&journal).unwrap_or_default();
    assert!(
        lines
            .lines()
            .all(|l| l.starts_with(&format!("{} ", closed.open_interval))),
        "only the open interval's readings: {lines}"
    );
}
