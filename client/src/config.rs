//! Cluster, keypair and output settings shared by every command.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anchor_lang::{AccountDeserialize, Discriminator};
use anyhow::{anyhow, bail, Result};
use clap::ValueEnum;
use gpu_market_sdk::budget::{self, MAX_COMPUTE_UNITS};
use gpu_market_sdk::instructions::TRANSACTION_SIZE_LIMIT;
use gpu_market_sdk::ClientInstruction;
use solana_account_decoder_client_types::UiAccountEncoding;
use solana_commitment_config::CommitmentConfig;
use solana_instruction::Instruction;
use solana_keypair::Keypair;
use solana_program_pack::Pack;
use solana_pubkey::Pubkey;
use solana_rpc_client::rpc_client::{GetConfirmedSignaturesForAddress2Config, RpcClient};
use solana_rpc_client_api::client_error::Error as ClientError;
use solana_rpc_client_api::client_error::ErrorKind;
use solana_rpc_client_api::config::{
    RpcAccountInfoConfig, RpcProgramAccountsConfig, RpcSimulateTransactionConfig,
    RpcTransactionConfig,
};
use solana_rpc_client_api::filter::{Memcmp, RpcFilterType};
use solana_rpc_client_api::response::RpcSimulateTransactionResult;
use solana_signer::null_signer::NullSigner;
use solana_signer::Signer;
use solana_transaction::Transaction;
use solana_transaction_status_client_types::UiTransactionEncoding;
use spl_token_interface::state::{Account as TokenAccount, Mint};

use crate::output::{print_record, program_message, rpc_error, text, OutputFormat};

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Commitment {
    Processed,
    Confirmed,
    Finalized,
}

pub struct Config {
    pub url: String,
    /// Where the signer comes from, as the Solana CLI takes it: a keypair file, `prompt://`
    /// (a seed phrase typed at the terminal), `stdin://` or `-` (a keypair's JSON on standard
    /// input).
    pub keypair_source: String,
    pub commitment: CommitmentConfig,
    pub output: OutputFormat,
    /// The signer once read: a prompt or standard input is read once per command.
    signer: std::sync::OnceLock<Keypair>,
}

/// `localhost`, `devnet`, `testnet`, `mainnet-beta` or a URL.
pub fn resolve_url(url: &str) -> String {
    match url {
        "localhost" | "l" => "http://127.0.0.1:8899".into(),
        "devnet" | "d" => "https://api.devnet.solana.com".into(),
        "testnet" | "t" => "https://api.testnet.solana.com".into(),
        "mainnet-beta" | "m" => "https://api.mainnet-beta.solana.com".into(),
        other => other.into(),
    }
}

impl Config {
    pub fn new(
        url: &str,
        keypair: Option<&str>,
        commitment: Commitment,
        output: OutputFormat,
    ) -> Result<Self> {
        let keypair_source = keypair.unwrap_or("~/.config/solana/id.json").to_string();
        Ok(Config {
            url: resolve_url(url),
            keypair_source,
            signer: std::sync::OnceLock::new(),
            commitment: match commitment {
                Commitment::Processed => CommitmentConfig::processed(),
                Commitment::Confirmed => CommitmentConfig::confirmed(),
                Commitment::Finalized => CommitmentConfig::finalized(),
            },
            output,
        })
    }

    pub fn rpc(&self) -> RpcClient {
        RpcClient::new_with_commitment(self.url.clone(), self.commitment)
    }

    /// The wallet that signs and pays, read from [`Self::keypair_source`]: a keypair the first
    /// time (a prompt or standard input is read once per command), a hardware wallet each time
    /// (its device is opened again).
    pub fn signer(&self) -> Result<Wallet> {
        if is_hardware(&self.keypair_source) {
            return hardware_wallet(&self.keypair_source);
        }
        if let Some(k) = self.signer.get() {
            return Ok(Wallet::Key(k.insecure_clone()));
        }
        let k = keypair_from_source(&self.keypair_source)?;
        let _ = self.signer.set(k.insecure_clone());
        Ok(Wallet::Key(k))
    }

    /// An account's data; a missing account and an unreachable cluster are told apart.
    pub fn account_data(&self, address: &Pubkey, what: &str) -> Result<Vec<u8>> {
        self.account_data_if_any(address, what)?
            .ok_or_else(|| anyhow!("{what} {address} does not exist on {}", self.url))
    }

    /// An account's data, `None` when there is no account at `address`.
    pub fn account_data_if_any(&self, address: &Pubkey, what: &str) -> Result<Option<Vec<u8>>> {
        let rpc = self.rpc();
        match rpc.get_account_with_commitment(address, self.commitment) {
            Ok(response) => Ok(response.value.map(|account| account.data)),
            Err(e) => {
                // The client folds transport errors into its message: ask once more, plainly.
                if let Err(e) = rpc.get_version() {
                    bail!(
                        "cannot reach the cluster at {}: {}",
                        self.url,
                        rpc_error(&e)
                    );
                }
                bail!("cannot read {what} {address}: {}", rpc_error(&e))
            }
        }
    }

    /// A program account of type `T` (its discriminator checked).
    pub fn fetch<T: AccountDeserialize>(&self, address: &Pubkey, what: &str) -> Result<T> {
        let data = self.account_data(address, what)?;
        decode_as(&data, address, what)
    }

    /// A program account of type `T`, `None` when there is no account at `address`.
    pub fn fetch_if_any<T: AccountDeserialize>(
        &self,
        address: &Pubkey,
        what: &str,
    ) -> Result<Option<T>> {
        self.account_data_if_any(address, what)?
            .map(|data| decode_as(&data, address, what))
            .transpose()
    }

    /// Several accounts of type `T` at once (missing ones are `None`), in the order asked.
    pub fn fetch_many<T: AccountDeserialize>(
        &self,
        addresses: &[Pubkey],
    ) -> Result<Vec<Option<T>>> {
        let rpc = self.rpc();
        let mut out = Vec::with_capacity(addresses.len());
        // getMultipleAccounts answers at most 100 keys per call.
        for chunk in addresses.chunks(100) {
            let accounts = rpc
                .get_multiple_accounts_with_commitment(chunk, self.commitment)
                .map_err(|e| self.unreachable(&e))?
                .value;
            out.extend(
                accounts
                    .into_iter()
                    .map(|a| a.and_then(|a| T::try_deserialize(&mut a.data.as_slice()).ok())),
            );
        }
        Ok(out)
    }

    /// Accounts owned by `program` whose data has each `(offset, bytes)`.
    pub fn program_accounts(
        &self,
        program: &Pubkey,
        matches: &[(usize, &[u8])],
        data_size: Option<u64>,
    ) -> Result<Vec<(Pubkey, Vec<u8>)>> {
        let mut filters: Vec<RpcFilterType> = matches
            .iter()
            .map(|(offset, bytes)| {
                RpcFilterType::Memcmp(Memcmp::new_base58_encoded(*offset, bytes))
            })
            .collect();
        filters.extend(data_size.map(RpcFilterType::DataSize));
        let config = RpcProgramAccountsConfig {
            filters: Some(filters),
            account_config: RpcAccountInfoConfig {
                encoding: Some(UiAccountEncoding::Base64),
                commitment: Some(self.commitment),
                ..Default::default()
            },
            with_context: None,
            sort_results: Some(true),
        };
        let accounts = self
            .rpc()
            .get_program_ui_accounts_with_config(program, config)
            .map_err(|e| self.unreachable(&e))?;
        Ok(accounts
            .into_iter()
            .filter_map(|(key, a)| a.data.decode().map(|d| (key, d)))
            .collect())
    }

    /// The market program's accounts of type `T` whose `Pubkey` fields at the given offsets
    /// (counted after the discriminator) are the given keys.
    pub fn program_accounts_of<T: AccountDeserialize + Discriminator>(
        &self,
        fields: &[(usize, Pubkey)],
    ) -> Result<Vec<(Pubkey, T)>> {
        let keys: Vec<[u8; 32]> = fields.iter().map(|(_, k)| k.to_bytes()).collect();
        let mut matches: Vec<(usize, &[u8])> = vec![(0, T::DISCRIMINATOR)];
        matches.extend(
            fields
                .iter()
                .zip(&keys)
                .map(|((offset, _), k)| (T::DISCRIMINATOR.len() + offset, k.as_slice())),
        );
        Ok(self
            .program_accounts(&gpu_market::ID, &matches, None)?
            .into_iter()
            .filter_map(|(key, data)| {
                T::try_deserialize(&mut data.as_slice())
                    .ok()
                    .map(|t| (key, t))
            })
            .collect())
    }

    /// Reads back the successful transactions that touched `address`, newest first, until
    /// `found` finds what it looks for in one's logs: that transaction's signature and what it
    /// found; `None` when no transaction the cluster still has shows it. One
    /// `getSignaturesForAddress` (its latest 1,000), then one `getTransaction` per transaction
    /// read.
    pub fn find_in_history<T>(
        &self,
        address: &Pubkey,
        mut found: impl FnMut(&[String]) -> Option<T>,
    ) -> Result<Option<(String, T)>> {
        // History is kept from `confirmed` on.
        let commitment = Some(if self.commitment == CommitmentConfig::processed() {
            CommitmentConfig::confirmed()
        } else {
            self.commitment
        });
        let rpc = self.rpc();
        let signatures = rpc
            .get_signatures_for_address_with_config(
                address,
                GetConfirmedSignaturesForAddress2Config {
                    commitment,
                    ..Default::default()
                },
            )
            .map_err(|e| self.unreachable(&e))?;
        for s in signatures.iter().filter(|s| s.err.is_none()) {
            let signature = s.signature.parse().map_err(|_| {
                anyhow!("the cluster returned a malformed signature {}", s.signature)
            })?;
            let tx = rpc
                .get_transaction_with_config(
                    &signature,
                    RpcTransactionConfig {
                        encoding: Some(UiTransactionEncoding::Json),
                        commitment,
                        max_supported_transaction_version: Some(0),
                    },
                )
                .map_err(|e| self.unreachable(&e))?;
            let logs: Vec<String> = tx
                .transaction
                .meta
                .and_then(|m| Option::from(m.log_messages))
                .unwrap_or_default();
            if let Some(t) = found(&logs) {
                return Ok(Some((s.signature.clone(), t)));
            }
        }
        Ok(None)
    }

    /// The cluster's clock (the `Clock` sysvar's `unix_timestamp`), which the program checks
    /// deadlines and cooldowns against.
    pub fn cluster_time(&self) -> Result<i64> {
        let data = self.account_data(&CLOCK_SYSVAR, "clock sysvar")?;
        // Clock: slot, epoch_start_timestamp, epoch, leader_schedule_epoch, unix_timestamp.
        data.get(32..40)
            .and_then(|b| b.try_into().ok())
            .map(i64::from_le_bytes)
            .ok_or_else(|| anyhow!("the cluster's clock sysvar is malformed"))
    }

    /// A mint's decimals.
    pub fn mint_decimals(&self, mint: &Pubkey) -> Result<u8> {
        let data = self.account_data(mint, "mint")?;
        Ok(Mint::unpack(&data)
            .map_err(|_| anyhow!("{mint} is not a token mint"))?
            .decimals)
    }

    /// `explicit`, checked to be `owner`'s account of `mint`; else `owner`'s account of `mint`
    /// with the largest balance.
    pub fn token_account(
        &self,
        owner: &Pubkey,
        mint: &Pubkey,
        explicit: Option<Pubkey>,
    ) -> Result<(Pubkey, u64)> {
        match explicit {
            Some(account) => self.token_account_checked(&account, owner, mint),
            None => self.largest_token_account(owner, mint)?.ok_or_else(|| {
                anyhow!("{owner} has no token account of mint {mint}; create one or pass --tokens")
            }),
        }
    }

    /// Where a refund to `owner` goes: `explicit`, checked to be `owner`'s account of `mint`;
    /// else `owner`'s account of `mint` with the largest balance; `None` when it has none (the
    /// program then keeps the refund in `owner`'s stake account, to claim).
    pub fn refund_account(
        &self,
        owner: &Pubkey,
        mint: &Pubkey,
        explicit: Option<Pubkey>,
    ) -> Result<Option<Pubkey>> {
        Ok(match explicit {
            Some(account) => Some(self.token_account_checked(&account, owner, mint)?.0),
            None => self.largest_token_account(owner, mint)?.map(|(k, _)| k),
        })
    }

    fn token_account_checked(
        &self,
        account: &Pubkey,
        owner: &Pubkey,
        mint: &Pubkey,
    ) -> Result<(Pubkey, u64)> {
        let data = self.account_data(account, "token account")?;
        let acc =
            TokenAccount::unpack(&data).map_err(|_| anyhow!("{account} is not a token account"))?;
        if acc.mint != *mint || acc.owner != *owner {
            bail!("token account {account} is not {owner}'s account of mint {mint}");
        }
        Ok((*account, acc.amount))
    }

    fn largest_token_account(
        &self,
        owner: &Pubkey,
        mint: &Pubkey,
    ) -> Result<Option<(Pubkey, u64)>> {
        let found = self.program_accounts(
            &spl_token_interface::ID,
            &[(0, mint.as_ref()), (32, owner.as_ref())],
            Some(TokenAccount::LEN as u64),
        )?;
        Ok(found
            .into_iter()
            .filter_map(|(key, data)| TokenAccount::unpack(&data).ok().map(|a| (key, a.amount)))
            .max_by_key(|(_, amount)| *amount))
    }

    /// Each `(account, owner)` account that is a live token account of its owner for `mint`
    /// (`gpu_market_sdk::token::is_account_of`), `None` for the others, in order.
    pub fn live_token_accounts(
        &self,
        accounts: &[(Pubkey, Pubkey)],
        mint: &Pubkey,
    ) -> Result<Vec<Option<Pubkey>>> {
        let rpc = self.rpc();
        let mut out = Vec::with_capacity(accounts.len());
        // getMultipleAccounts answers at most 100 keys per call.
        for chunk in accounts.chunks(100) {
            let keys: Vec<Pubkey> = chunk.iter().map(|(k, _)| *k).collect();
            let got = rpc
                .get_multiple_accounts_with_commitment(&keys, self.commitment)
                .map_err(|e| self.unreachable(&e))?
                .value;
            out.extend(chunk.iter().zip(got).map(|((key, owner), a)| {
                a.filter(|a| gpu_market_sdk::token::is_account_of(&a.owner, &a.data, owner, mint))
                    .map(|_| *key)
            }));
        }
        Ok(out)
    }

    /// Lamports that keep an account of `len` bytes rent-exempt.
    pub fn rent_exempt_minimum(&self, len: usize) -> Result<u64> {
        self.rpc()
            .get_minimum_balance_for_rent_exemption(len)
            .map_err(|e| self.unreachable(&e))
    }

    fn unreachable(&self, e: &ClientError) -> anyhow::Error {
        anyhow!("cannot reach the cluster at {}: {}", self.url, rpc_error(e))
    }

    /// Signs `ixs` with `payer` (fee payer) and `extra`, sends, and waits for the configured
    /// commitment (with a spinner on a terminal). Returns the signature.
    pub fn send(
        &self,
        payer: &dyn Signer,
        ixs: &[Instruction],
        extra: &[&dyn Signer],
    ) -> Result<String> {
        let rpc = self.rpc();
        // Refused, it goes as given: the node's preflight says why.
        let ixs = &self
            .budgeted(&payer.pubkey(), ixs)?
            .unwrap_or_else(|_| ixs.to_vec());
        let blockhash = rpc
            .get_latest_blockhash()
            .map_err(|e| self.unreachable(&e))?;
        let tx = signed(payer, ixs, extra, blockhash)?;
        // What the action cost the payer, for people (JSON output stays one record): the
        // balance before and after, and the fee the cluster asks for this message.
        let balance = || {
            rpc.get_balance_with_commitment(&payer.pubkey(), self.commitment)
                .ok()
                .map(|r| r.value)
        };
        let before = matches!(self.output, OutputFormat::Table)
            .then(balance)
            .flatten();
        let sig = rpc
            .send_and_confirm_transaction_with_spinner_and_commitment(&tx, self.commitment)
            .map_err(|e| anyhow!("transaction failed: {}", rpc_error(&e)))?;
        if let (Some(before), Some(after)) = (before, before.and_then(|_| balance())) {
            let fee = rpc.get_fee_for_message(&tx.message).unwrap_or(0);
            eprintln!("{}", cost_line(before, after, fee));
        }
        Ok(sig.to_string())
    }

    /// `ixs` with the compute budget a simulation finds them to need ([`budget::sized`]), or
    /// why the cluster would refuse them (as [`Config::refusal`] says it). The leader reserves
    /// what a transaction asks, of its block and of each account it writes (the market's and
    /// its queue book's among them), and unasked that is 200,000 units and 64 MiB of data, ten
    /// times what a bid uses. As given when they set their own budget or when the budget would
    /// not fit a packet.
    pub fn budgeted(
        &self,
        payer: &Pubkey,
        ixs: &[Instruction],
    ) -> Result<std::result::Result<Vec<Instruction>, String>> {
        if ixs
            .iter()
            .any(|i| i.program_id == solana_compute_budget_interface::ID)
        {
            return Ok(Ok(ixs.to_vec()));
        }
        let sim = match self.simulate(payer, &budget::probe(ixs))? {
            Ok(sim) => sim,
            Err(reason) => return Ok(Err(reason)),
        };
        let sized = budget::sized(
            sim.units_consumed.unwrap_or(MAX_COMPUTE_UNITS as u64),
            sim.loaded_accounts_data_size,
            ixs,
        );
        Ok(Ok(
            if budget::transaction_size(&sized, payer) <= TRANSACTION_SIZE_LIMIT {
                sized
            } else {
                ixs.to_vec()
            },
        ))
    }

    /// Why the cluster would refuse `ixs` paid by `payer` now, tried unsigned (a simulation
    /// without signature checks, on the latest blockhash); `None` when it would accept them.
    /// Only an unreachable cluster is an error.
    pub fn refusal(&self, payer: &Pubkey, ixs: &[Instruction]) -> Result<Option<String>> {
        Ok(self.simulate(payer, ixs)?.err())
    }

    /// `ixs` paid by `payer` simulated unsigned on the latest blockhash: what the run used, or
    /// why the cluster refused it (the program's message where it gave one). Only an
    /// unreachable cluster is an error.
    fn simulate(
        &self,
        payer: &Pubkey,
        ixs: &[Instruction],
    ) -> Result<std::result::Result<RpcSimulateTransactionResult, String>> {
        let tx = Transaction::new_with_payer(ixs, Some(payer));
        let config = RpcSimulateTransactionConfig {
            sig_verify: false,
            replace_recent_blockhash: true,
            commitment: Some(self.commitment),
            ..Default::default()
        };
        match self.rpc().simulate_transaction_with_config(&tx, config) {
            Ok(response) => {
                let sim = response.value;
                Ok(match &sim.err {
                    Some(e) => Err(program_message(sim.logs.as_deref().unwrap_or_default())
                        .unwrap_or_else(|| e.to_string())),
                    None => Ok(sim),
                })
            }
            Err(e) if matches!(e.kind(), ErrorKind::Reqwest(_) | ErrorKind::Io(_)) => {
                Err(self.unreachable(&e))
            }
            // Refused before it runs (e.g. a transaction too large): still a refusal.
            Err(e) => Ok(Err(rpc_error(&e))),
        }
    }

    /// Sends the program instructions `ixs` (their signers included) paid by `payer`.
    /// Sends `groups` in order, as many consecutive groups per transaction as fit one packet
    /// with a compute budget (what must land together is one group); one signature per
    /// transaction. A transaction that fails stops the rest, and the error says how many landed.
    pub fn send_groups(&self, payer: &dyn Signer, groups: &[Group<'_>]) -> Result<Vec<String>> {
        let fits = |ixs: &[Instruction]| {
            let budgeted = budget::sized(
                MAX_COMPUTE_UNITS as u64,
                Some(budget::MAX_LOADED_ACCOUNTS_DATA_SIZE),
                ixs,
            );
            budget::transaction_size(&budgeted, &payer.pubkey()) <= TRANSACTION_SIZE_LIMIT
        };
        let mut batches: Vec<(Vec<Instruction>, Vec<&dyn Signer>)> = Vec::new();
        for group in groups {
            match batches.last_mut() {
                Some((ixs, signers))
                    if fits(&[ixs.as_slice(), group.instructions.as_slice()].concat()) =>
                {
                    ixs.extend_from_slice(&group.instructions);
                    signers.extend(group.signers.iter().copied());
                }
                _ => batches.push((group.instructions.clone(), group.signers.clone())),
            }
        }
        let mut signatures = Vec::with_capacity(batches.len());
        for (ixs, signers) in &batches {
            let landed = signatures.len();
            let signature = self.send(payer, ixs, signers).map_err(|e| {
                anyhow!(
                    "{e} (transaction {} of {}; {landed} landed before it)",
                    landed + 1,
                    batches.len(),
                )
            })?;
            signatures.push(signature);
        }
        Ok(signatures)
    }

    pub fn send_all(&self, payer: &dyn Signer, ixs: &[&dyn Sendable]) -> Result<String> {
        let instructions: Vec<Instruction> = ixs.iter().map(|c| c.build()).collect();
        let signers: Vec<&dyn Signer> = ixs.iter().flat_map(|c| c.keys()).collect();
        self.send(payer, &instructions, &signers)
    }
}

/// What a transaction cost its payer, whose balance went from `before` to `after` with `fee`
/// lamports of fees: the rest is rent (or, negative, rent given back as accounts closed).
fn cost_line(before: u64, after: u64, fee: u64) -> String {
    let sol = |l: u64| format!("{:.6}", l as f64 / 1e9);
    let rent = before as i128 - after as i128 - fee as i128;
    if rent == 0 {
        format!("cost: {} SOL (fee)", sol(fee))
    } else if rent > 0 {
        format!(
            "cost: {} SOL (fee {}, rent {}, returned when its accounts close)",
            sol(fee + rent as u64),
            sol(fee),
            sol(rent as u64)
        )
    } else {
        format!(
            "cost: fee {} SOL; {} SOL of rent came back",
            sol(fee),
            sol(rent.unsigned_abs() as u64)
        )
    }
}

/// `ixs` paid and signed by `payer`, and signed by each of `extra` whose key is not the payer's:
/// an instruction built with a wallet's stand-in (`Wallet::key`) is signed by the wallet itself.
fn signed(
    payer: &dyn Signer,
    ixs: &[Instruction],
    extra: &[&dyn Signer],
    blockhash: solana_message::Hash,
) -> Result<Transaction> {
    let mut signers = vec![payer];
    for k in extra {
        if signers.iter().all(|s| s.pubkey() != k.pubkey()) {
            signers.push(*k);
        }
    }
    let mut tx = Transaction::new_with_payer(ixs, Some(&payer.pubkey()));
    // A hardware wallet may refuse (or its user): an error, not a panic.
    tx.try_sign(&signers, blockhash)
        .map_err(|e| anyhow!("the transaction was not signed: {e}"))?;
    Ok(tx)
}

fn decode_as<T: AccountDeserialize>(data: &[u8], address: &Pubkey, what: &str) -> Result<T> {
    T::try_deserialize(&mut &data[..]).map_err(|_| anyhow!("{address} is not a {what} account"))
}

/// Who signs a plan's instructions: the CLI's keypair, or, for an instruction a wallet will sign
/// (`gpu-market serve`), a `NullSigner` standing for the wallet's key.
pub type Signing<'a> = &'a (dyn Signer + Sync);

/// Instructions that must land together, and the signers they need besides the payer
/// ([`Config::send_groups`]).
pub struct Group<'a> {
    pub instructions: Vec<Instruction>,
    pub signers: Vec<&'a dyn Signer>,
}

/// A program instruction from the sdk, as `send_all` takes it (object-safe).
pub trait Sendable {
    fn build(&self) -> Instruction;
    fn keys(&self) -> Vec<&dyn Signer>;
}

impl<C: ClientInstruction> Sendable for C {
    fn build(&self) -> Instruction {
        self.instruction()
    }
    fn keys(&self) -> Vec<&dyn Signer> {
        self.signers()
    }
}

const CLOCK_SYSVAR: Pubkey = Pubkey::from_str_const("SysvarC1ock11111111111111111111111111111111");

fn expand_home(p: &str) -> PathBuf {
    match p.strip_prefix("~/") {
        Some(rest) => std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_default()
            .join(rest),
        None => PathBuf::from(p),
    }
}

/// The wallet `-k` names: a keypair, or a hardware wallet (`usb://ledger…`) whose key signs on
/// the device.
pub enum Wallet {
    Key(Keypair),
    Hardware {
        device: Box<dyn Signer>,
        /// Stands for the device's key in instruction builders, which take thread-safe signers
        /// (a `RemoteKeypair` is not): only [`Config::send`] signs, with the device.
        stand_in: NullSigner,
    },
}

impl Wallet {
    /// The signer instruction builders take: the keypair, or the device's stand-in.
    pub fn key(&self) -> Signing<'_> {
        match self {
            Wallet::Key(k) => k,
            Wallet::Hardware { stand_in, .. } => stand_in,
        }
    }

    /// The keypair itself, for what needs its secret (the keeper, a daemon that signs unattended):
    /// refused for a hardware wallet, which never gives its secret. What needs only signatures
    /// (a sealed environment's salt, a lease API request) takes the wallet itself.
    pub fn keypair(&self, what: &str) -> Result<&Keypair> {
        match self {
            Wallet::Key(k) => Ok(k),
            Wallet::Hardware { .. } => {
                bail!("{what} needs a keypair's secret, which a hardware wallet never gives: pass a keypair file with -k")
            }
        }
    }
}

impl Signer for Wallet {
    fn try_pubkey(&self) -> Result<Pubkey, solana_signer::SignerError> {
        match self {
            Wallet::Key(k) => k.try_pubkey(),
            Wallet::Hardware { device, .. } => device.try_pubkey(),
        }
    }

    fn try_sign_message(
        &self,
        message: &[u8],
    ) -> Result<solana_signature::Signature, solana_signer::SignerError> {
        match self {
            Wallet::Key(k) => k.try_sign_message(message),
            Wallet::Hardware { device, .. } => device.try_sign_message(message),
        }
    }

    fn is_interactive(&self) -> bool {
        match self {
            Wallet::Key(_) => false,
            Wallet::Hardware { device, .. } => device.is_interactive(),
        }
    }
}

fn is_hardware(source: &str) -> bool {
    source.starts_with("usb://")
}

/// The library reads optional flags (a seed phrase's validation, a key's confirmation) from
/// clap 2 matches; this CLI offers none of them.
fn library_matches() -> clap2::ArgMatches<'static> {
    clap2::App::new("gpu-market").get_matches_from(["gpu-market"])
}

/// A hardware wallet, `usb://ledger[?key=ACCOUNT[/CHANGE]]` (`solana_clap_utils::keypair::
/// signer_from_path`, with the remote-wallet library's HID transport): its key read from the
/// device now, each signature asked of it at send.
fn hardware_wallet(source: &str) -> Result<Wallet> {
    // The library's Trezor transport opens libusb's global context with a panic where the host
    // gives no USB access (no `/dev/bus/usb`, as in containers): no device can be reached then.
    if let Err(e) = rusb::Context::new() {
        bail!("cannot use the hardware wallet {source}: no device found (no USB access here: {e})");
    }
    let mut manager = None;
    let device = solana_clap_utils::keypair::signer_from_path(
        &library_matches(),
        source,
        "keypair",
        &mut manager,
    )
    .map_err(|e| anyhow!("cannot use the hardware wallet {source}: {e}"))?;
    let stand_in = NullSigner::new(&device.pubkey());
    Ok(Wallet::Hardware { device, stand_in })
}

/// The keypair `source` names, read the Solana CLI's way (`solana_clap_utils::keypair`):
/// `prompt://` asks for a seed phrase (and passphrase) at the terminal, `stdin://` (or `-`) reads
/// a keypair's JSON from standard input, anything else is a keypair file (`file://PATH` too; `~/`
/// is the home folder).
fn keypair_from_source(source: &str) -> Result<Keypair> {
    let is_file = !source.contains("://") && source != "-" && source != "ASK";
    if is_file {
        return read_keypair(&expand_home(source));
    }
    solana_clap_utils::keypair::keypair_from_path(&library_matches(), source, "keypair", false)
        .map_err(|e| anyhow!("cannot read the keypair from {source}: {e}"))
}

/// Reads a keypair file in the Solana CLI's format (a JSON array of 64 bytes).
pub fn read_keypair(path: &Path) -> Result<Keypair> {
    if !path.exists() {
        bail!("keypair file {} does not exist", path.display());
    }
    solana_keypair::read_keypair_file(path)
        .map_err(|e| anyhow!("cannot read a keypair from {}: {e}", path.display()))
}

pub fn keygen(config: &Config, outfile: &str, force: bool) -> Result<()> {
    let path = expand_home(outfile);
    if path.exists() && !force {
        bail!("{} exists; pass --force to overwrite it", path.display());
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let kp = Keypair::new();
    solana_keypair::write_keypair_file(&kp, &path)
        .map_err(|e| anyhow!("cannot write {}: {e}", path.display()))?;
    print_record(
        config.output,
        &[
            ("pubkey", text(kp.pubkey())),
            ("outfile", text(path.display())),
        ],
    );
    Ok(())
}

pub fn airdrop(config: &Config, sol: &str) -> Result<()> {
    let lamports =
        gpu_market_core::amount::parse(sol, 9).map_err(|e| anyhow!("bad SOL amount: {e}"))?;
    if lamports == 0 {
        bail!("the airdrop amount must be greater than zero");
    }
    let me = config.signer()?.pubkey();
    let rpc = config.rpc();
    let sig = rpc
        .request_airdrop(&me, lamports)
        .map_err(|e| anyhow!("airdrop refused: {}", rpc_error(&e)))?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !rpc.confirm_transaction(&sig)? {
        if Instant::now() > deadline {
            bail!("the airdrop {sig} was not confirmed within 60 s");
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let balance = rpc.get_balance(&me)?;
    print_record(
        config.output,
        &[
            ("signature", text(sig)),
            ("pubkey", text(me)),
            (
                "balance_sol",
                text(gpu_market_core::amount::format(balance, 9)),
            ),
        ],
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_market_sdk::OpenStake;

    /// A hardware wallet's instructions are built with its stand-in and signed by the device:
    /// here a keypair in the device's place (no device is attached to the tests' machines).
    #[test]
    fn a_hardware_wallets_stand_in_builds_and_the_device_signs() {
        let device = Keypair::new();
        let wallet = Wallet::Hardware {
            stand_in: NullSigner::new(&device.pubkey()),
            device: Box::new(device.insecure_clone()),
        };
        let open = OpenStake {
            owner: wallet.key(),
            market: Pubkey::new_unique(),
        };
        let tx = signed(
            &wallet,
            &[open.instruction()],
            &open.signers(),
            solana_message::Hash::new_unique(),
        )
        .unwrap();
        assert_eq!(tx.message.account_keys[0], device.pubkey());
        assert_eq!(tx.signatures.len(), 1);
        assert!(tx.signatures[0].verify(device.pubkey().as_ref(), &tx.message_data()));
        assert!(wallet.keypair("the keeper").is_err());
        // It salts an environment as the keypair of its key does (the same hash: `bid seal`
        // works from either), signing an off-chain message on the device.
        let salted = |signer: &dyn Signer| {
            gpu_market_sdk::envelope::Environment::new(b"HF_TOKEN=s3cret\n", signer)
                .unwrap()
                .hash()
        };
        assert_eq!(salted(&wallet), salted(&device));
        // The stand-in alone signs nothing: a transaction it were asked to sign is refused.
        let e = signed(
            wallet.key(),
            &[open.instruction()],
            &[],
            solana_message::Hash::new_unique(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("not signed"), "{e}");
    }

    #[test]
    fn the_cost_line_splits_fee_and_rent() {
        assert_eq!(
            cost_line(2_000_000_000, 1_985_365_080, 5_000),
            "cost: 0.014635 SOL (fee 0.000005, rent 0.014630, returned when its accounts close)"
        );
        assert_eq!(
            cost_line(1_000_000_000, 1_004_498_120, 5_000),
            "cost: fee 0.000005 SOL; 0.004503 SOL of rent came back"
        );
        assert_eq!(cost_line(10_000, 5_000, 5_000), "cost: 0.000005 SOL (fee)");
    }
}
