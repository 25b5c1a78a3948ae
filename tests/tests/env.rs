//! Sealed environments on chain: the bid's client stores its environment sealed to each
//! machine's agent key (`seal_env`); the copy is closed by its client, or by anyone once the
//! bid is gone, its rent back to the client (`close_sealed_env`). On the SBF build in LiteSVM;
//! every refusal is checked to store and move nothing.

use gpu_market_tests::lease_fixture;

use gpu_market::errors::MarketError;
use gpu_market::pda;
use gpu_market::state::SealedEnv;
use gpu_market_sdk::envelope::{open_env, Environment};
use gpu_market_sdk::{CloseSealedEnv, SealEnv};
use lease_fixture::*;
use solana_signer::Signer;

fn lamports(f: &Fixture, key: &solana_pubkey::Pubkey) -> u64 {
    f.ctx.svm.get_account(key).map_or(0, |a| a.lamports)
}

#[test]
fn the_client_seals_its_environment_to_the_agent_which_opens_it_from_the_chain() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    let env = Environment::new(b"HF_TOKEN=s3cret\n", &c.key).unwrap();
    let mut args = f.queue_args(1, 8);
    args.env_hash = env.hash();
    let bid = f.place(&c, args);
    let address = pda::sealed_env(&bid, &f.agent.pubkey()).0;

    // Only the bid's client may store a copy.
    let stranger = f.ctx.wallet(1);
    let by_stranger = SealEnv {
        client: &stranger,
        bid,
        recipient: f.agent.pubkey(),
        sealed: env.seal_to(&f.agent.pubkey()).unwrap(),
    };
    let err = f.ctx.run(&by_stranger).unwrap_err();
    assert_eq!(err.custom_code(), Some(2001), "has_one client");
    // At most 800 bytes, and at least one.
    for len in [0, SealedEnv::MAX_SEALED + 1] {
        let err = f
            .ctx
            .run(&SealEnv {
                client: &c.key,
                bid,
                recipient: f.agent.pubkey(),
                sealed: vec![1; len],
            })
            .unwrap_err();
        assert_eq!(err.custom_code(), code(MarketError::SealedEnvSize), "{len}");
    }
    assert!(!f.ctx.account_exists(&address), "nothing stored");

    let before = lamports(&f, &c.key.pubkey());
    f.ctx
        .run(&SealEnv {
            client: &c.key,
            bid,
            recipient: f.agent.pubkey(),
            sealed: env.seal_to(&f.agent.pubkey()).unwrap(),
        })
        .expect("seal_env");
    let stored: SealedEnv = f.ctx.account(&address);
    assert_eq!(
        (stored.market, stored.bid, stored.client, stored.recipient),
        (f.market, bid, c.key.pubkey(), f.agent.pubkey())
    );
    assert!(!stored.sealed.windows(6).any(|w| w == b"s3cret"));
    assert_eq!(
        open_env(&stored.sealed, &f.agent, &env.hash()).unwrap(),
        b"HF_TOKEN=s3cret\n"
    );
    let rent = lamports(&f, &address);
    assert!(
        before - lamports(&f, &c.key.pubkey()) >= rent,
        "the client paid the rent"
    );

    // A second copy for the same agent is refused (the address is taken).
    assert!(f
        .ctx
        .run(&SealEnv {
            client: &c.key,
            bid,
            recipient: f.agent.pubkey(),
            sealed: vec![1; 10],
        })
        .is_err());

    // While the bid lives only its client may close the copy; once it is gone, anyone, and
    // the rent goes back to the client.
    let stranger_close = CloseSealedEnv {
        signer: &stranger,
        bid,
        client: c.key.pubkey(),
        recipient: f.agent.pubkey(),
    };
    let err = f.ctx.run(&stranger_close).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::SealedEnvInUse));
    assert!(f.ctx.account_exists(&address));
    f.cancel(&c, bid).expect("cancel_bid");
    let before = lamports(&f, &c.key.pubkey());
    f.ctx.run(&stranger_close).expect("close_sealed_env");
    assert!(!f.ctx.account_exists(&address));
    assert_eq!(
        lamports(&f, &c.key.pubkey()),
        before + rent,
        "rent to the client"
    );
}

#[test]
fn a_bid_without_an_environment_takes_no_sealed_copy() {
    let mut f = fixture();
    let c = f.client(100 * TOKEN, 0);
    let mut args = f.queue_args(1, 8);
    args.env_hash = [0; 32];
    let bid = f.place(&c, args);
    let err = f
        .ctx
        .run(&SealEnv {
            client: &c.key,
            bid,
            recipient: f.agent.pubkey(),
            sealed: vec![1; 10],
        })
        .unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::NoEnvironment));
    assert!(!f
        .ctx
        .account_exists(&pda::sealed_env(&bid, &f.agent.pubkey()).0));
}
