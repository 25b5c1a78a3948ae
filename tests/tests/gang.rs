//! Gang leases, on the SBF build in LiteSVM: one bid on several machines at once, started by
//! `allocate_gang` on all of them or on none, settled part by part and decided as a whole
//! (refunded once, or back in the queue at its rank when a part's host went silent). Every
//! refused step is checked to move nothing.

use gpu_market_tests::lease_fixture;
use gpu_market_tests::program_test;

use gpu_market::errors::MarketError;
use gpu_market::pda;
use gpu_market::state::{
    Bid, BidStatus, Lease, Machine, MachineNetwork, MachineTerms, Market, StakeAccount,
};
use gpu_market_core::settlement::{bid_escrow, PriceUnit};
use gpu_market_sdk::instructions::{
    CloseLease, ExtendLease, Heartbeat, PlaceGangBid, SetRendezvous,
};
use lease_fixture::*;
use program_test::{book_order, Failure};
use solana_keypair::Keypair;
use solana_pubkey::Pubkey;
use solana_signer::Signer;

/// A machine's network that publishes a port for each lease: a gang's first port is where its
/// other parts reach its first.
fn published(terms: &mut MachineTerms) {
    terms.network = MachineNetwork {
        host: "10.0.0.1".into(),
        ports_per_lease: 1,
        ..MachineNetwork::default()
    };
}

/// The fixture's machine and two more of the same terms, each with its agent, all publishing a
/// port for each lease.
fn machines(f: &mut Fixture) -> Vec<(Pubkey, Keypair)> {
    f.update_machine(published);
    let mut out = vec![(f.machine, f.agent.insecure_clone())];
    for id in 1..=2 {
        out.push(f.other_machine_run_by(id, published));
    }
    out
}

/// Client `c` places a gang of `parts` machines × 2 GPUs of 24 GiB, rendezvous at port 29500.
fn place_gang(f: &mut Fixture, c: &Wallet, parts: u8) -> Pubkey {
    let mut args = f.queue_args(2, 24);
    args.ports = vec![29_500];
    let p = PlaceGangBid {
        place: f.placement(c, args),
        parts,
    };
    f.ctx.run(&p).expect("place_gang_bid");
    p.place.bid()
}

fn allocate_gang(
    f: &mut Fixture,
    agent: &Keypair,
    bid: Pubkey,
    on: &[Pubkey],
) -> Result<Vec<Pubkey>, Failure> {
    let a = f.ctx.gang_allocation(agent, bid, on);
    f.ctx.allocate_gang(&a).map(|_| a.leases())
}

fn lease_rent(f: &Fixture) -> u64 {
    f.ctx
        .svm
        .minimum_balance_for_rent_exemption(8 + <Lease as anchor_lang::Space>::INIT_SPACE)
}

fn lamports(f: &Fixture, key: &Pubkey) -> u64 {
    f.ctx.svm.get_balance(key).unwrap_or(0)
}

/// `end_lease` (or a reclaim) of `lease` by `signer`, with the accounts the sdk reads off the
/// lease, its machine and the market.
fn close(
    f: &mut Fixture,
    signer: &Keypair,
    lease: Pubkey,
    c: &Wallet,
    reclaim: bool,
) -> Result<(), Failure> {
    let l: Lease = f.ctx.account(&lease);
    let m: Machine = f.ctx.account(&l.machine);
    let market: Market = f.ctx.account(&f.market);
    let close = CloseLease::of(signer, (lease, &l), &m, &market, Some(c.tokens), reclaim);
    f.ctx.run(&close).map(drop)
}

fn heartbeat(f: &mut Fixture, agent: &Keypair, machine: Pubkey) {
    f.ctx.run(&Heartbeat { agent, machine }).expect("heartbeat");
}

/// Every account a refused gang step could have touched, as bytes.
fn snapshot(f: &Fixture, keys: &[Pubkey]) -> Vec<Option<Vec<u8>>> {
    keys.iter()
        .map(|k| f.ctx.svm.get_account(k).map(|a| a.data))
        .collect()
}

/// Sends what `send` sends, which the program refuses (with `error`, where given), and checks
/// that it left `keys` and the ledger of client `c` as they were.
fn refused(
    f: &mut Fixture,
    c: &Wallet,
    keys: &[Pubkey],
    error: Option<MarketError>,
    send: impl FnOnce(&mut Fixture) -> Result<(), Failure>,
) {
    let before = (snapshot(f, keys), f.ledger(c));
    let r = send(f);
    assert!(r.is_err(), "refused");
    if let Some(e) = error {
        assert_eq!(r.err().and_then(|e| e.custom_code()), code(e));
    }
    assert_eq!((snapshot(f, keys), f.ledger(c)), before);
}

#[test]
fn a_gang_starts_on_all_its_machines_at_once_or_on_none() {
    let mut f = fixture();
    let ms = machines(&mut f);
    let c = f.client(100 * TOKEN, 0);
    let bid = place_gang(&mut f, &c, 2);
    let b: Bid = f.ctx.account(&bid);
    assert!(b.is_gang() && b.parts == 2 && b.gpu_count == 2);
    // Its escrow pays for both parts, and its account holds both leases' rent.
    let wait = (b.latest_start() - f.ctx.now()) as u64;
    assert_eq!(
        b.escrow,
        bid_escrow(b.price, PriceUnit::PerGpuHour, 4, 3_600, wait).unwrap()
    );
    let bid_rent = f
        .ctx
        .svm
        .minimum_balance_for_rent_exemption(f.ctx.svm.get_account(&bid).unwrap().data.len());
    assert_eq!(lamports(&f, &bid), bid_rent + 2 * lease_rent(&f));
    assert_eq!(f.ctx.account::<Market>(&f.market).gpus_waiting, 4);
    let (m0, a0) = (ms[0].0, ms[0].1.insecure_clone());
    let (m1, m2) = (ms[1].0, ms[2].0);

    // Nothing starts a gang part by part, nor a gang on fewer, repeated or silent machines, nor
    // sent by an agent of none of them; each refusal leaves every account as it was.
    let leases = [pda::gang_lease(&bid, 0).0, pda::gang_lease(&bid, 1).0];
    let keys = [
        bid,
        f.market,
        f.queue_book,
        m0,
        m1,
        m2,
        leases[0],
        leases[1],
    ];
    let e = Some(MarketError::GangNeedsAllocateGang);
    refused(&mut f, &c, &keys, e, |f| f.allocate(bid, &[0, 1]).map(drop));
    let e = Some(MarketError::GangPartsMismatch);
    refused(&mut f, &c, &keys, e, |f| {
        allocate_gang(f, &a0, bid, &[m0, m0]).map(drop)
    });
    refused(&mut f, &c, &keys, e, |f| {
        let mut short = f.ctx.gang_allocation(&a0, bid, &[m0, m1]);
        short.parts.pop();
        f.ctx.run(&short).map(drop)
    });
    let stranger = f.ctx.wallet(1);
    let e = Some(MarketError::GangAgentMissing);
    refused(&mut f, &c, &keys, e, |f| {
        allocate_gang(f, &stranger, bid, &[m1, m2]).map(drop)
    });
    // Past the silence window, only machines whose agents sent a heartbeat since may take part.
    f.ctx.advance_time(3 * INTERVAL + 1);
    heartbeat(&mut f, &a0, m0);
    let e = Some(MarketError::MachineSilent);
    refused(&mut f, &c, &keys, e, |f| {
        allocate_gang(f, &a0, bid, &[m0, m1]).map(drop)
    });
    // A machine the part does not fit on (its GPUs are leased) fails the whole gang.
    let agent1 = ms[1].1.insecure_clone();
    heartbeat(&mut f, &agent1, m1);
    let other = f.client(100 * TOKEN, 0);
    let args = f.queue_args(4, 24);
    let single = f.place(&other, args);
    let a = f.ctx.allocation(&agent1, m1, single, &[0, 1, 2, 3]);
    f.ctx.allocate(&a).expect("the single bid takes machine 1");
    refused(&mut f, &c, &keys, None, |f| {
        allocate_gang(f, &a0, bid, &[m0, m1]).map(drop)
    });

    // On two free machines with live agents, both parts start at once.
    let agent2 = ms[2].1.insecure_clone();
    heartbeat(&mut f, &agent2, m2);
    let agent_before = lamports(&f, &a0.pubkey());
    let started = allocate_gang(&mut f, &a0, bid, &[m0, m2]).expect("allocate_gang");
    assert_eq!(started, leases.to_vec());
    let parts: Vec<Lease> = leases.iter().map(|l| f.ctx.account(l)).collect();
    for (i, (l, m)) in parts.iter().zip([m0, m2]).enumerate() {
        assert_eq!((l.part, l.parts, l.machine, l.bid), (i as u8, 2, m, bid));
        assert_eq!(
            (l.started_at, l.ends_at),
            (parts[0].started_at, parts[0].ends_at)
        );
        assert_eq!(l.gpu_count, 2);
    }
    assert_eq!(parts.iter().map(|l| l.escrow).sum::<u64>(), b.escrow);
    let b: Bid = f.ctx.account(&bid);
    assert_eq!(
        (b.status, b.parts_running, b.escrow),
        (BidStatus::Running, 2, 0)
    );
    assert!(!book_order(&f.ctx, &f.queue_book).contains(&bid));
    let stake: StakeAccount = f.ctx.account(&pda::stake(&f.market, &c.key.pubkey()).0);
    assert_eq!((stake.gpus_held, stake.open_bids), (4, 0));
    assert_eq!(f.ctx.account::<Market>(&f.market).gpus_waiting, 0);
    // The agent paid the leases' rent and got it back from the bid at once (the harness's
    // payer pays the fees).
    assert_eq!(lamports(&f, &a0.pubkey()), agent_before);
    assert_eq!(lamports(&f, &bid), bid_rent + f.ctx.slot_rent());
}

#[test]
fn a_gang_holds_no_single_bid_back_and_gives_way_to_better_ones() {
    let mut f = fixture();
    let ms = machines(&mut f);
    let (m0, a0) = (ms[0].0, ms[0].1.insecure_clone());
    let (m1, a1) = (ms[1].0, ms[1].1.insecure_clone());
    let m2 = ms[2].0;
    let staked = f.client(100 * TOKEN, 50 * TOKEN);
    let plain = f.client(100 * TOKEN, 0);
    // The gang ranks first (its client's stake); a single bid below it still runs.
    let gang = place_gang(&mut f, &staked, 2);
    let args = f.queue_args(2, 24);
    let below = f.place(&plain, args);
    assert_eq!(book_order(&f.ctx, &f.queue_book), vec![gang, below]);
    let a = f.ctx.allocation(&a1, m1, below, &[0, 1]);
    f.ctx
        .allocate(&a)
        .expect("a gang above holds no single bid back");

    // A single bid ranked above a gang that fits one of the gang's machines runs first there.
    let richer = f.client(200 * TOKEN, 150 * TOKEN);
    let args = f.queue_args(4, 24);
    let above = f.place(&richer, args);
    assert_eq!(book_order(&f.ctx, &f.queue_book), vec![above, gang]);
    let before = f.ledger(&staked);
    let r = allocate_gang(&mut f, &a0, gang, &[m0, m2]);
    assert_eq!(
        r.err().and_then(|e| e.custom_code()),
        code(MarketError::BetterBidFeasible)
    );
    assert_eq!(f.ledger(&staked), before);
    let a = f.ctx.allocation(&ms[2].1, m2, above, &[0, 1, 2, 3]);
    f.ctx.allocate(&a).expect("the better bid");
    // Machine 1's two free GPUs and the fixture's machine take the gang.
    allocate_gang(&mut f, &a0, gang, &[m0, m1]).expect("allocate_gang");
}

#[test]
fn a_gang_settles_part_by_part_and_refunds_once() {
    let mut f = fixture();
    let ms = machines(&mut f);
    let (m0, a0) = (ms[0].0, ms[0].1.insecure_clone());
    let (m1, a1) = (ms[1].0, ms[1].1.insecure_clone());
    let c = f.client(100 * TOKEN, 0);
    let tokens0 = f.ctx.token_balance(&c.tokens);
    let sol0 = lamports(&f, &c.key.pubkey());
    let bid = place_gang(&mut f, &c, 2);
    let leases = allocate_gang(&mut f, &a0, bid, &[m0, m1]).expect("allocate_gang");
    let agents = [a0, a1];
    for k in 0..2 {
        f.ctx.advance_time(INTERVAL);
        for (lease, agent) in leases.iter().zip(&agents) {
            let p = f.proof(lease, k);
            f.submit_with(agent, *lease, p).expect("submit_usage");
        }
    }
    // One part is not extended alone.
    let l: Lease = f.ctx.account(&leases[0]);
    let market: Market = f.ctx.account(&f.market);
    let extend = ExtendLease::of(&c.key, (leases[0], &l), &market, c.tokens, 600);
    let r = f.ctx.run(&extend);
    assert_eq!(
        r.err().and_then(|e| e.custom_code()),
        code(MarketError::GangPartExtend)
    );
    // While the gang runs whole, a stranger may not stop a part.
    let stranger = f.ctx.wallet(1);
    let before = f.ledger(&c);
    let r = close(&mut f, &stranger, leases[1], &c, false);
    assert_eq!(
        r.err().and_then(|e| e.custom_code()),
        code(MarketError::NotLeaseParty)
    );
    assert_eq!(f.ledger(&c), before);

    // The client ends one part: it settles, and gives what is left of its escrow and its rent
    // back to the bid; no refund yet.
    let l0: Lease = f.ctx.account(&leases[0]);
    let placed = tokens0 - f.ctx.token_balance(&c.tokens);
    close(&mut f, &c.key, leases[0], &c, false).expect("end_lease");
    assert!(!f.ctx.account_exists(&leases[0]));
    let b: Bid = f.ctx.account(&bid);
    assert_eq!((b.parts_running, b.status), (1, BidStatus::Running));
    assert!(b.gang_broken());
    assert_eq!(b.escrow, l0.escrow);
    assert_eq!(f.ctx.token_balance(&c.tokens), tokens0 - placed);

    // Now anyone may stop the other part; the last part's settlement refunds the whole gang
    // once, and the bid's account (with both leases' rent) goes back to the client.
    let l1: Lease = f.ctx.account(&leases[1]);
    let sol = lamports(&f, &c.key.pubkey());
    let held = lamports(&f, &bid) + lamports(&f, &leases[1]);
    close(&mut f, &stranger, leases[1], &c, false).expect("end_lease by a stranger");
    assert!(!f.ctx.account_exists(&leases[1]) && !f.ctx.account_exists(&bid));
    assert_eq!(
        f.ctx.token_balance(&c.tokens),
        tokens0 - l0.paid - l1.paid,
        "the client paid for the proven time of each part, and nothing else"
    );
    assert_eq!(lamports(&f, &c.key.pubkey()), sol + held);
    assert_eq!(
        lamports(&f, &c.key.pubkey()),
        sol0,
        "every account's rent came back (the harness's payer pays the fees)"
    );
    let stake: StakeAccount = f.ctx.account(&pda::stake(&f.market, &c.key.pubkey()).0);
    assert_eq!(stake.gpus_held, 0);
    let total: u64 = [m0, m1]
        .iter()
        .map(|m| f.ctx.account::<Machine>(m).leases as u64)
        .sum();
    assert_eq!(total, 0, "both machines are free");
}

#[test]
fn a_silent_part_fails_the_whole_gang_over_at_its_rank() {
    let mut f = fixture();
    let ms = machines(&mut f);
    let (m0, a0) = (ms[0].0, ms[0].1.insecure_clone());
    let (m1, m2) = (ms[1].0, ms[2].0);
    let c = f.client(100 * TOKEN, 0);
    let bid = place_gang(&mut f, &c, 2);
    let key = f.ctx.account::<Bid>(&bid).book_key;
    let leases = allocate_gang(&mut f, &a0, bid, &[m0, m1]).expect("allocate_gang");
    let escrow: u64 = leases
        .iter()
        .map(|l| f.ctx.account::<Lease>(l).escrow)
        .sum();
    // Part 0 is proven every interval; part 1's host goes silent.
    for k in 0..3 {
        f.ctx.advance_time(INTERVAL);
        let p = f.proof(&leases[0], k);
        f.submit_with(&a0, leases[0], p).expect("submit_usage");
    }
    let paid0 = f.ctx.account::<Lease>(&leases[0]).paid;
    let host = pda::stake(&f.market, &f.host.key.pubkey()).0;
    let host_before = f.ctx.account::<StakeAccount>(&host).amount;
    let keeper = f.ctx.wallet(1);
    close(&mut f, &keeper, leases[1], &c, true).expect("reclaim_escrow");
    assert!(
        f.ctx.account::<StakeAccount>(&host).amount < host_before,
        "slashed"
    );
    let b: Bid = f.ctx.account(&bid);
    assert!(b.gang_broken() && b.status == BidStatus::Running);

    // The keeper stops the part still running (proven to now, so it settles at once, last):
    // the gang waits again at its rank with both parts' unspent escrow, its rents in its
    // account.
    let l0: Lease = f.ctx.account(&leases[0]);
    assert_eq!(l0.paid, paid0);
    let waiting = f.ctx.account::<Market>(&f.market).gpus_waiting;
    close(&mut f, &keeper, leases[0], &c, false).expect("a stranger stops the broken gang's part");
    assert!(!f.ctx.account_exists(&leases[0]));
    let b: Bid = f.ctx.account(&bid);
    assert_eq!(
        (b.status, b.parts_running, b.book_key),
        (BidStatus::Open, 0, key)
    );
    assert_eq!(b.escrow, escrow - l0.paid);
    assert!(book_order(&f.ctx, &f.queue_book).contains(&bid));
    assert_eq!(f.ctx.account::<Market>(&f.market).gpus_waiting, waiting + 4);
    let bid_rent = f
        .ctx
        .svm
        .minimum_balance_for_rent_exemption(f.ctx.svm.get_account(&bid).unwrap().data.len());
    assert_eq!(lamports(&f, &bid), bid_rent + 2 * lease_rent(&f));

    // It runs again, on live machines, under the same lease addresses.
    f.ctx.advance_time(1);
    let agent2 = ms[2].1.insecure_clone();
    heartbeat(&mut f, &agent2, m2);
    let again = allocate_gang(&mut f, &a0, bid, &[m0, m2]).expect("the gang runs again");
    assert_eq!(again, leases);
}

#[test]
fn a_client_that_takes_a_silent_parts_escrow_back_ends_the_gang_with_one_refund() {
    let mut f = fixture();
    let ms = machines(&mut f);
    let (m0, a0) = (ms[0].0, ms[0].1.insecure_clone());
    let m1 = ms[1].0;
    let c = f.client(100 * TOKEN, 0);
    let tokens0 = f.ctx.token_balance(&c.tokens);
    let bid = place_gang(&mut f, &c, 2);
    let leases = allocate_gang(&mut f, &a0, bid, &[m0, m1]).expect("allocate_gang");
    for k in 0..3 {
        f.ctx.advance_time(INTERVAL);
        let p = f.proof(&leases[0], k);
        f.submit_with(&a0, leases[0], p).expect("submit_usage");
    }
    let l: Lease = f.ctx.account(&leases[1]);
    let m: Machine = f.ctx.account(&l.machine);
    let market: Market = f.ctx.account(&f.market);
    let mut reclaim = CloseLease::of(&c.key, (leases[1], &l), &m, &market, Some(c.tokens), true);
    reclaim.refund = true;
    f.ctx
        .run(&reclaim)
        .expect("the client reclaims with a refund");
    assert!(f.ctx.account::<Bid>(&bid).gang_broken());
    let paid = f.ctx.account::<Lease>(&leases[0]).paid;
    let stranger = f.ctx.wallet(1);
    close(&mut f, &stranger, leases[0], &c, false).expect("end_lease");
    assert!(
        !f.ctx.account_exists(&bid),
        "refunded and closed, not back in the queue"
    );
    assert!(!book_order(&f.ctx, &f.queue_book).contains(&bid));
    assert_eq!(f.ctx.token_balance(&c.tokens), tokens0 - paid);
}

#[test]
fn a_gang_publishes_its_rendezvous_once_from_its_first_part() {
    let mut f = fixture();
    let ms = machines(&mut f);
    let (m0, a0) = (ms[0].0, ms[0].1.insecure_clone());
    let (m1, a1) = (ms[1].0, ms[1].1.insecure_clone());
    let c = f.client(100 * TOKEN, 0);
    // A gang publishes at least one port: where its other parts reach its first.
    let args = f.queue_args(2, 24);
    let before = f.ledger(&c);
    let r = f.ctx.run(&PlaceGangBid {
        place: f.placement(&c, args),
        parts: 2,
    });
    assert_eq!(
        r.err().and_then(|e| e.custom_code()),
        code(MarketError::GangNeedsPort)
    );
    assert_eq!(f.ledger(&c), before);

    let bid = place_gang(&mut f, &c, 2);
    let leases = allocate_gang(&mut f, &a0, bid, &[m0, m1]).expect("allocate_gang");
    let stranger = f.ctx.wallet(1);
    let cases: [(&Keypair, Pubkey, Pubkey, u16, MarketError); 3] = [
        (&a1, m1, leases[1], 31_000, MarketError::NotAGang),
        (&stranger, m0, leases[0], 31_000, MarketError::WrongAgent),
        (&a0, m0, leases[0], 0, MarketError::BadPorts),
    ];
    for (agent, machine, lease, port, e) in cases {
        refused(&mut f, &c, &leases, Some(e), |f| {
            let s = SetRendezvous {
                agent,
                machine,
                lease,
                port,
            };
            f.ctx.run(&s).map(drop)
        });
    }
    let s = SetRendezvous {
        agent: &a0,
        machine: m0,
        lease: leases[0],
        port: 31_000,
    };
    f.ctx.run(&s).expect("set_rendezvous");
    assert_eq!(f.ctx.account::<Lease>(&leases[0]).rendezvous_port, 31_000);
    refused(&mut f, &c, &leases, Some(MarketError::RendezvousSet), |f| {
        let again = SetRendezvous { port: 31_001, ..s };
        f.ctx.run(&again).map(drop)
    });
}

/// What `allocate_gang` costs with nothing ranked above the gang, by its number of parts (one
/// machine each, three machines in all): printed for BENCHMARKS.md, bounded here.
#[test]
fn compute_units_of_allocate_gang() {
    for parts in [2u8, 3] {
        let mut f = fixture();
        let ms = machines(&mut f);
        let c = f.client(100 * TOKEN, 0);
        let bid = place_gang(&mut f, &c, parts);
        let placed = f.ctx.compute_units["place_gang_bid"];
        let on: Vec<Pubkey> = ms.iter().take(parts as usize).map(|(m, _)| *m).collect();
        let agent = ms[0].1.insecure_clone();
        allocate_gang(&mut f, &agent, bid, &on).expect("allocate_gang");
        let units = f.ctx.compute_units["allocate_gang"];
        println!(
            "gang of {parts}: place_gang_bid {placed} CU, allocate_gang {units} CU; its bid holds {} lamports of lease rent",
            parts as u64 * lease_rent(&f)
        );
        assert!(units <= 40_000 * parts as u64, "allocate_gang: {units} CU");
    }
}

/// A gang of two below entries that each fit one of its machines until the full rule turns them
/// away (on both machines a lease holds 16 of the 24 GiB of GPUs 1, 2 and 3, and each entry asks
/// 2 GPUs × 16 GiB: every whole-machine bound passes), each judged against both machines: the
/// compute units `allocate_gang` takes at each depth, and where it no longer fits a
/// transaction's 1.4 million. Printed for BENCHMARKS.md.
#[test]
fn a_gang_starts_below_entries_only_the_full_rule_turns_away_within_its_compute_budget() {
    let mut f = fixture();
    let ms = machines(&mut f);
    let (m0, a0) = (ms[0].0, ms[0].1.insecure_clone());
    let (m1, a1) = (ms[1].0, ms[1].1.insecure_clone());
    let holder = f.client(100 * TOKEN, 0);
    for (machine, agent) in [(m0, &a0), (m1, &a1)] {
        for gpu in 1..=3u8 {
            let args = f.queue_args(1, 16);
            let bid = f.place(&holder, args);
            let a = f.ctx.allocation(agent, machine, bid, &[gpu]);
            f.ctx.allocate(&a).expect("16 GiB of the GPU held");
        }
    }
    let c = f.client(100 * TOKEN, 0);
    let mut args = f.queue_args(1, 16);
    args.ports = vec![29_500];
    let place = PlaceGangBid {
        place: f.placement(&c, args),
        parts: 2,
    };
    f.ctx.run(&place).expect("place_gang_bid");
    let gang = place.place.bid();
    // Staked clients: each of their entries ranks above the gang.
    let clients: Vec<Wallet> = (1..=8)
        .map(|i| f.client(40_000 * TOKEN, i * TOKEN))
        .collect();
    let mut placed = 0;
    let mut rows = Vec::new();
    for depth in [0usize, 1_000, 2_000, 3_000, 3_500, 4_095] {
        while placed < depth {
            let args = f.queue_args(2, 16);
            f.place(&clients[placed % clients.len()], args);
            placed += 1;
        }
        let mut ctx = f.ctx.fork();
        let a = ctx.gang_allocation(&a0, gang, &[m0, m1]);
        assert!(a.evidence.is_empty(), "no entry above fits either machine");
        let units = ctx
            .allocate_gang(&a)
            .map(|_| ctx.compute_units["allocate_gang"]);
        rows.push((depth, units));
    }
    eprintln!("| entries above the gang of 2 | allocate_gang |");
    eprintln!("|---:|---|");
    for (depth, units) in &rows {
        let units = match units {
            Ok(u) => format!("{u} CU"),
            Err(e) => format!("refused: {:?}", e.err),
        };
        eprintln!("| {depth} | {units} |");
    }
    // A full book of them does not stall a gang of two.
    assert!(rows.iter().all(|(_, u)| u.is_ok()), "{rows:?}");
    assert_eq!(book_order(&f.ctx, &f.queue_book).len(), 4_096);
}
