//! Issue 33, part 1: books grow with use. A book account holds one 160-byte slot per waiting
//! bid, paid for by that bid's client and given back when the bid leaves, so opening a market
//! or registering a machine costs the rent of a few small accounts, not 4.45 SOL per book.
//! Rent is the Rent sysvar's, and exact at every step. On the SBF build in LiteSVM.

use gpu_market_tests::program_test;

use gpu_market::instructions::PlaceBidArgs;
use gpu_market::state::{
    book_space, BidKind, MarketParams, OverclockTerms, BOOK_CAPACITY, BOOK_EMPTY_SPACE,
    BOOK_SLOT_SIZE,
};
use gpu_market_sdk::{
    init_queue_book, init_spot_book, open_book_instructions, CancelBid, ClientInstruction,
    InitMarket, OpenStake, PlaceBid, RegisterMachine, Stake,
};
use program_test::*;
use solana_keypair::Keypair;
use solana_pubkey::Pubkey;
use solana_signer::Signer;

const TOKEN: u64 = 1_000_000; // 6 decimals

fn balance(ctx: &TestContext, key: &Pubkey) -> u64 {
    ctx.svm.get_balance(key).unwrap_or(0)
}

/// The book's size and lamports are exactly those of `entries` slots: no lamport more or less
/// than the Rent sysvar's minimum for its size.
fn assert_book_exact(ctx: &TestContext, book: &Pubkey, entries: usize) {
    let acc = ctx.svm.get_account(book).expect("the book");
    assert_eq!(acc.data.len(), book_space(entries), "{entries} entries");
    assert_eq!(
        acc.lamports,
        ctx.svm.minimum_balance_for_rent_exemption(acc.data.len()),
        "{entries} entries: the book holds exactly its rent"
    );
    let read = gpu_market_sdk::book::read_book(&acc.data).expect("a book");
    assert_eq!(read.entries.len(), entries);
}

/// A market with an empty queue book and a witness machine, and its client.
struct Bidder {
    mint: Pubkey,
    market: Pubkey,
    book: Pubkey,
    witness: Pubkey,
    client: Keypair,
    tokens: Pubkey,
    deadline: i64,
}

/// The context and a staked client holding `tokens` of the payment token and `sol` SOL more
/// than its airdrop.
fn fixture(tokens: u64, sol: u64) -> (TestContext, Bidder) {
    let mut ctx = TestContext::new();
    let (authority, mint, market) = ctx.create_market(1, MarketParams::recommended(60, 250, 3_600));
    let book = ctx.open_queue_book(&authority, market);
    let (_, witness) = ctx.open_witness(market, &mint, [0; 16]);
    let (client, client_tokens) = ctx.funded_user(&mint, tokens);
    if sol > 0 {
        ctx.svm.airdrop(&client.pubkey(), sol).unwrap();
    }
    ctx.run(&OpenStake {
        owner: &client,
        market,
    })
    .unwrap();
    let deadline = ctx.now() + 4 * 3_600;
    let bidder = Bidder {
        mint,
        market,
        book,
        witness,
        client,
        tokens: client_tokens,
        deadline,
    };
    (ctx, bidder)
}

impl Bidder {
    /// The client's queue bid `nonce`: one GPU for an hour at `price` per GPU-hour.
    fn place(&self, nonce: u64, price: u64) -> PlaceBid<'_> {
        PlaceBid {
            client: &self.client,
            market: self.market,
            book: self.book,
            machine: self.witness,
            payment_mint: self.mint,
            client_tokens: self.tokens,
            nonce,
            args: PlaceBidArgs {
                kind: BidKind::Queue,
                image_ref: "127.0.0.1:5000/gpu-market/busybox:latest".into(),
                image_digest: [9; 32],
                env_hash: [0; 32],
                gpu_count: 1,
                gib_per_gpu: 16,
                accepted_classes: 0b11,
                overclock: vec![OverclockTerms {
                    power_limit_w: 300,
                    ..Default::default()
                }],
                price,
                max_duration_secs: 3_600,
                min_duration_secs: 3_600,
                deadline: self.deadline,
                urgency_premium: 0,
                ports: vec![],
                scratch_gib: 0,
                cpu_milli: 0,
                memory_mib: 0,
                regions: Vec::new(),
                auto_power: None,
            },
            evict: None,
        }
    }
}

/// A client fills an empty queue book to its 4,096 entries and cancels them all in a shuffled
/// order: at every step the book is exactly one slot per entry with exactly its rent, and the
/// client's SOL moves by exactly the bid account's rent and the slot's, out and then back.
#[test]
fn a_book_grows_to_4096_entries_and_back_with_rent_exact_at_each_step() {
    let (mut ctx, f) = fixture(40_000 * TOKEN, 20 * SOL);
    let (book, client) = (f.book, f.client.pubkey());
    assert_book_exact(&ctx, &book, 0);
    let slot = ctx.slot_rent();
    assert_eq!(
        slot,
        ctx.svm.minimum_balance_for_rent_exemption(book_space(1))
            - ctx.svm.minimum_balance_for_rent_exemption(BOOK_EMPTY_SPACE)
    );
    let start = balance(&ctx, &client);
    // Different prices: the tree's shape is not one chain of equal scores.
    let price = |nonce: u64| 2 * TOKEN + (nonce * 7_919) % 1_000;
    let mut bids = Vec::new();
    for nonce in 0..BOOK_CAPACITY as u64 {
        let before = balance(&ctx, &client);
        let p = f.place(nonce, price(nonce));
        let bid = p.bid();
        ctx.run(&p)
            .unwrap_or_else(|e| panic!("bid {nonce}: {:?}", e.err));
        let bid_rent = balance(&ctx, &bid);
        assert_eq!(
            bid_rent,
            ctx.svm
                .minimum_balance_for_rent_exemption(ctx.svm.get_account(&bid).unwrap().data.len()),
            "the bid account holds its own rent only: its slot's is in the book"
        );
        assert_eq!(
            before - balance(&ctx, &client),
            bid_rent + slot,
            "bid {nonce}: the client paid the bid's rent and its slot's, nothing else"
        );
        assert_book_exact(&ctx, &book, nonce as usize + 1);
        bids.push(bid);
    }
    // Full: the next bid (ranked no better than the worst) is refused and moves nothing.
    let before = balance(&ctx, &client);
    let p = f.place(BOOK_CAPACITY as u64, 2 * TOKEN);
    assert!(ctx.run(&p).is_err());
    assert_eq!(balance(&ctx, &client), before);
    assert_book_exact(&ctx, &book, BOOK_CAPACITY);

    // Cancelled in a shuffled order (xorshift): each takes its slot back out of the book.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for i in (1..bids.len()).rev() {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        bids.swap(i, (seed % (i as u64 + 1)) as usize);
    }
    for (n, bid) in bids.iter().enumerate() {
        let before = balance(&ctx, &client);
        let bid_rent = balance(&ctx, bid);
        ctx.run(&CancelBid {
            client: &f.client,
            market: f.market,
            bid: *bid,
            book,
            payment_mint: f.mint,
            client_tokens: f.tokens,
        })
        .unwrap_or_else(|e| panic!("cancel {n}: {:?}", e.err));
        assert_eq!(
            balance(&ctx, &client) - before,
            bid_rent + slot,
            "cancel {n}: the bid's rent and its slot's back"
        );
        assert_book_exact(&ctx, &book, BOOK_CAPACITY - n - 1);
    }
    assert_eq!(
        balance(&ctx, &client),
        start,
        "every lamport the client put in came back"
    );
}

/// What opening a market and registering a machine cost in rent, from the accounts' sizes and
/// the Rent sysvar, paid by the market's authority and the host: at most 0.1 and 0.02 SOL.
#[test]
fn a_market_opens_for_under_a_tenth_of_a_sol_and_a_machine_registers_for_under_two_hundredths() {
    let mut ctx = TestContext::new();
    let params = MarketParams::recommended(60, 250, 3_600);
    // The market: its accounts and its empty queue book, in the client's two transactions.
    let authority = ctx.wallet(10);
    let mint = ctx.create_mint(6);
    let treasury = ctx.create_token_account(&mint, &authority.pubkey());
    let stake_treasury = ctx.create_token_account(&mint, &authority.pubkey());
    let before = balance(&ctx, &authority.pubkey());
    let init = InitMarket {
        authority: &authority,
        stake_mint: mint,
        payment_mint: mint,
        treasury,
        stake_treasury,
        id: 0,
        params,
    };
    let market = init.market();
    ctx.run(&init).expect("init_market");
    let queue_book = Keypair::new();
    let ixs = open_book_instructions(
        &authority.pubkey(),
        &queue_book.pubkey(),
        ctx.svm.minimum_balance_for_rent_exemption(BOOK_EMPTY_SPACE),
        init_queue_book(&authority.pubkey(), &market, &queue_book.pubkey()),
    );
    ctx.send(&ixs, &[&authority, &queue_book])
        .expect("queue book");
    let market_rent = before - balance(&ctx, &authority.pubkey());
    let m: gpu_market::state::Market = ctx.account(&market);
    let created = [market, m.payment_vault, m.stake_vault, queue_book.pubkey()];
    let rent_of = |ctx: &TestContext, keys: &[Pubkey]| -> u64 {
        keys.iter()
            .map(|k| {
                let acc = ctx.svm.get_account(k).expect("created");
                assert_eq!(
                    acc.lamports,
                    ctx.svm.minimum_balance_for_rent_exemption(acc.data.len()),
                    "{k}: exactly its rent"
                );
                acc.lamports
            })
            .sum()
    };
    assert_eq!(
        market_rent,
        rent_of(&ctx, &created),
        "the authority paid the rent of the market, its two vaults and its queue book, no more"
    );
    assert!(
        market_rent <= SOL / 10,
        "opening a market: {market_rent} lamports"
    );

    // A host: its stake account, the bond, the machine and its empty spot book.
    let (host, host_tokens) = ctx.funded_user(&mint, params.min_host_stake);
    let before = balance(&ctx, &host.pubkey());
    ctx.run(&OpenStake {
        owner: &host,
        market,
    })
    .unwrap();
    ctx.run(&Stake {
        owner: &host,
        market,
        stake_mint: mint,
        owner_tokens: host_tokens,
        amount: params.min_host_stake,
    })
    .unwrap();
    let register = RegisterMachine {
        owner: &host,
        market,
        id: 0,
        terms: witness_terms(host.pubkey(), [0; 16]),
    };
    let machine = register.machine();
    let spot_book = Keypair::new();
    let mut ixs = vec![register.instruction()];
    ixs.extend(open_book_instructions(
        &host.pubkey(),
        &spot_book.pubkey(),
        ctx.svm.minimum_balance_for_rent_exemption(BOOK_EMPTY_SPACE),
        init_spot_book(&host.pubkey(), &machine, &spot_book.pubkey()),
    ));
    // As `host register` sends it: one transaction.
    ctx.send(&ixs, &[&host, &spot_book]).expect("register");
    let host_rent = before - balance(&ctx, &host.pubkey());
    let stake = gpu_market::pda::stake(&market, &host.pubkey()).0;
    assert_eq!(
        host_rent,
        rent_of(&ctx, &[stake, machine, spot_book.pubkey()]),
        "the host paid the rent of its stake account, machine and spot book, no more"
    );
    assert!(
        host_rent <= SOL / 50,
        "registering a machine: {host_rent} lamports"
    );
    println!("| action | accounts | rent (lamports) | SOL |");
    println!("|---|---|---|---|");
    let slot = format!("{BOOK_SLOT_SIZE} bytes of book");
    for (action, accounts, lamports) in [
        (
            "open a market",
            "market, payment and stake vaults, empty queue book",
            market_rent,
        ),
        (
            "register a machine",
            "stake account, machine, empty spot book",
            host_rent,
        ),
        (
            "place a bid (its slot in a book)",
            slot.as_str(),
            ctx.slot_rent(),
        ),
    ] {
        println!(
            "| {action} | {accounts} | {lamports} | {:.6} |",
            lamports as f64 / SOL as f64
        );
    }
}

/// Anyone can send lamports to a bid's address before its client places it (the address is the
/// client's key and nonce): the bid is placed all the same, the client pays only what is missing,
/// and the book still holds exactly its rent. Nothing is lost to whoever sent them: they stay
/// in the bid account and go to its client when it closes.
#[test]
fn a_bid_address_someone_funded_first_still_takes_the_bid() {
    let (mut ctx, f) = fixture(1_000 * TOKEN, 0);
    let (book, client) = (f.book, f.client.pubkey());
    let slot = ctx.slot_rent();
    // The least an account may hold (the griefer's cheapest try), and more than the bid and its
    // slot need.
    let least = ctx.svm.minimum_balance_for_rent_exemption(0);
    for (nonce, sent) in [(0u64, least), (1, 10 * SOL / 1_000)] {
        let p = f.place(nonce, 2 * TOKEN);
        let bid = p.bid();
        ctx.svm.airdrop(&bid, sent).unwrap();
        let before = balance(&ctx, &client);
        ctx.run(&p)
            .unwrap_or_else(|e| panic!("a bid at a funded address: {:?}", e.err));
        let acc = ctx.svm.get_account(&bid).unwrap();
        assert_eq!(acc.owner, gpu_market::ID);
        let own_rent = ctx.svm.minimum_balance_for_rent_exemption(acc.data.len());
        let paid = before - balance(&ctx, &client);
        assert_eq!(
            paid,
            (own_rent + slot).saturating_sub(sent),
            "the client paid only what was missing"
        );
        assert_eq!(
            acc.lamports,
            sent + paid - slot,
            "the bid account holds what was sent and paid, less its slot's rent (in the book)"
        );
        assert!(acc.lamports >= own_rent);
        assert_book_exact(&ctx, &book, nonce as usize + 1);
    }
}
