//! Cluster, keypair and output settings shared by every command.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use clap::ValueEnum;
use solana_commitment_config::CommitmentConfig;
use solana_instruction::Instruction;
use solana_keypair::Keypair;
use solana_pubkey::Pubkey;
use solana_rpc_client::rpc_client::RpcClient;
use solana_signer::Signer;
use solana_transaction::Transaction;

use crate::output::{print_record, rpc_error, OutputFormat};

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Commitment {
    Processed,
    Confirmed,
    Finalized,
}

pub struct Config {
    pub url: String,
    pub keypair_path: PathBuf,
    pub commitment: CommitmentConfig,
    pub output: OutputFormat,
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
        let keypair_path = match keypair {
            Some(p) => expand_home(p),
            None => expand_home("~/.config/solana/id.json"),
        };
        Ok(Config {
            url: resolve_url(url),
            keypair_path,
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

    pub fn signer(&self) -> Result<Keypair> {
        read_keypair(&self.keypair_path)
    }

    /// An account's data; a missing account and an unreachable cluster are told apart.
    pub fn account_data(&self, address: &Pubkey, what: &str) -> Result<Vec<u8>> {
        let rpc = self.rpc();
        match rpc.get_account_with_commitment(address, self.commitment) {
            Ok(response) => match response.value {
                Some(account) => Ok(account.data),
                None => bail!("{what} {address} does not exist on {}", self.url),
            },
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

    /// Lamports that keep an account of `len` bytes rent-exempt.
    pub fn rent_exempt_minimum(&self, len: usize) -> Result<u64> {
        self.rpc()
            .get_minimum_balance_for_rent_exemption(len)
            .map_err(|e| {
                anyhow::anyhow!(
                    "cannot reach the cluster at {}: {}",
                    self.url,
                    rpc_error(&e)
                )
            })
    }

    /// Signs `ixs` with the configured keypair (fee payer) and `extra`, sends, and waits for the
    /// configured commitment. Returns the signature.
    pub fn send(&self, payer: &Keypair, ixs: &[Instruction], extra: &[&Keypair]) -> Result<String> {
        let rpc = self.rpc();
        let mut signers = vec![payer];
        signers.extend_from_slice(extra);
        let blockhash = rpc.get_latest_blockhash().map_err(|e| {
            anyhow::anyhow!(
                "cannot reach the cluster at {}: {}",
                self.url,
                rpc_error(&e)
            )
        })?;
        let tx =
            Transaction::new_signed_with_payer(ixs, Some(&payer.pubkey()), &signers, blockhash);
        let sig = rpc
            .send_and_confirm_transaction(&tx)
            .map_err(|e| anyhow::anyhow!("transaction failed: {}", rpc_error(&e)))?;
        Ok(sig.to_string())
    }
}

fn expand_home(p: &str) -> PathBuf {
    match p.strip_prefix("~/") {
        Some(rest) => std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_default()
            .join(rest),
        None => PathBuf::from(p),
    }
}

/// Reads a keypair file in the Solana CLI's format (a JSON array of 64 bytes).
pub fn read_keypair(path: &Path) -> Result<Keypair> {
    if !path.exists() {
        bail!("keypair file {} does not exist", path.display());
    }
    solana_keypair::read_keypair_file(path)
        .map_err(|e| anyhow::anyhow!("cannot read a keypair from {}: {e}", path.display()))
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
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    print_record(
        config.output,
        &[
            ("pubkey", kp.pubkey().to_string()),
            ("outfile", path.display().to_string()),
        ],
    );
    Ok(())
}

pub fn airdrop(config: &Config, sol: &str) -> Result<()> {
    let lamports = gpu_market_core::amount::parse(sol, 9)
        .map_err(|e| anyhow::anyhow!("bad SOL amount: {e}"))?;
    if lamports == 0 {
        bail!("the airdrop amount must be greater than zero");
    }
    let me = config.signer()?.pubkey();
    let rpc = config.rpc();
    let sig = rpc
        .request_airdrop(&me, lamports)
        .map_err(|e| anyhow::anyhow!("airdrop refused: {}", rpc_error(&e)))?;
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
            ("signature", sig.to_string()),
            ("pubkey", me.to_string()),
            ("balance_sol", gpu_market_core::amount::format(balance, 9)),
        ],
    );
    Ok(())
}
