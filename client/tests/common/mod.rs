//! The CLI tests' harness: a private validator (`T`), the `gpu-market` binary pointed at it, a
//! market made through the CLI (`MarketSetup`) and a host with a registered machine. Shared by
//! the test binaries of `client/tests`.

#![allow(dead_code)] // each test binary uses a different part of the harness

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anchor_lang::AccountDeserialize;
use gpu_market::instructions::UsageProofArgs;
use gpu_market::pda;
use gpu_market::state::{Bid, Lease, Machine, Market, StakeAccount};
use gpu_market_sdk::{Allocate, ClientInstruction, SubmitUsage};
use gpu_market_tests::Cluster;
use serde_json::Value;
use solana_commitment_config::CommitmentConfig;
use solana_keypair::Keypair;
use solana_program_pack::Pack;
use solana_pubkey::Pubkey;
use solana_rpc_client::rpc_client::RpcClient;
use solana_signer::Signer;
use solana_transaction::Transaction;
use spl_token_interface::state::Account as TokenAccount;

/// A validator, a scratch directory for keypairs and files, and the CLI pointed at both.
pub struct T {
    pub cluster: Cluster,
    pub dir: tempfile::TempDir,
}

/// The escrow the program locks for `b` at placement (`settlement::bid_escrow`): its run, and
/// its wait from when the transaction landed (`placed_at`) to its latest start, so it depends on
/// the cluster's clock at that moment, not only on the command's arguments.
pub fn placed_escrow(b: &Bid) -> u64 {
    let run = b.max_duration_secs as u64;
    let wait = (b.latest_start() - b.placed_at) as u64;
    gpu_market_core::settlement::bid_escrow(b.price, b.kind.unit(), b.gpu_count as u64, run, wait)
        .expect("an escrow the program locked")
}

/// `units` of a 6-decimal token as the CLI prints them.
pub fn shown(units: u64) -> String {
    gpu_market_core::amount::format(units, 6)
}

pub fn pk(v: &Value) -> Pubkey {
    v.as_str()
        .unwrap_or_else(|| panic!("not a string: {v}"))
        .parse()
        .unwrap()
}

pub fn key_of(path: &Path) -> Keypair {
    solana_keypair::read_keypair_file(path).unwrap()
}

pub const DIGEST: &str = "abababababababababababababababababababababababababababababababab";

impl T {
    pub fn start() -> Self {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let cluster = rt
            .block_on(Cluster::start())
            .expect("start a local validator");
        T {
            cluster,
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn run(&self, keypair: &Path, args: &[&str]) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_gpu-market"))
            .args([
                "--url",
                &self.cluster.rpc_url,
                "--output",
                "json",
                "--keypair",
            ])
            .arg(keypair)
            .args(args)
            .output()
            .unwrap()
    }

    /// Runs a verb that must succeed; its JSON output.
    pub fn ok(&self, keypair: &Path, args: &[&str]) -> Value {
        let out = self.run(keypair, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?} failed: {stderr}");
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: output is not JSON ({e}): {:?}", out.stdout))
    }

    /// Runs a verb that must fail with one clear line; that line.
    pub fn fails(&self, keypair: &Path, args: &[&str]) -> String {
        let out = self.run(keypair, args);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!out.status.success(), "{args:?} succeeded: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?} printed output on failure");
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{args:?}: not one line: {stderr:?}");
        assert!(lines[0].starts_with("error: "), "{args:?}: {stderr:?}");
        for bad in ["panicked", "backtrace", "RUST_BACKTRACE", "Error {"] {
            assert!(!stderr.contains(bad), "{args:?}: {stderr:?}");
        }
        lines[0].to_string()
    }

    pub fn rpc(&self) -> RpcClient {
        RpcClient::new_with_commitment(self.cluster.rpc_url.clone(), CommitmentConfig::confirmed())
    }

    /// The compute budget the landed transaction `signature` asked for, and the compute units
    /// it used.
    pub fn budget_of(&self, signature: &str) -> (gpu_market_tests::AskedBudget, u64) {
        use solana_rpc_client_api::config::RpcTransactionConfig;
        use solana_transaction_status_client_types::{
            option_serializer::OptionSerializer, UiTransactionEncoding,
        };
        let tx = self
            .rpc()
            .get_transaction_with_config(
                &signature.parse().expect("a signature"),
                RpcTransactionConfig {
                    encoding: Some(UiTransactionEncoding::Base64),
                    commitment: Some(CommitmentConfig::confirmed()),
                    max_supported_transaction_version: Some(0),
                },
            )
            .expect("the landed transaction");
        let used = match tx
            .transaction
            .meta
            .as_ref()
            .map(|m| &m.compute_units_consumed)
        {
            Some(OptionSerializer::Some(units)) => *units,
            _ => panic!("the node reports no compute units for {signature}"),
        };
        let decoded = tx
            .transaction
            .transaction
            .decode()
            .expect("a decodable transaction");
        (gpu_market_tests::asked_budget(&decoded), used)
    }

    pub fn account<A: AccountDeserialize>(&self, key: &Pubkey) -> A {
        let data = self.rpc().get_account(key).unwrap().data;
        A::try_deserialize(&mut data.as_slice()).unwrap()
    }

    pub fn exists(&self, key: &Pubkey) -> bool {
        self.rpc()
            .get_account_with_commitment(key, CommitmentConfig::confirmed())
            .unwrap()
            .value
            .is_some()
    }

    pub fn balance(&self, token_account: &Pubkey) -> u64 {
        TokenAccount::unpack(&self.rpc().get_account(token_account).unwrap().data)
            .unwrap()
            .amount
    }

    /// A new keypair file with 10 SOL (keygen and airdrop through the CLI).
    pub fn wallet(&self, name: &str) -> PathBuf {
        let path = self.path(&format!("{name}.json"));
        let out = self.ok(&path, &["keygen", "--outfile", path.to_str().unwrap()]);
        assert_eq!(pk(&out["pubkey"]), key_of(&path).pubkey());
        let out = self.ok(&path, &["airdrop", "10"]);
        assert_eq!(out["balance_sol"], "10");
        path
    }

    pub fn send(&self, payer: &Keypair, ixs: &[&dyn ClientIx]) {
        let instructions: Vec<_> = ixs.iter().map(|i| i.ix()).collect();
        let signers: Vec<&dyn solana_signer::Signer> = ixs.iter().flat_map(|i| i.keys()).collect();
        self.send_instructions(payer, &instructions, &signers);
    }

    /// Sends `instructions` paid by `payer` and signed by it and `signers`.
    pub fn send_instructions(
        &self,
        payer: &Keypair,
        instructions: &[solana_instruction::Instruction],
        signers: &[&dyn solana_signer::Signer],
    ) {
        let rpc = self.rpc();
        let payer: &dyn solana_signer::Signer = payer;
        let mut signers: Vec<&dyn solana_signer::Signer> =
            [payer].into_iter().chain(signers.iter().copied()).collect();
        signers.dedup_by_key(|k| k.pubkey());
        let tx = Transaction::new_signed_with_payer(
            instructions,
            Some(&payer.pubkey()),
            &signers,
            rpc.get_latest_blockhash().unwrap(),
        );
        rpc.send_and_confirm_transaction(&tx)
            .unwrap_or_else(|e| panic!("transaction failed: {e}"));
    }

    /// Sends the agent's usage proof once its interval is over: the program refuses it before
    /// (a custom program error), so it is retried for up to 30 s.
    pub fn submit_usage(&self, proof: &SubmitUsage) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let rpc = self.rpc();
            let tx = Transaction::new_signed_with_payer(
                &[proof.instruction()],
                Some(&proof.agent.pubkey()),
                &[proof.agent],
                rpc.get_latest_blockhash().unwrap(),
            );
            match rpc.send_and_confirm_transaction(&tx) {
                Ok(_) => return,
                Err(e)
                    if Instant::now() < deadline
                        && e.to_string().contains("custom program error") =>
                {
                    std::thread::sleep(Duration::from_millis(500)); // the interval is not over yet
                }
                Err(e) => panic!("submit_usage: {e}"),
            }
        }
    }

    pub fn cluster_time(&self) -> i64 {
        let rpc = self.rpc();
        rpc.get_block_time(rpc.get_slot().unwrap()).unwrap()
    }
}

pub trait ClientIx {
    fn ix(&self) -> solana_instruction::Instruction;
    fn keys(&self) -> Vec<&dyn solana_signer::Signer>;
}

impl<C: ClientInstruction> ClientIx for C {
    fn ix(&self) -> solana_instruction::Instruction {
        self.instruction()
    }
    fn keys(&self) -> Vec<&dyn solana_signer::Signer> {
        self.signers()
    }
}

/// A market made through the CLI: its authority (mint authority too), mint and treasury, and
/// token accounts created and funded for whoever asks.
pub struct MarketSetup {
    pub authority: PathBuf,
    pub mint: Pubkey,
    pub treasury: Pubkey,
    pub market: Pubkey,
}

impl MarketSetup {
    /// A market with `extra` rules; hosts need 10 tokens of stake unless `extra` says otherwise.
    pub fn new(t: &T, extra: &[&str]) -> Self {
        let authority = t.wallet("authority");
        let mint = pk(&t.ok(&authority, &["token", "create-mint", "--decimals", "6"])["mint"]);
        let m = mint.to_string();
        let treasury = pk(&t.ok(&authority, &["token", "create-account", &m])["account"]);
        let mut args = vec!["market", "init", "--stake-mint", &m, "--treasury"];
        let tr = treasury.to_string();
        args.push(&tr);
        args.extend_from_slice(extra);
        if !extra.contains(&"--min-host-stake") {
            args.extend(["--min-host-stake", "10"]);
        }
        let out = t.ok(&authority, &args);
        let market = pk(&out["market"]);
        let on_chain: Market = t.account(&market);
        assert_eq!(on_chain.queue_book, pk(&out["queue_book"]));
        assert_eq!(on_chain.authority, key_of(&authority).pubkey());
        MarketSetup {
            authority,
            mint,
            treasury,
            market,
        }
    }

    /// A token account of the market's mint for `owner`, holding `amount` token units.
    pub fn fund(&self, t: &T, owner: &Path, amount: &str) -> Pubkey {
        let owner = key_of(owner).pubkey().to_string();
        let m = self.mint.to_string();
        let account = pk(&t.ok(
            &self.authority,
            &["token", "create-account", &m, "--owner", &owner],
        )["account"]);
        if amount != "0" {
            t.ok(
                &self.authority,
                &["token", "mint", &m, &account.to_string(), amount],
            );
        }
        account
    }

    pub fn m(&self) -> String {
        self.market.to_string()
    }

    /// `market update` with `rules`, then `market apply` (by anyone: `applier`) once the
    /// notice the update printed is over; the applied market's JSON.
    pub fn update(&self, t: &T, applier: &Path, rules: &[&str]) -> Value {
        let m = self.m();
        let mut args = vec!["market", "update", m.as_str()];
        args.extend_from_slice(rules);
        let out = t.ok(&self.authority, &args);
        let effective_at = out["effective_at"].as_i64().unwrap();
        assert_eq!(t.account::<Market>(&self.market).pending_at, effective_at);
        assert!(
            out["note"]
                .as_str()
                .unwrap()
                .contains(&format!("gpu-market market apply {m}")),
            "{out}"
        );
        // Before the notice is over `market apply` is refused, and nothing changes: tried until
        // the cluster's clock passes it, as long as that takes, and a minute more of wall time.
        let ahead = (effective_at - t.cluster_time()).max(0) as u64;
        let deadline = Instant::now() + Duration::from_secs(ahead + 60);
        loop {
            let out = t.run(applier, &["market", "apply", &m]);
            if out.status.success() {
                let out: Value = serde_json::from_slice(&out.stdout).unwrap();
                assert!(out.get("pending_at").is_none(), "{out}");
                assert_eq!(t.account::<Market>(&self.market).pending_at, 0);
                return out;
            }
            let e = String::from_utf8_lossy(&out.stderr);
            assert!(e.starts_with("error: ") && e.contains("is not over"), "{e}");
            assert!(Instant::now() < deadline, "the notice never ended: {e}");
            assert_eq!(t.account::<Market>(&self.market).pending_at, effective_at);
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

pub const GPUS_TOML: &str = r#"
[[gpu]]
uuid = "GPU-00000000-0000-0000-0000-000000000001"
class = 0
memory_gib = 80
power_w = [100, 400]
core_lock_mhz = [500, 2000]

[[gpu]]
uuid = "GPU-00000000-0000-0000-0000-000000000002"
class = 1
memory_gib = 40
topology_group = 1
power_w = [100, 300]
"#;

/// `bid place` in `market` for a 40 GiB, one-hour job, with `extra` arguments.
pub fn place_args<'a>(market: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    place_args_with_duration(market, "1h", extra)
}

/// `bid place` in `market` for a 40 GiB job of `duration`, with `extra` arguments.
pub fn place_args_with_duration<'a>(
    market: &'a str,
    duration: &'a str,
    extra: &[&'a str],
) -> Vec<&'a str> {
    place_image_args(market, "registry.example/train:v3", duration, extra)
}

/// `bid place` in `market` for a 40 GiB job of `duration` running `image`, with `extra`
/// arguments.
pub fn place_image_args<'a>(
    market: &'a str,
    image: &'a str,
    duration: &'a str,
    extra: &[&'a str],
) -> Vec<&'a str> {
    let mut args = vec![
        "bid",
        "place",
        "--market",
        market,
        "--image",
        image,
        "--image-digest",
        DIGEST,
        "--gib-per-gpu",
        "40",
        "--duration",
        duration,
    ];
    args.extend_from_slice(extra);
    args
}

/// A host with stake and a registered machine whose agent key is a separate keypair.
pub struct Host {
    pub agent: PathBuf,
    pub machine: Pubkey,
    pub tokens: Pubkey,
}

/// The host's agent starts queue bid `bid` of `client` on GPU 0, with no bid ranked above it to
/// show; returns the lease.
pub fn allocate_as_agent(
    t: &T,
    s: &MarketSetup,
    host: &Host,
    bid: Pubkey,
    client: Pubkey,
) -> Pubkey {
    let market: Market = t.account(&s.market);
    let agent = key_of(&host.agent);
    let allocate = Allocate {
        agent: &agent,
        market: s.market,
        machine: host.machine,
        book: market.queue_book,
        bid,
        client,
        gpus: vec![0],
        evidence: vec![],
    };
    t.send(&agent, &[&allocate]);
    allocate.lease()
}

/// A host stakes and registers the two GPUs of [`GPUS_TOML`] in `eu-west`, which the market's
/// authority lists first where the market does not list it yet.
pub fn register_host(t: &T, s: &MarketSetup) -> Host {
    register_host_as(t, s, ("host", "agent"), &[])
}

/// [`register_host`] for the host and agent of wallets `owner` and `agent` (another host's
/// machine beside the first), with `extra` arguments of `host register`.
pub fn register_host_as(
    t: &T,
    s: &MarketSetup,
    (owner, agent): (&str, &str),
    extra: &[&str],
) -> Host {
    let listed = t.account::<Market>(&s.market).regions;
    if !listed.iter().any(|r| r.starts_with(b"eu-west\0")) {
        t.ok(&s.authority, &["market", "add-region", &s.m(), "eu-west"]);
    }
    let owner = t.wallet(owner);
    let agent = t.wallet(agent);
    let tokens = s.fund(t, &owner, "100");
    t.ok(&owner, &["stake", "deposit", "10", "--market", &s.m()]);
    let gpus = t.path("gpus.toml");
    std::fs::write(&gpus, GPUS_TOML).unwrap();
    let agent_key = key_of(&agent).pubkey().to_string();
    let market = s.m();
    let mut args = vec![
        "host",
        "register",
        "--market",
        &market,
        "--gpus",
        gpus.to_str().unwrap(),
        "--agent",
        &agent_key,
        "--price-floor",
        "0.5",
        "--region",
        "eu-west",
    ];
    args.extend(extra);
    let out = t.ok(&owner, &args);
    let machine = pk(&out["machine"]);
    Host {
        agent,
        machine,
        tokens,
    }
}

/// A 1-GPU, one-hour queue bid of `client`, allocated by the host's agent; returns the lease.
pub fn leased(
    t: &T,
    s: &MarketSetup,
    host: &Host,
    client: &std::path::Path,
    nonce: &str,
) -> Pubkey {
    leased_for(t, s, host, client, nonce, "1h")
}

/// [`leased`] for `duration`.
pub fn leased_for(
    t: &T,
    s: &MarketSetup,
    host: &Host,
    client: &std::path::Path,
    nonce: &str,
    duration: &str,
) -> Pubkey {
    let m = s.m();
    let out = t.ok(
        client,
        &place_args_with_duration(
            &m,
            duration,
            &[
                "--overclock",
                "power=250",
                "--price",
                "3",
                "--class",
                "0",
                "--nonce",
                nonce,
            ],
        ),
    );
    allocate_as_agent(t, s, host, pk(&out["bid"]), key_of(client).pubkey())
}

/// What a proof of [`prove_with`] states beyond its interval.
pub struct Stated {
    /// How many intervals the proof covers.
    pub intervals: u16,
    pub utilisation_bps: u16,
    pub peak_power_w: u16,
    pub samples_hash: [u8; 32],
}

/// Busy, at 250 W, with no power log.
pub const BUSY: Stated = Stated {
    intervals: 1,
    utilisation_bps: 10_000,
    peak_power_w: 250,
    samples_hash: [0; 32],
};

/// The host's agent heartbeats (as the daemon does at least every 2/3 of a silence window): the
/// market's packing policy counts the machine alive from now.
pub fn heartbeat(t: &T, host: &Host) {
    let agent = key_of(&host.agent);
    t.send(
        &agent,
        &[&gpu_market_sdk::Heartbeat {
            agent: &agent,
            machine: host.machine,
        }],
    );
}

/// The host's agent proves interval `k` of `lease` in full (1 GPU at 250 W for 2 s, busy).
pub fn prove(t: &T, s: &MarketSetup, host: &Host, lease: Pubkey, k: u32) {
    prove_with(t, s, host, lease, k, BUSY);
}

/// [`prove`] stating `stated`.
pub fn prove_with(t: &T, s: &MarketSetup, host: &Host, lease: Pubkey, k: u32, stated: Stated) {
    let agent = key_of(&host.agent);
    t.submit_usage(&SubmitUsage {
        agent: &agent,
        market: s.market,
        machine: host.machine,
        proofs: vec![(
            lease,
            UsageProofArgs {
                interval: k,
                intervals: stated.intervals,
                gpu_seconds: 2,
                energy_j: 500,
                avg_utilisation_bps: stated.utilisation_bps,
                peak_power_w: vec![stated.peak_power_w],
                exit_code: None,
                samples_hash: stated.samples_hash,
                energy_saved_j: 0,
            },
        )],
    });
}

pub fn host_stake(t: &T, s: &MarketSetup, host: &Host) -> StakeAccount {
    let m: Machine = t.account(&host.machine);
    t.account(&pda::stake(&s.market, &m.owner).0)
}

/// The host's agent proves every interval of `lease` in full, each once it is over, up to the
/// lease's stop (its first and last windows may be shorter than an interval: they run to the
/// market's grid of boundaries).
pub fn prove_to_stop(t: &T, s: &MarketSetup, host: &Host, lease: Pubkey) {
    let l: Lease = t.account(&lease);
    let mut k = 0;
    while let Some((_, to)) = gpu_market_core::lease::interval_window(
        l.started_at,
        l.rules.billing_interval_secs,
        k,
        l.stop(),
    ) {
        wait_until(t, to);
        prove(t, s, host, lease, k);
        k += 1;
    }
}

/// The end of interval `k` of lease `l` (on the market's grid of boundaries).
pub fn window_end(l: &Lease, k: u32) -> i64 {
    gpu_market_core::lease::interval_window(
        l.started_at,
        l.rules.billing_interval_secs,
        k,
        i64::MAX,
    )
    .expect("a window")
    .1
}

/// Waits until the cluster's clock reads `at` or later: as long as that takes, and a minute
/// more of wall time before calling the clock stuck.
pub fn wait_until(t: &T, at: i64) {
    let ahead = (at - t.cluster_time()).max(0) as u64;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(ahead + 60);
    while t.cluster_time() < at {
        assert!(
            std::time::Instant::now() < deadline,
            "the cluster's clock stands still"
        );
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
}

pub use gpu_market_tests::served::Served;

/// `gpu-market serve` (this crate's binary) for `market` of the cluster at `rpc_url`.
pub fn serve(rpc_url: &str, market: &Pubkey) -> Served {
    Served::start(Path::new(env!("CARGO_BIN_EXE_gpu-market")), rpc_url, market)
}
