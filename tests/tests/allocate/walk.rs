//! A machine's walk of a book too deep to judge in one transaction (`walk_book`): the entries an
//! attacker places that cost `allocate` most to turn away (about 650 compute units each on a
//! busy 8-GPU machine) make 4,095 of them more than a transaction's 1.4M units, so without a
//! walk the machine could start nothing below them. The walk judges them over several
//! transactions, and `allocate` judges afresh only what it did not cover; it holds only while
//! nothing that could make a bid fit has moved, and bids placed (or boosted) after it began are
//! judged by `allocate` itself.

use gpu_market::errors::MarketError;
use gpu_market::instructions::PlaceBidArgs;
use gpu_market::state::{
    BookKey, Machine, MachineNetwork, MachineStatus, MachineTerms, BOOK_CAPACITY,
};
use gpu_market_sdk::book::read_book;
use gpu_market_sdk::{BoostBid, ClientInstruction, WalkBook};
use gpu_market_tests::program_test::*;
use solana_instruction_error::InstructionError;
use solana_keypair::Keypair;
use solana_pubkey::Pubkey;
use solana_signer::Signer;
use solana_transaction_error::TransactionError;

use crate::fixture::*;

/// Walks the fixture machine's walk of the queue book on, `entries` entries a transaction,
/// until it covers every entry ranked above `chosen` (at most `most` transactions). The units
/// each used.
fn walk_above(f: &mut Fixture, chosen: &Pubkey, entries: u16, most: usize) -> Vec<u64> {
    let (machine, agent) = (f.machine, f.agent.insecure_clone());
    walk_above_on(f, (machine, &agent), chosen, entries, most)
}

/// [`walk_above`] for `machine`, whose agent is `agent`.
fn walk_above_on(
    f: &mut Fixture,
    (machine, agent): (Pubkey, &Keypair),
    chosen: &Pubkey,
    entries: u16,
    most: usize,
) -> Vec<u64> {
    let order = book_order(&f.ctx, &f.queue_book);
    let at = order
        .iter()
        .position(|b| b == chosen)
        .expect("the bid waits");
    let mut units = Vec::new();
    while !covers_above(f, &machine, at) {
        assert!(
            units.len() < most,
            "the walk covered {at} entries in {most} transactions"
        );
        units.push(walk_once(f, (machine, agent), entries));
    }
    units
}

/// One `walk_book` transaction of `machine` judging up to `entries` entries, at the most units
/// a transaction may ask; the units it used.
fn walk_once(f: &mut Fixture, (machine, agent): (Pubkey, &Keypair), entries: u16) -> u64 {
    let walk = WalkBook {
        agent,
        market: f.market,
        machine,
        book: f.queue_book,
        entries,
    };
    let tx = f.ctx.transaction(&allocate_instructions(&walk), &[agent]);
    let meta = f.ctx.send_transaction(tx).expect("walk_book");
    program_units(&meta.logs)
}

/// Whether `machine`'s walk covers the first `above` entries of the queue book.
fn covers_above(f: &Fixture, machine: &Pubkey, above: usize) -> bool {
    let m: Machine = f.ctx.account(machine);
    let leaves = read_book(&f.ctx.svm.get_account(&f.queue_book).unwrap().data)
        .expect("the book")
        .entries;
    above == 0
        || (m.walk.started != 0
            && m.walk.book == f.queue_book
            && leaves[above - 1].key() <= BookKey::new(m.walk.upto_book_key, m.walk.upto_seq))
}

/// `allocate` of `bid` onto `gpus` as the agent sends it (with the evidence the sdk reads off
/// the book and the machine's walk), at the most units a transaction may ask: its units, or
/// why it failed.
fn allocate_units(f: &mut Fixture, bid: Pubkey, gpus: &[u8]) -> Result<u64, Failure> {
    let a = f.allocation(bid, gpus);
    let tx = f.ctx.transaction(&allocate_instructions(&a), &a.signers());
    f.ctx
        .send_transaction(tx)
        .map(|meta| program_units(&meta.logs))
}

/// 8 GPUs of 24 GiB, each running a 1-GPU lease of 8 GiB at its own power limit (150 W on GPU 0,
/// 10 W more on each next one): a busy machine, its GPUs shared with free memory left.
fn shared_machine() -> Fixture {
    let mut f = fixture(vec![gpu(450); 8], 10_000);
    let (machine, agent) = (f.machine, f.agent.insecure_clone());
    share_gpus(&mut f, (machine, &agent));
    f
}

/// Each of `machine`'s 8 GPUs starts a 1-GPU lease of 8 GiB at its own power limit, as on
/// [`shared_machine`].
fn share_gpus(f: &mut Fixture, (machine, agent): (Pubkey, &Keypair)) {
    for g in 0..8u8 {
        let holder = f.client(100 * TOKEN, 0);
        let args = PlaceBidArgs {
            overclock: per_gpu(&[150 + 10 * g as u16]),
            ..f.args(1, 8, 0b1)
        };
        let held = f.place_via(&holder, args, machine);
        let a = f.ctx.allocation(agent, machine, held, &[g]);
        f.ctx.allocate(&a).expect("a lease on each GPU");
    }
}

/// The entry that costs `allocate` most to turn away on [`shared_machine`]: 4 GPUs × 8 GiB, three
/// at 150 W and one at 160 W. It passes every whole-machine bound, and each term set is allowed
/// by every GPU; only the exact rule turns it away (each set is served only by the one GPU that
/// already runs it).
fn costliest(f: &mut Fixture) -> PlaceBidArgs {
    PlaceBidArgs {
        overclock: per_gpu(&[150, 150, 150, 160]),
        ..f.args(4, 8, 0b1)
    }
}

/// Staked clients (their bids rank above an unstaked client's) place `n` bids of `args(f, i)`,
/// naming `witness` (paused once they are in, so that no active machine serves them).
fn place_above(
    f: &mut Fixture,
    n: usize,
    witness: &Witness,
    args: impl Fn(&mut Fixture, usize) -> PlaceBidArgs,
) {
    let clients: Vec<Client> = (1..=8)
        .map(|i| f.client(40_000 * TOKEN, i * TOKEN))
        .collect();
    f.set_witness(witness, MachineStatus::Active);
    for i in 0..n {
        let a = args(f, i);
        f.place_via(&clients[i % clients.len()], a, witness.machine);
    }
    f.set_witness(witness, MachineStatus::Paused);
}

#[test]
fn an_attacker_s_4095_costliest_bids_stall_allocate_until_the_machine_walks_the_book() {
    let mut f = shared_machine();
    let c = f.client(100 * TOKEN, 0);
    // 1 GPU × 8 GiB at 220 W: GPU 7 runs it already.
    let args = PlaceBidArgs {
        overclock: per_gpu(&[220]),
        ..f.args(1, 8, 0b1)
    };
    let servable = f.place(&c, args);
    let w = f.witness(1, [0; 16]);
    place_above(&mut f, BOOK_CAPACITY - 1, &w, |f, _| costliest(f));
    assert_eq!(f.position(&servable), Some(BOOK_CAPACITY - 1));

    // Without a walk the allocation runs out of units: the machine could start nothing.
    let before = f.ledger(&[&c]);
    let stalled = allocate_units(&mut f, servable, &[7]).map_err(|e| e.err);
    assert!(
        matches!(
            stalled,
            Err(TransactionError::InstructionError(
                _,
                InstructionError::ProgramFailedToComplete
                    | InstructionError::ComputationalBudgetExceeded
            ))
        ),
        "{stalled:?}"
    );
    assert_eq!(
        f.ledger(&[&c]),
        before,
        "the failed allocation moved nothing"
    );

    // The walk takes more than one transaction, moves nothing, and lets it through.
    let walked = walk_above(&mut f, &servable, 1_500, 4);
    assert!(walked.len() >= 2, "one transaction walked 4,095 entries");
    assert_eq!(f.ledger(&[&c]), before, "walking moved nothing");
    let units = allocate_units(&mut f, servable, &[7]).expect("allocate after the walk");
    eprintln!(
        "allocate below 4,095 of the costliest entries, on a machine whose 8 GPUs are shared:"
    );
    eprintln!("| transaction | compute units |");
    eprintln!("|---|---:|");
    for (i, u) in walked.iter().enumerate() {
        eprintln!("| walk_book {} | {u} |", i + 1);
    }
    eprintln!("| allocate | {units} |");
    assert!(
        units <= 400_000,
        "allocate over a walked book: {units} units"
    );
    assert!(walked.iter().all(|&u| u <= MAX_COMPUTE_UNITS as u64));
}

/// A gang of two below the same 4,095 entries, on two such machines: `allocate_gang` judges
/// every entry above it against both, so it runs out of units until both machines have walked
/// the book (one walk is not enough), and then starts both parts.
#[test]
fn a_gang_below_an_attacker_s_costliest_bids_starts_once_each_of_its_machines_walks_the_book() {
    // Machines that publish a port for each lease: a gang's first port is where its other
    // parts reach its first.
    let mut f = fixture(vec![gpu(450); 8], 10_000);
    f.update_machine(|t| {
        t.network = MachineNetwork {
            host: "10.0.0.1".into(),
            ports_per_lease: 1,
            ..MachineNetwork::default()
        }
    });
    let first = (f.machine, f.agent.insecure_clone());
    share_gpus(&mut f, (first.0, &first.1));
    let agent = f.ctx.wallet(10);
    let m: Machine = f.ctx.account(&f.machine);
    let terms = MachineTerms {
        agent: agent.pubkey(),
        ..m.terms()
    };
    let host = f.host.insecure_clone();
    let second = (f.ctx.register_machine(&host, f.market, 2, terms), agent);
    share_gpus(&mut f, (second.0, &second.1));
    let c = f.client(100 * TOKEN, 0);
    // 1 GPU × 8 GiB at 220 W on each machine: GPU 7 of each runs it already.
    let args = PlaceBidArgs {
        overclock: per_gpu(&[220]),
        ports: vec![29_500],
        ..f.args(1, 8, 0b1)
    };
    let gang = f.place_gang_via(&c, args, 2, first.0);
    let w = f.witness(1, [0; 16]);
    place_above(&mut f, BOOK_CAPACITY - 1, &w, |f, _| costliest(f));
    assert_eq!(f.position(&gang), Some(BOOK_CAPACITY - 1));

    let on = [first.0, second.0];
    let before = f.ledger(&[&c]);
    let start = |f: &mut Fixture| {
        let a = f.ctx.gang_allocation(&first.1, gang, &on);
        f.ctx
            .allocate_gang(&a)
            .map(|_| f.ctx.compute_units["allocate_gang"])
    };
    let out_of_units = |r: &Result<u64, Failure>| {
        matches!(
            r.as_ref().map_err(|e| &e.err),
            Err(TransactionError::InstructionError(
                _,
                InstructionError::ProgramFailedToComplete
                    | InstructionError::ComputationalBudgetExceeded
            ))
        )
    };
    let alone = start(&mut f);
    assert!(out_of_units(&alone), "{alone:?}");
    walk_above_on(&mut f, (first.0, &first.1), &gang, 1_500, 4);
    let one_walk = start(&mut f);
    assert!(out_of_units(&one_walk), "{one_walk:?}");
    assert_eq!(f.ledger(&[&c]), before, "nothing moved");

    walk_above_on(&mut f, (second.0, &second.1), &gang, 1_500, 4);
    let units = start(&mut f).expect("allocate_gang once both machines walked the book");
    eprintln!(
        "allocate_gang of 2 below 4,095 of the costliest entries, both machines walked: {units} CU"
    );
    assert!(
        units <= 600_000,
        "allocate_gang over walked books: {units} units"
    );
    let bid: gpu_market::state::Bid = f.ctx.account(&gang);
    assert_eq!(bid.parts_running, 2);
}

/// Ten staked bids at 10 tokens per GPU-hour, with an urgency premium, on a machine whose host
/// asks 20, above an unstaked bid at 20 that fits: the walk finds nothing above fitting.
fn below_the_floor() -> (Fixture, Pubkey) {
    let mut f = fixture(vec![gpu(450); 4], 10_000);
    set_floor(&mut f, 20 * TOKEN);
    let c = f.client(1_000 * TOKEN, 0);
    let args = PlaceBidArgs {
        price: 20 * TOKEN,
        ..f.args(1, 8, 0b1)
    };
    let chosen = f.place(&c, args);
    let w = f.witness(1, [0; 16]);
    place_above(&mut f, 10, &w, |f, _| PlaceBidArgs {
        price: 10 * TOKEN,
        urgency_premium: 50 * TOKEN,
        ..f.args(1, 8, 0b1)
    });
    assert_eq!(f.position(&chosen), Some(10));
    walk_above(&mut f, &chosen, 1_500, 1);
    (f, chosen)
}

fn set_floor(f: &mut Fixture, floor: u64) {
    f.update_machine(|t| t.price_floor_per_gpu_hour = floor);
}

#[test]
fn a_walk_no_longer_holds_once_the_machine_would_serve_more() {
    // As walked, the bid may start: nothing above fits.
    let (mut f, chosen) = below_the_floor();
    let saved = f.ctx.svm.clone();
    allocate_units(&mut f, chosen, &[0]).expect("nothing above fits");
    f.ctx.svm = saved;
    // The host lowers its floor: the ten bids above now fit, and the walk that judged them
    // against the old floor no longer holds.
    set_floor(&mut f, 0);
    let before = f.ledger(&[]);
    let refused = allocate_units(&mut f, chosen, &[0]);
    assert_eq!(
        refused.map_err(|e| e.custom_code()),
        Err(code(MarketError::BetterBidFeasible))
    );
    assert_eq!(f.ledger(&[]), before, "the refusal moved nothing");
}

#[test]
fn a_bid_placed_after_the_walk_is_judged_by_allocate() {
    let (mut f, chosen) = below_the_floor();
    // A staked client's bid at the host's floor, placed once the walk is done: it ranks above
    // the chosen bid and fits.
    let late = f.client(40_000 * TOKEN, 50 * TOKEN);
    let args = PlaceBidArgs {
        price: 20 * TOKEN,
        urgency_premium: 50 * TOKEN,
        ..f.args(1, 8, 0b1)
    };
    let late = f.place(&late, args);
    assert!(f.position(&late) < f.position(&chosen));
    let refused = allocate_units(&mut f, chosen, &[0]);
    assert_eq!(
        refused.map_err(|e| e.custom_code()),
        Err(code(MarketError::BetterBidFeasible))
    );
}

#[test]
fn a_bid_boosted_past_a_partial_walk_is_judged_by_allocate() {
    // 300 of the costliest entries above the chosen bid, and below it a bid that fits.
    let mut f = shared_machine();
    let c = f.client(100 * TOKEN, 0);
    let fits = |f: &mut Fixture| PlaceBidArgs {
        overclock: per_gpu(&[220]),
        ..f.args(1, 8, 0b1)
    };
    let args = fits(&mut f);
    let chosen = f.place(&c, args);
    let d = f.client(100 * TOKEN, 0);
    let args = fits(&mut f);
    let below = f.place(&d, args);
    let w = f.witness(1, [0; 16]);
    place_above(&mut f, 300, &w, |f, _| costliest(f));
    // A walk of 50 entries judges only the first of them.
    let (machine, agent) = (f.machine, f.agent.insecure_clone());
    walk_once(&mut f, (machine, &agent), 50);
    let m: Machine = f.ctx.account(&f.machine);
    assert!(m.walk.started != 0);
    assert!(!covers_above(&f, &machine, 300), "a partial walk");
    // The bid below boosts itself to the top, into what the walk covers, though the walk never
    // judged it: it takes a new placement number, so `allocate` judges it.
    f.ctx
        .run(&BoostBid {
            client: &d.key,
            market: f.market,
            bid: below,
            book: f.queue_book,
            payment_mint: f.mint,
            client_tokens: d.tokens,
            premium: 90 * TOKEN,
        })
        .expect("boost_bid");
    assert_eq!(f.position(&below), Some(0));
    let refused = allocate_units(&mut f, chosen, &[7]);
    assert_eq!(
        refused.map_err(|e| e.custom_code()),
        Err(code(MarketError::BetterBidFeasible))
    );
}
