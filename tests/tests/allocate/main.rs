//! Allocation proved from the book itself, on the SBF build in LiteSVM: `allocate` walks the
//! book above the chosen bid and checks each entry with the exact fit rule on its summary, so a
//! machine allocates the best bid it can serve below any number of bids it cannot, whatever
//! their shape, in a transaction whose size does not depend on them; evidence (client stakes)
//! only where the anti-monopoly cap decides; and the cap never keeps GPUs idle that nobody else
//! is waiting for. Every refused allocation is checked to move nothing.

mod fixture;
mod walk;

use gpu_market_tests::program_test;

use gpu_market::errors::MarketError;
use gpu_market::instructions::PlaceBidArgs;
use gpu_market::pda;
use gpu_market::state::{Lease, MachineStatus, Market, StakeAccount, BOOK_CAPACITY};
use program_test::*;
use solana_pubkey::Pubkey;
use solana_signer::Signer;

const TOKEN: u64 = 1_000_000;
use fixture::*;

#[test]
fn a_machine_allocates_below_4095_bids_for_another_class() {
    let mut f = fixture(vec![gpu(450); 4], 10_000);
    let c = f.client(100 * TOKEN, 0);
    let args = f.args(1, 8, 0b1);
    let servable = f.place(&c, args);
    let w = f.witness(1, [0; 16]);
    let measured = allocate_below_unservable_bids(
        &mut f,
        "class-1 bids on a class-0 machine",
        servable,
        &[0],
        &w,
        |f, _| f.args(1, 8, 0b10),
    );
    assert!(
        measured[0] <= 40_000,
        "allocate with nothing above: {} CU",
        measured[0]
    );
    // And for real: the lease starts, the book keeps the 4,095 others.
    f.allocate(servable, &[0]).expect("allocate");
    assert_eq!(book_order(&f.ctx, &f.queue_book).len(), BOOK_CAPACITY - 1);
}

#[test]
fn a_machine_allocates_below_4095_bids_for_more_gpus_than_it_has() {
    let mut f = fixture(vec![gpu(450); 4], 10_000);
    let c = f.client(100 * TOKEN, 0);
    let args = f.args(1, 8, 0b1);
    let servable = f.place(&c, args);
    let w = f.witness(1, [0; 16]);
    allocate_below_unservable_bids(
        &mut f,
        "8-GPU class-0 bids on a 4-GPU machine",
        servable,
        &[0],
        &w,
        |f, _| f.args(8, 8, 0b1),
    );
}

#[test]
fn a_machine_allocates_below_4095_bids_its_busy_gpus_cannot_take() {
    // A lease holds 16 of the 24 GiB of GPUs 1, 2 and 3: the machine has free GPUs, a GPU with
    // 16 GiB free, the class and the limits, so each 2-GPU × 16 GiB bid above passes every
    // whole-machine bound and is turned away only by the full rule (busy GPUs).
    let mut f = fixture(vec![gpu(450); 4], 10_000);
    let holder = f.client(100 * TOKEN, 0);
    let args = f.args(3, 16, 0b1);
    let held = f.place(&holder, args);
    f.allocate(held, &[1, 2, 3]).expect("the lease on GPUs 1-3");
    let c = f.client(100 * TOKEN, 0);
    let args = f.args(1, 16, 0b1);
    let servable = f.place(&c, args);
    let w = f.witness(1, [0; 16]);
    allocate_below_unservable_bids(
        &mut f,
        "2-GPU × 16 GiB bids on a machine with one such GPU free",
        servable,
        &[0],
        &w,
        |f, _| f.args(2, 16, 0b1),
    );
}

#[test]
fn a_better_bid_asking_for_ports_the_machine_does_not_publish_neither_runs_nor_blocks() {
    let mut f = fixture(vec![gpu(450)], 10_000);
    let rich = f.client(600 * TOKEN, 500 * TOKEN);
    let plain = f.client(100 * TOKEN, 0);
    let w = f.witness(1, [0; 16]);
    let serving = PlaceBidArgs {
        ports: vec![8080],
        ..f.args(1, 8, 0b1)
    };
    // The fixture's machine publishes no port: it is no witness for the bid.
    let p = PlaceBid {
        client: &rich.key,
        market: f.market,
        book: f.queue_book,
        machine: f.machine,
        payment_mint: f.mint,
        client_tokens: rich.tokens,
        nonce: 0,
        args: serving.clone(),
        evict: None,
    };
    let err = f.ctx.run(&p).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::NoRoom));
    let serving = f.place_via(&rich, serving, w.machine);
    let scratch = PlaceBidArgs {
        scratch_gib: 4,
        ..f.args(1, 8, 0b1)
    };
    let scratch = f.place_via(&rich, scratch, w.machine);
    f.set_witness(&w, MachineStatus::Paused);
    let args = f.args(1, 8, 0b1);
    let other = f.place(&plain, args);
    // Both ask for more than the machine (no ports, no scratch) gives a lease: they cannot
    // run here, and ranked above the plain bid they do not keep it waiting.
    assert!(f.position(&serving) < f.position(&other));
    assert!(f.position(&scratch) < f.position(&other));
    for bid in [serving, scratch] {
        let err = f.allocate(bid, &[0]).unwrap_err();
        assert_eq!(err.custom_code(), code(MarketError::NoRoom));
    }
    f.allocate(other, &[0]).expect("the plain bid runs");
}

#[test]
fn a_lone_client_gets_the_gpus_of_a_small_market() {
    for gpus in [1u8, 2] {
        let mut f = fixture(vec![gpu(450); gpus as usize], 5_000);
        // Past the market's opening interval, which has no cap.
        f.ctx.advance_time(60);
        let c = f.client(100 * TOKEN, 0);
        let args = f.args(gpus, 8, 0b1);
        let bid = f.place(&c, args);
        // Half of a 1- or 2-GPU market: the bid is over the cap, and nobody else waits.
        let m: Market = f.ctx.account(&f.market);
        assert!(!m.within_client_cap(0, gpus as u64, f.ctx.now()));
        let all: Vec<u8> = (0..gpus).collect();
        let lease = f.allocate(bid, &all).expect("the only bid runs");
        assert_eq!(f.ctx.account::<Lease>(&lease).gpu_count, gpus);
        let st: StakeAccount = f.ctx.account(&pda::stake(&f.market, &c.key.pubkey()).0);
        assert_eq!(st.gpus_held, gpus as u32);
    }
}

/// A host re-declares an idle machine's GPUs inside the transaction of its own `allocate`
/// (`update_machine` first): the cap counts the GPUs offered when the billing interval began,
/// so the re-declaration moves nothing, and the over-cap bid still gives way.
#[test]
fn a_host_cannot_move_the_cap_inside_its_allocate_transaction() {
    // 4 GPUs and an idle 1-GPU machine, a cap of 50 %: 2.5 GPUs per client.
    let mut f = fixture(vec![gpu(450); 4], 5_000);
    let host = f.host.insecure_clone();
    let idle_agent = f.ctx.wallet(1);
    let mut idle_terms = witness_terms(idle_agent.pubkey(), [0; 16]);
    idle_terms.gpus.truncate(1);
    let idle = f
        .ctx
        .register_machine(&host, f.market, 1, idle_terms.clone());
    f.ctx.advance_time(60);
    let a = f.client(200 * TOKEN, 100 * TOKEN);
    let b = f.client(100 * TOKEN, 0);
    let args = f.args(2, 8, 0b1);
    let first = f.place(&a, args);
    f.allocate(first, &[0, 1])
        .expect("A's first bid, within the cap");
    // A (2 held, at the cap) ranks above B (within it); both fit GPU 2.
    let args = f.args(1, 8, 0b1);
    let over = f.place(&a, args);
    let args = f.args(1, 8, 0b1);
    let within = f.place(&b, args);
    assert_eq!((f.position(&over), f.position(&within)), (Some(0), Some(1)));

    // 16 GPUs on the idle machine would lift the cap to 10 GPUs a client, A's bid within it.
    let mut inflated = idle_terms;
    inflated.gpus = witness_terms(idle_agent.pubkey(), [0; 16]).gpus;
    let update = UpdateMachine {
        owner: &host,
        market: f.market,
        machine: idle,
        spot_book: None,
        terms: inflated,
    };
    let agent = f.agent.insecure_clone();
    let alloc = f.allocation(over, &[2]);
    let [budget, allocate] = allocate_instructions(&alloc);
    let before = f.ledger(&[&a, &b]);
    let err = f
        .ctx
        .send(
            &[budget, update.instruction(), allocate],
            &[&host as &dyn Signer, &agent],
        )
        .unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::ClientCapReached));
    assert_eq!(
        f.ledger(&[&a, &b]),
        before,
        "a refused allocation moves nothing"
    );
    assert!(!f.ctx.account_exists(&pda::lease(&over).0));
    f.allocate(within, &[2]).expect("B within the cap");
}

#[test]
fn the_cap_gives_way_to_other_clients_that_fit() {
    // 4 GPUs, a cap of 50 %: 2 GPUs per client.
    let mut f = fixture(vec![gpu(450); 4], 5_000);
    // The cap counts the GPUs offered when the billing interval began: the machine's, from
    // the next interval on.
    f.ctx.advance_time(60);
    let a = f.client(200 * TOKEN, 100 * TOKEN);
    let b = f.client(100 * TOKEN, 0);
    let args = f.args(2, 8, 0b1);
    let first = f.place(&a, args);
    f.allocate(first, &[0, 1]).expect("A's first bid");
    // A (at the cap) ranks above B (within it); both fit GPU 2.
    let args = f.args(1, 8, 0b1);
    let over = f.place(&a, args);
    let args = f.args(1, 8, 0b1);
    let within = f.place(&b, args);
    assert_eq!((f.position(&over), f.position(&within)), (Some(0), Some(1)));
    let before = f.ledger(&[&a, &b]);
    let err = f.allocate(over, &[2]).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::ClientCapReached));
    assert_eq!(
        f.ledger(&[&a, &b]),
        before,
        "a refused allocation moves nothing"
    );
    assert!(!f.ctx.account_exists(&pda::lease(&over).0));
    // B's bid passes A's, which gives way; the program needs A's stake to know.
    let agent = f.agent.insecure_clone();
    let alloc = f.ctx.allocation(&agent, f.machine, within, &[2]);
    assert_eq!(
        alloc.evidence,
        vec![pda::stake(&f.market, &a.key.pubkey()).0]
    );
    f.send(&alloc).expect("B within the cap");

    // C, within the cap, ranks above A's bid: allocating A's is refused for C's.
    let c = f.client(600 * TOKEN, 500 * TOKEN);
    let args = f.args(1, 8, 0b1);
    let better = f.place(&c, args);
    assert_eq!(f.position(&better), Some(0));
    let before = f.ledger(&[&a, &b, &c]);
    let err = f.allocate(over, &[3]).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::BetterBidFeasible));
    assert_eq!(
        f.ledger(&[&a, &b, &c]),
        before,
        "a refused allocation moves nothing"
    );
    f.allocate(better, &[3]).expect("C within the cap");
    let held = |k: &Client| {
        f.ctx
            .account::<StakeAccount>(&pda::stake(&f.market, &k.key.pubkey()).0)
            .gpus_held
    };
    assert_eq!((held(&a), held(&b), held(&c)), (2, 1, 1));
}

/// A machine whose GPUs 0 and 1 allow up to 300 W and GPUs 2 and 3 up to 450 W; a staked client
/// places a bid with per-GPU power limits `watts` (two distinct sets: its book entry keeps both
/// with their counts, and decides exactly), and a client without stake a 1-GPU bid below it.
/// Returns the fixture, both clients, the per-GPU bid and the one below.
fn two_sets(watts: &[u16]) -> (Fixture, [Client; 2], Pubkey, Pubkey) {
    let mut f = fixture(vec![gpu(300), gpu(300), gpu(450), gpu(450)], 10_000);
    let p = f.client(200 * TOKEN, 100 * TOKEN);
    let q = f.client(100 * TOKEN, 0);
    let w = f.witness(1, [0; 16]);
    let mut args = f.args(watts.len() as u8, 8, 0b1);
    args.overclock = per_gpu(watts);
    let mixed = f.place_via(&p, args, w.machine);
    f.set_witness(&w, MachineStatus::Paused);
    let args = f.args(1, 8, 0b1);
    let below = f.place(&q, args);
    assert_eq!((f.position(&mixed), f.position(&below)), (Some(0), Some(1)));
    (f, [p, q], mixed, below)
}

#[test]
fn a_bid_with_two_term_sets_that_does_not_fit_needs_no_evidence() {
    // 3 GPUs at 400 W are asked, 2 GPUs allow it: the bid above does not fit, and its entry
    // says so (with a range of terms it could not: issue 30).
    let (mut f, _, mixed, below) = two_sets(&[400, 400, 400, 300]);
    let agent = f.agent.insecure_clone();
    let alloc = f.ctx.allocation(&agent, f.machine, below, &[0]);
    assert!(alloc.evidence.is_empty(), "{:?}", alloc.evidence);
    f.send(&alloc)
        .expect("the entry shows the one above does not fit");
    assert_eq!(f.position(&mixed), Some(0));
}

#[test]
fn a_bid_with_two_term_sets_that_fits_keeps_its_rank() {
    // 1 GPU at 400 W and 2 at 300 W: GPU 2 or 3 takes the 400 W one, the bid above fits.
    let (mut f, [p, q], mixed, below) = two_sets(&[300, 400, 300]);
    let before = f.ledger(&[&p, &q]);
    let agent = f.agent.insecure_clone();
    let a = f.ctx.allocation(&agent, f.machine, below, &[0]);
    // Only its client's stake, for the cap: the entry alone says it fits.
    assert_eq!(a.evidence, vec![pda::stake(&f.market, &p.key.pubkey()).0]);
    let err = f.send(&a).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::BetterBidFeasible));
    assert_eq!(
        f.ledger(&[&p, &q]),
        before,
        "a refused allocation moves nothing"
    );
    // The fit rule's choice for it is what the program accepts.
    let gpus = f.ctx.choose(&f.machine, &mixed).expect("it fits");
    let lease = f.allocate(mixed, &gpus).expect("the per-GPU bid runs");
    let l: Lease = f.ctx.account(&lease);
    assert_eq!(l.power_limits_w[..3], [300, 400, 300]);
    assert!(l.gpus()[1] >= 2, "the 400 W GPU of the bid: {:?}", l.gpus());
}

#[test]
fn three_term_sets_are_refused_at_placement_and_move_nothing() {
    let mut f = fixture(vec![gpu(450); 4], 10_000);
    let p = f.client(200 * TOKEN, 0);
    let mut args = f.args(3, 8, 0b1);
    args.overclock = per_gpu(&[200, 300, 400]);
    let before = f.ledger(&[&p]);
    let place = PlaceBid {
        client: &p.key,
        market: f.market,
        book: f.queue_book,
        machine: f.machine,
        payment_mint: f.mint,
        client_tokens: p.tokens,
        nonce: 0,
        args,
        evict: None,
    };
    let err = f.ctx.run(&place).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::TooManyTermSets));
    assert_eq!(f.ledger(&[&p]), before);
}

/// Issue 30, fault 1: the kinds of entry a summary could not decide (a range of per-GPU terms
/// some GPUs allow in part; a region whose 32-bit hash met the machine's) are now exact. A full
/// book of bids of those shapes above an honest bid, in turn: per-GPU power limits 50 W and
/// 300 W (no GPU here goes below 150 W), 3 GPUs at 400 W with one at 300 W (two GPUs here
/// allow 400 W: only the full rule on the two term sets turns it away), and a region the
/// market lists but the machine is not in. Their witness is the attacker's own machine, paused
/// once they are placed. The honest bid's `allocate` needs no evidence, fits a packet with the
/// agent's compute-budget instruction and runs inside a transaction's compute units at every
/// depth up to 4,095.
#[test]
fn a_machine_allocates_below_4095_bids_of_the_formerly_undecidable_kinds() {
    let mut f = fixture(vec![gpu(300), gpu(300), gpu(450), gpu(450)], 10_000);
    let authority = f.authority.insecure_clone();
    for r in ["eu-central", "us-east"] {
        f.ctx
            .run(&AddRegion {
                authority: &authority,
                market: f.market,
                region: region(r),
            })
            .expect("add_region");
    }
    f.update_machine(|t| t.region = region("eu-central"));
    let c = f.client(100 * TOKEN, 0);
    let args = f.args(1, 8, 0b1);
    let servable = f.place(&c, args);
    let w = f.witness(1, region("us-east"));
    let measured = allocate_below(
        &mut f,
        "bids of the formerly undecidable kinds",
        servable,
        &[0],
        &w,
        &DEPTHS,
        |f, i| match i % 3 {
            0 => PlaceBidArgs {
                overclock: per_gpu(&[50, 300]),
                ..f.args(2, 8, 0b1)
            },
            1 => PlaceBidArgs {
                overclock: per_gpu(&[400, 400, 400, 300]),
                ..f.args(4, 8, 0b1)
            },
            _ => PlaceBidArgs {
                regions: vec![region("us-east")],
                ..f.args(1, 8, 0b1)
            },
        },
    );
    assert!(
        measured[0] <= 40_000,
        "allocate with nothing above: {} CU",
        measured[0]
    );
    f.allocate(servable, &[0]).expect("allocate");
}
