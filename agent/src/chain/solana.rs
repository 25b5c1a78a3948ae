//! The market program over JSON-RPC ([`SolanaChain`]); its websocket feed is [`super::watch`].
//!
//! Accounts are decoded with the program crate's own types and instructions built with the
//! shared `gpu-market-sdk` builders, never by hand. Which open bid fits this machine, and on
//! which GPUs, is decided by the market's one fit rule (`Machine::offer` + `Bid::fit`), run here
//! on the accounts just read, so the agent asks `allocate` for exactly what the program accepts;
//! `allocate`'s evidence is what the sdk says the program needs of the book
//! (`BookEntries::allocate_evidence`), a few accounts whatever the book's depth.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use anchor_lang::{AccountDeserialize, Discriminator};
use async_trait::async_trait;
use gpu_market::instructions::UsageProofArgs;
use gpu_market::pda;
use gpu_market::state::{
    Bid, BidKind as ProgramBidKind, BookLeaf, BookWalk, Egress, Freed, Lease, Machine,
    MachineStatus as ProgramStatus, Market, Offers, SealedEnv, StakeAccount,
};
use gpu_market_core::lease::UsageProof;
use gpu_market_sdk::accounts::decode;
use gpu_market_sdk::book::{read_book, BookEntries};
use gpu_market_sdk::budget::{self, MAX_COMPUTE_UNITS};
use gpu_market_sdk::placement::Sealed;
use gpu_market_sdk::{
    Allocate, AllocateGang, ClaimPay, ClientInstruction, CloseLease, Heartbeat, Preempt, PruneBid,
    ReportFault, Reserve, ReserveGang, SetRendezvous, SetWholeGpus, SubmitUsage, Unreserve,
};
use solana_account_decoder_client_types::{UiAccountEncoding, UiDataSliceConfig};
use solana_commitment_config::CommitmentConfig;
use solana_instruction::error::InstructionError;
use solana_instruction::Instruction;
use solana_keypair::Keypair;
use solana_pubkey::Pubkey;
use solana_rpc_client::http_sender::HttpSender;
use solana_rpc_client::nonblocking::rpc_client::RpcClient;
use solana_rpc_client::rpc_client::RpcClientConfig;
use solana_rpc_client_api::client_error::{Error as ClientError, ErrorKind, TransactionError};
use solana_rpc_client_api::config::{
    RpcAccountInfoConfig, RpcProgramAccountsConfig, RpcSimulateTransactionConfig,
};
use solana_rpc_client_api::custom_error as code;
use solana_rpc_client_api::filter::{Memcmp, RpcFilterType};
use solana_rpc_client_api::request::{
    RpcError, RpcRequest, RpcResponseErrorData, TokenAccountsFilter,
};
use solana_rpc_client_api::response::{OptionalContext, RpcKeyedAccount};
use solana_signer::Signer;
use solana_transaction::Transaction;
use tokio::sync::Mutex;

use super::mirror::Mirror;
use super::placement::{Listing, Placement, Policy};
use super::traffic::{Counting, Traffic};
use super::{
    BidKind, BidView, Chain, ChainError, EgressView, Gang, GpuView, Key, LeaseView, MachineStatus,
    MachineView, NetworkView, OpenBids, RoomAsked, GANG_PLACEMENTS,
};

/// Where `market` sits in machine and lease accounts: right after the discriminator.
pub(super) const MARKET_OFFSET: usize = 8;
/// The offset of `Lease.machine`, which the websocket and `getProgramAccounts` filter on
/// (after the 8-byte discriminator).
const LEASE_MACHINE_OFFSET: usize = 8 + 32;
/// `getMultipleAccounts` takes at most this many keys.
const MULTIPLE_ACCOUNTS_MAX: usize = 100;

pub(super) fn pubkey(k: Key) -> Pubkey {
    Pubkey::new_from_array(k.0)
}

pub(super) fn key(p: &Pubkey) -> Key {
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
    /// The most a transaction offers per compute unit, in micro-lamports (0: no priority fee).
    max_priority_fee: u64,
    /// The last price chosen and when: recent fees are read at most every
    /// [`PRICE_REFRESH`], not once per transaction.
    price: Mutex<Option<(tokio::time::Instant, Option<u64>)>>,
    /// The accounts the websocket feed keeps current: read there first.
    mirror: Option<Arc<Mirror>>,
    /// The gang bids this machine sends `allocate_gang` for (the packing policy gives it their
    /// first part), with each part's machine and GPUs as the policy placed them.
    gangs: std::sync::Mutex<HashMap<Pubkey, GangPlan>>,
    /// Where the parts of each gang bid this machine runs a part of are reached (each part's
    /// machine's host, and the first part's recorded rendezvous port), once recorded.
    gang_hosts: std::sync::Mutex<HashMap<Pubkey, (Vec<String>, u16)>>,
    /// The agent keys each sealed bid's environment is sealed to, and when they were read.
    pub(super) sealed: std::sync::Mutex<HashMap<Pubkey, super::placement::SealedRead>>,
    /// The packing policy's view the last look at the books kept for the next, and how many
    /// views were built from a listing of the market ([`Self::views_built`]).
    pub(super) kept: std::sync::Mutex<Option<super::placement::KeptView>>,
    pub(super) views_built: std::sync::atomic::AtomicU64,
    /// Placements the packing policy was asked for ([`Self::placements_asked`]).
    pub(super) placements_asked: std::sync::atomic::AtomicU64,
    /// Waiting gang bids as read, by their place in the queue (`BookLeaf::seq`): what their
    /// reservations need of them (terms, latest start) does not change while they wait.
    pub(super) waiting_gangs: std::sync::Mutex<HashMap<Pubkey, (u64, Bid)>>,
}

/// Each part of a gang bid in the gang's order: its machine and the GPUs it takes there.
type GangPlan = Vec<(Pubkey, Vec<u8>)>;

/// How often a sent transaction's status is looked at until it is confirmed.
const CONFIRM_POLL: Duration = Duration::from_millis(100);

/// How long a chosen priority price is reused.
const PRICE_REFRESH: Duration = Duration::from_secs(10);

impl SolanaChain {
    /// The chain over HTTP JSON-RPC at `rpc_url`, each exchange counted into `traffic`.
    pub fn new(
        rpc_url: String,
        commitment: CommitmentConfig,
        traffic: Arc<Traffic>,
        agent: Keypair,
        market: Key,
        machine: Key,
        host_tokens: Option<Key>,
    ) -> Self {
        let rpc = RpcClient::new_sender(
            Counting::new(
                HttpSender::new_with_timeout(rpc_url, Duration::from_secs(30)),
                traffic,
            ),
            RpcClientConfig::with_commitment(commitment),
        );
        Self::with_client(rpc, agent, market, machine, host_tokens)
    }

    /// The chain over `rpc`, a client of any transport (the tests' in-process node over
    /// LiteSVM is one), at the client's commitment.
    pub fn with_client(
        rpc: RpcClient,
        agent: Keypair,
        market: Key,
        machine: Key,
        host_tokens: Option<Key>,
    ) -> Self {
        SolanaChain {
            rpc,
            agent,
            market: pubkey(market),
            machine: pubkey(machine),
            host_tokens: Mutex::new(host_tokens.map(pubkey)),
            max_priority_fee: 0,
            price: Mutex::new(None),
            mirror: None,
            gangs: std::sync::Mutex::default(),
            gang_hosts: std::sync::Mutex::default(),
            sealed: std::sync::Mutex::default(),
            kept: std::sync::Mutex::default(),
            views_built: std::sync::atomic::AtomicU64::new(0),
            placements_asked: std::sync::atomic::AtomicU64::new(0),
            waiting_gangs: std::sync::Mutex::default(),
        }
    }

    /// Reads the accounts `mirror` keeps current (fed by `watch`) from it rather than from the
    /// RPC node, while the feed is subscribed.
    pub fn with_mirror(mut self, mirror: Arc<Mirror>) -> Self {
        self.mirror = Some(mirror);
        self
    }

    /// The market's queue book and the machine's spot book (those that are set).
    pub async fn books(&self) -> Result<Vec<Key>, ChainError> {
        let (market, machine) = self.market_and_machine().await?;
        Ok([market.queue_book, machine.spot_book]
            .into_iter()
            .filter(|b| *b != Pubkey::default())
            .map(|b| key(&b))
            .collect())
    }

    /// Offers a priority fee on each transaction from the cluster's recent fees, up to
    /// `micro_lamports` per compute unit (0: none).
    pub fn with_priority_fee_cap(mut self, micro_lamports: u64) -> Self {
        self.max_priority_fee = micro_lamports;
        self
    }

    /// The compute-unit price to offer for `ixs`: recent fees, capped, reused for a while.
    async fn priority_price(&self, ixs: &[Instruction]) -> Option<u64> {
        if self.max_priority_fee == 0 {
            return None;
        }
        let mut cached = self.price.lock().await;
        if let Some((at, price)) = *cached {
            if at.elapsed() < PRICE_REFRESH {
                return price;
            }
        }
        let price = super::fees::priority_price(&self.rpc, ixs, self.max_priority_fee)
            .await
            .unwrap_or_else(|e| {
                tracing::warn!(error = %crate::redact::redact_urls(&e.to_string()), "no recent priority fees; sending without");
                None
            });
        *cached = Some((tokio::time::Instant::now(), price));
        price
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

    /// The accounts at `keys`, in order (`None` where there is none): from the mirror where
    /// it is current, the rest from the RPC node.
    async fn raw_accounts(&self, keys: &[Pubkey]) -> Result<Vec<Option<Vec<u8>>>, ChainError> {
        let Some(mirror) = &self.mirror else {
            return self.rpc_accounts(keys).await;
        };
        let found = mirror.get(keys);
        if found.missing.is_empty() {
            return Ok(found.accounts.into_iter().map(Option::flatten).collect());
        }
        let mut read = self.rpc_accounts(&found.missing).await?.into_iter();
        Ok(found
            .accounts
            .into_iter()
            .map(|a| a.unwrap_or_else(|| read.next().flatten()))
            .collect())
    }

    /// The accounts at `keys` as the RPC node has them; those the mirror follows are kept
    /// there.
    async fn rpc_accounts(&self, keys: &[Pubkey]) -> Result<Vec<Option<Vec<u8>>>, ChainError> {
        let mut out = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(MULTIPLE_ACCOUNTS_MAX) {
            let got = self
                .rpc
                .get_multiple_accounts_with_commitment(chunk, self.rpc.commitment())
                .await
                .map_err(|e| classify("read", &e))?;
            let slot = got.context.slot;
            for (k, a) in chunk.iter().zip(got.value) {
                let data = a.map(|a| a.data);
                if let Some(m) = &self.mirror {
                    m.answered(*k, slot, data.as_deref());
                }
                out.push(data);
            }
        }
        Ok(out)
    }

    pub(super) async fn account<T: AccountDeserialize>(
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

    /// A book's entries, best first (`None` for an unset or missing book).
    async fn read_book(&self, book: &Pubkey) -> Result<Option<BookEntries>, ChainError> {
        if *book == Pubkey::default() {
            return Ok(None);
        }
        match self.raw_accounts(&[*book]).await?.pop().flatten() {
            Some(d) => book_entries(&d, book).map(Some),
            None => Ok(None),
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

    /// Sends `ixs` on `blockhash` with the priority price recent fees on the accounts they
    /// write ask (see [`super::fees`]).
    async fn send_all(
        &self,
        op: &'static str,
        ixs: &[Instruction],
        blockhash: solana_message::Hash,
    ) -> Result<(), ChainError> {
        let price = self.priority_price(ixs).await;
        let ixs = &super::fees::with_price(price, ixs)[..];
        let tx = Transaction::new_signed_with_payer(
            ixs,
            Some(&self.agent.pubkey()),
            &[&self.agent],
            blockhash,
        );
        self.send_and_confirm(&tx)
            .await
            .map_err(|e| classify(op, &e))
    }

    /// Sends `tx` (after the node's preflight) and learns of its confirmation at the client's
    /// commitment from a short poll of its status, every [`CONFIRM_POLL`], until its blockhash
    /// expires. The client library's own loop waits half a second between looks, and a second
    /// request each time: a transaction confirmed in one slot waited up to a slot more.
    async fn send_and_confirm(&self, tx: &Transaction) -> Result<(), ClientError> {
        let signature = self.rpc.send_transaction(tx).await?;
        for look in 1u32.. {
            match self
                .rpc
                .get_signature_status_with_commitment(&signature, self.rpc.commitment())
                .await?
            {
                Some(Ok(())) => return Ok(()),
                Some(Err(e)) => return Err(e.into()),
                None => {}
            }
            // About every two seconds: has the transaction's blockhash expired?
            if look.is_multiple_of(20)
                && !self
                    .rpc
                    .is_blockhash_valid(&tx.message.recent_blockhash, CommitmentConfig::processed())
                    .await?
            {
                break;
            }
            tokio::time::sleep(CONFIRM_POLL).await;
        }
        Err(RpcError::ForUser(
            "unable to confirm the transaction before its blockhash expired".to_string(),
        )
        .into())
    }

    /// Sends `ix` with the compute budget it needs: a simulation under the most a transaction
    /// may ask tells the units it uses and the account data it loads (and, when the program
    /// refuses it, why), and the transaction asks [`budget::sized`] of that. The leader
    /// reserves what a transaction asks, of its block and of each account it writes (the
    /// market's among them), while it packs it: unasked, 200,000 units and 64 MiB of data,
    /// ten to a hundred times what a heartbeat, a claim or a settlement uses. `allocate` walks
    /// the book above the chosen bid, so it may need more than that default.
    pub(super) async fn send(&self, op: &'static str, ix: Instruction) -> Result<(), ChainError> {
        let blockhash = self
            .rpc
            .get_latest_blockhash()
            .await
            .map_err(|e| classify(op, &e))?;
        let probe = Transaction::new_signed_with_payer(
            &budget::probe(std::slice::from_ref(&ix)),
            Some(&self.agent.pubkey()),
            &[&self.agent],
            blockhash,
        );
        let sim = self
            .rpc
            .simulate_transaction_with_config(
                &probe,
                RpcSimulateTransactionConfig {
                    commitment: Some(self.rpc.commitment()),
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| classify(op, &e))?
            .value;
        if let Some(err) = sim.err {
            return Err(refusal(op, sim.logs.as_deref(), &err.into()));
        }
        let used = sim.units_consumed.unwrap_or(MAX_COMPUTE_UNITS as u64);
        let loaded = sim.loaded_accounts_data_size;
        tracing::debug!(op, used, loaded, "compute budget from the simulation");
        self.send_all(op, &budget::sized(used, loaded, &[ix]), blockhash)
            .await
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
            .map_err(|e| classify(op, &e))?
            .iter()
            .filter_map(|a| a.pubkey.parse().ok())
            .collect();
        found.sort();
        found.first().copied().ok_or_else(|| {
            ChainError::rejected(
                op,
                format!("{owner} holds no token account of the payment mint {mint}"),
            )
        })
    }

    /// `account` when it is a live token account of `owner` for `mint` (one
    /// `getMultipleAccounts`), `None` when it is closed or no longer one.
    async fn live_token_account(
        &self,
        account: &Pubkey,
        owner: &Pubkey,
        mint: &Pubkey,
    ) -> Result<Option<Pubkey>, ChainError> {
        let keys = std::slice::from_ref(account);
        let got = self
            .rpc
            .get_multiple_accounts_with_commitment(keys, self.rpc.commitment())
            .await
            .map_err(|e| classify("read", &e))?
            .value;
        let live = got
            .into_iter()
            .flatten()
            .any(|a| gpu_market_sdk::token::is_account_of(&a.owner, &a.data, owner, mint));
        Ok(live.then_some(*account))
    }

    async fn host_tokens(&self, machine: &Machine, market: &Market) -> Result<Pubkey, ChainError> {
        let mut cached = self.host_tokens.lock().await;
        if let Some(k) = *cached {
            return Ok(k);
        }
        let k = self
            .token_account_of(&machine.owner, &market.payment_mint, "claim_pay")
            .await?;
        *cached = Some(k);
        Ok(k)
    }

    /// What a reservation of `bid` (by instruction `name`) reads: the market, the bid, every
    /// machine and running lease of the market, and the machines whose reservations hold the
    /// entries ranked above the bid in the queue book.
    async fn reserving(
        &self,
        bid: Pubkey,
        name: &'static str,
    ) -> Result<(Market, Bid, Listing, Vec<Pubkey>), ChainError> {
        let got = self.raw_accounts(&[self.market, bid]).await?;
        let market: Market = decoded(got[0].as_deref(), "market", &self.market)?;
        let b: Bid = decoded(got[1].as_deref(), "bid", &bid)?;
        let book = self
            .read_book(&market.queue_book)
            .await?
            .ok_or_else(|| ChainError::rejected(name, "no queue book"))?;
        let above: Vec<Pubkey> = book
            .entries
            .iter()
            .take_while(|l| l.bid != bid)
            .map(|l| l.bid)
            .collect();
        let listing = self.market_listing().await?;
        let holding = listing
            .0
            .iter()
            .filter(|(_, m)| above.contains(&m.reservation.bid))
            .map(|(k, _)| *k)
            .collect();
        Ok((market, b, listing, holding))
    }

    /// The lease accounts of this machine: from the mirror when it knows them all, else from
    /// a scan by the RPC node (which the mirror then keeps).
    async fn lease_accounts(&self) -> Result<Vec<(Pubkey, Lease)>, ChainError> {
        let found = match self.mirror.as_ref().and_then(|m| m.leases()) {
            Some(found) => found,
            None => self.scan_leases().await?,
        };
        Ok(found
            .iter()
            .filter_map(|(k, data)| Some((*k, decode(data, "lease").ok()?)))
            .collect())
    }

    async fn scan_leases(&self) -> Result<Vec<(Pubkey, Vec<u8>)>, ChainError> {
        let (slot, found) = self
            .program_accounts(lease_filters(&self.machine), None)
            .await?;
        if let Some(m) = &self.mirror {
            m.scanned_leases(slot, &found);
        }
        Ok(found)
    }

    /// How many times the packing policy's view was built from a listing of the market's
    /// machines and leases: once while the feed follows the market, where the view is kept
    /// and moved by what changes; at every look at the books that needs it without a feed.
    pub fn views_built(&self) -> u64 {
        self.views_built.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many bids (a gang counting once) the looks at the books asked the packing policy to
    /// place: at most the bids a look lists and [`GANG_PLACEMENTS`] gangs a look.
    pub fn placements_asked(&self) -> u64 {
        self.placements_asked
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(super) fn mirror(&self) -> Option<&Mirror> {
        self.mirror.as_deref()
    }

    pub(super) fn market(&self) -> Pubkey {
        self.market
    }

    pub(super) fn machine(&self) -> Pubkey {
        self.machine
    }

    pub(super) fn agent_key(&self) -> &Keypair {
        &self.agent
    }

    /// The program's accounts that pass `filters` (of each only the `(offset, length)` bytes of
    /// `slice`, where given), and the slot the node read them at (0 when it does not say).
    pub(super) async fn program_accounts(
        &self,
        filters: Vec<RpcFilterType>,
        slice: Option<(usize, usize)>,
    ) -> Result<(u64, Vec<(Pubkey, Vec<u8>)>), ChainError> {
        let config = RpcProgramAccountsConfig {
            filters: Some(filters),
            account_config: RpcAccountInfoConfig {
                encoding: Some(UiAccountEncoding::Base64),
                commitment: Some(self.rpc.commitment()),
                data_slice: slice.map(|(offset, length)| UiDataSliceConfig { offset, length }),
                ..Default::default()
            },
            with_context: Some(true),
            sort_results: Some(true),
        };
        let answer = self
            .rpc
            .send::<OptionalContext<Vec<RpcKeyedAccount>>>(
                RpcRequest::GetProgramAccounts,
                serde_json::json!([gpu_market::ID.to_string(), config]),
            )
            .await
            .map_err(|e| classify("read", &e))?;
        let (slot, accounts) = match answer {
            OptionalContext::Context(r) => (r.context.slot, r.value),
            // A node that gives no slot: the notifications since take precedence.
            OptionalContext::NoContext(v) => (0, v),
        };
        let found = accounts
            .into_iter()
            .filter_map(|a| Some((a.pubkey.parse().ok()?, a.account.data.decode()?)))
            .collect();
        Ok((slot, found))
    }

    /// The bids of `candidates` (one book's entries of `kind` that may fit, best first) that
    /// the program lets this machine take, at most `limit`: each that fits `now_offers` (with
    /// the GPUs the fit rule gives it) or one of `if_ended` (a spot lease's end), each as the
    /// machine's reservation lets its run use them (`Offers::for_run`), and in the
    /// queue book, as the anti-monopoly cap allows ([`CapFilter`]).
    async fn admissible(
        &self,
        policy: &mut Policy<'_>,
        kind: ProgramBidKind,
        candidates: &[&BookLeaf],
        now_offers: &Offers,
        if_ended: &[(Pubkey, Offers)],
        limit: usize,
    ) -> Result<Admissible, ChainError> {
        let queue = kind == ProgramBidKind::Queue;
        let mut caps = CapFilter::default();
        let mut spot = Vec::new();
        let (mut gangs_asked, mut gangs_left) = (0, 0);
        for chunk in candidates.chunks(MULTIPLE_ACCOUNTS_MAX / 2) {
            if caps.listed.len() + spot.len() >= limit {
                break;
            }
            let keys: Vec<Pubkey> = chunk.iter().map(|l| l.bid).collect();
            let bids = self.bids(&keys).await?;
            if queue {
                let mut clients: Vec<Pubkey> = bids
                    .iter()
                    .map(|(_, b)| b.client)
                    .filter(|c| !caps.held.contains_key(c))
                    .collect();
                clients.sort();
                clients.dedup();
                let stakes: Vec<Pubkey> = clients
                    .iter()
                    .map(|c| pda::stake(&self.market, c).0)
                    .collect();
                for (client, data) in clients.iter().zip(self.raw_accounts(&stakes).await?) {
                    if let Some(s) = data.and_then(|d| decode::<StakeAccount>(&d, "stake").ok()) {
                        caps.held.insert(*client, s.gpus_held as u64);
                    }
                }
            }
            for (k, b) in &bids {
                let until = b.runs_until(now_offers.now.now());
                let now_offer = now_offers.for_run(k, until);
                let mut gpus = b.fit(now_offer).ok().map(|c| c.gpus().to_vec());
                let fits_if_ended: Vec<Key> = match gpus {
                    Some(_) => Vec::new(),
                    None => if_ended
                        .iter()
                        .filter(|(_, o)| b.fit(o.for_run(k, until)).is_ok())
                        .map(|(l, _)| key(l))
                        .collect(),
                };
                if gpus.is_none() && fits_if_ended.is_empty() {
                    continue;
                }
                let within =
                    |held, more| policy.market.within_client_cap(held, more, now_offer.now());
                let single = queue && !b.is_gang();
                if single && !caps.may_keep(&b.client, b.total_gpus(), gpus.is_some(), within) {
                    // Nothing the policy says would list it: not asked. (A gang is asked about
                    // within its own budget: its other parts' agents walk for it, and their
                    // caps count from their own machines' bids.)
                    caps.add(
                        bid_view(k, b, gpus, fits_if_ended),
                        &b.client,
                        b.total_gpus(),
                        within,
                    );
                    continue;
                }
                // Which machine the market's packing policy gives it, and there which GPUs; for
                // a bid that fits here only once a spot lease ends, whether another machine
                // fits it now (then no lease here is stopped for it).
                let (mut elsewhere, mut gang) = (None, None);
                // A sealed bid goes first to the machines that can open its environment.
                let holders = match queue {
                    true => self.sealed_holders(policy, k, b).await?,
                    false => None,
                };
                let sealed = holders.as_deref().map_or(Sealed::No, Sealed::To);
                if b.is_gang() {
                    // Every part at once: listed only where the policy gives this machine the
                    // first part, whose agent sends `allocate_gang`.
                    if gpus.is_none() {
                        continue;
                    }
                    if gangs_asked == GANG_PLACEMENTS {
                        gangs_left += 1;
                        continue;
                    }
                    gangs_asked += 1;
                    let Some(parts) = self.gang_placement(policy, b, sealed).await? else {
                        continue;
                    };
                    if parts[0].machine != self.machine() {
                        // Another part's agent starts it: this machine walks a deep book for
                        // it first, as `allocate_gang` judges the entries above it here too.
                        if parts.iter().any(|p| p.machine == self.machine()) {
                            let (book, queue) = (policy.market.queue_book, policy.queue());
                            if let Err(e) = self.walk_for_gang(book, queue, k, now_offers).await {
                                tracing::warn!(bid = %k, error = %e, "walking the book for a gang failed");
                            }
                        }
                        continue;
                    }
                    gpus = Some(parts[0].gpus.clone());
                    gang = Some(Gang {
                        part: 0,
                        parts: b.parts,
                        hosts: parts.iter().map(|p| host_of(policy, &p.machine)).collect(),
                        port: b.ports.first().copied().unwrap_or(0),
                        rendezvous: None,
                    });
                    let plan = parts.into_iter().map(|p| (p.machine, p.gpus)).collect();
                    self.gangs
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(*k, plan);
                } else if queue {
                    let placement = self.placement(policy, b, sealed).await?;
                    // Why this machine takes a bid or leaves it: the policy's answer, with as
                    // many fields as a market of 10,000 machines can log at every look.
                    tracing::debug!(
                        bid = %k,
                        now = now_offer.now(),
                        ?placement,
                        machines = policy.machines().len(),
                        "the packing policy's answer for a bid"
                    );
                    match placement {
                        Some(Placement::Here(chosen)) if gpus.is_some() => {
                            let overclock = b.overclock_per_gpu();
                            if now_offer.check_choice(&b.need(&overclock), &chosen).is_ok() {
                                gpus = Some(chosen);
                            }
                        }
                        Some(Placement::Elsewhere(machine)) => elsewhere = Some(machine),
                        _ => {}
                    }
                }
                let view = BidView {
                    elsewhere,
                    gang,
                    ..bid_view(k, b, gpus, fits_if_ended)
                };
                if queue {
                    let market = policy.market;
                    let now = now_offer.now();
                    caps.add(view, &b.client, b.total_gpus(), |held, more| {
                        market.within_client_cap(held, more, now)
                    });
                } else {
                    spot.push(view);
                }
                if caps.listed.len() + spot.len() >= limit {
                    break;
                }
            }
        }
        Ok(Admissible {
            bids: if queue { caps.finish() } else { spot },
            gangs_left,
        })
    }

    /// Where the parts of gang bid `bid` (of `parts` parts) are reached: each part's machine's
    /// public address (empty for a part whose lease is gone), and the host port the first
    /// part's agent recorded for its rendezvous (`None` until then). Read from the parts' leases
    /// and machines (two requests) until the port is recorded, then kept for the gang's life.
    async fn gang_hosts(
        &self,
        bid: &Pubkey,
        parts: u8,
    ) -> Result<(Vec<String>, Option<u16>), ChainError> {
        if let Some((hosts, port)) = self
            .gang_hosts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(bid)
        {
            return Ok((hosts.clone(), Some(*port)));
        }
        let keys: Vec<Pubkey> = (0..parts).map(|p| pda::gang_lease(bid, p).0).collect();
        let leases: Vec<Option<Lease>> = self
            .raw_accounts(&keys)
            .await?
            .iter()
            .zip(&keys)
            .map(|(d, k)| {
                d.as_deref()
                    .map(|d| decoded(Some(d), "lease", k))
                    .transpose()
            })
            .collect::<Result<_, _>>()?;
        let machines: Vec<Pubkey> = leases.iter().flatten().map(|l| l.machine).collect();
        let got = self.raw_accounts(&machines).await?;
        let mut hosts_of = HashMap::new();
        for (k, data) in machines.iter().zip(&got) {
            let machine: Machine = decoded(data.as_deref(), "machine", k)?;
            hosts_of.insert(*k, machine.network.host);
        }
        let hosts: Vec<String> = leases
            .iter()
            .map(|l| {
                l.as_ref()
                    .and_then(|l| hosts_of.get(&l.machine).cloned())
                    .unwrap_or_default()
            })
            .collect();
        let rendezvous = leases[0].as_ref().map_or(0, |l| l.rendezvous_port);
        if rendezvous == 0 {
            return Ok((hosts, None));
        }
        if leases.iter().all(Option::is_some) {
            self.gang_hosts
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(*bid, (hosts.clone(), rendezvous));
        }
        Ok((hosts, Some(rendezvous)))
    }

    /// The parts of gang bid `bid` as the policy placed them when this machine last listed it,
    /// if this machine sends its `allocate_gang`.
    fn gang_plan(&self, bid: &Pubkey) -> Option<GangPlan> {
        let plans = self.gangs.lock().unwrap_or_else(PoisonError::into_inner);
        plans.get(bid).cloned()
    }

    /// Starts every part of gang bid `bid` as `plan` places them (this machine's first), with
    /// the evidence the book needs for all their machines; returns this machine's lease.
    async fn allocate_gang(&self, bid: Pubkey, plan: GangPlan) -> Result<Key, ChainError> {
        let clock = solana_sdk_ids::sysvar::clock::ID;
        let mut keys = vec![self.market, bid, clock];
        keys.extend(plan.iter().map(|(m, _)| *m));
        let got = self.raw_accounts(&keys).await?;
        let market: Market = decoded(got[0].as_deref(), "market", &self.market)?;
        let b: Bid = decoded(got[1].as_deref(), "bid", &bid)?;
        let now = clock_time(got[2].as_deref())?;
        let mut machines = plan
            .iter()
            .zip(&got[3..])
            .map(|((k, _), data)| decoded::<Machine>(data.as_deref(), "machine", k))
            .collect::<Result<Vec<_>, ChainError>>()?;
        let stake = pda::stake(&self.market, &b.client).0;
        let got = self.raw_accounts(&[market.queue_book, stake]).await?;
        let entries = match got[0].as_deref() {
            Some(d) => book_entries(d, &market.queue_book)?,
            None => {
                return Err(ChainError::rejected(
                    AllocateGang::NAME,
                    format!("no queue book at {}", market.queue_book),
                ))
            }
        };
        let stake: StakeAccount = decoded(got[1].as_deref(), "stake", &stake)?;
        let within_cap = market.within_client_cap(stake.gpus_held as u64, b.total_gpus(), now);
        // Below a deep book this machine (the first part's) walks it first, as the other
        // parts' agents do (`walk_for_gang`).
        machines[0] = self
            .walked_above(
                market.queue_book,
                &entries.entries,
                &bid,
                machines[0].clone(),
            )
            .await?;
        let parts_offers = machines
            .iter()
            .map(|m| offers(m, &market, ProgramBidKind::Queue, now, &Freed::default()))
            .collect::<Result<Vec<_>, ChainError>>()?;
        let walks: Vec<&BookWalk> = machines.iter().map(|m| &m.walk).collect();
        let evidence = entries.allocate_evidence_walked(
            &market.queue_book,
            &bid,
            &parts_offers,
            within_cap,
            &walks,
        );
        // Built and dropped before any await: a signer is not `Sync`.
        let (lease, ix) = {
            let ix = AllocateGang {
                agent: &self.agent,
                market: self.market,
                book: market.queue_book,
                bid,
                client: b.client,
                evidence,
                parts: plan,
            };
            (ix.leases()[0], ix.instruction())
        };
        self.send(AllocateGang::NAME, ix).await?;
        self.gangs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&bid);
        Ok(key(&lease))
    }

    /// The agent's view of lease `l` (of `bid`): its proof windows follow the interval the lease
    /// started with (`l.rules`), whatever the market's parameters are now.
    fn lease_view(&self, key: Pubkey, l: &Lease, bid: &Bid) -> LeaseView {
        LeaseView {
            gang: None,
            gang_broken: false,
            key: self::key(&key),
            bid: self::key(&l.bid),
            client: self::key(&l.client),
            kind: kind(l.kind),
            price: l.price,
            gpu_indices: l.gpus().to_vec(),
            gib_per_gpu: l.gib_per_gpu,
            overclock: (0..l.gpu_count as usize)
                .map(|i| bid.terms_of(i).to_core())
                .collect(),
            image_ref: bid.image_ref.clone(),
            image_digest: bid.image_digest,
            env_hash: bid.env_hash,
            room: room_asked(bid),
            started_at: l.started_at,
            ends_at: l.ends_at,
            stop_at: (l.stop_at != Lease::NOT_STOPPED).then_some(l.stop_at),
            interval_secs: l.rules.billing_interval_secs,
            silence_intervals: l.rules.silence_intervals,
            next_interval: l.next_interval,
            proof_hash: l.proof_hash,
            auto_power: l.auto_power,
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
        .map_err(|reason| ChainError::rejected("read", reason))
}

fn kind(k: ProgramBidKind) -> BidKind {
    match k {
        ProgramBidKind::Queue => BidKind::Queue,
        ProgramBidKind::Spot => BidKind::Spot,
    }
}

fn bid_view(k: &Pubkey, b: &Bid, gpus: Option<Vec<u8>>, fits_if_ended: Vec<Key>) -> BidView {
    BidView {
        gang: None,
        key: key(k),
        client: key(&b.client),
        kind: kind(b.kind),
        gpu_count: b.gpu_count,
        gib_per_gpu: b.gib_per_gpu,
        accepted_classes: b.accepted_classes,
        gpus,
        fits_if_ended,
        elsewhere: None,
        overclock: b.overclock_per_gpu(),
        price: b.price,
        max_duration_secs: b.max_duration_secs,
        deadline: b.deadline,
        latest_start: b.latest_start(),
        image_ref: b.image_ref.clone(),
        image_digest: b.image_digest,
        env_hash: b.env_hash,
        room: room_asked(b),
        regions: b.regions.clone(),
        auto_power: b.auto_power,
    }
}

fn room_asked(b: &Bid) -> RoomAsked {
    RoomAsked {
        ports: b.ports.clone(),
        scratch_gib: b.scratch_gib,
        host: b.host(),
    }
}

/// The machine account's network declaration, with the CPU and memory it gives its leases.
fn network_view(m: &Machine) -> NetworkView {
    let n = &m.network;
    NetworkView {
        egress: match n.egress {
            Egress::None => EgressView::None,
            Egress::Open => EgressView::Open,
            Egress::AllowList => EgressView::AllowList(
                n.allow
                    .iter()
                    .map(|c| (std::net::Ipv4Addr::from(c.addr), c.prefix))
                    .collect(),
            ),
        },
        room: n.room(m.host()),
    }
}

/// The bids of a book that a look lists, and the gang bids it left for a later look.
struct Admissible {
    bids: Vec<BidView>,
    gangs_left: usize,
}

/// The queue book's anti-monopoly cap as `allocate` and `preempt` apply it, over the bids that
/// fit the machine now or once a spot lease ends, added best first. A bid that fits now may run
/// while its client stays within the cap, counting the GPUs of its bids listed before it (the
/// agent allocates them first); one over the cap may run only where it is the first that fits
/// and no bid within its client's cap fits now, so that the cap never keeps GPUs idle that
/// nobody else is waiting for. A bid that fits only once a spot lease ends may preempt it only
/// within its client's cap (`preempt` makes no exception); it runs once the lease has ended,
/// so it changes nothing for the bids that fit now.
#[derive(Default)]
struct CapFilter {
    /// GPUs each client holds (from its stake account), and will once its listed bids that fit
    /// now run.
    held: HashMap<Pubkey, u64>,
    listed: Vec<BidView>,
    /// The first bid that fits now, where its client is over the cap, and its place in
    /// `listed`.
    first_over_cap: Option<(usize, BidView)>,
    /// Whether a bid that fits now came before.
    any: bool,
    /// Whether a bid that fits now within its client's cap is listed.
    any_within: bool,
}

impl CapFilter {
    /// Adds a bid that fits now or once a spot lease ends: `view`, of `client`, for `gpus`
    /// GPUs; `within(held, more)` is the market's cap (`Market::within_client_cap`). A client
    /// without a stake account is not listed (`allocate` and `preempt` need it).
    fn add(
        &mut self,
        view: BidView,
        client: &Pubkey,
        gpus: u64,
        within: impl Fn(u64, u64) -> bool,
    ) {
        let fits_now = view.gpus.is_some();
        let first = fits_now && !std::mem::replace(&mut self.any, true);
        let Some(held) = self.held.get_mut(client) else {
            return;
        };
        if within(*held, gpus) {
            if fits_now {
                *held += gpus;
                self.any_within = true;
            }
            self.listed.push(view);
        } else if first {
            self.first_over_cap = Some((self.listed.len(), view));
        }
    }

    /// Whether [`CapFilter::add`] may keep a bid of `client` for `gpus` GPUs (`fits_now`):
    /// one within its client's cap, or the first that fits now. Another changes nothing that
    /// `add` keeps but whether a bid that fits now came before, so it needs no placement.
    fn may_keep(
        &self,
        client: &Pubkey,
        gpus: u64,
        fits_now: bool,
        within: impl Fn(u64, u64) -> bool,
    ) -> bool {
        self.held
            .get(client)
            .is_some_and(|&held| within(held, gpus) || (fits_now && !self.any))
    }

    fn finish(mut self) -> Vec<BidView> {
        if let Some((at, view)) = self.first_over_cap.filter(|_| !self.any_within) {
            self.listed.insert(at, view);
        }
        self.listed
    }
}

/// The entries of the book account `data` (read at `address`).
fn book_entries(data: &[u8], address: &Pubkey) -> Result<BookEntries, ChainError> {
    read_book(data).ok_or_else(|| {
        ChainError::rejected("read", format!("{address} is not an initialised bid book"))
    })
}

/// What `machine` offers bids of `kind` at `now` with `freed` counted free (`Machine::offers`, as
/// the program builds them), a machine that cannot be priced a refusal.
pub(super) fn offers(
    machine: &Machine,
    market: &Market,
    kind: ProgramBidKind,
    now: i64,
    freed: &Freed,
) -> Result<Offers, ChainError> {
    machine
        .offers(market, kind, now, freed)
        .map_err(|e| ChainError::rejected("read", format!("the machine's offers: {e}")))
}

/// The unix time of the clock sysvar's account data.
fn clock_time(data: Option<&[u8]>) -> Result<i64, ChainError> {
    let data = data.ok_or_else(|| ChainError::Unavailable("the clock sysvar is missing".into()))?;
    let clock: solana_clock::Clock = bincode::deserialize(data)
        .map_err(|e| ChainError::Unavailable(format!("the clock sysvar: {e}")))?;
    Ok(clock.unix_timestamp)
}

/// Errors of a transaction that may pass when sent again (after observing again): it may have
/// landed, its blockhash expired, or the cluster was too busy to take it.
fn transient(t: &TransactionError) -> bool {
    matches!(
        t,
        TransactionError::BlockhashNotFound
            | TransactionError::AlreadyProcessed
            | TransactionError::AccountInUse
            | TransactionError::ClusterMaintenance
            | TransactionError::WouldExceedMaxBlockCostLimit
            | TransactionError::WouldExceedMaxVoteCostLimit
            | TransactionError::WouldExceedMaxAccountCostLimit
            | TransactionError::WouldExceedAccountDataBlockLimit
            | TransactionError::WouldExceedAccountDataTotalLimit
            | TransactionError::ProgramExecutionTemporarilyRestricted { .. }
    )
}

/// JSON-RPC error codes by which a node refuses a request as it stands: malformed or too large
/// a transaction, bad signatures, a failed preflight. Every other code (node unhealthy, slot
/// not reached, ...) is the node's state, not the request's.
const REFUSAL_CODES: [i64; 8] = [
    -32600, // invalid request
    -32601, // method not found
    -32602, // invalid params: e.g. "VersionedTransaction too large"
    code::JSON_RPC_SERVER_ERROR_SEND_TRANSACTION_PREFLIGHT_FAILURE,
    code::JSON_RPC_SERVER_ERROR_TRANSACTION_SIGNATURE_VERIFICATION_FAILURE,
    code::JSON_RPC_SERVER_ERROR_TRANSACTION_PRECOMPILE_VERIFICATION_FAILURE,
    code::JSON_RPC_SERVER_ERROR_TRANSACTION_SIGNATURE_LEN_MISMATCH,
    code::JSON_RPC_SERVER_ERROR_UNSUPPORTED_TRANSACTION_VERSION,
];

/// A transaction that failed with `t` (its simulation's `logs` where there are some): refused,
/// with the program's own message when it logged one, unless the failure is [`transient`].
fn refusal(op: &'static str, logs: Option<&[String]>, t: &TransactionError) -> ChainError {
    if transient(t) {
        return ChainError::Unavailable(format!("{op}: {t}"));
    }
    let message = logs
        .into_iter()
        .flatten()
        .find_map(|l| l.split_once("Error Message: ").map(|(_, m)| m.to_string()));
    let reason = match message {
        Some(m) => format!("{m} ({t})"),
        None => t.to_string(),
    };
    let code = match t {
        TransactionError::InstructionError(_, InstructionError::Custom(c)) => Some(*c),
        _ => None,
    };
    ChainError::Rejected { op, reason, code }
}

/// Refused or unreachable: a refusal by the program, by the runtime's checks of the transaction
/// (size, signatures, fee payer) or by the node's checks of the request is final, with its
/// reason; anything else (no answer, a timeout, a confirmation that never came, a node behind)
/// may or may not have landed and is worth retrying after observing again.
fn classify(op: &'static str, e: &ClientError) -> ChainError {
    if let Some(t) = e.kind().get_transaction_error() {
        let logs = match e.kind() {
            ErrorKind::RpcError(RpcError::RpcResponseError {
                data: RpcResponseErrorData::SendTransactionPreflightFailure(sim),
                ..
            }) => sim.logs.as_deref(),
            _ => None,
        };
        return refusal(op, logs, &t);
    }
    match e.kind() {
        ErrorKind::RpcError(RpcError::RpcResponseError { code, message, .. })
            if REFUSAL_CODES.contains(code) =>
        {
            ChainError::rejected(op, message.clone())
        }
        ErrorKind::SigningError(s) => ChainError::rejected(op, s.to_string()),
        // Transport errors carry the URL, and an RPC provider's key with it.
        _ => ChainError::Unavailable(crate::redact::redact_urls(&e.to_string())),
    }
}

#[async_trait]
impl Chain for SolanaChain {
    async fn now(&self) -> Result<i64, ChainError> {
        let data = self
            .raw_accounts(&[solana_sdk_ids::sysvar::clock::ID])
            .await?
            .pop()
            .flatten();
        clock_time(data.as_deref())
    }

    async fn machine(&self) -> Result<MachineView, ChainError> {
        let m: Machine = self.account(&self.machine, "machine").await?;
        Ok(MachineView {
            gpus: m
                .gpus()
                .iter()
                .map(|g| GpuView {
                    uuid: g.uuid,
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
            network: network_view(&m),
            cached_images: m.cached_images[..usize::from(m.cached_image_count)].to_vec(),
            unclaimed_pay: m.unclaimed_pay,
            whole_gpus: m.whole_gpus != 0,
        })
    }

    async fn leases(&self) -> Result<Vec<LeaseView>, ChainError> {
        let leases = self.lease_accounts().await?;
        let bid_keys: Vec<Pubkey> = leases.iter().map(|(_, l)| l.bid).collect();
        let bids = self.bids(&bid_keys).await?;
        let mut views = Vec::with_capacity(leases.len());
        for (k, l) in &leases {
            let Some(bid) = bids.iter().find(|(b, _)| *b == l.bid).map(|(_, b)| b) else {
                continue;
            };
            let gang = match l.parts > 1 {
                true => {
                    let (hosts, rendezvous) = self.gang_hosts(&l.bid, l.parts).await?;
                    Some(Gang {
                        part: l.part,
                        parts: l.parts,
                        hosts,
                        port: bid.ports.first().copied().unwrap_or(0),
                        rendezvous,
                    })
                }
                false => None,
            };
            views.push(LeaseView {
                gang,
                gang_broken: bid.gang_broken(),
                ..self.lease_view(*k, l, bid)
            });
        }
        Ok(views)
    }

    async fn closed_leases(&self, leases: &[Key]) -> Result<Vec<Key>, ChainError> {
        let keys: Vec<Pubkey> = leases.iter().copied().map(pubkey).collect();
        // What decides that a lease is gone comes from the node, never from memory.
        let got = self.rpc_accounts(&keys).await?;
        Ok(leases
            .iter()
            .zip(got)
            .filter(|(_, data)| data.is_none())
            .map(|(k, _)| *k)
            .collect())
    }

    async fn best_open_bids(&self, limit: usize) -> Result<OpenBids, ChainError> {
        let clock = solana_sdk_ids::sysvar::clock::ID;
        let got = self
            .raw_accounts(&[self.market, self.machine, clock])
            .await?;
        let market: Market = decoded(got[0].as_deref(), "market", &self.market)?;
        let machine: Machine = decoded(got[1].as_deref(), "machine", &self.machine)?;
        let now = clock_time(got[2].as_deref())?;
        // A bid that does not fit now may fit once a running spot lease ends: `preempt` stops
        // the lease for it, at once for a queue bid, at its next boundary for a spot bid that
        // pays the host more.
        let spot_leases: Vec<(Pubkey, Freed)> = self
            .lease_accounts()
            .await?
            .iter()
            .filter(|(_, l)| l.kind == ProgramBidKind::Spot && l.stop_at == Lease::NOT_STOPPED)
            .map(|(k, l)| {
                let gpus = l.gpus().iter().fold(0u16, |m, &g| m | 1 << g);
                let (gib, host) = (l.gib_per_gpu, l.host());
                (*k, Freed { gpus, gib, host })
            })
            .collect();
        let mut out = OpenBids {
            alive_secs: Some(gpu_market_sdk::placement::alive_secs(&market)),
            ..OpenBids::default()
        };
        let queue = self.read_book(&market.queue_book).await?;
        let spot = self.read_book(&machine.spot_book).await?;
        let mut policy = Policy::new(&market, now, queue.as_ref().map_or(&[], |b| &b.entries));
        // Queue bids outrank spot bids; within a book, the book's order.
        for (kind, entries) in [
            (ProgramBidKind::Queue, &queue),
            (ProgramBidKind::Spot, &spot),
        ] {
            let Some(entries) = entries else {
                continue;
            };
            let now_offers = offers(&machine, &market, kind, now, &Freed::default())?;
            // What `preempt` offers a challenger of this book: the lease's GPUs counted free.
            let if_ended = spot_leases
                .iter()
                .map(|(k, f)| Ok((*k, offers(&machine, &market, kind, now, f)?)))
                .collect::<Result<Vec<_>, ChainError>>()?;
            // The entries' summaries rule out most bids without reading their accounts.
            let mut candidates = Vec::new();
            for leaf in &entries.entries {
                // `prune_bid`'s condition.
                if leaf.summary.expired(now) {
                    if out.expired.len() < limit {
                        out.expired.push(key(&leaf.bid));
                    }
                    continue;
                }
                let need = leaf.summary.need();
                let until = leaf.summary.runs_until(now);
                let may_fit = |o: &Offers| o.for_run(&leaf.bid, until).fits(&need);
                if may_fit(&now_offers) || if_ended.iter().any(|(_, o)| may_fit(o)) {
                    candidates.push(leaf);
                }
            }
            let room = limit.saturating_sub(out.bids.len());
            let found = self
                .admissible(&mut policy, kind, &candidates, &now_offers, &if_ended, room)
                .await?;
            out.bids.extend(found.bids);
            out.gangs_left += found.gangs_left;
        }
        // A failed read here costs a reservation a tick, never an allocation.
        if queue.is_some() {
            out.reservation = self
                .reservation_duty(&mut policy, &machine)
                .await
                .unwrap_or_else(|e| {
                    tracing::warn!(error = %e, "reading what reservations need failed");
                    None
                });
        }
        self.keep_view(policy);
        Ok(out)
    }

    async fn allocate(&self, bid: Key, gpu_indices: &[u8]) -> Result<Key, ChainError> {
        let bid = pubkey(bid);
        if let Some(mut plan) = self.gang_plan(&bid) {
            plan[0].1 = gpu_indices.to_vec();
            return self.allocate_gang(bid, plan).await;
        }
        let clock = solana_sdk_ids::sysvar::clock::ID;
        let got = self
            .raw_accounts(&[self.market, self.machine, bid, clock])
            .await?;
        let market: Market = decoded(got[0].as_deref(), "market", &self.market)?;
        let machine: Machine = decoded(got[1].as_deref(), "machine", &self.machine)?;
        let b: Bid = decoded(got[2].as_deref(), "bid", &bid)?;
        let now = clock_time(got[3].as_deref())?;
        let book = match b.kind {
            ProgramBidKind::Queue => market.queue_book,
            ProgramBidKind::Spot => machine.spot_book,
        };
        let stake = pda::stake(&self.market, &b.client).0;
        let got = self.raw_accounts(&[book, stake]).await?;
        let entries = match got[0].as_deref() {
            Some(d) => book_entries(d, &book)?,
            None => {
                return Err(ChainError::rejected(
                    Allocate::NAME,
                    format!("no bid book at {book}"),
                ))
            }
        };
        let stake: StakeAccount = decoded(got[1].as_deref(), "stake", &stake)?;
        let within_cap = b.kind == ProgramBidKind::Spot
            || market.within_client_cap(stake.gpus_held as u64, b.gpu_count as u64, now);
        // Below a deep book, the machine walks it first (`walk_book`) so that `allocate` fits
        // in a transaction whatever the entries above are.
        let machine = self
            .walked_above(book, &entries.entries, &bid, machine)
            .await?;
        let offers = offers(&machine, &market, b.kind, now, &Freed::default())?;
        // Built and dropped before any await: a signer is not `Sync`.
        let (lease, ix) = {
            let ix = Allocate {
                agent: &self.agent,
                market: self.market,
                machine: self.machine,
                book,
                bid,
                client: b.client,
                gpus: gpu_indices.to_vec(),
                evidence: entries.allocate_evidence_walked(
                    &book,
                    &bid,
                    std::slice::from_ref(&offers),
                    within_cap,
                    &[&machine.walk],
                ),
            };
            (ix.lease(), ix.instruction())
        };
        self.send(Allocate::NAME, ix).await?;
        Ok(key(&lease))
    }

    async fn preempt(&self, lease: Key, better_bid: Key) -> Result<(), ChainError> {
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
        }
        .instruction();
        self.send(Preempt::NAME, ix).await
    }

    async fn submit_usage(&self, proofs: &[(Key, UsageProof)]) -> Result<(), ChainError> {
        let all = SubmitUsage {
            agent: &self.agent,
            market: self.market,
            machine: self.machine,
            proofs: proofs
                .iter()
                .map(|(lease, p)| (pubkey(*lease), UsageProofArgs::from(p)))
                .collect(),
        };
        for part in all.split() {
            self.send(SubmitUsage::NAME, part.instruction()).await?;
        }
        Ok(())
    }

    async fn claim_pay(&self) -> Result<(), ChainError> {
        let (market, machine) = self.market_and_machine().await?;
        let host_tokens = self.host_tokens(&machine, &market).await?;
        let ix = ClaimPay {
            market: self.market,
            machine: self.machine,
            payment_mint: market.payment_mint,
            host_tokens,
        }
        .instruction();
        self.send(ClaimPay::NAME, ix).await
    }

    async fn set_rendezvous(&self, lease: Key, port: u16) -> Result<(), ChainError> {
        let ix = SetRendezvous {
            agent: &self.agent,
            machine: self.machine,
            lease: pubkey(lease),
            port,
        }
        .instruction();
        self.send(SetRendezvous::NAME, ix).await
    }

    async fn end_lease(&self, lease: Key) -> Result<(), ChainError> {
        let (market, machine) = self.market_and_machine().await?;
        let l: Lease = self.account(&pubkey(lease), "lease").await?;
        let b: Bid = self.account(&l.bid, "bid").await?;
        // The refund goes where the escrow came from while that account lives; else it waits
        // in the client's stake: a client who closed its account cannot keep the GPUs held.
        let client_tokens = self
            .live_token_account(&b.refund_tokens, &l.client, &market.payment_mint)
            .await?;
        let ix = CloseLease::of(
            &self.agent,
            (pubkey(lease), &l),
            &machine,
            &market,
            client_tokens,
            false,
        )
        .instruction();
        self.send(CloseLease::NAME, ix).await
    }

    fn requests_sent(&self) -> u64 {
        self.rpc.get_transport_stats().request_count as u64
    }

    fn lease_key(&self, bid: Key) -> Key {
        let bid = pubkey(bid);
        // This machine takes the first part of the gangs it sends `allocate_gang` for.
        match self.gang_plan(&bid) {
            Some(_) => key(&pda::gang_lease(&bid, 0).0),
            None => key(&pda::lease(&bid).0),
        }
    }

    async fn heartbeat(&self) -> Result<(), ChainError> {
        let ix = Heartbeat {
            agent: &self.agent,
            machine: self.machine,
        }
        .instruction();
        self.send(Heartbeat::NAME, ix).await
    }

    async fn report_fault(&self, gpu: u8, xid: u32) -> Result<(), ChainError> {
        let ix = ReportFault {
            agent: &self.agent,
            machine: self.machine,
            gpu,
            xid,
        }
        .instruction();
        self.send(ReportFault::NAME, ix).await
    }

    async fn prune_bid(&self, bid: Key) -> Result<(), ChainError> {
        let bid = pubkey(bid);
        let got = self.raw_accounts(&[self.market, self.machine, bid]).await?;
        let market: Market = decoded(got[0].as_deref(), "market", &self.market)?;
        let machine: Machine = decoded(got[1].as_deref(), "machine", &self.machine)?;
        let b: Bid = decoded(got[2].as_deref(), "bid", &bid)?;
        // The escrow goes back where it came from while that account lives; else it waits in
        // the client's stake: a client who closed its account cannot keep its bid in the book.
        let client_tokens = self
            .live_token_account(&b.refund_tokens, &b.client, &market.payment_mint)
            .await?;
        let ix = PruneBid {
            caller: &self.agent,
            market: self.market,
            bid,
            client: b.client,
            book: match b.kind {
                ProgramBidKind::Queue => market.queue_book,
                ProgramBidKind::Spot => machine.spot_book,
            },
            payment_mint: market.payment_mint,
            client_tokens,
            machine: None,
        }
        .instruction();
        self.send(PruneBid::NAME, ix).await
    }

    async fn reserve(&self, bid: Key) -> Result<(), ChainError> {
        let bid = pubkey(bid);
        let (market, b, _, holding) = self.reserving(bid, Reserve::NAME).await?;
        let holding = holding.into_iter().filter(|k| *k != self.machine).collect();
        let leases = self.lease_accounts().await?;
        let ix = Reserve::of(
            self.market,
            market.queue_book,
            (self.machine, bid),
            b.reserved_on,
            &leases,
            holding,
        )
        .instruction();
        self.send(Reserve::NAME, ix).await
    }

    async fn reserve_gang(&self, bid: Key, parts: &[Key]) -> Result<(), ChainError> {
        let bid = pubkey(bid);
        let parts: Vec<Pubkey> = parts.iter().map(|k| pubkey(*k)).collect();
        let (market, b, (_, leases), holding) = self.reserving(bid, ReserveGang::NAME).await?;
        let ix = ReserveGang::of(
            self.market,
            market.queue_book,
            bid,
            b.reserved_on,
            (&parts, &leases),
            holding,
        )
        .instruction();
        self.send(ReserveGang::NAME, ix).await
    }

    async fn set_whole_gpus(&self, whole: bool) -> Result<(), ChainError> {
        let ix = SetWholeGpus {
            agent: &self.agent,
            machine: self.machine,
            whole,
        }
        .instruction();
        self.send(SetWholeGpus::NAME, ix).await
    }

    async fn unreserve(&self) -> Result<(), ChainError> {
        let machine: Machine = self.account(&self.machine, "machine").await?;
        let ix = Unreserve::of(self.market, (self.machine, &machine)).instruction();
        self.send(Unreserve::NAME, ix).await
    }

    async fn sealed_env(&self, bid: Key) -> Result<Option<Vec<u8>>, ChainError> {
        let address = pda::sealed_env(&pubkey(bid), &self.agent.pubkey()).0;
        let got = self.raw_accounts(&[address]).await?;
        got[0]
            .as_deref()
            .map(|data| {
                decoded::<SealedEnv>(Some(data), "sealed environment", &address).map(|e| e.sealed)
            })
            .transpose()
    }
}

/// The filters that select the lease accounts of `machine`.
pub fn lease_filters(machine: &Pubkey) -> Vec<RpcFilterType> {
    accounts_with::<Lease>(LEASE_MACHINE_OFFSET, machine)
}

/// The filters that select the program's accounts of type `T` holding `key` at byte `offset`.
pub fn accounts_with<T: Discriminator>(offset: usize, key: &Pubkey) -> Vec<RpcFilterType> {
    vec![
        RpcFilterType::Memcmp(Memcmp::new_raw_bytes(0, T::DISCRIMINATOR.to_vec())),
        RpcFilterType::Memcmp(Memcmp::new_raw_bytes(offset, key.to_bytes().to_vec())),
    ]
}

/// The public address of `machine` (its `network.host`) among the machines `policy` knows.
fn host_of(policy: &Policy<'_>, machine: &Pubkey) -> String {
    policy
        .machines()
        .iter()
        .find(|(k, _)| k == machine)
        .map(|(_, m)| m.network.host.clone())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use gpu_market::errors::MarketError;
    use solana_rpc_client_api::response::RpcSimulateTransactionResult;

    use super::*;

    fn response_error(code: i64, message: &str, data: RpcResponseErrorData) -> ClientError {
        RpcError::RpcResponseError {
            code,
            message: message.into(),
            data,
        }
        .into()
    }

    fn refused(e: &ChainError) -> &str {
        match e {
            ChainError::Rejected { op, reason, .. } => {
                assert_eq!(*op, "allocate");
                reason
            }
            ChainError::Unavailable(e) => panic!("reported as unreachable: {e}"),
        }
    }

    /// A preflight that failed with `err` after logging `logs`.
    fn preflight(err: TransactionError, logs: &[&str]) -> ClientError {
        let mut sim: RpcSimulateTransactionResult =
            serde_json::from_value(serde_json::json!({ "logs": logs })).unwrap();
        sim.err = Some(err.clone().into());
        response_error(
            code::JSON_RPC_SERVER_ERROR_SEND_TRANSACTION_PREFLIGHT_FAILURE,
            &format!("Transaction simulation failed: {err}"),
            RpcResponseErrorData::SendTransactionPreflightFailure(sim),
        )
    }

    #[test]
    fn a_transaction_too_large_is_refused_with_the_nodes_reason() {
        let message = "VersionedTransaction too large: 2408 bytes (max: encoded/raw 1644/1232)";
        let e = response_error(-32602, message, RpcResponseErrorData::Empty);
        assert_eq!(refused(&classify("allocate", &e)), message);
    }

    #[test]
    fn a_program_error_is_refused_with_the_programs_message() {
        let err = TransactionError::InstructionError(
            1,
            InstructionError::Custom(MarketError::GpusBusy.into()),
        );
        let e = preflight(
            err.clone(),
            &[
                "Program log: Instruction: Allocate",
                "Program log: AnchorError occurred. Error Code: GpusBusy. Error Number: 6064. \
                 Error Message: The GPUs are busy with running leases.",
            ],
        );
        assert_eq!(
            refused(&classify("allocate", &e)),
            format!("The GPUs are busy with running leases. ({err})")
        );
        assert!(
            classify("allocate", &e).refused_with(MarketError::GpusBusy),
            "the program's error code is kept"
        );
        // Landed and failed (no preflight): refused, with the runtime's words.
        let e = ClientError::from(err.clone());
        assert_eq!(refused(&classify("allocate", &e)), err.to_string());
        let e = ClientError::from(TransactionError::InsufficientFundsForFee);
        assert_eq!(
            refused(&classify("allocate", &e)),
            "Insufficient funds for fee"
        );
    }

    #[test]
    fn no_answer_a_lost_confirmation_or_a_stale_blockhash_is_unreachable() {
        let transient = [
            ClientError::from(std::io::Error::new(
                std::io::ErrorKind::ConnectionRefused,
                "connection refused",
            )),
            RpcError::ForUser("unable to confirm transaction".into()).into(),
            response_error(
                code::JSON_RPC_SERVER_ERROR_NODE_UNHEALTHY,
                "Node is behind by 42 slots",
                RpcResponseErrorData::NodeUnhealthy {
                    num_slots_behind: Some(42),
                },
            ),
            preflight(TransactionError::BlockhashNotFound, &[]),
            ClientError::from(TransactionError::AlreadyProcessed),
        ];
        for e in &transient {
            assert!(
                classify("allocate", e).is_transient(),
                "{e} is reported as refused"
            );
        }
    }

    fn view(n: u8) -> BidView {
        BidView {
            gang: None,
            key: Key([n; 32]),
            client: Key::default(),
            kind: BidKind::Queue,
            gpu_count: 1,
            gib_per_gpu: 8,
            accepted_classes: 1,
            gpus: Some(vec![0]),
            fits_if_ended: Vec::new(),
            elsewhere: None,
            overclock: Vec::new(),
            price: 1,
            max_duration_secs: 60,
            deadline: 1,
            latest_start: 1,
            image_ref: String::new(),
            image_digest: [0; 32],
            env_hash: [0; 32],
            room: RoomAsked::default(),
            regions: Vec::new(),
            auto_power: None,
        }
    }

    #[test]
    fn the_cap_lists_bids_within_it_and_one_over_it_only_where_nothing_else_fits() {
        // A market of 2 GPUs with a 50 % cap: a client may hold 1.
        let within = |held: u64, more: u64| held + more <= 1;
        let (a, b) = (Pubkey::new_unique(), Pubkey::new_unique());
        let keys = |v: Vec<BidView>| v.iter().map(|b| b.key.0[0]).collect::<Vec<_>>();

        // A lone client's 2-GPU bid is over the cap, yet nobody else waits: it runs.
        let mut caps = CapFilter::default();
        caps.held.insert(a, 0);
        caps.add(view(1), &a, 2, within);
        assert_eq!(keys(caps.finish()), vec![1]);

        // A client at the cap gives way to one within it, ranked below.
        let mut caps = CapFilter::default();
        caps.held.extend([(a, 1), (b, 0)]);
        caps.add(view(1), &a, 1, within);
        caps.add(view(2), &b, 1, within);
        assert_eq!(keys(caps.finish()), vec![2]);

        // The GPUs of a client's bids listed before count: its second bid waits.
        let mut caps = CapFilter::default();
        caps.held.extend([(a, 0), (b, 0)]);
        caps.add(view(1), &a, 1, within);
        caps.add(view(2), &a, 1, within);
        caps.add(view(3), &b, 1, within);
        assert_eq!(keys(caps.finish()), vec![1, 3]);

        // Over the cap below another bid that fits: never.
        let mut caps = CapFilter::default();
        caps.held.extend([(a, 1), (b, 1)]);
        caps.add(view(1), &a, 1, within);
        caps.add(view(2), &b, 1, within);
        assert_eq!(keys(caps.finish()), vec![1]);
    }

    /// A bid that `may_keep` says the cap filter cannot keep (the look then asks no placement
    /// for it) changes nothing that the filter lists, in every sequence of four bids of two
    /// staked clients and one without a stake account, one or two GPUs, fitting now or once a
    /// spot lease ends.
    #[test]
    fn a_bid_the_cap_may_not_keep_changes_nothing_listed() {
        let within = |held: u64, more: u64| held + more <= 2;
        let (a, b, unstaked) = (
            Pubkey::new_unique(),
            Pubkey::new_unique(),
            Pubkey::new_unique(),
        );
        let choices: Vec<(Pubkey, u64, bool)> = [a, b, unstaked]
            .into_iter()
            .flat_map(|c| [(c, 1, true), (c, 1, false), (c, 2, true), (c, 2, false)])
            .collect();
        let state = |c: &CapFilter| {
            let listed: Vec<Key> = c.listed.iter().map(|v| v.key).collect();
            let first = c.first_over_cap.as_ref().map(|(at, v)| (*at, v.key));
            let mut held: Vec<(Pubkey, u64)> = c.held.iter().map(|(k, g)| (*k, *g)).collect();
            held.sort();
            (listed, first, held, c.any_within)
        };
        let (mut skipped, n) = (0, choices.len());
        for sequence in 0..n.pow(4) {
            let mut caps = CapFilter::default();
            caps.held.extend([(a, 1), (b, 0)]);
            for step in 0..4 {
                let (client, gpus, fits_now) = choices[sequence / n.pow(step) % n];
                let bid = BidView {
                    gpus: fits_now.then(Vec::new),
                    fits_if_ended: vec![Key([9; 32])],
                    ..view(step as u8)
                };
                let may = caps.may_keep(&client, gpus, fits_now, within);
                let before = state(&caps);
                caps.add(bid, &client, gpus, within);
                if !may {
                    skipped += 1;
                    assert_eq!(state(&caps), before, "sequence {sequence}, step {step}");
                }
            }
        }
        assert!(skipped > 0);
    }

    #[test]
    fn a_bid_that_fits_once_a_spot_lease_ends_is_listed_within_the_cap_only() {
        let within = |held: u64, more: u64| held + more <= 1;
        let (a, b) = (Pubkey::new_unique(), Pubkey::new_unique());
        let keys = |v: Vec<BidView>| v.iter().map(|b| b.key.0[0]).collect::<Vec<_>>();
        let waiting = |n: u8| BidView {
            gpus: None,
            fits_if_ended: vec![Key([9; 32])],
            elsewhere: None,
            ..view(n)
        };

        // Within the cap it may preempt; it runs only once the lease ended, so the client's
        // bid that fits now is not held back by it.
        let mut caps = CapFilter::default();
        caps.held.insert(a, 0);
        caps.add(waiting(1), &a, 1, within);
        caps.add(view(2), &a, 1, within);
        assert_eq!(keys(caps.finish()), vec![1, 2]);

        // Over the cap it may not (`preempt` makes no exception), and the first bid that fits
        // now, over its own cap, still runs where no bid within a cap fits now.
        let mut caps = CapFilter::default();
        caps.held.extend([(a, 1), (b, 1)]);
        caps.add(waiting(1), &a, 1, within);
        caps.add(view(2), &b, 1, within);
        assert_eq!(keys(caps.finish()), vec![2]);

        // Both, in rank order, when the waiting one is within its client's cap.
        let mut caps = CapFilter::default();
        caps.held.extend([(a, 0), (b, 1)]);
        caps.add(waiting(1), &a, 1, within);
        caps.add(view(2), &b, 1, within);
        assert_eq!(keys(caps.finish()), vec![1, 2]);
    }
}
