//! A test harness in the shape of OpenBook's `program_test`: a context that owns a LiteSVM with
//! the program's real SBF build and the real SPL Token program, creates mints, funded wallets and
//! token accounts, and sends one client struct per instruction (see `client.rs`).

#![allow(dead_code)] // each test binary uses a different part of the harness

use std::collections::BTreeMap;
use std::path::PathBuf;

use gpu_market_sdk::token;
use litesvm::types::{FailedTransactionMetadata, TransactionMetadata};
use litesvm::LiteSVM;
use solana_instruction::Instruction;
use solana_keypair::Keypair;
use solana_pubkey::Pubkey;
use solana_signer::Signer;
use solana_transaction::Transaction;

pub use gpu_market_tests::client::*;

pub const SOL: u64 = 1_000_000_000;

/// The SBF build of the program, made by `scripts/build-sbf.sh`.
pub fn program_so() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let so = root.join("target/deploy/gpu_market.so");
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

    /// A new wallet with `sol` SOL for fees and rent.
    pub fn wallet(&mut self, sol: u64) -> Keypair {
        let mut seed = [0u8; 32];
        seed[..8].copy_from_slice(&self.next_wallet.to_le_bytes());
        self.next_wallet += 1;
        let k = Keypair::new_from_array(seed);
        self.svm.airdrop(&k.pubkey(), sol * SOL).unwrap();
        k
    }

    /// Sends `ixs` in one transaction paid by the context's payer and signed by `signers`.
    pub fn send(
        &mut self,
        ixs: &[Instruction],
        signers: &[&Keypair],
    ) -> Result<TransactionMetadata, Failure> {
        let mut all: Vec<&Keypair> = vec![&self.payer];
        all.extend(
            signers
                .iter()
                .copied()
                .filter(|s| s.pubkey() != self.payer.pubkey()),
        );
        let tx = Transaction::new_signed_with_payer(
            ixs,
            Some(&self.payer.pubkey()),
            &all,
            self.svm.latest_blockhash(),
        );
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
            args: gpu_market::instructions::InitMarketArgs { id, params },
        };
        let market = init.market();
        self.run(&init).expect("init_market");
        (authority, mint, market)
    }

    /// Creates a book account and opens it as `market`'s queue book; returns its address.
    pub fn open_queue_book(&mut self, authority: &Keypair, market: Pubkey) -> Pubkey {
        let book = Keypair::new();
        let space = gpu_market::state::BID_BOOK_SPACE;
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

    /// Moves the cluster clock forward by `secs` seconds.
    pub fn advance_time(&mut self, secs: i64) {
        let mut clock: solana_clock::Clock = self.svm.get_sysvar();
        clock.unix_timestamp += secs;
        self.svm.set_sysvar(&clock);
    }

    pub fn now(&self) -> i64 {
        self.svm.get_sysvar::<solana_clock::Clock>().unix_timestamp
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

    /// An Anchor account of the program, deserialised (discriminator checked).
    pub fn account<T: anchor_lang::AccountDeserialize>(&self, address: &Pubkey) -> T {
        let acc = self.svm.get_account(address).expect("account exists");
        T::try_deserialize(&mut acc.data.as_slice()).expect("deserialise account")
    }

    pub fn account_exists(&self, address: &Pubkey) -> bool {
        self.svm
            .get_account(address)
            .is_some_and(|a| a.lamports > 0)
    }
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
