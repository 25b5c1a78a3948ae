//! Issue 30, fault 7: a spot book's keys are the host's profit at the electricity cost each bid
//! was placed under, so the cost cannot change under waiting spot bids (their order would no
//! longer be the order `allocate` and `preempt` judge by). On the SBF build in LiteSVM.

use gpu_market_tests::lease_fixture;

use gpu_market::errors::MarketError;
use gpu_market::state::Machine;
use gpu_market_sdk::instructions::{CancelBid, UpdateMachine};
use lease_fixture::*;
use solana_signer::Signer;

#[test]
fn the_electricity_cost_changes_only_under_an_empty_spot_book() {
    let mut f = fixture();
    let c = f.client(1_000 * TOKEN, 0);
    let a = f.spot_args(100 * TOKEN);
    let waiting = f.place(&c, a);
    let owner = f.host.key.insecure_clone();
    let update = |f: &Fixture, spot_book| UpdateMachine {
        owner: &owner,
        market: f.market,
        machine: f.machine,
        spot_book,
        terms: Machine::terms(&f.ctx.account(&f.machine)),
    };
    let costlier = |f: &Fixture, spot_book| {
        let mut u = update(f, spot_book);
        u.terms.electricity_cost_per_kwh += TOKEN;
        u
    };
    // With a bid waiting: refused, with or without the book.
    for book in [Some(f.spot_book), None] {
        let err = f.ctx.run(&costlier(&f, book)).unwrap_err();
        assert_eq!(err.custom_code(), code(MarketError::SpotBidsWaiting));
    }
    // Other terms still change with bids waiting (the book is not needed for them).
    let mut floor = update(&f, None);
    floor.terms.price_floor_per_gpu_hour += 1;
    f.ctx.run(&floor).expect("a new floor");

    // Once the book is empty the cost changes.
    f.ctx
        .run(&CancelBid {
            client: &c.key,
            market: f.market,
            bid: waiting,
            book: f.spot_book,
            payment_mint: f.mint,
            client_tokens: c.tokens,
        })
        .expect("cancel the spot bid");
    f.ctx
        .run(&costlier(&f, Some(f.spot_book)))
        .expect("no spot bid waits");
    let m: Machine = f.ctx.account(&f.machine);
    assert_eq!(
        m.electricity_cost_per_kwh,
        machine_terms(&f.agent.pubkey()).electricity_cost_per_kwh + TOKEN
    );
}
