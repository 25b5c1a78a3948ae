//! The market of the lease tests: one host with a 4-GPU machine (and its spot book), clients,
//! bids, allocations, proofs and settlements, on the SBF build in LiteSVM. Shared by the test
//! binaries of a lease's rules (`lease.rs`) and of its refunds (`refunds.rs`).

use anchor_lang::error::ERROR_CODE_OFFSET;
use gpu_market::errors::MarketError;
use gpu_market::instructions::{PlaceBidArgs, UsageProofArgs};
use gpu_market::pda;
use gpu_market::state::{
    BidKind, GpuSpec, Lease, MachineNetwork, MachineStatus, MachineTerms, Market, MarketParams,
    OverclockTerms,
};
use solana_keypair::Keypair;
use solana_pubkey::Pubkey;
use solana_signer::Signer;

use crate::program_test::*;
use gpu_market_sdk::instructions::{AddRegion, UpdateMachine};

pub const TOKEN: u64 = 1_000_000;
pub const INTERVAL: i64 = 60;

pub fn code(e: MarketError) -> Option<u32> {
    Some(ERROR_CODE_OFFSET + e as u32)
}

pub struct Wallet {
    pub key: Keypair,
    pub tokens: Pubkey,
}

pub struct Fixture {
    pub ctx: TestContext,
    pub authority: Keypair,
    pub mint: Pubkey,
    pub market: Pubkey,
    pub queue_book: Pubkey,
    pub treasury: Pubkey,
    pub stake_treasury: Pubkey,
    pub host: Wallet,
    pub agent: Keypair,
    pub machine: Pubkey,
    pub spot_book: Pubkey,
    /// The last nonce a bid placed here took (`placement`): each bid gets the next.
    pub nonce: std::cell::Cell<u64>,
    /// The host's machine that queue bids this machine cannot serve name at placement
    /// ([`Fixture::place_elsewhere`]); registered on first use, paused but while placing.
    pub witness: Option<Pubkey>,
}

/// 4 GPUs: 0 and 1 (class 0) in topology group 0, 2 and 3 (class 1) in group 1; 24 GiB each,
/// 150..450 W; floor 0.5 token per GPU-hour; electricity 0.2 token per kWh.
pub fn gpus() -> Vec<GpuSpec> {
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

/// The fixture machine's terms: [`gpus`], run by `agent`.
pub fn machine_terms(agent: &Pubkey) -> MachineTerms {
    MachineTerms {
        agent: *agent,
        region: [0; 16],
        gpus: gpus(),
        price_floor_per_gpu_hour: TOKEN / 2,
        electricity_cost_per_kwh: TOKEN / 5,
        network: MachineNetwork::default(),
        cpu_milli: 0,
        memory_mib: 0,
    }
}

pub fn params() -> MarketParams {
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

pub fn fixture() -> Fixture {
    let mut ctx = TestContext::new();
    let (authority, mint, market) = ctx.create_market(1, params());
    let queue_book = ctx.open_queue_book(&authority, market);
    let m: Market = ctx.account(&market);
    let (key, tokens) = ctx.funded_user(&mint, 100 * TOKEN);
    let host = Wallet { key, tokens };
    let agent = ctx.wallet(10);
    let mut f = Fixture {
        ctx,
        authority,
        mint,
        market,
        queue_book,
        treasury: m.treasury,
        stake_treasury: m.stake_treasury,
        host,
        agent,
        machine: Pubkey::default(),
        spot_book: Pubkey::default(),
        nonce: Default::default(),
        witness: None,
    };
    f.open_and_stake(0, 100 * TOKEN);
    let r = RegisterMachine {
        owner: &f.host.key,
        market,
        id: 0,
        terms: machine_terms(&f.agent.pubkey()),
    };
    f.machine = r.machine();
    f.ctx.run(&r).expect("register_machine");
    let host = f.host.key.insecure_clone();
    let machine = f.machine;
    f.spot_book = f.ctx.open_spot_book(&host, &machine);
    f
}

impl Fixture {
    /// Opens the stake account of the host (`who == 0`) and stakes `amount`.
    pub fn open_and_stake(&mut self, who: usize, amount: u64) {
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
    pub fn client(&mut self, balance: u64, staked: u64) -> Wallet {
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
    pub fn queue_args(&mut self, gpus: u8, gib: u16) -> PlaceBidArgs {
        PlaceBidArgs {
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
            min_duration_secs: 3_600,
            deadline: self.ctx.now() + 4 * 3_600,
            urgency_premium: 0,
            ports: vec![],
            scratch_gib: 0,
            cpu_milli: 0,
            memory_mib: 0,
            regions: Vec::new(),
            auto_power: None,
        }
    }

    /// A spot bid on the machine: all 4 GPUs, `per_day` per GPU-day, one hour.
    pub fn spot_args(&mut self, per_day: u64) -> PlaceBidArgs {
        PlaceBidArgs {
            kind: BidKind::Spot,
            gpu_count: 4,
            gib_per_gpu: 24,
            price: per_day,
            ..self.queue_args(4, 24)
        }
    }

    /// `place_bid` of `args` by `c`, into the fixture's queue book or (a spot bid) its
    /// machine's spot book.
    pub fn placement<'a>(&self, c: &'a Wallet, args: PlaceBidArgs) -> PlaceBid<'a> {
        let spot = args.kind == BidKind::Spot;
        PlaceBid {
            client: &c.key,
            market: self.market,
            book: if spot {
                self.spot_book
            } else {
                self.queue_book
            },
            machine: self.machine,
            payment_mint: self.mint,
            client_tokens: c.tokens,
            nonce: self.nonce.replace(self.nonce.get() + 1) + 1,
            args,
            evict: None,
        }
    }

    pub fn place(&mut self, c: &Wallet, args: PlaceBidArgs) -> Pubkey {
        let p = self.placement(c, args);
        self.ctx.run(&p).expect("place_bid");
        p.bid()
    }

    /// The client `c` cancels its waiting queue bid.
    pub fn cancel(&mut self, c: &Wallet, bid: Pubkey) -> Result<(), Failure> {
        self.ctx
            .run(&CancelBid {
                client: &c.key,
                market: self.market,
                bid,
                book: self.queue_book,
                payment_mint: self.mint,
                client_tokens: c.tokens,
            })
            .map(|_| ())
    }

    /// [`Fixture::placement`] naming `witness` (a machine the bid fits) instead of the
    /// fixture's machine.
    pub fn placement_via<'a>(
        &self,
        c: &'a Wallet,
        args: PlaceBidArgs,
        witness: Pubkey,
    ) -> PlaceBid<'a> {
        PlaceBid {
            machine: witness,
            ..self.placement(c, args)
        }
    }

    /// A queue bid placed with `witness` (a machine it fits) instead of the fixture's machine.
    pub fn place_via(&mut self, c: &Wallet, args: PlaceBidArgs, witness: Pubkey) -> Pubkey {
        let p = self.placement_via(c, args, witness);
        self.ctx.run(&p).expect("place_bid");
        p.bid()
    }

    /// A queue bid the fixture's machine cannot serve (so it is no witness for it), placed with
    /// a machine of the host's that fits every bid shape ([`witness_terms`]), active only while
    /// the bid is placed: paused, it neither serves the bid nor counts among the GPUs offered.
    pub fn place_elsewhere(&mut self, c: &Wallet, args: PlaceBidArgs) -> Pubkey {
        let witness = match self.witness {
            Some(w) => w,
            None => {
                let agent = self.ctx.wallet(1);
                let host = self.host.key.insecure_clone();
                let w = self.ctx.register_machine(
                    &host,
                    self.market,
                    99,
                    witness_terms(agent.pubkey(), [0; 16]),
                );
                self.witness = Some(w);
                self.set_status(w, MachineStatus::Paused);
                w
            }
        };
        self.set_status(witness, MachineStatus::Active);
        let bid = self.place_via(c, args, witness);
        self.set_status(witness, MachineStatus::Paused);
        bid
    }

    /// The host sets `machine`'s status.
    pub fn set_status(&mut self, machine: Pubkey, status: MachineStatus) {
        let host = self.host.key.insecure_clone();
        self.ctx
            .run(&SetMachineStatus {
                owner: &host,
                market: self.market,
                machine,
                status,
            })
            .expect("set_machine_status");
    }

    /// The host registers machine `id` (not the fixture's, id 0), with the fixture machine's
    /// terms as `change` makes them, run by an agent of its own; returns the machine.
    pub fn other_machine(&mut self, id: u64, change: impl FnOnce(&mut MachineTerms)) -> Pubkey {
        self.other_machine_run_by(id, change).0
    }

    /// [`Fixture::other_machine`], with its agent.
    pub fn other_machine_run_by(
        &mut self,
        id: u64,
        change: impl FnOnce(&mut MachineTerms),
    ) -> (Pubkey, Keypair) {
        let agent = self.ctx.wallet(1);
        let mut terms = machine_terms(&agent.pubkey());
        change(&mut terms);
        let owner = self.host.key.insecure_clone();
        let r = RegisterMachine {
            owner: &owner,
            market: self.market,
            id,
            terms,
        };
        self.ctx.run(&r).expect("register_machine");
        (r.machine(), agent)
    }

    /// `allocate` of `bid` on the fixture's machine by `agent`, with the evidence the sdk reads off
    /// the book.
    pub fn allocate_ix<'a>(&self, agent: &'a Keypair, bid: Pubkey, gpus: &[u8]) -> Allocate<'a> {
        self.ctx.allocation(agent, self.machine, bid, gpus)
    }

    pub fn send_allocate(&mut self, a: &Allocate) -> Result<Pubkey, Failure> {
        self.ctx.allocate(a).map(|_| a.lease())
    }

    pub fn allocate(&mut self, bid: Pubkey, gpus: &[u8]) -> Result<Pubkey, Failure> {
        let agent = self.agent.insecure_clone();
        let a = self.allocate_ix(&agent, bid, gpus);
        self.send_allocate(&a)
    }

    /// The proof of `interval` of `lease`, with full GPU time.
    pub fn proof(&self, lease: &Pubkey, interval: u32) -> UsageProofArgs {
        let l: Lease = self.ctx.account(lease);
        UsageProofArgs {
            interval,
            intervals: 1,
            gpu_seconds: INTERVAL as u64 * l.gpu_count as u64,
            energy_j: 300 * INTERVAL as u64 * l.gpu_count as u64,
            avg_utilisation_bps: 9_000,
            peak_power_w: vec![290; l.gpu_count as usize],
            exit_code: None,
            samples_hash: [0; 32],
            energy_saved_j: 0,
        }
    }

    /// `submit_usage` of `proofs` (leases of one machine, the first's) signed by `agent`.
    pub fn submit_batch_with(
        &mut self,
        agent: &Keypair,
        proofs: Vec<(Pubkey, UsageProofArgs)>,
    ) -> Result<(), Failure> {
        let l: Lease = self.ctx.account(&proofs[0].0);
        let s = SubmitUsage {
            agent,
            market: self.market,
            machine: l.machine,
            proofs,
        };
        self.ctx.run(&s).map(|_| ())
    }

    pub fn submit_with(
        &mut self,
        agent: &Keypair,
        lease: Pubkey,
        args: UsageProofArgs,
    ) -> Result<(), Failure> {
        self.submit_batch_with(agent, vec![(lease, args)])
    }

    pub fn submit(&mut self, lease: Pubkey, args: UsageProofArgs) -> Result<(), Failure> {
        let agent = self.agent.insecure_clone();
        self.submit_with(&agent, lease, args)
    }

    /// `claim_pay` of `machine`'s accrued pay into the host's token account.
    pub fn claim(&mut self, machine: Pubkey) -> Result<(), Failure> {
        self.ctx
            .run(&ClaimPay {
                market: self.market,
                machine,
                payment_mint: self.mint,
                host_tokens: self.host.tokens,
            })
            .map(|_| ())
    }

    /// `end_lease` (or `reclaim_escrow`) of `lease` signed by `signer`, refunding to
    /// `client_tokens`. A reclaim asks for a refund, which the program grants when the client
    /// signs it; signed by anyone else, a queue lease's bid fails over.
    pub fn close(
        &mut self,
        signer: &Keypair,
        lease: Pubkey,
        client_tokens: Pubkey,
        reclaim: bool,
    ) -> Result<(), Failure> {
        self.close_with(signer, lease, Some(client_tokens), reclaim)
    }

    /// [`Fixture::close`] passing `client_tokens` as given: `None` leaves the refund owed by the
    /// client's stake account.
    pub fn close_with(
        &mut self,
        signer: &Keypair,
        lease: Pubkey,
        client_tokens: Option<Pubkey>,
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
                host: self.host.key.pubkey(),
                spot_book: Some(self.spot_book),
                queue_book: (reclaim && l.kind == BidKind::Queue).then_some(self.queue_book),
                payment_mint: self.mint,
                client_tokens,
                reclaim,
                refund: reclaim,
            })
            .map(|_| ())
    }

    /// The host changes its machine's terms (from [`machine_terms`]) with `change`.
    pub fn update_machine(&mut self, change: impl FnOnce(&mut MachineTerms)) {
        let mut terms = machine_terms(&self.agent.pubkey());
        change(&mut terms);
        let owner = self.host.key.insecure_clone();
        self.ctx
            .run(&UpdateMachine {
                owner: &owner,
                market: self.market,
                machine: self.machine,
                spot_book: Some(self.spot_book),
                terms,
            })
            .expect("update_machine");
    }

    /// The market authority lists `region` (`add_region`).
    pub fn add_region(&mut self, region: [u8; 16]) -> Result<(), Failure> {
        let authority = self.authority.insecure_clone();
        self.ctx
            .run(&AddRegion {
                authority: &authority,
                market: self.market,
                region,
            })
            .map(|_| ())
    }

    /// Schedules `params`, waits out the notice and applies them (anyone may).
    pub fn update_market(&mut self, params: MarketParams) {
        let authority = self.authority.insecure_clone();
        self.ctx
            .run(&UpdateMarket {
                authority: &authority,
                market: self.market,
                params,
            })
            .expect("update_market");
        let due = self.ctx.account::<Market>(&self.market).pending_at;
        self.ctx.advance_time(due - self.ctx.now());
        let anyone = self.ctx.wallet(1);
        self.ctx
            .run(&ApplyMarketUpdate {
                signer: &anyone,
                market: self.market,
            })
            .expect("apply_market_update");
    }

    /// What a refused step must leave as it was (tokens, escrows, fees due, stakes).
    pub fn ledger(&self, c: &Wallet) -> Ledger {
        let host = self.host.key.insecure_clone();
        self.ctx.ledger(
            &self.market,
            &self.queue_book,
            &[(&c.key, c.tokens), (&host, self.host.tokens)],
        )
    }

    /// `collect_fees` by a stranger: the fees and slashed stake the market holds go to its
    /// treasuries.
    pub fn collect_fees(&mut self) {
        let anyone = self.ctx.wallet(1);
        self.ctx
            .run(&CollectFees {
                signer: &anyone,
                market: self.market,
                payment_mint: self.mint,
                stake_mint: self.mint,
                treasury: self.treasury,
                stake_treasury: self.stake_treasury,
            })
            .expect("collect_fees");
    }

    /// Every token balance the market touches, to show that a rejected step moved nothing.
    pub fn balances(&self, c: &Wallet) -> [u64; 5] {
        [
            self.ctx.token_balance(&c.tokens),
            self.ctx.token_balance(&self.host.tokens),
            self.ctx.token_balance(&self.treasury),
            self.ctx.token_balance(&pda::payment_vault(&self.market).0),
            self.ctx.token_balance(&pda::stake_vault(&self.market).0),
        ]
    }
}

/// The host closes the fixture's (retired) machine and its spot book (`close_machine`).
pub fn close_machine(f: &mut Fixture) -> Result<(), Failure> {
    let owner = f.host.key.insecure_clone();
    f.ctx
        .run(&CloseMachine {
            owner: &owner,
            market: f.market,
            machine: f.machine,
            spot_book: Some(f.spot_book),
        })
        .map(drop)
}

/// A stranger slashes the fixture machine's host on the evidence its proofs left.
pub fn slash_by_stranger(f: &mut Fixture) -> Result<(), Failure> {
    let stranger = f.ctx.wallet(1);
    f.ctx
        .run(&Slash {
            signer: &stranger,
            market: f.market,
            machine: f.machine,
            host: f.host.key.pubkey(),
        })
        .map(drop)
}

/// Runs `lease` through interval `k` with a full proof, and pays its host at once (as an
/// agent that claims after every proof would).
pub fn prove(f: &mut Fixture, lease: Pubkey, k: u32) {
    let p = f.proof(&lease, k);
    f.submit(lease, p).expect("submit_usage");
    let machine = f.ctx.account::<Lease>(&lease).machine;
    f.claim(machine).expect("claim_pay");
}
