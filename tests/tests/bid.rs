//! Bids with escrow: place (queue and spot), score order and aging in the book, top up,
//! cancel, and every bad input, on the SBF build in LiteSVM.

use gpu_market_tests::program_test;

use anchor_lang::error::{ErrorCode as AnchorErrorCode, ERROR_CODE_OFFSET};
use gpu_market::errors::MarketError;
use gpu_market::instructions::PlaceBidArgs;
use gpu_market::pda;
use gpu_market::state::{
    book_space, Bid, BidKind, BidStatus, GpuSpec, Machine, MachineNetwork, MachineStatus,
    MachineTerms, Market, MarketParams, OverclockTerms, StakeAccount, BOOK_CAPACITY,
    BOOK_EMPTY_SPACE, BOOK_SLOT_SIZE, IMAGE_REF_LEN, MAX_PORTS, MAX_REGIONS,
};
use program_test::*;
use solana_keypair::Keypair;
use solana_pubkey::Pubkey;
use solana_signer::Signer;

fn code(e: MarketError) -> Option<u32> {
    Some(ERROR_CODE_OFFSET + e as u32)
}

const TOKEN: u64 = 1_000_000; // 6 decimals

#[derive(Clone, Copy)]
struct Keys {
    mint: Pubkey,
    market: Pubkey,
    queue_book: Pubkey,
    /// A machine every queue bid here fits (`witness_terms`), which they name at placement.
    witness: Pubkey,
}

struct Fixture {
    ctx: TestContext,
    authority: Keypair,
    mint: Pubkey,
    market: Pubkey,
    queue_book: Pubkey,
    keys: Keys,
}

/// A market with its queue book open; one token for stake and payment.
fn fixture() -> Fixture {
    fixture_with(MarketParams::recommended(60, 250, 3_600))
}

fn fixture_with(mut params: MarketParams) -> Fixture {
    let mut ctx = TestContext::new();
    params.stake_bound = 1_000 * TOKEN;
    let (authority, mint, market) = ctx.create_market(1, params);
    let queue_book = ctx.open_queue_book(&authority, market);
    let (_, witness) = ctx.open_witness(market, &mint, [0; 16]);
    let keys = Keys {
        mint,
        market,
        queue_book,
        witness,
    };
    Fixture {
        ctx,
        authority,
        mint,
        market,
        queue_book,
        keys,
    }
}

struct Client {
    key: Keypair,
    tokens: Pubkey,
    /// The last nonce a bid of this client took ([`place`]): each bid gets the next.
    nonce: std::cell::Cell<u64>,
}

/// A client holding `balance` tokens, `staked` of them staked.
fn client(f: &mut Fixture, balance: u64, staked: u64) -> Client {
    let (key, tokens) = f.ctx.funded_user(&f.mint, balance);
    f.ctx
        .run(&OpenStake {
            owner: &key,
            market: f.market,
        })
        .expect("open_stake");
    if staked > 0 {
        f.ctx
            .run(&Stake {
                owner: &key,
                market: f.market,
                stake_mint: f.mint,
                owner_tokens: tokens,
                amount: staked,
            })
            .expect("stake");
    }
    Client {
        key,
        tokens,
        nonce: Default::default(),
    }
}

fn args(f: &Fixture) -> PlaceBidArgs {
    PlaceBidArgs {
        kind: BidKind::Queue,
        image_ref: "127.0.0.1:5000/gpu-market/busybox:latest".into(),
        image_digest: [9; 32],
        env_hash: [3; 32],
        gpu_count: 2,
        gib_per_gpu: 16,
        accepted_classes: 0b11,
        overclock: vec![OverclockTerms {
            power_limit_w: 300,
            ..Default::default()
        }],
        price: 2 * TOKEN, // per GPU-hour
        max_duration_secs: 3_600,
        min_duration_secs: 3_600,
        deadline: f.ctx.now() + 4 * 3_600,
        urgency_premium: 0,
        ports: vec![],
        scratch_gib: 0,
        cpu_milli: 0,
        memory_mib: 0,
        regions: Vec::new(),
        auto_power: None,
    }
}

fn place<'a>(f: Keys, c: &'a Client, a: PlaceBidArgs) -> PlaceBid<'a> {
    PlaceBid {
        client: &c.key,
        market: f.market,
        book: f.queue_book,
        machine: f.witness,
        payment_mint: f.mint,
        client_tokens: c.tokens,
        nonce: c.nonce.replace(c.nonce.get() + 1) + 1,
        args: a,
        evict: None,
    }
}

#[test]
fn place_bid_locks_the_escrow_and_enters_the_book() {
    let mut f = fixture();
    let c = client(&mut f, 100 * TOKEN, 10 * TOKEN);
    let vault = pda::payment_vault(&f.market).0;
    let p = place(f.keys, &c, args(&f));
    f.ctx.run(&p).expect("place_bid");
    let bid: Bid = f.ctx.account(&p.bid());
    // 2 GPUs × 2 tokens per GPU-hour × (its 1-hour run + the 3 hours it may wait to start).
    assert_eq!(bid.escrow, 16 * TOKEN);
    // One set of terms for both GPUs and a 40-byte image reference: the account holds one entry
    // and the reference's bytes, and stays within 408 bytes (399 before gangs: a bid's parts,
    // its running parts and their flags, with padding; 297 before bids kept the token
    // account their escrow came from, for refunds by anyone; 329 before they recorded the
    // urgency premium paid; 333 before they asked for ports and scratch; 339 before they
    // reserved CPU and memory; 347 before they named regions; 354 before they noted their
    // book's full clock on entry, for the holding charge; 367 before they named the machine
    // holding GPUs for them, `reserved_on`).
    let size = f.ctx.svm.get_account(&p.bid()).unwrap().data.len();
    assert_eq!(
        (size, bid.overclock.len()),
        (Bid::space(1, bid.image_ref.len(), 0, 0), 1)
    );
    assert!(size <= 408);
    assert_eq!(
        f.ctx.token_balance(&c.tokens),
        100 * TOKEN - 10 * TOKEN - 16 * TOKEN
    );
    assert_eq!(f.ctx.token_balance(&vault), 16 * TOKEN);
    assert_eq!(
        (bid.client, bid.market, bid.status),
        (c.key.pubkey(), f.market, BidStatus::Open)
    );
    assert_eq!(bid.image_ref, "127.0.0.1:5000/gpu-market/busybox:latest");
    assert_eq!(f.ctx.account::<Market>(&f.market).total_escrow, 16 * TOKEN);
    assert_eq!(book_order(&f.ctx, &f.queue_book), vec![p.bid()]);
    // S = 10/1000 of the bound → 100 bps; U: no urgency premium paid → 0; C = spend per hour
    // (2 tokens × 2 GPUs) against the bound (64 tokens per hour) → 625 bps.
    let c_bps = 2 * 2 * TOKEN * 10_000 / (64 * TOKEN);
    assert_eq!(bid.urgency_premium, 0);
    assert_eq!(bid.score, (4_000 * 100 + 3_000 * c_bps) / 10_000);
}

#[test]
fn the_book_ranks_by_score_and_ages_waiting_bids() {
    let mut f = fixture();
    let whale = client(&mut f, 2_000 * TOKEN, 1_000 * TOKEN);
    let minnow = client(&mut f, 100 * TOKEN, 0);
    let middle = client(&mut f, 600 * TOKEN, 500 * TOKEN);
    let low = PlaceBid {
        ..place(f.keys, &minnow, args(&f))
    };
    f.ctx.run(&low).unwrap();
    let high = place(f.keys, &whale, args(&f));
    f.ctx.run(&high).unwrap();
    let mid = place(f.keys, &middle, args(&f));
    f.ctx.run(&mid).unwrap();
    assert_eq!(
        book_order(&f.ctx, &f.queue_book),
        vec![high.bid(), mid.bid(), low.bid()]
    );

    // The same whale bid placed much later ranks below the minnow's: every interval waited is
    // worth `aging_per_interval` (10) points; the whale's lead is 40 % of 10 000 = 4 000 points,
    // so 401 intervals of waiting put the minnow first.
    f.ctx.advance_time(401 * 60);
    let mut later = args(&f);
    later.deadline = f.ctx.now() + 4 * 3_600;
    let late_whale = place(f.keys, &whale, later);
    f.ctx.run(&late_whale).unwrap();
    let order = book_order(&f.ctx, &f.queue_book);
    assert_eq!(order.len(), 4);
    let pos = |k: Pubkey| order.iter().position(|&b| b == k).unwrap();
    assert!(
        pos(low.bid()) < pos(late_whale.bid()),
        "aging lifted the waiting bid: {order:?}"
    );
}

/// The duration handicap (`score::duration_handicap`): a bid ranks as if placed three times
/// its requested duration later. Among equal scores a shorter bid placed later goes first, but
/// none placed more than three durations after a bid passes it.
#[test]
fn shorter_bids_go_first_within_three_durations() {
    let mut f = fixture();
    let c = client(&mut f, 1_000 * TOKEN, 0);
    let hours = |f: &Fixture, h: u32| {
        let mut a = args(f);
        a.max_duration_secs = h * 3_600;
        a.min_duration_secs = h * 3_600;
        a.deadline = f.ctx.now() + (h as i64 + 1) * 3_600;
        a
    };
    let one = place(f.keys, &c, hours(&f, 1));
    f.ctx.run(&one).unwrap();
    f.ctx.advance_time(60);
    let ten = place(f.keys, &c, hours(&f, 10));
    f.ctx.run(&ten).unwrap();
    // Two hours later: within three hours of `one`, long before thirty of `ten`.
    f.ctx.advance_time(2 * 3_600);
    let soon = place(f.keys, &c, hours(&f, 1));
    f.ctx.run(&soon).unwrap();
    // More than three hours after `one`.
    f.ctx.advance_time(3_600 + 120);
    let late = place(f.keys, &c, hours(&f, 1));
    f.ctx.run(&late).unwrap();
    assert_eq!(
        book_order(&f.ctx, &f.queue_book),
        vec![one.bid(), soon.bid(), late.bid(), ten.bid()]
    );
}

#[test]
fn top_up_adds_escrow_and_cancel_refunds_it_in_full() {
    let mut f = fixture();
    let c = client(&mut f, 100 * TOKEN, 0);
    let vault = pda::payment_vault(&f.market).0;
    let mut a = args(&f);
    a.kind = BidKind::Queue;
    let p = PlaceBid {
        ..place(f.keys, &c, a)
    };
    f.ctx.run(&p).unwrap();
    f.ctx
        .run(&TopUpBid {
            client: &c.key,
            market: f.market,
            bid: p.bid(),
            payment_mint: f.mint,
            client_tokens: c.tokens,
            amount: TOKEN,
        })
        .expect("top_up_bid");
    assert_eq!(f.ctx.account::<Bid>(&p.bid()).escrow, 17 * TOKEN);
    assert_eq!(f.ctx.token_balance(&vault), 17 * TOKEN);

    let lamports_before = f.ctx.svm.get_balance(&c.key.pubkey()).unwrap();
    f.ctx
        .run(&CancelBid {
            client: &c.key,
            market: f.market,
            bid: p.bid(),
            book: f.queue_book,
            payment_mint: f.mint,
            client_tokens: c.tokens,
        })
        .expect("cancel_bid");
    assert_eq!(f.ctx.token_balance(&c.tokens), 100 * TOKEN);
    assert_eq!(f.ctx.token_balance(&vault), 0);
    assert!(!f.ctx.account_exists(&p.bid()), "the bid account is closed");
    assert!(
        f.ctx.svm.get_balance(&c.key.pubkey()).unwrap() > lamports_before,
        "rent returned"
    );
    assert!(book_order(&f.ctx, &f.queue_book).is_empty());
    assert_eq!(f.ctx.account::<Market>(&f.market).total_escrow, 0);
}

#[test]
fn stake_that_ranks_a_waiting_bid_cannot_be_asked_back() {
    let mut f = fixture();
    let c = client(&mut f, 100 * TOKEN, 50 * TOKEN);
    let p = place(f.keys, &c, args(&f));
    f.ctx.run(&p).unwrap();
    let unstake = RequestUnstake {
        owner: &c.key,
        market: f.market,
        amount: 50 * TOKEN,
    };
    let err = f.ctx.run(&unstake).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::StakeLockedByBids));
    let cancel = CancelBid {
        client: &c.key,
        market: f.market,
        bid: p.bid(),
        book: f.queue_book,
        payment_mint: f.mint,
        client_tokens: c.tokens,
    };
    f.ctx.run(&cancel).expect("cancel_bid");
    f.ctx
        .run(&unstake)
        .expect("request_unstake once no bid waits");
}

/// What a refused placement or removal must leave as it was (see `Ledger`).
fn ledger(f: &Fixture, clients: &[&Client]) -> Ledger {
    let clients: Vec<(&Keypair, Pubkey)> = clients.iter().map(|c| (&c.key, c.tokens)).collect();
    f.ctx.ledger(&f.market, &f.queue_book, &clients)
}

/// One placement's compute units, with the book's length before it and the bump of the bid's
/// address (`init` searches the bump from 255 down, about 1,500 units per step).
struct Placed {
    book_len: usize,
    bump: u8,
    units: u64,
}

/// Fills the queue book with `filler`'s 1-GPU bids at the reserve price, placed one after the
/// other with equal scores (so the last one placed ranks lowest). Returns each placement's
/// compute units.
fn fill_book(f: &mut Fixture, filler: &Client) -> Vec<Placed> {
    let mut a = args(f);
    a.gpu_count = 1;
    a.price = TOKEN;
    (0..BOOK_CAPACITY as u64)
        .map(|nonce| {
            let p = place(f.keys, filler, a.clone());
            f.ctx
                .run(&p)
                .unwrap_or_else(|e| panic!("bid {nonce}: {:?}", e.err));
            Placed {
                book_len: nonce as usize,
                bump: pda::bid(&f.market, &filler.key.pubkey(), p.nonce).1,
                units: f.ctx.compute_units["place_bid"],
            }
        })
        .collect()
}

#[test]
fn a_full_book_takes_a_better_bid_by_evicting_its_worst_and_refuses_the_rest() {
    let mut f = fixture();
    let filler = client(&mut f, 20_000 * TOKEN, 0);
    // 4,096 bid accounts of rent.
    f.ctx.svm.airdrop(&filler.key.pubkey(), 20 * SOL).unwrap();
    let units = fill_book(&mut f, &filler);
    let order = book_order(&f.ctx, &f.queue_book);
    assert_eq!(order.len(), BOOK_CAPACITY);
    let worst = *order.last().unwrap();
    let worst_bid: Bid = f.ctx.account(&worst);
    // The bid account's rent and, from the book, its slot's.
    let worst_rent = f.ctx.svm.get_account(&worst).unwrap().lamports + f.ctx.slot_rent();

    // Same score as every entry, placed last: it does not outrank the worst one.
    let equal = client(&mut f, 100 * TOKEN, 0);
    let staked = client(&mut f, 100 * TOKEN, 10 * TOKEN);
    let everyone = [&filler, &equal, &staked];
    let before = ledger(&f, &everyone);
    let mut a = args(&f);
    a.gpu_count = 1;
    a.price = TOKEN;
    let p = PlaceBid {
        evict: f.ctx.eviction(&f.queue_book),
        ..place(f.keys, &equal, a)
    };
    assert_eq!(p.evict.map(|e| e.bid), Some(worst));
    let err = f.ctx.run(&p).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::BookFullOfBetterBids));
    assert!(!f.ctx.account_exists(&p.bid()));
    assert_eq!(ledger(&f, &everyone), before, "a refused bid moves nothing");

    // A better bid (its client has stake) without the worst entry's accounts, or naming another
    // entry: refused, nothing moved.
    let better = place(f.keys, &staked, args(&f));
    let err = f.ctx.run(&better).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::EvictionMissing));
    let second_worst = order[order.len() - 2];
    let wrong = PlaceBid {
        evict: Some(Evict {
            bid: second_worst,
            client: filler.key.pubkey(),
            tokens: Some(filler.tokens),
        }),
        ..place(f.keys, &staked, args(&f))
    };
    let err = f.ctx.run(&wrong).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::EvictionMissing));
    assert!(!f.ctx.account_exists(&better.bid()));
    assert_eq!(ledger(&f, &everyone), before, "a refused bid moves nothing");

    // With them: the worst entry leaves with its escrow and rent back to its client.
    let book_before = f.ctx.svm.get_account(&f.queue_book).unwrap().data;
    let better = PlaceBid {
        evict: f.ctx.eviction(&f.queue_book),
        ..place(f.keys, &staked, args(&f))
    };
    f.ctx.run(&better).expect("the better bid evicts the worst");
    let evicting_units = f.ctx.compute_units["place_bid"];
    let placed: Bid = f.ctx.account(&better.bid());
    let found = gpu_market_sdk::book::read_book(&book_before)
        .unwrap()
        .eviction(placed.book_key, placed.seq)
        .map(|leaf| leaf.bid);
    assert_eq!(
        found,
        Some(worst),
        "the sdk finds the entry the program evicts"
    );
    assert!(!f.ctx.account_exists(&worst), "the evicted bid is closed");
    let after = ledger(&f, &everyone);
    let was = before.clients[0];
    assert_eq!(
        after.clients[0],
        ClientLedger {
            tokens: was.tokens + worst_bid.escrow,
            lamports: was.lamports + worst_rent,
            open_bids: was.open_bids - 1,
            ..was
        },
        "the evicted client: escrow and rent back, one bid fewer"
    );
    assert_eq!(after.clients[2].open_bids, before.clients[2].open_bids + 1);
    assert_eq!(
        after.total_escrow,
        before.total_escrow - worst_bid.escrow + placed.escrow
    );
    assert_eq!(after.vault, after.total_escrow);
    assert_eq!(
        after.gpus_waiting,
        before.gpus_waiting - 1 + placed.gpu_count as u64
    );
    assert_eq!(after.book_len, BOOK_CAPACITY);
    let order = book_order(&f.ctx, &f.queue_book);
    assert_eq!(order[0], better.bid());
    assert!(!order.contains(&worst));

    println!("| place_bid into a book of | compute units | bump of the bid's address |");
    println!("|---|---|---|");
    for p in units
        .iter()
        .filter(|p| [0, 100, 1_000, BOOK_CAPACITY - 1].contains(&p.book_len))
    {
        println!("| {} entries | {} | {} |", p.book_len, p.units, p.bump);
    }
    let worst = units.iter().max_by_key(|p| p.units).unwrap();
    println!(
        "| most of the 4,096 placements ({} entries) | {} | {} |",
        worst.book_len, worst.units, worst.bump
    );
    println!(
        "| 4,096 entries, evicting the worst | {evicting_units} | {} |",
        pda::bid(&f.market, &staked.key.pubkey(), 1).1
    );
    // The book's depth costs little; the bump search of `init` costs the rest (and the witness,
    // a 16-GPU machine here, ~13k).
    for p in units.iter().filter(|p| p.bump == u8::MAX) {
        assert!(
            p.units <= 40_000,
            "place_bid into {} entries: {} CU",
            p.book_len,
            p.units
        );
    }
}

#[test]
fn a_client_outbids_its_own_worst_entry_of_a_full_book() {
    let mut f = fixture();
    let filler = client(&mut f, 20_000 * TOKEN, 0);
    f.ctx.svm.airdrop(&filler.key.pubkey(), 20 * SOL).unwrap();
    fill_book(&mut f, &filler);
    let everyone = [&filler];
    // An urgent 2-GPU bid outranks the filler's other bids; the bidder's own stake stands for
    // the evicted bid's, so its open bids stay the same; the refund goes to the token account
    // the new escrow comes from.
    let worst = *book_order(&f.ctx, &f.queue_book).last().unwrap();
    let worst_escrow = f.ctx.account::<Bid>(&worst).escrow;
    let before = ledger(&f, &everyone);
    let mut a = args(&f);
    a.deadline = f.ctx.now() + a.max_duration_secs as i64;
    let own = PlaceBid {
        evict: f.ctx.eviction(&f.queue_book),
        ..place(f.keys, &filler, a)
    };
    assert_eq!(
        own.evict,
        Some(Evict {
            bid: worst,
            client: filler.key.pubkey(),
            tokens: Some(filler.tokens)
        })
    );
    f.ctx
        .run(&own)
        .unwrap_or_else(|e| panic!("the filler evicts its own worst bid: {e:?}"));
    let placed: Bid = f.ctx.account(&own.bid());
    assert!(!f.ctx.account_exists(&worst));
    let after = ledger(&f, &everyone);
    let was = before.clients[0];
    assert_eq!(
        after.clients[0],
        ClientLedger {
            tokens: was.tokens + worst_escrow - placed.escrow,
            ..was
        },
        "one bid's rent paid, the other's returned; escrow swapped; as many open bids"
    );
    assert_eq!(after.book_len, BOOK_CAPACITY);
    assert_eq!(
        after.total_escrow,
        before.total_escrow - worst_escrow + placed.escrow
    );
    assert_eq!(after.vault, after.total_escrow);
}

#[test]
fn a_full_books_worst_bid_is_evicted_even_after_its_client_closed_its_token_account() {
    let mut f = fixture();
    let filler = client(&mut f, 20_000 * TOKEN, 0);
    f.ctx.svm.airdrop(&filler.key.pubkey(), 20 * SOL).unwrap();
    fill_book(&mut f, &filler);
    // The filler empties and closes the token account its escrows came from.
    let elsewhere = f.ctx.create_token_account(&f.mint, &filler.key.pubkey());
    let owner = filler.key.pubkey();
    let balance = f.ctx.token_balance(&filler.tokens);
    let ixs = [
        gpu_market_sdk::token::transfer(&filler.tokens, &f.mint, &elsewhere, &owner, balance, 6),
        gpu_market_sdk::token::close_account(&filler.tokens, &owner, &owner),
    ];
    f.ctx.send(&ixs, &[&filler.key]).unwrap();
    let staked = client(&mut f, 100 * TOKEN, 50 * TOKEN);
    let everyone = [(&filler.key, elsewhere), (&staked.key, staked.tokens)];
    let worst = *book_order(&f.ctx, &f.queue_book).last().unwrap();
    let worst_escrow = f.ctx.account::<Bid>(&worst).escrow;
    let evict = |tokens| {
        Some(Evict {
            bid: worst,
            client: owner,
            tokens,
        })
    };
    let before = f.ctx.ledger(&f.market, &f.queue_book, &everyone);

    // Its closed account cannot be named; without one, the better bid evicts the worst.
    let named = PlaceBid {
        evict: evict(Some(filler.tokens)),
        ..place(f.keys, &staked, args(&f))
    };
    let err = f.ctx.run(&named).unwrap_err();
    assert_eq!(
        err.custom_code(),
        Some(AnchorErrorCode::AccountNotInitialized as u32)
    );
    assert_eq!(f.ctx.ledger(&f.market, &f.queue_book, &everyone), before);
    let better = PlaceBid {
        evict: evict(None),
        ..place(f.keys, &staked, args(&f))
    };
    f.ctx
        .run(&better)
        .unwrap_or_else(|e| panic!("eviction without the evicted client's account: {e:?}"));
    assert!(!f.ctx.account_exists(&worst));
    let placed: Bid = f.ctx.account(&better.bid());
    let after = f.ctx.ledger(&f.market, &f.queue_book, &everyone);
    assert_eq!(after.clients[0].refunds_due, worst_escrow);
    assert_eq!(after.clients[0].open_bids, before.clients[0].open_bids - 1);
    assert_eq!(after.clients[0].tokens, before.clients[0].tokens);
    assert_eq!(after.refunds_due, before.refunds_due + worst_escrow);
    assert_eq!(
        after.total_escrow,
        before.total_escrow - worst_escrow + placed.escrow
    );
    assert_eq!(
        after.vault,
        after.total_escrow + after.fees_due + after.burn_due + after.refunds_due
    );
    assert_eq!(after.book_len, BOOK_CAPACITY);
}

#[test]
fn anyone_prunes_an_expired_bid_and_the_client_gets_everything_back() {
    let mut f = fixture();
    let c = client(&mut f, 100 * TOKEN, 0);
    let stranger = client(&mut f, 10 * TOKEN, 0);
    let mut a = args(&f);
    a.deadline = f.ctx.now() + 2 * 3_600;
    let p = place(f.keys, &c, a);
    f.ctx.run(&p).unwrap();
    let bid: Bid = f.ctx.account(&p.bid());
    // The bid account's rent and, from the book, its slot's.
    let rent = f.ctx.svm.get_account(&p.bid()).unwrap().lamports + f.ctx.slot_rent();
    let prune = |tokens: Pubkey| PruneBid {
        caller: &stranger.key,
        market: f.market,
        bid: p.bid(),
        client: c.key.pubkey(),
        book: f.queue_book,
        payment_mint: f.mint,
        client_tokens: Some(tokens),
        machine: None,
    };
    let everyone = [&c, &stranger];

    // At its latest start (its deadline less its duration): the bid may still start.
    assert_eq!(bid.latest_start(), bid.deadline - 3_600);
    f.ctx.advance_time(bid.latest_start() - f.ctx.now());
    let before = ledger(&f, &everyone);
    let err = f.ctx.run(&prune(c.tokens)).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::BidNotExpired));
    assert_eq!(
        ledger(&f, &everyone),
        before,
        "a refused prune moves nothing"
    );

    // A second later it never can; the escrow may only go to a token account of the bid's client.
    f.ctx.advance_time(1);
    let err = f.ctx.run(&prune(stranger.tokens)).unwrap_err();
    assert_eq!(
        err.custom_code(),
        Some(AnchorErrorCode::ConstraintTokenOwner as u32)
    );
    assert_eq!(
        ledger(&f, &everyone),
        before,
        "a refused prune moves nothing"
    );
    let stake = pda::stake(&f.market, &c.key.pubkey()).0;
    let active = f.ctx.account::<StakeAccount>(&stake).last_active;
    assert_eq!(
        active, bid.placed_at,
        "placing the bid was the client's last act"
    );
    f.ctx.run(&prune(c.tokens)).expect("prune_bid");
    assert_eq!(
        f.ctx.account::<StakeAccount>(&stake).last_active,
        active,
        "a stranger's prune is not the client's activity"
    );
    let after = ledger(&f, &everyone);
    let was = before.clients[0];
    assert_eq!(
        after.clients[0],
        ClientLedger {
            tokens: was.tokens + bid.escrow,
            lamports: was.lamports + rent,
            open_bids: was.open_bids - 1,
            ..was
        },
        "escrow and rent back to the client, one open bid fewer"
    );
    assert_eq!(
        after.clients[1], before.clients[1],
        "the stranger gains nothing"
    );
    assert_eq!(after.book_len, before.book_len - 1);
    assert_eq!(after.total_escrow, before.total_escrow - bid.escrow);
    assert_eq!(after.vault, before.vault - bid.escrow);
    assert_eq!(
        after.gpus_waiting,
        before.gpus_waiting - bid.gpu_count as u64
    );
    assert!(!f.ctx.account_exists(&p.bid()));
    println!(
        "prune_bid: {} compute units",
        f.ctx.compute_units["prune_bid"]
    );
}

#[test]
fn a_queue_bid_below_the_reserve_of_every_class_it_accepts_is_refused() {
    // Class 1 is priced at twice class 0 (a capability premium of 100 %).
    let mut params = MarketParams::recommended(60, 250, 3_600);
    params.capability_bps[1] = 10_000;
    let mut f = fixture_with(params);
    let c = client(&mut f, 100 * TOKEN, 0);
    let m: Market = f.ctx.account(&f.market);
    let now = f.ctx.now();
    assert_eq!(m.reserve_price(0, now).unwrap(), TOKEN);
    assert_eq!(m.reserve_price(1, now).unwrap(), 2 * TOKEN);
    let before = ledger(&f, &[&c]);
    let mut nonce = 0;
    let mut try_place = |f: &mut Fixture, classes: u8, price: u64| {
        nonce += 1;
        let mut a = args(f);
        a.accepted_classes = classes;
        a.price = price;
        let p = place(f.keys, &c, a);
        let r = f.ctx.run(&p).map(|_| ());
        (p.bid(), r)
    };
    for (classes, price) in [(0b11, TOKEN - 1), (0b10, 2 * TOKEN - 1)] {
        let (bid, r) = try_place(&mut f, classes, price);
        let err = r.unwrap_err();
        assert_eq!(err.custom_code(), code(MarketError::PriceBelowReserve));
        assert!(!f.ctx.account_exists(&bid));
    }
    assert_eq!(ledger(&f, &[&c]), before, "a refused bid moves nothing");
    // At the lowest reserve of the classes it accepts, it waits.
    for (classes, price) in [(0b11, TOKEN), (0b10, 2 * TOKEN)] {
        let (bid, r) = try_place(&mut f, classes, price);
        r.expect("at the reserve");
        assert!(book_order(&f.ctx, &f.queue_book).contains(&bid));
    }
}

/// A registered machine with an open spot book: 4 GPUs of class 0, 24 GiB, 150..450 W.
fn machine_with_spot_book(f: &mut Fixture) -> (Keypair, Pubkey, Pubkey) {
    let (host, machine) = spot_machine(f);
    let book = Keypair::new();
    let rent = f
        .ctx
        .svm
        .minimum_balance_for_rent_exemption(BOOK_EMPTY_SPACE);
    let ixs = open_book_instructions(
        &f.ctx.payer.pubkey(),
        &book.pubkey(),
        rent,
        init_spot_book(&host.pubkey(), &machine, &book.pubkey()),
    );
    f.ctx.send(&ixs, &[&host, &book]).expect("init_spot_book");
    assert_eq!(f.ctx.account::<Machine>(&machine).spot_book, book.pubkey());
    (host, machine, book.pubkey())
}

/// A host registers a 4-GPU machine with no spot book yet.
fn spot_machine(f: &mut Fixture) -> (Keypair, Pubkey) {
    let min_stake = f.ctx.account::<Market>(&f.market).params.min_host_stake;
    let host = client(f, min_stake, min_stake).key;
    let gpu = GpuSpec {
        uuid: [0; 16],
        class: 0,
        topology_group: 0,
        memory_gib: 24,
        power_w: [150, 450],
        core_lock_mhz: [210, 2_520],
        mem_lock_mhz: [0, 0],
        core_offset_mhz: [-200, 200],
        mem_offset_mhz: [0, 1_500],
    };
    let r = RegisterMachine {
        owner: &host,
        market: f.market,
        id: 0,
        terms: MachineTerms {
            agent: host.pubkey(),
            region: [0; 16],
            gpus: (1..=4)
                .map(|i| GpuSpec {
                    uuid: [i; 16],
                    ..gpu
                })
                .collect(),
            price_floor_per_gpu_hour: TOKEN,
            electricity_cost_per_kwh: TOKEN / 10,
            network: MachineNetwork::default(),
            cpu_milli: 0,
            memory_mib: 0,
        },
    };
    let machine = r.machine();
    f.ctx.run(&r).unwrap();
    (host, machine)
}

/// A book account its creator made in one transaction, to open in a later one: another host
/// cannot open it as its own machine's spot book (the book's key must sign the opening), so it
/// cannot take the rent the creator paid; the creator still can.
#[test]
fn a_book_created_ahead_cannot_be_claimed_by_another_host() {
    let mut f = fixture();
    let (host, machine) = spot_machine(&mut f);
    let (thief, thief_machine) = spot_machine(&mut f);
    let book = Keypair::new();
    let rent = f
        .ctx
        .svm
        .minimum_balance_for_rent_exemption(BOOK_EMPTY_SPACE);
    let [create, _] = open_book_instructions(
        &host.pubkey(),
        &book.pubkey(),
        rent,
        init_spot_book(&host.pubkey(), &machine, &book.pubkey()),
    );
    f.ctx
        .send(&[create], &[&host, &book])
        .expect("create_account");
    // The thief's opening, without the book's signature (it does not hold the key).
    let mut claim = init_spot_book(&thief.pubkey(), &thief_machine, &book.pubkey());
    for meta in claim
        .accounts
        .iter_mut()
        .filter(|m| m.pubkey == book.pubkey())
    {
        meta.is_signer = false;
    }
    let err = f.ctx.send(&[claim], &[&thief]).unwrap_err();
    assert_eq!(
        err.custom_code(),
        Some(AnchorErrorCode::ConstraintSigner as u32)
    );
    assert_eq!(
        f.ctx.account::<Machine>(&thief_machine).spot_book,
        Pubkey::default()
    );
    let open = init_spot_book(&host.pubkey(), &machine, &book.pubkey());
    f.ctx
        .send(&[open], &[&host, &book])
        .expect("the creator opens it");
    assert_eq!(f.ctx.account::<Machine>(&machine).spot_book, book.pubkey());
}

fn spot_args(f: &Fixture) -> PlaceBidArgs {
    PlaceBidArgs {
        kind: BidKind::Spot,
        accepted_classes: 0b1,
        price: 30 * TOKEN, // per GPU-day
        ..args(f)
    }
}

#[test]
fn spot_bids_go_to_the_machines_book_within_its_ranges() {
    let mut f = fixture();
    let (host, machine, spot_book) = machine_with_spot_book(&mut f);
    let c = client(&mut f, 100 * TOKEN, 0);
    let spot = |a| PlaceBid {
        book: spot_book,
        machine,
        ..place(f.keys, &c, a)
    };
    let ok = spot(spot_args(&f));
    f.ctx.run(&ok).expect("spot place_bid");
    // 2 GPUs × (a 1 h run + a 3 h wait) at 30 tokens per GPU-day = 10 tokens.
    assert_eq!(f.ctx.account::<Bid>(&ok.bid()).escrow, 10 * TOKEN);
    assert_eq!(book_order(&f.ctx, &spot_book), vec![ok.bid()]);
    assert!(book_order(&f.ctx, &f.queue_book).is_empty());

    let mut too_hot = spot_args(&f);
    too_hot.overclock[0].power_limit_w = 500;
    let err = f.ctx.run(&spot(too_hot)).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::OverclockOutOfRange));
    let mut mem_lock = spot_args(&f);
    mem_lock.overclock[0].mem_lock_mhz = 9_000; // the host allows no memory lock
    let err = f.ctx.run(&spot(mem_lock)).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::OverclockOutOfRange));
    // The host's floor is 1 token per GPU-hour: 24 per GPU-day.
    let mut cheap = spot_args(&f);
    cheap.price = 24 * TOKEN - 1;
    let err = f.ctx.run(&spot(cheap)).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::PriceBelowFloor));
    // The machine declares no published port and no scratch: a spot bid asking for either
    // cannot run there.
    let err = f
        .ctx
        .run(&spot(PlaceBidArgs {
            ports: vec![8080],
            ..spot_args(&f)
        }))
        .unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::NoRoom));
    let err = f
        .ctx
        .run(&spot(PlaceBidArgs {
            scratch_gib: 1,
            ..spot_args(&f)
        }))
        .unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::NoRoom));
    // A spot bid's wait is bounded as a queue bid's: one with a 100-year deadline could hold
    // the machine's book, and the host's bond, for as long as its client liked.
    let err = f
        .ctx
        .run(&spot(PlaceBidArgs {
            deadline: f.ctx.now() + 100 * 365 * 86_400,
            ..spot_args(&f)
        }))
        .unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::DeadlineTooFar));
    let mut too_many = spot_args(&f);
    too_many.gpu_count = 5;
    let err = f.ctx.run(&spot(too_many)).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::NoGpuOfClass));
    // A spot bid naming the market's queue book.
    let err = f
        .ctx
        .run(&PlaceBid {
            book: f.queue_book,
            ..spot(spot_args(&f))
        })
        .unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::WrongBook));
    f.ctx
        .run(&SetMachineStatus {
            owner: &host,
            market: f.market,
            machine,
            status: MachineStatus::Paused,
        })
        .unwrap();
    let err = f.ctx.run(&spot(spot_args(&f))).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::MachineNotActive));
    assert_eq!(f.ctx.token_balance(&c.tokens), 100 * TOKEN - 10 * TOKEN);
}

#[test]
fn bad_bids_are_rejected_and_move_nothing() {
    let mut f = fixture();
    let c = client(&mut f, 30 * TOKEN, TOKEN);
    let other = client(&mut f, 30 * TOKEN, 0);
    let vault = pda::payment_vault(&f.market).0;
    let base = args(&f);
    let cases: Vec<(PlaceBidArgs, Option<u32>)> = vec![
        (
            PlaceBidArgs {
                gpu_count: 0,
                ..base.clone()
            },
            code(MarketError::BadGpuCount),
        ),
        (
            PlaceBidArgs {
                gpu_count: 17,
                ..base.clone()
            },
            code(MarketError::BadGpuCount),
        ),
        (
            PlaceBidArgs {
                gib_per_gpu: 0,
                ..base.clone()
            },
            code(MarketError::BadGpuMemory),
        ),
        (
            PlaceBidArgs {
                accepted_classes: 0,
                ..base.clone()
            },
            code(MarketError::NoGpuClass),
        ),
        (
            PlaceBidArgs {
                price: 0,
                ..base.clone()
            },
            code(MarketError::ZeroAmount),
        ),
        (
            PlaceBidArgs {
                max_duration_secs: 0,
                ..base.clone()
            },
            code(MarketError::ZeroAmount),
        ),
        (
            PlaceBidArgs {
                deadline: f.ctx.now() + 3_599,
                ..base.clone()
            },
            code(MarketError::DeadlineTooSoon),
        ),
        (
            PlaceBidArgs {
                overclock: vec![OverclockTerms::default()],
                ..base.clone()
            },
            code(MarketError::PowerLimitMissing),
        ),
        // Two GPUs with three sets of terms: neither one for all nor one per GPU.
        (
            PlaceBidArgs {
                overclock: vec![base.overclock[0]; 3],
                ..base.clone()
            },
            code(MarketError::BadOverclockCount),
        ),
        (
            PlaceBidArgs {
                image_ref: "r".repeat(IMAGE_REF_LEN + 1),
                ..base.clone()
            },
            code(MarketError::ImageRefTooLong),
        ),
        (
            PlaceBidArgs {
                ports: vec![8080, 0],
                ..base.clone()
            },
            code(MarketError::BadPorts),
        ),
        (
            PlaceBidArgs {
                ports: vec![8080, 22, 8080],
                ..base.clone()
            },
            code(MarketError::BadPorts),
        ),
        (
            PlaceBidArgs {
                ports: vec![1, 2, 3, 4, 5],
                ..base.clone()
            },
            code(MarketError::BadPorts),
        ),
        (
            PlaceBidArgs {
                price: u64::MAX,
                ..base.clone()
            },
            code(MarketError::Overflow),
        ),
        // 10 GPUs × 1 h × 2 tokens = 20 tokens: more than the client holds.
        (
            PlaceBidArgs {
                gpu_count: 10,
                ..base.clone()
            },
            Some(1),
        ),
    ];
    for (i, (a, expected)) in cases.into_iter().enumerate() {
        let p = place(f.keys, &c, a);
        let err = f.ctx.run(&p).unwrap_err();
        assert_eq!(err.custom_code(), expected, "case {i}: {:?}", err.logs);
        assert!(!f.ctx.account_exists(&p.bid()));
    }
    // A queue bid naming another account as the book.
    let err = f
        .ctx
        .run(&PlaceBid {
            book: Pubkey::new_unique(),
            ..place(f.keys, &c, base.clone())
        })
        .unwrap_err();
    assert!(err.custom_code().is_some());
    // Somebody else's stake account.
    let mut stolen = place(f.keys, &other, base.clone()).instruction();
    stolen.accounts[5].pubkey = pda::stake(&f.market, &c.key.pubkey()).0;
    let err = f.ctx.send(&[stolen], &[&other.key]).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::WrongStakeAccount));
    assert_eq!(f.ctx.token_balance(&vault), 0);
    assert_eq!(f.ctx.token_balance(&c.tokens), 29 * TOKEN);

    // A real bid, then: top-up of zero, top-up and cancel by somebody else.
    let p = place(f.keys, &c, base);
    f.ctx.run(&p).unwrap();
    fn top_up<'a>(f: Keys, bid: Pubkey, who: &'a Client, amount: u64) -> TopUpBid<'a> {
        TopUpBid {
            client: &who.key,
            market: f.market,
            bid,
            payment_mint: f.mint,
            client_tokens: who.tokens,
            amount,
        }
    }
    let err = f.ctx.run(&top_up(f.keys, p.bid(), &c, 0)).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::ZeroAmount));
    let err = f
        .ctx
        .run(&top_up(f.keys, p.bid(), &other, TOKEN))
        .unwrap_err();
    assert_eq!(
        err.custom_code(),
        Some(AnchorErrorCode::ConstraintHasOne as u32)
    );
    let err = f
        .ctx
        .run(&CancelBid {
            client: &other.key,
            market: f.market,
            bid: p.bid(),
            book: f.queue_book,
            payment_mint: f.mint,
            client_tokens: other.tokens,
        })
        .unwrap_err();
    assert_eq!(
        err.custom_code(),
        Some(AnchorErrorCode::ConstraintHasOne as u32)
    );
    assert_eq!(f.ctx.token_balance(&vault), 16 * TOKEN);
    assert_eq!(f.ctx.token_balance(&other.tokens), 30 * TOKEN);
    assert_eq!(f.ctx.account::<Bid>(&p.bid()).escrow, 16 * TOKEN);
}

/// The program leaves Anchor's duplicate check of mutable accounts out (it cost 3.5k compute
/// units an instruction); `place_bid` is the instruction with two mutable stake accounts. Its own
/// stake passed again as the evicted client's would be written back twice, the stale copy last,
/// and its new open bid would not count (stake that ranks a waiting bid stays locked).
#[test]
fn a_stake_account_passed_twice_is_refused() {
    let mut f = fixture();
    let c = client(&mut f, 100 * TOKEN, 10 * TOKEN);
    let stake = pda::stake(&f.market, &c.key.pubkey()).0;
    let before: StakeAccount = f.ctx.account(&stake);
    let balance = f.ctx.token_balance(&c.tokens);
    let p = place(f.keys, &c, args(&f));
    let mut twice = p.instruction();
    let evicted_stake = twice.accounts.len() - 1;
    twice.accounts[evicted_stake] = solana_instruction::AccountMeta::new(stake, false);
    let err = f.ctx.send(&[twice], &[&c.key]).unwrap_err();
    assert_eq!(
        err.custom_code(),
        code(MarketError::WrongStakeAccount),
        "{:?}",
        err.logs
    );
    assert!(!f.ctx.account_exists(&p.bid()));
    assert_eq!(f.ctx.token_balance(&c.tokens), balance);
    assert_eq!(
        f.ctx.account::<StakeAccount>(&stake).open_bids,
        before.open_bids
    );
    // The same bid, its accounts as the sdk names them, counts.
    f.ctx.run(&p).unwrap();
    assert_eq!(
        f.ctx.account::<StakeAccount>(&stake).open_bids,
        before.open_bids + 1
    );
}

#[test]
fn compute_units_and_sizes_of_bids() {
    let mut f = fixture();
    let c = client(&mut f, 2_000 * TOKEN, 10 * TOKEN);
    // A book with 100 bids in it, then the measured one (nonce 1,000, as before the nonce
    // left the arguments' struct: its address's bump costs what it did).
    for _ in 0..100 {
        f.ctx.run(&place(f.keys, &c, args(&f))).unwrap();
    }
    let p = PlaceBid {
        nonce: 1_000,
        ..place(f.keys, &c, args(&f))
    };
    f.ctx.run(&p).unwrap();
    f.ctx
        .run(&TopUpBid {
            client: &c.key,
            market: f.market,
            bid: p.bid(),
            payment_mint: f.mint,
            client_tokens: c.tokens,
            amount: 1,
        })
        .unwrap();
    f.ctx
        .run(&CancelBid {
            client: &c.key,
            market: f.market,
            bid: p.bid(),
            book: f.queue_book,
            payment_mint: f.mint,
            client_tokens: c.tokens,
        })
        .unwrap();
    // With the tests' 40-byte image reference.
    let bid_space = Bid::space(1, 40, 0, 0);
    println!("| instruction (book of 100 bids) | compute units |");
    println!("|---|---|");
    for name in ["place_bid", "top_up_bid", "cancel_bid"] {
        println!("| {name} | {} |", f.ctx.compute_units[name]);
    }
    println!(
        "bid account: {bid_space} bytes with one set of overclock terms, a 40-byte image reference, no port and no region (rent {} lamports), {} bytes with 16, a 255-byte reference, 4 ports and 4 regions",
        f.ctx.svm.minimum_balance_for_rent_exemption(bid_space),
        Bid::space(16, IMAGE_REF_LEN, MAX_PORTS, MAX_REGIONS)
    );
    println!(
        "book account: {BOOK_EMPTY_SPACE} bytes empty (rent {} lamports), {BOOK_SLOT_SIZE} bytes more per waiting bid (rent {} lamports, paid by the bid), {} bytes full (rent {} lamports)",
        f.ctx.svm.minimum_balance_for_rent_exemption(BOOK_EMPTY_SPACE),
        f.ctx.svm.minimum_balance_for_rent_exemption(book_space(1))
            - f.ctx.svm.minimum_balance_for_rent_exemption(BOOK_EMPTY_SPACE),
        book_space(BOOK_CAPACITY),
        f.ctx.svm.minimum_balance_for_rent_exemption(book_space(BOOK_CAPACITY))
    );
    assert!(bid_space <= 408, "bid account: {bid_space} bytes");
    // Issue 30's budget, with a witness of 16 GPUs in 4 classes, the book's growth included
    // (issue 33): the bid's account and its slot in the book are paid in one `create_account`
    // (27,098 when the slot took a second transfer). 34,829 before Anchor's duplicate check was
    // left out and the accounts were coded as one copy each.
    assert!(
        f.ctx.compute_units["place_bid"] <= 25_000,
        "place_bid: {} CU",
        f.ctx.compute_units["place_bid"]
    );
}

#[test]
fn a_bid_cannot_raise_its_score_without_paying() {
    let mut f = fixture();
    let c = client(&mut f, 1_000 * TOKEN, 10 * TOKEN);
    let score_of = |f: &mut Fixture, a: PlaceBidArgs| {
        let p = place(f.keys, &c, a);
        f.ctx.run(&p).expect("place_bid");
        f.ctx.account::<Bid>(&p.bid()).score
    };
    // Memory, duration and deadline cost nothing (unused escrow is refunded): they do not rank.
    let base = args(&f);
    let plain = score_of(&mut f, base.clone());
    let more_memory = PlaceBidArgs {
        gib_per_gpu: 80,
        ..base.clone()
    };
    let longer = PlaceBidArgs {
        max_duration_secs: 3 * 3_600,
        min_duration_secs: 3 * 3_600,
        ..base.clone()
    };
    let tight_deadline = PlaceBidArgs {
        deadline: f.ctx.now() + 3_600,
        ..base.clone()
    };
    for a in [more_memory, longer, tight_deadline] {
        assert_eq!(score_of(&mut f, a), plain);
    }
    // An urgency premium ranks higher, is paid at placement to be burnt (not to the market's
    // treasury: its authority could bid too) and is not refunded on cancel.
    let before = ledger(&f, &[&c]);
    let premium = TOKEN / 10;
    let urgent = place(
        f.keys,
        &c,
        PlaceBidArgs {
            urgency_premium: premium,
            ..base.clone()
        },
    );
    f.ctx.run(&urgent).expect("place_bid with a premium");
    let bid: Bid = f.ctx.account(&urgent.bid());
    assert!(bid.score > plain, "{} > {plain}", bid.score);
    assert_eq!(bid.urgency_premium, premium);
    let placed = ledger(&f, &[&c]);
    assert_eq!(
        before.clients[0].tokens - placed.clients[0].tokens,
        bid.escrow + premium
    );
    assert_eq!(placed.burn_due - before.burn_due, premium);
    assert_eq!(placed.fees_due, before.fees_due);
    assert_eq!(
        placed.vault,
        placed.total_escrow + placed.fees_due + placed.burn_due
    );
    f.ctx
        .run(&CancelBid {
            client: &c.key,
            market: f.market,
            bid: urgent.bid(),
            book: f.queue_book,
            payment_mint: f.mint,
            client_tokens: c.tokens,
        })
        .expect("cancel_bid");
    let cancelled = ledger(&f, &[&c]);
    assert_eq!(
        before.clients[0].tokens - cancelled.clients[0].tokens,
        premium,
        "the escrow back, not the premium"
    );
    assert_eq!(cancelled.burn_due, placed.burn_due);

    // A queue bid may not wait longer than the aging cap takes to reach (3000 / 10 per interval
    // = 300 intervals of 60 s after its latest start): it could outrank every new bid for ever.
    let p = f.ctx.account::<Market>(&f.market).params;
    let max_wait = (p.aging_cap_bps / p.aging_per_interval) as i64 * 60;
    let before = ledger(&f, &[&c]);
    let too_far = place(
        f.keys,
        &c,
        PlaceBidArgs {
            deadline: f.ctx.now() + 3_600 + max_wait + 1,
            ..base.clone()
        },
    );
    let err = f.ctx.run(&too_far).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::DeadlineTooFar));
    assert!(!f.ctx.account_exists(&too_far.bid()));
    assert_eq!(ledger(&f, &[&c]), before, "a refused bid moves nothing");
    let at_cap = place(
        f.keys,
        &c,
        PlaceBidArgs {
            deadline: f.ctx.now() + 3_600 + max_wait,
            ..base.clone()
        },
    );
    f.ctx.run(&at_cap).expect("at the cap");

    // A bid shorter than one billing interval would only hold a place: refused, nothing moves.
    let before = ledger(&f, &[&c]);
    let short = place(
        f.keys,
        &c,
        PlaceBidArgs {
            max_duration_secs: 59,
            min_duration_secs: 59,
            deadline: f.ctx.now() + 3_600,
            ..base.clone()
        },
    );
    let err = f.ctx.run(&short).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::BidShorterThanInterval));
    assert!(!f.ctx.account_exists(&short.bid()));
    assert_eq!(ledger(&f, &[&c]), before, "a refused bid moves nothing");
    // Nor may the shortest run it accepts be shorter than an interval, or longer than its run.
    for (min, error) in [
        (59, MarketError::BidShorterThanInterval),
        (3_601, MarketError::MinDurationTooLong),
    ] {
        let bad = place(
            f.keys,
            &c,
            PlaceBidArgs {
                min_duration_secs: min,
                ..base.clone()
            },
        );
        let err = f.ctx.run(&bad).unwrap_err();
        assert_eq!(err.custom_code(), code(error), "shortest run {min}");
        assert!(!f.ctx.account_exists(&bad.bid()));
        assert_eq!(ledger(&f, &[&c]), before, "a refused bid moves nothing");
    }
}

#[test]
fn an_image_reference_as_long_as_registries_allow_is_taken_and_the_account_sized_to_it() {
    let mut f = fixture();
    let c = client(&mut f, 100 * TOKEN, 0);
    let mut long = String::from("europe-west4-docker.pkg.dev/project/repo/");
    while long.len() < IMAGE_REF_LEN - "/train:v3".len() {
        long.push('a');
    }
    long.push_str("/train:v3");
    assert_eq!(long.len(), IMAGE_REF_LEN);
    let mut a = args(&f);
    a.image_ref = long.clone();
    let p = place(f.keys, &c, a);
    let tx = f.ctx.transaction(&[p.instruction()], &p.signers());
    assert!(wire_size(&tx) <= 1_232, "{} bytes", wire_size(&tx));
    f.ctx.run(&p).expect("place_bid");
    let bid: Bid = f.ctx.account(&p.bid());
    assert_eq!(bid.image_ref, long);
    let size = f.ctx.svm.get_account(&p.bid()).unwrap().data.len();
    assert_eq!(size, Bid::space(1, IMAGE_REF_LEN, 0, 0));
}

#[test]
fn more_than_16_overclock_entries_are_refused_not_a_panic() {
    let mut f = fixture();
    let c = client(&mut f, 100 * TOKEN, 0);
    assert_eq!(Bid::space(17, 40, 0, 0), Bid::space(16, 40, 0, 0));
    assert_eq!(Bid::space(1, 40, 5, 0), Bid::space(1, 40, MAX_PORTS, 0));
    assert_eq!(Bid::space(1, 40, 0, 5), Bid::space(1, 40, 0, MAX_REGIONS));
    assert_eq!(Bid::space(1, 256, 0, 0), Bid::space(1, IMAGE_REF_LEN, 0, 0));
    let before = ledger(&f, &[&c]);
    let mut a = args(&f);
    a.overclock = vec![a.overclock[0]; 17];
    let p = place(f.keys, &c, a);
    let err = f.ctx.run(&p).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::BadOverclockCount));
    assert!(!f.ctx.account_exists(&p.bid()));
    assert_eq!(ledger(&f, &[&c]), before);
}

/// Issue 30, fault 6: the market's clock keeps the tick it opened with when the billing interval
/// changes. A bid placed 100 one-minute intervals after the market opened, then the interval
/// lengthened to an hour: an identical bid placed after the change ranks after it (before, the
/// count fell from 161 to 2, so the later bid ranked as if placed 98 intervals earlier, and a
/// count kept in hours would still give its duration handicap a sixtieth of the first's), and
/// demand is sampled for the intervals the first bid waited (before, sampling stopped until the
/// count passed 100 again: about 98 hours).
#[test]
fn a_longer_billing_interval_keeps_the_book_order_and_samples_demand() {
    let mut f = fixture();
    let c = client(&mut f, 1_000 * TOKEN, 10 * TOKEN);
    f.ctx.advance_time(100 * 60);
    let early = place(f.keys, &c, args(&f));
    f.ctx.run(&early).expect("place_bid");
    let m: Market = f.ctx.account(&f.market);
    assert_eq!(m.demand_bps, 0, "nothing waited before it");
    let mut hourly = m.params;
    hourly.billing_interval_secs = 3_600;
    f.ctx.change_market(&f.authority, f.market, hourly);
    let late = place(f.keys, &c, args(&f));
    f.ctx.run(&late).expect("place_bid");
    assert_eq!(
        book_order(&f.ctx, &f.queue_book),
        vec![early.bid(), late.bid()],
        "placed later, ranked later"
    );
    let m: Market = f.ctx.account(&f.market);
    assert!(
        m.demand_bps > 0,
        "the intervals the first bid waited are sampled"
    );
    assert_eq!(m.params.billing_interval_secs, 3_600);
    assert_eq!(m.interval_at(f.ctx.now()), 161, "the count goes on");
    // Leases bill by the hour; the clock still ticks each minute.
    f.ctx.advance_time(3_600);
    assert_eq!(m.interval_at(f.ctx.now()), 221);
}
