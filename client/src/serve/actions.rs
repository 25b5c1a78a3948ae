//! The Solana Actions of `gpu-market serve`: what each action asks for (its GET metadata) and the
//! instructions its POST builds for a wallet's key, by the very plan the CLI's verb sends
//! (`stake::plan_deposit`, `bid::plan_place`, …). The wallet's key is stood for by a
//! `NullSigner`: the transaction comes back unsigned, for the wallet to sign.

use anyhow::{anyhow, bail, Result};
use gpu_market::state::MachineStatus;
use serde_json::{json, Value};
use solana_instruction::Instruction;
use solana_pubkey::Pubkey;
use solana_signer::null_signer::NullSigner;

use crate::bid::{place_args_from, plan_cancel, plan_place, plan_top_up, PlaceArgs};
use crate::config::Config;
use crate::host::plan_set_status;
use crate::lease::{plan_end, Closing};
use crate::output::clap_sentence;
use crate::stake::{plan_deposit, plan_unstake, plan_withdraw};

/// One action of the service, at `/api/actions/<name>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Stake,
    Unstake,
    Withdraw,
    Bid,
    TopUp,
    Cancel,
    EndLease,
    Pause,
    Resume,
    Retire,
}

/// A parameter a wallet (or a Blink client) asks its user for: its name in the action's query.
struct Param {
    name: &'static str,
    label: &'static str,
    required: bool,
}

const fn param(name: &'static str, label: &'static str, required: bool) -> Param {
    Param {
        name,
        label,
        required,
    }
}

/// The `bid` action's parameters: `bid place`'s own flags (their names without `--`), read by
/// the same parser, so that the action and the CLI take one grammar; and `env-hash`, the sha256
/// of an environment sealed where its text is (the market page seals it in the browser, with the
/// wallet's signature for its salt: `seal.js`), which `bid place --env FILE` computes itself.
const BID_PARAMS: &[Param] = &[
    param("image", "Image reference", true),
    param("image-digest", "Image sha256 digest", true),
    param("gpus", "GPUs", true),
    param("gib-per-gpu", "GiB of GPU memory per GPU", true),
    param("overclock", "Overclock terms, e.g. power=300", true),
    param(
        "price",
        "Price per GPU-hour (queue) or GPU-day (spot)",
        true,
    ),
    param("duration", "Longest run time, e.g. 2h", true),
    param("class", "Accepted GPU class", false),
    param("machine", "A spot bid on this machine", false),
    param("deadline", "Latest end, +DURATION or unix time", false),
    param(
        "min-duration",
        "Shortest run accepted should it start late, e.g. 1h",
        false,
    ),
    param("urgency-premium", "Urgency premium", false),
    param("port", "Container port to publish", false),
    param("scratch-gib", "Scratch GiB kept after the lease", false),
    param("cpus", "CPU cores reserved, e.g. 8", false),
    param("memory", "Memory reserved, e.g. 32GiB", false),
    param("region", "A region whose machines may run it", false),
    param("nonce", "Nonce", false),
    param("tokens", "Payment-token account", false),
    param(ENV_HASH, "Sealed environment's sha256 (hex)", false),
];

/// The bid action's parameter that is not a flag of `bid place`.
pub const ENV_HASH: &str = "env-hash";

/// What an action's POST builds: the instructions, a sentence for the wallet to show, and the
/// bid a `bid` action places (which the page then seals its environment for).
pub struct Built {
    pub instructions: Vec<Instruction>,
    pub message: String,
    pub bid: Option<Pubkey>,
}

impl Action {
    pub const ALL: [Action; 10] = [
        Action::Stake,
        Action::Unstake,
        Action::Withdraw,
        Action::Bid,
        Action::TopUp,
        Action::Cancel,
        Action::EndLease,
        Action::Pause,
        Action::Resume,
        Action::Retire,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Action::Stake => "stake",
            Action::Unstake => "unstake",
            Action::Withdraw => "withdraw",
            Action::Bid => "bid",
            Action::TopUp => "top-up",
            Action::Cancel => "cancel",
            Action::EndLease => "end-lease",
            Action::Pause => "pause",
            Action::Resume => "resume",
            Action::Retire => "retire",
        }
    }

    pub fn from_name(name: &str) -> Option<Action> {
        Action::ALL.into_iter().find(|a| a.name() == name)
    }

    fn title(self) -> &'static str {
        match self {
            Action::Stake => "Stake in the GPU market",
            Action::Unstake => "Ask stake back",
            Action::Withdraw => "Withdraw stake",
            Action::Bid => "Bid for GPUs",
            Action::TopUp => "Top up a bid",
            Action::Cancel => "Cancel a bid",
            Action::EndLease => "End a lease",
            Action::Pause => "Pause a machine",
            Action::Resume => "Resume a machine",
            Action::Retire => "Retire a machine",
        }
    }

    fn description(self) -> &'static str {
        match self {
            Action::Stake => {
                "Locks stake tokens in the market: stake weighs 40 % of a bid's allocation score."
            }
            Action::Unstake => {
                "Stops counting stake at once; it can be withdrawn after the market's cooldown."
            }
            Action::Withdraw => "Pays out the stake whose cooldown is over.",
            Action::Bid => {
                "Places a queue bid (or a spot bid on one machine): price × GPUs × duration is locked in escrow."
            }
            Action::TopUp => "Adds payment tokens to a bid's escrow.",
            Action::Cancel => "Cancels a waiting bid; its escrow is refunded, less any holding charge for time it waited in a full book.",
            Action::EndLease => {
                "Ends a lease now; it settles once the host has proven its time, the rest of the escrow refunded."
            }
            Action::Pause => "Stops the machine taking new leases; those running go on.",
            Action::Resume => "Lets a paused machine take leases again.",
            Action::Retire => {
                "Takes the machine off the market for good once its leases end; it can then be closed for its rent and its stake bond."
            }
        }
    }

    fn params(self) -> &'static [Param] {
        const AMOUNT: &[Param] = &[param("amount", "Amount (token units)", true)];
        const BID_AMOUNT: &[Param] = &[
            param("bid", "Bid", true),
            param("amount", "Amount (token units)", true),
        ];
        const BID: &[Param] = &[param("bid", "Bid", true)];
        const LEASE: &[Param] = &[param("lease", "Lease", true)];
        const MACHINE: &[Param] = &[param("machine", "Machine", true)];
        match self {
            Action::Stake | Action::Unstake => AMOUNT,
            Action::Withdraw => &[],
            Action::Bid => BID_PARAMS,
            Action::TopUp => BID_AMOUNT,
            Action::Cancel => BID,
            Action::EndLease => LEASE,
            Action::Pause | Action::Resume | Action::Retire => MACHINE,
        }
    }

    /// The GET answer (the spec's `ActionGetResponse`): one linked action whose `href` names
    /// each parameter as a `{placeholder}` the client fills in.
    pub fn metadata(self, icon: &str) -> Value {
        let params = self.params();
        let query: Vec<String> = params
            .iter()
            .map(|p| format!("{0}={{{0}}}", p.name))
            .collect();
        let href = match query.is_empty() {
            true => format!("/api/actions/{}", self.name()),
            false => format!("/api/actions/{}?{}", self.name(), query.join("&")),
        };
        let parameters: Vec<Value> = params
            .iter()
            .map(|p| json!({"name": p.name, "label": p.label, "required": p.required}))
            .collect();
        json!({
            "type": "action",
            "icon": icon,
            "title": self.title(),
            "description": self.description(),
            "label": self.title(),
            "links": {"actions": [{
                "type": "transaction",
                "label": self.title(),
                "href": href,
                "parameters": parameters,
            }]},
        })
    }

    /// The instructions the POST of `account` with `query` builds, and a sentence for the
    /// wallet to show; refused with the CLI's reason when the verb would be.
    pub fn instructions(
        self,
        config: &Config,
        market: &Pubkey,
        query: &[(String, String)],
        account: &Pubkey,
    ) -> Result<Built> {
        let wallet = NullSigner::new(account);
        let known: Vec<&str> = self.params().iter().map(|p| p.name).collect();
        if let Some((k, _)) = query.iter().find(|(k, _)| !known.contains(&k.as_str())) {
            bail!("the {} action takes no parameter {k:?}", self.name());
        }
        let one = |name: &str| -> Result<&str> {
            let mut values = query.iter().filter(|(k, _)| k == name);
            match (values.next(), values.next()) {
                (Some((_, v)), None) if !v.is_empty() => Ok(v),
                (Some(_), Some(_)) => bail!("give {name} once"),
                _ => bail!("the {} action needs {name}", self.name()),
            }
        };
        let key = |name: &str| -> Result<Pubkey> {
            one(name)?
                .parse()
                .map_err(|_| anyhow!("{name} is not a public key"))
        };
        let (instructions, message) = match self {
            Action::Stake => (
                plan_deposit(config, &wallet, market, one("amount")?, None)?,
                format!("Stake {} in market {market}", one("amount")?),
            ),
            Action::Unstake => (
                plan_unstake(config, &wallet, market, one("amount")?)?,
                format!("Ask {} of stake back", one("amount")?),
            ),
            Action::Withdraw => {
                let plan = plan_withdraw(config, &wallet, market, None)?;
                let now = config.cluster_time()?;
                if now < plan.unlocks_at {
                    bail!(
                        "the unstake cooldown ends at unix time {} ({} s from now)",
                        plan.unlocks_at,
                        plan.unlocks_at - now
                    );
                }
                (plan.instructions, "Withdraw the stake asked back".into())
            }
            Action::Bid => {
                let env_hash = match query.iter().any(|(k, _)| k == ENV_HASH) {
                    true => env_hash(one(ENV_HASH)?)?,
                    false => [0; 32],
                };
                let flags: Vec<(String, String)> = query
                    .iter()
                    .filter(|(k, _)| k != ENV_HASH)
                    .cloned()
                    .collect();
                let args = place_args(market, &flags)?;
                let plan = plan_place(config, &wallet, &args, env_hash)?;
                let paid = gpu_market_core::amount::format(plan.paid, plan.decimals);
                return Ok(Built {
                    instructions: plan.instructions,
                    message: format!("Bid {}, up to {paid} in escrow and premium", plan.bid),
                    bid: Some(plan.bid),
                });
            }
            Action::TopUp => (
                plan_top_up(config, &wallet, &key("bid")?, one("amount")?, None)?,
                format!("Top up bid {} by {}", key("bid")?, one("amount")?),
            ),
            Action::Cancel => {
                let plan = plan_cancel(config, &wallet, &key("bid")?, None)?;
                let refund = gpu_market_core::amount::format(plan.refund, plan.decimals);
                (
                    plan.instructions,
                    format!("Cancel bid {}, {refund} refunded", key("bid")?),
                )
            }
            Action::EndLease => (
                plan_end(config, &wallet, &key("lease")?, None, Closing::End)?.instructions,
                format!("End lease {}", key("lease")?),
            ),
            Action::Pause | Action::Resume | Action::Retire => {
                let status = match self {
                    Action::Pause => MachineStatus::Paused,
                    Action::Resume => MachineStatus::Active,
                    _ => MachineStatus::Retired,
                };
                (
                    plan_set_status(config, &wallet, &key("machine")?, status)?,
                    format!("{} {}", self.title(), key("machine")?),
                )
            }
        };
        Ok(Built {
            instructions,
            message,
            bid: None,
        })
    }
}

/// An environment's sha256 as the `env-hash` parameter gives it: 64 hex digits, not all zero
/// (zero is a bid without one).
fn env_hash(hex: &str) -> Result<[u8; 32]> {
    let mut hash = [0u8; 32];
    hex::decode_to_slice(hex, &mut hash).map_err(|_| anyhow!("{ENV_HASH} is not 64 hex digits"))?;
    if hash == [0; 32] {
        bail!("{ENV_HASH} is zero: leave it out for a bid without an environment");
    }
    Ok(hash)
}

/// `bid place`'s arguments from the action's query, through the CLI's own parser.
fn place_args(market: &Pubkey, query: &[(String, String)]) -> Result<PlaceArgs> {
    let mut argv = vec![format!("--market={market}")];
    argv.extend(query.iter().map(|(k, v)| format!("--{k}={v}")));
    place_args_from(argv).map_err(|e| {
        // clap's sentence, its flags named as the action's parameters.
        let sentence = clap_sentence(&e);
        anyhow!(
            "{}",
            sentence
                .trim_start_matches("error: ")
                .replace("'--", "'")
                .replace(" --", " ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_action_is_found_by_its_name_and_its_href_names_each_parameter() {
        for a in Action::ALL {
            assert_eq!(Action::from_name(a.name()), Some(a));
            let meta = a.metadata("http://x/icon.svg");
            let link = &meta["links"]["actions"][0];
            let href = link["href"].as_str().unwrap();
            assert!(href.starts_with(&format!("/api/actions/{}", a.name())));
            for p in link["parameters"].as_array().unwrap() {
                let name = p["name"].as_str().unwrap();
                assert!(href.contains(&format!("{name}={{{name}}}")), "{href}");
            }
        }
        assert_eq!(Action::from_name("steal"), None);
    }

    #[test]
    fn the_bid_action_reads_its_query_with_the_cli_parser() {
        let market = Pubkey::new_unique();
        let q = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let base = [
            ("image", "registry.example/train:v3"),
            ("image-digest", "ab"),
            ("gpus", "2"),
            ("gib-per-gpu", "40"),
            ("overclock", "power=300"),
            ("price", "1.5"),
            ("duration", "2h"),
            ("class", "1"),
            ("class", "2"),
        ];
        assert!(place_args(&market, &q(&base)).is_ok());
        let missing = place_args(&market, &q(&base[1..])).err().unwrap();
        assert!(missing.to_string().contains("image <IMAGE>"), "{missing}");
        let bad = place_args(&market, &q(&[("gpus", "many")])).err().unwrap();
        assert!(bad.to_string().contains("many"), "{bad}");
    }
}
