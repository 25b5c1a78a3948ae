//! A JSON-RPC node inside the test process: [`SvmRpc`] answers the requests an `RpcClient`
//! sends (the agent's `SolanaChain`, the tests' [`crate::Cluster`]) from a LiteSVM that holds
//! the program's SBF build and the SPL Token program, the way a validator answers them: accounts
//! in base64, program accounts by their filters, transactions simulated before they are sent
//! (preflight) and then executed, a failed one answered with the runtime's error and, from the
//! preflight, the program's logs. A client therefore meets the same answers, and classifies the
//! same errors, as against `solana-test-validator`, with the real program's rules.
//!
//! The clock moves only when the test moves it ([`SvmRpc::advance_clock`]). Every executed
//! transaction gets a new blockhash, and the last [`RECENT_BLOCKHASHES`] stay valid, as on a
//! cluster. There is no websocket.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use anyhow::{Context, Result};
use async_trait::async_trait;
use base64::Engine;
use litesvm::LiteSVM;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use solana_account_decoder_client_types::{UiAccount, UiAccountData, UiAccountEncoding};
use solana_commitment_config::CommitmentConfig;
use solana_pubkey::Pubkey;
use solana_rpc_client::nonblocking::rpc_client::RpcClient;
use solana_rpc_client::rpc_client::RpcClientConfig;
use solana_rpc_client::rpc_sender::{RpcSender, RpcTransportStats};
use solana_rpc_client_api::client_error::{
    Error as ClientError, Result as ClientResult, TransactionError,
};
use solana_rpc_client_api::config::{
    RpcProgramAccountsConfig, RpcSendTransactionConfig, RpcSimulateTransactionConfig,
    RpcTokenAccountsFilter,
};
use solana_rpc_client_api::custom_error::JSON_RPC_SERVER_ERROR_SEND_TRANSACTION_PREFLIGHT_FAILURE;
use solana_rpc_client_api::filter::RpcFilterType;
use solana_rpc_client_api::request::{RpcError, RpcRequest, RpcResponseErrorData};
use solana_rpc_client_api::response::{
    Response, RpcBlockhash, RpcKeyedAccount, RpcResponseContext, RpcSimulateTransactionResult,
    RpcVersionInfo,
};
use solana_signature::Signature;
use solana_transaction::versioned::VersionedTransaction;
use solana_transaction_status_client_types::{
    TransactionConfirmationStatus, TransactionStatus, UiTransactionEncoding,
};

/// How many of the latest blockhashes a transaction may carry (a validator's 150 slots).
pub const RECENT_BLOCKHASHES: usize = 150;
/// JSON-RPC's code for a method the node does not serve.
const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC's code for parameters the node cannot read.
const INVALID_PARAMS: i64 = -32602;
/// A token account's size, and where its mint and owner lie in it.
const TOKEN_ACCOUNT_LEN: usize = 165;
const TOKEN_MINT: std::ops::Range<usize> = 0..32;
const TOKEN_OWNER: std::ops::Range<usize> = 32..64;

/// A handle on the node: clones share one LiteSVM.
#[derive(Clone)]
pub struct SvmRpc {
    node: Arc<Mutex<Node>>,
    /// Requests sent through this handle's client ([`SvmRpc::client`] makes each its own), as
    /// a node's transport counts them (`RpcClient::get_transport_stats`).
    sent: Arc<std::sync::atomic::AtomicUsize>,
}

struct Node {
    svm: LiteSVM,
    /// The blockhashes a transaction may carry, newest last.
    recent: VecDeque<[u8; 32]>,
    /// What became of each transaction executed (the answer to `getSignatureStatuses`).
    statuses: HashMap<Signature, Result<(), TransactionError>>,
    /// Every transaction that ran, in order, with the compute units it used.
    landed: Vec<(VersionedTransaction, u64)>,
}

impl SvmRpc {
    /// A node whose LiteSVM holds the program's SBF build (`scripts/build-sbf.sh` makes it).
    pub fn start() -> Result<Self> {
        let so = crate::program_so();
        anyhow::ensure!(
            so.exists(),
            "{} is missing: run scripts/build-sbf.sh first (the README's test command does)",
            so.display()
        );
        // The node checks the blockhashes itself: LiteSVM accepts only its latest.
        let mut svm = LiteSVM::new().with_blockhash_check(false);
        svm.add_program_from_file(gpu_market::ID, &so)
            .with_context(|| format!("load {} into LiteSVM", so.display()))?;
        let latest = svm.latest_blockhash().to_bytes();
        Ok(SvmRpc {
            node: Arc::new(Mutex::new(Node {
                svm,
                recent: VecDeque::from([latest]),
                statuses: HashMap::new(),
                landed: Vec::new(),
            })),
            sent: Arc::default(),
        })
    }

    /// Every transaction that ran (landed, failed or not), in order, with the compute units
    /// it used: what a test checks of how a party sends.
    pub fn landed(&self) -> Vec<(VersionedTransaction, u64)> {
        self.node().landed.clone()
    }

    fn node(&self) -> MutexGuard<'_, Node> {
        self.node.lock().expect("the LiteSVM node's lock")
    }

    /// An `RpcClient` that talks to this node.
    pub fn client(&self, commitment: CommitmentConfig) -> RpcClient {
        let own = SvmRpc {
            node: self.node.clone(),
            sent: Arc::default(),
        };
        RpcClient::new_sender(own, RpcClientConfig::with_commitment(commitment))
    }

    /// The cluster's clock, unix seconds.
    pub fn now(&self) -> i64 {
        self.node().clock().unix_timestamp
    }

    /// Sets the cluster's clock to `unix` seconds.
    pub fn set_clock(&self, unix: i64) {
        let mut node = self.node();
        let mut clock = node.clock();
        clock.unix_timestamp = unix;
        node.svm.set_sysvar(&clock);
    }

    /// Moves the cluster's clock `secs` seconds on.
    pub fn advance_clock(&self, secs: i64) {
        let now = self.now();
        self.set_clock(now + secs);
    }

    /// Gives `to` `lamports` (as a faucet does).
    pub fn airdrop(&self, to: &Pubkey, lamports: u64) -> Result<()> {
        let mut node = self.node();
        let done = node.svm.airdrop(to, lamports);
        node.next_blockhash();
        done.map(|_| ())
            .map_err(|f| anyhow::anyhow!("airdrop to {to}: {}", f.err))
    }
}

#[async_trait]
impl RpcSender for SvmRpc {
    async fn send(&self, request: RpcRequest, params: Value) -> ClientResult<Value> {
        self.sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.node().answer(request, &params)
    }

    fn get_transport_stats(&self) -> RpcTransportStats {
        RpcTransportStats {
            request_count: self.sent.load(std::sync::atomic::Ordering::Relaxed),
            ..RpcTransportStats::default()
        }
    }

    fn url(&self) -> String {
        "litesvm://in-process".into()
    }
}

impl Node {
    fn clock(&self) -> solana_clock::Clock {
        self.svm.get_sysvar()
    }

    fn context(&self) -> RpcResponseContext {
        RpcResponseContext::new(self.clock().slot)
    }

    /// `value` with the context a node answers it in.
    fn with_context<T: Serialize>(&self, value: T) -> ClientResult<Value> {
        answer(Response {
            context: self.context(),
            value,
        })
    }

    fn answer(&mut self, request: RpcRequest, params: &Value) -> ClientResult<Value> {
        match request {
            RpcRequest::GetAccountInfo => {
                let key: Pubkey = pubkey(&param::<String>(params, 0)?)?;
                self.with_context(self.account(&key))
            }
            RpcRequest::GetMultipleAccounts => {
                let keys: Vec<String> = param(params, 0)?;
                let accounts = keys
                    .iter()
                    .map(|k| Ok(self.account(&pubkey(k)?)))
                    .collect::<ClientResult<Vec<_>>>()?;
                self.with_context(accounts)
            }
            RpcRequest::GetProgramAccounts => self.program_accounts(params),
            RpcRequest::GetTokenAccountsByOwner => self.token_accounts_by_owner(params),
            RpcRequest::GetBalance => {
                let key = pubkey(&param::<String>(params, 0)?)?;
                self.with_context(self.svm.get_balance(&key).unwrap_or(0))
            }
            RpcRequest::GetMinimumBalanceForRentExemption => {
                let len: usize = param(params, 0)?;
                answer(self.svm.minimum_balance_for_rent_exemption(len))
            }
            RpcRequest::GetLatestBlockhash => {
                let value = RpcBlockhash {
                    blockhash: self.svm.latest_blockhash().to_string(),
                    last_valid_block_height: self.clock().slot + RECENT_BLOCKHASHES as u64,
                };
                self.with_context(value)
            }
            RpcRequest::IsBlockhashValid => {
                let hash: String = param(params, 0)?;
                let valid = self.recent.iter().any(|h| bs58_eq(h, &hash));
                self.with_context(valid)
            }
            RpcRequest::SimulateTransaction => {
                let encoded: String = param(params, 0)?;
                let config: Option<RpcSimulateTransactionConfig> = param(params, 1)?;
                let config = config.unwrap_or_default();
                let tx = transaction(&encoded, config.encoding)?;
                self.with_context(self.simulate(&tx, config.replace_recent_blockhash))
            }
            RpcRequest::SendTransaction => self.send_transaction(params),
            RpcRequest::GetSignatureStatuses => {
                let sigs: Vec<String> = param(params, 0)?;
                let statuses = sigs
                    .iter()
                    .map(|s| Ok(self.status(&signature(s)?)))
                    .collect::<ClientResult<Vec<_>>>()?;
                self.with_context(statuses)
            }
            RpcRequest::RequestAirdrop => {
                let key = pubkey(&param::<String>(params, 0)?)?;
                let lamports: u64 = param(params, 1)?;
                let done = self.svm.airdrop(&key, lamports);
                let sig = match &done {
                    Ok(meta) => meta.signature,
                    Err(f) => f.meta.signature,
                };
                self.statuses
                    .insert(sig, done.map(|_| ()).map_err(|f| f.err));
                self.next_blockhash();
                answer(sig.to_string())
            }
            RpcRequest::GetHealth => answer("ok"),
            RpcRequest::GetSlot | RpcRequest::GetBlockHeight => answer(self.clock().slot),
            RpcRequest::GetVersion => answer(RpcVersionInfo {
                solana_core: "litesvm".into(),
                feature_set: None,
            }),
            other => Err(rpc_error(
                METHOD_NOT_FOUND,
                format!("Method not found: {other} (the LiteSVM node does not serve it)"),
            )),
        }
    }

    fn account(&self, key: &Pubkey) -> Option<UiAccount> {
        self.svm
            .get_account(key)
            .map(|a| ui_account(a.lamports, &a.data, &a.owner, a.executable, a.rent_epoch))
    }

    /// `getProgramAccounts`: the accounts `program` owns that pass every filter, by address.
    fn program_accounts(&self, params: &Value) -> ClientResult<Value> {
        let program = pubkey(&param::<String>(params, 0)?)?;
        let config: Option<RpcProgramAccountsConfig> = param(params, 1)?;
        let config = config.unwrap_or_default();
        let filters = config.filters.unwrap_or_default();
        if filters.contains(&RpcFilterType::TokenAccountState) {
            return Err(rpc_error(
                INVALID_PARAMS,
                "the LiteSVM node has no tokenAccountState filter".into(),
            ));
        }
        let mut found: Vec<RpcKeyedAccount> = self
            .svm
            .get_program_accounts(&program)
            .into_iter()
            .filter(|(_, a)| filters.iter().all(|f| passes(f, &a.data)))
            .map(|(k, a)| RpcKeyedAccount {
                pubkey: k.to_string(),
                account: ui_account(a.lamports, &a.data, &a.owner, a.executable, a.rent_epoch),
            })
            .collect();
        found.sort_by(|a, b| a.pubkey.cmp(&b.pubkey));
        if config.with_context == Some(true) {
            self.with_context(found)
        } else {
            answer(found)
        }
    }

    /// `getTokenAccountsByOwner`, with a mint or a token program as the filter.
    fn token_accounts_by_owner(&self, params: &Value) -> ClientResult<Value> {
        let owner = pubkey(&param::<String>(params, 0)?)?;
        let filter: RpcTokenAccountsFilter = param(params, 1)?;
        let (program, mint) = match filter {
            RpcTokenAccountsFilter::Mint(m) => (spl_token_interface::ID, Some(pubkey(&m)?)),
            RpcTokenAccountsFilter::ProgramId(p) => (pubkey(&p)?, None),
        };
        let found: Vec<RpcKeyedAccount> = self
            .svm
            .get_program_accounts(&program)
            .into_iter()
            .filter(|(_, a)| {
                a.data.len() == TOKEN_ACCOUNT_LEN
                    && a.data[TOKEN_OWNER] == owner.to_bytes()
                    && mint.is_none_or(|m| a.data[TOKEN_MINT] == m.to_bytes())
            })
            .map(|(k, a)| RpcKeyedAccount {
                pubkey: k.to_string(),
                account: ui_account(a.lamports, &a.data, &a.owner, a.executable, a.rent_epoch),
            })
            .collect();
        self.with_context(found)
    }

    /// A transaction's blockhash is one of the recent ones.
    fn check_age(&self, tx: &VersionedTransaction) -> Result<(), TransactionError> {
        let hash = tx.message.recent_blockhash().to_bytes();
        if self.recent.contains(&hash) {
            Ok(())
        } else {
            Err(TransactionError::BlockhashNotFound)
        }
    }

    fn simulate(
        &self,
        tx: &VersionedTransaction,
        replace_blockhash: bool,
    ) -> RpcSimulateTransactionResult {
        let age = if replace_blockhash {
            Ok(())
        } else {
            self.check_age(tx)
        };
        let loaded = loaded_bytes(&self.svm, tx.message.static_account_keys());
        let (err, meta) = match age {
            Err(e) => (Some(e), Default::default()),
            Ok(()) => match self.svm.simulate_transaction(tx.clone()) {
                Ok(info) => (None, info.meta),
                Err(f) => (Some(f.err), f.meta),
            },
        };
        RpcSimulateTransactionResult {
            err: err.map(Into::into),
            logs: Some(meta.logs),
            accounts: None,
            units_consumed: Some(meta.compute_units_consumed),
            loaded_accounts_data_size: Some(loaded),
            return_data: None,
            inner_instructions: None,
            replacement_blockhash: None,
            fee: Some(meta.fee),
            pre_balances: None,
            post_balances: None,
            pre_token_balances: None,
            post_token_balances: None,
            loaded_addresses: None,
        }
    }

    /// `sendTransaction`: refused with the simulation's error and logs when its preflight
    /// fails, as a node refuses it; otherwise executed (a transaction whose blockhash is not
    /// recent never lands and never gets a status).
    fn send_transaction(&mut self, params: &Value) -> ClientResult<Value> {
        let encoded: String = param(params, 0)?;
        let config: Option<RpcSendTransactionConfig> = param(params, 1)?;
        let config = config.unwrap_or_default();
        let tx = transaction(&encoded, config.encoding)?;
        if !config.skip_preflight {
            let sim = self.simulate(&tx, false);
            if let Some(err) = &sim.err {
                return Err(RpcError::RpcResponseError {
                    code: JSON_RPC_SERVER_ERROR_SEND_TRANSACTION_PREFLIGHT_FAILURE,
                    message: format!("Transaction simulation failed: {err}"),
                    data: RpcResponseErrorData::SendTransactionPreflightFailure(sim),
                }
                .into());
            }
        }
        let sig = tx.signatures[0];
        if self.check_age(&tx).is_ok() {
            let done = self.svm.send_transaction(tx.clone());
            let units = match &done {
                Ok(meta) => meta.compute_units_consumed,
                Err(f) => f.meta.compute_units_consumed,
            };
            self.landed.push((tx, units));
            self.statuses
                .insert(sig, done.map(|_| ()).map_err(|f| f.err));
            self.next_blockhash();
        }
        answer(sig.to_string())
    }

    fn status(&self, sig: &Signature) -> Option<TransactionStatus> {
        self.statuses.get(sig).map(|status| TransactionStatus {
            slot: self.clock().slot,
            confirmations: None,
            status: status.clone(),
            err: status.clone().err(),
            confirmation_status: Some(TransactionConfirmationStatus::Finalized),
        })
    }

    /// A new latest blockhash, so that the same instructions signed again make a new
    /// transaction; the oldest one expires.
    fn next_blockhash(&mut self) {
        self.svm.expire_blockhash();
        self.recent
            .push_back(self.svm.latest_blockhash().to_bytes());
        if self.recent.len() > RECENT_BLOCKHASHES {
            self.recent.pop_front();
        }
    }
}

/// Bytes of account data a transaction naming `keys` loads: each account's data, and for a
/// program of the upgradeable loader its program data (the ELF), as the runtime counts them
/// against the transaction's loaded-accounts limit. LiteSVM runs the limit but does not report
/// the count; the node reports this one in simulations, as a validator reports its own.
pub fn loaded_bytes(svm: &LiteSVM, keys: &[Pubkey]) -> u32 {
    let upgradeable = solana_sdk_ids::bpf_loader_upgradeable::ID;
    let mut total = 0usize;
    for key in keys {
        let Some(acc) = svm.get_account(key) else {
            continue;
        };
        total += acc.data.len();
        if acc.executable && acc.owner == upgradeable {
            let data = Pubkey::find_program_address(&[key.as_ref()], &upgradeable).0;
            total += svm.get_account(&data).map_or(0, |a| a.data.len());
        }
    }
    u32::try_from(total).unwrap_or(u32::MAX)
}

fn ui_account(
    lamports: u64,
    data: &[u8],
    owner: &Pubkey,
    executable: bool,
    rent_epoch: u64,
) -> UiAccount {
    UiAccount {
        lamports,
        data: UiAccountData::Binary(
            base64::engine::general_purpose::STANDARD.encode(data),
            UiAccountEncoding::Base64,
        ),
        owner: owner.to_string(),
        executable,
        rent_epoch,
        space: Some(data.len() as u64),
    }
}

/// Whether account data passes a `getProgramAccounts` filter.
fn passes(filter: &RpcFilterType, data: &[u8]) -> bool {
    match filter {
        RpcFilterType::DataSize(n) => data.len() as u64 == *n,
        RpcFilterType::Memcmp(m) => m.bytes_match(data),
        RpcFilterType::TokenAccountState => false,
    }
}

fn answer<T: Serialize>(value: T) -> ClientResult<Value> {
    serde_json::to_value(value).map_err(|e| rpc_error(-32603, format!("Internal error: {e}")))
}

fn rpc_error(code: i64, message: String) -> ClientError {
    RpcError::RpcResponseError {
        code,
        message,
        data: RpcResponseErrorData::Empty,
    }
    .into()
}

/// Parameter `i` of a request (`null` where it is missing, for optional configurations).
fn param<T: DeserializeOwned>(params: &Value, i: usize) -> ClientResult<T> {
    let v = params.get(i).cloned().unwrap_or(Value::Null);
    serde_json::from_value(v).map_err(|e| {
        rpc_error(
            INVALID_PARAMS,
            format!("Invalid params: parameter {i}: {e}"),
        )
    })
}

fn pubkey(s: &str) -> ClientResult<Pubkey> {
    s.parse()
        .map_err(|e| rpc_error(INVALID_PARAMS, format!("Invalid param: {s}: {e}")))
}

fn signature(s: &str) -> ClientResult<Signature> {
    s.parse()
        .map_err(|e| rpc_error(INVALID_PARAMS, format!("Invalid param: {s}: {e}")))
}

fn bs58_eq(hash: &[u8; 32], base58: &str) -> bool {
    bs58::decode(base58)
        .into_vec()
        .is_ok_and(|b| b.as_slice() == hash)
}

/// A wire transaction, as `sendTransaction` and `simulateTransaction` carry it.
fn transaction(
    encoded: &str,
    encoding: Option<UiTransactionEncoding>,
) -> ClientResult<VersionedTransaction> {
    let bytes = match encoding.unwrap_or(UiTransactionEncoding::Base58) {
        UiTransactionEncoding::Base58 => bs58::decode(encoded).into_vec().ok(),
        UiTransactionEncoding::Base64 => base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .ok(),
        _ => None,
    }
    .ok_or_else(|| rpc_error(INVALID_PARAMS, "invalid transaction encoding".into()))?;
    bincode::deserialize(&bytes).map_err(|e| {
        rpc_error(
            INVALID_PARAMS,
            format!("failed to deserialize VersionedTransaction: {e}"),
        )
    })
}
