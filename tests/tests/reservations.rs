//! Reservations (EASY backfilling), on the SBF build in LiteSVM: a 16-GPU bid in a busy market
//! gets the GPUs of a machine from the earliest time they are all free; smaller bids run around
//! it only where they end by then or keep off its GPUs and leave it its CPU and memory, so it
//! starts at its reservation; an agent that tries to pass it is refused, and so is an extension
//! that would run into it. Who may reserve what, and when a reservation stops holding, are the
//! program's rules, each refusal checked to move nothing.

use gpu_market_tests::lease_fixture;
use gpu_market_tests::program_test::Failure;

use gpu_market::errors::MarketError;
use gpu_market::instructions::PlaceBidArgs;
use gpu_market::state::{Bid, GpuSpec, Lease, Machine, MachineNetwork, MachineStatus, Market};
use gpu_market_sdk::{
    CloseLease, CloseMachine, ExtendLease, Heartbeat, PlaceGangBid, Reserve, ReserveGang, Unreserve,
};
use lease_fixture::*;
use solana_keypair::Keypair;
use solana_pubkey::Pubkey;

/// 16 GPUs of class 0, 24 GiB each: 0 to 11 in one topology group, 12 to 15 in another.
fn sixteen() -> Vec<GpuSpec> {
    (0..16u8)
        .map(|i| GpuSpec {
            uuid: [i + 1; 16],
            class: 0,
            topology_group: i / 12,
            ..gpus()[0]
        })
        .collect()
}

/// The fixture's machine with 16 GPUs and `cpu_milli` of CPU for its leases, and a second
/// 16-GPU machine of the host's, paused (it counts among the GPUs offered, so a 16-GPU bid is
/// within the anti-monopoly cap's half).
fn busy_market(cpu_milli: u32) -> Fixture {
    let mut f = fixture();
    f.update_machine(|t| {
        t.gpus = sixteen();
        t.cpu_milli = cpu_milli;
    });
    let spare = f.other_machine(1, |t| t.gpus = sixteen());
    f.set_status(spare, MachineStatus::Paused);
    // The cap counts the GPUs offered when the billing interval began.
    f.ctx.advance_time(INTERVAL);
    f
}

/// A queue bid of `gpus` GPUs for `secs` (and no shorter run), asking `cpu_milli` of CPU.
fn args(f: &mut Fixture, gpus: u8, secs: u32, cpu_milli: u32) -> PlaceBidArgs {
    PlaceBidArgs {
        max_duration_secs: secs,
        min_duration_secs: secs,
        cpu_milli,
        ..f.queue_args(gpus, 24)
    }
}

/// Every lease of `leases` that is still open.
fn open(f: &Fixture, leases: &[Pubkey]) -> Vec<(Pubkey, Lease)> {
    leases
        .iter()
        .filter(|k| f.ctx.account_exists(k))
        .map(|k| (*k, f.ctx.account(k)))
        .collect()
}

/// `reserve` of `bid` on the fixture's machine, whose running leases are among `leases`, with
/// `holding` as the machines holding the entries above it.
fn reserve(
    f: &mut Fixture,
    bid: Pubkey,
    leases: &[(Pubkey, Lease)],
    holding: Vec<Pubkey>,
) -> Result<(), Failure> {
    let machine = f.machine;
    reserve_on(f, machine, bid, leases, holding)
}

/// [`reserve`] on `machine`.
fn reserve_on(
    f: &mut Fixture,
    machine: Pubkey,
    bid: Pubkey,
    leases: &[(Pubkey, Lease)],
    holding: Vec<Pubkey>,
) -> Result<(), Failure> {
    let b: Bid = f.ctx.account(&bid);
    let ix = Reserve::of(
        f.market,
        f.queue_book,
        (machine, bid),
        b.reserved_on,
        leases,
        holding,
    );
    f.ctx.run(&ix).map(|_| ())
}

/// `extend_lease` of `lease` by `secs`, by its client `c`.
fn extend(f: &mut Fixture, c: &Wallet, lease: Pubkey, secs: u32) -> Result<(), Failure> {
    let l: Lease = f.ctx.account(&lease);
    let m: Market = f.ctx.account(&f.market);
    f.ctx
        .run(&ExtendLease::of(&c.key, (lease, &l), &m, c.tokens, secs))
        .map(|_| ())
}

/// Proves every lease of `leases` interval by interval until `until` (all started together, at
/// `started`), then settles those that ended.
fn run_until(f: &mut Fixture, leases: &[Pubkey], started: i64, until: i64) {
    let agent = f.agent.insecure_clone();
    let leases: Vec<(Pubkey, &Keypair)> = leases.iter().map(|l| (*l, &agent)).collect();
    run_until_by(f, &leases, started, until);
}

/// [`run_until`], each lease proven by the agent beside it.
fn run_until_by(f: &mut Fixture, leases: &[(Pubkey, &Keypair)], started: i64, until: i64) {
    let mut k = 0;
    while started + (k as i64 + 1) * INTERVAL <= until {
        f.ctx
            .advance_time(started + (k as i64 + 1) * INTERVAL - f.ctx.now());
        for (lease, agent) in leases {
            let Some((_, l)) = open(f, &[*lease]).pop() else {
                continue;
            };
            if l.proven_until < l.ends_at {
                let p = f.proof(lease, k);
                f.submit_with(agent, *lease, p).expect("submit_usage");
                f.claim(l.machine).expect("claim_pay");
            }
        }
        k += 1;
    }
    let leases: Vec<Pubkey> = leases.iter().map(|(l, _)| *l).collect();
    let leases = &leases[..];
    let keeper = f.ctx.wallet(1);
    let market: Market = f.ctx.account(&f.market);
    for (lease, l) in open(f, leases) {
        if l.proven_until >= l.ends_at {
            let m: Machine = f.ctx.account(&l.machine);
            let close = CloseLease::of(&keeper, (lease, &l), &m, &market, None, false);
            f.ctx.run(&close).expect("end_lease");
        }
    }
}

/// One-GPU fillers on GPUs `0..gpus` of the fixture's machine, each for `secs.0`, and of
/// `other` (started by its agent), each for `secs.1`: their leases on each.
fn fill_both(
    f: &mut Fixture,
    gpus: u8,
    (other, agent): (Pubkey, &Keypair),
    secs: (u32, u32),
) -> (Vec<Pubkey>, Vec<Pubkey>) {
    let filler = f.client(1_000 * TOKEN, 0);
    let (mut here, mut there) = (Vec::new(), Vec::new());
    for g in 0..gpus {
        let x = args(f, 1, secs.0, 0);
        let bid = f.place(&filler, x);
        here.push(f.allocate(bid, &[g]).expect("a filler here"));
        let x = args(f, 1, secs.1, 0);
        let bid = f.place(&filler, x);
        let ix = f.ctx.allocation(agent, other, bid, &[g]);
        there.push(f.send_allocate(&ix).expect("a filler there"));
    }
    (here, there)
}

/// Before reservations, the 20-minute bid ran on the four idle GPUs at once, and the 16-GPU
/// bid above it could start only when it ended (and a stream of such bids could keep it
/// waiting until it expired).
#[test]
fn a_16_gpu_bid_starts_at_its_reservation_while_smaller_bids_backfill_around_it() {
    let mut f = busy_market(0);
    // Twelve 10-minute one-GPU leases of three clients: four GPUs idle.
    let mut leases = Vec::new();
    for c in 0..3 {
        let filler = f.client(100 * TOKEN, 0);
        for g in 0..4u8 {
            let a = args(&mut f, 1, 600, 0);
            let bid = f.place(&filler, a);
            leases.push(f.allocate(bid, &[c * 4 + g]).expect("a filler"));
        }
    }
    let started = f.ctx.now();
    let big_client = f.client(1_000 * TOKEN, 0);
    let mut a = args(&mut f, 16, 3_600, 0);
    a.urgency_premium = TOKEN;
    let big = f.place(&big_client, a);
    let small = f.client(100 * TOKEN, 0);
    let a = args(&mut f, 1, 1_200, 0);
    let long = f.place(&small, a);
    let a = args(&mut f, 1, 300, 0);
    let short = f.place(&small, a);

    // Only with every lease of the machine: the start is computed from their ends.
    let ledger = f.ledger(&big_client);
    let some = open(&f, &leases[1..]);
    let err = reserve(&mut f, big, &some, vec![]).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::LeasesMissing));
    assert_eq!(
        f.ledger(&big_client),
        ledger,
        "a refused step moves nothing"
    );
    let all = open(&f, &leases);
    reserve(&mut f, big, &all, vec![]).expect("reserve");
    println!(
        "reserve with 12 leases on the machine and 2 entries below: {} compute units",
        f.ctx.compute_units["reserve"]
    );
    let m: Machine = f.ctx.account(&f.machine);
    assert_eq!(m.reservation.bid, big);
    assert_eq!(m.reservation.start, started + 600, "when the fillers end");
    assert_eq!(m.reservation.gpus, u16::MAX, "all sixteen");
    assert_eq!(f.ctx.account::<Bid>(&big).reserved_on, f.machine);

    // The 20-minute bid would run past the start on reserved GPUs: refused, moving nothing.
    let ledger = f.ledger(&small);
    let err = f.allocate(long, &[12]).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::GpusReserved));
    assert_eq!(f.ledger(&small), ledger);
    // The 5-minute one ends before it: it backfills, though the longer bid ranks above it.
    let backfill = f.allocate(short, &[12]).expect("backfill");
    // Extended past the start, it would delay the reserved bid (the longer bid gone, which the
    // extension would pass in the queue first).
    f.cancel(&small, long).expect("cancel_bid");
    let err = extend(&mut f, &small, backfill, 600).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::GpusReserved));
    assert_eq!(f.ctx.account::<Lease>(&backfill).ends_at, started + 300);

    // At the start every GPU is free, and the 16-GPU bid starts then.
    leases.push(backfill);
    run_until(&mut f, &leases, started, started + 600);
    assert_eq!(f.ctx.now(), started + 600);
    let lease = f
        .allocate(big, &(0..16).collect::<Vec<u8>>())
        .expect("the reserved bid starts at its reservation");
    assert_eq!(f.ctx.account::<Lease>(&lease).started_at, started + 600);
    let m: Machine = f.ctx.account(&f.machine);
    assert!(!m.reservation.is_set(), "its reservation is spent");
}

/// A lease that runs past the start may use the GPUs the reserved bid does not need, but only
/// with the CPU and memory it leaves; the reserved bid starts at its start all the same.
#[test]
fn backfill_past_the_start_keeps_off_its_gpus_and_leaves_it_its_cpu() {
    let mut f = busy_market(16_000);
    let mut leases = Vec::new();
    let filler = f.client(100 * TOKEN, 0);
    for g in 0..12u8 {
        let a = args(&mut f, 1, 600, 100);
        let bid = f.place(&filler, a);
        leases.push(f.allocate(bid, &[g]).expect("a filler"));
    }
    let started = f.ctx.now();
    let big_client = f.client(1_000 * TOKEN, 0);
    let mut a = args(&mut f, 8, 3_600, 12_000);
    a.urgency_premium = TOKEN;
    let big = f.place(&big_client, a);
    let all = open(&f, &leases);
    reserve(&mut f, big, &all, vec![]).expect("reserve");
    let m: Machine = f.ctx.account(&f.machine);
    assert_eq!(m.reservation.start, started + 600);
    assert_eq!(m.reservation.gpus.count_ones(), 8);
    assert_eq!(m.reservation.cpu_milli, 12_000);
    // Eight of the twelve busy GPUs of the first topology group, free at the start: the
    // other group's four GPUs, idle now, it will not need.
    assert_eq!(m.reservation.gpus & 0xF000, 0);
    let spare: Vec<u8> = (12..16u8).collect();
    let small = f.client(100 * TOKEN, 0);
    // An hour on a spare GPU with 3 of the 4 cores the reserved bid leaves: it runs.
    let a = args(&mut f, 1, 3_600, 3_000);
    let hour = f.place(&small, a);
    let hour_lease = f
        .allocate(hour, &spare[..1])
        .expect("backfill on a spare GPU");
    assert_eq!(
        f.ctx
            .account::<Machine>(&f.machine)
            .reservation
            .after_cpu_milli,
        3_000
    );
    // Another hour with 2 more cores: the reserved bid would lack CPU at its start.
    let a = args(&mut f, 1, 3_600, 2_000);
    let greedy = f.place(&small, a);
    let ledger = f.ledger(&small);
    let err = f.allocate(greedy, &spare[1..2]).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::GpusReserved));
    assert_eq!(f.ledger(&small), ledger);
    f.cancel(&small, greedy).expect("cancel_bid");

    run_until(&mut f, &leases, started, started + 600);
    let lease = f
        .allocate(big, &bit_list(m.reservation.gpus))
        .expect("the reserved bid starts at its reservation");
    let l: Lease = f.ctx.account(&lease);
    assert_eq!(l.started_at, started + 600);
    assert!(f.ctx.account_exists(&hour_lease), "the backfill runs on");
}

/// The GPUs of a mask, lowest first.
fn bit_list(mask: u16) -> Vec<u8> {
    (0..16u8).filter(|g| mask & (1 << g) != 0).collect()
}

/// Who may hold what: never a bid that fits now, never one below an entry the machine could
/// run that no machine holds, and a reservation holds until its bid starts, leaves or it
/// lapses (the market's silence window after its start); then anyone may clear it, and an
/// agent no longer honours it.
#[test]
fn a_reservation_is_for_the_best_waiting_bid_and_holds_until_it_starts_leaves_or_lapses() {
    let mut f = busy_market(0);
    let filler = f.client(100 * TOKEN, 0);
    let mut leases = Vec::new();
    for g in 0..12u8 {
        let a = args(&mut f, 1, 600, 0);
        let bid = f.place(&filler, a);
        leases.push(f.allocate(bid, &[g]).expect("a filler"));
    }
    let all = open(&f, &leases);
    let c = f.client(1_000 * TOKEN, 0);
    // A bid that fits now is allocated, not reserved.
    let a = args(&mut f, 2, 3_600, 0);
    let fits = f.place(&c, a);
    let err = reserve(&mut f, fits, &all, vec![]).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::BidFitsNow));
    f.cancel(&c, fits).expect("cancel_bid");

    let mut a = args(&mut f, 16, 3_600, 0);
    a.urgency_premium = 2 * TOKEN;
    let first = f.place(&c, a);
    let mut a = args(&mut f, 15, 3_600, 0);
    a.urgency_premium = TOKEN;
    let second = f.place(&c, a);
    // The 15-GPU bid ranks below the 16-GPU one, which no machine holds.
    let ledger = f.ledger(&c);
    let err = reserve(&mut f, second, &all, vec![]).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::BetterBidUnreserved));
    assert_eq!(f.ledger(&c), ledger);
    reserve(&mut f, first, &all, vec![]).expect("the best is reserved");
    // Nobody clears a reservation that holds.
    let stranger_clears = |f: &mut Fixture| {
        let m: Machine = f.ctx.account(&f.machine);
        f.ctx.run(&Unreserve::of(f.market, (f.machine, &m)))
    };
    let err = stranger_clears(&mut f).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::ReservationHolds));

    // Its bid leaves (cancelled): the reservation holds nothing, and anyone clears it.
    f.cancel(&c, first).expect("cancel_bid");
    stranger_clears(&mut f).expect("unreserve");
    assert!(!f.ctx.account::<Machine>(&f.machine).reservation.is_set());
    reserve(&mut f, second, &all, vec![]).expect("the next best is reserved");

    // Not started by the end of the silence window after its start (the leases never end:
    // nobody proves them), it lapses: allocation no longer honours it, and it can be cleared.
    let m: Machine = f.ctx.account(&f.machine);
    let market: Market = f.ctx.account(&f.market);
    f.ctx
        .advance_time(m.reservation.start + market.silence_window_secs() - f.ctx.now());
    let err = stranger_clears(&mut f).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::ReservationHolds));
    let a = args(&mut f, 1, 3_600, 0);
    let late = f.client(100 * TOKEN, 0);
    let long = f.place(&late, a);
    let err = f.allocate(long, &[12]).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::GpusReserved));
    f.ctx.advance_time(1);
    f.allocate(long, &[12])
        .expect("a lapsed reservation holds nothing");
    assert!(!f.ctx.account::<Machine>(&f.machine).reservation.is_set());
}

/// A bid holds one machine: its reservation moves to another machine only where it starts
/// earlier (the old one is cleared in the same instruction), never back to a later one. So a
/// griefer who reserved it on a machine that frees late cannot keep it there.
#[test]
fn a_reservation_moves_only_to_a_machine_that_starts_the_bid_earlier() {
    let mut f = busy_market(0);
    let agent_b = solana_keypair::Keypair::new();
    f.ctx
        .svm
        .airdrop(&solana_signer::Signer::pubkey(&agent_b), 10_000_000_000)
        .unwrap();
    let b = f.other_machine(2, |t| {
        t.gpus = sixteen();
        t.agent = solana_signer::Signer::pubkey(&agent_b);
    });
    f.ctx.advance_time(INTERVAL);
    // Twelve GPUs of each machine busy: A's for half an hour, B's for ten minutes.
    let (on_a, on_b) = fill_both(&mut f, 12, (b, &agent_b), (1_800, 600));
    let now = f.ctx.now();
    let c = f.client(1_000 * TOKEN, 0);
    let mut a = args(&mut f, 16, 3_600, 0);
    a.urgency_premium = TOKEN;
    let big = f.place(&c, a);
    let (leases_a, leases_b) = (open(&f, &on_a), open(&f, &on_b));
    reserve(&mut f, big, &leases_a, vec![]).expect("parked on A");
    assert_eq!(
        f.ctx.account::<Machine>(&f.machine).reservation.start,
        now + 1_800
    );
    // B starts it twenty minutes earlier: it moves, A's is cleared.
    reserve_on(&mut f, b, big, &leases_b, vec![]).expect("moved to B");
    assert!(!f.ctx.account::<Machine>(&f.machine).reservation.is_set());
    let held = f.ctx.account::<Machine>(&b).reservation;
    assert_eq!((held.bid, held.start), (big, now + 600));
    assert_eq!(f.ctx.account::<Bid>(&big).reserved_on, b);
    // Back to A, later: refused, moving nothing.
    let err = reserve(&mut f, big, &leases_a, vec![]).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::ReservationHolds));
    assert_eq!(f.ctx.account::<Machine>(&b).reservation, held);
    assert!(!f.ctx.account::<Machine>(&f.machine).reservation.is_set());
}

/// Closes `machine` (the host's, retired, its leases ended): its account is gone.
fn close_machine(f: &mut Fixture, machine: Pubkey) {
    let owner = f.host.key.insecure_clone();
    f.ctx
        .run(&CloseMachine {
            owner: &owner,
            market: f.market,
            machine,
            spot_book: None,
        })
        .expect("close_machine");
    assert!(!f.ctx.account_exists(&machine));
}

/// A bid reserved on a machine whose host then retired and closed it is reserved again on
/// another: a closed machine holds nothing. Before, `reserve` had to show the machine the bid
/// was reserved on, whose account no longer deserialized, so the bid could never be reserved
/// again (it could still start by `allocate` when a machine fit it, and expire).
#[test]
fn a_bid_reserved_on_a_machine_since_closed_is_reserved_again_elsewhere() {
    let mut f = busy_market(0);
    let (b, agent_b) = f.other_machine_run_by(2, |t| t.gpus = sixteen());
    f.ctx.advance_time(INTERVAL);
    // Twelve GPUs of each machine busy: A's for an hour, B's for ten minutes.
    let (on_a, on_b) = fill_both(&mut f, 12, (b, &agent_b), (3_600, 600));
    let started = f.ctx.now();
    let c = f.client(1_000 * TOKEN, 0);
    let mut x = args(&mut f, 16, 3_600, 0);
    x.urgency_premium = TOKEN;
    let big = f.place(&c, x);
    let leases_b = open(&f, &on_b);
    reserve_on(&mut f, b, big, &leases_b, vec![]).expect("reserved on B");
    assert_eq!(f.ctx.account::<Bid>(&big).reserved_on, b);

    // B's host retires it before the start and closes it once its leases end.
    let by_b: Vec<(Pubkey, &Keypair)> = on_b.iter().map(|l| (*l, &agent_b)).collect();
    let agent_a = f.agent.insecure_clone();
    let by_a: Vec<(Pubkey, &Keypair)> = on_a.iter().map(|l| (*l, &agent_a)).collect();
    let both: Vec<(Pubkey, &Keypair)> = by_a.iter().chain(&by_b).cloned().collect();
    f.set_status(b, MachineStatus::Retired);
    run_until_by(&mut f, &both, started, started + 600);
    close_machine(&mut f, b);
    let a = f.machine;
    heartbeat(&mut f, &agent_a, a);

    // On A now, from when its fillers end.
    let leases_a = open(&f, &on_a);
    reserve(&mut f, big, &leases_a, vec![]).expect("reserved again, on A");
    let held = f.ctx.account::<Machine>(&f.machine).reservation;
    assert_eq!((held.bid, held.start), (big, started + 3_600));
    assert_eq!(f.ctx.account::<Bid>(&big).reserved_on, f.machine);
}

/// Eight GPUs of class 0, 24 GiB each, publishing a port for each lease (a gang's first port is
/// where its other parts reach its first).
fn eight(t: &mut gpu_market::state::MachineTerms) {
    t.gpus = sixteen()[..8].to_vec();
    t.network = MachineNetwork {
        host: "10.0.0.1".into(),
        ports_per_lease: 1,
        ..MachineNetwork::default()
    };
}

/// The fixture's machine A and machine B (its agent beside it), 8 GPUs each, and a paused
/// 16-GPU machine of the host's (it counts among the GPUs offered, so a 16-GPU gang is within
/// the anti-monopoly cap's half).
fn gang_market() -> (Fixture, Pubkey, Keypair) {
    let mut f = fixture();
    f.update_machine(eight);
    let (b, agent_b) = f.other_machine_run_by(1, eight);
    let spare = f.other_machine(2, |t| t.gpus = sixteen());
    f.set_status(spare, MachineStatus::Paused);
    f.ctx.advance_time(INTERVAL);
    (f, b, agent_b)
}

/// A gang of two parts of `gpus` GPUs for `secs`, its client paying a premium to rank first.
fn place_gang(f: &mut Fixture, c: &Wallet, gpus: u8, secs: u32) -> Pubkey {
    let mut a = args(f, gpus, secs, 0);
    a.ports = vec![29_500];
    a.urgency_premium = TOKEN;
    let p = PlaceGangBid {
        place: f.placement(c, a),
        parts: 2,
    };
    f.ctx.run(&p).expect("place_gang_bid");
    p.place.bid()
}

/// `reserve_gang` of `gang` on `parts`, whose running leases are among `leases`.
fn reserve_gang(
    f: &mut Fixture,
    gang: Pubkey,
    parts: &[Pubkey],
    leases: &[(Pubkey, Lease)],
) -> Result<(), Failure> {
    let b: Bid = f.ctx.account(&gang);
    let leases: Vec<Lease> = leases.iter().map(|(_, l)| l.clone()).collect();
    let ix = ReserveGang::of(
        f.market,
        f.queue_book,
        gang,
        b.reserved_on,
        (parts, &leases),
        vec![],
    );
    f.ctx.run(&ix).map(|_| ())
}

fn heartbeat(f: &mut Fixture, agent: &Keypair, machine: Pubkey) {
    f.ctx.run(&Heartbeat { agent, machine }).expect("heartbeat");
}

/// Before gang reservations, a gang waited for all its machines to be free at once while every
/// bid that fit one of them ran first, however long: it was passed over until it expired.
/// Now a 16-GPU gang holds GPUs on both its machines from the time both are free; smaller bids
/// run there only if they end by then, a bid ranked below it cannot take its machines over,
/// and it starts at its reservation.
#[test]
fn a_16_gpu_gang_starts_at_its_reservation_on_two_machines_while_smaller_bids_backfill() {
    let (mut f, b, agent_b) = gang_market();
    let a = f.machine;
    // Six of A's GPUs busy for ten minutes; B idle.
    let filler = f.client(100 * TOKEN, 0);
    let mut fillers = Vec::new();
    for g in 0..6u8 {
        let x = args(&mut f, 1, 600, 0);
        let bid = f.place(&filler, x);
        fillers.push(f.allocate(bid, &[g]).expect("a filler"));
    }
    let started = f.ctx.now();
    let c = f.client(1_000 * TOKEN, 0);
    let gang = place_gang(&mut f, &c, 8, 3_600);

    // A gang is reserved on all its machines at once, never one by one.
    let all = open(&f, &fillers);
    let ledger = f.ledger(&c);
    let err = reserve(&mut f, gang, &all, vec![]).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::GangNeedsReserveGang));
    let err = reserve_gang(&mut f, gang, &[a, b], &all[1..]).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::LeasesMissing));
    assert_eq!(f.ledger(&c), ledger, "a refused step moves nothing");
    assert!(!f.ctx.account::<Machine>(&b).reservation.is_set());

    reserve_gang(&mut f, gang, &[a, b], &all).expect("reserve_gang");
    println!(
        "reserve_gang on two machines with 6 leases: {} compute units",
        f.ctx.compute_units["reserve_gang"]
    );
    for m in [a, b] {
        let held = f.ctx.account::<Machine>(&m).reservation;
        assert_eq!(held.bid, gang);
        assert_eq!(held.start, started + 600, "when A's fillers end, on both");
        assert_eq!(held.gpus, 0xFF, "all eight");
    }
    assert_eq!(f.ctx.account::<Bid>(&gang).reserved_on, a);

    // On B, idle now: a bid that ends before the start backfills; one that would run past it
    // is refused on either machine, moving nothing.
    let small = f.client(100 * TOKEN, 0);
    let x = args(&mut f, 1, 300, 0);
    let short = f.place(&small, x);
    let x = f.ctx.allocation(&agent_b, b, short, &[0]);
    let backfill = f.send_allocate(&x).expect("backfill on B");
    let x = args(&mut f, 1, 1_200, 0);
    let long = f.place(&small, x);
    let ledger = f.ledger(&small);
    let x = f.ctx.allocation(&agent_b, b, long, &[1]);
    let err = f.send_allocate(&x).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::GpusReserved));
    let err = f.allocate(long, &[6]).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::GpusReserved));
    assert_eq!(f.ledger(&small), ledger);
    f.cancel(&small, long).expect("cancel_bid");

    // A bid ranked below the gang cannot take B over for itself.
    let x = args(&mut f, 8, 3_600, 0);
    let below = f.place(&small, x);
    let on_b = open(&f, &[backfill]);
    let err = reserve_on(&mut f, b, below, &on_b, vec![]).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::ReservationHolds));
    assert_eq!(f.ctx.account::<Machine>(&b).reservation.bid, gang);
    f.cancel(&small, below).expect("cancel_bid");

    // At the start both machines are free, and the gang starts on them then.
    let agent_a = f.agent.insecure_clone();
    let mut by: Vec<(Pubkey, &Keypair)> = fillers.iter().map(|l| (*l, &agent_a)).collect();
    by.push((backfill, &agent_b));
    run_until_by(&mut f, &by, started, started + 600);
    heartbeat(&mut f, &agent_a, a);
    heartbeat(&mut f, &agent_b, b);
    let x = f.ctx.gang_allocation(&agent_a, gang, &[a, b]);
    f.ctx
        .allocate_gang(&x)
        .expect("the gang starts at its reservation");
    for lease in x.leases() {
        assert_eq!(f.ctx.account::<Lease>(&lease).started_at, started + 600);
    }
    for m in [a, b] {
        assert!(!f.ctx.account::<Machine>(&m).reservation.is_set(), "spent");
    }
}

/// A gang's reservation moves only to machines that start it earlier, all its machines at
/// once: the earlier round's machines hold nothing from then on, and anyone may clear them.
#[test]
fn a_gang_reservation_moves_only_to_an_earlier_start_and_leaves_the_old_machines_free() {
    let (mut f, b, agent_b) = gang_market();
    let a = f.machine;
    let (c_machine, _agent_c) = f.other_machine_run_by(3, eight);
    // A busy for half an hour, B for ten minutes, C idle.
    let (on_a, on_b) = fill_both(&mut f, 4, (b, &agent_b), (1_800, 600));
    let now = f.ctx.now();
    let c = f.client(1_000 * TOKEN, 0);
    let gang = place_gang(&mut f, &c, 8, 3_600);
    let (leases_a, leases_b) = (open(&f, &on_a), open(&f, &on_b));
    let both: Vec<(Pubkey, Lease)> = leases_a.iter().chain(&leases_b).cloned().collect();
    reserve_gang(&mut f, gang, &[a, c_machine], &leases_a).expect("parked on A and C");
    assert_eq!(f.ctx.account::<Machine>(&a).reservation.start, now + 1_800);
    // B and C start it twenty minutes earlier: it moves.
    reserve_gang(&mut f, gang, &[b, c_machine], &both).expect("moved to B and C");
    for m in [b, c_machine] {
        let held = f.ctx.account::<Machine>(&m).reservation;
        assert_eq!((held.bid, held.start), (gang, now + 600));
    }
    assert_eq!(f.ctx.account::<Bid>(&gang).reserved_on, b);
    // Back to A and C, later: refused, moving nothing.
    let before = f.ctx.account::<Machine>(&b).reservation;
    let err = reserve_gang(&mut f, gang, &[a, c_machine], &both).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::ReservationHolds));
    assert_eq!(f.ctx.account::<Machine>(&b).reservation, before);
    // A's reservation is of the earlier round: it holds nothing, and a stranger clears it.
    let m: Machine = f.ctx.account(&a);
    assert_eq!(m.reservation.bid, gang, "still set");
    f.ctx
        .run(&Unreserve::of(f.market, (a, &m)))
        .expect("unreserve of the earlier round");
    assert!(!f.ctx.account::<Machine>(&a).reservation.is_set());
    // B's holds.
    let m: Machine = f.ctx.account(&b);
    let err = f.ctx.run(&Unreserve::of(f.market, (b, &m))).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::ReservationHolds));
}

/// A gang reserved on machines one of which its host then closed is reserved again on others,
/// the closed one shown as it is (gone). Before, `reserve_gang` could not read it, and the gang
/// could never be reserved again.
#[test]
fn a_gang_reserved_on_a_machine_since_closed_is_reserved_again_elsewhere() {
    let (mut f, b, agent_b) = gang_market();
    let a = f.machine;
    let (c_machine, agent_c) = f.other_machine_run_by(3, eight);
    // A busy for half an hour, C for ten minutes, B idle.
    let (on_a, on_c) = fill_both(&mut f, 4, (c_machine, &agent_c), (1_800, 600));
    let started = f.ctx.now();
    let c = f.client(1_000 * TOKEN, 0);
    let gang = place_gang(&mut f, &c, 8, 3_600);
    let leases_c = open(&f, &on_c);
    reserve_gang(&mut f, gang, &[c_machine, b], &leases_c).expect("reserved on C and B");
    assert_eq!(f.ctx.account::<Bid>(&gang).reserved_on, c_machine);

    // C's host retires it and closes it once its leases end.
    f.set_status(c_machine, MachineStatus::Retired);
    let agent_a = f.agent.insecure_clone();
    let mut by: Vec<(Pubkey, &Keypair)> = on_a.iter().map(|l| (*l, &agent_a)).collect();
    by.extend(on_c.iter().map(|l| (*l, &agent_c)));
    run_until_by(&mut f, &by, started, started + 600);
    close_machine(&mut f, c_machine);
    heartbeat(&mut f, &agent_a, a);
    heartbeat(&mut f, &agent_b, b);

    // On A and B now, from when A's fillers end.
    let leases_a = open(&f, &on_a);
    reserve_gang(&mut f, gang, &[a, b], &leases_a).expect("reserved again, on A and B");
    for m in [a, b] {
        let held = f.ctx.account::<Machine>(&m).reservation;
        assert_eq!((held.bid, held.start), (gang, started + 1_800));
    }
    assert_eq!(f.ctx.account::<Bid>(&gang).reserved_on, a);
}
