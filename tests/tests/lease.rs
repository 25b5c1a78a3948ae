//! Part 2 of the program: allocation by the market rules, the spot rule at interval boundaries,
//! hash-chained usage proofs and settlement, host silence, slashing and the idle flag, on the SBF
//! build in LiteSVM. Every rejected instruction is checked to move nothing.

mod program_test;

use anchor_lang::error::{ErrorCode as AnchorErrorCode, ERROR_CODE_OFFSET};
use gpu_market::errors::MarketError;
use gpu_market::instructions::{PlaceBidArgs, SubmitUsageArgs};
use gpu_market::pda;
use gpu_market::state::{
    Bid, BidKind, BidStatus, GpuSpec, Lease, Machine, MachineTerms, Market, MarketParams,
    OverclockTerms, StakeAccount, BID_BOOK_SPACE,
};
use program_test::*;
use solana_keypair::Keypair;
use solana_pubkey::Pubkey;
use solana_signer::Signer;

const TOKEN: u64 = 1_000_000;
const INTERVAL: i64 = 60;

fn code(e: MarketError) -> Option<u32> {
    Some(ERROR_CODE_OFFSET + e as u32)
}

struct Wallet {
    key: Keypair,
    tokens: Pubkey,
}

struct Fixture {
    ctx: TestContext,
    mint: Pubkey,
    market: Pubkey,
    queue_book: Pubkey,
    treasury: Pubkey,
    stake_treasury: Pubkey,
    host: Wallet,
    agent: Keypair,
    machine: Pubkey,
    spot_book: Pubkey,
    nonce: u64,
}

/// 4 GPUs: 0 and 1 (class 0) in topology group 0, 2 and 3 (class 1) in group 1; 24 GiB each,
/// 150..450 W; floor 0.5 token per GPU-hour; electricity 0.2 token per kWh.
fn gpus() -> Vec<GpuSpec> {
    (0..4u8)
        .map(|i| GpuSpec {
            uuid: [i + 1; 16],
            class: i / 2,
            topology_group: i / 2,
            memory_gib: 24,
            power_w: [150, 450],
            core_lock_mhz: [210, 2_520],
            mem_lock_mhz: [0, 0],
            core_offset_mhz: [-200, 200],
            mem_offset_mhz: [0, 1_500],
        })
        .collect()
}

fn params() -> MarketParams {
    let mut p = MarketParams::recommended(INTERVAL as u32, 250, 600);
    p.stake_bound = 1_000 * TOKEN;
    p.base_price_per_gpu_hour = TOKEN;
    p.max_client_share_bps = 5_000;
    p.idle_intervals = 2;
    p.silence_intervals = 3;
    p.slash_evidence = 2;
    p.slash_bps = 1_000;
    p.min_host_stake = 10 * TOKEN;
    p
}

fn fixture() -> Fixture {
    let mut ctx = TestContext::new();
    let (authority, mint, market) = ctx.create_market(1, params());
    let queue_book = ctx.open_queue_book(&authority, market);
    let m: Market = ctx.account(&market);
    let (key, tokens) = ctx.funded_user(&mint, 100 * TOKEN);
    let host = Wallet { key, tokens };
    let agent = ctx.wallet(10);
    let mut f = Fixture {
        ctx,
        mint,
        market,
        queue_book,
        treasury: m.treasury,
        stake_treasury: m.stake_treasury,
        host,
        agent,
        machine: Pubkey::default(),
        spot_book: Pubkey::default(),
        nonce: 0,
    };
    f.open_and_stake(0, 100 * TOKEN);
    let r = RegisterMachine {
        owner: &f.host.key,
        market,
        id: 0,
        terms: MachineTerms {
            agent: f.agent.pubkey(),
            region: [0; 16],
            gpus: gpus(),
            price_floor_per_gpu_hour: TOKEN / 2,
            electricity_cost_per_kwh: TOKEN / 5,
            cached_images: vec![],
        },
    };
    f.machine = r.machine();
    f.ctx.run(&r).expect("register_machine");
    let book = Keypair::new();
    let rent = f.ctx.svm.minimum_balance_for_rent_exemption(BID_BOOK_SPACE);
    let ixs = open_book_instructions(
        &f.ctx.payer.pubkey(),
        &book.pubkey(),
        rent,
        init_spot_book(&f.host.key.pubkey(), &f.machine, &book.pubkey()),
    );
    f.ctx
        .send(&ixs, &[&f.host.key, &book])
        .expect("init_spot_book");
    f.spot_book = book.pubkey();
    f
}

impl Fixture {
    /// Opens the stake account of the host (`who == 0`) and stakes `amount`.
    fn open_and_stake(&mut self, who: usize, amount: u64) {
        assert_eq!(who, 0);
        let (key, tokens) = (&self.host.key, self.host.tokens);
        self.ctx
            .run(&OpenStake {
                owner: key,
                market: self.market,
            })
            .unwrap();
        self.ctx
            .run(&Stake {
                owner: key,
                market: self.market,
                stake_mint: self.mint,
                owner_tokens: tokens,
                amount,
            })
            .unwrap();
    }

    /// A client with `balance` tokens, `staked` of them staked.
    fn client(&mut self, balance: u64, staked: u64) -> Wallet {
        let (key, tokens) = self.ctx.funded_user(&self.mint, balance);
        self.ctx
            .run(&OpenStake {
                owner: &key,
                market: self.market,
            })
            .unwrap();
        if staked > 0 {
            self.ctx
                .run(&Stake {
                    owner: &key,
                    market: self.market,
                    stake_mint: self.mint,
                    owner_tokens: tokens,
                    amount: staked,
                })
                .unwrap();
        }
        Wallet { key, tokens }
    }

    /// A queue bid: `gpus` GPUs × `gib` GiB of class 0 or 1 at 300 W, 2 tokens per GPU-hour,
    /// for one hour.
    fn queue_args(&mut self, gpus: u8, gib: u16) -> PlaceBidArgs {
        self.nonce += 1;
        PlaceBidArgs {
            nonce: self.nonce,
            kind: BidKind::Queue,
            image_ref: "127.0.0.1:5000/gpu-market/busybox:latest".into(),
            image_digest: [9; 32],
            env_hash: [3; 32],
            gpu_count: gpus,
            gib_per_gpu: gib,
            accepted_classes: 0b11,
            overclock: vec![OverclockTerms {
                power_limit_w: 300,
                ..Default::default()
            }],
            price: 2 * TOKEN,
            max_duration_secs: 3_600,
            deadline: self.ctx.now() + 4 * 3_600,
        }
    }

    /// A spot bid on the machine: all 4 GPUs, `per_day` per GPU-day, one hour.
    fn spot_args(&mut self, per_day: u64) -> PlaceBidArgs {
        PlaceBidArgs {
            kind: BidKind::Spot,
            gpu_count: 4,
            gib_per_gpu: 24,
            price: per_day,
            ..self.queue_args(4, 24)
        }
    }

    fn place(&mut self, c: &Wallet, args: PlaceBidArgs) -> Pubkey {
        let spot = args.kind == BidKind::Spot;
        let p = PlaceBid {
            client: &c.key,
            market: self.market,
            book: if spot {
                self.spot_book
            } else {
                self.queue_book
            },
            machine: spot.then_some(self.machine),
            payment_mint: self.mint,
            client_tokens: c.tokens,
            args,
            evict: None,
        };
        self.ctx.run(&p).expect("place_bid");
        p.bid()
    }

    /// `allocate` of `bid` on the fixture's machine by `agent`, with the evidence the sdk reads off
    /// the book.
    fn allocate_ix<'a>(&self, agent: &'a Keypair, bid: Pubkey, gpus: &[u8]) -> Allocate<'a> {
        self.ctx.allocation(agent, self.machine, bid, gpus)
    }

    fn send_allocate(&mut self, a: &Allocate) -> Result<Pubkey, Failure> {
        self.ctx.allocate(a).map(|_| a.lease())
    }

    fn allocate(&mut self, bid: Pubkey, gpus: &[u8]) -> Result<Pubkey, Failure> {
        let agent = self.agent.insecure_clone();
        let a = self.allocate_ix(&agent, bid, gpus);
        self.send_allocate(&a)
    }

    /// The proof of `interval` of `lease`, chained to its last proof, with full GPU time.
    fn proof(&self, lease: &Pubkey, interval: u32) -> SubmitUsageArgs {
        let l: Lease = self.ctx.account(lease);
        SubmitUsageArgs {
            interval,
            gpu_seconds: INTERVAL as u64 * l.gpu_count as u64,
            energy_j: 300 * INTERVAL as u64 * l.gpu_count as u64,
            avg_utilisation_bps: 9_000,
            peak_power_w: vec![290; l.gpu_count as usize],
            exit_code: None,
            prev_hash: l.proof_hash,
        }
    }

    fn submit_with(
        &mut self,
        agent: &Keypair,
        lease: Pubkey,
        args: SubmitUsageArgs,
    ) -> Result<(), Failure> {
        let l: Lease = self.ctx.account(&lease);
        let s = SubmitUsage {
            agent,
            market: self.market,
            machine: l.machine,
            lease,
            bid: l.bid,
            payment_mint: self.mint,
            treasury: self.treasury,
            host_tokens: self.host.tokens,
            args,
        };
        self.ctx.run(&s).map(|_| ())
    }

    fn submit(&mut self, lease: Pubkey, args: SubmitUsageArgs) -> Result<(), Failure> {
        let agent = self.agent.insecure_clone();
        self.submit_with(&agent, lease, args)
    }

    fn close(
        &mut self,
        signer: &Keypair,
        lease: Pubkey,
        client_tokens: Pubkey,
        reclaim: bool,
    ) -> Result<(), Failure> {
        let l: Lease = self.ctx.account(&lease);
        self.ctx
            .run(&CloseLease {
                signer,
                market: self.market,
                machine: l.machine,
                lease,
                bid: l.bid,
                client: l.client,
                agent: self.agent.pubkey(),
                spot_book: Some(self.spot_book),
                payment_mint: self.mint,
                client_tokens,
                reclaim,
            })
            .map(|_| ())
    }

    /// Every token balance the market touches, to show that a rejected step moved nothing.
    fn balances(&self, c: &Wallet) -> [u64; 5] {
        [
            self.ctx.token_balance(&c.tokens),
            self.ctx.token_balance(&self.host.tokens),
            self.ctx.token_balance(&self.treasury),
            self.ctx.token_balance(&pda::payment_vault(&self.market).0),
            self.ctx.token_balance(&pda::stake_vault(&self.market).0),
        ]
    }
}

#[test]
fn the_highest_scoring_feasible_bid_runs_and_the_program_checks_the_ones_above() {
    let mut f = fixture();
    let whale = f.client(200 * TOKEN, 100 * TOKEN);
    let minnow = f.client(100 * TOKEN, 0);
    let a = f.queue_args(2, 24);
    let high = f.place(&whale, a);
    let a = f.queue_args(2, 24);
    let low = f.place(&minnow, a);
    // A class-7-only bid with the most stake ranks first but fits no GPU here.
    let exotic_owner = f.client(600 * TOKEN, 500 * TOKEN);
    let mut a = f.queue_args(1, 8);
    a.accepted_classes = 1 << 7;
    let exotic = f.place(&exotic_owner, a);
    assert_eq!(book_order(&f.ctx, &f.queue_book), vec![exotic, high, low]);

    let before = f.balances(&minnow);
    // The program reads the book itself; it needs only the whale's stake, the one entry above
    // that fits (for the anti-monopoly cap). The exotic bid needs nothing.
    let agent = f.agent.insecure_clone();
    let mut a = f.allocate_ix(&agent, low, &[0, 1]);
    assert_eq!(
        a.evidence,
        vec![pda::stake(&f.market, &whale.key.pubkey()).0]
    );
    let evidence = std::mem::take(&mut a.evidence);
    let err = f.send_allocate(&a).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::CandidatesMissing));
    a.evidence = evidence;
    let err = f.send_allocate(&a).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::BetterBidFeasible));
    assert_eq!(
        f.balances(&minnow),
        before,
        "rejected allocations move nothing"
    );
    assert!(!f.ctx.account_exists(&pda::lease(&low).0));

    // The exotic bid fits no GPU here; the whale's is the best that fits.
    let lease = f.allocate(high, &[0, 1]).expect("allocate");
    let l: Lease = f.ctx.account(&lease);
    assert_eq!(
        (l.gpus(), l.client, l.kind),
        (&[0u8, 1][..], whale.key.pubkey(), BidKind::Queue)
    );
    assert_eq!(l.power_limits_w[..2], [300, 300]);
    assert_eq!(f.ctx.account::<Bid>(&high).status, BidStatus::Running);
    let m: Machine = f.ctx.account(&f.machine);
    assert_eq!(m.used_gib[..4], [24, 24, 0, 0]);
    let st: StakeAccount = f.ctx.account(&pda::stake(&f.market, &whale.key.pubkey()).0);
    assert_eq!((st.gpus_held, st.open_bids), (2, 0));
    // The whale's lease no longer ranks; the minnow's bid runs on the other group.
    f.allocate(low, &[2, 3]).expect("allocate the next");
    assert_eq!(book_order(&f.ctx, &f.queue_book), vec![exotic]);
    let market: Market = f.ctx.account(&f.market);
    assert_eq!((market.gpus_offered, market.gpus_waiting), (4, 1));
}

#[test]
fn bids_share_one_gpu_by_whole_gib() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    let d = f.client(100 * TOKEN, 0);
    let a = f.queue_args(1, 12);
    let first = f.place(&c, a);
    let a = f.queue_args(1, 12);
    let second = f.place(&d, a);
    let a = f.queue_args(1, 1);
    let third = f.place(&d, a);
    f.allocate(first, &[0]).expect("first half of GPU 0");
    f.allocate(second, &[0]).expect("second half of GPU 0");
    assert_eq!(f.ctx.account::<Machine>(&f.machine).used_gib[0], 24);
    let err = f.allocate(third, &[0]).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::GpuCannotServe));
    f.allocate(third, &[1]).expect("GPU 1 has room");
}

#[test]
fn a_gpu_is_shared_only_by_leases_that_agree_on_its_overclock_terms() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    let d = f.client(100 * TOKEN, 0);
    let a = f.queue_args(1, 12);
    let first = f.place(&c, a);
    let mut a = f.queue_args(1, 12);
    a.overclock[0].power_limit_w = 250;
    let other_power = f.place(&d, a);
    let a = f.queue_args(1, 12);
    let same_terms = f.place(&c, a);
    f.allocate(first, &[0]).expect("GPU 0 at 300 W");
    assert_eq!(
        f.ctx.account::<Machine>(&f.machine).gpu_terms[0].power_limit_w,
        300
    );

    // The 250 W bid would fit GPU 0's free GiB, but GPU 0 runs at 300 W: refused, nothing moved.
    let before = f.ctx.account::<Machine>(&f.machine).used_gib;
    let err = f.allocate(other_power, &[0]).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::GpuCannotServe));
    assert_eq!(f.ctx.account::<Machine>(&f.machine).used_gib, before);
    f.allocate(other_power, &[1]).expect("a GPU of its own");
    f.allocate(same_terms, &[0])
        .expect("equal terms share GPU 0");

    // Once its leases end, a GPU forgets its terms.
    assert_eq!(f.ctx.account::<Machine>(&f.machine).used_gib[0], 24);
    f.ctx.advance_time(INTERVAL);
    for bid in [first, same_terms] {
        let lease = pda::lease(&bid).0;
        let mut last = f.proof(&lease, 0);
        last.exit_code = Some(0);
        f.submit(lease, last).expect("the final proof");
        let client = c.key.insecure_clone();
        f.close(&client, lease, c.tokens, false).expect("end_lease");
    }
    let m: Machine = f.ctx.account(&f.machine);
    assert_eq!(m.used_gib[0], 0);
    assert_eq!(m.gpu_terms[0], OverclockTerms::default());
}

#[test]
fn multi_gpu_bids_stay_in_one_topology_group_and_gpu_indices_are_checked() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    let a = f.queue_args(2, 8);
    let bid = f.place(&c, a);
    for (gpus, e) in [
        (vec![1u8, 2], MarketError::TopologySplit),
        (vec![0, 0], MarketError::DuplicateGpu),
        (vec![0, 9], MarketError::UnknownGpu),
        (vec![0], MarketError::BadGpuCount),
    ] {
        let err = f.allocate(bid, &gpus).unwrap_err();
        assert_eq!(err.custom_code(), code(e), "{gpus:?}");
    }
    f.allocate(bid, &[2, 3]).expect("one group");

    // When no single group has room, a split is the only choice and is allowed.
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    let a = f.queue_args(1, 20);
    let filler = f.place(&c, a);
    f.allocate(filler, &[0]).unwrap();
    let a = f.queue_args(1, 20);
    let filler = f.place(&c, a);
    f.allocate(filler, &[2]).unwrap();
    let other = f.client(100 * TOKEN, 0);
    let a = f.queue_args(2, 20);
    let wide = f.place(&other, a);
    f.allocate(wide, &[1, 3]).expect("split across groups");
}

#[test]
fn price_below_the_reserve_or_the_host_floor_does_not_run() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    // Base 1 token per GPU-hour: a queue bid below the reserve of every class it accepts could
    // run nowhere, so it is refused at placement, and moves nothing.
    let before = f.balances(&c);
    let mut a = f.queue_args(1, 8);
    a.price = TOKEN / 2;
    let cheap = PlaceBid {
        client: &c.key,
        market: f.market,
        book: f.queue_book,
        machine: None,
        payment_mint: f.mint,
        client_tokens: c.tokens,
        args: a,
        evict: None,
    };
    let err = f.ctx.run(&cheap).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::PriceBelowReserve));
    assert!(!f.ctx.account_exists(&cheap.bid()));
    assert_eq!(f.balances(&c), before);
    assert!(book_order(&f.ctx, &f.queue_book).is_empty());

    // A host floor above the bid's price: allocate names the reason.
    let owner = f.host.key.insecure_clone();
    let mut terms = MachineTerms {
        agent: f.agent.pubkey(),
        region: [0; 16],
        gpus: gpus(),
        price_floor_per_gpu_hour: 3 * TOKEN,
        electricity_cost_per_kwh: 0,
        cached_images: vec![],
    };
    f.ctx
        .run(&UpdateMachine {
            owner: &owner,
            market: f.market,
            machine: f.machine,
            terms: terms.clone(),
        })
        .unwrap();
    let a = f.queue_args(1, 8);
    let fair = f.place(&c, a);
    let before = f.balances(&c);
    let err = f.allocate(fair, &[0]).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::PriceBelowFloor));
    assert_eq!(f.balances(&c), before);
    terms.price_floor_per_gpu_hour = TOKEN;
    f.ctx
        .run(&UpdateMachine {
            owner: &owner,
            market: f.market,
            machine: f.machine,
            terms,
        })
        .unwrap();

    // A bid at exactly today's reserve is placed; an allocation then samples the waiting GPUs,
    // the demand factor rises and the reserve with it: the bid no longer pays enough.
    let mut a = f.queue_args(1, 8);
    a.price = TOKEN;
    let edge = f.place(&c, a);
    f.allocate(fair, &[0])
        .expect("at the reserve and the floor");
    let market: Market = f.ctx.account(&f.market);
    let reserve = market.reserve_price(0, f.ctx.now()).unwrap();
    assert!(reserve > TOKEN, "reserve {reserve}");
    let before = f.balances(&c);
    let err = f.allocate(edge, &[1]).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::PriceBelowReserve));
    assert_eq!(f.balances(&c), before);
    assert_eq!(book_order(&f.ctx, &f.queue_book), vec![edge]);
}

#[test]
fn overclock_terms_outside_a_gpus_range_do_not_run_there() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    let mut a = f.queue_args(2, 8);
    // GPU 0 of the bid at 300 W, GPU 1 at 440 W with a memory lock nobody allows.
    a.overclock = vec![
        OverclockTerms {
            power_limit_w: 300,
            ..Default::default()
        },
        OverclockTerms {
            power_limit_w: 440,
            mem_lock_mhz: 9_000,
            ..Default::default()
        },
    ];
    let bid = f.place(&c, a);
    let err = f.allocate(bid, &[0, 1]).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::OverclockOutOfRange));
    let mut a = f.queue_args(2, 8);
    a.overclock = vec![
        OverclockTerms {
            power_limit_w: 300,
            ..Default::default()
        },
        OverclockTerms {
            power_limit_w: 440,
            core_offset_mhz: 150,
            ..Default::default()
        },
    ];
    let ok = f.place(&c, a);
    let lease = f.allocate(ok, &[0, 1]).expect("per-GPU terms in range");
    assert_eq!(
        f.ctx.account::<Lease>(&lease).power_limits_w[..2],
        [300, 440]
    );
}

#[test]
fn the_anti_monopoly_cap_gives_way_to_others_and_never_idles_gpus() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    let a = f.queue_args(2, 8);
    let first = f.place(&c, a);
    let a = f.queue_args(1, 8);
    let second = f.place(&c, a);
    let d = f.client(100 * TOKEN, 0);
    let a = f.queue_args(1, 8);
    let other = f.place(&d, a);
    f.allocate(first, &[0, 1]).unwrap();
    // 4 GPUs offered, a cap of 50 %: a third GPU is one too many while another client's bid
    // fits.
    let before = (f.balances(&c), f.balances(&d));
    let err = f.allocate(second, &[2]).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::ClientCapReached));
    assert_eq!((f.balances(&c), f.balances(&d)), before);
    f.allocate(other, &[2]).expect("the other client's bid");
    // Nobody else waits: the cap keeps no GPU idle.
    f.allocate(second, &[3]).expect("over the cap, but alone");
    let st: StakeAccount = f.ctx.account(&pda::stake(&f.market, &c.key.pubkey()).0);
    assert_eq!(st.gpus_held, 3);
}

/// Runs `lease` through interval `k` with a full proof.
fn prove(f: &mut Fixture, lease: Pubkey, k: u32) {
    let p = f.proof(&lease, k);
    f.submit(lease, p).expect("submit_usage");
}

#[test]
fn a_better_spot_bid_preempts_at_the_boundary_and_not_before() {
    let mut f = fixture();
    let low = f.client(100 * TOKEN, 0);
    let high = f.client(100 * TOKEN, 0);
    let a = f.spot_args(30 * TOKEN);
    let low_bid = f.place(&low, a);
    let lease = f.allocate(low_bid, &[0, 1, 2, 3]).expect("spot allocate");
    f.ctx.advance_time(20);
    let a = f.spot_args(20 * TOKEN);
    let poorer = f.place(&high, a);
    let a = f.spot_args(40 * TOKEN);
    let richer = f.place(&high, a);
    assert_eq!(book_order(&f.ctx, &f.spot_book), vec![richer, poorer]);

    let agent = f.agent.insecure_clone();
    let (market, machine) = (f.market, f.machine);
    let preempt = |challenger: Pubkey| Preempt {
        agent: &agent,
        market,
        machine,
        lease,
        lease_bid: low_bid,
        challenger,
        challenger_client: high.key.pubkey(),
    };
    let err = f.ctx.run(&preempt(poorer)).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::NotBetterBid));
    f.ctx.run(&preempt(richer)).expect("preempt");
    let l: Lease = f.ctx.account(&lease);
    assert_eq!(l.stop_at, l.started_at + INTERVAL, "stops at the boundary");
    assert!(l.preempted);
    // Before the boundary the GPUs are still the running lease's.
    let err = f.allocate(richer, &[0, 1, 2, 3]).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::GpusBusy));
    let err = f.ctx.run(&preempt(richer)).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::LeaseStopping));

    // At the boundary: the last proof, the settlement, the better bid starts.
    f.ctx.advance_time(INTERVAL - 20);
    prove(&mut f, lease, 0);
    let anyone = f.ctx.wallet(1);
    f.close(&anyone, lease, low.tokens, false)
        .expect("end_lease");
    assert!(!f.ctx.account_exists(&lease));
    let back: Bid = f.ctx.account(&low_bid);
    // 60 s at 30 tokens per GPU-day, rounded down per GPU, × 4 GPUs.
    let paid = (30 * TOKEN * 60 / 86_400) * 4;
    assert_eq!(back.status, BidStatus::Open);
    assert_eq!(back.escrow, 5 * TOKEN - paid);
    // Back in the book by its profit: between the richer and the poorer bid.
    assert_eq!(
        book_order(&f.ctx, &f.spot_book),
        vec![richer, low_bid, poorer]
    );
    f.allocate(richer, &[0, 1, 2, 3])
        .expect("the better bid runs");
}

#[test]
fn a_queue_bid_outranks_a_spot_lease_on_the_same_gpus() {
    let mut f = fixture();
    let spot_client = f.client(100 * TOKEN, 0);
    let queue_client = f.client(100 * TOKEN, 0);
    let a = f.spot_args(30 * TOKEN);
    let spot_bid = f.place(&spot_client, a);
    let lease = f.allocate(spot_bid, &[0, 1, 2, 3]).unwrap();
    let a = f.queue_args(2, 24);
    let queue_bid = f.place(&queue_client, a);
    let err = f.allocate(queue_bid, &[0, 1]).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::GpusBusy));
    f.ctx.advance_time(30);
    f.ctx
        .run(&Preempt {
            agent: &f.agent,
            market: f.market,
            machine: f.machine,
            lease,
            lease_bid: spot_bid,
            challenger: queue_bid,
            challenger_client: queue_client.key.pubkey(),
        })
        .expect("preempt for a queue bid");
    let l: Lease = f.ctx.account(&lease);
    assert_eq!(
        l.stop_at,
        f.ctx.now(),
        "queue bids stop spot leases at once"
    );
    // The 30 s up to the stop are proven and paid; then the GPUs go to the queue bid.
    let mut p = f.proof(&lease, 0);
    p.gpu_seconds = 4 * 30;
    f.submit(lease, p).unwrap();
    let agent = f.agent.insecure_clone();
    f.close(&agent, lease, spot_client.tokens, false).unwrap();
    f.allocate(queue_bid, &[0, 1]).expect("queue bid runs");
}

#[test]
fn proofs_pay_per_interval_chain_and_refuse_replays_gaps_and_bad_input() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    let a = f.queue_args(2, 8);
    let bid = f.place(&c, a);
    let lease = f.allocate(bid, &[0, 1]).unwrap();
    let before = f.balances(&c);

    // Not over yet.
    let err = f.submit(lease, f.proof(&lease, 0)).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::IntervalNotOver));
    f.ctx.advance_time(INTERVAL);
    // Somebody else's key; a wrong chain; a peak power per GPU missing.
    let stranger = f.ctx.wallet(1);
    let err = f
        .submit_with(&stranger, lease, f.proof(&lease, 0))
        .unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::WrongAgent));
    let mut p = f.proof(&lease, 0);
    p.prev_hash = [1; 32];
    let err = f.submit(lease, p).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::BadProofChain));
    let mut p = f.proof(&lease, 0);
    p.peak_power_w.pop();
    let err = f.submit(lease, p).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::BadProofGpuCount));
    assert_eq!(f.balances(&c), before, "rejected proofs move nothing");

    let p = f.proof(&lease, 0);
    f.submit(lease, p.clone()).expect("interval 0");
    // 2 GPUs × 60 s at 2 tokens per GPU-hour = 66 666; fee 2.5 % = 1 666.
    let gross = 2 * 2 * TOKEN * 60 / 3_600;
    let fee = gross * 250 / 10_000;
    let after = f.balances(&c);
    assert_eq!(after[1] - before[1], gross - fee, "host paid");
    assert_eq!(after[2] - before[2], fee, "treasury paid");
    assert_eq!(before[3] - after[3], gross, "out of escrow");
    let l: Lease = f.ctx.account(&lease);
    let expected_hash =
        solana_sha256_hasher::hash(&p.proof().chain_preimage(&lease.to_bytes(), &[0; 32]))
            .to_bytes();
    assert_eq!((l.next_interval, l.proof_hash), (1, expected_hash));

    // The same interval again, with the right chain: a replay.
    let mut replay = f.proof(&lease, 0);
    replay.prev_hash = l.proof_hash;
    let err = f.submit(lease, replay).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::StaleInterval));

    // Interval 1 skipped: 2 is paid, 1 never, and counts as missed.
    f.ctx.advance_time(2 * INTERVAL);
    let mut p = f.proof(&lease, 2);
    p.peak_power_w = vec![290, 320]; // GPU 1 above its 300 W
    f.submit(lease, p).expect("interval 2");
    let m: Machine = f.ctx.account(&f.machine);
    assert_eq!((m.missed_intervals, m.violations), (1, 1));
    let l: Lease = f.ctx.account(&lease);
    assert_eq!((l.paid, l.violations), (2 * gross, 1));
    let err = f.submit(lease, f.proof(&lease, 1)).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::StaleInterval));
}

#[test]
fn payment_stops_at_the_lease_end_and_the_rest_is_refunded() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    let mut a = f.queue_args(1, 8);
    a.max_duration_secs = 90;
    let bid = f.place(&c, a);
    let escrow = f.ctx.account::<Bid>(&bid).escrow;
    let start = f.balances(&c);
    let lease = f.allocate(bid, &[0]).unwrap();
    f.ctx.advance_time(500);
    prove(&mut f, lease, 0);
    // The second window is clipped to the 30 s left; the third does not exist.
    let mut p = f.proof(&lease, 1);
    p.gpu_seconds = 1_000; // claims more than the window: paid for the window only
    f.submit(lease, p).unwrap();
    let err = f.submit(lease, f.proof(&lease, 2)).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::IntervalAfterStop));
    let l: Lease = f.ctx.account(&lease);
    let per_sec_paid = 2 * TOKEN * 60 / 3_600 + 2 * TOKEN * 30 / 3_600;
    assert_eq!(l.paid, per_sec_paid);
    assert!(l.paid <= escrow);
    // Anyone settles a lease whose time is fully proven.
    let anyone = f.ctx.wallet(1);
    f.close(&anyone, lease, c.tokens, false).expect("end_lease");
    let end = f.balances(&c);
    assert_eq!(end[0] - start[0], escrow - l.paid, "the rest refunded");
    assert_eq!(end[3], 0, "the vault is empty");
    assert_eq!(
        end[0] + (end[1] - start[1]) + (end[2] - start[2]),
        start[0] + escrow,
        "client + host + treasury: nothing created or lost"
    );
    assert!(!f.ctx.account_exists(&bid) && !f.ctx.account_exists(&lease));
    let m: Machine = f.ctx.account(&f.machine);
    assert_eq!((m.used_gib[0], m.leases), (0, 0));
    let st: StakeAccount = f.ctx.account(&pda::stake(&f.market, &c.key.pubkey()).0);
    assert_eq!(st.gpus_held, 0);
    // A proof for the ended lease: its account is gone.
    let err = f
        .ctx
        .run(&SubmitUsage {
            agent: &f.agent,
            market: f.market,
            machine: f.machine,
            lease,
            bid,
            payment_mint: f.mint,
            treasury: f.treasury,
            host_tokens: f.host.tokens,
            args: SubmitUsageArgs {
                interval: 3,
                gpu_seconds: 60,
                energy_j: 1,
                avg_utilisation_bps: 9_000,
                peak_power_w: vec![290],
                exit_code: None,
                prev_hash: l.proof_hash,
            },
        })
        .unwrap_err();
    assert_eq!(
        err.custom_code(),
        Some(AnchorErrorCode::AccountNotInitialized as u32)
    );
    assert_eq!(f.balances(&c), end, "and moves nothing");
}

#[test]
fn the_client_ends_a_lease_and_the_host_proves_up_to_the_stop() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    let a = f.queue_args(1, 8);
    let bid = f.place(&c, a);
    let lease = f.allocate(bid, &[0]).unwrap();
    f.ctx.advance_time(45);
    let stranger = f.ctx.wallet(1);
    let err = f.close(&stranger, lease, c.tokens, false).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::NotLeaseParty));
    let client_key = c.key.insecure_clone();
    f.close(&client_key, lease, c.tokens, false)
        .expect("client stops it");
    let l: Lease = f.ctx.account(&lease);
    assert_eq!(l.stop_at, f.ctx.now());
    let mut p = f.proof(&lease, 0);
    p.gpu_seconds = 45;
    p.exit_code = Some(137);
    f.submit(lease, p).expect("final proof");
    f.close(&stranger, lease, c.tokens, false)
        .expect("settled by anyone");
    assert!(!f.ctx.account_exists(&lease));
}

#[test]
fn a_silent_host_is_not_paid_the_client_reclaims_and_anyone_slashes() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    let a = f.queue_args(1, 8);
    let bid = f.place(&c, a);
    let escrow = f.ctx.account::<Bid>(&bid).escrow;
    let lease = f.allocate(bid, &[0]).unwrap();
    let start = f.balances(&c);
    let client_key = c.key.insecure_clone();
    f.ctx.advance_time(2 * INTERVAL);
    let err = f.close(&client_key, lease, c.tokens, true).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::HostNotSilent));
    let stranger = f.ctx.wallet(1);
    let err = f.close(&stranger, lease, c.tokens, true).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::NotLeaseParty));
    assert_eq!(f.balances(&c), start);

    f.ctx.advance_time(INTERVAL);
    f.close(&client_key, lease, c.tokens, true)
        .expect("reclaim_escrow");
    let end = f.balances(&c);
    assert_eq!(end[0] - start[0], escrow, "all of the escrow back");
    assert_eq!(end[1], start[1], "the host is not paid for unproven time");
    let m: Machine = f.ctx.account(&f.machine);
    assert_eq!(m.missed_intervals, 3);

    // Three missed intervals, two make evidence: one slash of 10 % of the host's 100 tokens.
    let slash = Slash {
        signer: &stranger,
        market: f.market,
        machine: f.machine,
        host: f.host.key.pubkey(),
        stake_mint: f.mint,
        stake_treasury: f.stake_treasury,
    };
    f.ctx.run(&slash).expect("slash");
    assert_eq!(f.ctx.token_balance(&f.stake_treasury), 10 * TOKEN);
    let host_stake: StakeAccount = f
        .ctx
        .account(&pda::stake(&f.market, &f.host.key.pubkey()).0);
    assert_eq!(host_stake.amount, 90 * TOKEN);
    let market: Market = f.ctx.account(&f.market);
    assert_eq!(market.total_staked, 90 * TOKEN);
    assert_eq!(
        f.ctx.token_balance(&pda::stake_vault(&f.market).0),
        90 * TOKEN
    );
    // The evidence is used up: one missed interval is left, two are needed.
    let err = f.ctx.run(&slash).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::NoSlashingEvidence));
    assert_eq!(f.ctx.token_balance(&f.stake_treasury), 10 * TOKEN);
}

#[test]
fn low_utilisation_flags_a_lease_idle() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    let a = f.queue_args(1, 8);
    let bid = f.place(&c, a);
    let lease = f.allocate(bid, &[0]).unwrap();
    f.ctx.advance_time(3 * INTERVAL);
    for (k, util, idle) in [(0, 500, false), (1, 9_000, false), (2, 400, false)] {
        let mut p = f.proof(&lease, k);
        p.avg_utilisation_bps = util;
        f.submit(lease, p).unwrap();
        assert_eq!(f.ctx.account::<Lease>(&lease).idle, idle, "after {k}");
    }
    f.ctx.advance_time(INTERVAL);
    let mut p = f.proof(&lease, 3);
    p.avg_utilisation_bps = 100;
    f.submit(lease, p).unwrap();
    let l: Lease = f.ctx.account(&lease);
    assert!(l.idle, "two low intervals in a row");
    assert_eq!(l.idle_streak, 2);
}

#[test]
fn a_lease_of_another_machine_or_a_wrong_agent_is_refused() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    let a = f.queue_args(1, 8);
    let bid = f.place(&c, a);
    let stranger = f.ctx.wallet(1);
    let a = f.allocate_ix(&stranger, bid, &[0]);
    let err = f.send_allocate(&a).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::WrongAgent));
    let lease = f.allocate(bid, &[0]).unwrap();
    // A second machine of the same host, its own agent: it cannot prove the first one's lease.
    let other_agent = f.ctx.wallet(1);
    let r = RegisterMachine {
        owner: &f.host.key,
        market: f.market,
        id: 1,
        terms: MachineTerms {
            agent: other_agent.pubkey(),
            region: [0; 16],
            gpus: gpus(),
            price_floor_per_gpu_hour: 0,
            electricity_cost_per_kwh: 0,
            cached_images: vec![],
        },
    };
    let other = r.machine();
    f.ctx.run(&r).unwrap();
    f.ctx.advance_time(INTERVAL);
    let l: Lease = f.ctx.account(&lease);
    let err = f
        .ctx
        .run(&SubmitUsage {
            agent: &other_agent,
            market: f.market,
            machine: other,
            lease,
            bid: l.bid,
            payment_mint: f.mint,
            treasury: f.treasury,
            host_tokens: f.host.tokens,
            args: f.proof(&lease, 0),
        })
        .unwrap_err();
    assert_eq!(
        err.custom_code(),
        Some(AnchorErrorCode::ConstraintHasOne as u32)
    );
}

#[test]
fn compute_units_of_lease_instructions() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    // Three bids above the chosen one that do not fit (class 7): the program reads them off the
    // book, the transaction names none of them.
    let mut above = Vec::new();
    for _ in 0..3 {
        let rich = f.client(600 * TOKEN, 500 * TOKEN);
        let mut a = f.queue_args(1, 8);
        a.accepted_classes = 1 << 7;
        above.push(f.place(&rich, a));
    }
    let a = f.queue_args(2, 8);
    let bid = f.place(&c, a);
    let lease = f.allocate(bid, &[0, 1]).unwrap();
    f.ctx.advance_time(INTERVAL);
    prove(&mut f, lease, 0);
    let client_key = c.key.insecure_clone();
    f.close(&client_key, lease, c.tokens, false).unwrap();
    let end_lease = f.ctx.compute_units["end_lease"];
    // A silent host: reclaim and slash; then a spot lease preempted by a richer spot bid.
    let a = f.queue_args(1, 8);
    let quiet = f.place(&c, a);
    let quiet_lease = f.allocate(quiet, &[0]).unwrap();
    f.ctx.advance_time(4 * INTERVAL);
    f.close(&client_key, quiet_lease, c.tokens, true).unwrap();
    let stranger = f.ctx.wallet(1);
    f.ctx
        .run(&Slash {
            signer: &stranger,
            market: f.market,
            machine: f.machine,
            host: f.host.key.pubkey(),
            stake_mint: f.mint,
            stake_treasury: f.stake_treasury,
        })
        .unwrap();
    let a = f.spot_args(30 * TOKEN);
    let spot = f.place(&c, a);
    let spot_lease = f.allocate(spot, &[0, 1, 2, 3]).unwrap();
    let a = f.spot_args(40 * TOKEN);
    let richer = f.place(&c, a);
    f.ctx
        .run(&Preempt {
            agent: &f.agent,
            market: f.market,
            machine: f.machine,
            lease: spot_lease,
            lease_bid: spot,
            challenger: richer,
            challenger_client: c.key.pubkey(),
        })
        .unwrap();
    let lease_space = 8 + <Lease as anchor_lang::Space>::INIT_SPACE;
    println!("| instruction | compute units |");
    println!("|---|---|");
    let cu = &f.ctx.compute_units;
    println!("| allocate (3 unfit bids above) | {} |", cu["allocate"]);
    println!("| submit_usage | {} |", cu["submit_usage"]);
    println!("| end_lease (settle, refund) | {end_lease} |");
    println!("| preempt | {} |", cu["preempt"]);
    println!("| reclaim_escrow | {} |", cu["end_lease"]);
    println!("| slash | {} |", cu["slash"]);
    println!(
        "lease account: {lease_space} bytes, rent {} lamports",
        f.ctx.svm.minimum_balance_for_rent_exemption(lease_space)
    );
    assert!(f.ctx.compute_units["submit_usage"] <= 60_000);
}
