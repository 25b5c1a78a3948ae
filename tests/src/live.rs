//! A market on a real cluster, for end-to-end tests of the agent and the CLI: a mint, a market
//! with its queue book, a host with stake and a registered machine (with its spot book), clients,
//! and the program's events read back from the transactions.

use anyhow::{Context, Result};
use gpu_market::events::UsageProven;
use gpu_market::instructions::PlaceBidArgs;
use gpu_market::state::{
    GpuSpec, Machine, MachineNetwork, MachineTerms, Market, MarketParams, BOOK_EMPTY_SPACE,
};
use gpu_market_sdk::events::from_logs;
use gpu_market_sdk::{
    init_queue_book, init_spot_book, open_book_instructions, AddRegion, InitMarket, OpenStake,
    PlaceBid, RegisterMachine, SetMachineStatus, Stake, UpdateMachine,
};
use solana_commitment_config::CommitmentConfig;
use solana_keypair::Keypair;
use solana_pubkey::Pubkey;
use solana_rpc_client::rpc_client::GetConfirmedSignaturesForAddress2Config;
use solana_rpc_client_api::config::RpcTransactionConfig;
use solana_signer::Signer;
use solana_transaction_status_client_types::UiTransactionEncoding;

use crate::Cluster;

pub struct Wallet {
    pub key: Keypair,
    pub tokens: Pubkey,
}

pub struct LiveMarket {
    pub cluster: Cluster,
    /// The market's authority (lists regions).
    pub authority: Keypair,
    pub mint: Pubkey,
    pub market: Pubkey,
    pub queue_book: Pubkey,
    pub treasury: Pubkey,
    pub host: Wallet,
    /// The machine's agent (hot) key, with SOL for fees and lease rent.
    pub agent: Keypair,
    pub machine: Pubkey,
    pub spot_book: Pubkey,
    /// The last nonce a bid placed here took ([`LiveMarket::next_nonce`]).
    pub nonce: std::sync::atomic::AtomicU64,
}

impl LiveMarket {
    /// A market with `params` on a new cluster, its token a new 6-decimal mint; a host that
    /// stakes `host_stake` and registers a machine with `gpus` at `price_floor` per GPU-hour
    /// and `electricity_cost` per kWh.
    pub async fn start(
        params: MarketParams,
        gpus: Vec<GpuSpec>,
        host_stake: u64,
        price_floor: u64,
        electricity_cost: u64,
    ) -> Result<Self> {
        let cluster = Cluster::start().await?;
        Self::open(
            cluster,
            params,
            gpus,
            host_stake,
            price_floor,
            electricity_cost,
        )
        .await
    }

    /// The market of [`LiveMarket::start`] on `cluster`.
    pub async fn open(
        cluster: Cluster,
        params: MarketParams,
        gpus: Vec<GpuSpec>,
        host_stake: u64,
        price_floor: u64,
        electricity_cost: u64,
    ) -> Result<Self> {
        let authority = cluster.wallet(10).await?;
        let mint = cluster.create_mint(6).await?;
        let treasury = cluster
            .create_token_account(&mint, &authority.pubkey())
            .await?;
        let stake_treasury = cluster
            .create_token_account(&mint, &authority.pubkey())
            .await?;
        let init = InitMarket {
            authority: &authority,
            stake_mint: mint,
            payment_mint: mint,
            treasury,
            stake_treasury,
            id: 0,
            params,
        };
        cluster.run(&init).await?;
        let market = init.market();
        let queue_book = open_book(&cluster, &authority, |book| {
            init_queue_book(&authority.pubkey(), &market, book)
        })
        .await
        .context("init_queue_book")?;

        let agent = cluster.wallet(10).await?;
        let mut live = LiveMarket {
            cluster,
            authority,
            mint,
            market,
            queue_book,
            treasury,
            host: Wallet {
                key: Keypair::new(),
                tokens: Pubkey::default(),
            },
            agent,
            machine: Pubkey::default(),
            spot_book: Pubkey::default(),
            nonce: Default::default(),
        };
        live.host = live.client(host_stake, host_stake).await?;
        let first = live
            .register_machine(&live.host.key, live.agent.pubkey(), |terms| {
                terms.gpus = gpus;
                terms.price_floor_per_gpu_hour = price_floor;
                terms.electricity_cost_per_kwh = electricity_cost;
            })
            .await?;
        (live.machine, live.spot_book) = first;
        Ok(live)
    }

    /// `owner` (staked) registers machine 0 with agent key `agent` and the terms `terms`
    /// makes of the defaults (no GPUs, region, price floor, CPU or memory), and opens its spot
    /// book; returns the machine and its spot book.
    pub async fn register_machine(
        &self,
        owner: &Keypair,
        agent: Pubkey,
        terms: impl FnOnce(&mut MachineTerms),
    ) -> Result<(Pubkey, Pubkey)> {
        let mut declared = MachineTerms {
            agent,
            region: [0; 16],
            gpus: Vec::new(),
            price_floor_per_gpu_hour: 0,
            electricity_cost_per_kwh: 0,
            network: MachineNetwork::default(),
            cpu_milli: 0,
            memory_mib: 0,
        };
        terms(&mut declared);
        let register = RegisterMachine {
            owner,
            market: self.market,
            id: 0,
            terms: declared,
        };
        self.cluster.run(&register).await?;
        let machine = register.machine();
        let owner_key = owner.pubkey();
        let spot_book = open_book(&self.cluster, owner, |book| {
            init_spot_book(&owner_key, &machine, book)
        })
        .await
        .context("init_spot_book")?;
        Ok((machine, spot_book))
    }

    /// The market's authority lists `region` (`add_region`).
    pub async fn add_region(&self, region: [u8; 16]) -> Result<()> {
        self.cluster
            .run(&AddRegion {
                authority: &self.authority,
                market: self.market,
                region,
            })
            .await
            .context("add_region")?;
        Ok(())
    }

    /// The owner of `machine` sets its status (`set_machine_status`).
    pub async fn set_status(
        &self,
        owner: &Keypair,
        machine: Pubkey,
        status: gpu_market::state::MachineStatus,
    ) -> Result<()> {
        self.cluster
            .run(&SetMachineStatus {
                owner,
                market: self.market,
                machine,
                status,
            })
            .await
            .context("set_machine_status")?;
        Ok(())
    }

    /// A wallet with SOL, `balance` tokens, and a stake account in the market holding `staked`.
    pub async fn client(&self, balance: u64, staked: u64) -> Result<Wallet> {
        let key = self.cluster.wallet(2).await?;
        let tokens = self
            .cluster
            .create_token_account(&self.mint, &key.pubkey())
            .await?;
        if balance > 0 {
            self.cluster.mint_to(&self.mint, &tokens, balance).await?;
        }
        self.cluster
            .run(&OpenStake {
                owner: &key,
                market: self.market,
            })
            .await?;
        if staked > 0 {
            self.cluster
                .run(&Stake {
                    owner: &key,
                    market: self.market,
                    stake_mint: self.mint,
                    owner_tokens: tokens,
                    amount: staked,
                })
                .await?;
        }
        Ok(Wallet { key, tokens })
    }

    /// A nonce no bid placed here took yet.
    pub fn next_nonce(&self) -> u64 {
        self.nonce
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1
    }

    /// Places a bid naming this market's machine (a spot bid's target, a queue bid's witness);
    /// returns the bid's address.
    pub async fn place(&self, client: &Wallet, args: PlaceBidArgs) -> Result<Pubkey> {
        self.place_via(client, self.machine, args).await
    }

    /// Places a bid naming `machine` (a spot bid's target, a queue bid's witness); returns the
    /// bid's address.
    pub async fn place_via(
        &self,
        client: &Wallet,
        machine: Pubkey,
        args: PlaceBidArgs,
    ) -> Result<Pubkey> {
        let spot = args.kind == gpu_market::state::BidKind::Spot;
        let p = PlaceBid {
            client: &client.key,
            market: self.market,
            book: if spot {
                self.spot_book
            } else {
                self.queue_book
            },
            machine,
            payment_mint: self.mint,
            client_tokens: client.tokens,
            nonce: self.next_nonce(),
            args,
            evict: None,
        };
        self.cluster.run(&p).await?;
        Ok(p.bid())
    }

    /// The host changes its machine's terms with `change` (`update_machine`).
    pub async fn update_machine(&self, change: impl FnOnce(&mut MachineTerms)) -> Result<()> {
        let machine: Machine = self.cluster.account(&self.machine).await?;
        let mut terms = machine.terms();
        change(&mut terms);
        self.cluster
            .run(&UpdateMachine {
                owner: &self.host.key,
                market: self.market,
                machine: self.machine,
                spot_book: None,
                terms,
            })
            .await
            .context("update_machine")?;
        Ok(())
    }

    pub async fn market_state(&self) -> Result<Market> {
        self.cluster.account(&self.market).await
    }

    /// The `UsageProven` events of `lease` (a transaction proves several leases of a machine),
    /// oldest first.
    pub async fn usage_proofs(&self, lease: &Pubkey) -> Result<Vec<UsageProven>> {
        let rpc = self.cluster.rpc();
        let commitment = Some(CommitmentConfig::confirmed());
        let mut sigs = rpc
            .get_signatures_for_address_with_config(
                lease,
                GetConfirmedSignaturesForAddress2Config {
                    commitment,
                    ..Default::default()
                },
            )
            .await?;
        sigs.reverse();
        let mut out = Vec::new();
        for s in sigs.iter().filter(|s| s.err.is_none()) {
            let tx = rpc
                .get_transaction_with_config(
                    &s.signature.parse()?,
                    RpcTransactionConfig {
                        encoding: Some(UiTransactionEncoding::Json),
                        commitment,
                        max_supported_transaction_version: Some(0),
                    },
                )
                .await?;
            let logs: Vec<String> = tx
                .transaction
                .meta
                .and_then(|m| Option::from(m.log_messages))
                .unwrap_or_default();
            out.extend(
                from_logs::<UsageProven>(&logs)
                    .into_iter()
                    .filter(|e| e.lease == *lease),
            );
        }
        Ok(out)
    }
}

/// Creates a bid book account and opens it with the instruction `open` builds for its address.
async fn open_book(
    cluster: &Cluster,
    signer: &Keypair,
    open: impl FnOnce(&Pubkey) -> solana_instruction::Instruction,
) -> Result<Pubkey> {
    let book = Keypair::new();
    let rent = cluster
        .rpc()
        .get_minimum_balance_for_rent_exemption(BOOK_EMPTY_SPACE)
        .await?;
    let ixs = open_book_instructions(
        &cluster.payer.pubkey(),
        &book.pubkey(),
        rent,
        open(&book.pubkey()),
    );
    cluster.send(&ixs, &[signer, &book]).await?;
    Ok(book.pubkey())
}
