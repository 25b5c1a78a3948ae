//! Honest deadlines, on the SBF build in LiteSVM: a bid starts by its latest start (its deadline
//! less the shortest run its client accepts) or never, so a lease is never shorter than its
//! client agreed to; a client who accepted a shorter run may be started later, and then runs
//! until its deadline; a bid past its latest start can only be pruned. Every refused step is
//! checked to move nothing.

use gpu_market_tests::lease_fixture;

use gpu_market::errors::MarketError;
use gpu_market::instructions::PlaceBidArgs;
use gpu_market::state::{Bid, Lease, Machine, Market};
use gpu_market_sdk::placement::earliest_start;
use lease_fixture::*;
use solana_pubkey::Pubkey;

const HOUR: u32 = 3_600;

/// A one-GPU queue bid for an hour that must end within two hours from now, accepting runs of
/// `min_secs` or more.
fn within_two_hours(f: &mut Fixture, min_secs: u32) -> PlaceBidArgs {
    PlaceBidArgs {
        max_duration_secs: HOUR,
        min_duration_secs: min_secs,
        deadline: f.ctx.now() + 2 * HOUR as i64,
        ..f.queue_args(1, 8)
    }
}

/// Each bid by its own client, so that the market's cap on one client's GPUs plays no part.
fn placed(f: &mut Fixture, args: PlaceBidArgs) -> (Wallet, Pubkey) {
    let c = f.client(100 * TOKEN, 0);
    let bid = f.place(&c, args);
    (c, bid)
}

/// Before this rule, `allocate` took a bid until its deadline and cut its run there: a bid for an
/// hour within two hours could be started at the last minute and run one minute.
#[test]
fn a_bid_starts_by_its_latest_start_or_never_and_runs_shorter_only_with_consent() {
    let mut f = fixture();
    let args = within_two_hours(&mut f, HOUR);
    let deadline = args.deadline;
    let (_, on_time) = placed(&mut f, args.clone());
    let (late, too_late) = placed(&mut f, args);
    // Its client accepts half an hour: it may start until 90 minutes from now.
    let args = within_two_hours(&mut f, HOUR / 2);
    let (_, consenting) = placed(&mut f, args.clone());
    let (last, consenting_too_late) = placed(&mut f, args);
    let bid: Bid = f.ctx.account(&on_time);
    assert_eq!(bid.latest_start(), deadline - HOUR as i64);

    // At its latest start the bid starts, and runs its whole hour.
    f.ctx.advance_time(bid.latest_start() - f.ctx.now());
    let lease = f.allocate(on_time, &[0]).expect("at its latest start");
    let lease: Lease = f.ctx.account(&lease);
    assert_eq!(lease.ends_at - lease.started_at, HOUR as i64);

    // A second later the same bid would run 59:59, which its client did not accept: refused.
    f.ctx.advance_time(1);
    let before = f.ledger(&late);
    let err = f.allocate(too_late, &[1]).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::LatestStartPassed));
    assert_eq!(
        f.ledger(&late),
        before,
        "a refused allocation moves nothing"
    );

    // The bid that accepted a shorter run starts now, and runs until its deadline.
    let lease = f.allocate(consenting, &[1]).expect("consented");
    let lease: Lease = f.ctx.account(&lease);
    assert_eq!(lease.ends_at, deadline);
    assert_eq!(lease.ends_at - lease.started_at, HOUR as i64 - 1);

    // Past its own latest start, not even that one starts.
    let bid: Bid = f.ctx.account(&consenting_too_late);
    f.ctx.advance_time(bid.latest_start() + 1 - f.ctx.now());
    let before = f.ledger(&last);
    let err = f.allocate(consenting_too_late, &[2]).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::LatestStartPassed));
    assert_eq!(
        f.ledger(&last),
        before,
        "a refused allocation moves nothing"
    );
}

/// The shortest run a client accepts lengthens how long its bid may wait: placement bounds that
/// wait by the market's cap and charges its escrow, from the latest start.
#[test]
fn the_wait_a_bid_may_take_is_counted_to_its_latest_start() {
    let mut f = fixture();
    let max_wait = f
        .ctx
        .account::<gpu_market::state::Market>(&f.market)
        .max_wait_secs() as i64;
    let c = f.client(1_000 * TOKEN, 0);
    // Its latest start one second past the cap: refused, though deadline less duration is not.
    let far = PlaceBidArgs {
        max_duration_secs: 2 * HOUR,
        min_duration_secs: HOUR,
        deadline: f.ctx.now() + max_wait + HOUR as i64 + 1,
        ..f.queue_args(1, 8)
    };
    assert!(far.deadline - (far.max_duration_secs as i64) - f.ctx.now() <= max_wait);
    let before = f.ledger(&c);
    let placement = f.placement(&c, far.clone());
    let err = f.ctx.run(&placement).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::DeadlineTooFar));
    assert_eq!(f.ledger(&c), before, "a refused bid moves nothing");

    // At the cap it is placed, and its escrow covers its run and its wait until its latest
    // start: 2 tokens per GPU-hour for 2 hours, and for `max_wait` seconds.
    let at_cap = PlaceBidArgs {
        deadline: far.deadline - 1,
        ..far
    };
    let bid = f.place(&c, at_cap);
    let b: Bid = f.ctx.account(&bid);
    assert_eq!(b.latest_start(), b.placed_at + max_wait);
    // Each part rounded up to a whole base unit.
    let cost = |secs: i64| (2 * TOKEN * secs as u64).div_ceil(HOUR as u64);
    assert_eq!(b.escrow, cost(2 * HOUR as i64) + cost(max_wait));
}

/// `bid explain`'s estimate of a waiting bid's start (`placement::earliest_start`) on the
/// program's accounts: the machine as `end_lease` leaves it when its running leases end, in
/// order, by the fit rule. Leases of GPUs 0–1 (an hour) and 2–3 (two hours): one GPU frees at
/// the first end, all four at the second; a bid whose latest start comes before has none.
#[test]
fn a_waiting_bid_could_start_when_running_leases_free_enough_of_its_machine() {
    let mut f = fixture();
    let args = f.queue_args(2, 24);
    let (_, first) = placed(&mut f, args);
    let args = PlaceBidArgs {
        max_duration_secs: 2 * HOUR,
        min_duration_secs: 2 * HOUR,
        ..f.queue_args(2, 24)
    };
    let (_, second) = placed(&mut f, args);
    let first = f.allocate(first, &[0, 1]).expect("the first lease");
    let second = f.allocate(second, &[2, 3]).expect("the second lease");
    let (one, all) = (f.queue_args(1, 24), f.queue_args(4, 24));
    let (_, one) = placed(&mut f, one);
    let (_, all) = placed(&mut f, all);
    let tight = PlaceBidArgs {
        deadline: f.ctx.now() + 2 * HOUR as i64,
        ..f.queue_args(4, 24)
    };
    let (_, tight) = placed(&mut f, tight);

    let now = f.ctx.now();
    let market: Market = f.ctx.account(&f.market);
    let machines = vec![(f.machine, f.ctx.account::<Machine>(&f.machine))];
    let leases: Vec<Lease> = [first, second].iter().map(|l| f.ctx.account(l)).collect();
    let start =
        |bid: &Pubkey| earliest_start(&market, &f.ctx.account::<Bid>(bid), now, &machines, &leases);
    assert_eq!(start(&one), Some((leases[0].ends_at, f.machine)));
    assert_eq!(start(&all), Some((leases[1].ends_at, f.machine)));
    // Its latest start (an hour from now) comes before the GPUs free up.
    assert_eq!(start(&tight), None);
}
