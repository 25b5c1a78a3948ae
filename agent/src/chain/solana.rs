//! The market program over JSON-RPC ([`SolanaChain`]) and its websocket feed ([`watch`]).
//!
//! Accounts are decoded with the program crate's own types and instructions built with the
//! shared `gpu-market-sdk` builders, never by hand. Which open bid fits this machine is decided
//! by the program's own `feasible` and `Machine::compat`, run here on the accounts just read, so
//! the agent asks `allocate` for exactly what the program will accept.

use std::sync::Arc;
use std::time::Duration;

use anchor_lang::{AccountDeserialize, Discriminator};
use async_trait::async_trait;
use futures_util::stream::{self, BoxStream, StreamExt};
use gpu_market::instructions::{feasible, SubmitUsageArgs};
use gpu_market::pda;
use gpu_market::state::{
    Bid, BidKind as ProgramBidKind, Freed, Lease, Machine, MachineStatus as ProgramStatus, Market,
    StakeAccount,
};
use gpu_market_core::lease::UsageProof;
use gpu_market_sdk::accounts::decode;
use gpu_market_sdk::book::read_book;
use gpu_market_sdk::{Allocate, ClientInstruction, CloseLease, Heartbeat, Preempt, SubmitUsage};
use solana_account_decoder_client_types::UiAccountEncoding;
use solana_commitment_config::CommitmentConfig;
use solana_instruction::Instruction;
use solana_keypair::Keypair;
use solana_pubkey::Pubkey;
use solana_pubsub_client::nonblocking::pubsub_client::PubsubClient;
use solana_rpc_client::nonblocking::rpc_client::RpcClient;
use solana_rpc_client_api::client_error::{Error as ClientError, ErrorKind};
use solana_rpc_client_api::config::{RpcAccountInfoConfig, RpcProgramAccountsConfig};
use solana_rpc_client_api::filter::{Memcmp, RpcFilterType};
use solana_rpc_client_api::request::{RpcError, RpcResponseErrorData, TokenAccountsFilter};
use solana_signer::Signer;
use solana_transaction::Transaction;
use tokio::sync::{Mutex, Notify};

use super::{
    proof_hash, BidKind, BidView, Chain, ChainError, GpuView, Key, LeaseView, MachineStatus,
    MachineView,
};

/// Offsets of the fields the websocket and `getProgramAccounts` filter on (after the 8-byte
/// discriminator): `Lease.machine`, `Bid.market` and `Bid.machine`.
const LEASE_MACHINE_OFFSET: usize = 8 + 32;
const BID_MARKET_OFFSET: usize = 8;
const BID_MACHINE_OFFSET: usize = 8 + 32 + 32;
/// `getMultipleAccounts` takes at most this many keys.
const MULTIPLE_ACCOUNTS_MAX: usize = 100;

fn pubkey(k: Key) -> Pubkey {
    Pubkey::new_from_array(k.0)
}

fn key(p: &Pubkey) -> Key {
    Key(p.to_bytes())
}

/// The market program as one machine's agent sees it, over JSON-RPC.
pub struct SolanaChain {
    rpc: RpcClient,
    agent: Keypair,
    market: Pubkey,
    machine: Pubkey,
    /// The owner's payment-token account that proofs pay: configured, or found once.
    host_tokens: Mutex<Option<Pubkey>>,
}

impl SolanaChain {
    pub fn new(
        rpc_url: String,
        commitment: CommitmentConfig,
        agent: Keypair,
        market: Key,
        machine: Key,
        host_tokens: Option<Key>,
    ) -> Self {
        SolanaChain {
            rpc: RpcClient::new_with_timeout_and_commitment(
                rpc_url,
                Duration::from_secs(30),
                commitment,
            ),
            agent,
            market: pubkey(market),
            machine: pubkey(machine),
            host_tokens: Mutex::new(host_tokens.map(pubkey)),
        }
    }

    pub fn agent(&self) -> Pubkey {
        self.agent.pubkey()
    }

    /// The electricity cost the machine declares on chain (the program ranks spot bids by the
    /// host's profit after it).
    pub async fn electricity_cost_per_kwh(&self) -> Result<u64, ChainError> {
        let m: Machine = self.account(&self.machine, "machine").await?;
        Ok(m.electricity_cost_per_kwh)
    }

    /// The accounts at `keys`, in order (`None` where there is none).
    async fn raw_accounts(&self, keys: &[Pubkey]) -> Result<Vec<Option<Vec<u8>>>, ChainError> {
        let mut out = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(MULTIPLE_ACCOUNTS_MAX) {
            let got = self
                .rpc
                .get_multiple_accounts_with_commitment(chunk, self.rpc.commitment())
                .await
                .map_err(unavailable)?
                .value;
            out.extend(got.into_iter().map(|a| a.map(|a| a.data)));
        }
        Ok(out)
    }

    async fn account<T: AccountDeserialize>(
        &self,
        address: &Pubkey,
        what: &'static str,
    ) -> Result<T, ChainError> {
        let data = self
            .raw_accounts(std::slice::from_ref(address))
            .await?
            .pop()
            .flatten();
        decoded(data.as_deref(), what, address)
    }

    async fn market_and_machine(&self) -> Result<(Market, Machine), ChainError> {
        let got = self.raw_accounts(&[self.market, self.machine]).await?;
        Ok((
            decoded(got[0].as_deref(), "market", &self.market)?,
            decoded(got[1].as_deref(), "machine", &self.machine)?,
        ))
    }

    /// The bids of a book, best first (none for an unset book).
    async fn book(&self, book: &Pubkey) -> Result<Vec<Pubkey>, ChainError> {
        if *book == Pubkey::default() {
            return Ok(Vec::new());
        }
        let data = self.raw_accounts(&[*book]).await?.pop().flatten();
        match data {
            Some(d) => read_book(&d)
                .map(|b| b.entries.iter().map(|leaf| leaf.bid).collect())
                .ok_or_else(|| ChainError::Rejected {
                    op: "read",
                    reason: format!("{book} is not an initialised bid book"),
                }),
            None => Ok(Vec::new()),
        }
    }

    /// Bids at `keys` (skipping any that closed meanwhile).
    async fn bids(&self, keys: &[Pubkey]) -> Result<Vec<(Pubkey, Bid)>, ChainError> {
        let data = self.raw_accounts(keys).await?;
        Ok(keys
            .iter()
            .zip(data)
            .filter_map(|(k, d)| Some((*k, decode::<Bid>(&d?, "bid").ok()?)))
            .collect())
    }

    async fn send(&self, op: &'static str, ix: Instruction) -> Result<(), ChainError> {
        let blockhash = self.rpc.get_latest_blockhash().await.map_err(unavailable)?;
        let tx = Transaction::new_signed_with_payer(
            &[ix],
            Some(&self.agent.pubkey()),
            &[&self.agent],
            blockhash,
        );
        self.rpc
            .send_and_confirm_transaction(&tx)
            .await
            .map(|_| ())
            .map_err(|e| classify(op, &e))
    }

    /// The first payment-token account (by address) that `owner` holds, for payouts.
    async fn token_account_of(
        &self,
        owner: &Pubkey,
        mint: &Pubkey,
        op: &'static str,
    ) -> Result<Pubkey, ChainError> {
        let mut found: Vec<Pubkey> = self
            .rpc
            .get_token_accounts_by_owner(owner, TokenAccountsFilter::Mint(*mint))
            .await
            .map_err(unavailable)?
            .iter()
            .filter_map(|a| a.pubkey.parse().ok())
            .collect();
        found.sort();
        found.first().copied().ok_or_else(|| ChainError::Rejected {
            op,
            reason: format!("{owner} holds no token account of the payment mint {mint}"),
        })
    }

    async fn host_tokens(&self, machine: &Machine, market: &Market) -> Result<Pubkey, ChainError> {
        let mut cached = self.host_tokens.lock().await;
        if let Some(k) = *cached {
            return Ok(k);
        }
        let k = self
            .token_account_of(&machine.owner, &market.payment_mint, "submit_usage")
            .await?;
        *cached = Some(k);
        Ok(k)
    }

    /// The lease accounts of this machine.
    async fn lease_accounts(&self) -> Result<Vec<(Pubkey, Lease)>, ChainError> {
        let found = self
            .rpc
            .get_program_ui_accounts_with_config(
                &gpu_market::ID,
                RpcProgramAccountsConfig {
                    filters: Some(lease_filters(&self.machine)),
                    account_config: RpcAccountInfoConfig {
                        encoding: Some(UiAccountEncoding::Base64),
                        ..Default::default()
                    },
                    with_context: None,
                    sort_results: Some(true),
                },
            )
            .await
            .map_err(unavailable)?;
        Ok(found
            .iter()
            .filter_map(|(k, a)| Some((*k, decode(&a.data.decode()?, "lease").ok()?)))
            .collect())
    }

    fn lease_view(&self, key: Pubkey, l: &Lease, bid: &Bid, interval_secs: u32) -> LeaseView {
        LeaseView {
            key: self::key(&key),
            bid: self::key(&l.bid),
            client: self::key(&l.client),
            kind: kind(l.kind),
            price: l.price,
            gpu_indices: l.gpus().to_vec(),
            gib_per_gpu: l.gib_per_gpu,
            settings: (0..l.gpu_count as usize)
                .map(|i| bid.terms_of(i).settings())
                .collect(),
            image_ref: image_ref(bid),
            image_digest: bid.image_digest,
            env_hash: bid.env_hash,
            started_at: l.started_at,
            ends_at: l.ends_at,
            stop_at: (l.stop_at != Lease::NOT_STOPPED).then_some(l.stop_at),
            interval_secs,
            next_interval: l.next_interval,
            proof_hash: l.proof_hash,
        }
    }
}

/// The account of type `T` in `data` (read at `address`); a missing or foreign account is a
/// refusal, not an outage.
fn decoded<T: AccountDeserialize>(
    data: Option<&[u8]>,
    what: &'static str,
    address: &Pubkey,
) -> Result<T, ChainError> {
    data.ok_or_else(|| format!("no {what} account at {address}"))
        .and_then(|d| decode(d, what).map_err(|e| format!("{address}: {e}")))
        .map_err(|reason| ChainError::Rejected { op: "read", reason })
}

fn kind(k: ProgramBidKind) -> BidKind {
    match k {
        ProgramBidKind::Queue => BidKind::Queue,
        ProgramBidKind::Spot => BidKind::Spot,
    }
}

fn image_ref(bid: &Bid) -> String {
    let end = bid
        .image_ref
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(bid.image_ref.len());
    String::from_utf8_lossy(&bid.image_ref[..end]).into_owned()
}

fn unavailable(e: ClientError) -> ChainError {
    ChainError::Unavailable(e.to_string())
}

/// A refusal by the program (or by the runtime's checks of the transaction) is final; anything
/// else (no answer, a confirmation that timed out) may or may not have landed.
fn classify(op: &'static str, e: &ClientError) -> ChainError {
    match e.kind() {
        ErrorKind::RpcError(RpcError::RpcResponseError {
            data: RpcResponseErrorData::SendTransactionPreflightFailure(sim),
            message,
            ..
        }) => {
            let reason = sim
                .logs
                .iter()
                .flatten()
                .find(|l| l.contains("Error Message:"))
                .cloned()
                .unwrap_or_else(|| message.clone());
            ChainError::Rejected { op, reason }
        }
        ErrorKind::TransactionError(t) => ChainError::Rejected {
            op,
            reason: t.to_string(),
        },
        _ => ChainError::Unavailable(e.to_string()),
    }
}

#[async_trait]
impl Chain for SolanaChain {
    async fn now(&self) -> Result<i64, ChainError> {
        let data = self
            .raw_accounts(&[solana_sdk_ids::sysvar::clock::ID])
            .await?
            .pop()
            .flatten()
            .ok_or_else(|| ChainError::Unavailable("the clock sysvar is missing".into()))?;
        let clock: solana_clock::Clock = bincode::deserialize(&data)
            .map_err(|e| ChainError::Unavailable(format!("the clock sysvar: {e}")))?;
        Ok(clock.unix_timestamp)
    }

    async fn machine(&self) -> Result<MachineView, ChainError> {
        let m: Machine = self.account(&self.machine, "machine").await?;
        Ok(MachineView {
            gpus: m
                .gpus()
                .iter()
                .map(|g| GpuView {
                    class: g.class,
                    memory_gib: g.memory_gib,
                    topology_group: g.topology_group,
                })
                .collect(),
            free_gib: m
                .gpus()
                .iter()
                .zip(&m.used_gib)
                .map(|(g, used)| g.memory_gib.saturating_sub(*used))
                .collect(),
            status: match m.status {
                ProgramStatus::Active => MachineStatus::Active,
                ProgramStatus::Paused => MachineStatus::Paused,
                ProgramStatus::Retired => MachineStatus::Retired,
            },
        })
    }

    async fn leases(&self) -> Result<Vec<LeaseView>, ChainError> {
        let market: Market = self.account(&self.market, "market").await?;
        let leases = self.lease_accounts().await?;
        let bid_keys: Vec<Pubkey> = leases.iter().map(|(_, l)| l.bid).collect();
        let bids = self.bids(&bid_keys).await?;
        Ok(leases
            .iter()
            .filter_map(|(k, l)| {
                let bid = bids.iter().find(|(b, _)| *b == l.bid).map(|(_, b)| b)?;
                Some(self.lease_view(*k, l, bid, market.params.billing_interval_secs))
            })
            .collect())
    }

    async fn best_open_bids(&self, limit: usize) -> Result<Vec<BidView>, ChainError> {
        let (market, machine) = self.market_and_machine().await?;
        let now = self.now().await?;
        // A spot bid that does not fit now may fit the GPUs of a running spot lease it could
        // preempt: the agent's spot rule needs to see it.
        let preemptible: Vec<Freed> = self
            .lease_accounts()
            .await?
            .iter()
            .filter(|(_, l)| l.kind == ProgramBidKind::Spot && l.stop_at == Lease::NOT_STOPPED)
            .map(|(_, l)| Freed {
                gpus: l.gpus().iter().fold(0u16, |m, &g| m | 1 << g),
                gib: l.gib_per_gpu,
            })
            .collect();
        let mut out = Vec::new();
        // Queue bids outrank spot bids; within a book, the book's order.
        for book in [market.queue_book, machine.spot_book] {
            let order = self.book(&book).await?;
            for chunk in order.chunks(MULTIPLE_ACCOUNTS_MAX / 2) {
                let bids = self.bids(chunk).await?;
                let stakes: Vec<Pubkey> = bids
                    .iter()
                    .map(|(_, b)| pda::stake(&self.market, &b.client).0)
                    .collect();
                let stakes = self.raw_accounts(&stakes).await?;
                for ((k, b), stake) in bids.iter().zip(stakes) {
                    let Some(stake) = stake.and_then(|d| decode::<StakeAccount>(&d, "stake").ok())
                    else {
                        continue;
                    };
                    let now_free = [Freed::default()];
                    let frees = match b.kind {
                        ProgramBidKind::Queue => &now_free[..],
                        ProgramBidKind::Spot => &preemptible[..],
                    };
                    let held = stake.gpus_held as u64;
                    let mut mask = 0u16;
                    for freed in now_free.iter().chain(frees) {
                        if feasible(b, held, &machine, &market, now, freed).unwrap_or(false) {
                            mask |= machine
                                .compat(b, &market, now, freed)
                                .map(|rows| rows.iter().fold(0, |m, r| m | r))
                                .unwrap_or(0);
                        }
                    }
                    if mask == 0 {
                        continue;
                    }
                    out.push(BidView {
                        key: key(k),
                        client: key(&b.client),
                        kind: kind(b.kind),
                        gpu_count: b.gpu_count,
                        gib_per_gpu: b.gib_per_gpu,
                        accepted_classes: b.accepted_classes,
                        gpu_mask: mask,
                        settings: (0..b.gpu_count as usize)
                            .map(|i| b.terms_of(i).settings())
                            .collect(),
                        price: b.price,
                        max_duration_secs: b.max_duration_secs,
                        image_ref: image_ref(b),
                        image_digest: b.image_digest,
                        env_hash: b.env_hash,
                    });
                    if out.len() >= limit {
                        return Ok(out);
                    }
                }
            }
        }
        Ok(out)
    }

    async fn allocate(&self, bid: Key, gpu_indices: &[u8]) -> Result<Key, ChainError> {
        let bid = pubkey(bid);
        let (market, machine) = self.market_and_machine().await?;
        let b: Bid = self.account(&bid, "bid").await?;
        let book = match b.kind {
            ProgramBidKind::Queue => market.queue_book,
            ProgramBidKind::Spot => machine.spot_book,
        };
        let order = self.book(&book).await?;
        let Some(rank) = order.iter().position(|k| *k == bid) else {
            return Err(ChainError::Rejected {
                op: "allocate",
                reason: format!("bid {bid} is no longer in its book"),
            });
        };
        // The program checks that none of the bids ranked above fits; it reads them (and
        // their clients' stakes) from the transaction.
        let better = self.bids(&order[..rank]).await?;
        if better.len() != rank {
            return Err(ChainError::Unavailable(
                "a bid ranked above closed meanwhile; observing again".into(),
            ));
        }
        let ix = Allocate {
            agent: &self.agent,
            market: self.market,
            machine: self.machine,
            book,
            bid,
            client: b.client,
            gpus: gpu_indices.to_vec(),
            better: better.iter().map(|(k, b)| (*k, b.client)).collect(),
        };
        let lease = ix.lease();
        self.send(Allocate::NAME, ix.instruction()).await?;
        Ok(key(&lease))
    }

    async fn rebid(&self, lease: Key, better_bid: Key) -> Result<(), ChainError> {
        let lease = pubkey(lease);
        let l: Lease = self.account(&lease, "lease").await?;
        let challenger: Bid = self.account(&pubkey(better_bid), "bid").await?;
        let ix = Preempt {
            agent: &self.agent,
            market: self.market,
            machine: self.machine,
            lease,
            lease_bid: l.bid,
            challenger: pubkey(better_bid),
            challenger_client: challenger.client,
        };
        self.send(Preempt::NAME, ix.instruction()).await
    }

    async fn submit_usage(
        &self,
        lease: Key,
        proof: &UsageProof,
        prev_hash: [u8; 32],
    ) -> Result<[u8; 32], ChainError> {
        let (market, machine) = self.market_and_machine().await?;
        let l: Lease = self.account(&pubkey(lease), "lease").await?;
        let ix = SubmitUsage {
            agent: &self.agent,
            market: self.market,
            machine: self.machine,
            lease: pubkey(lease),
            bid: l.bid,
            payment_mint: market.payment_mint,
            treasury: market.treasury,
            host_tokens: self.host_tokens(&machine, &market).await?,
            args: SubmitUsageArgs::new(proof, prev_hash),
        };
        self.send(SubmitUsage::NAME, ix.instruction()).await?;
        Ok(proof_hash(&lease, proof, &prev_hash))
    }

    async fn end_lease(&self, lease: Key) -> Result<(), ChainError> {
        let (market, machine) = self.market_and_machine().await?;
        let l: Lease = self.account(&pubkey(lease), "lease").await?;
        let client_tokens = self
            .token_account_of(&l.client, &market.payment_mint, "end_lease")
            .await?;
        let ix = CloseLease {
            signer: &self.agent,
            market: self.market,
            machine: self.machine,
            lease: pubkey(lease),
            bid: l.bid,
            client: l.client,
            agent: machine.agent,
            spot_book: (l.kind == ProgramBidKind::Spot).then_some(machine.spot_book),
            payment_mint: market.payment_mint,
            client_tokens,
            reclaim: false,
        };
        self.send(CloseLease::NAME, ix.instruction()).await
    }

    async fn heartbeat(&self) -> Result<(), ChainError> {
        let ix = Heartbeat {
            agent: &self.agent,
            machine: self.machine,
        };
        self.send(Heartbeat::NAME, ix.instruction()).await
    }
}

fn lease_filters(machine: &Pubkey) -> Vec<RpcFilterType> {
    vec![
        RpcFilterType::Memcmp(Memcmp::new_raw_bytes(0, Lease::DISCRIMINATOR.to_vec())),
        RpcFilterType::Memcmp(Memcmp::new_raw_bytes(
            LEASE_MACHINE_OFFSET,
            machine.to_bytes().to_vec(),
        )),
    ]
}

/// The program-account subscriptions that concern one machine: its leases, the spot bids on
/// it, and the market's queue bids (machine field unset).
fn subscriptions(market: &Pubkey, machine: &Pubkey) -> Vec<Vec<RpcFilterType>> {
    let bid = || RpcFilterType::Memcmp(Memcmp::new_raw_bytes(0, Bid::DISCRIMINATOR.to_vec()));
    vec![
        lease_filters(machine),
        vec![
            bid(),
            RpcFilterType::Memcmp(Memcmp::new_raw_bytes(
                BID_MACHINE_OFFSET,
                machine.to_bytes().to_vec(),
            )),
        ],
        vec![
            bid(),
            RpcFilterType::Memcmp(Memcmp::new_raw_bytes(
                BID_MARKET_OFFSET,
                market.to_bytes().to_vec(),
            )),
            RpcFilterType::Memcmp(Memcmp::new_raw_bytes(BID_MACHINE_OFFSET, vec![0; 32])),
        ],
    ]
}

/// Watches the program's accounts of `machine` over the websocket and wakes `wake` on every
/// change: its leases, the bids it could take, and the machine itself. Reconnects with backoff
/// (1 s doubling to 30 s) when the socket fails; the reconcile loop's own poll is the fallback
/// meanwhile. Runs until dropped.
pub async fn watch(
    ws_url: String,
    commitment: CommitmentConfig,
    market: Key,
    machine: Key,
    wake: Arc<Notify>,
    connected: Arc<std::sync::atomic::AtomicBool>,
) {
    let (market, machine) = (pubkey(market), pubkey(machine));
    let mut backoff = Duration::from_secs(1);
    loop {
        match PubsubClient::new(ws_url.as_str()).await {
            Ok(client) => {
                match subscribe_all(&client, commitment, &market, &machine).await {
                    Ok(mut events) => {
                        tracing::info!(%ws_url, "websocket subscribed");
                        connected.store(true, std::sync::atomic::Ordering::Relaxed);
                        backoff = Duration::from_secs(1);
                        // A change may have happened while (re)connecting.
                        wake.notify_one();
                        while events.next().await.is_some() {
                            wake.notify_one();
                        }
                        tracing::warn!("websocket subscription ended; reconnecting");
                    }
                    Err(e) => tracing::warn!(error = %e, "websocket subscribe failed"),
                }
                connected.store(false, std::sync::atomic::Ordering::Relaxed);
            }
            Err(e) => tracing::warn!(%ws_url, error = %e, "websocket connect failed"),
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(30));
    }
}

async fn subscribe_all<'a>(
    client: &'a PubsubClient,
    commitment: CommitmentConfig,
    market: &Pubkey,
    machine: &Pubkey,
) -> Result<BoxStream<'a, ()>, String> {
    let account_config = RpcAccountInfoConfig {
        encoding: Some(UiAccountEncoding::Base64),
        commitment: Some(commitment),
        ..Default::default()
    };
    let mut streams: Vec<BoxStream<'a, ()>> = Vec::new();
    for filters in subscriptions(market, machine) {
        let (s, _unsubscribe) = client
            .program_subscribe(
                &gpu_market::ID,
                Some(RpcProgramAccountsConfig {
                    filters: Some(filters),
                    account_config: account_config.clone(),
                    with_context: None,
                    sort_results: None,
                }),
            )
            .await
            .map_err(|e| e.to_string())?;
        streams.push(s.map(|_| ()).boxed());
    }
    let (s, _unsubscribe) = client
        .account_subscribe(machine, Some(account_config))
        .await
        .map_err(|e| e.to_string())?;
    streams.push(s.map(|_| ()).boxed());
    Ok(stream::select_all(streams).boxed())
}
