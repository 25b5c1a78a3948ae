//! Failover, on the SBF build in LiteSVM: when a queue lease's host goes silent, whoever
//! reclaims it puts its bid back in the queue at its rank with the rest of its escrow, and
//! another machine runs it; the host is slashed as before. The client may take the escrow back
//! instead, and a bid that can no longer start is refunded. Every refused step is checked to
//! move nothing.

use gpu_market_tests::lease_fixture;
use gpu_market_tests::program_test;

use gpu_market::errors::MarketError;
use gpu_market::pda;
use gpu_market::state::{Bid, BidStatus, Lease, Market, StakeAccount};
use lease_fixture::*;
use program_test::book_order;
use solana_keypair::Keypair;
use solana_pubkey::Pubkey;
use solana_signer::Signer;

/// A two-GPU bid of client `c`, allocated on the fixture's machine, whose agent then goes
/// silent for the market's silence window (three intervals).
fn silent_lease(f: &mut Fixture, c: &Wallet, deadline_in: Option<i64>) -> (Pubkey, Pubkey) {
    let mut a = f.queue_args(2, 8);
    if let Some(secs) = deadline_in {
        a.deadline = f.ctx.now() + secs;
    }
    let bid = f.place(c, a);
    let lease = f.allocate(bid, &[0, 1]).expect("allocate");
    f.ctx.advance_time(3 * INTERVAL);
    (bid, lease)
}

fn host_stake(f: &Fixture) -> u64 {
    f.ctx
        .account::<StakeAccount>(&pda::stake(&f.market, &f.host.key.pubkey()).0)
        .amount
}

/// Before failover, the reclaim refunded the bid and closed it: the job never ran again.
#[test]
fn a_silent_hosts_queue_lease_runs_again_on_another_machine_at_its_rank() {
    let mut f = fixture();
    let a = f.client(100 * TOKEN, 0);
    let b = f.client(100 * TOKEN, 0);
    let (bid, lease) = silent_lease(&mut f, &a, None);
    let escrow = f.ctx.account::<Lease>(&lease).escrow;
    let key = f.ctx.account::<Bid>(&bid).book_key;
    // A later bid of the same shape waits below it.
    let args = f.queue_args(2, 8);
    let later = f.place(&b, args);
    let stake_before = host_stake(&f);
    let waiting_before = f.ctx.account::<Market>(&f.market).gpus_waiting;

    // A keeper (a stranger) reclaims: the host is slashed, the bid waits again with all of its
    // escrow (nothing was proven), at its rank, above the later bid.
    let keeper = f.ctx.wallet(1);
    let tokens_before = f.ctx.token_balance(&a.tokens);
    f.close(&keeper, lease, a.tokens, true)
        .expect("reclaim_escrow");
    assert!(host_stake(&f) < stake_before, "the silent host is slashed");
    assert_eq!(f.ctx.token_balance(&a.tokens), tokens_before, "no refund");
    assert!(!f.ctx.account_exists(&lease));
    let requeued: Bid = f.ctx.account(&bid);
    assert_eq!(requeued.status, BidStatus::Open);
    assert_eq!(requeued.escrow, escrow);
    assert_eq!(requeued.book_key, key, "its rank as placed");
    assert_eq!(book_order(&f.ctx, &f.queue_book), vec![bid, later]);
    assert_eq!(
        f.ctx.account::<Market>(&f.market).gpus_waiting,
        waiting_before + 2,
        "its GPUs count as waiting again"
    );
    let stake: StakeAccount = f.ctx.account(&pda::stake(&f.market, &a.key.pubkey()).0);
    assert_eq!((stake.gpus_held, stake.open_bids), (0, 1));

    // Another machine's agent: the later bid may not pass it...
    let agent = Keypair::new();
    f.ctx.svm.airdrop(&agent.pubkey(), 10_000_000_000).unwrap();
    let other = f.other_machine(1, |t| t.agent = agent.pubkey());
    let before = f.ledger(&b);
    let pass = f.ctx.allocation(&agent, other, later, &[0, 1]);
    let err = f.send_allocate(&pass).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::BetterBidFeasible));
    assert_eq!(f.ledger(&b), before, "a refused allocation moves nothing");
    // ...and the failed-over bid runs there, with the escrow it had left.
    let again = f.ctx.allocation(&agent, other, bid, &[0, 1]);
    let lease = f.send_allocate(&again).expect("runs on the other machine");
    let l: Lease = f.ctx.account(&lease);
    assert_eq!((l.machine, l.bid, l.escrow), (other, bid, escrow));
    assert_eq!(book_order(&f.ctx, &f.queue_book), vec![later]);
}

/// The client may take its escrow back instead (`lease reclaim --refund`); nobody else may
/// choose that for it.
#[test]
fn the_client_may_take_the_escrow_back_instead() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    let (bid, lease) = silent_lease(&mut f, &c, None);
    let escrow = f.ctx.account::<Lease>(&lease).escrow;
    let before = f.ctx.token_balance(&c.tokens);
    let client = c.key.insecure_clone();
    f.close(&client, lease, c.tokens, true)
        .expect("reclaim_escrow");
    assert_eq!(f.ctx.token_balance(&c.tokens), before + escrow);
    assert!(!f.ctx.account_exists(&bid), "the bid closes");
    assert!(book_order(&f.ctx, &f.queue_book).is_empty());
}

/// A bid whose latest start has passed cannot start again: reclaimed by anyone, it is refunded.
#[test]
fn a_bid_that_can_no_longer_start_is_refunded() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    // An hour's run that must end within an hour and two minutes: it may start for two
    // minutes, fewer than the silence window's three.
    let (bid, lease) = silent_lease(&mut f, &c, Some(3_600 + 2 * INTERVAL));
    assert!(f.ctx.account::<Bid>(&bid).expired(f.ctx.now()));
    let escrow = f.ctx.account::<Lease>(&lease).escrow;
    let before = f.ctx.token_balance(&c.tokens);
    let keeper = f.ctx.wallet(1);
    f.close(&keeper, lease, c.tokens, true)
        .expect("reclaim_escrow");
    assert_eq!(f.ctx.token_balance(&c.tokens), before + escrow);
    assert!(!f.ctx.account_exists(&bid));
}
