//! `boost_bid`, on the SBF build in LiteSVM: the client of a waiting queue bid pays more urgency
//! premium after placing it (burnt, as at placement), and the bid ranks again as if placed then
//! with the premium in all; refused, moving nothing, for nothing, by anyone but its client, for
//! a running or a spot bid, and when the premium would not rank it higher.

use gpu_market_tests::lease_fixture;
use gpu_market_tests::program_test::{book_order, Failure};

use anchor_lang::error::ErrorCode as AnchorErrorCode;
use gpu_market::errors::MarketError;
use gpu_market::state::{Bid, Market};
use gpu_market_sdk::BoostBid;
use lease_fixture::*;
use solana_keypair::Keypair;
use solana_pubkey::Pubkey;
use solana_signer::Signer;

/// `boost_bid` of `bid` by `premium`, signed by `signer`, paid from `tokens`.
fn boost(
    f: &mut Fixture,
    signer: &Keypair,
    bid: Pubkey,
    tokens: Pubkey,
    premium: u64,
) -> Result<(), Failure> {
    let m: Market = f.ctx.account(&f.market);
    f.ctx
        .run(&BoostBid {
            client: signer,
            market: f.market,
            bid,
            book: m.queue_book,
            payment_mint: f.mint,
            client_tokens: tokens,
            premium,
        })
        .map(|_| ())
}

#[test]
fn a_premium_paid_later_ranks_a_waiting_bid_as_if_paid_at_placement() {
    let mut f = fixture();
    let first = f.client(100 * TOKEN, 0);
    let later = f.client(100 * TOKEN, 0);
    let a = f.queue_args(1, 8);
    let ahead = f.place(&first, a);
    f.ctx.advance_time(INTERVAL);
    let a = f.queue_args(1, 8);
    let behind = f.place(&later, a);
    assert_eq!(book_order(&f.ctx, &f.queue_book), vec![ahead, behind]);
    // The urgency part is full at the market's share of the run's escrow (2 tokens an hour).
    let bps = f
        .ctx
        .account::<Market>(&f.market)
        .params
        .urgency_premium_bps as u64;
    let full = 2 * TOKEN * bps / 10_000;
    let was: Bid = f.ctx.account(&behind);
    let (ledger, burn) = (
        f.ledger(&later),
        f.ctx.account::<Market>(&f.market).burn_due,
    );
    let key = later.key.insecure_clone();
    boost(&mut f, &key, behind, later.tokens, full / 2).expect("boost_bid");
    assert_eq!(book_order(&f.ctx, &f.queue_book), vec![behind, ahead]);
    let now: Bid = f.ctx.account(&behind);
    assert_eq!(now.urgency_premium, full / 2);
    assert!(now.score > was.score && now.book_key > was.book_key);
    assert_eq!(
        (now.escrow, now.placed_at, now.full_secs_at_entry),
        (was.escrow, was.placed_at, was.full_secs_at_entry),
        "the escrow, the placement and the holding clock as they were"
    );
    // A new placement number (it breaks ties of rank only): a machine's walk of the book
    // covers only entries placed before it began (`walk_book`).
    assert!(now.seq > was.seq);
    let after = f.ledger(&later);
    assert_eq!(after.clients[0].tokens, ledger.clients[0].tokens - full / 2);
    assert_eq!(after.vault, ledger.vault + full / 2);
    assert_eq!(after.total_escrow, ledger.total_escrow);
    assert_eq!(
        f.ctx.account::<Market>(&f.market).burn_due,
        burn + full / 2,
        "burnt, as a premium paid at placement"
    );

    // Up to full it still pays; past it the rank cannot rise: refused, nothing moves.
    boost(&mut f, &key, behind, later.tokens, full / 2).expect("up to full");
    let before = (f.ledger(&later), f.ctx.account::<Bid>(&behind).book_key);
    let err = boost(&mut f, &key, behind, later.tokens, TOKEN).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::NoHigherRank));
    assert_eq!(
        (f.ledger(&later), f.ctx.account::<Bid>(&behind).book_key),
        before
    );
}

#[test]
fn a_boost_is_refused_where_it_should_be_and_moves_nothing() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    let a = f.queue_args(1, 8);
    let waiting = f.place(&c, a);
    let key = c.key.insecure_clone();
    let refused = |f: &mut Fixture, signer: &Keypair, bid: Pubkey, premium: u64, want| {
        let before = (f.ledger(&c), book_order(&f.ctx, &f.queue_book));
        let err = boost(f, signer, bid, c.tokens, premium).unwrap_err();
        assert_eq!(err.custom_code(), want);
        assert_eq!(
            (f.ledger(&c), book_order(&f.ctx, &f.queue_book)),
            before,
            "a refused boost moves nothing"
        );
    };
    refused(&mut f, &key, waiting, 0, code(MarketError::ZeroAmount));
    // Another client (with a stake of its own) cannot boost it.
    let stranger = f.client(10 * TOKEN, 0).key;
    refused(
        &mut f,
        &stranger,
        waiting,
        TOKEN / 10,
        Some(AnchorErrorCode::ConstraintHasOne as u32),
    );
    // A spot bid ranks by the host's profit.
    let a = f.spot_args(30 * TOKEN);
    let spot = f.place(&c, a);
    refused(
        &mut f,
        &key,
        spot,
        TOKEN / 10,
        code(MarketError::NotQueueBid),
    );
    // A running bid has no rank to raise.
    f.allocate(waiting, &[0]).expect("allocate");
    refused(
        &mut f,
        &key,
        waiting,
        TOKEN / 10,
        code(MarketError::BidRunning),
    );
    assert_eq!(c.key.pubkey(), f.ctx.account::<Bid>(&waiting).client);
}
