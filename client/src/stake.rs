//! `gpu-market stake deposit|unstake|withdraw|claim|show|close`.

use std::io::Write;
use std::time::Duration;

use anyhow::{bail, Result};
use clap::Subcommand;
use gpu_market::pda;
use gpu_market::state::{Market, StakeAccount};
use gpu_market_sdk::{
    ClaimRefunds, ClientInstruction, CloseStake, OpenStake, RequestUnstake, Stake, WithdrawStake,
};
use solana_instruction::Instruction;
use solana_pubkey::Pubkey;
use solana_signer::Signer;

use crate::config::{Config, Signing};
use crate::output::{print_record, text};
use crate::parse;

#[derive(Subcommand)]
pub enum StakeCommand {
    /// Locks AMOUNT stake tokens (token units) in the market; opens the stake account if needed.
    Deposit {
        /// Token units, e.g. 1.5 (negative amounts are refused with a reason).
        #[arg(allow_hyphen_values = true)]
        amount: String,
        #[arg(long)]
        market: Pubkey,
        /// The stake-token account to pay from [default: the keypair's, largest balance].
        #[arg(long)]
        tokens: Option<Pubkey>,
    },
    /// Asks AMOUNT (token units) back: it stops counting at once and can be withdrawn after
    /// the market's cooldown.
    Unstake {
        /// Token units, e.g. 1.5 (negative amounts are refused with a reason).
        #[arg(allow_hyphen_values = true)]
        amount: String,
        #[arg(long)]
        market: Pubkey,
    },
    /// Pays out the stake whose cooldown is over.
    Withdraw {
        #[arg(long)]
        market: Pubkey,
        #[arg(long)]
        tokens: Option<Pubkey>,
        /// Wait for the cooldown to end instead of failing.
        #[arg(long)]
        wait: bool,
    },
    /// Pays out the refunds the stake account holds (`refunds_due`: escrow refunded while the
    /// keypair had no token account of the payment mint, e.g. after closing it).
    Claim {
        #[arg(long)]
        market: Pubkey,
        /// The payment-token account to pay into [default: the keypair's, largest balance].
        #[arg(long)]
        tokens: Option<Pubkey>,
    },
    /// Closes the keypair's empty stake account (nothing staked or waiting, no open bid, no
    /// GPU held, no refund to claim) and gives its rent back.
    Close {
        #[arg(long)]
        market: Pubkey,
    },
    /// Shows a stake account.
    Show {
        #[arg(long)]
        market: Pubkey,
        /// Whose stake [default: the keypair's].
        #[arg(long)]
        owner: Option<Pubkey>,
    },
}

pub fn run(config: &Config, command: StakeCommand) -> Result<()> {
    match command {
        StakeCommand::Deposit {
            amount,
            market,
            tokens,
        } => {
            let owner = config.signer()?;
            let ixs = plan_deposit(config, owner.key(), &market, &amount, tokens)?;
            let signature = config.send(&owner, &ixs, &[])?;
            show(config, &market, &owner.pubkey(), Some(signature))
        }
        StakeCommand::Unstake { amount, market } => {
            let owner = config.signer()?;
            let ixs = plan_unstake(config, owner.key(), &market, &amount)?;
            let signature = config.send(&owner, &ixs, &[])?;
            show(config, &market, &owner.pubkey(), Some(signature))
        }
        StakeCommand::Withdraw {
            market,
            tokens,
            wait,
        } => {
            let owner = config.signer()?;
            let plan = plan_withdraw(config, owner.key(), &market, tokens)?;
            if wait {
                wait_until(config, plan.unlocks_at, "the unstake cooldown")?;
            }
            let signature = config.send(&owner, &plan.instructions, &[])?;
            show(config, &market, &owner.pubkey(), Some(signature))
        }
        StakeCommand::Claim { market, tokens } => claim(config, &market, tokens),
        StakeCommand::Close { market } => {
            let owner = config.signer()?;
            let s = existing_stake(config, &market, &owner.pubkey())?;
            let m: Market = config.fetch(&market, "market")?;
            let d = config.mint_decimals(&m.stake_mint)?;
            let format = |v| gpu_market_core::amount::format(v, d);
            if s.amount > 0 || s.pending_unstake > 0 {
                bail!(
                    "the stake is not empty ({} staked, {} waiting to be withdrawn): unstake and withdraw it first",
                    format(s.amount),
                    format(s.pending_unstake)
                );
            }
            if s.machines > 0 {
                bail!(
                    "the stake backs {} registered machines: close them with `gpu-market host close` first",
                    s.machines
                );
            }
            if s.open_bids > 0 || s.gpus_held > 0 {
                bail!(
                    "the stake still has {} waiting bids and {} GPUs leased: cancel the bids and end the leases first",
                    s.open_bids,
                    s.gpus_held
                );
            }
            if s.refunds_due > 0 {
                bail!(
                    "the stake holds {} of refunds: claim them with `gpu-market stake claim --market {market}` first",
                    gpu_market_core::amount::format(s.refunds_due, config.mint_decimals(&m.payment_mint)?)
                );
            }
            let signature = config.send_all(
                &owner,
                &[&CloseStake {
                    owner: owner.key(),
                    market,
                }],
            )?;
            print_record(
                config.output,
                &[
                    ("stake", text(pda::stake(&market, &owner.pubkey()).0)),
                    ("closed", true.into()),
                    ("signature", text(signature)),
                ],
            );
            Ok(())
        }
        StakeCommand::Show { market, owner } => {
            let owner = match owner {
                Some(o) => o,
                None => config.signer()?.pubkey(),
            };
            show(config, &market, &owner, None)
        }
    }
}

/// Pays the refunds `market`'s stake of the keypair holds into its payment-token account.
fn claim(config: &Config, market: &Pubkey, tokens: Option<Pubkey>) -> Result<()> {
    let owner = config.signer()?;
    let m: Market = config.fetch(market, "market")?;
    let s = existing_stake(config, market, &owner.pubkey())?;
    if s.refunds_due == 0 {
        bail!(
            "nothing to claim: no refund is due to the stake of {} in market {market}",
            owner.pubkey()
        );
    }
    let (owner_tokens, _) = config.token_account(&owner.pubkey(), &m.payment_mint, tokens)?;
    let signature = config.send_all(
        &owner,
        &[&ClaimRefunds {
            owner: owner.key(),
            market: *market,
            payment_mint: m.payment_mint,
            owner_tokens,
        }],
    )?;
    let decimals = config.mint_decimals(&m.payment_mint)?;
    print_record(
        config.output,
        &[
            ("stake", text(pda::stake(market, &owner.pubkey()).0)),
            ("claimed", parse::tokens(s.refunds_due, decimals)),
            ("to", text(owner_tokens)),
            ("signature", text(signature)),
        ],
    );
    Ok(())
}

/// What `stake deposit` sends (also the `stake` action of `gpu-market serve`): `amount` token
/// units of `owner`'s stake tokens locked in `market`, the stake account opened on the way.
/// Refused before anything is built when the balance is short.
pub(crate) fn plan_deposit(
    config: &Config,
    owner: Signing,
    market: &Pubkey,
    amount: &str,
    tokens: Option<Pubkey>,
) -> Result<Vec<Instruction>> {
    let m: Market = config.fetch(market, "market")?;
    let decimals = config.mint_decimals(&m.stake_mint)?;
    let amount = parse::positive_amount(amount, decimals, "deposit")?;
    let (owner_tokens, balance) = config.token_account(&owner.pubkey(), &m.stake_mint, tokens)?;
    if balance < amount {
        bail!(
            "insufficient balance: the deposit is {} but token account {owner_tokens} holds {}",
            gpu_market_core::amount::format(amount, decimals),
            gpu_market_core::amount::format(balance, decimals)
        );
    }
    let stake_key = pda::stake(market, &owner.pubkey()).0;
    let mut ixs = Vec::new();
    if config.fetch::<StakeAccount>(&stake_key, "stake").is_err() {
        ixs.push(
            OpenStake {
                owner,
                market: *market,
            }
            .instruction(),
        );
    }
    ixs.push(
        Stake {
            owner,
            market: *market,
            stake_mint: m.stake_mint,
            owner_tokens,
            amount,
        }
        .instruction(),
    );
    Ok(ixs)
}

/// What `stake unstake` sends (the `unstake` action): `amount` asked back, at most what no
/// machine of `owner`'s bonds.
pub(crate) fn plan_unstake(
    config: &Config,
    owner: Signing,
    market: &Pubkey,
    amount: &str,
) -> Result<Vec<Instruction>> {
    let m: Market = config.fetch(market, "market")?;
    let decimals = config.mint_decimals(&m.stake_mint)?;
    let amount = parse::positive_amount(amount, decimals, "unstake amount")?;
    let s = existing_stake(config, market, &owner.pubkey())?;
    let bonded = s.bonded;
    if s.machines > 0 && amount > s.amount.saturating_sub(bonded) {
        let format = |v| gpu_market_core::amount::format(v, decimals);
        bail!(
            "{} of the stake backs your {} machines (the market's minimum when each was registered) and stays until they are closed: at most {} can be unstaked now",
            format(bonded),
            s.machines,
            format(s.amount.saturating_sub(bonded))
        );
    }
    Ok(vec![RequestUnstake {
        owner,
        market: *market,
        amount,
    }
    .instruction()])
}

/// What `stake withdraw` sends (the `withdraw` action), and when the cooldown lets it land.
pub(crate) struct Withdrawal {
    pub instructions: Vec<Instruction>,
    pub unlocks_at: i64,
}

pub(crate) fn plan_withdraw(
    config: &Config,
    owner: Signing,
    market: &Pubkey,
    tokens: Option<Pubkey>,
) -> Result<Withdrawal> {
    let m: Market = config.fetch(market, "market")?;
    let s = existing_stake(config, market, &owner.pubkey())?;
    if s.pending_unstake == 0 {
        bail!("nothing is waiting to be withdrawn: ask stake back with `stake unstake` first");
    }
    let (owner_tokens, _) = config.token_account(&owner.pubkey(), &m.stake_mint, tokens)?;
    Ok(Withdrawal {
        instructions: vec![WithdrawStake {
            owner,
            market: *market,
            stake_mint: m.stake_mint,
            owner_tokens,
        }
        .instruction()],
        unlocks_at: s.unlocks_at,
    })
}

fn existing_stake(config: &Config, market: &Pubkey, owner: &Pubkey) -> Result<StakeAccount> {
    config.fetch::<Market>(market, "market")?;
    let key = pda::stake(market, owner).0;
    config.fetch(&key, "stake").map_err(|_| {
        anyhow::anyhow!(
            "{owner} has no stake in market {market}: deposit with `gpu-market stake deposit` first"
        )
    })
}

/// Sleeps until the cluster clock reaches `at`, showing the time left on stderr.
pub fn wait_until(config: &Config, at: i64, what: &str) -> Result<()> {
    let mut shown = false;
    loop {
        let now = config.cluster_time()?;
        if now >= at {
            if shown {
                eprintln!();
            }
            return Ok(());
        }
        shown = true;
        eprint!("\rwaiting for {what}: {} s left   ", at - now);
        std::io::stderr().flush()?;
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn show(config: &Config, market: &Pubkey, owner: &Pubkey, signature: Option<String>) -> Result<()> {
    let m: Market = config.fetch(market, "market")?;
    let decimals = config.mint_decimals(&m.stake_mint)?;
    let key = pda::stake(market, owner).0;
    let s = existing_stake(config, market, owner)?;
    let mut fields = vec![
        ("stake", text(key)),
        ("market", text(market)),
        ("owner", text(owner)),
        ("amount", parse::tokens(s.amount, decimals)),
        (
            "pending_unstake",
            parse::tokens(s.pending_unstake, decimals),
        ),
        ("unlocks_at", s.unlocks_at.into()),
        ("open_bids", s.open_bids.into()),
        ("gpus_held", s.gpus_held.into()),
        ("machines", s.machines.into()),
        ("bonded", parse::tokens(s.bonded, decimals)),
        (
            "refunds_due",
            parse::tokens(s.refunds_due, config.mint_decimals(&m.payment_mint)?),
        ),
    ];
    if let Some(sig) = signature {
        fields.push(("signature", text(sig)));
    }
    print_record(config.output, &fields);
    Ok(())
}
