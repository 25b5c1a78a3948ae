//! A test harness in the shape of OpenBook's `program_test`: a context that owns a LiteSVM with
//! the program's real SBF build and the real SPL Token program, creates mints, funded wallets and
//! token accounts, and sends one client struct per instruction (see `client.rs`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use gpu_market::state::{
    Bid, BidKind, Freed, GpuSpec, Machine, MachineNetwork, MachineTerms, Market, MarketParams,
    Offers, OverclockTerms, StakeAccount, REGION_LEN,
};
use gpu_market_core::fit::Unfit;
use gpu_market_sdk::book::read_book;
use litesvm::types::{FailedTransactionMetadata, TransactionMetadata};
use litesvm::LiteSVM;
use solana_compute_budget_interface::ComputeBudgetInstruction;
use solana_instruction::Instruction;
use solana_keypair::Keypair;
use solana_pubkey::Pubkey;
use solana_signer::Signer;
use solana_transaction::Transaction;

pub use crate::client::*;

pub const SOL: u64 = 1_000_000_000;
/// The most compute units one transaction may ask for; the agent asks for up to this much for
/// `allocate`, which walks the book above the chosen bid.
pub use gpu_market_sdk::budget::MAX_COMPUTE_UNITS;
/// The most bytes a transaction may take on the wire (a packet).
pub const MAX_TRANSACTION_BYTES: usize = 1_232;

/// The SBF build of the program, made by `scripts/build-sbf.sh`.
pub fn program_so() -> PathBuf {
    let so = crate::program_so();
    assert!(
        so.exists(),
        "{} is missing: run scripts/build-sbf.sh first (the README's test command does)",
        so.display()
    );
    so
}

/// A failed transaction: the program's error code (if it failed with a custom error) and logs.
#[derive(Debug)]
pub struct Failure {
    pub err: solana_transaction_error::TransactionError,
    pub logs: Vec<String>,
}

impl Failure {
    /// The custom error code the program returned, as Anchor numbers them.
    pub fn custom_code(&self) -> Option<u32> {
        use solana_instruction_error::InstructionError;
        use solana_transaction_error::TransactionError;
        match &self.err {
            TransactionError::InstructionError(_, InstructionError::Custom(c)) => Some(*c),
            _ => None,
        }
    }
}

pub struct TestContext {
    pub svm: LiteSVM,
    pub payer: Keypair,
    /// Seed of the next wallet: wallets are deterministic so that PDAs, and with them the
    /// compute units of instructions that derive them, are the same on every run.
    next_wallet: u64,
    /// Compute units of the last successful run of each instruction, by instruction name.
    pub compute_units: BTreeMap<&'static str, u64>,
}

impl Default for TestContext {
    fn default() -> Self {
        Self::new()
    }
}

impl TestContext {
    pub fn new() -> Self {
        let mut svm = LiteSVM::new();
        svm.add_program_from_file(gpu_market::ID, program_so())
            .expect("load the SBF program into LiteSVM");
        let payer = Keypair::new_from_array([0xFE; 32]);
        svm.airdrop(&payer.pubkey(), 1_000 * SOL).unwrap();
        TestContext {
            svm,
            payer,
            next_wallet: 1,
            compute_units: BTreeMap::new(),
        }
    }

    /// A copy of this context: the same chain, payer and wallet seeds, to run from one state
    /// several times.
    pub fn fork(&self) -> TestContext {
        TestContext {
            svm: self.svm.clone(),
            payer: self.payer.insecure_clone(),
            next_wallet: self.next_wallet,
            compute_units: self.compute_units.clone(),
        }
    }

    /// A new wallet with `sol` SOL for fees and rent.
    pub fn wallet(&mut self, sol: u64) -> Keypair {
        let mut seed = [0u8; 32];
        seed[..8].copy_from_slice(&self.next_wallet.to_le_bytes());
        self.next_wallet += 1;
        let k = Keypair::new_from_array(seed);
        self.svm.airdrop(&k.pubkey(), sol * SOL).unwrap();
        k
    }

    /// `ixs` in one transaction paid by the context's payer and signed by `signers`.
    pub fn transaction(&self, ixs: &[Instruction], signers: &[&dyn Signer]) -> Transaction {
        let mut all: Vec<&dyn Signer> = vec![&self.payer];
        all.extend(
            signers
                .iter()
                .copied()
                .filter(|s| s.pubkey() != self.payer.pubkey()),
        );
        Transaction::new_signed_with_payer(
            ixs,
            Some(&self.payer.pubkey()),
            &all,
            self.svm.latest_blockhash(),
        )
    }

    /// Sends `ixs` in one transaction paid by the context's payer and signed by `signers`.
    pub fn send(
        &mut self,
        ixs: &[Instruction],
        signers: &[&dyn Signer],
    ) -> Result<TransactionMetadata, Failure> {
        let tx = self.transaction(ixs, signers);
        self.send_transaction(tx)
    }

    /// Sends a signed transaction.
    pub fn send_transaction(&mut self, tx: Transaction) -> Result<TransactionMetadata, Failure> {
        let res = self.svm.send_transaction(tx);
        // A fresh blockhash each time, so identical transactions are not rejected as duplicates.
        self.svm.expire_blockhash();
        res.map_err(|FailedTransactionMetadata { err, meta }| Failure {
            err,
            logs: meta.logs,
        })
    }

    /// Sends one client instruction and records its compute units.
    pub fn run<C: ClientInstruction>(&mut self, c: &C) -> Result<TransactionMetadata, Failure> {
        let ix = c.instruction();
        let signers = c.signers();
        let meta = self.send(&[ix], &signers)?;
        self.compute_units
            .insert(C::NAME, meta.compute_units_consumed);
        Ok(meta)
    }

    /// `bid`, `machine`, its market and the machine's offer to the bid now, as the program builds
    /// it in `allocate`.
    fn offer_to(&self, machine: &Pubkey, bid: &Pubkey) -> (Bid, Machine, Market, Offers) {
        let b: Bid = self.account(bid);
        let m: Machine = self.account(machine);
        let market: Market = self.account(&m.market);
        let offers = m
            .offers(&market, b.kind, self.now(), &Freed::default())
            .expect("the machine's offers");
        (b, m, market, offers)
    }

    /// The `allocate` an agent sends to start `bid` on `machine`'s `gpus`: its evidence is what
    /// the sdk reads off the book for the machine's offer and its walk of the book
    /// (`BookEntries::allocate_evidence_walked`).
    pub fn allocation<'a>(
        &self,
        agent: &'a Keypair,
        machine: Pubkey,
        bid: Pubkey,
        gpus: &[u8],
    ) -> Allocate<'a> {
        let (b, m, market, offers) = self.offer_to(&machine, &bid);
        let book = match b.kind {
            BidKind::Queue => market.queue_book,
            BidKind::Spot => m.spot_book,
        };
        let stake: StakeAccount = self.account(&gpu_market::pda::stake(&m.market, &b.client).0);
        let within_cap = b.kind == BidKind::Spot
            || market.within_client_cap(stake.gpus_held as u64, b.gpu_count as u64, self.now());
        let evidence = read_book(&self.svm.get_account(&book).expect("the book").data)
            .expect("an initialised book")
            .allocate_evidence_walked(
                &book,
                &bid,
                std::slice::from_ref(&offers),
                within_cap,
                &[&m.walk],
            );
        Allocate {
            agent,
            market: m.market,
            machine,
            book,
            bid,
            client: b.client,
            gpus: gpus.to_vec(),
            evidence,
        }
    }

    /// The `allocate_gang` an agent sends to start gang bid `bid` on `machines` (one part each,
    /// in order), on the GPUs the fit rule gives each part there; its evidence is what the sdk
    /// reads off the book for the machines' offers and their walks of the book.
    pub fn gang_allocation<'a>(
        &self,
        agent: &'a Keypair,
        bid: Pubkey,
        machines: &[Pubkey],
    ) -> AllocateGang<'a> {
        let mut offers = Vec::with_capacity(machines.len());
        let mut parts = Vec::with_capacity(machines.len());
        let mut walks = Vec::with_capacity(machines.len());
        let (mut b, mut market) = (None, None);
        for machine in machines {
            let (bb, m, mm, o) = self.offer_to(machine, &bid);
            let gpus = bb
                .fit(o.for_run(&bid, bb.runs_until(self.now())))
                .map_or_else(|_| vec![0; bb.gpu_count as usize], |c| c.gpus().to_vec());
            parts.push((*machine, gpus));
            offers.push(o);
            walks.push(m.walk);
            (b, market) = (Some(bb), Some(mm));
        }
        let (b, market) = (b.expect("a machine"), market.expect("a machine"));
        let stake: StakeAccount = self.account(&gpu_market::pda::stake(&b.market, &b.client).0);
        let within_cap =
            market.within_client_cap(stake.gpus_held as u64, b.total_gpus(), self.now());
        let evidence = read_book(
            &self
                .svm
                .get_account(&market.queue_book)
                .expect("the book")
                .data,
        )
        .expect("an initialised book")
        .allocate_evidence_walked(
            &market.queue_book,
            &bid,
            &offers,
            within_cap,
            &walks.iter().collect::<Vec<_>>(),
        );
        AllocateGang {
            agent,
            market: b.market,
            book: market.queue_book,
            bid,
            client: b.client,
            parts,
            evidence,
        }
    }

    /// The GPUs of `machine` the fit rule gives `bid` now (as the agent chooses them), or why
    /// it does not fit.
    pub fn choose(&self, machine: &Pubkey, bid: &Pubkey) -> Result<Vec<u8>, Unfit> {
        let (b, _, _, offers) = self.offer_to(machine, bid);
        let offer = offers.for_run(bid, b.runs_until(self.now()));
        b.fit(offer).map(|c| c.gpus().to_vec())
    }

    /// What a refused instruction must leave as it was: see [`Ledger`].
    pub fn ledger(&self, market: &Pubkey, book: &Pubkey, clients: &[(&Keypair, Pubkey)]) -> Ledger {
        let m: Market = self.account(market);
        Ledger {
            vault: self.token_balance(&gpu_market::pda::payment_vault(market).0),
            stake_vault: self.token_balance(&gpu_market::pda::stake_vault(market).0),
            total_escrow: m.total_escrow,
            fees_due: m.fees_due,
            burn_due: m.burn_due,
            slashed_due: m.slashed_due,
            refunds_due: m.refunds_due,
            total_staked: m.total_staked,
            gpus_waiting: m.gpus_waiting,
            book_len: book_order(self, book).len(),
            clients: clients
                .iter()
                .map(|(key, tokens)| {
                    let stake: StakeAccount =
                        self.account(&gpu_market::pda::stake(market, &key.pubkey()).0);
                    ClientLedger {
                        tokens: self.token_balance(tokens),
                        lamports: self.svm.get_balance(&key.pubkey()).unwrap_or(0),
                        stake: stake.amount,
                        open_bids: stake.open_bids,
                        gpus_held: stake.gpus_held,
                        refunds_due: stake.refunds_due,
                    }
                })
                .collect(),
        }
    }

    /// Sends `allocate` as the agent does, asking for the compute units it may need; records the
    /// compute units of the instruction itself (not the compute budget's) like
    /// [`TestContext::run`].
    pub fn allocate(&mut self, a: &Allocate) -> Result<TransactionMetadata, Failure> {
        let tx = self.transaction(&allocate_instructions(a), &a.signers());
        let meta = self.send_transaction(tx)?;
        self.compute_units
            .insert(Allocate::NAME, program_units(&meta.logs));
        Ok(meta)
    }

    /// Sends `allocate_gang` as the agent does, with [`TestContext::allocate`]'s budget; records
    /// its compute units.
    pub fn allocate_gang(&mut self, a: &AllocateGang) -> Result<TransactionMetadata, Failure> {
        let tx = self.transaction(&allocate_instructions(a), &a.signers());
        let meta = self.send_transaction(tx)?;
        self.compute_units
            .insert(AllocateGang::NAME, program_units(&meta.logs));
        Ok(meta)
    }

    /// The entry a bid placed now in `book` evicts when the book is full: its lowest-ranked
    /// entry (what the sdk finds for a bid that outranks every entry), with its client and the
    /// token account its escrow came from. `None` while the book has room. The program refuses
    /// the bid unless it outranks that entry.
    pub fn eviction(&self, book: &Pubkey) -> Option<Evict> {
        let entries = read_book(&self.svm.get_account(book)?.data)?;
        let worst = entries.eviction(u64::MAX, 0)?;
        let bid: Bid = self.account(&worst.bid);
        Some(Evict {
            bid: worst.bid,
            client: bid.client,
            tokens: Some(bid.refund_tokens),
        })
    }

    /// A market whose stake and payment token is one new mint (6 decimals), its treasury owned
    /// by a new authority. Returns the authority, the mint and the market.
    pub fn create_market(
        &mut self,
        id: u64,
        params: gpu_market::state::MarketParams,
    ) -> (Keypair, Pubkey, Pubkey) {
        let authority = self.wallet(10);
        let mint = self.create_mint(6);
        let treasury = self.create_token_account(&mint, &authority.pubkey());
        let stake_treasury = self.create_token_account(&mint, &authority.pubkey());
        let init = InitMarket {
            authority: &authority,
            stake_mint: mint,
            payment_mint: mint,
            treasury,
            stake_treasury,
            id,
            params,
        };
        let market = init.market();
        self.run(&init).expect("init_market");
        (authority, mint, market)
    }

    /// Creates a book account and opens it as `market`'s queue book; returns its address.
    pub fn open_queue_book(&mut self, authority: &Keypair, market: Pubkey) -> Pubkey {
        let book = Keypair::new();
        let space = gpu_market::state::BOOK_EMPTY_SPACE;
        let rent = self.svm.minimum_balance_for_rent_exemption(space);
        let ixs = open_book_instructions(
            &self.payer.pubkey(),
            &book.pubkey(),
            rent,
            init_queue_book(&authority.pubkey(), &market, &book.pubkey()),
        );
        self.send(&ixs, &[authority, &book])
            .expect("init_queue_book");
        book.pubkey()
    }

    /// The rent of one entry's slot in a book, which its bid pays while it waits and gets back
    /// when it leaves: what the rent-exempt minimum grows by per slot.
    pub fn slot_rent(&self) -> u64 {
        use gpu_market::state::{book_space, BOOK_EMPTY_SPACE};
        self.svm.minimum_balance_for_rent_exemption(book_space(1))
            - self
                .svm
                .minimum_balance_for_rent_exemption(BOOK_EMPTY_SPACE)
    }

    /// Moves the cluster clock forward by `secs` seconds.
    pub fn advance_time(&mut self, secs: i64) {
        let mut clock: solana_clock::Clock = self.svm.get_sysvar();
        clock.unix_timestamp += secs;
        self.svm.set_sysvar(&clock);
    }

    pub fn now(&self) -> i64 {
        self.svm.get_sysvar::<solana_clock::Clock>().unix_timestamp
    }

    /// `authority` changes `market`'s parameters to `params`: `update_market` schedules them,
    /// the notice passes, `apply_market_update` applies them.
    pub fn change_market(&mut self, authority: &Keypair, market: Pubkey, params: MarketParams) {
        let notice = self.account::<Market>(&market).notice_secs();
        self.run(&UpdateMarket {
            authority,
            market,
            params,
        })
        .expect("update_market");
        self.advance_time(notice);
        self.run(&ApplyMarketUpdate {
            signer: authority,
            market,
        })
        .expect("apply_market_update");
    }

    pub fn create_mint(&mut self, decimals: u8) -> Pubkey {
        let mint = Keypair::new();
        let rent = self.svm.minimum_balance_for_rent_exemption(token::MINT_LEN);
        let payer = self.payer.pubkey();
        let ixs = token::create_mint(&payer, &mint.pubkey(), rent, decimals, &payer);
        self.send(&ixs, &[&mint]).expect("create mint");
        mint.pubkey()
    }

    pub fn create_token_account(&mut self, mint: &Pubkey, owner: &Pubkey) -> Pubkey {
        let account = Keypair::new();
        let rent = self
            .svm
            .minimum_balance_for_rent_exemption(token::ACCOUNT_LEN);
        let ixs = token::create_account(&self.payer.pubkey(), &account.pubkey(), rent, mint, owner);
        self.send(&ixs, &[&account]).expect("create token account");
        account.pubkey()
    }

    pub fn mint_to(&mut self, mint: &Pubkey, to: &Pubkey, amount: u64) {
        let ix = token::mint_to(mint, to, &self.payer.pubkey(), amount);
        self.send(&[ix], &[]).expect("mint to");
    }

    /// A funded wallet with a token account of `mint` holding `amount`.
    pub fn funded_user(&mut self, mint: &Pubkey, amount: u64) -> (Keypair, Pubkey) {
        let user = self.wallet(10);
        let tokens = self.create_token_account(mint, &user.pubkey());
        if amount > 0 {
            self.mint_to(mint, &tokens, amount);
        }
        (user, tokens)
    }

    pub fn token_balance(&self, account: &Pubkey) -> u64 {
        let acc = self.svm.get_account(account).expect("token account exists");
        token::balance(&acc.data).expect("a token account")
    }

    pub fn mint_supply(&self, mint: &Pubkey) -> u64 {
        let acc = self.svm.get_account(mint).expect("mint exists");
        token::supply(&acc.data).expect("a mint")
    }

    /// An Anchor account of the program, deserialised (discriminator checked).
    pub fn account<T: anchor_lang::AccountDeserialize>(&self, address: &Pubkey) -> T {
        let acc = self.svm.get_account(address).expect("account exists");
        T::try_deserialize(&mut acc.data.as_slice()).expect("deserialise account")
    }

    /// `owner` (staked enough for one more machine) registers machine `id` of `market` with
    /// `terms`; returns the machine.
    pub fn register_machine(
        &mut self,
        owner: &Keypair,
        market: Pubkey,
        id: u64,
        terms: MachineTerms,
    ) -> Pubkey {
        let r = RegisterMachine {
            owner,
            market,
            id,
            terms,
        };
        self.run(&r)
            .unwrap_or_else(|e| panic!("register_machine: {:?}", e.err));
        r.machine()
    }

    /// Creates a book account and opens it as `machine`'s spot book (signed by its `owner`);
    /// returns its address.
    pub fn open_spot_book(&mut self, owner: &Keypair, machine: &Pubkey) -> Pubkey {
        let book = Keypair::new();
        let rent = self
            .svm
            .minimum_balance_for_rent_exemption(gpu_market::state::BOOK_EMPTY_SPACE);
        let ixs = open_book_instructions(
            &self.payer.pubkey(),
            &book.pubkey(),
            rent,
            init_spot_book(&owner.pubkey(), machine, &book.pubkey()),
        );
        self.send(&ixs, &[owner, &book]).expect("init_spot_book");
        book.pubkey()
    }

    /// A host of its own stakes the market's `min_host_stake` (of `mint`) and registers a
    /// [`witness_terms`] machine in `region`: the machine queue bids of tests about the book
    /// name at placement. Returns its owner and the machine.
    pub fn open_witness(
        &mut self,
        market: Pubkey,
        mint: &Pubkey,
        region: [u8; 16],
    ) -> (Keypair, Pubkey) {
        let agent = self.wallet(1);
        self.open_witness_run_by(market, mint, region, &agent)
    }

    /// [`TestContext::open_witness`] with `agent` as the machine's agent.
    pub fn open_witness_run_by(
        &mut self,
        market: Pubkey,
        mint: &Pubkey,
        region: [u8; 16],
        agent: &Keypair,
    ) -> (Keypair, Pubkey) {
        let m: Market = self.account(&market);
        let bond = m.params.min_host_stake;
        let (host, tokens) = self.funded_user(mint, bond);
        self.run(&OpenStake {
            owner: &host,
            market,
        })
        .expect("open_stake");
        if bond > 0 {
            self.run(&Stake {
                owner: &host,
                market,
                stake_mint: *mint,
                owner_tokens: tokens,
                amount: bond,
            })
            .expect("stake");
        }
        let machine =
            self.register_machine(&host, market, 0, witness_terms(agent.pubkey(), region));
        (host, machine)
    }

    pub fn account_exists(&self, address: &Pubkey) -> bool {
        self.svm
            .get_account(address)
            .is_some_and(|a| a.lamports > 0)
    }
}

/// A market's funds and book, and some of its clients' holdings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ledger {
    /// The payment vault's tokens.
    pub vault: u64,
    pub stake_vault: u64,
    pub total_escrow: u64,
    pub fees_due: u64,
    /// Urgency premiums and holding charges waiting to be burnt.
    pub burn_due: u64,
    pub slashed_due: u64,
    pub refunds_due: u64,
    pub total_staked: u64,
    pub gpus_waiting: u64,
    pub book_len: usize,
    pub clients: Vec<ClientLedger>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientLedger {
    pub tokens: u64,
    pub lamports: u64,
    pub stake: u64,
    pub open_bids: u32,
    pub gpus_held: u32,
    pub refunds_due: u64,
}

/// The region named `label`, as the market lists it.
pub fn region(label: &str) -> [u8; REGION_LEN] {
    let mut r = [0; REGION_LEN];
    r[..label.len()].copy_from_slice(label.as_bytes());
    r
}

/// Per-GPU power limits `watts`: one set of terms a GPU, the rest of each default.
pub fn per_gpu(watts: &[u16]) -> Vec<OverclockTerms> {
    watts
        .iter()
        .map(|&w| OverclockTerms {
            power_limit_w: w,
            ..Default::default()
        })
        .collect()
}

/// Terms of a machine (run by `agent`, in `region`) that every bid shape these tests place fits
/// once idle: a queue bid's witness. 16 GPUs (8 of class 0, 6 of class 1, one each of 6 and 7), 80 GiB each, 50..700 W and wide
/// clocks; 4 ports and 1 TiB of scratch per lease; 256 cores and 1 TiB of memory; no floor.
pub fn witness_terms(agent: Pubkey, region: [u8; 16]) -> MachineTerms {
    MachineTerms {
        agent,
        region,
        gpus: (0..16u8)
            .map(|i| GpuSpec {
                uuid: [0xa0 + i; 16],
                class: match i {
                    0..8 => 0,
                    8..14 => 1,
                    _ => i - 8,
                },
                topology_group: 0,
                memory_gib: 80,
                power_w: [50, 700],
                core_lock_mhz: [100, 3_000],
                mem_lock_mhz: [0, 10_000],
                core_offset_mhz: [-500, 500],
                mem_offset_mhz: [0, 3_000],
            })
            .collect(),
        price_floor_per_gpu_hour: 0,
        electricity_cost_per_kwh: 0,
        network: MachineNetwork {
            host: "witness.example".into(),
            ports_per_lease: 4,
            scratch_gib: 1_024,
            ..Default::default()
        },
        cpu_milli: 256_000,
        memory_mib: 1 << 20,
    }
}

/// `allocate` as the agent sends it: with a compute-unit limit, as deep books need more than
/// the default 200 000 units.
pub fn allocate_instructions(a: &impl ClientInstruction) -> [Instruction; 2] {
    [
        ComputeBudgetInstruction::set_compute_unit_limit(MAX_COMPUTE_UNITS),
        a.instruction(),
    ]
}

/// The compute units the market program consumed, from the runtime's log line
/// `Program <id> consumed <n> of <limit> compute units`.
pub fn program_units(logs: &[String]) -> u64 {
    let prefix = format!("Program {} consumed ", gpu_market::ID);
    logs.iter()
        .find_map(|l| l.strip_prefix(&prefix)?.split(' ').next()?.parse().ok())
        .expect("the program's compute units in the logs")
}

/// Bytes of `tx` on the wire.
pub fn wire_size(tx: &Transaction) -> usize {
    bincode::serialize(tx)
        .expect("a transaction serialises")
        .len()
}

/// The bids of a book, best first.
pub fn book_order(ctx: &TestContext, book: &Pubkey) -> Vec<Pubkey> {
    gpu_market_sdk::book::read_book(&ctx.svm.get_account(book).unwrap().data)
        .expect("an initialised book")
        .entries
        .iter()
        .map(|leaf| leaf.bid)
        .collect()
}
