//! CPU and memory besides GPUs: a machine declares what it gives its leases in all, a bid
//! reserves some, its lease holds that until it ends, and the fit rule (for the chosen bid and
//! for every book entry ranked above it) counts it. On the SBF build in LiteSVM.

use gpu_market_tests::lease_fixture;

use gpu_market::errors::MarketError;
use gpu_market::instructions::PlaceBidArgs;
use gpu_market::state::{Lease, Machine};
use lease_fixture::*;

const GIB: u32 = 1_024;

/// The fixture's machine, giving its leases 8 cores and 32 GiB in all.
fn machine_with_host() -> Fixture {
    let mut f = fixture();
    f.update_machine(|terms| {
        terms.cpu_milli = 8_000;
        terms.memory_mib = 32 * GIB;
    });
    f
}

/// A one-GPU queue bid reserving `cpu_milli` and `memory_mib`.
fn asking(f: &mut Fixture, cpu_milli: u32, memory_mib: u32) -> PlaceBidArgs {
    PlaceBidArgs {
        cpu_milli,
        memory_mib,
        ..f.queue_args(1, 8)
    }
}

fn held(f: &Fixture) -> (u32, u32) {
    let m: Machine = f.ctx.account(&f.machine);
    (m.used_cpu_milli, m.used_memory_mib)
}

#[test]
fn a_lease_holds_the_cpu_and_memory_its_bid_reserves_until_it_ends() {
    let mut f = machine_with_host();
    let c = f.client(100 * TOKEN, 0);
    let d = f.client(100 * TOKEN, 0);
    let a = asking(&mut f, 6_000, 8 * GIB);
    let first = f.place(&c, a);
    let a = asking(&mut f, 4_000, 4 * GIB);
    let too_much_cpu = f.place(&d, a);
    let a = asking(&mut f, 1_000, 28 * GIB);
    let too_much_memory = f.place(&d, a);
    // More cores than the machine gives: this machine is no witness for it.
    let a = asking(&mut f, 9_000, GIB);
    let err = f.ctx.run(&f.placement(&d, a.clone())).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::NoRoom));
    let beyond = f.place_elsewhere(&d, a);
    let a = asking(&mut f, 2_000, 4 * GIB);
    let small = f.place(&c, a);

    let lease = f.allocate(first, &[0]).expect("6 of 8 cores");
    let l: Lease = f.ctx.account(&lease);
    assert_eq!((l.cpu_milli, l.memory_mib), (6_000, 8 * GIB));
    assert_eq!(held(&f), (6_000, 8 * GIB));

    // 2 cores and 24 GiB are left: bids reserving more are refused, and nothing moves.
    for bid in [too_much_cpu, too_much_memory] {
        let err = f.allocate(bid, &[1]).unwrap_err();
        assert_eq!(err.custom_code(), code(MarketError::GpusBusy));
        assert_eq!(held(&f), (6_000, 8 * GIB));
    }
    // More than the machine gives its leases at all: no room, whatever runs.
    let err = f.allocate(beyond, &[1]).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::NoRoom));

    // Ranked above `small`, another client's bids that need more CPU or memory than is free do
    // not fit, by their book entries alone: `small` runs without any evidence about them (one
    // that fitted would need its client's stake as evidence, and would keep `small` waiting).
    let agent = f.agent.insecure_clone();
    let a = f.allocate_ix(&agent, small, &[1]);
    assert!(a.evidence.is_empty(), "{:?}", a.evidence);
    f.send_allocate(&a).expect("2 cores and 4 GiB fit");
    assert_eq!(held(&f), (8_000, 12 * GIB));

    // The first lease ends: what it held is free again, and the next bid in line runs.
    f.ctx.advance_time(INTERVAL);
    let mut last = f.proof(&lease, 0);
    last.exit_code = Some(0);
    f.submit(lease, last).expect("the final proof");
    f.close(&c.key.insecure_clone(), lease, c.tokens, false)
        .expect("end_lease");
    assert_eq!(held(&f), (2_000, 4 * GIB));
    f.allocate(too_much_cpu, &[0])
        .expect("4 cores are free now");
    assert_eq!(held(&f), (6_000, 8 * GIB));
}

#[test]
fn a_spot_bid_reserving_more_than_the_machine_gives_is_refused_at_placement() {
    let mut f = machine_with_host();
    let c = f.client(100 * TOKEN, 0);
    let args = PlaceBidArgs {
        memory_mib: 33 * GIB,
        ..f.spot_args(100 * TOKEN)
    };
    let before = f.ctx.token_balance(&c.tokens);
    let p = f.placement(&c, args);
    let err = f.ctx.run(&p).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::NoRoom));
    assert_eq!(f.ctx.token_balance(&c.tokens), before, "no funds moved");
    assert!(!f.ctx.account_exists(&p.bid()));
    let fits = PlaceBidArgs {
        memory_mib: 32 * GIB,
        cpu_milli: 8_000,
        ..f.spot_args(100 * TOKEN)
    };
    let bid = f.place(&c, fits);
    f.allocate(bid, &[0, 1, 2, 3]).expect("the whole machine");
    assert_eq!(held(&f), (8_000, 32 * GIB));
}

#[test]
fn a_machine_that_gives_no_cpu_takes_only_bids_that_reserve_none() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    let a = asking(&mut f, 500, 0);
    let reserving = f.place_elsewhere(&c, a);
    let a = asking(&mut f, 0, 0);
    let plain = f.place(&c, a);
    let err = f.allocate(reserving, &[0]).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::NoRoom));
    let lease = f
        .allocate(plain, &[0])
        .expect("nothing reserved, nothing needed");
    let l: Lease = f.ctx.account(&lease);
    assert_eq!((l.cpu_milli, l.memory_mib), (0, 0));
}

/// Issue 30, fault 7: a lease that reserves no CPU or memory holds its GPU memory's share of
/// what the machine gives (8 of the 4 × 24 GiB here: a twelfth, 666 millicores and 2,730 MiB)
/// instead of nothing, so the leases of a machine cannot together be given more than it has.
/// Before, such a lease held nothing and ran beside leases that had reserved the whole machine.
#[test]
fn a_lease_that_reserves_nothing_holds_its_gpus_share_of_the_machine() {
    let mut f = machine_with_host();
    let c = f.client(100 * TOKEN, 0);
    let d = f.client(100 * TOKEN, 0);
    let a = asking(&mut f, 8_000, 8 * GIB);
    let greedy = f.place(&c, a);
    let a = asking(&mut f, 0, 0);
    let plain = f.place(&d, a);
    let first = f.allocate(greedy, &[0]).expect("all 8 cores");
    let err = f.allocate(plain, &[1]).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::GpusBusy));
    assert_eq!(held(&f), (8_000, 8 * GIB), "nothing moved");

    f.ctx.advance_time(INTERVAL);
    let mut last = f.proof(&first, 0);
    last.exit_code = Some(0);
    f.submit(first, last).expect("the final proof");
    f.close(&c.key.insecure_clone(), first, c.tokens, false)
        .expect("end_lease");
    let lease = f.allocate(plain, &[1]).expect("its share is free now");
    let l: Lease = f.ctx.account(&lease);
    assert_eq!((l.cpu_milli, l.memory_mib), (666, 2_730));
    assert_eq!(held(&f), (666, 2_730));
}
