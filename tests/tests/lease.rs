//! Part 2 of the program: allocation by the market rules, the spot rule at interval boundaries,
//! hash-chained usage proofs and settlement, host silence, slashing and the idle flag, on the SBF
//! build in LiteSVM. Every rejected instruction is checked to move nothing.

use gpu_market_tests::lease_fixture;
use gpu_market_tests::program_test;

use anchor_lang::error::ErrorCode as AnchorErrorCode;
use gpu_market::errors::MarketError;
use gpu_market::instructions::UsageProofArgs;
use gpu_market::pda;
use gpu_market::state::{
    Bid, BidKind, BidStatus, Lease, Machine, MachineNetwork, MachineStatus, MachineTerms, Market,
    OverclockTerms, StakeAccount, BOOK_CAPACITY,
};
use lease_fixture::*;
use program_test::*;
use solana_pubkey::Pubkey;
use solana_signer::Signer;

#[test]
fn the_highest_scoring_feasible_bid_runs_and_the_program_checks_the_ones_above() {
    let mut f = fixture();
    let whale = f.client(200 * TOKEN, 100 * TOKEN);
    let minnow = f.client(100 * TOKEN, 0);
    let a = f.queue_args(2, 24);
    let high = f.place(&whale, a);
    let a = f.queue_args(2, 24);
    let low = f.place(&minnow, a);
    // A class-7-only bid with the most stake ranks first but fits no GPU here.
    let exotic_owner = f.client(600 * TOKEN, 500 * TOKEN);
    let mut a = f.queue_args(1, 8);
    a.accepted_classes = 1 << 7;
    let exotic = f.place_elsewhere(&exotic_owner, a);
    assert_eq!(book_order(&f.ctx, &f.queue_book), vec![exotic, high, low]);

    let before = f.balances(&minnow);
    // The program reads the book itself; it needs only the whale's stake, the one entry above
    // that fits (for the anti-monopoly cap). The exotic bid needs nothing.
    let agent = f.agent.insecure_clone();
    let mut a = f.allocate_ix(&agent, low, &[0, 1]);
    assert_eq!(
        a.evidence,
        vec![pda::stake(&f.market, &whale.key.pubkey()).0]
    );
    let evidence = std::mem::take(&mut a.evidence);
    let err = f.send_allocate(&a).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::CandidatesMissing));
    a.evidence = evidence;
    let err = f.send_allocate(&a).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::BetterBidFeasible));
    assert_eq!(
        f.balances(&minnow),
        before,
        "rejected allocations move nothing"
    );
    assert!(!f.ctx.account_exists(&pda::lease(&low).0));

    // The exotic bid fits no GPU here; the whale's is the best that fits.
    let lease = f.allocate(high, &[0, 1]).expect("allocate");
    let l: Lease = f.ctx.account(&lease);
    assert_eq!(
        (l.gpus(), l.client, l.kind),
        (&[0u8, 1][..], whale.key.pubkey(), BidKind::Queue)
    );
    assert_eq!(l.power_limits_w[..2], [300, 300]);
    assert_eq!(f.ctx.account::<Bid>(&high).status, BidStatus::Running);
    let m: Machine = f.ctx.account(&f.machine);
    assert_eq!(m.used_gib[..4], [24, 24, 0, 0]);
    let st: StakeAccount = f.ctx.account(&pda::stake(&f.market, &whale.key.pubkey()).0);
    assert_eq!((st.gpus_held, st.open_bids), (2, 0));
    // The whale's lease no longer ranks; the minnow's bid runs on the other group.
    f.allocate(low, &[2, 3]).expect("allocate the next");
    assert_eq!(book_order(&f.ctx, &f.queue_book), vec![exotic]);
    let market: Market = f.ctx.account(&f.market);
    // The machine's 4 GPUs and the witness's 16 (a paused machine still counts as offered).
    assert_eq!((market.gpus_offered, market.gpus_waiting), (4 + 16, 1));
}

#[test]
fn bids_share_one_gpu_by_whole_gib() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    let d = f.client(100 * TOKEN, 0);
    let a = f.queue_args(1, 12);
    let first = f.place(&c, a);
    let a = f.queue_args(1, 12);
    let second = f.place(&d, a);
    let a = f.queue_args(1, 1);
    let third = f.place(&d, a);
    f.allocate(first, &[0]).expect("first half of GPU 0");
    f.allocate(second, &[0]).expect("second half of GPU 0");
    assert_eq!(f.ctx.account::<Machine>(&f.machine).used_gib[0], 24);
    let err = f.allocate(third, &[0]).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::GpuCannotServe));
    f.allocate(third, &[1]).expect("GPU 1 has room");
}

#[test]
fn a_gpu_is_shared_only_by_leases_that_agree_on_its_overclock_terms() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    let d = f.client(100 * TOKEN, 0);
    let a = f.queue_args(1, 12);
    let first = f.place(&c, a);
    let mut a = f.queue_args(1, 12);
    a.overclock[0].power_limit_w = 250;
    let other_power = f.place(&d, a);
    let a = f.queue_args(1, 12);
    let same_terms = f.place(&c, a);
    f.allocate(first, &[0]).expect("GPU 0 at 300 W");
    assert_eq!(
        f.ctx.account::<Machine>(&f.machine).gpu_terms[0].power_limit_w,
        300
    );

    // The 250 W bid would fit GPU 0's free GiB, but GPU 0 runs at 300 W: refused, nothing moved.
    let before = f.ctx.account::<Machine>(&f.machine).used_gib;
    let err = f.allocate(other_power, &[0]).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::GpuCannotServe));
    assert_eq!(f.ctx.account::<Machine>(&f.machine).used_gib, before);
    f.allocate(other_power, &[1]).expect("a GPU of its own");
    f.allocate(same_terms, &[0])
        .expect("equal terms share GPU 0");

    // Once its leases end, a GPU forgets its terms.
    assert_eq!(f.ctx.account::<Machine>(&f.machine).used_gib[0], 24);
    f.ctx.advance_time(INTERVAL);
    for bid in [first, same_terms] {
        let lease = pda::lease(&bid).0;
        let mut last = f.proof(&lease, 0);
        last.exit_code = Some(0);
        f.submit(lease, last).expect("the final proof");
        let client = c.key.insecure_clone();
        f.close(&client, lease, c.tokens, false).expect("end_lease");
    }
    let m: Machine = f.ctx.account(&f.machine);
    assert_eq!(m.used_gib[0], 0);
    assert_eq!(m.gpu_terms[0], OverclockTerms::default());
}

#[test]
fn multi_gpu_bids_stay_in_one_topology_group_and_gpu_indices_are_checked() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    let a = f.queue_args(2, 8);
    let bid = f.place(&c, a);
    for (gpus, e) in [
        (vec![1u8, 2], MarketError::TopologySplit),
        (vec![0, 0], MarketError::DuplicateGpu),
        (vec![0, 9], MarketError::UnknownGpu),
        (vec![0], MarketError::BadGpuCount),
    ] {
        let err = f.allocate(bid, &gpus).unwrap_err();
        assert_eq!(err.custom_code(), code(e), "{gpus:?}");
    }
    f.allocate(bid, &[2, 3]).expect("one group");

    // When no single group has room, a split is the only choice and is allowed.
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    let a = f.queue_args(1, 20);
    let filler = f.place(&c, a);
    f.allocate(filler, &[0]).unwrap();
    let a = f.queue_args(1, 20);
    let filler = f.place(&c, a);
    f.allocate(filler, &[2]).unwrap();
    let other = f.client(100 * TOKEN, 0);
    let a = f.queue_args(2, 20);
    let wide = f.place(&other, a);
    f.allocate(wide, &[1, 3]).expect("split across groups");
}

#[test]
fn price_below_the_reserve_or_the_host_floor_does_not_run() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    // Base 1 token per GPU-hour: a queue bid below the reserve of every class it accepts could
    // run nowhere, so it is refused at placement, and moves nothing.
    let before = f.balances(&c);
    let mut a = f.queue_args(1, 8);
    a.price = TOKEN / 2;
    let cheap = f.placement(&c, a);
    let err = f.ctx.run(&cheap).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::PriceBelowReserve));
    assert!(!f.ctx.account_exists(&cheap.bid()));
    assert_eq!(f.balances(&c), before);
    assert!(book_order(&f.ctx, &f.queue_book).is_empty());

    // A host floor above the bid's price: allocate names the reason.
    f.update_machine(|terms| {
        terms.price_floor_per_gpu_hour = 3 * TOKEN;
        terms.electricity_cost_per_kwh = 0;
    });
    let a = f.queue_args(1, 8);
    let fair = f.place_elsewhere(&c, a);
    let before = f.balances(&c);
    let err = f.allocate(fair, &[0]).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::PriceBelowFloor));
    assert_eq!(f.balances(&c), before);
    f.update_machine(|terms| {
        terms.price_floor_per_gpu_hour = TOKEN;
        terms.electricity_cost_per_kwh = 0;
    });

    // A bid at exactly today's reserve is placed; at the next billing interval the market samples
    // the waiting GPUs (on its clock, whoever calls), the demand factor rises and the reserve
    // with it: the bid no longer pays enough.
    let mut a = f.queue_args(1, 8);
    a.price = TOKEN;
    let edge = f.place(&c, a);
    f.ctx.advance_time(INTERVAL);
    f.allocate(fair, &[0])
        .expect("at the reserve and the floor");
    let market: Market = f.ctx.account(&f.market);
    let reserve = market.reserve_price(0, f.ctx.now()).unwrap();
    assert!(reserve > TOKEN, "reserve {reserve}");
    let before = f.balances(&c);
    let err = f.allocate(edge, &[1]).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::PriceBelowReserve));
    assert_eq!(f.balances(&c), before);
    assert_eq!(book_order(&f.ctx, &f.queue_book), vec![edge]);
}

#[test]
fn overclock_terms_outside_a_gpus_range_do_not_run_there() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    let mut a = f.queue_args(2, 8);
    // GPU 0 of the bid at 300 W, GPU 1 at 440 W with a memory lock nobody allows.
    a.overclock = vec![
        OverclockTerms {
            power_limit_w: 300,
            ..Default::default()
        },
        OverclockTerms {
            power_limit_w: 440,
            mem_lock_mhz: 9_000,
            ..Default::default()
        },
    ];
    let bid = f.place_elsewhere(&c, a);
    let err = f.allocate(bid, &[0, 1]).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::OverclockOutOfRange));
    let mut a = f.queue_args(2, 8);
    a.overclock = vec![
        OverclockTerms {
            power_limit_w: 300,
            ..Default::default()
        },
        OverclockTerms {
            power_limit_w: 440,
            core_offset_mhz: 150,
            ..Default::default()
        },
    ];
    let ok = f.place(&c, a);
    let lease = f.allocate(ok, &[0, 1]).expect("per-GPU terms in range");
    assert_eq!(
        f.ctx.account::<Lease>(&lease).power_limits_w[..2],
        [300, 440]
    );
}

#[test]
fn the_anti_monopoly_cap_gives_way_to_others_and_never_idles_gpus() {
    let mut f = fixture();
    // The cap counts the GPUs offered when the billing interval began: the machine's, from
    // the next interval on.
    f.ctx.advance_time(INTERVAL);
    let c = f.client(100 * TOKEN, 0);
    let a = f.queue_args(2, 8);
    let first = f.place(&c, a);
    let a = f.queue_args(1, 8);
    let second = f.place(&c, a);
    let d = f.client(100 * TOKEN, 0);
    let a = f.queue_args(1, 8);
    let other = f.place(&d, a);
    f.allocate(first, &[0, 1]).unwrap();
    // 4 GPUs offered, a cap of 50 %: a third GPU is one too many while another client's bid
    // fits.
    let before = (f.balances(&c), f.balances(&d));
    let err = f.allocate(second, &[2]).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::ClientCapReached));
    assert_eq!((f.balances(&c), f.balances(&d)), before);
    f.allocate(other, &[2]).expect("the other client's bid");
    // Nobody else waits: the cap keeps no GPU idle.
    f.allocate(second, &[3]).expect("over the cap, but alone");
    let st: StakeAccount = f.ctx.account(&pda::stake(&f.market, &c.key.pubkey()).0);
    assert_eq!(st.gpus_held, 3);
}

#[test]
fn a_better_spot_bid_preempts_at_the_boundary_and_not_before() {
    let mut f = fixture();
    let low = f.client(100 * TOKEN, 0);
    let high = f.client(100 * TOKEN, 0);
    let a = f.spot_args(30 * TOKEN);
    let low_bid = f.place(&low, a);
    let lease = f.allocate(low_bid, &[0, 1, 2, 3]).expect("spot allocate");
    f.ctx.advance_time(20);
    let a = f.spot_args(20 * TOKEN);
    let poorer = f.place(&high, a);
    let a = f.spot_args(40 * TOKEN);
    let richer = f.place(&high, a);
    assert_eq!(book_order(&f.ctx, &f.spot_book), vec![richer, poorer]);

    let agent = f.agent.insecure_clone();
    let (market, machine) = (f.market, f.machine);
    let preempt = |challenger: Pubkey| Preempt {
        agent: &agent,
        market,
        machine,
        lease,
        lease_bid: low_bid,
        challenger,
        challenger_client: high.key.pubkey(),
    };
    let err = f.ctx.run(&preempt(poorer)).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::NotBetterBid));
    f.ctx.run(&preempt(richer)).expect("preempt");
    let l: Lease = f.ctx.account(&lease);
    assert_eq!(l.stop_at, l.started_at + INTERVAL, "stops at the boundary");
    assert!(l.preempted);
    // Before the boundary the GPUs are still the running lease's.
    let err = f.allocate(richer, &[0, 1, 2, 3]).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::GpusBusy));
    let err = f.ctx.run(&preempt(richer)).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::LeaseStopping));

    // At the boundary: the last proof, the settlement, the better bid starts.
    f.ctx.advance_time(INTERVAL - 20);
    prove(&mut f, lease, 0);
    let anyone = f.ctx.wallet(1);
    f.close(&anyone, lease, low.tokens, false)
        .expect("end_lease");
    assert!(!f.ctx.account_exists(&lease));
    let back: Bid = f.ctx.account(&low_bid);
    // 60 s at 30 tokens per GPU-day, rounded down per GPU, × 4 GPUs.
    let paid = (30 * TOKEN * 60 / 86_400) * 4;
    assert_eq!(back.status, BidStatus::Open);
    // Its escrow was 20 tokens: the hour's run (5) and its three hours' wait (15).
    assert_eq!(back.escrow, 20 * TOKEN - paid);
    // Back in the book by its profit: between the richer and the poorer bid.
    assert_eq!(
        book_order(&f.ctx, &f.spot_book),
        vec![richer, low_bid, poorer]
    );
    f.allocate(richer, &[0, 1, 2, 3])
        .expect("the better bid runs");
}

#[test]
fn a_queue_bid_outranks_a_spot_lease_on_the_same_gpus() {
    let mut f = fixture();
    // The cap counts the GPUs offered when the billing interval began: the machine's, from
    // the next interval on.
    f.ctx.advance_time(INTERVAL);
    let spot_client = f.client(100 * TOKEN, 0);
    let queue_client = f.client(100 * TOKEN, 0);
    let a = f.spot_args(30 * TOKEN);
    let spot_bid = f.place(&spot_client, a);
    let lease = f.allocate(spot_bid, &[0, 1, 2, 3]).unwrap();
    let a = f.queue_args(2, 24);
    let queue_bid = f.place(&queue_client, a);
    let err = f.allocate(queue_bid, &[0, 1]).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::GpusBusy));
    f.ctx.advance_time(30);
    f.ctx
        .run(&Preempt {
            agent: &f.agent,
            market: f.market,
            machine: f.machine,
            lease,
            lease_bid: spot_bid,
            challenger: queue_bid,
            challenger_client: queue_client.key.pubkey(),
        })
        .expect("preempt for a queue bid");
    let l: Lease = f.ctx.account(&lease);
    assert_eq!(
        l.stop_at,
        f.ctx.now(),
        "queue bids stop spot leases at once"
    );
    // The 30 s up to the stop are proven and paid; then the GPUs go to the queue bid.
    let mut p = f.proof(&lease, 0);
    p.gpu_seconds = 4 * 30;
    f.submit(lease, p).unwrap();
    let agent = f.agent.insecure_clone();
    f.close(&agent, lease, spot_client.tokens, false).unwrap();
    f.allocate(queue_bid, &[0, 1]).expect("queue bid runs");
}

#[test]
fn proofs_pay_per_interval_chain_and_refuse_replays_gaps_and_bad_input() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    let a = f.queue_args(2, 8);
    let bid = f.place(&c, a);
    let lease = f.allocate(bid, &[0, 1]).unwrap();
    let before = f.balances(&c);

    // Not over yet.
    let err = f.submit(lease, f.proof(&lease, 0)).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::IntervalNotOver));
    f.ctx.advance_time(INTERVAL);
    // Somebody else's key; no proof at all; a peak power per GPU missing.
    let stranger = f.ctx.wallet(1);
    let err = f
        .submit_with(&stranger, lease, f.proof(&lease, 0))
        .unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::WrongAgent));
    let err = f
        .ctx
        .run(&SubmitUsage {
            agent: &f.agent,
            market: f.market,
            machine: f.machine,
            proofs: vec![],
        })
        .unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::ProofAccountsMismatch));
    let mut p = f.proof(&lease, 0);
    p.peak_power_w.pop();
    let err = f.submit(lease, p).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::BadProofGpuCount));
    assert_eq!(f.balances(&c), before, "rejected proofs move nothing");

    let p = f.proof(&lease, 0);
    f.submit(lease, p.clone()).expect("interval 0");
    // 2 GPUs × 60 s at 2 tokens per GPU-hour = 66 666; fee 2.5 % = 1 666.
    let gross = 2 * 2 * TOKEN * 60 / 3_600;
    let fee = gross * 250 / 10_000;
    // Accrued to the machine: no token moves until the pay is claimed.
    assert_eq!(f.balances(&c), before, "a proof moves no token");
    let m: Machine = f.ctx.account(&f.machine);
    assert_eq!((m.unclaimed_pay, m.unclaimed_fee), (gross - fee, fee));
    f.claim(f.machine).expect("claim_pay");
    let m: Machine = f.ctx.account(&f.machine);
    assert_eq!((m.unclaimed_pay, m.unclaimed_fee), (0, 0));
    let after = f.balances(&c);
    assert_eq!(after[1] - before[1], gross - fee, "host paid");
    // The fee stays in the payment vault, owed to the treasury, until anyone collects it.
    assert_eq!(after[2], before[2], "the treasury is not touched");
    assert_eq!(
        before[3] - after[3],
        gross - fee,
        "the host's share leaves the vault"
    );
    let m: Market = f.ctx.account(&f.market);
    assert_eq!(m.fees_due, fee);
    assert_eq!(after[3], m.total_escrow + m.fees_due);
    f.collect_fees();
    let collected = f.balances(&c);
    assert_eq!(collected[2] - before[2], fee, "treasury paid");
    assert_eq!(before[3] - collected[3], gross, "out of escrow");
    assert_eq!(f.ctx.account::<Market>(&f.market).fees_due, 0);
    let l: Lease = f.ctx.account(&lease);
    let expected_hash =
        solana_sha256_hasher::hash(&p.proof().chain_preimage(&lease.to_bytes(), &[0; 32]))
            .to_bytes();
    assert_eq!((l.next_interval, l.proof_hash), (1, expected_hash));

    // The same interval again: a replay.
    let err = f.submit(lease, f.proof(&lease, 0)).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::StaleInterval));

    // Interval 1 skipped: 2 is paid, 1 never, and counts as missed.
    f.ctx.advance_time(2 * INTERVAL);
    let mut p = f.proof(&lease, 2);
    p.peak_power_w = vec![290, 320]; // GPU 1 above its 300 W by more than the 5 % tolerance
    f.submit(lease, p).expect("interval 2");
    let m: Machine = f.ctx.account(&f.machine);
    assert_eq!((m.missed_intervals, m.violations), (1, 1));
    // Pay is the cost of all proven time (120 s per GPU), so nothing is lost to rounding per
    // interval.
    let l: Lease = f.ctx.account(&lease);
    assert_eq!((l.paid, l.violations), (2 * (2 * TOKEN * 120 / 3_600), 1));
    // Up to the tolerance (315 W under 300 W) is no violation.
    f.ctx.advance_time(INTERVAL);
    let mut p = f.proof(&lease, 3);
    p.peak_power_w = vec![315, 315];
    f.submit(lease, p).expect("interval 3");
    let m: Machine = f.ctx.account(&f.machine);
    let l: Lease = f.ctx.account(&lease);
    assert_eq!((m.violations, l.violations), (1, 1));
    let err = f.submit(lease, f.proof(&lease, 1)).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::StaleInterval));
}

#[test]
fn payment_stops_at_the_lease_end_and_the_rest_is_refunded() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    let mut a = f.queue_args(1, 8);
    a.max_duration_secs = 90;
    a.min_duration_secs = 90;
    let bid = f.place(&c, a);
    let escrow = f.ctx.account::<Bid>(&bid).escrow;
    let start = f.balances(&c);
    let lease = f.allocate(bid, &[0]).unwrap();
    f.ctx.advance_time(500);
    prove(&mut f, lease, 0);
    // The second window is clipped to the 30 s left; the third does not exist.
    let mut p = f.proof(&lease, 1);
    p.gpu_seconds = 1_000; // claims more than the window: paid for the window only
    f.submit(lease, p).unwrap();
    let err = f.submit(lease, f.proof(&lease, 2)).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::IntervalAfterStop));
    let l: Lease = f.ctx.account(&lease);
    // The cost of the 90 s proven (not 60 s and 30 s rounded down apart: 49 999).
    assert_eq!(l.paid, 2 * TOKEN * 90 / 3_600);
    assert!(l.paid <= escrow);
    // Anyone settles a lease whose time is fully proven.
    let anyone = f.ctx.wallet(1);
    f.close(&anyone, lease, c.tokens, false).expect("end_lease");
    f.claim(f.machine).expect("claim_pay");
    f.collect_fees();
    let end = f.balances(&c);
    assert_eq!(end[0] - start[0], escrow - l.paid, "the rest refunded");
    assert_eq!(end[3], 0, "the vault is empty once the fees are collected");
    assert_eq!(
        end[0] + (end[1] - start[1]) + (end[2] - start[2]),
        start[0] + escrow,
        "client + host + treasury: nothing created or lost"
    );
    assert!(!f.ctx.account_exists(&bid) && !f.ctx.account_exists(&lease));
    let m: Machine = f.ctx.account(&f.machine);
    assert_eq!((m.used_gib[0], m.leases), (0, 0));
    let st: StakeAccount = f.ctx.account(&pda::stake(&f.market, &c.key.pubkey()).0);
    assert_eq!(st.gpus_held, 0);
    // A proof for the ended lease: its account is gone.
    let err = f
        .ctx
        .run(&SubmitUsage {
            agent: &f.agent,
            market: f.market,
            machine: f.machine,
            proofs: vec![(
                lease,
                UsageProofArgs {
                    interval: 3,
                    intervals: 1,
                    gpu_seconds: 60,
                    energy_j: 1,
                    avg_utilisation_bps: 9_000,
                    peak_power_w: vec![290],
                    exit_code: None,
                    samples_hash: [0; 32],
                    energy_saved_j: 0,
                },
            )],
        })
        .unwrap_err();
    assert_eq!(
        err.custom_code(),
        Some(AnchorErrorCode::AccountNotInitialized as u32)
    );
    assert_eq!(f.balances(&c), end, "and moves nothing");
}

#[test]
fn the_client_ends_a_lease_and_the_host_proves_up_to_the_stop() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    let a = f.queue_args(1, 8);
    let bid = f.place(&c, a);
    let lease = f.allocate(bid, &[0]).unwrap();
    f.ctx.advance_time(45);
    let stranger = f.ctx.wallet(1);
    let err = f.close(&stranger, lease, c.tokens, false).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::NotLeaseParty));
    let client_key = c.key.insecure_clone();
    f.close(&client_key, lease, c.tokens, false)
        .expect("client stops it");
    let l: Lease = f.ctx.account(&lease);
    assert_eq!(l.stop_at, f.ctx.now());
    let mut p = f.proof(&lease, 0);
    p.gpu_seconds = 45;
    p.exit_code = Some(137);
    f.submit(lease, p).expect("final proof");
    f.close(&stranger, lease, c.tokens, false)
        .expect("settled by anyone");
    assert!(!f.ctx.account_exists(&lease));
}

#[test]
fn a_final_proof_ends_the_lease_at_the_clock_without_waiting_for_its_window() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    let a = f.queue_args(1, 8);
    let bid = f.place(&c, a);
    let escrow = f.ctx.account::<Bid>(&bid).escrow;
    let lease = f.allocate(bid, &[0]).unwrap();
    let start = f.balances(&c);
    f.ctx.advance_time(20);
    // A proof without an exit code still waits for its window to end.
    let err = f.submit(lease, f.proof(&lease, 0)).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::IntervalNotOver));
    // The container never ran (its image could not be pulled): the final proof, 20 s into a
    // 60 s interval, is accepted with nothing used; the lease stops now and settles at once.
    let mut p = f.proof(&lease, 0);
    p.gpu_seconds = 0;
    p.exit_code = Some(gpu_market_core::lease::exit::IMAGE_UNAVAILABLE);
    f.submit(lease, p)
        .expect("a final proof before its window ends");
    let l: Lease = f.ctx.account(&lease);
    assert_eq!((l.stop(), l.proven_until), (f.ctx.now(), f.ctx.now()));
    let stranger = f.ctx.wallet(1);
    f.close(&stranger, lease, c.tokens, false)
        .expect("settled by anyone");
    assert!(!f.ctx.account_exists(&lease));
    let end = f.balances(&c);
    assert_eq!(end[0] - start[0], escrow, "all of the escrow back");
    assert_eq!(
        end[1], start[1],
        "nothing paid for a container that never ran"
    );
}

#[test]
fn auto_power_is_the_clients_opt_in_and_its_savings_are_on_the_lease() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    // A tolerance over 20 % is refused with its reason, and moves nothing.
    let before = f.balances(&c);
    let mut too_loose = f.queue_args(1, 8);
    too_loose.auto_power = Some(2_001);
    let p = f.placement(&c, too_loose);
    let err = f.ctx.run(&p).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::BadAutoPower));
    assert!(!f.ctx.account_exists(&p.bid()));
    assert_eq!(f.balances(&c), before);

    let mut opted = f.queue_args(1, 8);
    opted.auto_power = Some(500);
    let bid = f.place(&c, opted);
    assert_eq!(f.ctx.account::<Bid>(&bid).auto_power, Some(500));
    let lease = f.allocate(bid, &[0]).unwrap();
    assert_eq!(f.ctx.account::<Lease>(&lease).auto_power, Some(500));
    let plain_args = f.queue_args(1, 8);
    let plain = f.place(&c, plain_args);
    let plain_lease = f.allocate(plain, &[1]).unwrap();
    assert_eq!(f.ctx.account::<Lease>(&plain_lease).auto_power, None);

    f.ctx.advance_time(INTERVAL);
    for (lease, saved) in [(lease, Some(4_200)), (plain_lease, None)] {
        let mut p = f.proof(&lease, 0);
        p.energy_saved_j = 4_200;
        f.submit(lease, p).expect("proof");
        let l: Lease = f.ctx.account(&lease);
        // Only a lease that opted in can have saved anything: a claim for another is ignored.
        assert_eq!(l.energy_saved_j, saved.unwrap_or(0));
    }
}

#[test]
fn without_aging_a_bid_still_waits_at_most_seven_days() {
    let mut f = fixture();
    let mut p = params();
    p.aging_per_interval = 0;
    f.update_market(p);
    assert_eq!(
        f.ctx.account::<Market>(&f.market).max_wait_secs(),
        gpu_market::state::MAX_BID_WAIT_SECS
    );
    // Its escrow covers the week's wait too: 2 tokens an hour for 169 hours.
    let c = f.client(400 * TOKEN, 0);
    let before = f.balances(&c);
    let mut a = f.queue_args(1, 8);
    a.deadline = f.ctx.now() + 3_600 + 7 * 86_400 + 1;
    let p = f.placement(&c, a);
    let err = f.ctx.run(&p).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::DeadlineTooFar));
    assert_eq!(f.balances(&c), before);
    let mut a = f.queue_args(1, 8);
    a.deadline = f.ctx.now() + 3_600 + 7 * 86_400;
    f.place(&c, a);
}

#[test]
fn a_retired_machines_waiting_spot_bids_are_refunded_by_anyone_and_the_machine_closes() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    // A spot bid that would wait as long as the market allows.
    let mut a = f.spot_args(20 * TOKEN);
    a.deadline = f.ctx.now() + f.ctx.account::<Market>(&f.market).max_wait_secs() as i64 + 3_600;
    let waiting = f.place(&c, a);
    let stranger = f.ctx.wallet(1);
    let prune = |machine| PruneBid {
        caller: &stranger,
        market: f.market,
        bid: waiting,
        client: c.key.pubkey(),
        book: f.spot_book,
        payment_mint: f.mint,
        client_tokens: Some(c.tokens),
        machine,
    };
    // While the machine is active, its spot bid waits for its deadline.
    for machine in [None, Some(f.machine)] {
        let err = f.ctx.run(&prune(machine)).unwrap_err();
        assert_eq!(err.custom_code(), code(MarketError::BidNotExpired));
    }
    let owner = f.host.key.insecure_clone();
    f.ctx
        .run(&SetMachineStatus {
            owner: &owner,
            market: f.market,
            machine: f.machine,
            status: MachineStatus::Retired,
        })
        .unwrap();
    // Another account passed for the machine is refused.
    let err = f.ctx.run(&prune(Some(f.market))).unwrap_err();
    assert_ne!(err.custom_code(), None);
    assert!(f.ctx.account_exists(&waiting));
    // Retired: anyone removes it at once, its escrow back in full.
    let escrow = f.ctx.account::<Bid>(&waiting).escrow;
    let before = f.balances(&c);
    f.ctx
        .run(&prune(Some(f.machine)))
        .expect("a retired machine's spot bid is prunable");
    assert!(!f.ctx.account_exists(&waiting));
    assert_eq!(f.balances(&c)[0] - before[0], escrow);
    // The book is empty: the owner closes the machine and its book.
    close_machine(&mut f).expect("close_machine");
    assert!(!f.ctx.account_exists(&f.machine));
}

/// A stranger's reclaim fails the bid over: it goes back to the queue with all of its escrow
/// (`failover.rs` follows it to another machine); the host is slashed all the same.
#[test]
fn a_silent_host_is_not_paid_anyone_reclaims_for_the_client_and_the_host_is_slashed_at_once() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    let a = f.queue_args(1, 8);
    let bid = f.place(&c, a);
    let escrow = f.ctx.account::<Bid>(&bid).escrow;
    let lease = f.allocate(bid, &[0]).unwrap();
    let start = f.balances(&c);
    let client_key = c.key.insecure_clone();
    f.ctx.advance_time(2 * INTERVAL);
    let err = f.close(&client_key, lease, c.tokens, true).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::HostNotSilent));
    let stranger = f.ctx.wallet(1);
    let err = f.close(&stranger, lease, c.tokens, true).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::HostNotSilent));
    assert_eq!(f.balances(&c), start);

    // Anyone may reclaim (a keeper): the bid waits again with all of its escrow.
    f.ctx.advance_time(INTERVAL);
    f.close(&stranger, lease, c.tokens, true)
        .expect("reclaim_escrow");
    let end = f.balances(&c);
    assert_eq!(end[0], start[0], "no refund: the bid fails over");
    assert_eq!(end[1], start[1], "the host is not paid for unproven time");
    assert!(!f.ctx.account_exists(&lease));
    let b: Bid = f.ctx.account(&bid);
    assert_eq!((b.status, b.escrow), (BidStatus::Open, escrow));
    let m: Machine = f.ctx.account(&f.machine);
    assert_eq!(m.missed_intervals, 3);

    // Three silent intervals, 10 % of the machine's bond per two: 15 % of its 10 tokens (not of
    // the host's whole 100), at once, below twice the lease's 2-token value; half to the
    // client's stake, half kept for the stake treasury.
    let host_stake: StakeAccount = f
        .ctx
        .account(&pda::stake(&f.market, &f.host.key.pubkey()).0);
    assert_eq!(host_stake.amount, 100 * TOKEN - 3 * TOKEN / 2);
    let client_stake: StakeAccount = f.ctx.account(&pda::stake(&f.market, &c.key.pubkey()).0);
    assert_eq!(client_stake.amount, 3 * TOKEN / 4);
    let market: Market = f.ctx.account(&f.market);
    assert_eq!(market.total_staked, 100 * TOKEN - 3 * TOKEN / 4);
    assert_eq!(market.slashed_due, 3 * TOKEN / 4);
    let vault = pda::stake_vault(&f.market).0;
    assert_eq!(
        f.ctx.token_balance(&vault),
        100 * TOKEN,
        "still in the vault"
    );
    assert_eq!(
        f.ctx.token_balance(&vault),
        market.total_staked + market.total_pending_unstake + market.slashed_due
    );
    // The silence the reclaim proved is used up: `slash` finds no evidence of it.
    let slash = Slash {
        signer: &stranger,
        market: f.market,
        machine: f.machine,
        host: f.host.key.pubkey(),
    };
    let err = f.ctx.run(&slash).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::NoSlashingEvidence));
    f.collect_fees();
    assert_eq!(f.ctx.token_balance(&f.stake_treasury), 3 * TOKEN / 4);
    assert_eq!(f.ctx.token_balance(&vault), 100 * TOKEN - 3 * TOKEN / 4);
    assert_eq!(f.ctx.account::<Market>(&f.market).slashed_due, 0);
}

#[test]
fn low_utilisation_flags_a_lease_idle() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    let a = f.queue_args(1, 8);
    let bid = f.place(&c, a);
    let lease = f.allocate(bid, &[0]).unwrap();
    f.ctx.advance_time(3 * INTERVAL);
    for (k, util, idle) in [(0, 500, false), (1, 9_000, false), (2, 400, false)] {
        let mut p = f.proof(&lease, k);
        p.avg_utilisation_bps = util;
        f.submit(lease, p).unwrap();
        assert_eq!(f.ctx.account::<Lease>(&lease).idle, idle, "after {k}");
    }
    f.ctx.advance_time(INTERVAL);
    let mut p = f.proof(&lease, 3);
    p.avg_utilisation_bps = 100;
    f.submit(lease, p).unwrap();
    let l: Lease = f.ctx.account(&lease);
    assert!(l.idle, "two low intervals in a row");
    assert_eq!(l.idle_streak, 2);
}

#[test]
fn the_idle_rule_ends_a_lease_after_its_idle_intervals_and_refunds_the_rest() {
    let mut f = fixture();
    // The end must come after the flag (2 intervals here), so the client is warned first.
    let mut p = params();
    p.idle_end_intervals = 2;
    let authority = f.authority.insecure_clone();
    let err = f
        .ctx
        .run(&UpdateMarket {
            authority: &authority,
            market: f.market,
            params: p,
        })
        .unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::InvalidEnforcement));
    p.idle_end_intervals = 3;
    f.update_market(p);

    let c = f.client(100 * TOKEN, 0);
    let a = f.queue_args(1, 8);
    let bid = f.place(&c, a);
    let escrow = f.ctx.account::<Bid>(&bid).escrow;
    let lease = f.allocate(bid, &[0]).unwrap();
    let start = f.balances(&c);
    f.ctx.advance_time(4 * INTERVAL);
    // A busy interval resets the streak; then three idle ones: flagged after two, ended after
    // the third, at the end of its window.
    for (k, util) in [(0, 9_000), (1, 500), (2, 500)] {
        let mut p = f.proof(&lease, k);
        p.avg_utilisation_bps = util;
        f.submit(lease, p).unwrap();
    }
    let l: Lease = f.ctx.account(&lease);
    assert!(
        l.idle && l.stop_at == Lease::NOT_STOPPED,
        "warned, not ended"
    );
    let mut p = f.proof(&lease, 3);
    p.avg_utilisation_bps = 500;
    f.submit(lease, p).unwrap();
    let l: Lease = f.ctx.account(&lease);
    assert_eq!(
        l.stop_at,
        l.started_at + 4 * INTERVAL,
        "ends with its 4th window"
    );
    assert_eq!(l.exit_code, Some(gpu_market_core::lease::exit::IDLE_ENDED));
    assert!(
        l.fully_proven(),
        "nothing more to prove: anyone may settle it"
    );
    let err = f.submit(lease, f.proof(&lease, 4)).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::IntervalAfterStop));

    let stranger = f.ctx.wallet(1);
    f.close(&stranger, lease, c.tokens, false)
        .expect("end_lease");
    let end = f.balances(&c);
    let paid = l.paid;
    assert_eq!(end[0] - start[0], escrow - paid, "the unused escrow back");
    assert!(!f.ctx.account_exists(&lease));
}

#[test]
fn a_lease_of_another_machine_or_a_wrong_agent_is_refused() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    let a = f.queue_args(1, 8);
    let bid = f.place(&c, a);
    let stranger = f.ctx.wallet(1);
    let a = f.allocate_ix(&stranger, bid, &[0]);
    let err = f.send_allocate(&a).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::WrongAgent));
    let lease = f.allocate(bid, &[0]).unwrap();
    // A second machine of the same host, its own agent: it cannot prove the first one's lease.
    let other_agent = f.ctx.wallet(1);
    let r = RegisterMachine {
        owner: &f.host.key,
        market: f.market,
        id: 1,
        terms: MachineTerms {
            agent: other_agent.pubkey(),
            region: [0; 16],
            gpus: gpus(),
            price_floor_per_gpu_hour: 0,
            electricity_cost_per_kwh: 0,
            network: MachineNetwork::default(),
            cpu_milli: 0,
            memory_mib: 0,
        },
    };
    let other = r.machine();
    f.ctx.run(&r).unwrap();
    f.ctx.advance_time(INTERVAL);
    let err = f
        .ctx
        .run(&SubmitUsage {
            agent: &other_agent,
            market: f.market,
            machine: other,
            proofs: vec![(lease, f.proof(&lease, 0))],
        })
        .unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::ProofAccountsMismatch));
}

#[test]
fn compute_units_of_lease_instructions() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    // Three bids above the chosen one that do not fit (class 7): the program reads them off the
    // book, the transaction names none of them.
    let mut above = Vec::new();
    for _ in 0..3 {
        let rich = f.client(600 * TOKEN, 500 * TOKEN);
        let mut a = f.queue_args(1, 8);
        a.accepted_classes = 1 << 7;
        above.push(f.place_elsewhere(&rich, a));
    }
    let a = f.queue_args(2, 8);
    let bid = f.place(&c, a);
    let lease = f.allocate(bid, &[0, 1]).unwrap();
    f.ctx.advance_time(INTERVAL);
    prove(&mut f, lease, 0);
    let client_key = c.key.insecure_clone();
    f.close(&client_key, lease, c.tokens, false).unwrap();
    let end_lease = f.ctx.compute_units["end_lease"];
    // A silent host: reclaim and slash; then a spot lease preempted by a richer spot bid.
    let a = f.queue_args(1, 8);
    let quiet = f.place(&c, a);
    let quiet_lease = f.allocate(quiet, &[0]).unwrap();
    f.ctx.advance_time(4 * INTERVAL);
    f.close(&client_key, quiet_lease, c.tokens, true).unwrap();
    let reclaim = f.ctx.compute_units["end_lease"];
    // A proof that skips two intervals: evidence for one slash.
    let a = f.queue_args(1, 8);
    let gappy = f.place(&c, a);
    let gappy_lease = f.allocate(gappy, &[0]).unwrap();
    f.ctx.advance_time(3 * INTERVAL);
    prove(&mut f, gappy_lease, 2);
    f.close(&client_key, gappy_lease, c.tokens, false).unwrap();
    slash_by_stranger(&mut f).unwrap();
    let a = f.spot_args(30 * TOKEN);
    let spot = f.place(&c, a);
    let spot_lease = f.allocate(spot, &[0, 1, 2, 3]).unwrap();
    let a = f.spot_args(40 * TOKEN);
    let richer = f.place(&c, a);
    f.ctx
        .run(&Preempt {
            agent: &f.agent,
            market: f.market,
            machine: f.machine,
            lease: spot_lease,
            lease_bid: spot,
            challenger: richer,
            challenger_client: c.key.pubkey(),
        })
        .unwrap();
    let lease_space = 8 + <Lease as anchor_lang::Space>::INIT_SPACE;
    println!("| instruction | compute units |");
    println!("|---|---|");
    let cu = &f.ctx.compute_units;
    println!("| allocate (3 unfit bids above) | {} |", cu["allocate"]);
    println!("| submit_usage | {} |", cu["submit_usage"]);
    println!("| end_lease (settle, refund) | {end_lease} |");
    println!("| preempt | {} |", cu["preempt"]);
    println!("| reclaim_escrow (slashes) | {reclaim} |");
    println!("| slash | {} |", cu["slash"]);
    println!(
        "lease account: {lease_space} bytes, rent {} lamports",
        f.ctx.svm.minimum_balance_for_rent_exemption(lease_space)
    );
    assert!(f.ctx.compute_units["submit_usage"] <= 60_000);
}

#[test]
fn a_running_lease_keeps_its_interval_and_fee_after_a_market_update() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    let a = f.queue_args(1, 8);
    let bid = f.place(&c, a);
    let lease = f.allocate(bid, &[0]).unwrap();
    let started = f.ctx.account::<Lease>(&lease).started_at;
    f.ctx.advance_time(2 * INTERVAL);
    prove(&mut f, lease, 0);
    prove(&mut f, lease, 1);
    // The authority halves the interval and quadruples the fee; after the notice it applies.
    let mut new = params();
    new.billing_interval_secs = 30;
    new.protocol_fee_bps = 1_000;
    f.update_market(new);
    assert_eq!(f.ctx.account::<Market>(&f.market).params, new);
    let before: Lease = f.ctx.account(&lease);
    assert_eq!(
        (
            before.rules.billing_interval_secs,
            before.rules.protocol_fee_bps
        ),
        (60, 250)
    );
    assert_eq!(before.proven_until, started + 120);
    // Interval 2 is still the lease's third minute, not its third half-minute: time already paid
    // cannot be proven again.
    let ledger = f.ledger(&c);
    prove(&mut f, lease, 2);
    let after: Lease = f.ctx.account(&lease);
    assert_eq!(after.proven_until, started + 180, "never backwards");
    let gross = after.paid - before.paid;
    assert_eq!(gross, 2 * TOKEN * 180 / 3_600 - 2 * TOKEN * 120 / 3_600);
    let fee = gross * 250 / 10_000;
    let now = f.ledger(&c);
    assert_eq!(now.fees_due - ledger.fees_due, fee, "the old fee");
    assert_eq!(
        now.clients[1].tokens - ledger.clients[1].tokens,
        gross - fee
    );
    let err = f.submit(lease, f.proof(&lease, 2)).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::StaleInterval));
    assert_eq!(f.ledger(&c), now, "a replay moves nothing");
    // A lease that starts now runs by the new rules (at 30 s intervals the aging cap lets a bid
    // wait 2.5 h at most).
    let mut a = f.queue_args(1, 8);
    a.deadline = f.ctx.now() + 2 * 3_600;
    let bid = f.place(&c, a);
    let lease = f.allocate(bid, &[1]).unwrap();
    let l: Lease = f.ctx.account(&lease);
    assert_eq!(
        (l.rules.billing_interval_secs, l.rules.protocol_fee_bps),
        (30, 1_000)
    );
}

#[test]
fn pay_does_not_depend_on_the_treasury_account() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    let a = f.queue_args(1, 8);
    let bid = f.place(&c, a);
    let lease = f.allocate(bid, &[0]).unwrap();
    // The authority closes its (empty) treasury token account.
    let saved = f.ctx.svm.get_account(&f.treasury).unwrap();
    let close = spl_token_interface::instruction::close_account(
        &spl_token_interface::ID,
        &f.treasury,
        &f.authority.pubkey(),
        &f.authority.pubkey(),
        &[],
    )
    .unwrap();
    let authority = f.authority.insecure_clone();
    f.ctx.send(&[close], &[&authority]).expect("close_account");
    assert!(!f.ctx.account_exists(&f.treasury));
    f.ctx.advance_time(INTERVAL);
    let before = f.ledger(&c);
    prove(&mut f, lease, 0);
    let gross = 2 * TOKEN * 60 / 3_600;
    let fee = gross * 250 / 10_000;
    let after = f.ledger(&c);
    assert_eq!(
        after.clients[1].tokens - before.clients[1].tokens,
        gross - fee,
        "the host is paid"
    );
    assert_eq!(after.fees_due, fee);
    // Collecting into a closed account fails and moves nothing; the fee stays due.
    let anyone = f.ctx.wallet(1);
    let collect = CollectFees {
        signer: &anyone,
        market: f.market,
        payment_mint: f.mint,
        stake_mint: f.mint,
        treasury: f.treasury,
        stake_treasury: f.stake_treasury,
    };
    f.ctx.run(&collect).unwrap_err();
    assert_eq!(f.ledger(&c), after);
    // Once the treasury is back, anyone collects the fee.
    f.ctx.svm.set_account(f.treasury, saved).unwrap();
    f.ctx.run(&collect).expect("collect_fees");
    assert_eq!(f.ctx.token_balance(&f.treasury), fee);
    let collected = f.ledger(&c);
    assert_eq!(collected.fees_due, 0);
    assert_eq!(collected.vault, after.vault - fee);
    assert_eq!(collected.vault, collected.total_escrow);
}

/// The host's stake, the client's stake and the market's slashed stake due after the client
/// reclaims a silent lease `secs` after it started.
fn reclaim_after(secs: i64) -> (u64, u64, u64) {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    let a = f.queue_args(1, 8);
    let bid = f.place(&c, a);
    let lease = f.allocate(bid, &[0]).unwrap();
    f.ctx.advance_time(secs);
    let client_key = c.key.insecure_clone();
    f.close(&client_key, lease, c.tokens, true)
        .expect("reclaim_escrow");
    let l = f.ledger(&c);
    (l.clients[1].stake, l.clients[0].stake, l.slashed_due)
}

#[test]
fn a_late_reclaim_slashes_no_more_than_one_at_the_silence_window() {
    let on_time = reclaim_after(3 * INTERVAL);
    let late = reclaim_after(55 * INTERVAL);
    assert_eq!(late, on_time);
    // 3 intervals of silence at 10 % of the 10-token bond per 2: 1.5 tokens, half of it to the
    // client.
    assert_eq!(
        on_time,
        (100 * TOKEN - 3 * TOKEN / 2, 3 * TOKEN / 4, 3 * TOKEN / 4)
    );
}

/// A lease whose proof skipped intervals 0 and 1: two missed intervals, the evidence for one
/// slash of 10 % of the machine's bond.
fn evidence(f: &mut Fixture) {
    let c = f.client(100 * TOKEN, 0);
    let a = f.queue_args(1, 8);
    let bid = f.place(&c, a);
    let lease = f.allocate(bid, &[0]).unwrap();
    f.ctx.advance_time(3 * INTERVAL);
    prove(f, lease, 2);
    let m: Machine = f.ctx.account(&f.machine);
    assert_eq!(m.unslashed_missed, 2);
}

#[test]
fn evidence_slashes_once_even_twice_in_one_transaction() {
    let mut f = fixture();
    evidence(&mut f);
    let c = f.client(0, 0);
    let stranger = f.ctx.wallet(1);
    let slash = Slash {
        signer: &stranger,
        market: f.market,
        machine: f.machine,
        host: f.host.key.pubkey(),
    };
    let before = f.ledger(&c);
    let err = f
        .ctx
        .send(&[slash.instruction(), slash.instruction()], &[&stranger])
        .unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::NoSlashingEvidence));
    assert!(matches!(
        err.err,
        solana_transaction_error::TransactionError::InstructionError(1, _)
    ));
    assert_eq!(f.ledger(&c), before, "the whole transaction moves nothing");
    f.ctx.run(&slash).expect("slash once");
    let after = f.ledger(&c);
    assert_eq!(after.clients[1].stake, 99 * TOKEN);
    assert_eq!(after.slashed_due, TOKEN);
    assert_eq!(after.stake_vault, before.stake_vault, "kept in the vault");
    let err = f.ctx.run(&slash).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::NoSlashingEvidence));
    assert_eq!(f.ledger(&c), after);
}

/// Issue 30, fault 4: a slash answers the harm. A host with 100 tokens staked and one machine
/// (bond 10) leaves a one-interval lease worth 2/60 of a token silent: the reclaim takes twice
/// that, not 5 % of its stake (before: 5 tokens, half of them to the client, for a lease worth
/// 0.03). A proof that skips 20 intervals (ten times the evidence a slash needs) takes one
/// share of the bond, 1 token, not the whole stake (before: all 100).
#[test]
fn slashes_are_bounded_by_the_lease_value_and_one_share_of_the_bond() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    let mut a = f.queue_args(1, 8);
    a.max_duration_secs = INTERVAL as u32;
    a.min_duration_secs = INTERVAL as u32;
    let bid = f.place(&c, a);
    let lease = f.allocate(bid, &[0]).unwrap();
    f.ctx.advance_time(3 * INTERVAL);
    let client_key = c.key.insecure_clone();
    f.close(&client_key, lease, c.tokens, true)
        .expect("reclaim_escrow");
    let value = 2 * TOKEN / 60; // 2 tokens per GPU-hour, one GPU, one minute
    let after = f.ledger(&c);
    assert_eq!(
        (
            after.clients[1].stake,
            after.clients[0].stake,
            after.slashed_due
        ),
        (100 * TOKEN - 2 * value, value, value)
    );

    let host_before = after.clients[1].stake;
    let c = f.client(100 * TOKEN, 0);
    let a = f.queue_args(1, 8);
    let bid = f.place(&c, a);
    let lease = f.allocate(bid, &[0]).unwrap();
    f.ctx.advance_time(21 * INTERVAL);
    prove(&mut f, lease, 20);
    let m: Machine = f.ctx.account(&f.machine);
    assert_eq!(m.unslashed_missed, 20);
    slash_by_stranger(&mut f).expect("slash");
    let l = f.ledger(&c);
    assert_eq!(
        l.clients[1].stake,
        host_before - TOKEN,
        "one share of the bond"
    );
}

/// Issue 30, fault 7: a machine cannot close its evidence away. A 3-interval lease whose one
/// proof skipped intervals 0 and 1 leaves evidence for one slash; the lease ends, the host
/// retires and closes the machine: the close slashes 10 % of the bond (before, the evidence
/// went with the account and nobody could slash it).
#[test]
fn closing_a_machine_slashes_the_evidence_it_holds() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    let mut a = f.queue_args(1, 8);
    a.max_duration_secs = 3 * INTERVAL as u32;
    a.min_duration_secs = 3 * INTERVAL as u32;
    let bid = f.place(&c, a);
    let lease = f.allocate(bid, &[0]).unwrap();
    f.ctx.advance_time(3 * INTERVAL);
    prove(&mut f, lease, 2);
    assert_eq!(f.ctx.account::<Machine>(&f.machine).unslashed_missed, 2);
    let client_key = c.key.insecure_clone();
    f.close(&client_key, lease, c.tokens, false)
        .expect("end_lease");
    f.set_status(f.machine, MachineStatus::Retired);
    let before = f.ledger(&c);
    close_machine(&mut f).expect("close_machine");
    assert!(!f.ctx.account_exists(&f.machine));
    let after = f.ledger(&c);
    assert_eq!(
        before.clients[1].stake - after.clients[1].stake,
        TOKEN,
        "10 % of the 10-token bond"
    );
    assert_eq!(after.slashed_due, before.slashed_due + TOKEN);
}

#[test]
fn evidence_expires_after_its_window() {
    let mut f = fixture();
    evidence(&mut f);
    let c = f.client(0, 0);
    // The window: the unstake cooldown (600 s) and two intervals of evidence.
    f.ctx.advance_time(600 + 2 * INTERVAL + 1);
    let before = f.ledger(&c);
    let stranger = f.ctx.wallet(1);
    let err = f
        .ctx
        .run(&Slash {
            signer: &stranger,
            market: f.market,
            machine: f.machine,
            host: f.host.key.pubkey(),
        })
        .unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::NoSlashingEvidence));
    assert_eq!(f.ledger(&c), before);
}

/// A spot lease of all 4 GPUs at 30 per GPU-day (its bid's deadline `deadline_in` seconds from
/// placement, or the default),
/// preempted by a richer spot bid and proven for its first, last interval. Returns the fixture,
/// the preempted client, its bid and escrow, the lease and the richer bid.
fn preempted_spot_lease(
    deadline_in: Option<i64>,
) -> (Fixture, Wallet, Pubkey, u64, Pubkey, Pubkey) {
    let mut f = fixture();
    let low = f.client(100 * TOKEN, 0);
    let high = f.client(100 * TOKEN, 0);
    let mut a = f.spot_args(30 * TOKEN);
    if let Some(secs) = deadline_in {
        a.deadline = f.ctx.now() + secs;
    }
    let low_bid = f.place(&low, a);
    let escrow = f.ctx.account::<Bid>(&low_bid).escrow;
    let lease = f.allocate(low_bid, &[0, 1, 2, 3]).unwrap();
    f.ctx.advance_time(20);
    let a = f.spot_args(40 * TOKEN);
    let richer = f.place(&high, a);
    f.ctx
        .run(&Preempt {
            agent: &f.agent,
            market: f.market,
            machine: f.machine,
            lease,
            lease_bid: low_bid,
            challenger: richer,
            challenger_client: high.key.pubkey(),
        })
        .expect("preempt");
    f.ctx.advance_time(INTERVAL - 20);
    prove(&mut f, lease, 0);
    (f, low, low_bid, escrow, lease, richer)
}

#[test]
fn a_preempted_spot_bid_past_its_deadline_is_refunded_not_requeued() {
    let (mut f, low, low_bid, escrow, lease, richer) = preempted_spot_lease(Some(3_600 + 30));
    // Settled after the bid's deadline: it could never start again.
    f.ctx.advance_time(3_600);
    let start = f.ctx.token_balance(&low.tokens);
    let anyone = f.ctx.wallet(1);
    f.close(&anyone, lease, low.tokens, false)
        .expect("end_lease");
    assert!(!f.ctx.account_exists(&lease) && !f.ctx.account_exists(&low_bid));
    let paid = (30 * TOKEN * 60 / 86_400) * 4;
    assert_eq!(f.ctx.token_balance(&low.tokens) - start, escrow - paid);
    assert_eq!(book_order(&f.ctx, &f.spot_book), vec![richer]);
}

/// Issue 15, finding 5: a preempted spot lease whose book has filled up meanwhile settles with
/// a refund instead of failing with `BookFull` (which locked escrow, GPUs and rent for good).
#[test]
fn a_preempted_spot_bid_is_refunded_when_its_book_is_full() {
    let (mut f, low, low_bid, escrow, lease, _richer) = preempted_spot_lease(None);
    // The machine's spot book fills up before the lease settles (the richer bid is in it).
    let filler = f.client(40_000 * TOKEN, 0);
    f.ctx.svm.airdrop(&filler.key.pubkey(), 20 * SOL).unwrap();
    for _ in 1..BOOK_CAPACITY {
        let a = f.spot_args(13 * TOKEN);
        f.place(&filler, a);
    }
    assert_eq!(book_order(&f.ctx, &f.spot_book).len(), BOOK_CAPACITY);
    let start = f.ctx.token_balance(&low.tokens);
    let anyone = f.ctx.wallet(1);
    f.close(&anyone, lease, low.tokens, false)
        .expect("end_lease settles whatever the book's room");
    assert!(!f.ctx.account_exists(&lease) && !f.ctx.account_exists(&low_bid));
    let paid = (30 * TOKEN * 60 / 86_400) * 4;
    assert_eq!(f.ctx.token_balance(&low.tokens) - start, escrow - paid);
    let order = book_order(&f.ctx, &f.spot_book);
    assert_eq!(order.len(), BOOK_CAPACITY);
    assert!(!order.contains(&low_bid));
}

/// Issue 30, fault 7: whoever settles a preempted spot lease cannot choose a refund over the
/// requeue its rules give. Settled without the machine's spot book, while the bid may still
/// wait and the book has room, `end_lease` is refused and moves nothing (before, the bid was
/// refunded and lost its place); with the book it goes back into it.
#[test]
fn settling_a_preempted_spot_lease_without_its_book_is_refused() {
    let (mut f, low, low_bid, _escrow, lease, richer) = preempted_spot_lease(None);
    let l: Lease = f.ctx.account(&lease);
    let anyone = f.ctx.wallet(1);
    let without_book = CloseLease {
        signer: &anyone,
        market: f.market,
        machine: l.machine,
        lease,
        bid: l.bid,
        client: l.client,
        agent: f.agent.pubkey(),
        host: f.host.key.pubkey(),
        spot_book: None,
        queue_book: None,
        payment_mint: f.mint,
        client_tokens: Some(low.tokens),
        reclaim: false,
        refund: false,
    };
    let before = f.ledger(&low);
    let err = f.ctx.run(&without_book).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::SpotBookMissing));
    assert_eq!(f.ledger(&low), before, "nothing moved");
    assert!(f.ctx.account_exists(&lease));
    f.close(&anyone, lease, low.tokens, false)
        .expect("end_lease with the book");
    assert_eq!(book_order(&f.ctx, &f.spot_book), vec![richer, low_bid]);
}

#[test]
fn pausing_a_machine_leaves_the_gpus_offered() {
    let mut f = fixture();
    let owner = f.host.key.insecure_clone();
    let status = |status| SetMachineStatus {
        owner: &owner,
        market: f.market,
        machine: f.machine,
        status,
    };
    assert_eq!(f.ctx.account::<Market>(&f.market).gpus_offered, 4);
    f.ctx.run(&status(MachineStatus::Paused)).unwrap();
    assert_eq!(f.ctx.account::<Market>(&f.market).gpus_offered, 4);
    f.ctx.run(&status(MachineStatus::Active)).unwrap();
    f.ctx.run(&status(MachineStatus::Retired)).unwrap();
    assert_eq!(f.ctx.account::<Market>(&f.market).gpus_offered, 0);
}

#[test]
fn demand_is_sampled_on_the_clock_whoever_calls() {
    // Two identical markets with one queue bid waiting; in one, bids come and go within each
    // interval, in the other nothing happens. After the same time both have the same demand.
    let mut quiet = fixture();
    let mut busy = fixture();
    let mut clients = Vec::new();
    for f in [&mut quiet, &mut busy] {
        let c = f.client(100 * TOKEN, 0);
        let a = f.queue_args(2, 8);
        f.place(&c, a);
        clients.push(c);
    }
    let c = &clients[1];
    for _ in 0..5 {
        busy.ctx.advance_time(10);
        let a = busy.queue_args(2, 8);
        let bid = busy.place(c, a);
        busy.ctx
            .run(&CancelBid {
                client: &c.key,
                market: busy.market,
                bid,
                book: busy.queue_book,
                payment_mint: busy.mint,
                client_tokens: c.tokens,
            })
            .unwrap();
        busy.ctx.advance_time(INTERVAL - 10);
    }
    quiet.ctx.advance_time(5 * INTERVAL);
    for (f, c) in [(&mut quiet, &clients[0]), (&mut busy, &clients[1])] {
        let a = f.queue_args(1, 8);
        f.place(c, a);
    }
    let (q, b): (Market, Market) = (
        quiet.ctx.account(&quiet.market),
        busy.ctx.account(&busy.market),
    );
    assert!(q.demand_bps > 0);
    assert_eq!(
        (q.demand_bps, q.demand_interval),
        (b.demand_bps, b.demand_interval)
    );
}

#[test]
fn a_spot_price_below_one_unit_per_interval_is_paid_in_the_end() {
    let mut f = fixture();
    // No floor: the host takes any price.
    f.update_machine(|terms| {
        terms.price_floor_per_gpu_hour = 0;
        terms.electricity_cost_per_kwh = 0;
    });
    let c = f.client(100 * TOKEN, 0);
    // 1 per GPU-day for a day on 4 GPUs: 60 s earn 1/1440 of a unit per GPU.
    let mut a = f.spot_args(1);
    a.max_duration_secs = 86_400;
    a.min_duration_secs = 86_400;
    a.deadline = f.ctx.now() + 86_400 + 3_600;
    let bid = f.place(&c, a);
    let lease = f.allocate(bid, &[0, 1, 2, 3]).unwrap();
    let host_before = f.ctx.token_balance(&f.host.tokens);
    f.ctx.advance_time(86_400);
    for k in 0..1_440 {
        prove(&mut f, lease, k);
    }
    let l: Lease = f.ctx.account(&lease);
    assert_eq!(l.paid, 4, "a day's price on 4 GPUs, not 1,440 × 0");
    let m: Market = f.ctx.account(&f.market);
    assert_eq!(
        f.ctx.token_balance(&f.host.tokens) - host_before + m.fees_due,
        4
    );
}

#[test]
fn closing_stakes_machines_and_books_returns_rent_and_refuses_what_is_not_empty() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    // A stake account with a waiting bid, or with stake, does not close.
    let a = f.queue_args(1, 8);
    let bid = f.place(&c, a);
    let close_stake = CloseStake {
        owner: &c.key,
        market: f.market,
    };
    let err = f.ctx.run(&close_stake).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::StakeNotEmpty));
    // The queue book holds the bid: the authority cannot close it; nobody else may try.
    let authority = f.authority.insecure_clone();
    let close_book = |authority| CloseQueueBook {
        authority,
        market: f.market,
        book: f.queue_book,
    };
    let err = f.ctx.run(&close_book(&authority)).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::BookNotEmpty));
    let intruder = f.ctx.wallet(1);
    let err = f.ctx.run(&close_book(&intruder)).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::NotMarketAuthority));
    f.ctx
        .run(&CancelBid {
            client: &c.key,
            market: f.market,
            bid,
            book: f.queue_book,
            payment_mint: f.mint,
            client_tokens: c.tokens,
        })
        .unwrap();
    let stake = pda::stake(&f.market, &c.key.pubkey()).0;
    let rent = f.ctx.svm.get_balance(&stake).unwrap();
    let lamports = f.ctx.svm.get_balance(&c.key.pubkey()).unwrap();
    f.ctx.run(&close_stake).expect("close_stake");
    assert!(!f.ctx.account_exists(&stake));
    assert_eq!(
        f.ctx.svm.get_balance(&c.key.pubkey()).unwrap(),
        lamports + rent
    );

    let rent = f.ctx.svm.get_balance(&f.queue_book).unwrap();
    let lamports = f.ctx.svm.get_balance(&authority.pubkey()).unwrap();
    f.ctx
        .run(&close_book(&authority))
        .expect("close_queue_book");
    assert!(!f.ctx.account_exists(&f.queue_book));
    assert_eq!(
        f.ctx.svm.get_balance(&authority.pubkey()).unwrap(),
        lamports + rent
    );
    assert_eq!(
        f.ctx.account::<Market>(&f.market).queue_book,
        Pubkey::default()
    );

    // The machine: active, then retired with a lease, then with a spot bid waiting.
    let owner = f.host.key.insecure_clone();
    let close_machine = CloseMachine {
        owner: &owner,
        market: f.market,
        machine: f.machine,
        spot_book: Some(f.spot_book),
    };
    let err = f.ctx.run(&close_machine).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::MachineNotRetired));
    let d = f.client(100 * TOKEN, 0);
    let a = f.spot_args(30 * TOKEN);
    let running = f.place(&d, a);
    let lease = f.allocate(running, &[0, 1, 2, 3]).unwrap();
    let a = f.spot_args(20 * TOKEN);
    let waiting = f.place(&d, a);
    f.ctx
        .run(&SetMachineStatus {
            owner: &owner,
            market: f.market,
            machine: f.machine,
            status: MachineStatus::Retired,
        })
        .unwrap();
    let err = f.ctx.run(&close_machine).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::MachineBusy));
    let d_key = d.key.insecure_clone();
    f.close(&d_key, lease, d.tokens, false).unwrap();
    let err = f.ctx.run(&close_machine).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::BookNotEmpty));
    f.ctx
        .run(&CancelBid {
            client: &d.key,
            market: f.market,
            bid: waiting,
            book: f.spot_book,
            payment_mint: f.mint,
            client_tokens: d.tokens,
        })
        .unwrap();
    // Without its spot book the machine would strand the book's rent.
    let err = f
        .ctx
        .run(&CloseMachine {
            spot_book: None,
            ..close_machine
        })
        .unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::WrongBook));
    let rent =
        f.ctx.svm.get_balance(&f.machine).unwrap() + f.ctx.svm.get_balance(&f.spot_book).unwrap();
    let lamports = f.ctx.svm.get_balance(&owner.pubkey()).unwrap();
    f.ctx.run(&close_machine).expect("close_machine");
    assert!(!f.ctx.account_exists(&f.machine) && !f.ctx.account_exists(&f.spot_book));
    assert_eq!(
        f.ctx.svm.get_balance(&owner.pubkey()).unwrap(),
        lamports + rent
    );
}
