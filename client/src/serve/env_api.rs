//! A bid's environment sealed in the browser: the market page's bid form takes `KEY=VALUE`
//! lines, and the wallet-only client seals them as `bid place --env FILE` does, the text never
//! leaving the browser.
//!
//! 1. `salt`: the page sends the text's sha256 and gets the salt's message to sign
//!    (`envelope::salt_text_of`, wrapped as a Solana off-chain message); the wallet signs it
//!    (`solana:signMessage`), and `seal.js` salts the text with that signature and hashes it:
//!    the same wallet and text give the same hash again, as from the CLI.
//! 2. The `bid` action places the bid with that hash (`env-hash`).
//! 3. `recipients`: the agent keys of the machines that may run the bid and hold no copy yet
//!    (`bid place`'s own `bid::env::recipients`).
//! 4. `seal`: for each, `seal.js` encrypts the salted text to the agent key, and the service
//!    builds the `seal_env` transaction of that copy for the wallet to sign.

use anyhow::{anyhow, bail, Result};
use base64::Engine as _;
use gpu_market::state::{Bid, Market};
use gpu_market_sdk::envelope::{self, MAGIC};
use gpu_market_sdk::offchain;
use gpu_market_sdk::ClientInstruction;
use serde_json::{json, Value};
use solana_instruction::Instruction;
use solana_pubkey::Pubkey;
use solana_signer::null_signer::NullSigner;

use crate::bid::env::{recipients as able, seal_env, without_copy};
use crate::config::Config;

/// `POST /api/env/salt` with `{"sha256": "<hex of the text's sha256>"}` → `{"message":
/// "<base64>"}`, the bytes the wallet signs for the environment's salt.
pub fn salt(body: &[u8]) -> Result<Value> {
    let request: Value = serde_json::from_slice(body)
        .map_err(|_| anyhow!("the body is not JSON: send {{\"sha256\": \"<hex>\"}}"))?;
    let mut digest = [0u8; 32];
    hex::decode_to_slice(request["sha256"].as_str().unwrap_or_default(), &mut digest)
        .map_err(|_| anyhow!("sha256 is not 64 hex digits"))?;
    let message = offchain::wrap(&envelope::salt_text_of(&digest))?;
    Ok(json!({ "message": base64::engine::general_purpose::STANDARD.encode(message) }))
}

/// The bid `key` of `market`, with an environment.
fn bid_with_env(config: &Config, market: &Pubkey, key: &Pubkey) -> Result<Bid> {
    let bid: Bid = config.fetch(key, "bid")?;
    if bid.market != *market {
        bail!("bid {key} is of market {}, not this one", bid.market);
    }
    if bid.env_hash == [0; 32] {
        bail!("bid {key} has no environment");
    }
    Ok(bid)
}

/// `GET /api/env/BID` → `{"bid", "machines": [{"machine", "agent", "agent_bytes"}]}`: each
/// machine that may run the bid whose agent holds no copy of its environment yet (its agent key
/// in base58, and its 32 bytes in base64 for `seal.js`).
pub fn recipients(config: &Config, market: &Pubkey, key: &Pubkey) -> Result<Value> {
    let bid = bid_with_env(config, market, key)?;
    let m: Market = config.fetch(market, "market")?;
    let to = without_copy(config, key, able(config, &bid, &m)?)?;
    let machines: Vec<Value> = to
        .iter()
        .map(|(agent, machine)| {
            json!({
                "machine": machine.to_string(),
                "agent": agent.to_string(),
                "agent_bytes": base64::engine::general_purpose::STANDARD.encode(agent),
            })
        })
        .collect();
    Ok(json!({ "bid": key.to_string(), "machines": machines }))
}

/// `POST /api/env/BID/seal` with `{"account", "recipient", "sealed": "<base64>"}`: the
/// `seal_env` instruction storing the copy `seal.js` sealed to `recipient`, for the bid's client
/// to sign; refused for anyone else, and for bytes that are not a sealed environment.
pub fn seal(
    config: &Config,
    market: &Pubkey,
    key: &Pubkey,
    account: &Pubkey,
    request: &Value,
) -> Result<(Vec<Instruction>, String)> {
    let bid = bid_with_env(config, market, key)?;
    if bid.client != *account {
        bail!(
            "only the bid's client {} may seal its environment, not {account}",
            bid.client
        );
    }
    let recipient: Pubkey = request["recipient"]
        .as_str()
        .unwrap_or_default()
        .parse()
        .map_err(|_| anyhow!("recipient is not a public key"))?;
    let sealed = base64::engine::general_purpose::STANDARD
        .decode(request["sealed"].as_str().unwrap_or_default())
        .map_err(|_| anyhow!("sealed is not base64"))?;
    if !sealed.starts_with(MAGIC) {
        bail!("the bytes are not a sealed environment");
    }
    let wallet = NullSigner::new(account);
    let ix = seal_env(&wallet, key, &recipient, sealed)?;
    Ok((
        vec![ix.instruction()],
        format!("Store the environment of bid {key} sealed to agent {recipient}"),
    ))
}
