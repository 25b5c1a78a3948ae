//! `extend_lease`, on the SBF build in LiteSVM: the client of a running lease buys more run
//! time, paid into the lease's escrow at its price, and the host proves and is paid for it; the
//! extension is refused, moving nothing, to anyone but the client, for nothing, on a lease told
//! to stop, on a machine winding down, and while a bid waiting in the queue could run on the
//! lease's GPUs once it ends (an extension never passes the queue).

use gpu_market_tests::lease_fixture;
use gpu_market_tests::program_test::Failure;

use anchor_lang::error::ErrorCode as AnchorErrorCode;
use gpu_market::errors::MarketError;
use gpu_market::state::{Lease, MachineStatus, Market};
use gpu_market_core::lease::interval_window;
use gpu_market_sdk::ExtendLease;
use lease_fixture::*;
use solana_keypair::Keypair;
use solana_pubkey::Pubkey;

/// `extend_lease` of `lease` by `secs`, signed by `signer`, paid from `tokens`.
fn extend(
    f: &mut Fixture,
    signer: &Keypair,
    lease: Pubkey,
    tokens: Pubkey,
    secs: u32,
) -> Result<(), Failure> {
    let l: Lease = f.ctx.account(&lease);
    let m: Market = f.ctx.account(&f.market);
    f.ctx
        .run(&ExtendLease::of(signer, (lease, &l), &m, tokens, secs))
        .map(|_| ())
}

/// A one-GPU queue lease for an hour at 2 tokens per GPU-hour.
fn running(f: &mut Fixture, c: &Wallet) -> Pubkey {
    let a = f.queue_args(1, 8);
    let bid = f.place(c, a);
    f.allocate(bid, &[0]).expect("allocate")
}

#[test]
fn the_client_buys_more_time_and_the_host_is_paid_for_it() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    let lease = running(&mut f, &c);
    let before: Lease = f.ctx.account(&lease);
    let ledger = f.ledger(&c);
    let key = c.key.insecure_clone();
    // Half an hour more: 1 token at 2 per GPU-hour.
    extend(&mut f, &key, lease, c.tokens, 1_800).expect("extend_lease");
    let after: Lease = f.ctx.account(&lease);
    assert_eq!(after.ends_at, before.ends_at + 1_800);
    assert_eq!(after.escrow, before.escrow + TOKEN);
    let now = f.ledger(&c);
    assert_eq!(now.clients[0].tokens, ledger.clients[0].tokens - TOKEN);
    assert_eq!(now.vault, ledger.vault + TOKEN);
    assert_eq!(now.total_escrow, ledger.total_escrow + TOKEN);

    // The host proves each interval up to the new end, and is paid for all 90 minutes.
    let mut k = 0;
    while f.ctx.account::<Lease>(&lease).proven_until < after.ends_at {
        let (_, to) = interval_window(after.started_at, INTERVAL as u32, k, after.ends_at)
            .expect("a window before the end");
        f.ctx.advance_time((to - f.ctx.now()).max(0));
        prove(&mut f, lease, k);
        k += 1;
    }
    let proven: Lease = f.ctx.account(&lease);
    assert_eq!(proven.proven_until, after.ends_at);
    assert_eq!(
        proven.paid,
        3 * TOKEN,
        "an hour and a half at 2 per GPU-hour"
    );
    assert_eq!(proven.escrow, after.escrow - 3 * TOKEN);
}

#[test]
fn an_extension_is_refused_where_it_should_be_and_moves_nothing() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    let lease = running(&mut f, &c);
    let key = c.key.insecure_clone();
    let refused = |f: &mut Fixture, signer: &Keypair, secs: u32, want: Option<u32>| {
        let state = |f: &Fixture| {
            let l: Lease = f.ctx.account(&lease);
            (f.ledger(&c), l.ends_at, l.escrow, l.stop_at)
        };
        let before = state(f);
        let err = extend(f, signer, lease, c.tokens, secs).unwrap_err();
        assert_eq!(err.custom_code(), want);
        assert_eq!(state(f), before, "a refused extension moves nothing");
    };
    // Nobody but the client, and not for nothing.
    let stranger = f.ctx.wallet(1);
    refused(
        &mut f,
        &stranger,
        600,
        Some(AnchorErrorCode::ConstraintHasOne as u32),
    );
    refused(&mut f, &key, 0, code(MarketError::ZeroAmount));

    // A bid waiting in the queue that could run on the lease's GPU once it ends: an extension
    // would pass it. One that could not (more GPUs than the machine has) does not count.
    let other = f.client(100 * TOKEN, 0);
    let a = f.queue_args(5, 8);
    f.place_elsewhere(&other, a);
    extend(&mut f, &key, lease, c.tokens, 600).expect("a bid that cannot run here waits on");
    // Three GPUs busy elsewhere: a 1-GPU bid placed now fits only once the lease ends.
    for gpu in 1..4u8 {
        let a = f.queue_args(1, 24);
        let filler = f.place(&other, a);
        f.allocate(filler, &[gpu]).expect("a filler");
    }
    let a = f.queue_args(1, 24);
    f.place(&other, a);
    refused(&mut f, &key, 600, code(MarketError::GpusWanted));

    // A machine winding down takes no extension.
    f.set_status(f.machine, MachineStatus::Paused);
    refused(&mut f, &key, 600, code(MarketError::MachineNotActive));
    f.set_status(f.machine, MachineStatus::Active);

    // Nor a lease told to stop (with time run, to prove before it settles).
    f.ctx.advance_time(INTERVAL / 2);
    f.close(&key, lease, c.tokens, false)
        .expect("end_lease stops it");
    refused(&mut f, &key, 600, code(MarketError::LeaseStopping));
}
