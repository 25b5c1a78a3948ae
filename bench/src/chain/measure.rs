//! The program's instructions as the market's parties send them, run on the program's SBF build
//! in LiteSVM (the tests' harness, `gpu_market_tests::program_test`), and priced by the leader's
//! cost model (`solana-cost-model`, the agave release LiteSVM runs).
//!
//! Each transaction is built as its sender builds it: paid by that party (the agent for
//! `allocate`, proofs, `claim_pay`, `heartbeat` and `end_lease`; the client for its bids), with
//! the compute budget `sdk::budget::sized` gives it from a simulation.

use std::collections::HashSet;

use agave_feature_set::FeatureSet;
use gpu_market::instructions::{PlaceBidArgs, UsageProofArgs};
use gpu_market::state::{GpuSpec, MachineStatus};
use gpu_market_sdk::budget;
use gpu_market_sdk::{WalkBook, WALK_ENTRIES};
use gpu_market_tests::lease_fixture::{fixture, gpus, Fixture, Wallet, INTERVAL, TOKEN};
use gpu_market_tests::program_test::{per_gpu, witness_terms};
use gpu_market_tests::program_test::{
    CancelBid, ClaimPay, ClientInstruction, CloseLease, Heartbeat, PlaceBid, SubmitUsage,
    TestContext,
};
use gpu_market_tests::svm_rpc::loaded_bytes;
use solana_cost_model::cost_model::CostModel;
use solana_instruction::Instruction;
use solana_keypair::Keypair;
use solana_message::SimpleAddressLoader;
use solana_pubkey::Pubkey;
use solana_runtime_transaction::runtime_transaction::RuntimeTransaction;
use solana_signer::Signer;
use solana_transaction::sanitized::{MessageHash, SanitizedTransaction};
use solana_transaction::versioned::VersionedTransaction;
use solana_transaction::Transaction;

/// The market-wide accounts a transaction may write: every other account it writes belongs to
/// one machine, lease, bid or party, and is written by that one's transactions alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Shared {
    Market,
    QueueBook,
    PaymentVault,
    StakeVault,
}

impl Shared {
    pub const ALL: [Shared; 4] = [
        Shared::Market,
        Shared::QueueBook,
        Shared::PaymentVault,
        Shared::StakeVault,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Shared::Market => "market",
            Shared::QueueBook => "queue book",
            Shared::PaymentVault => "payment vault",
            Shared::StakeVault => "stake vault",
        }
    }
}

/// One transaction as sent, run and priced.
#[derive(Clone, Debug)]
pub struct Sample {
    /// Compute units the transaction used (all its instructions).
    pub units: u64,
    /// The cost the leader reserves of its block, and of each account the transaction writes,
    /// while packing it: from the compute-unit limit asked (`CostModel::calculate_cost`).
    pub reserved: u64,
    /// The cost the block is charged once the transaction ran: from the units used and the
    /// account data loaded (`CostModel::calculate_cost_for_executed_transaction`).
    pub charged: u64,
    pub bytes: usize,
    /// Accounts the transaction locks (read or write).
    pub locks: usize,
    /// The market-wide accounts it writes.
    pub shared: Vec<Shared>,
    /// Accounts it writes in all.
    pub writes: usize,
}

impl Sample {
    pub fn writes_shared(&self, s: Shared) -> bool {
        self.shared.contains(&s)
    }
}

/// The measured instructions the load model composes.
pub struct Costs {
    pub place_bid: Sample,
    pub allocate: Sample,
    /// `submit_usage` of a machine's round: 1, 2, 4 and 8 leases, two intervals each.
    pub rounds: [Sample; 4],
    pub heartbeat: Sample,
    pub claim_pay: Sample,
    pub end_lease: Sample,
    pub cancel_bid: Sample,
    /// A queue bid placed into a book of 4,095 entries above it.
    pub place_deep: Sample,
    /// The agent's walk of a book an attacker keeps full of the 4,095 entries that cost a busy
    /// 8-GPU machine most to turn away (`walk_book`, `WALK_ENTRIES` a transaction): writes the
    /// machine alone.
    pub walk_deep: Vec<Sample>,
    /// `allocate` below those 4,095 entries once the walk covers them.
    pub allocate_deep: Sample,
    /// A queue bid placed into a full book, evicting its lowest-ranked entry.
    pub place_evicting: Sample,
    /// GPUs the attacker's 4,095 entries ask in all: what its holding charge is paid for.
    pub attacker_gpus: u64,
}

impl Costs {
    /// Leases in each of [`Costs::rounds`].
    pub const ROUND_LEASES: [usize; 4] = [1, 2, 4, 8];

    pub fn all(&self) -> Vec<&Sample> {
        let mut v = vec![&self.place_bid, &self.allocate];
        v.extend(self.rounds.iter());
        v.extend([
            &self.heartbeat,
            &self.claim_pay,
            &self.end_lease,
            &self.cancel_bid,
            &self.place_deep,
        ]);
        v.extend(self.walk_deep.iter());
        v.extend([&self.allocate_deep, &self.place_evicting]);
        v
    }

    /// The round of a machine with `leases` leases: the measured round of that many leases, or
    /// the next larger one measured.
    pub fn round(&self, leases: usize) -> &Sample {
        let i = Self::ROUND_LEASES
            .iter()
            .position(|&n| n >= leases)
            .unwrap_or(Self::ROUND_LEASES.len() - 1);
        &self.rounds[i]
    }
}

/// Sends transactions as their senders do, and prices them.
struct Meter {
    features: FeatureSet,
    shared: Vec<(Pubkey, Shared)>,
}

impl Meter {
    /// `c` in a transaction paid by `payer`, with the compute budget a simulation finds it to
    /// need (`sdk::budget::sized`), as the agent and the CLI send every transaction.
    fn send<C: ClientInstruction>(
        &self,
        ctx: &mut TestContext,
        name: &'static str,
        payer: &Keypair,
        c: &C,
    ) -> Result<Sample, String> {
        let mut signers = c.signers();
        signers.retain(|s| s.pubkey() != payer.pubkey());
        signers.insert(0, payer);
        let ix = [c.instruction()];
        let build = |ixs: &[Instruction]| {
            Transaction::new_signed_with_payer(
                ixs,
                Some(&payer.pubkey()),
                &signers,
                ctx.svm.latest_blockhash(),
            )
        };
        let probe = build(&budget::probe(&ix));
        // LiteSVM does not report the account data a transaction loads: counted as the
        // in-process node counts it for its simulations.
        let loaded = loaded_bytes(&ctx.svm, &probe.message.account_keys);
        let used = ctx
            .svm
            .simulate_transaction(probe)
            .map_err(|e| format!("{name}: simulation failed: {:?}", e.err))?
            .meta
            .compute_units_consumed;
        let tx = build(&budget::sized(used, Some(loaded), &ix));
        let bytes = bincode::serialize(&tx).map_err(|e| e.to_string())?.len();
        let locks = tx.message.account_keys.len();
        let meta = ctx
            .send_transaction(tx.clone())
            .map_err(|e| format!("{name}: {:?} {:?}", e.err, e.logs))?;
        let rtx = RuntimeTransaction::<SanitizedTransaction>::try_create(
            VersionedTransaction::from(tx),
            MessageHash::Compute,
            None,
            SimpleAddressLoader::Disabled,
            &HashSet::new(),
            true,
        )
        .map_err(|e| format!("{name}: {e}"))?;
        let cost = CostModel::calculate_cost(&rtx, &self.features);
        let reserved = cost.sum();
        let written: Vec<Pubkey> = cost.writable_accounts().copied().collect();
        let charged = CostModel::calculate_cost_for_executed_transaction(
            &rtx,
            meta.compute_units_consumed,
            loaded,
            &self.features,
        )
        .sum();
        let mut shared: Vec<Shared> = self
            .shared
            .iter()
            .filter(|(k, _)| written.contains(k))
            .map(|(_, s)| *s)
            .collect();
        shared.sort();
        Ok(Sample {
            units: meta.compute_units_consumed,
            reserved,
            charged,
            bytes,
            locks,
            shared,
            writes: written.len(),
        })
    }
}

/// Eight class-0 GPUs in two topology groups: the machine the market's load is made of.
fn eight_gpus() -> Vec<GpuSpec> {
    (0..8u8)
        .map(|i| {
            let mut g = gpus()[0];
            g.uuid = [0x40 + i; 16];
            g.topology_group = i / 4;
            g
        })
        .collect()
}

/// The proof of two intervals from `interval` of a 1-GPU lease, as the agent's round sends it.
fn two_intervals(f: &Fixture, lease: &Pubkey, interval: u32) -> UsageProofArgs {
    let one = f.proof(lease, interval);
    UsageProofArgs {
        intervals: 2,
        gpu_seconds: 2 * one.gpu_seconds,
        energy_j: 2 * one.energy_j,
        ..one
    }
}

/// A 1-GPU queue bid the 8-GPU machine serves.
fn servable(f: &mut Fixture) -> PlaceBidArgs {
    f.queue_args(1, 8)
}

/// The entry that costs `allocate` most to turn away on the busy 8-GPU machine (see
/// [`measure`]): four GPUs × 8 GiB, three at 150 W and one at 160 W.
fn costliest(f: &mut Fixture) -> PlaceBidArgs {
    PlaceBidArgs {
        overclock: per_gpu(&[150, 150, 150, 160]),
        ..f.queue_args(4, 8)
    }
}

/// Runs every instruction of the load model on the SBF build and prices it.
pub fn measure() -> Result<Costs, String> {
    let mut f = fixture();
    let agent = f.agent.insecure_clone();
    let machine = f.other_machine(1, |t| {
        t.agent = agent.pubkey();
        t.gpus = eight_gpus();
    });
    let meter = Meter {
        features: FeatureSet::all_enabled(),
        shared: vec![
            (f.market, Shared::Market),
            (f.queue_book, Shared::QueueBook),
            (
                gpu_market::pda::payment_vault(&f.market).0,
                Shared::PaymentVault,
            ),
            (
                gpu_market::pda::stake_vault(&f.market).0,
                Shared::StakeVault,
            ),
        ],
    };

    // Eight 1-GPU leases on the 8-GPU machine: the first placement and allocation measured.
    let mut first = None;
    let mut leases = Vec::new();
    let mut clients = Vec::new();
    for g in 0..8u8 {
        let c = f.client(100 * TOKEN, 0);
        let args = servable(&mut f);
        let p = f.placement_via(&c, args, machine);
        let placed = meter.send(&mut f.ctx, "place_bid", &c.key, &p)?;
        let a = f.ctx.allocation(&agent, machine, p.bid(), &[g]);
        let allocated = meter.send(&mut f.ctx, "allocate", &agent, &a)?;
        first.get_or_insert((placed, allocated));
        leases.push(a.lease());
        clients.push(c);
    }
    let (place_bid, allocate) = first.expect("eight placements");

    // The agent's rounds: one transaction proving two intervals of each of the machine's leases.
    f.ctx.advance_time(2 * INTERVAL);
    let before = f.ctx.fork();
    let mut rounds = Vec::new();
    for n in Costs::ROUND_LEASES {
        f.ctx = before.fork();
        let s = SubmitUsage {
            agent: &agent,
            market: f.market,
            machine,
            proofs: leases[..n]
                .iter()
                .map(|l| (*l, two_intervals(&f, l, 0)))
                .collect(),
        };
        rounds.push(meter.send(&mut f.ctx, "submit_usage", &agent, &s)?);
    }
    let rounds: [Sample; 4] = rounds.try_into().map_err(|_| "four rounds")?;

    let hb = Heartbeat {
        agent: &agent,
        machine,
    };
    let heartbeat = meter.send(&mut f.ctx, "heartbeat", &agent, &hb)?;
    let claim = ClaimPay {
        market: f.market,
        machine,
        payment_mint: f.mint,
        host_tokens: f.host.tokens,
    };
    let claim_pay = meter.send(&mut f.ctx, "claim_pay", &agent, &claim)?;
    let lease = f.ctx.account(&leases[0]);
    let m = f.ctx.account(&machine);
    let end = CloseLease::of(
        &agent,
        (leases[0], &lease),
        &m,
        &f.ctx.account(&f.market),
        Some(clients[0].tokens),
        false,
    );
    let end_lease = meter.send(&mut f.ctx, "end_lease", &agent, &end)?;

    let c = f.client(100 * TOKEN, 0);
    let args = servable(&mut f);
    let p = f.placement_via(&c, args, machine);
    f.ctx
        .run(&p)
        .map_err(|e| format!("place_bid: {:?}", e.err))?;
    let cancel = CancelBid {
        client: &c.key,
        market: f.market,
        bid: p.bid(),
        book: f.queue_book,
        payment_mint: f.mint,
        client_tokens: c.tokens,
    };
    let cancel_bid = meter.send(&mut f.ctx, "cancel_bid", &c.key, &cancel)?;

    // An attacker's book: 4,095 bids ranked above every honest bid by their stake, each of the
    // shape that costs `allocate` most to turn away on a busy 8-GPU machine (each of its GPUs runs
    // a 1-GPU lease at its own power limit, 150 W on GPU 0 and 10 W more on each next): four GPUs,
    // three at 150 W and one at 160 W. It passes every whole-machine bound and only the exact
    // rule turns it away (each of its term sets is run by one GPU alone). They name the
    // attacker's own machine at placement, paused once they are in.
    let target = f.other_machine(2, |t| {
        t.agent = agent.pubkey();
        t.gpus = eight_gpus();
    });
    for g in 0..8u8 {
        let c = f.client(100 * TOKEN, 0);
        let args = PlaceBidArgs {
            overclock: per_gpu(&[150 + 10 * g as u16]),
            ..f.queue_args(1, 8)
        };
        let bid = f.place_via(&c, args, target);
        let a = f.ctx.allocation(&agent, target, bid, &[g]);
        f.ctx
            .allocate(&a)
            .map_err(|e| format!("allocate: {:?}", e.err))?;
    }
    let host = f.host.key.insecure_clone();
    let witness =
        f.ctx
            .register_machine(&host, f.market, 98, witness_terms(agent.pubkey(), [0; 16]));
    let rich: Vec<Wallet> = (1..=8)
        .map(|i| f.client(40_000 * TOKEN, 100 * i * TOKEN))
        .collect();
    let capacity = gpu_market::state::BOOK_CAPACITY;
    let mut attacker_gpus = 0;
    for i in 0..capacity - 1 {
        let args = costliest(&mut f);
        attacker_gpus += args.gpu_count as u64;
        f.place_via(&rich[i % rich.len()], args, witness);
    }
    f.set_status(witness, MachineStatus::Paused);
    let c = f.client(100 * TOKEN, 0);
    // GPU 7 runs 220 W already.
    let args = PlaceBidArgs {
        overclock: per_gpu(&[220]),
        ..f.queue_args(1, 8)
    };
    let p = f.placement_via(&c, args, target);
    let place_deep = meter.send(&mut f.ctx, "place_bid", &c.key, &p)?;
    let a = f.ctx.allocation(&agent, target, p.bid(), &[7]);
    // Judging 4,095 such entries is more than a transaction's units: the agent walks the book
    // first (`walk_book`, `WALK_ENTRIES` a transaction), then allocates.
    if meter.send(&mut f.ctx, "allocate", &agent, &a).is_ok() {
        return Err("allocate below 4,095 of the costliest entries fit one transaction".into());
    }
    let mut walk_deep = Vec::new();
    for _ in 0..(capacity - 1).div_ceil(WALK_ENTRIES as usize) {
        let w = WalkBook {
            agent: &agent,
            market: f.market,
            machine: target,
            book: f.queue_book,
            entries: WALK_ENTRIES,
        };
        walk_deep.push(meter.send(&mut f.ctx, "walk_book", &agent, &w)?);
    }
    let a = f.ctx.allocation(&agent, target, p.bid(), &[7]);
    let allocate_deep = meter.send(&mut f.ctx, "allocate", &agent, &a)?;
    f.set_status(witness, MachineStatus::Active);
    let args = costliest(&mut f);
    f.place_via(&rich[1], args, witness);
    let args = costliest(&mut f);
    let p = PlaceBid {
        evict: f.ctx.eviction(&f.queue_book),
        ..f.placement_via(&rich[7], args, witness)
    };
    let place_evicting = meter.send(&mut f.ctx, "place_bid", &rich[7].key, &p)?;

    Ok(Costs {
        place_bid,
        allocate,
        rounds,
        heartbeat,
        claim_pay,
        end_lease,
        cancel_bid,
        place_deep,
        walk_deep,
        allocate_deep,
        place_evicting,
        attacker_gpus,
    })
}
