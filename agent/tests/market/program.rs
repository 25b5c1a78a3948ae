//! The real parts: the agent's `SolanaChain` talking JSON-RPC to the program's SBF build in
//! LiteSVM ([`gpu_market_tests::svm_rpc::SvmRpc`]); the market, the host's stake, its machine
//! and the clients' bids are made with the sdk's builders, as on a validator.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use gpu_market::instructions::PlaceBidArgs;
use gpu_market::state::{
    BidKind as ProgramBidKind, Lease, Machine, MachineStatus, MachineTerms, MarketParams,
};
use gpu_market_agent::chain::mirror::Mirror;
use gpu_market_agent::chain::solana::{lease_filters, SolanaChain};
use gpu_market_agent::chain::watch::market_subscriptions;
use gpu_market_agent::chain::{BidKind, Chain, Key};
use gpu_market_core::fit::Region;
use gpu_market_sdk::{PlaceBid, PlaceGangBid};
use gpu_market_tests::live::LiveMarket;
use gpu_market_tests::Cluster;
use solana_account_decoder_client_types::UiAccountEncoding;
use solana_commitment_config::CommitmentConfig;
use solana_keypair::Keypair;
use solana_pubkey::Pubkey;
use solana_rpc_client::nonblocking::rpc_client::RpcClient;
use solana_rpc_client_api::config::{RpcAccountInfoConfig, RpcProgramAccountsConfig};
use solana_rpc_client_api::filter::RpcFilterType;
use solana_signer::Signer;
use solana_transaction::versioned::VersionedTransaction;
use std::collections::HashMap;

use crate::support::witness_machine;
use gpu_market_tests::live::Wallet;

use super::{
    machine_gpus, BidSpec, MarketUnderTest, ELECTRICITY_COST, IMAGE, INTERVAL, MACHINE_HOST,
    MACHINE_REGION, T0, TOKEN,
};

/// What a client holds before it bids: enough for any scenario's escrow.
const CLIENT_TOKENS: u64 = 1_000 * TOKEN;
/// The host's stake (the market's minimum, as in the on-chain tests).
const HOST_STAKE: u64 = 10 * TOKEN;
/// The machine's price floor, per GPU-hour.
const PRICE_FLOOR: u64 = TOKEN / 10;

/// The agent's on-chain tests' market, billed every [`INTERVAL`].
fn params() -> MarketParams {
    let mut p = crate::support::params();
    p.billing_interval_secs = INTERVAL;
    p.idle_end_intervals = super::IDLE_END_INTERVALS;
    p
}

/// The agent's `SolanaChain` for `machine` of the market, signing with `agent`.
fn agent_chain(live: &LiveMarket, agent: Keypair, machine: Pubkey) -> SolanaChain {
    SolanaChain::with_client(
        live.cluster
            .svm()
            .expect("in process")
            .client(CommitmentConfig::confirmed()),
        agent,
        Key(live.market.to_bytes()),
        Key(machine.to_bytes()),
        None,
    )
}

/// A test feed standing in for the node's websocket (LiteSVM has none): each [`Self::notify`]
/// puts in the mirror every machine and lease of the market whose data changed since the last,
/// as the node's program subscriptions notify them, and, as they do, nothing of an account
/// that closed.
pub struct TestFeed {
    pub mirror: Arc<Mirror>,
    client: RpcClient,
    seen: HashMap<Pubkey, Vec<u8>>,
    market: Pubkey,
}

impl TestFeed {
    pub async fn notify(&mut self) {
        let slot = self.client.get_slot().await.expect("the slot");
        for filters in market_subscriptions(&self.market) {
            let config = RpcProgramAccountsConfig {
                filters: Some(filters),
                account_config: RpcAccountInfoConfig {
                    encoding: Some(UiAccountEncoding::Base64),
                    ..Default::default()
                },
                ..Default::default()
            };
            let accounts = self
                .client
                .get_program_ui_accounts_with_config(&gpu_market::ID, config)
                .await
                .expect("the market's accounts");
            for (key, account) in accounts {
                let data = account.data.decode().expect("base64");
                if self.seen.get(&key) != Some(&data) {
                    self.mirror.notified(key, slot, Some(data.clone()));
                    self.seen.insert(key, data);
                }
            }
        }
    }
}

/// Another host's machine in the market (as [`machine_gpus`] declares), seen by its own agent.
pub struct OtherMachine {
    pub machine: Pubkey,
    pub chain: Arc<SolanaChain>,
}

pub struct ProgramMarket {
    live: LiveMarket,
    chain: Arc<SolanaChain>,
    /// Every machine registered in the market, the scenarios' one first.
    machines: Mutex<Vec<Pubkey>>,
}

impl ProgramMarket {
    /// The program in LiteSVM, its clock at [`T0`], with a market and the scenarios' machine.
    pub async fn start() -> Self {
        let cluster = Cluster::in_process().expect("the program in LiteSVM");
        cluster.svm().expect("in process").set_clock(T0);
        let live = LiveMarket::open(
            cluster,
            params(),
            machine_gpus(),
            HOST_STAKE,
            PRICE_FLOOR,
            ELECTRICITY_COST,
        )
        .await
        .expect("a market with a registered machine");
        live.add_region(MACHINE_REGION)
            .await
            .expect("the market lists the machine's region");
        live.update_machine(|terms| {
            terms.cpu_milli = MACHINE_HOST.cpu_milli;
            terms.memory_mib = MACHINE_HOST.memory_mib;
            terms.region = MACHINE_REGION;
        })
        .await
        .expect("the machine's CPU, memory and region");
        let chain = agent_chain(&live, live.agent.insecure_clone(), live.machine);
        ProgramMarket {
            machines: Mutex::new(vec![live.machine]),
            live,
            chain: Arc::new(chain),
        }
    }
}

impl ProgramMarket {
    pub fn market(&self) -> Pubkey {
        self.live.market
    }

    /// The scenarios' machine's agent chain reading the market's machines and leases from a
    /// mirror that `TestFeed` keeps, as the daemon's websocket feed does.
    pub fn chain_with_feed(&self) -> (Arc<SolanaChain>, TestFeed) {
        let mirror = Arc::new(Mirror::new());
        let filters: Vec<Vec<RpcFilterType>> = market_subscriptions(&self.live.market).into();
        mirror.subscribed(
            self.live.machine,
            Default::default(),
            filters,
            lease_filters(&self.live.machine),
        );
        let chain = agent_chain(
            &self.live,
            self.live.agent.insecure_clone(),
            self.live.machine,
        )
        .with_mirror(mirror.clone());
        let feed = TestFeed {
            mirror,
            client: self
                .live
                .cluster
                .svm()
                .expect("in process")
                .client(CommitmentConfig::confirmed()),
            seen: HashMap::new(),
            market: self.live.market,
        };
        (Arc::new(chain), feed)
    }

    /// The placement arguments of `spec`.
    async fn args(&self, spec: &BidSpec) -> PlaceBidArgs {
        let now = self.live.cluster.now().await.expect("the clock");
        PlaceBidArgs {
            kind: match spec.kind {
                BidKind::Queue => ProgramBidKind::Queue,
                BidKind::Spot => ProgramBidKind::Spot,
            },
            image_ref: IMAGE.into(),
            image_digest: spec.image_digest,
            env_hash: spec.env_hash,
            gpu_count: spec.gpu_count,
            gib_per_gpu: spec.gib_per_gpu,
            accepted_classes: 1,
            overclock: vec![spec.overclock()],
            price: spec.price,
            max_duration_secs: spec.max_duration_secs,
            min_duration_secs: spec.max_duration_secs,
            deadline: spec.deadline(now),
            urgency_premium: 0,
            ports: spec.ports.clone(),
            scratch_gib: 0,
            cpu_milli: spec.host.cpu_milli,
            memory_mib: spec.host.memory_mib,
            regions: spec.regions.clone(),
            auto_power: None,
        }
    }

    /// A new client places `spec` as a gang of `parts` machines (its first port 29500, the
    /// rendezvous), witnessed by the scenarios' machine, which first publishes a port for each
    /// lease (a gang needs one).
    pub async fn place_gang(&self, spec: &BidSpec, parts: u8) -> Key {
        self.live
            .update_machine(|t| {
                t.network.host = "10.0.0.1".into();
                t.network.ports_per_lease = 1;
            })
            .await
            .expect("the machine publishes a port for each lease");
        let client = self
            .live
            .client(CLIENT_TOKENS, 0)
            .await
            .expect("a funded client with a stake account");
        let mut args = self.args(spec).await;
        args.ports = vec![29_500];
        let place = PlaceGangBid {
            place: PlaceBid {
                client: &client.key,
                market: self.live.market,
                book: self.live.queue_book,
                machine: self.live.machine,
                payment_mint: self.live.mint,
                client_tokens: client.tokens,
                nonce: self.live.next_nonce(),
                args,
                evict: None,
            },
            parts,
        };
        self.live.cluster.run(&place).await.expect("place_gang_bid");
        Key(place.place.bid().to_bytes())
    }

    /// Every transaction the scenarios' agent paid for, in order, with the compute units each
    /// used.
    pub fn agent_transactions(&self) -> Vec<(VersionedTransaction, u64)> {
        let agent = self.live.agent.pubkey();
        self.live
            .cluster
            .svm()
            .expect("in process")
            .landed()
            .into_iter()
            .filter(|(tx, _)| tx.message.static_account_keys().first() == Some(&agent))
            .collect()
    }

    /// Eight staked clients place `n` queue bids of `spec` (their bids rank above any a
    /// scenario's unstaked client places), each naming a roomy witness machine that is paused
    /// once they are in: bids no active machine of the market serves.
    pub async fn place_above(&self, n: usize, spec: &BidSpec) {
        let args = self.args(spec).await;
        let (owner, witness) = witness_machine(&self.live, MACHINE_REGION).await;
        let clients = futures_util::future::try_join_all(
            (1..=8u64).map(|i| self.live.client(CLIENT_TOKENS, i * TOKEN)),
        )
        .await
        .expect("staked clients");
        let svm = self.live.cluster.svm().expect("in process");
        for c in &clients {
            // Each bid's account and book slot: about 0.005 SOL of rent.
            svm.airdrop(&c.key.pubkey(), 10_000_000_000)
                .expect("SOL for the bids' rent");
        }
        let per = n.div_ceil(clients.len());
        futures_util::future::join_all(clients.iter().enumerate().map(|(i, c)| {
            let count = per.min(n.saturating_sub(i * per));
            crate::support::place_all(&self.live, c, witness, vec![args.clone(); count])
        }))
        .await;
        self.live
            .set_status(&owner.key, witness, MachineStatus::Paused)
            .await
            .expect("the witness paused");
    }

    /// The scenarios' machine.
    pub fn machine(&self) -> Pubkey {
        self.live.machine
    }

    /// A new host stakes and registers a machine like the scenarios' one in `region`, whose
    /// electricity costs `electricity_cost` per kWh.
    pub async fn add_machine(&self, region: Region, electricity_cost: u64) -> OtherMachine {
        self.add_machine_with(region, electricity_cost, |_| {})
            .await
    }

    /// [`ProgramMarket::add_machine`], its terms then changed by `edit`.
    pub async fn add_machine_with(
        &self,
        region: Region,
        electricity_cost: u64,
        edit: impl FnOnce(&mut MachineTerms),
    ) -> OtherMachine {
        let host = self
            .live
            .client(HOST_STAKE, HOST_STAKE)
            .await
            .expect("a staked host");
        let agent = self.live.cluster.wallet(10).await.expect("an agent key");
        let listed = self.live.market_state().await.expect("the market").regions;
        if region[0] != 0 && !listed.contains(&region) {
            self.live.add_region(region).await.expect("add_region");
        }
        let (machine, _) = self
            .live
            .register_machine(&host.key, agent.pubkey(), |terms| {
                terms.gpus = machine_gpus();
                terms.price_floor_per_gpu_hour = PRICE_FLOOR;
                terms.electricity_cost_per_kwh = electricity_cost;
                terms.cpu_milli = MACHINE_HOST.cpu_milli;
                terms.memory_mib = MACHINE_HOST.memory_mib;
                terms.region = region;
                edit(terms);
            })
            .await
            .expect("the second machine");
        self.machines.lock().unwrap().push(machine);
        let chain = agent_chain(&self.live, agent, machine);
        OtherMachine {
            machine,
            chain: Arc::new(chain),
        }
    }

    /// The machine running the lease of `bid`, while the lease is open.
    pub async fn machine_of_lease(&self, bid: Key) -> Option<Pubkey> {
        Some(self.lease_of(bid).await?.machine)
    }

    /// The lease of `bid`, while it is open.
    pub async fn lease_of(&self, bid: Key) -> Option<Lease> {
        let lease = gpu_market::pda::lease(&Pubkey::new_from_array(bid.0)).0;
        self.live.cluster.account(&lease).await.ok()
    }

    /// The machine a bid of `args` names: a spot bid's target is the scenarios' machine; a
    /// queue bid's witness is found among the market's machines as `bid place` finds it, or,
    /// where none fits (a scenario about bids the machines pass over), is a roomy machine
    /// registered in the bid's first region and paused once the bid is placed, so that it runs
    /// nothing the scenario watches.
    async fn place_via(&self, client: &Wallet, args: PlaceBidArgs) -> Pubkey {
        if args.kind == ProgramBidKind::Spot {
            return self.live.place(client, args).await.expect("place_bid");
        }
        let market = self.live.market_state().await.expect("the market");
        let now = self.live.cluster.now().await.expect("the clock");
        let keys = self.machines.lock().unwrap().clone();
        let mut machines = Vec::new();
        for key in keys {
            let machine: Machine = self.live.cluster.account(&key).await.expect("a machine");
            machines.push((key, machine));
        }
        if let Ok(witness) = gpu_market_sdk::placement::witness(&market, now, &machines, &args) {
            return self
                .live
                .place_via(client, witness, args)
                .await
                .expect("place_bid");
        }
        let label = args.regions.first().copied().unwrap_or(MACHINE_REGION);
        let (owner, witness) = witness_machine(&self.live, label).await;
        let bid = self
            .live
            .place_via(client, witness, args)
            .await
            .expect("place_bid");
        self.live
            .set_status(&owner.key, witness, MachineStatus::Paused)
            .await
            .expect("the witness paused");
        bid
    }
}

#[async_trait]
impl MarketUnderTest for ProgramMarket {
    fn chain(&self) -> Arc<dyn Chain> {
        self.chain.clone()
    }

    async fn place_bid(&self, spec: &BidSpec) -> Key {
        let client = self
            .live
            .client(CLIENT_TOKENS, 0)
            .await
            .expect("a funded client with a stake account");
        let args = self.args(spec).await;
        Key(self.place_via(&client, args).await.to_bytes())
    }

    async fn advance(&self, secs: u64) {
        tokio::time::advance(Duration::from_secs(secs)).await;
        let svm = self.live.cluster.svm().expect("in process");
        svm.advance_clock(secs as i64);
    }

    /// The program's own rule (`Lease::reclaimable`, which `reclaim_escrow` requires) on the
    /// lease account as the cluster holds it.
    async fn reclaimable(&self, lease: Key) -> bool {
        let key = Pubkey::new_from_array(lease.0);
        let Ok(l) = self.live.cluster.account::<Lease>(&key).await else {
            return false;
        };
        let now = self.live.cluster.now().await.expect("the clock");
        l.reclaimable(now)
    }
}
