//! The fixture of the allocation tests: a market with its queue book and one machine, staked
//! clients, a witness machine for bids no active machine serves, and `allocate` measured at
//! depths of the book.

use gpu_market_tests::program_test;

use anchor_lang::error::ERROR_CODE_OFFSET;
use gpu_market::errors::MarketError;
use gpu_market::instructions::PlaceBidArgs;
use gpu_market::pda;
use gpu_market::state::{
    BidKind, GpuSpec, Lease, MachineNetwork, MachineStatus, MachineTerms, MarketParams,
    OverclockTerms, BOOK_CAPACITY,
};
use program_test::*;
use solana_keypair::Keypair;
use solana_pubkey::Pubkey;
use solana_signer::Signer;

pub(crate) const TOKEN: u64 = 1_000_000;

pub(crate) fn code(e: MarketError) -> Option<u32> {
    Some(ERROR_CODE_OFFSET + e as u32)
}

pub(crate) struct Client {
    pub(crate) key: Keypair,
    pub(crate) tokens: Pubkey,
}

pub(crate) struct Fixture {
    pub(crate) ctx: TestContext,
    pub(crate) authority: Keypair,
    pub(crate) mint: Pubkey,
    pub(crate) market: Pubkey,
    pub(crate) queue_book: Pubkey,
    pub(crate) host: Keypair,
    pub(crate) agent: Keypair,
    pub(crate) machine: Pubkey,
    pub(crate) nonce: u64,
}

/// A class-0 GPU of 24 GiB in topology group 0, allowed 150 W up to `max_power_w`.
pub(crate) fn gpu(max_power_w: u16) -> GpuSpec {
    GpuSpec {
        uuid: [0; 16],
        class: 0,
        topology_group: 0,
        memory_gib: 24,
        power_w: [150, max_power_w],
        core_lock_mhz: [210, 2_520],
        mem_lock_mhz: [0, 0],
        core_offset_mhz: [-200, 200],
        mem_offset_mhz: [0, 1_500],
    }
}

/// A market (reserve 1 token per GPU-hour, anti-monopoly cap `cap_bps`) with its queue book and
/// one machine of `gpus`, no host floor and no host stake asked (these tests are about the book).
pub(crate) fn fixture(mut gpus: Vec<GpuSpec>, cap_bps: u16) -> Fixture {
    let mut ctx = TestContext::new();
    let mut params = MarketParams::recommended(60, 250, 3_600);
    params.stake_bound = 1_000 * TOKEN;
    params.max_client_share_bps = cap_bps;
    params.min_host_stake = 0;
    let (authority, mint, market) = ctx.create_market(1, params);
    let queue_book = ctx.open_queue_book(&authority, market);
    let host = ctx.wallet(10);
    let agent = ctx.wallet(10);
    ctx.run(&OpenStake {
        owner: &host,
        market,
    })
    .expect("open_stake");
    for (i, g) in gpus.iter_mut().enumerate() {
        g.uuid = [i as u8 + 1; 16];
    }
    let r = RegisterMachine {
        owner: &host,
        market,
        id: 0,
        terms: MachineTerms {
            agent: agent.pubkey(),
            region: [0; 16],
            gpus,
            price_floor_per_gpu_hour: 0,
            electricity_cost_per_kwh: 0,
            network: MachineNetwork::default(),
            cpu_milli: 0,
            memory_mib: 0,
        },
    };
    let machine = r.machine();
    ctx.run(&r).expect("register_machine");
    Fixture {
        ctx,
        authority,
        mint,
        market,
        queue_book,
        host,
        agent,
        machine,
        nonce: 0,
    }
}

impl Fixture {
    /// A client with `balance` tokens, `staked` of them staked (its bids rank by it).
    pub(crate) fn client(&mut self, balance: u64, staked: u64) -> Client {
        let (key, tokens) = self.ctx.funded_user(&self.mint, balance);
        self.ctx
            .run(&OpenStake {
                owner: &key,
                market: self.market,
            })
            .expect("open_stake");
        if staked > 0 {
            self.ctx
                .run(&Stake {
                    owner: &key,
                    market: self.market,
                    stake_mint: self.mint,
                    owner_tokens: tokens,
                    amount: staked,
                })
                .expect("stake");
        }
        Client { key, tokens }
    }

    /// A queue bid for `gpus` GPUs × `gib` GiB of the `classes`, 300 W, 2 tokens per GPU-hour
    /// (twice the reserve) for 10 minutes, within 4 hours.
    pub(crate) fn args(&mut self, gpus: u8, gib: u16, classes: u8) -> PlaceBidArgs {
        PlaceBidArgs {
            kind: BidKind::Queue,
            image_ref: "127.0.0.1:5000/gpu-market/busybox:latest".into(),
            image_digest: [9; 32],
            env_hash: [3; 32],
            gpu_count: gpus,
            gib_per_gpu: gib,
            accepted_classes: classes,
            overclock: vec![OverclockTerms {
                power_limit_w: 300,
                ..Default::default()
            }],
            price: 2 * TOKEN,
            max_duration_secs: 600,
            min_duration_secs: 600,
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

    pub(crate) fn place(&mut self, c: &Client, args: PlaceBidArgs) -> Pubkey {
        let machine = self.machine;
        self.place_via(c, args, machine)
    }

    /// A queue bid placed with `witness` as the machine it fits.
    pub(crate) fn place_via(&mut self, c: &Client, args: PlaceBidArgs, witness: Pubkey) -> Pubkey {
        let p = self.placement(c, args, witness);
        self.ctx
            .run(&p)
            .unwrap_or_else(|e| panic!("place_bid: {:?}", e.err));
        p.bid()
    }

    /// A gang bid of `parts` parts of `args` each, placed with `witness` as a machine one part
    /// fits.
    pub(crate) fn place_gang_via(
        &mut self,
        c: &Client,
        args: PlaceBidArgs,
        parts: u8,
        witness: Pubkey,
    ) -> Pubkey {
        let p = PlaceGangBid {
            place: self.placement(c, args, witness),
            parts,
        };
        self.ctx
            .run(&p)
            .unwrap_or_else(|e| panic!("place_gang_bid: {:?}", e.err));
        p.place.bid()
    }

    /// `place_bid` of `args` by `c`, naming `witness`, with the fixture's next nonce.
    fn placement<'c>(
        &mut self,
        c: &'c Client,
        args: PlaceBidArgs,
        witness: Pubkey,
    ) -> PlaceBid<'c> {
        self.nonce += 1;
        PlaceBid {
            client: &c.key,
            market: self.market,
            book: self.queue_book,
            machine: witness,
            payment_mint: self.mint,
            client_tokens: c.tokens,
            nonce: self.nonce,
            args,
            evict: None,
        }
    }

    /// `allocate` of `bid` onto `gpus`, with the evidence the sdk reads off the book.
    pub(crate) fn allocation(&self, bid: Pubkey, gpus: &[u8]) -> Allocate<'_> {
        self.ctx.allocation(&self.agent, self.machine, bid, gpus)
    }

    pub(crate) fn send(&mut self, a: &Allocate) -> Result<Pubkey, Failure> {
        self.ctx.allocate(a).map(|_| a.lease())
    }

    pub(crate) fn allocate(&mut self, bid: Pubkey, gpus: &[u8]) -> Result<Pubkey, Failure> {
        let agent = self.agent.insecure_clone();
        let a = self.ctx.allocation(&agent, self.machine, bid, gpus);
        self.send(&a)
    }

    /// The host changes its machine's terms (`update_machine`) as `edit` says.
    pub(crate) fn update_machine(&mut self, edit: impl FnOnce(&mut MachineTerms)) {
        let machine: gpu_market::state::Machine = self.ctx.account(&self.machine);
        let mut terms = machine.terms();
        edit(&mut terms);
        let host = self.host.insecure_clone();
        self.ctx
            .run(&UpdateMachine {
                owner: &host,
                market: self.market,
                machine: self.machine,
                spot_book: None,
                terms,
            })
            .expect("update_machine");
    }

    /// The host registers a machine every bid shape fits ([`witness_terms`]), in `region`, and
    /// leaves it paused: bids the fixture's machine cannot serve name it at placement, and
    /// paused it neither serves them nor counts among the GPUs offered. So an attacker shapes
    /// bids that no active machine can serve: its own machine, paused once they are placed.
    pub(crate) fn witness(&mut self, id: u64, region: [u8; 16]) -> Witness {
        let agent = self.ctx.wallet(1);
        let host = self.host.insecure_clone();
        let machine = self.ctx.register_machine(
            &host,
            self.market,
            id,
            witness_terms(agent.pubkey(), region),
        );
        Witness { machine }
    }

    /// Pauses or resumes the witness (its owner, `set_machine_status`).
    pub(crate) fn set_witness(&mut self, w: &Witness, status: MachineStatus) {
        let host = self.host.insecure_clone();
        self.ctx
            .run(&SetMachineStatus {
                owner: &host,
                market: self.market,
                machine: w.machine,
                status,
            })
            .expect("set_machine_status");
    }

    pub(crate) fn ledger(&self, clients: &[&Client]) -> Ledger {
        let clients: Vec<(&Keypair, Pubkey)> = clients.iter().map(|c| (&c.key, c.tokens)).collect();
        self.ctx.ledger(&self.market, &self.queue_book, &clients)
    }

    pub(crate) fn position(&self, bid: &Pubkey) -> Option<usize> {
        book_order(&self.ctx, &self.queue_book)
            .iter()
            .position(|b| b == bid)
    }
}

/// A machine bids the fixture's machine cannot serve name at placement.
pub(crate) struct Witness {
    pub(crate) machine: Pubkey,
}

/// One allocation measured at a book depth.
pub(crate) struct Measure {
    pub(crate) above: usize,
    /// The instruction's compute units, or why the allocation failed.
    pub(crate) units: Result<u64, String>,
    pub(crate) bytes: usize,
}

/// Allocates `bid` onto `gpus` on a copy of the chain, as the agent sends it, and checks that the
/// sdk needs no evidence for it; the chain is left as it was. Returns the entries ranked above
/// the bid, the instruction's compute units and the transaction's size.
pub(crate) fn measure(f: &mut Fixture, bid: Pubkey, gpus: &[u8]) -> Measure {
    let a = f.allocation(bid, gpus);
    assert!(
        a.evidence.is_empty(),
        "nothing above fits, nothing to show: {:?}",
        a.evidence
    );
    let tx = f.ctx.transaction(&allocate_instructions(&a), &a.signers());
    let bytes = wire_size(&tx);
    let lease = a.lease();
    let above = f.position(&bid).expect("the bid waits in the book");
    let saved = f.ctx.svm.clone();
    let units = match f.ctx.send_transaction(tx) {
        Ok(meta) => {
            assert_eq!(f.ctx.account::<Lease>(&lease).bid, bid);
            Ok(program_units(&meta.logs))
        }
        Err(e) => Err(format!("{:?}", e.err)),
    };
    f.ctx.svm = saved;
    Measure {
        above,
        units,
        bytes,
    }
}

/// Depths at which `allocate` is measured: entries ranked above the chosen bid.
pub(crate) const DEPTHS: [usize; 5] = [0, 10, 100, 1_000, BOOK_CAPACITY - 1];

/// Places bids the machine cannot serve (`unservable(f, i)` for the `i`-th) above `servable`,
/// eight clients in turn, each naming `witness` (active while they are placed, paused after);
/// measures the allocation of `servable` onto `gpus` at each of [`DEPTHS`]; prints the table
/// and checks the bounds of issues 14 and 30: every depth inside the 1.4M compute units of a
/// transaction, in a transaction of one size within a packet, with no evidence.
pub(crate) fn allocate_below_unservable_bids(
    f: &mut Fixture,
    variant: &str,
    servable: Pubkey,
    gpus: &[u8],
    witness: &Witness,
    unservable: impl Fn(&mut Fixture, usize) -> PlaceBidArgs,
) -> Vec<u64> {
    allocate_below(f, variant, servable, gpus, witness, &DEPTHS, unservable)
}

/// [`allocate_below_unservable_bids`] at `depths` (the book is full when the last is 4,095).
pub(crate) fn allocate_below(
    f: &mut Fixture,
    variant: &str,
    servable: Pubkey,
    gpus: &[u8],
    witness: &Witness,
    depths: &[usize],
    unservable: impl Fn(&mut Fixture, usize) -> PlaceBidArgs,
) -> Vec<u64> {
    // Staked clients: every bid of theirs ranks above the servable one, placed by a client
    // without stake.
    let clients: Vec<Client> = (1..=8)
        .map(|i| f.client(40_000 * TOKEN, i * TOKEN))
        .collect();
    let mut measured = Vec::new();
    let mut placed = 0;
    f.set_witness(witness, MachineStatus::Paused);
    for &depth in depths {
        f.set_witness(witness, MachineStatus::Active);
        while placed < depth {
            let args = unservable(f, placed);
            f.place_via(&clients[placed % clients.len()], args, witness.machine);
            placed += 1;
        }
        f.set_witness(witness, MachineStatus::Paused);
        measured.push(measure(f, servable, gpus));
    }
    eprintln!(
        "allocate below {variant} (bump of the lease's address: {}):",
        pda::lease(&servable).1
    );
    eprintln!("| entries above | compute units | transaction bytes |");
    eprintln!("|---|---|---|");
    for m in &measured {
        let units = match &m.units {
            Ok(u) => u.to_string(),
            Err(e) => format!("failed: {e}"),
        };
        eprintln!("| {} | {units} | {} |", m.above, m.bytes);
    }
    assert_eq!(
        measured.iter().map(|m| m.above).collect::<Vec<_>>(),
        depths.to_vec()
    );
    assert_eq!(
        book_order(&f.ctx, &f.queue_book).len(),
        depths.last().unwrap() + 1
    );
    for m in &measured {
        assert!(m.bytes <= MAX_TRANSACTION_BYTES, "{} bytes", m.bytes);
        assert_eq!(
            m.bytes, measured[0].bytes,
            "the transaction does not grow with the book"
        );
    }
    measured
        .into_iter()
        .map(|m| {
            let units = m
                .units
                .unwrap_or_else(|e| panic!("allocate below {} entries: {e}", m.above));
            assert!(
                units < MAX_COMPUTE_UNITS as u64,
                "{} above: {units} CU",
                m.above
            );
            units
        })
        .collect()
}
