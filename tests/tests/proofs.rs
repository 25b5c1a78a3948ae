//! One transaction proves a machine's leases (`submit_usage` takes a proof per lease, in the
//! remaining accounts' order), pay accrues to the machine, and `claim_pay` pays it to the host:
//! a machine pays one signature per interval however many leases it runs, and proofs write no
//! account the market's other machines share. On the SBF build in LiteSVM; every refused
//! transaction is checked to move nothing.

use gpu_market_tests::lease_fixture;

use anchor_lang::error::ErrorCode as AnchorErrorCode;
use gpu_market::errors::MarketError;
use gpu_market::instructions::UsageProofArgs;
use gpu_market::state::{Bid, Lease, Machine, MachineStatus, Market};
use gpu_market_sdk::{ClaimPay, ClientInstruction, SubmitUsage, TopUpBid, TRANSACTION_SIZE_LIMIT};
use lease_fixture::*;
use solana_compute_budget_interface::ComputeBudgetInstruction;
use solana_keypair::Keypair;
use solana_pubkey::Pubkey;
use solana_signer::Signer;
use solana_transaction::Transaction;

/// Everything a proof or a claim may change: the accounts' data and the token balances.
fn snapshot(f: &Fixture, accounts: &[Pubkey], wallets: &[&Wallet]) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = accounts
        .iter()
        .chain([&f.machine, &f.market])
        .map(|k| f.ctx.svm.get_account(k).map_or(Vec::new(), |a| a.data))
        .collect();
    for w in wallets {
        out.push(f.balances(w).iter().flat_map(|b| b.to_le_bytes()).collect());
    }
    out
}

/// `n` clients, each with a 1-GPU queue lease of the machine's GPU `i` (one client holding
/// every GPU would pass the market's anti-monopoly cap).
fn one_gpu_leases(f: &mut Fixture, machine: Pubkey, n: u8) -> (Vec<Wallet>, Vec<Pubkey>) {
    let agent = f.agent.insecure_clone();
    let mut clients = Vec::new();
    let mut leases = Vec::new();
    for g in 0..n {
        let c = f.client(100 * TOKEN, 0);
        let a = f.queue_args(1, 8);
        let bid = f.place(&c, a);
        let alloc = f.ctx.allocation(&agent, machine, bid, &[g]);
        leases.push(f.send_allocate(&alloc).expect("allocate"));
        clients.push(c);
    }
    (clients, leases)
}

fn batch(f: &Fixture, leases: &[Pubkey], interval: u32) -> Vec<(Pubkey, UsageProofArgs)> {
    leases.iter().map(|l| (*l, f.proof(l, interval))).collect()
}

#[test]
fn one_transaction_proves_every_lease_of_a_machine_and_any_refusal_moves_nothing() {
    let mut f = fixture();
    let machine = f.machine;
    let (clients, leases) = one_gpu_leases(&mut f, machine, 4);
    let wallets: Vec<&Wallet> = clients.iter().collect();
    f.ctx.advance_time(INTERVAL);
    let before = snapshot(&f, &leases, &wallets);
    let tokens: Vec<[u64; 5]> = wallets.iter().map(|w| f.balances(w)).collect();
    let agent = f.agent.insecure_clone();

    // One proof of the four is refused, so all are: an interval not over, a peak power per
    // GPU missing.
    let mut early = batch(&f, &leases, 0);
    early[3].1 = f.proof(&leases[3], 1);
    let err = f.submit_batch_with(&agent, early).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::IntervalNotOver));
    let mut short = batch(&f, &leases, 0);
    short[2].1.peak_power_w.clear();
    let err = f.submit_batch_with(&agent, short).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::BadProofGpuCount));
    // A lease passed read-only, or one account fewer than proofs.
    let sdk = SubmitUsage {
        agent: &agent,
        market: f.market,
        machine,
        proofs: batch(&f, &leases, 0),
    };
    let mut read_only = sdk.instruction();
    let last = read_only.accounts.len() - 1;
    read_only.accounts[last].is_writable = false;
    let err = f.ctx.send(&[read_only], &[&agent]).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::ProofAccountsMismatch));
    let mut missing = sdk.instruction();
    missing.accounts.pop();
    let err = f.ctx.send(&[missing], &[&agent]).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::ProofAccountsMismatch));
    // Somebody else's key.
    let stranger = f.ctx.wallet(1);
    let err = f
        .submit_batch_with(&stranger, batch(&f, &leases, 0))
        .unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::WrongAgent));
    assert_eq!(
        snapshot(&f, &leases, &wallets),
        before,
        "refused batches move nothing"
    );

    // All four in one transaction: each lease proven, the pay accrued to the machine, no token
    // moved, and the machine's heartbeat recorded.
    f.submit_batch_with(&agent, batch(&f, &leases, 0))
        .expect("four proofs");
    let units_four = f.ctx.compute_units["submit_usage"];
    let mut accrued = 0;
    for l in &leases {
        let lease: Lease = f.ctx.account(l);
        assert_eq!(lease.next_interval, 1);
        accrued += lease.paid;
    }
    let m: Machine = f.ctx.account(&machine);
    assert!(accrued > 0);
    assert_eq!(m.unclaimed_pay + m.unclaimed_fee, accrued);
    assert_eq!(m.last_heartbeat, f.ctx.now(), "proofs are the heartbeat");
    let after: Vec<[u64; 5]> = wallets.iter().map(|w| f.balances(w)).collect();
    assert_eq!(after, tokens, "a proof moves no token");

    // A lease listed twice proves two intervals in turn.
    f.ctx.advance_time(2 * INTERVAL);
    let twice = vec![
        (leases[0], f.proof(&leases[0], 1)),
        (leases[0], f.proof(&leases[0], 2)),
    ];
    f.submit_batch_with(&agent, twice)
        .expect("two intervals of one lease");
    assert_eq!(f.ctx.account::<Lease>(&leases[0]).next_interval, 3);
    // But never one interval twice.
    let replay = vec![
        (leases[1], f.proof(&leases[1], 1)),
        (leases[1], f.proof(&leases[1], 1)),
    ];
    let before = snapshot(&f, &leases, &wallets);
    let err = f.submit_batch_with(&agent, replay).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::StaleInterval));
    assert_eq!(snapshot(&f, &leases, &wallets), before);

    // The size and cost of one proof and of four.
    f.submit_batch_with(&agent, vec![(leases[1], f.proof(&leases[1], 1))])
        .unwrap();
    let units_one = f.ctx.compute_units["submit_usage"];
    println!("| proofs in the transaction | compute units |");
    println!("|---|---|");
    println!("| 1 | {units_one} |");
    println!("| 4 | {units_four} |");
}

#[test]
fn anyone_claims_a_machines_pay_for_its_owner_only_and_a_machine_closes_once_claimed() {
    let mut f = fixture();
    let machine = f.machine;
    let (clients, leases) = one_gpu_leases(&mut f, machine, 2);
    f.ctx.advance_time(INTERVAL);
    let agent = f.agent.insecure_clone();
    f.submit_batch_with(&agent, batch(&f, &leases, 0)).unwrap();
    let m: Machine = f.ctx.account(&machine);
    let (pay, fee) = (m.unclaimed_pay, m.unclaimed_fee);
    assert!(pay > 0 && fee > 0);

    // Into a token account that is not the owner's: refused, nothing moves.
    let wallets: Vec<&Wallet> = clients.iter().collect();
    let before = snapshot(&f, &leases, &wallets);
    let err = f
        .ctx
        .run(&ClaimPay {
            market: f.market,
            machine,
            payment_mint: f.mint,
            host_tokens: clients[0].tokens,
        })
        .unwrap_err();
    assert_eq!(
        err.custom_code(),
        Some(AnchorErrorCode::ConstraintTokenOwner as u32)
    );
    assert_eq!(snapshot(&f, &leases, &wallets), before);

    // The machine cannot close with pay left to claim.
    for (c, l) in clients.iter().zip(&leases) {
        let key = c.key.insecure_clone();
        f.close(&key, *l, c.tokens, false).expect("end_lease");
    }
    f.set_status(machine, MachineStatus::Retired);
    let err = close_machine(&mut f).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::PayUnclaimed));

    // A stranger's transaction (the context's payer signs alone) pays the owner exactly.
    let market0: Market = f.ctx.account(&f.market);
    let host0 = f.ctx.token_balance(&f.host.tokens);
    f.claim(machine).expect("claim_pay");
    let m: Machine = f.ctx.account(&machine);
    assert_eq!((m.unclaimed_pay, m.unclaimed_fee), (0, 0));
    assert_eq!(f.ctx.token_balance(&f.host.tokens) - host0, pay);
    let market: Market = f.ctx.account(&f.market);
    assert_eq!(market.fees_due - market0.fees_due, fee);
    assert_eq!(market0.total_escrow - market.total_escrow, pay + fee);
    close_machine(&mut f).expect("close_machine once claimed");
}

#[test]
fn eight_one_gpu_leases_fit_one_transaction_and_sixteen_take_two() {
    let mut f = fixture();
    let agent = f.agent.insecure_clone();
    let machine = f.other_machine(1, |t| {
        t.agent = agent.pubkey();
        t.gpus = (0..8u8)
            .map(|i| {
                let mut g = gpus()[0];
                g.uuid = [0x40 + i; 16];
                g.topology_group = i / 4;
                g
            })
            .collect();
    });
    let (_, leases) = one_gpu_leases(&mut f, machine, 8);
    f.ctx.advance_time(INTERVAL);
    let proofs = SubmitUsage {
        agent: &agent,
        market: f.market,
        machine,
        proofs: batch(&f, &leases, 0),
    };
    let parts = proofs.split();
    assert_eq!(parts.len(), 1, "eight 1-GPU proofs in one transaction");
    let size = parts[0].transaction_size();
    assert!(size <= TRANSACTION_SIZE_LIMIT, "{size} bytes");
    // The size counted is the size sent: the transaction the agent signs and pays for, with
    // its compute-unit limit and price.
    let tx = Transaction::new_signed_with_payer(
        &[
            ComputeBudgetInstruction::set_compute_unit_limit(400_000),
            ComputeBudgetInstruction::set_compute_unit_price(1),
            parts[0].instruction(),
        ],
        Some(&agent.pubkey()),
        &[&agent],
        f.ctx.svm.latest_blockhash(),
    );
    assert_eq!(bincode::serialize(&tx).unwrap().len(), size);
    let meta = f.ctx.send_transaction(tx).expect("eight proofs");
    println!(
        "eight 1-GPU proofs: {size} bytes, {} compute units",
        meta.compute_units_consumed
    );
    for l in &leases {
        assert_eq!(f.ctx.account::<Lease>(l).next_interval, 1);
    }
    // Sixteen proofs (of leases that need not exist to be sized) take two transactions, each
    // within the limit, in the proofs' order.
    let keys: Vec<Pubkey> = (0..16).map(|_| Keypair::new().pubkey()).collect();
    let sixteen = SubmitUsage {
        agent: &agent,
        market: f.market,
        machine,
        proofs: keys.iter().map(|k| (*k, f.proof(&leases[0], 1))).collect(),
    };
    let parts = sixteen.split();
    assert_eq!(parts.len(), 2);
    assert!(parts
        .iter()
        .all(|p| p.transaction_size() <= TRANSACTION_SIZE_LIMIT));
    let order: Vec<Pubkey> = parts
        .iter()
        .flat_map(|p| p.proofs.iter().map(|(k, _)| *k))
        .collect();
    assert_eq!(order, keys);
}

#[test]
fn a_running_bid_takes_no_top_up_and_its_lease_refunds_its_escrow_in_full() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    let a = f.queue_args(1, 8);
    let bid = f.place(&c, a);
    let lease = f.allocate(bid, &[0]).unwrap();
    let escrow = f.ctx.account::<Lease>(&lease).escrow;
    assert!(escrow > 0 && f.ctx.account::<Bid>(&bid).escrow == 0);
    // The lease holds the escrow: a top-up of the running bid would be stranded in it.
    let before = snapshot(&f, &[lease, bid], &[&c]);
    let key = c.key.insecure_clone();
    let err = f
        .ctx
        .run(&TopUpBid {
            client: &key,
            market: f.market,
            bid,
            payment_mint: f.mint,
            client_tokens: c.tokens,
            amount: TOKEN,
        })
        .unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::BidRunning));
    assert_eq!(
        snapshot(&f, &[lease, bid], &[&c]),
        before,
        "and moves nothing"
    );
    // Ended before any proof: every token of the escrow goes back.
    let tokens = f.ctx.token_balance(&c.tokens);
    f.close(&key, lease, c.tokens, false).expect("end_lease");
    assert_eq!(f.ctx.token_balance(&c.tokens) - tokens, escrow);
}

/// `lease`'s proof of the `n` intervals from `k` on, with full GPU time.
fn span(f: &Fixture, lease: &Pubkey, k: u32, n: u16) -> UsageProofArgs {
    let mut p = f.proof(lease, k);
    p.intervals = n;
    p.gpu_seconds *= n as u64;
    p
}

/// One proof may cover several consecutive intervals (the agent sends one every two at the
/// recommended silence window, half the signatures): it pays exactly what one proof per
/// interval pays, is refused until its last window closed, never covers no interval, and moves
/// nothing when refused.
#[test]
fn a_proof_of_two_intervals_pays_what_two_proofs_pay_once_both_windows_closed() {
    let mut f = fixture();
    let machine = f.machine;
    let (clients, leases) = one_gpu_leases(&mut f, machine, 2);
    let wallets: Vec<&Wallet> = clients.iter().collect();
    let agent = f.agent.insecure_clone();
    f.ctx.advance_time(INTERVAL);
    let before = snapshot(&f, &leases, &wallets);
    let err = f
        .submit_batch_with(&agent, vec![(leases[0], span(&f, &leases[0], 0, 2))])
        .unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::IntervalNotOver));
    let err = f
        .submit_batch_with(&agent, vec![(leases[0], span(&f, &leases[0], 0, 0))])
        .unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::EmptyProofSpan));
    assert_eq!(
        snapshot(&f, &leases, &wallets),
        before,
        "refused: nothing moved"
    );

    // Lease 0 by one proof of intervals 0 and 1, lease 1 by a proof of each.
    f.ctx.advance_time(INTERVAL);
    f.submit_batch_with(
        &agent,
        vec![
            (leases[0], span(&f, &leases[0], 0, 2)),
            (leases[1], f.proof(&leases[1], 0)),
            (leases[1], f.proof(&leases[1], 1)),
        ],
    )
    .expect("a span and two single proofs");
    let (a, b): (Lease, Lease) = (f.ctx.account(&leases[0]), f.ctx.account(&leases[1]));
    assert_eq!((a.next_interval, b.next_interval), (2, 2));
    assert!(a.paid > 0);
    assert_eq!(
        (a.paid, a.escrow, a.proven_until, a.billed_secs),
        (b.paid, b.escrow, b.proven_until, b.billed_secs)
    );
    // The span is stale once proven, as each of its intervals.
    let err = f
        .submit_batch_with(&agent, vec![(leases[0], f.proof(&leases[0], 1))])
        .unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::StaleInterval));
}

/// Idle intervals proven together end the lease where the market's idle rule says (after its
/// `idle_end_intervals`-th idle interval in a row), not at the end of their proof: the client
/// pays for no idle interval that proofs of one interval each would have refunded.
#[test]
fn an_idle_span_ends_its_lease_and_its_pay_where_single_proofs_would_have() {
    let mut f = fixture();
    let mut p = params();
    p.idle_end_intervals = 3;
    f.update_market(p);
    let machine = f.machine;
    let (_clients, leases) = one_gpu_leases(&mut f, machine, 2);
    let agent = f.agent.insecure_clone();
    f.ctx.advance_time(6 * INTERVAL);
    let idle = |mut p: UsageProofArgs| {
        p.avg_utilisation_bps = 500;
        p
    };
    // Lease 0: a busy interval, then three idle ones, one proof each: ended with the 4th.
    let mut singles = vec![(leases[0], f.proof(&leases[0], 0))];
    singles.extend((1..=3).map(|k| (leases[0], idle(f.proof(&leases[0], k)))));
    // Lease 1: the same busy interval, then five idle intervals in one proof.
    let spanned = vec![
        (leases[1], f.proof(&leases[1], 0)),
        (leases[1], idle(span(&f, &leases[1], 1, 5))),
    ];
    f.submit_batch_with(&agent, singles).expect("single proofs");
    f.submit_batch_with(&agent, spanned).expect("a span");
    let (a, b): (Lease, Lease) = (f.ctx.account(&leases[0]), f.ctx.account(&leases[1]));
    assert_eq!(
        a.stop_at,
        a.started_at + 4 * INTERVAL,
        "ends with its 4th window"
    );
    assert_eq!(
        (b.stop_at, b.proven_until, b.paid, b.escrow, b.exit_code),
        (a.stop_at, a.proven_until, a.paid, a.escrow, a.exit_code)
    );
    assert_eq!(b.exit_code, Some(gpu_market_core::lease::exit::IDLE_ENDED));
}
