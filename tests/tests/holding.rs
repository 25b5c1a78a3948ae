//! Issue 30, fault 3: holding a place in a full book costs what the GPU-hours held would.
//! While a book is full (newcomers turned away or made to evict), each waiting bid pays its own
//! price for the GPUs it asks, out of its escrow, when it leaves the book: cancelled, evicted,
//! pruned or started. The charge, like the urgency premium, is burnt by `collect_fees`: neither
//! the market's authority nor a host gets back what squatting costs. On the SBF build in LiteSVM.

use gpu_market_tests::program_test;

use gpu_market::instructions::PlaceBidArgs;
use gpu_market::state::{Bid, BidKind, Lease, Market, MarketParams, OverclockTerms, BOOK_CAPACITY};
use gpu_market_sdk::book::read_book;
use gpu_market_sdk::{Allocate, CancelBid, CollectFees, OpenStake, PlaceBid};
use program_test::*;
use solana_keypair::Keypair;
use solana_pubkey::Pubkey;
use solana_signer::Signer;

const TOKEN: u64 = 1_000_000; // 6 decimals
/// Per GPU-hour: the most the reserve price reaches (twice the base of one token), so that
/// every bid here may start whatever the demand.
const PRICE: u64 = 2 * TOKEN;

struct Fixture {
    ctx: TestContext,
    mint: Pubkey,
    market: Pubkey,
    book: Pubkey,
    witness: Pubkey,
    /// Runs `witness`.
    agent: Keypair,
    squatter: Keypair,
    squatter_tokens: Pubkey,
}

/// A market whose queue book the squatter fills with 4,096 bids of one GPU for an hour at
/// [`PRICE`], due in four hours (escrow: eight tokens each, two for the run and six for the
/// three hours it may wait), all naming one idle 16-GPU machine.
fn full_book() -> Fixture {
    let mut ctx = TestContext::new();
    let (authority, mint, market) = ctx.create_market(1, MarketParams::recommended(60, 250, 3_600));
    let book = ctx.open_queue_book(&authority, market);
    let agent = ctx.wallet(1);
    let (_, witness) = ctx.open_witness_run_by(market, &mint, [0; 16], &agent);
    let (squatter, squatter_tokens) = ctx.funded_user(&mint, 40_000 * TOKEN);
    ctx.svm.airdrop(&squatter.pubkey(), 20 * SOL).unwrap();
    ctx.run(&OpenStake {
        owner: &squatter,
        market,
    })
    .unwrap();
    let mut f = Fixture {
        ctx,
        mint,
        market,
        book,
        witness,
        agent,
        squatter,
        squatter_tokens,
    };
    for nonce in 0..BOOK_CAPACITY as u64 {
        f.place(nonce, PRICE).expect("a squatter's bid");
    }
    f
}

impl Fixture {
    /// The squatter's bid `nonce` for one GPU for an hour at `price` per GPU-hour.
    fn place(&mut self, nonce: u64, price: u64) -> Result<Pubkey, Failure> {
        self.place_with(nonce, |a| a.price = price)
    }

    /// [`Fixture::place`] at [`PRICE`] with `change` made to its arguments.
    fn place_with(
        &mut self,
        nonce: u64,
        change: impl FnOnce(&mut PlaceBidArgs),
    ) -> Result<Pubkey, Failure> {
        let mut p = PlaceBid {
            client: &self.squatter,
            market: self.market,
            book: self.book,
            machine: self.witness,
            payment_mint: self.mint,
            client_tokens: self.squatter_tokens,
            nonce,
            args: PlaceBidArgs {
                kind: BidKind::Queue,
                image_ref: "127.0.0.1:5000/gpu-market/busybox:latest".into(),
                image_digest: [9; 32],
                env_hash: [3; 32],
                gpu_count: 1,
                gib_per_gpu: 16,
                accepted_classes: 0b11,
                overclock: vec![OverclockTerms {
                    power_limit_w: 300,
                    ..Default::default()
                }],
                price: PRICE,
                max_duration_secs: 3_600,
                min_duration_secs: 3_600,
                deadline: self.ctx.now() + 4 * 3_600,
                urgency_premium: 0,
                ports: vec![],
                scratch_gib: 0,
                cpu_milli: 0,
                memory_mib: 0,
                regions: Vec::new(),
                auto_power: None,
            },
            evict: None,
        };
        change(&mut p.args);
        self.ctx.run(&p).map(|_| p.bid())
    }

    fn order(&self) -> Vec<Pubkey> {
        book_order(&self.ctx, &self.book)
    }

    /// What the sdk (and so `bid show`) says waiting has cost `bid` so far.
    fn charge_shown(&self, bid: &Pubkey) -> u64 {
        let book = read_book(&self.ctx.svm.get_account(&self.book).unwrap().data).unwrap();
        book.holding_charge(&self.ctx.account::<Bid>(bid), self.ctx.now())
    }

    fn burn_due(&self) -> u64 {
        self.ctx.account::<Market>(&self.market).burn_due
    }

    fn cancel(&mut self, bid: Pubkey) -> u64 {
        let before = self.ctx.token_balance(&self.squatter_tokens);
        self.ctx
            .run(&CancelBid {
                client: &self.squatter,
                market: self.market,
                bid,
                book: self.book,
                payment_mint: self.mint,
                client_tokens: self.squatter_tokens,
            })
            .expect("cancel_bid");
        self.ctx.token_balance(&self.squatter_tokens) - before
    }
}

#[test]
fn waiting_in_a_full_book_costs_the_gpu_hours_held_and_is_burnt() {
    let mut f = full_book();
    let order = f.order();
    assert_eq!(order.len(), BOOK_CAPACITY);

    // Half an hour full: the top bid, cancelled, pays for half a GPU-hour out of its escrow.
    f.ctx.advance_time(1_800);
    assert_eq!(f.charge_shown(&order[0]), TOKEN);
    assert_eq!(
        f.cancel(order[0]),
        7 * TOKEN,
        "the escrow less half an hour"
    );
    assert_eq!(f.burn_due(), TOKEN);

    // A place is free again: waiting no longer costs anything, however long.
    f.ctx.advance_time(3_600);
    assert_eq!(f.charge_shown(&order[1]), TOKEN);

    // Full again for a quarter of an hour: the newcomer pays for that quarter only, the bid that
    // saw both full stretches for three quarters.
    let newcomer = f
        .place(BOOK_CAPACITY as u64, PRICE)
        .expect("a place is free");
    f.ctx.advance_time(900);
    assert_eq!(f.charge_shown(&newcomer), TOKEN / 2);
    assert_eq!(f.charge_shown(&order[1]), 3 * TOKEN / 2);

    // Started now, the best bid keeps the escrow of its whole run: what waiting cost came out of
    // the part its escrow holds for its wait.
    assert_eq!(f.order()[0], order[1]);
    let start = Allocate {
        agent: &f.agent,
        market: f.market,
        machine: f.witness,
        book: f.book,
        bid: order[1],
        client: f.squatter.pubkey(),
        gpus: f.ctx.choose(&f.witness, &order[1]).expect("it fits"),
        evidence: vec![],
    };
    f.ctx.allocate(&start).expect("allocate the best bid");
    let bid: Bid = f.ctx.account(&order[1]);
    let lease: Lease = f.ctx.account(&start.lease());
    assert_eq!(
        (bid.escrow, lease.escrow),
        (0, 8 * TOKEN - 3 * TOKEN / 2),
        "the lease holds the escrow"
    );
    assert_eq!(lease.ends_at, f.ctx.now() + 3_600);
    assert_eq!(f.cancel(newcomer), 8 * TOKEN - TOKEN / 2);
    assert_eq!(f.burn_due(), TOKEN + 3 * TOKEN / 2 + TOKEN / 2);

    // Burnt, not paid: the treasury (the authority's, who could squat too) gets none of it.
    let m: Market = f.ctx.account(&f.market);
    let (supply, treasury) = (f.ctx.mint_supply(&f.mint), f.ctx.token_balance(&m.treasury));
    f.ctx
        .run(&CollectFees {
            signer: &f.squatter,
            market: f.market,
            payment_mint: f.mint,
            stake_mint: f.mint,
            treasury: m.treasury,
            stake_treasury: m.stake_treasury,
        })
        .expect("collect_fees");
    assert_eq!(supply - f.ctx.mint_supply(&f.mint), 3 * TOKEN);
    assert_eq!(f.ctx.token_balance(&m.treasury), treasury);
    assert_eq!(f.burn_due(), 0);
    let m: Market = f.ctx.account(&f.market);
    assert_eq!(
        f.ctx.token_balance(&m.payment_vault),
        m.total_escrow + m.fees_due + m.refunds_due,
        "the vault holds the rest exactly"
    );
}

/// A bid of one billing interval may wait as long as the market allows: its escrow covers that
/// wait too, so an hour in a full book costs it an hour of its GPU, not the one minute its run
/// paid for. Before, the charge stopped at an escrow of one minute, and such bids held a full
/// book's places for five hours at a minute's price.
#[test]
fn a_one_interval_bid_pays_for_all_the_time_it_holds_a_place() {
    let mut f = full_book();
    let order = f.order();
    f.cancel(order[0]);
    let max_wait = f.ctx.account::<Market>(&f.market).max_wait_secs() as i64;
    let short = f
        .place_with(BOOK_CAPACITY as u64, |a| {
            a.max_duration_secs = 60;
            a.min_duration_secs = 60;
            a.deadline = a.deadline - 4 * 3_600 + 60 + max_wait;
        })
        .expect("a one-minute bid fills the book");
    let bid: Bid = f.ctx.account(&short);
    // A minute's run and five hours' wait at two tokens per GPU-hour.
    assert_eq!(bid.escrow, PRICE.div_ceil(60) + 5 * PRICE);
    f.ctx.advance_time(3_600);
    assert_eq!(f.charge_shown(&short), PRICE);
    assert_eq!(f.cancel(short), bid.escrow - PRICE);
}
