//! No refund depends on an account its client controls: a client who closed its payment-token
//! account cannot keep a lease from settling (the host's GPUs from being released) nor its
//! expired bid from being pruned. The refund then waits in the market's vault, owed by the
//! client's stake account (`refunds_due`), and `claim_refunds` pays it to a token account of
//! the client. On the SBF build in LiteSVM; every refused step is checked to move nothing.

use gpu_market_tests::lease_fixture;
use gpu_market_tests::program_test;

use anchor_lang::error::ErrorCode as AnchorErrorCode;
use gpu_market::errors::MarketError;
use gpu_market::events::{LeaseEnded, RefundDue, RefundsClaimed};
use gpu_market::pda;
use gpu_market::state::{Bid, Lease, Machine, Market, StakeAccount};
use gpu_market_core::lease::exit;
use gpu_market_sdk::events::from_logs;
use gpu_market_sdk::token;
use lease_fixture::*;
use program_test::*;
use solana_keypair::Keypair;
use solana_pubkey::Pubkey;
use solana_signer::Signer;

/// The client empties its payment-token account (into a new account of its own) and closes
/// it, as any token holder may.
fn close_token_account(f: &mut Fixture, c: &Wallet) {
    let elsewhere = f.ctx.create_token_account(&f.mint, &c.key.pubkey());
    let balance = f.ctx.token_balance(&c.tokens);
    let owner = c.key.pubkey();
    let ixs = [
        token::transfer(&c.tokens, &f.mint, &elsewhere, &owner, balance, 6),
        token::close_account(&c.tokens, &owner, &owner),
    ];
    f.ctx
        .send(&ixs, &[&c.key])
        .expect("empty and close the client's token account");
    assert!(!f.ctx.account_exists(&c.tokens));
}

fn stake_of(f: &Fixture, c: &Wallet) -> StakeAccount {
    f.ctx.account(&pda::stake(&f.market, &c.key.pubkey()).0)
}

/// A client's 2-GPU lease whose container never ran: the agent's final proof (interval 0, no
/// GPU time, `exit::IMAGE_UNAVAILABLE`) stops it at the end of that interval, so the whole
/// escrow is refundable. Returns the client, the lease and its bid.
fn lease_that_never_ran(f: &mut Fixture) -> (Wallet, Pubkey, Pubkey) {
    let c = f.client(100 * TOKEN, 0);
    let a = f.queue_args(2, 24);
    let bid = f.place(&c, a);
    let lease = f.allocate(bid, &[0, 1]).expect("allocate");
    f.ctx.advance_time(INTERVAL);
    let mut proof = f.proof(&lease, 0);
    proof.gpu_seconds = 0;
    proof.avg_utilisation_bps = 0;
    proof.exit_code = Some(exit::IMAGE_UNAVAILABLE);
    f.submit(lease, proof).expect("the final proof");
    let l: Lease = f.ctx.account(&lease);
    assert!(l.fully_proven(), "the final proof stops the lease");
    assert_eq!(l.exit_code, Some(exit::IMAGE_UNAVAILABLE));
    (c, lease, bid)
}

#[test]
fn a_client_who_closed_its_token_account_cannot_keep_the_host_from_ending_its_lease() {
    let mut f = fixture();
    let (c, lease, bid) = lease_that_never_ran(&mut f);
    let escrow = f.ctx.account::<Lease>(&lease).escrow;
    assert!(escrow > 0);
    close_token_account(&mut f, &c);
    let agent = f.agent.insecure_clone();
    let host = f.host.key.insecure_clone();
    let host_only = [(&host, f.host.tokens)];
    let before = f.ctx.ledger(&f.market, &f.queue_book, &host_only);
    let stake_before = stake_of(&f, &c);
    let machine_before: Machine = f.ctx.account(&f.machine);

    // The closed account cannot be passed: it is no token account any more.
    let err = f.close(&agent, lease, c.tokens, false).unwrap_err();
    assert_eq!(
        err.custom_code(),
        Some(AnchorErrorCode::AccountNotInitialized as u32)
    );
    let ledger = f.ctx.ledger(&f.market, &f.queue_book, &host_only);
    assert_eq!(ledger, before, "a refused end_lease moves nothing");

    // Without it, the agent's end_lease settles: the GPUs are free, the refund waits in the
    // client's stake, and nothing else moves.
    f.close_with(&agent, lease, None, false)
        .unwrap_or_else(|e| panic!("end_lease without the client's token account: {e:?}"));
    let units = f.ctx.compute_units["end_lease"];
    assert!(!f.ctx.account_exists(&lease) && !f.ctx.account_exists(&bid));
    let m: Machine = f.ctx.account(&f.machine);
    assert_eq!(m.leases, machine_before.leases - 1);
    assert_eq!(m.used_gib[..2], [0, 0], "the lease's GPUs are released");
    let stake = stake_of(&f, &c);
    assert_eq!(
        stake,
        StakeAccount {
            gpus_held: stake_before.gpus_held - 2,
            refunds_due: escrow,
            ..stake_before
        },
        "the client's stake holds the refund and no GPU"
    );
    let after = f.ctx.ledger(&f.market, &f.queue_book, &host_only);
    assert_eq!(
        after,
        Ledger {
            total_escrow: before.total_escrow - escrow,
            refunds_due: before.refunds_due + escrow,
            ..before.clone()
        },
        "the refund stays in the vault (vault, fees, stakes, the host's tokens unchanged)"
    );
    println!("end_lease (settle, refund held in the client's stake): {units} CU");
    assert!(units <= 60_000, "end_lease: {units} CU");
}

#[test]
fn the_settlement_says_why_the_container_never_ran_and_where_the_refund_waits() {
    let mut f = fixture();
    let (c, lease, bid) = lease_that_never_ran(&mut f);
    let escrow = f.ctx.account::<Lease>(&lease).escrow;
    close_token_account(&mut f, &c);
    let l: Lease = f.ctx.account(&lease);
    let meta = f
        .ctx
        .run(&CloseLease {
            signer: &f.agent,
            market: f.market,
            machine: f.machine,
            lease,
            bid,
            client: l.client,
            agent: f.agent.pubkey(),
            host: f.host.key.pubkey(),
            spot_book: None,
            queue_book: None,
            payment_mint: f.mint,
            client_tokens: None,
            reclaim: false,
            refund: false,
        })
        .expect("end_lease");
    let ended = from_logs::<LeaseEnded>(&meta.logs);
    assert_eq!(ended.len(), 1);
    let e = &ended[0];
    assert_eq!(
        (e.lease, e.market, e.client),
        (lease, f.market, c.key.pubkey())
    );
    assert_eq!((e.paid, e.refund, e.requeued), (0, escrow, false));
    assert_eq!(e.exit_code, Some(exit::IMAGE_UNAVAILABLE));
    let due = from_logs::<RefundDue>(&meta.logs);
    assert_eq!(due.len(), 1);
    assert_eq!(
        (
            due[0].market,
            due[0].owner,
            due[0].amount,
            due[0].refunds_due
        ),
        (f.market, c.key.pubkey(), escrow, escrow)
    );
}

#[test]
fn the_client_claims_exactly_its_refunds_to_a_new_token_account_and_nobody_else_can() {
    let mut f = fixture();
    let (c, lease, _) = lease_that_never_ran(&mut f);
    let escrow = f.ctx.account::<Lease>(&lease).escrow;
    close_token_account(&mut f, &c);
    let agent = f.agent.insecure_clone();
    f.close_with(&agent, lease, None, false).expect("end_lease");
    let fresh = f.ctx.create_token_account(&f.mint, &c.key.pubkey());
    let stranger = f.client(10 * TOKEN, 0);
    let everyone = [(&c.key, fresh), (&stranger.key, stranger.tokens)];
    let before = f.ctx.ledger(&f.market, &f.queue_book, &everyone);

    // A stranger claims for itself: nothing is due to its stake.
    let err = f
        .ctx
        .run(&ClaimRefunds {
            owner: &stranger.key,
            market: f.market,
            payment_mint: f.mint,
            owner_tokens: stranger.tokens,
        })
        .unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::NothingToClaim));
    // Naming the client's stake account, it is not the signer's.
    let mut ix = ClaimRefunds {
        owner: &stranger.key,
        market: f.market,
        payment_mint: f.mint,
        owner_tokens: stranger.tokens,
    }
    .instruction();
    let theirs = pda::stake(&f.market, &stranger.key.pubkey()).0;
    let client_stake = pda::stake(&f.market, &c.key.pubkey()).0;
    for meta in &mut ix.accounts {
        if meta.pubkey == theirs {
            meta.pubkey = client_stake;
        }
    }
    let err = f.ctx.send(&[ix], &[&stranger.key]).unwrap_err();
    assert_eq!(
        err.custom_code(),
        Some(AnchorErrorCode::ConstraintSeeds as u32)
    );
    // Nor can the client's refund be sent to the stranger's account.
    let err = f
        .ctx
        .run(&ClaimRefunds {
            owner: &c.key,
            market: f.market,
            payment_mint: f.mint,
            owner_tokens: stranger.tokens,
        })
        .unwrap_err();
    assert_eq!(
        err.custom_code(),
        Some(AnchorErrorCode::ConstraintTokenOwner as u32)
    );
    // The client's stake cannot close while it holds a refund.
    let err = f
        .ctx
        .run(&CloseStake {
            owner: &c.key,
            market: f.market,
        })
        .unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::RefundsDue));
    let ledger = f.ctx.ledger(&f.market, &f.queue_book, &everyone);
    assert_eq!(ledger, before, "refused claims and closes move nothing");

    // The client claims: exactly the refund, from the vault to its new account.
    let meta = f
        .ctx
        .run(&ClaimRefunds {
            owner: &c.key,
            market: f.market,
            payment_mint: f.mint,
            owner_tokens: fresh,
        })
        .expect("claim_refunds");
    let units = f.ctx.compute_units["claim_refunds"];
    let claimed = from_logs::<RefundsClaimed>(&meta.logs);
    assert_eq!(claimed.len(), 1);
    assert_eq!(
        (claimed[0].owner, claimed[0].amount),
        (c.key.pubkey(), escrow)
    );
    let after = f.ctx.ledger(&f.market, &f.queue_book, &everyone);
    let mut expect = before.clone();
    expect.vault -= escrow;
    expect.refunds_due -= escrow;
    expect.clients[0].tokens += escrow;
    expect.clients[0].refunds_due = 0;
    assert_eq!(after, expect, "exactly the refund moved, to the client");
    assert_eq!(f.ctx.token_balance(&fresh), escrow);
    assert_eq!(
        after.vault,
        after.total_escrow + after.fees_due + after.burn_due + after.refunds_due
    );

    // Claimed once: a second claim is refused and moves nothing; the stake may close now.
    let err = f
        .ctx
        .run(&ClaimRefunds {
            owner: &c.key,
            market: f.market,
            payment_mint: f.mint,
            owner_tokens: fresh,
        })
        .unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::NothingToClaim));
    assert_eq!(f.ctx.ledger(&f.market, &f.queue_book, &everyone), after);
    f.ctx
        .run(&CloseStake {
            owner: &c.key,
            market: f.market,
        })
        .expect("close_stake once the refund is claimed");
    println!("claim_refunds: {units} CU");
    assert!(units <= 20_000, "claim_refunds: {units} CU");
}

#[test]
fn a_claim_with_nothing_due_is_refused_and_moves_nothing() {
    let mut f = fixture();
    let c = f.client(10 * TOKEN, 0);
    let everyone = [(&c.key, c.tokens)];
    let before = f.ctx.ledger(&f.market, &f.queue_book, &everyone);
    let err = f
        .ctx
        .run(&ClaimRefunds {
            owner: &c.key,
            market: f.market,
            payment_mint: f.mint,
            owner_tokens: c.tokens,
        })
        .unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::NothingToClaim));
    assert_eq!(f.ctx.ledger(&f.market, &f.queue_book, &everyone), before);
}

#[test]
fn an_expired_bid_whose_client_closed_its_token_account_is_still_pruned() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    let a = f.queue_args(1, 8);
    let bid = f.place(&c, a);
    let b: Bid = f.ctx.account(&bid);
    // The bid account's rent and, from the book, its slot's.
    let rent = f.ctx.svm.get_account(&bid).unwrap().lamports + f.ctx.slot_rent();
    f.ctx.advance_time(b.deadline - f.ctx.now());
    close_token_account(&mut f, &c);
    let keeper = Keypair::new();
    f.ctx.svm.airdrop(&keeper.pubkey(), SOL).unwrap();
    let prune = |client_tokens| PruneBid {
        caller: &keeper,
        market: f.market,
        bid,
        client: c.key.pubkey(),
        book: f.queue_book,
        payment_mint: f.mint,
        client_tokens,
        machine: None,
    };
    let stake_before = stake_of(&f, &c);
    let lamports_before = f.ctx.svm.get_balance(&c.key.pubkey()).unwrap();
    let m_before: Market = f.ctx.account(&f.market);
    let vault = f.ctx.token_balance(&pda::payment_vault(&f.market).0);

    // The closed account cannot be passed.
    let err = f.ctx.run(&prune(Some(c.tokens))).unwrap_err();
    assert_eq!(
        err.custom_code(),
        Some(AnchorErrorCode::AccountNotInitialized as u32)
    );
    assert!(f.ctx.account_exists(&bid));
    assert_eq!(stake_of(&f, &c), stake_before);

    // Without it, anyone prunes the bid: its escrow waits in the client's stake.
    f.ctx
        .run(&prune(None))
        .unwrap_or_else(|e| panic!("prune_bid without the client's token account: {e:?}"));
    let units = f.ctx.compute_units["prune_bid"];
    assert!(!f.ctx.account_exists(&bid));
    assert!(!book_order(&f.ctx, &f.queue_book).contains(&bid));
    assert_eq!(
        stake_of(&f, &c),
        StakeAccount {
            open_bids: stake_before.open_bids - 1,
            refunds_due: b.escrow,
            ..stake_before
        }
    );
    assert_eq!(
        f.ctx.svm.get_balance(&c.key.pubkey()).unwrap(),
        lamports_before + rent,
        "the bid's rent goes to its client"
    );
    let m: Market = f.ctx.account(&f.market);
    assert_eq!(m.total_escrow, m_before.total_escrow - b.escrow);
    assert_eq!(m.refunds_due, m_before.refunds_due + b.escrow);
    assert_eq!(
        f.ctx.token_balance(&pda::payment_vault(&f.market).0),
        vault,
        "the escrow stays in the vault, owed to the client"
    );
    println!("prune_bid (refund held in the client's stake): {units} CU");
}
