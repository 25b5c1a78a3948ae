//! End to end on a real cluster: the stock solana-test-validator with the SBF build deployed (or
//! the cluster in ANCHOR_PROVIDER_URL under `anchor test`). A transaction sent over JSON-RPC
//! reaches the program, and a websocket account subscription reports the change.

use std::time::Duration;

use futures_util::StreamExt;
use gpu_market::instructions::InitMarketArgs;
use gpu_market::pda;
use gpu_market::state::Market;
use gpu_market::state::MarketParams;
use gpu_market_tests::client::{ClientInstruction, InitMarket, OpenStake, Stake};
use gpu_market_tests::Cluster;
use solana_account_decoder_client_types::UiAccountEncoding;
use solana_commitment_config::CommitmentConfig;
use solana_instruction::Instruction;
use solana_keypair::Keypair;
use solana_program_pack::Pack;
use solana_pubkey::Pubkey;
use solana_pubsub_client::nonblocking::pubsub_client::PubsubClient;
use solana_rpc_client::nonblocking::rpc_client::RpcClient;
use solana_rpc_client_api::config::RpcAccountInfoConfig;
use solana_signer::Signer;
use solana_transaction::Transaction;
use spl_token_interface::state::{Account as TokenAccount, Mint};

async fn send(rpc: &RpcClient, payer: &Keypair, ixs: &[Instruction], signers: &[&Keypair]) {
    let mut all = vec![payer];
    all.extend_from_slice(signers);
    let blockhash = rpc.get_latest_blockhash().await.unwrap();
    let tx = Transaction::new_signed_with_payer(ixs, Some(&payer.pubkey()), &all, blockhash);
    rpc.send_and_confirm_transaction(&tx)
        .await
        .unwrap_or_else(|e| panic!("transaction failed: {e}"));
}

async fn create_mint_and_tokens(rpc: &RpcClient, payer: &Keypair, amount: u64) -> (Pubkey, Pubkey) {
    let mint = Keypair::new();
    let tokens = Keypair::new();
    let token = spl_token_interface::ID;
    let sys = solana_system_interface::instruction::create_account;
    let mint_rent = rpc
        .get_minimum_balance_for_rent_exemption(Mint::LEN)
        .await
        .unwrap();
    let acc_rent = rpc
        .get_minimum_balance_for_rent_exemption(TokenAccount::LEN)
        .await
        .unwrap();
    let me = payer.pubkey();
    let ixs = [
        sys(&me, &mint.pubkey(), mint_rent, Mint::LEN as u64, &token),
        spl_token_interface::instruction::initialize_mint2(&token, &mint.pubkey(), &me, None, 6)
            .unwrap(),
        sys(
            &me,
            &tokens.pubkey(),
            acc_rent,
            TokenAccount::LEN as u64,
            &token,
        ),
        spl_token_interface::instruction::initialize_account3(
            &token,
            &tokens.pubkey(),
            &mint.pubkey(),
            &me,
        )
        .unwrap(),
        spl_token_interface::instruction::mint_to(
            &token,
            &mint.pubkey(),
            &tokens.pubkey(),
            &me,
            &[],
            amount,
        )
        .unwrap(),
    ];
    send(rpc, payer, &ixs, &[&mint, &tokens]).await;
    (mint.pubkey(), tokens.pubkey())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rpc_transaction_reaches_the_program_and_the_websocket_reports_it() {
    let cluster = Cluster::start().await.expect("start or reach the cluster");
    let rpc = cluster.rpc();
    let payer = &cluster.payer;

    // The program is deployed and executable.
    let program = rpc
        .get_account(&gpu_market::ID)
        .await
        .expect("program account");
    assert!(program.executable);

    let (mint, tokens) = create_mint_and_tokens(&rpc, payer, 1_000_000).await;
    // A fresh market id, so that a shared cluster (anchor test) can run this test again.
    let id = u64::from_le_bytes(Keypair::new().pubkey().to_bytes()[..8].try_into().unwrap());
    let init = InitMarket {
        authority: payer,
        stake_mint: mint,
        payment_mint: mint,
        treasury: tokens,
        stake_treasury: tokens,
        args: InitMarketArgs {
            id,
            params: MarketParams::recommended(60, 100, 600),
        },
    };
    send(&rpc, payer, &[init.instruction()], &[]).await;
    let market = init.market();
    let vault = pda::stake_vault(&market).0;

    // Subscribe to the vault before the stake moves tokens into it.
    let pubsub = PubsubClient::new(&cluster.ws_url).await.expect("websocket");
    let (mut updates, unsubscribe) = pubsub
        .account_subscribe(
            &vault,
            Some(RpcAccountInfoConfig {
                encoding: Some(UiAccountEncoding::Base64),
                commitment: Some(CommitmentConfig::confirmed()),
                ..Default::default()
            }),
        )
        .await
        .expect("account subscription");

    let stake = Stake {
        owner: payer,
        market,
        stake_mint: mint,
        owner_tokens: tokens,
        amount: 250_000,
    };
    let open = OpenStake {
        owner: payer,
        market,
    };
    send(&rpc, payer, &[open.instruction(), stake.instruction()], &[]).await;

    let update = tokio::time::timeout(Duration::from_secs(30), updates.next())
        .await
        .expect("a websocket notification within 30 s")
        .expect("the subscription stream is open");
    let data = update.value.data.decode().expect("base64 account data");
    let vault_state = TokenAccount::unpack(&data).unwrap();
    assert_eq!(vault_state.amount, 250_000);
    assert_eq!(vault_state.owner, market);
    unsubscribe().await;

    // The program's own account agrees, read back over JSON-RPC.
    let raw = rpc.get_account_data(&market).await.unwrap();
    let m =
        <Market as anchor_lang::AccountDeserialize>::try_deserialize(&mut raw.as_slice()).unwrap();
    assert_eq!(m.total_staked, 250_000);
    assert_eq!(m.id, id);
    println!(
        "cluster {} ({}): market {market}, vault {vault} reported 250000 over {}",
        cluster.rpc_url,
        if cluster.is_local() {
            "started by the test"
        } else {
            "ANCHOR_PROVIDER_URL"
        },
        cluster.ws_url
    );
}
