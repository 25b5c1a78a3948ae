//! A bid's environment, delivered through the chain: `bid place --env FILE` seals it to each
//! machine that may run the bid (a spot bid's machine; for a queue bid, every machine of the
//! market the bid fits when that machine is empty) and stores one `seal_env` account per agent
//! key; the agent that runs the lease reads the copy sealed to its key. `gpu-market bid seal
//! BID --env FILE` adds machines later (registered, or resumed, since): the same file and
//! keypair give the bid's hash again. Nobody ever sees the plaintext but the client and the
//! agent of the machine that runs the lease.

use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use gpu_market::pda;
use gpu_market::state::{Bid, BidKind, Freed, Machine, MachineStatus, Market, SealedEnv};
use gpu_market_sdk::envelope::Environment;
use gpu_market_sdk::placement::sealed_holders;
use gpu_market_sdk::SealEnv;
use serde_json::Value;
use solana_pubkey::Pubkey;
use solana_signer::Signer;

use crate::config::{Config, Wallet};
use crate::output::{print_record, text, Fields};

/// Reads the environment file `path` as the bid of `client` carries it: salted by the client's
/// signature, which a hardware wallet asks its owner for.
pub(super) fn read_env(path: &Path, client: &dyn Signer) -> Result<Environment> {
    let plain = std::fs::read(path)
        .with_context(|| format!("cannot read the environment file {}", path.display()))?;
    Environment::new(&plain, client)
        .map_err(|e| anyhow!("the wallet did not sign the environment's salt: {e}"))
}

/// The agent keys that may run bid `b`, each with one of its machines: a spot bid's machine,
/// or each machine of the market (not retired nor paused) whose GPUs would serve the queue bid
/// with no lease running.
pub(crate) fn recipients(config: &Config, b: &Bid, m: &Market) -> Result<Vec<(Pubkey, Pubkey)>> {
    let machines: Vec<(Pubkey, Machine)> = match b.kind {
        BidKind::Spot => vec![(b.machine, config.fetch(&b.machine, "machine")?)],
        BidKind::Queue => config.program_accounts_of::<Machine>(&[(0, b.market)])?,
    };
    let now = config.cluster_time()?;
    let mut out: Vec<(Pubkey, Pubkey)> = Vec::new();
    for (key, mach) in machines {
        let serves = b.kind == BidKind::Spot
            || (mach.status == MachineStatus::Active
                && mach
                    .offer(m, b.kind, now, &Freed::all())
                    .is_ok_and(|offer| b.fit(&offer).is_ok()));
        if serves && !out.iter().any(|(agent, _)| *agent == mach.agent) {
            out.push((mach.agent, key));
        }
    }
    Ok(out)
}

/// Those of `to` (agent key, machine) whose agent has no copy of bid `bid`'s environment yet.
pub(crate) fn without_copy(
    config: &Config,
    bid: &Pubkey,
    to: Vec<(Pubkey, Pubkey)>,
) -> Result<Vec<(Pubkey, Pubkey)>> {
    let addresses: Vec<Pubkey> = to
        .iter()
        .map(|(agent, _)| pda::sealed_env(bid, agent).0)
        .collect();
    let existing = config.fetch_many::<SealedEnv>(&addresses)?;
    Ok(to
        .into_iter()
        .zip(existing)
        .filter_map(|(to, have)| have.is_none().then_some(to))
        .collect())
}

/// The `seal_env` instruction that stores `sealed` (a copy for `recipient`), refused when it
/// could not travel on chain.
pub(crate) fn seal_env<'a>(
    client: &'a (dyn Signer + Sync),
    bid: &Pubkey,
    recipient: &Pubkey,
    sealed: Vec<u8>,
) -> Result<SealEnv<'a>> {
    if sealed.len() > SealedEnv::MAX_SEALED {
        bail!(
            "the environment is too large to travel on chain: {} bytes sealed, at most {}",
            sealed.len(),
            SealedEnv::MAX_SEALED
        );
    }
    Ok(SealEnv {
        client,
        bid: *bid,
        recipient: *recipient,
        sealed,
    })
}

/// Seals `env` to each of `to` (agent key, machine) that has no copy yet, one `seal_env`
/// transaction each; returns the machines sealed to.
fn seal_each(
    config: &Config,
    client: &Wallet,
    bid: &Pubkey,
    env: &Environment,
    to: Vec<(Pubkey, Pubkey)>,
) -> Result<Vec<Pubkey>> {
    let mut sealed_to = Vec::new();
    for (agent, machine) in without_copy(config, bid, to)? {
        let sealed = env
            .seal_to(&agent)
            .map_err(|e| anyhow!("cannot seal the environment to machine {machine}: {e}"))?;
        let ix = seal_env(client.key(), bid, &agent, sealed)?;
        config.send_all(client, &[&ix]).with_context(|| {
            format!("cannot store the environment sealed to machine {machine}: run `gpu-market bid seal {bid} --env FILE` to try again")
        })?;
        sealed_to.push(machine);
    }
    Ok(sealed_to)
}

/// After `bid place --env`: seals the new bid's environment to each machine that may run it,
/// or only to those of `only` (`--seal-to`) where it names any.
pub(super) fn seal_new_bid(
    config: &Config,
    client: &Wallet,
    (key, b): (&Pubkey, &Bid),
    m: &Market,
    env: &Environment,
    only: &[Pubkey],
) -> Result<Vec<Pubkey>> {
    let mut to = recipients(config, b, m)?;
    if !only.is_empty() {
        to.retain(|(_, machine)| only.contains(machine));
    }
    seal_each(config, client, key, env, to)
}

/// `bid place --seal-to`'s machines `only`, before anything is sent: each one of `could` (the
/// machines that could run the bid once empty), and, for a gang of `parts`, enough of them.
pub(super) fn check_seal_to(only: &[Pubkey], could: &[Pubkey], parts: u8) -> Result<()> {
    if only.is_empty() {
        return Ok(());
    }
    if let Some(m) = only.iter().find(|m| !could.contains(m)) {
        bail!(
            "--seal-to {m}: that machine could not run this bid (it is not an active machine of              the market whose GPUs serve it, even with nothing else running); {} could",
            match could.len() {
                0 => "none".to_string(),
                n => format!("{n} machine(s)"),
            }
        );
    }
    let mut distinct = only.to_vec();
    distinct.sort();
    distinct.dedup();
    if distinct.len() < parts as usize {
        bail!(
            "a gang of {parts} machines runs only on machines its environment is sealed to:              --seal-to names {}",
            distinct.len()
        );
    }
    Ok(())
}

/// The machines of `machines` whose agent can open queue bid `b`'s (at `key`) sealed
/// environment, as every agent computes them (`placement::Sealed`): `None` for a bid without
/// one; none while it is sealed to nobody.
pub(super) fn holders(
    config: &Config,
    key: &Pubkey,
    b: &Bid,
    machines: &[(Pubkey, Machine)],
) -> Result<Option<Vec<Pubkey>>> {
    if b.kind != BidKind::Queue || b.env_hash == [0; 32] {
        return Ok(None);
    }
    let recipients: Vec<Pubkey> = config
        .program_accounts_of::<SealedEnv>(&[(32, *key)])?
        .into_iter()
        .map(|(_, e)| e.recipient)
        .collect();
    Ok(Some(sealed_holders(machines, &recipients)))
}

/// `gpu-market bid seal BID --env FILE [--machine M]…`.
pub(super) fn seal(config: &Config, bid: &Pubkey, path: &Path, machines: &[Pubkey]) -> Result<()> {
    let client = config.signer()?;
    let b: Bid = config.fetch(bid, "bid")?;
    if b.client != client.pubkey() {
        bail!(
            "only the bid's client {} may seal its environment; the keypair is {}",
            b.client,
            client.pubkey()
        );
    }
    if b.env_hash == [0; 32] {
        bail!("bid {bid} has no environment: it was placed without --env");
    }
    let env = read_env(path, &client)?;
    if env.hash() != b.env_hash {
        bail!(
            "{} is not the environment bid {bid} was placed with (its hash differs)",
            path.display()
        );
    }
    let m: Market = config.fetch(&b.market, "market")?;
    let to = if machines.is_empty() {
        recipients(config, &b, &m)?
    } else {
        machines
            .iter()
            .map(|k| Ok((config.fetch::<Machine>(k, "machine")?.agent, *k)))
            .collect::<Result<_>>()?
    };
    let able = to.len();
    let sealed_to = seal_each(config, &client, bid, &env, to)?;
    let fields: Fields = vec![
        ("bid", text(bid)),
        ("machines_able", (able as u64).into()),
        ("sealed_to", machines_value(&sealed_to)),
        ("already_sealed", ((able - sealed_to.len()) as u64).into()),
    ];
    print_record(config.output, &fields);
    Ok(())
}

pub(super) fn machines_value(machines: &[Pubkey]) -> Value {
    Value::Array(machines.iter().map(text).collect())
}
