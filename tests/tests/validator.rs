//! End to end on a real cluster: the stock solana-test-validator with the SBF build deployed (or
//! the cluster in ANCHOR_PROVIDER_URL under `anchor test`). A transaction sent over JSON-RPC
//! reaches the program, and a websocket account subscription reports the change.

use std::time::Duration;

use futures_util::StreamExt;
use gpu_market::pda;
use gpu_market::state::Market;
use gpu_market::state::MarketParams;
use gpu_market_tests::client::{ClientInstruction, InitMarket, OpenStake, Stake};
use gpu_market_tests::Cluster;
use solana_account_decoder_client_types::UiAccountEncoding;
use solana_commitment_config::CommitmentConfig;
use solana_keypair::Keypair;
use solana_program_pack::Pack;
use solana_pubsub_client::nonblocking::pubsub_client::PubsubClient;
use solana_rpc_client_api::config::RpcAccountInfoConfig;
use solana_signer::Signer;
use spl_token_interface::state::Account as TokenAccount;

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

    let mint = cluster.create_mint(6).await.unwrap();
    let tokens = cluster
        .create_token_account(&mint, &payer.pubkey())
        .await
        .unwrap();
    cluster.mint_to(&mint, &tokens, 1_000_000).await.unwrap();
    // A fresh market id, so that a shared cluster (anchor test) can run this test again.
    let id = u64::from_le_bytes(Keypair::new().pubkey().to_bytes()[..8].try_into().unwrap());
    let init = InitMarket {
        authority: payer,
        stake_mint: mint,
        payment_mint: mint,
        treasury: tokens,
        stake_treasury: tokens,
        id,
        params: MarketParams::recommended(60, 100, 600),
    };
    cluster.run(&init).await.unwrap();
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
    // The owner signs both.
    cluster
        .send(&[open.instruction(), stake.instruction()], &[payer])
        .await
        .unwrap();

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
