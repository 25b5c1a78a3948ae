//! Test support shared by the test binaries: one client struct per program instruction
//! (`client`), and a cluster to talk to (`Cluster`).
//!
//! `program_test` is the LiteSVM harness of the program tests (the SBF build, real SPL Token),
//! and `lease_fixture` the market of the lease tests on it; `gpu-market-bench chain` measures the
//! program's instructions through them.
//!
//! `Cluster::start` uses the cluster in `ANCHOR_PROVIDER_URL` (with the wallet in `ANCHOR_WALLET`)
//! when it is set, as under `anchor test`; otherwise it starts the stock `solana-test-validator`
//! on free loopback ports with the program's SBF build deployed, and stops it when dropped.
//! `Cluster::in_process` is the same program in LiteSVM behind an in-process JSON-RPC node
//! ([`svm_rpc::SvmRpc`]): every client of the cluster talks JSON-RPC to it as to a validator.

use std::net::{TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use gpu_market_sdk as client;
pub mod lease_fixture;
pub mod live;
pub mod program_test;
pub mod served;
pub mod svm_rpc;

use gpu_market_sdk::{token, ClientInstruction};
use solana_instruction::Instruction;
use solana_pubkey::Pubkey;
use solana_signature::Signature;
use solana_transaction::Transaction;

use anyhow::{bail, Context, Result};
use solana_commitment_config::CommitmentConfig;
use solana_keypair::Keypair;
use solana_rpc_client::nonblocking::rpc_client::RpcClient;
use solana_signer::Signer;

pub const LAMPORTS_PER_SOL: u64 = 1_000_000_000;

/// The repository's root (where `target/deploy/gpu_market.so` is built).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The program's SBF build, made by `scripts/build-sbf.sh`.
pub fn program_so() -> PathBuf {
    repo_root().join("target/deploy/gpu_market.so")
}

pub struct Cluster {
    pub rpc_url: String,
    pub ws_url: String,
    /// A funded key to pay fees and rent.
    pub payer: Keypair,
    validator: Option<LocalValidator>,
    /// The in-process node, for a cluster in LiteSVM.
    svm: Option<svm_rpc::SvmRpc>,
}

impl Cluster {
    pub async fn start() -> Result<Self> {
        if let Ok(url) = std::env::var("ANCHOR_PROVIDER_URL") {
            let wallet = std::env::var("ANCHOR_WALLET")
                .context("ANCHOR_PROVIDER_URL is set but ANCHOR_WALLET is not")?;
            let payer = solana_keypair::read_keypair_file(&wallet)
                .map_err(|e| anyhow::anyhow!("cannot read ANCHOR_WALLET {wallet}: {e}"))?;
            let ws_url = websocket_url(&url)?;
            return Ok(Cluster {
                rpc_url: url,
                ws_url,
                payer,
                validator: None,
                svm: None,
            });
        }
        // Test binaries run as separate processes, and each validator finds its ports by
        // probing: two starting side by side could both pick a port the other then binds (a
        // websocket that never answers). One start at a time, from probing to an answering
        // RPC, across processes.
        let start_lock =
            std::fs::File::create(std::env::temp_dir().join("gpu-market-validator-start.lock"))?;
        start_lock.lock()?;
        let validator = LocalValidator::spawn(&program_so())?;
        let rpc_url = format!("http://127.0.0.1:{}", validator.rpc_port);
        let ws_url = format!("ws://127.0.0.1:{}", validator.rpc_port + 1);
        let mut cluster = Cluster {
            rpc_url,
            ws_url,
            payer: Keypair::new(),
            validator: Some(validator),
            svm: None,
        };
        cluster.wait_ready().await?;
        drop(start_lock);
        let rpc = cluster.rpc();
        let sig = rpc
            .request_airdrop(&cluster.payer.pubkey(), 100 * LAMPORTS_PER_SOL)
            .await?;
        let deadline = Instant::now() + Duration::from_secs(60);
        while !rpc.confirm_transaction(&sig).await? {
            if Instant::now() > deadline {
                bail!("the airdrop to the test payer was not confirmed within 60 s");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(cluster)
    }

    /// The program in LiteSVM behind an in-process JSON-RPC node (no websocket), with a funded
    /// payer. Its clock moves only when the test moves it (`svm().advance_clock`).
    pub fn in_process() -> Result<Self> {
        let svm = svm_rpc::SvmRpc::start()?;
        let payer = Keypair::new();
        svm.airdrop(&payer.pubkey(), 100 * LAMPORTS_PER_SOL)?;
        Ok(Cluster {
            rpc_url: solana_rpc_client::rpc_sender::RpcSender::url(&svm),
            ws_url: String::new(),
            payer,
            validator: None,
            svm: Some(svm),
        })
    }

    /// The in-process node of a cluster in LiteSVM.
    pub fn svm(&self) -> Option<&svm_rpc::SvmRpc> {
        self.svm.as_ref()
    }

    pub fn rpc(&self) -> RpcClient {
        let commitment = CommitmentConfig::confirmed();
        match &self.svm {
            Some(svm) => svm.client(commitment),
            None => RpcClient::new_with_commitment(self.rpc_url.clone(), commitment),
        }
    }

    /// Sends `ixs` paid by the cluster's payer, signed by it and `signers`; waits for
    /// confirmation.
    pub async fn send(&self, ixs: &[Instruction], signers: &[&Keypair]) -> Result<Signature> {
        let mut all = vec![&self.payer];
        all.extend_from_slice(signers);
        let rpc = self.rpc();
        let blockhash = rpc.get_latest_blockhash().await?;
        let tx =
            Transaction::new_signed_with_payer(ixs, Some(&self.payer.pubkey()), &all, blockhash);
        Ok(rpc.send_and_confirm_transaction(&tx).await?)
    }

    /// Sends one program instruction built by the sdk.
    pub async fn run<C: ClientInstruction + Sync>(&self, c: &C) -> Result<Signature> {
        let rpc = self.rpc();
        let sent = async {
            let blockhash = rpc.get_latest_blockhash().await?;
            // Signed before the next await: a builder's signers need not be `Sync`.
            let tx = {
                let mut all: Vec<&dyn Signer> = vec![&self.payer];
                all.extend(c.signers());
                let payer = Some(self.payer.pubkey());
                Transaction::new_signed_with_payer(
                    &[c.instruction()],
                    payer.as_ref(),
                    &all,
                    blockhash,
                )
            };
            anyhow::Ok(rpc.send_and_confirm_transaction(&tx).await?)
        };
        sent.await.with_context(|| format!("{} failed", C::NAME))
    }

    /// The cluster's clock, unix seconds.
    pub async fn now(&self) -> Result<i64> {
        let data = self
            .rpc()
            .get_account_data(&solana_sdk_ids::sysvar::clock::ID)
            .await?;
        Ok(bincode::deserialize::<solana_clock::Clock>(&data)?.unix_timestamp)
    }

    /// A new keypair holding `sol` SOL (from the payer).
    pub async fn wallet(&self, sol: u64) -> Result<Keypair> {
        let k = Keypair::new();
        self.fund(&k.pubkey(), sol).await?;
        Ok(k)
    }

    /// Gives `to` `sol` SOL more (from the payer).
    pub async fn fund(&self, to: &Pubkey, sol: u64) -> Result<()> {
        let ix = solana_system_interface::instruction::transfer(
            &self.payer.pubkey(),
            to,
            sol * LAMPORTS_PER_SOL,
        );
        self.send(&[ix], &[]).await.map(drop)
    }

    /// A new mint with `decimals`, minted by the payer.
    pub async fn create_mint(&self, decimals: u8) -> Result<Pubkey> {
        let mint = Keypair::new();
        let rent = self
            .rpc()
            .get_minimum_balance_for_rent_exemption(token::MINT_LEN)
            .await?;
        let payer = self.payer.pubkey();
        let ixs = token::create_mint(&payer, &mint.pubkey(), rent, decimals, &payer);
        self.send(&ixs, &[&mint]).await?;
        Ok(mint.pubkey())
    }

    pub async fn create_token_account(&self, mint: &Pubkey, owner: &Pubkey) -> Result<Pubkey> {
        let account = Keypair::new();
        let rent = self
            .rpc()
            .get_minimum_balance_for_rent_exemption(token::ACCOUNT_LEN)
            .await?;
        let ixs = token::create_account(&self.payer.pubkey(), &account.pubkey(), rent, mint, owner);
        self.send(&ixs, &[&account]).await?;
        Ok(account.pubkey())
    }

    pub async fn mint_to(&self, mint: &Pubkey, to: &Pubkey, amount: u64) -> Result<()> {
        let ix = token::mint_to(mint, to, &self.payer.pubkey(), amount);
        self.send(&[ix], &[]).await?;
        Ok(())
    }

    pub async fn token_balance(&self, account: &Pubkey) -> Result<u64> {
        let data = self.rpc().get_account_data(account).await?;
        token::balance(&data).with_context(|| format!("{account} is not a token account"))
    }

    /// An Anchor account of the program (discriminator checked).
    pub async fn account<T: anchor_lang::AccountDeserialize>(&self, address: &Pubkey) -> Result<T> {
        let data = self.rpc().get_account_data(address).await?;
        Ok(gpu_market_sdk::accounts::decode(&data, "program")?)
    }

    /// Whether this cluster was started by the test (and is therefore private to it).
    pub fn is_local(&self) -> bool {
        self.validator.is_some() || self.svm.is_some()
    }

    async fn wait_ready(&mut self) -> Result<()> {
        let rpc = self.rpc();
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(v) = self.validator.as_mut() {
                if let Some(status) = v.child.try_wait()? {
                    bail!(
                        "solana-test-validator exited with {status} before it was ready; its log:\n{}",
                        v.log_tail()
                    );
                }
            }
            // The websocket too: a validator whose pubsub port could not be bound answers RPC
            // but never notifies.
            let ws_port = self.validator.as_ref().map(|v| v.rpc_port + 1);
            let ws_up =
                ws_port.is_none_or(|p| std::net::TcpStream::connect(("127.0.0.1", p)).is_ok());
            if ws_up && rpc.get_health().await.is_ok() && rpc.get_slot().await.is_ok_and(|s| s > 0)
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "solana-test-validator did not answer on {} (and its websocket) within 120 s",
                    self.rpc_url
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// The compute budget a transaction asks for: its compute-unit limit and its loaded-accounts
/// limit (`None` where it sets none and gets the runtime's default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AskedBudget {
    pub units: Option<u32>,
    pub loaded_bytes: Option<u32>,
}

/// What `tx` asks of the compute-budget program, read off its instructions as the runtime does
/// (the instruction's tag, then a little-endian u32).
pub fn asked_budget(tx: &solana_transaction::versioned::VersionedTransaction) -> AskedBudget {
    let keys = tx.message.static_account_keys();
    let mut asked = AskedBudget {
        units: None,
        loaded_bytes: None,
    };
    for ix in tx.message.instructions() {
        if keys.get(ix.program_id_index as usize) != Some(&solana_compute_budget_interface::ID) {
            continue;
        }
        let value = ix
            .data
            .get(1..5)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes);
        // The tags of `SetComputeUnitLimit` and `SetLoadedAccountsDataSizeLimit`.
        match ix.data.first() {
            Some(2) => asked.units = value,
            Some(4) => asked.loaded_bytes = value,
            _ => {}
        }
    }
    asked
}

/// `http(s)://host:port` → `ws(s)://host:port+1`, the Solana convention.
pub fn websocket_url(rpc_url: &str) -> Result<String> {
    let (scheme, rest) = rpc_url
        .split_once("://")
        .with_context(|| format!("not a URL: {rpc_url}"))?;
    let ws_scheme = if scheme == "https" { "wss" } else { "ws" };
    let rest = rest.trim_end_matches('/');
    match rest.rsplit_once(':') {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => {
            let port: u16 = port.parse()?;
            Ok(format!("{ws_scheme}://{host}:{}", port + 1))
        }
        _ => Ok(format!("{ws_scheme}://{rest}")),
    }
}

struct LocalValidator {
    child: Child,
    rpc_port: u16,
    ledger: tempfile::TempDir,
}

impl LocalValidator {
    fn spawn(program_so: &Path) -> Result<Self> {
        if !program_so.exists() {
            bail!(
                "{} is missing: run scripts/build-sbf.sh first",
                program_so.display()
            );
        }
        let ledger = tempfile::tempdir()?;
        // RPC, its websocket (RPC + 1), the faucet, gossip, and the 64 dynamic ports.
        let base = free_port_block(VALIDATOR_PORTS)?;
        let (rpc_port, faucet_port, gossip_port) = (base, base + 2, base + 4);
        let log = std::fs::File::create(ledger.path().join("validator.log"))?;
        let child = Command::new(validator_binary())
            .arg("--ledger")
            .arg(ledger.path().join("ledger"))
            .args(["--reset", "--quiet", "--bind-address", "127.0.0.1"])
            .args(["--rpc-port", &rpc_port.to_string()])
            .args(["--faucet-port", &faucet_port.to_string()])
            .args(["--gossip-port", &gossip_port.to_string()])
            .args(["--dynamic-port-range", &dynamic_range(gossip_port)])
            .arg("--bpf-program")
            .arg(gpu_market::ID.to_string())
            .arg(program_so)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context(
                "cannot start solana-test-validator: install it with scripts/install-validator.sh",
            )?;
        Ok(LocalValidator {
            child,
            rpc_port,
            ledger,
        })
    }

    fn log_tail(&self) -> String {
        let text =
            std::fs::read_to_string(self.ledger.path().join("validator.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for LocalValidator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `$SOLANA_TEST_VALIDATOR`, else the one `scripts/install-validator.sh` built into
/// `$GPU_MARKET_TOOLS/bin` (default `~/.cache/gpu-market/bin`), else the one on `PATH`.
fn validator_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("SOLANA_TEST_VALIDATOR") {
        return PathBuf::from(p);
    }
    let tools = std::env::var_os("GPU_MARKET_TOOLS")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/gpu-market")));
    tools
        .map(|t| t.join("bin/solana-test-validator"))
        .filter(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("solana-test-validator"))
}

/// A port `p` such that `p` and `p + 1` are free on loopback for TCP and UDP.
/// How many consecutive ports a validator takes: see [`LocalValidator::spawn`].
const VALIDATOR_PORTS: u16 = 6 + 64 + 1;

/// The first of `len` consecutive loopback ports, free for TCP and UDP, below the kernel's
/// ephemeral range (32768–60999 by default): no outgoing connection of any test can take one of
/// them between this probe and the validator's bind (a port above 32768 could be, and a validator
/// that cannot bind its websocket answers RPC but never notifies). Blocks are tried from an
/// offset of the process id, so test processes start apart.
fn free_port_block(len: u16) -> Result<u16> {
    const LOW: u32 = 20_000;
    const SPAN: u32 = 12_000;
    let free = |port: u16| {
        TcpListener::bind(("127.0.0.1", port)).is_ok()
            && UdpSocket::bind(("127.0.0.1", port)).is_ok()
    };
    let first = std::process::id() % (SPAN / len as u32);
    for i in 0..SPAN / len as u32 {
        let base = (LOW + ((first + i) % (SPAN / len as u32)) * len as u32) as u16;
        if (base..base + len).all(free) {
            return Ok(base);
        }
    }
    bail!(
        "no block of {len} free loopback ports between {LOW} and {}",
        LOW + SPAN
    )
}

/// The validator's dynamic ports (TPU, TVU, repair): 64 after its gossip port, inside its block.
fn dynamic_range(base: u16) -> String {
    let start = base + 2;
    format!("{start}-{}", start + 64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn websocket_url_follows_the_solana_convention() {
        assert_eq!(
            websocket_url("http://127.0.0.1:8899").unwrap(),
            "ws://127.0.0.1:8900"
        );
        assert_eq!(
            websocket_url("https://api.devnet.solana.com").unwrap(),
            "wss://api.devnet.solana.com"
        );
        assert!(websocket_url("localhost").is_err());
    }

    #[test]
    fn the_budget_a_transaction_asks_is_read_off_its_instructions() {
        use solana_compute_budget_interface::ComputeBudgetInstruction;
        let payer = Keypair::new();
        let transfer = solana_system_interface::instruction::transfer(
            &payer.pubkey(),
            &Pubkey::new_unique(),
            1,
        );
        let tx = |ixs: &[Instruction]| {
            solana_transaction::versioned::VersionedTransaction::from(Transaction::new_with_payer(
                ixs,
                Some(&payer.pubkey()),
            ))
        };
        assert_eq!(
            asked_budget(&tx(&[
                ComputeBudgetInstruction::set_compute_unit_limit(32_500),
                ComputeBudgetInstruction::set_compute_unit_price(7),
                ComputeBudgetInstruction::set_loaded_accounts_data_size_limit(1_000_000),
                transfer.clone(),
            ])),
            AskedBudget {
                units: Some(32_500),
                loaded_bytes: Some(1_000_000)
            }
        );
        assert_eq!(
            asked_budget(&tx(&[transfer])),
            AskedBudget {
                units: None,
                loaded_bytes: None
            }
        );
    }
}
