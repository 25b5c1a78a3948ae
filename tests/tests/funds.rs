//! The funds property: random sequences of stake / unstake / withdraw / place / top-up / cancel
//! over several wallets, through the SBF program in LiteSVM. After every step the vaults hold
//! exactly the escrows and stakes the market records, every wallet's tokens plus what it has
//! locked equal what it started with, and a rejected step moves nothing.
//!
//! `GPU_MARKET_FUNDS_CASES` sets the number of sequences (default 500; 10000 for a long run).

mod program_test;

use std::collections::BTreeMap;

use gpu_market::instructions::PlaceBidArgs;
use gpu_market::pda;
use gpu_market::state::{Bid, BidKind, Market, MarketParams, OverclockTerms, StakeAccount};
use program_test::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use solana_keypair::Keypair;
use solana_pubkey::Pubkey;
use solana_signer::Signer;

const WALLETS: usize = 4;
const START: u64 = 1_000_000;
const STEPS: std::ops::Range<usize> = 20..32;

#[derive(Debug, Clone)]
enum Op {
    Stake {
        w: usize,
        amount: u64,
    },
    Unstake {
        w: usize,
        amount: u64,
    },
    Withdraw {
        w: usize,
    },
    Place {
        w: usize,
        gpus: u8,
        hours: u32,
        price: u64,
    },
    TopUp {
        w: usize,
        bid: usize,
        amount: u64,
    },
    Cancel {
        w: usize,
        bid: usize,
    },
    Wait {
        secs: i64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let w = 0..WALLETS;
    prop_oneof![
        3 => (w.clone(), 0u64..400_000).prop_map(|(w, amount)| Op::Stake { w, amount }),
        2 => (w.clone(), 0u64..400_000).prop_map(|(w, amount)| Op::Unstake { w, amount }),
        1 => w.clone().prop_map(|w| Op::Withdraw { w }),
        4 => (w.clone(), 0u8..4, 0u32..3, 0u64..60_000)
            .prop_map(|(w, gpus, hours, price)| Op::Place { w, gpus, hours, price }),
        2 => (w.clone(), 0usize..4, 0u64..50_000).prop_map(|(w, bid, amount)| Op::TopUp { w, bid, amount }),
        2 => (w.clone(), 0usize..4).prop_map(|(w, bid)| Op::Cancel { w, bid }),
        1 => (0i64..5_000).prop_map(|secs| Op::Wait { secs }),
    ]
}

struct World {
    ctx: TestContext,
    mint: Pubkey,
    market: Pubkey,
    book: Pubkey,
    wallets: Vec<(Keypair, Pubkey)>,
    /// Bids each wallet placed (some since cancelled), in order.
    bids: Vec<Vec<Pubkey>>,
    next_nonce: u64,
}

impl World {
    fn new() -> World {
        let mut ctx = TestContext::new();
        let mut params = MarketParams::recommended(60, 250, 600);
        params.stake_bound = START;
        let (authority, mint, market) = ctx.create_market(0, params);
        let book = ctx.open_queue_book(&authority, market);
        let wallets: Vec<(Keypair, Pubkey)> = (0..WALLETS)
            .map(|_| ctx.funded_user(&mint, START))
            .collect();
        for (k, _) in &wallets {
            ctx.run(&OpenStake { owner: k, market }).unwrap();
        }
        World {
            ctx,
            mint,
            market,
            book,
            wallets,
            bids: vec![Vec::new(); WALLETS],
            next_nonce: 0,
        }
    }

    fn apply(&mut self, op: &Op) -> bool {
        let (mint, market, book) = (self.mint, self.market, self.book);
        let now = self.ctx.now();
        let result = match *op {
            Op::Stake { w, amount } => {
                let (k, t) = &self.wallets[w];
                self.ctx.run(&Stake {
                    owner: k,
                    market,
                    stake_mint: mint,
                    owner_tokens: *t,
                    amount,
                })
            }
            Op::Unstake { w, amount } => self.ctx.run(&RequestUnstake {
                owner: &self.wallets[w].0,
                market,
                amount,
            }),
            Op::Withdraw { w } => {
                let (k, t) = &self.wallets[w];
                self.ctx.run(&WithdrawStake {
                    owner: k,
                    market,
                    stake_mint: mint,
                    owner_tokens: *t,
                })
            }
            Op::Place {
                w,
                gpus,
                hours,
                price,
            } => {
                self.next_nonce += 1;
                let (k, t) = &self.wallets[w];
                let p = PlaceBid {
                    client: k,
                    market,
                    book,
                    machine: None,
                    payment_mint: mint,
                    client_tokens: *t,
                    args: PlaceBidArgs {
                        nonce: self.next_nonce,
                        kind: BidKind::Queue,
                        image_ref: "127.0.0.1:5000/gpu-market/busybox:latest".into(),
                        image_digest: [1; 32],
                        env_hash: [2; 32],
                        gpu_count: gpus,
                        gib_per_gpu: 8,
                        accepted_classes: 1,
                        overclock: vec![OverclockTerms {
                            power_limit_w: 250,
                            ..Default::default()
                        }],
                        price,
                        max_duration_secs: hours * 3_600,
                        deadline: now + 3 * 3_600,
                    },
                };
                let bid = p.bid();
                let r = self.ctx.run(&p);
                if r.is_ok() {
                    self.bids[w].push(bid);
                }
                r
            }
            Op::TopUp { w, bid, amount } => {
                let Some(&bid) = self.bids[w].get(bid) else {
                    return false;
                };
                let (k, t) = &self.wallets[w];
                self.ctx.run(&TopUpBid {
                    client: k,
                    market,
                    bid,
                    payment_mint: mint,
                    client_tokens: *t,
                    amount,
                })
            }
            Op::Cancel { w, bid } => {
                let Some(&bid) = self.bids[w].get(bid) else {
                    return false;
                };
                let (k, t) = &self.wallets[w];
                self.ctx.run(&CancelBid {
                    client: k,
                    market,
                    bid,
                    book,
                    payment_mint: mint,
                    client_tokens: *t,
                })
            }
            Op::Wait { secs } => {
                self.ctx.advance_time(secs);
                return true;
            }
        };
        result.is_ok()
    }

    /// Every token of the mint that the market or a wallet holds, by holder.
    fn snapshot(&self) -> BTreeMap<String, u64> {
        let mut s = BTreeMap::new();
        s.insert(
            "stake_vault".into(),
            self.ctx.token_balance(&pda::stake_vault(&self.market).0),
        );
        s.insert(
            "payment_vault".into(),
            self.ctx.token_balance(&pda::payment_vault(&self.market).0),
        );
        for (i, (k, t)) in self.wallets.iter().enumerate() {
            s.insert(format!("wallet{i}"), self.ctx.token_balance(t));
            let stake = pda::stake(&self.market, &k.pubkey()).0;
            if self.ctx.account_exists(&stake) {
                let st: StakeAccount = self.ctx.account(&stake);
                s.insert(format!("stake{i}"), st.amount);
                s.insert(format!("pending{i}"), st.pending_unstake);
            }
            for (j, b) in self.bids[i].iter().enumerate() {
                if self.ctx.account_exists(b) {
                    s.insert(format!("bid{i}.{j}"), self.ctx.account::<Bid>(b).escrow);
                }
            }
        }
        s
    }

    fn check(&self, snap: &BTreeMap<String, u64>) -> Result<(), TestCaseError> {
        let m: Market = self.ctx.account(&self.market);
        prop_assert_eq!(
            snap["stake_vault"],
            m.total_staked + m.total_pending_unstake
        );
        prop_assert_eq!(snap["payment_vault"], m.total_escrow);
        let escrows: u64 = snap
            .iter()
            .filter(|(k, _)| k.starts_with("bid"))
            .map(|(_, v)| v)
            .sum();
        prop_assert_eq!(
            m.total_escrow,
            escrows,
            "the vault holds exactly the sum of escrows"
        );
        for i in 0..WALLETS {
            let get = |k: String| snap.get(&k).copied().unwrap_or(0);
            let locked: u64 = snap
                .iter()
                .filter(|(k, _)| k.starts_with(&format!("bid{i}.")))
                .map(|(_, v)| v)
                .sum();
            let total = get(format!("wallet{i}"))
                + get(format!("stake{i}"))
                + get(format!("pending{i}"))
                + locked;
            prop_assert_eq!(total, START, "wallet {} holds what it put in, no more", i);
        }
        Ok(())
    }
}

#[test]
fn vaults_hold_exactly_escrows_and_stakes_after_every_step() {
    let cases: u32 = std::env::var("GPU_MARKET_FUNDS_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let steps = std::sync::atomic::AtomicUsize::new(0);
    let succeeded = std::sync::atomic::AtomicUsize::new(0);
    let result = runner.run(&proptest::collection::vec(op(), STEPS), |ops| {
        let mut world = World::new();
        let mut before = world.snapshot();
        world.check(&before)?;
        for op in &ops {
            let ok = world.apply(op);
            let after = world.snapshot();
            if ok {
                succeeded.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            } else {
                prop_assert_eq!(&after, &before, "a rejected {:?} moved something", op);
            }
            world.check(&after)?;
            steps.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            before = after;
        }
        Ok(())
    });
    let steps = steps.into_inner();
    let accepted = succeeded.into_inner();
    println!(
        "funds property: {cases} sequences, {steps} steps ({accepted} accepted, {} rejected), invariants held after every step",
        steps - accepted
    );
    if let Err(e) = result {
        panic!("{e}");
    }
}
