//! `gpu-market market init|show`.

use anchor_lang::{AccountDeserialize, InstructionData, ToAccountMetas};
use anyhow::Result;
use clap::Subcommand;
use gpu_market::instructions::InitMarketArgs;
use gpu_market::pda;
use gpu_market::state::{Market, MarketParams};
use solana_instruction::Instruction;
use solana_pubkey::Pubkey;
use solana_signer::Signer;

use crate::config::Config;
use crate::output::print_record;

#[derive(Subcommand)]
pub enum MarketCommand {
    /// Creates a market owned by the keypair, with its stake and payment vaults.
    Init {
        /// Distinguishes several markets of one authority.
        #[arg(long, default_value_t = 0)]
        id: u64,
        #[arg(long)]
        stake_mint: Pubkey,
        /// Defaults to the stake mint.
        #[arg(long)]
        payment_mint: Option<Pubkey>,
        /// Token account (of the payment mint) that receives protocol fees.
        #[arg(long)]
        treasury: Pubkey,
        /// Token account (of the stake mint) that receives slashed host stake; defaults to the
        /// treasury (which must then be of the stake mint too).
        #[arg(long)]
        stake_treasury: Option<Pubkey>,
        #[arg(long, default_value_t = 60)]
        billing_interval_secs: u32,
        #[arg(long, default_value_t = 250)]
        protocol_fee_bps: u16,
        #[arg(long, default_value_t = 86_400)]
        unstake_cooldown_secs: u32,
    },
    /// Shows a market.
    Show { market: Pubkey },
}

pub fn run(config: &Config, command: MarketCommand) -> Result<()> {
    match command {
        MarketCommand::Init {
            id,
            stake_mint,
            payment_mint,
            treasury,
            stake_treasury,
            billing_interval_secs,
            protocol_fee_bps,
            unstake_cooldown_secs,
        } => {
            let authority = config.signer()?;
            let payment_mint = payment_mint.unwrap_or(stake_mint);
            let (market, _) = pda::market(&authority.pubkey(), id);
            let ix = Instruction {
                program_id: gpu_market::ID,
                accounts: gpu_market::accounts::InitMarket {
                    authority: authority.pubkey(),
                    market,
                    stake_mint,
                    payment_mint,
                    stake_vault: pda::stake_vault(&market).0,
                    payment_vault: pda::payment_vault(&market).0,
                    treasury,
                    stake_treasury: stake_treasury.unwrap_or(treasury),
                    token_program: spl_token_interface::ID,
                    system_program: solana_system_interface::program::ID,
                }
                .to_account_metas(None),
                data: gpu_market::instruction::InitMarket {
                    args: InitMarketArgs {
                        id,
                        params: MarketParams::recommended(
                            billing_interval_secs,
                            protocol_fee_bps,
                            unstake_cooldown_secs,
                        ),
                    },
                }
                .data(),
            };
            let signature = config.send(&authority, &[ix], &[])?;
            print_record(
                config.output,
                &[("market", market.to_string()), ("signature", signature)],
            );
            Ok(())
        }
        MarketCommand::Show { market } => {
            let data = config.account_data(&market, "market")?;
            let m = Market::try_deserialize(&mut data.as_slice())
                .map_err(|_| anyhow::anyhow!("{market} is not a market account"))?;
            print_record(
                config.output,
                &[
                    ("market", market.to_string()),
                    ("authority", m.authority.to_string()),
                    ("id", m.id.to_string()),
                    ("stake_mint", m.stake_mint.to_string()),
                    ("payment_mint", m.payment_mint.to_string()),
                    ("stake_vault", m.stake_vault.to_string()),
                    ("payment_vault", m.payment_vault.to_string()),
                    ("treasury", m.treasury.to_string()),
                    (
                        "billing_interval_secs",
                        m.params.billing_interval_secs.to_string(),
                    ),
                    ("protocol_fee_bps", m.params.protocol_fee_bps.to_string()),
                    (
                        "unstake_cooldown_secs",
                        m.params.unstake_cooldown_secs.to_string(),
                    ),
                    (
                        "score_weights_bps",
                        format!(
                            "stake {} / urgency {} / complexity {}",
                            m.params.weights_bps[0],
                            m.params.weights_bps[1],
                            m.params.weights_bps[2]
                        ),
                    ),
                    (
                        "base_price_per_gpu_hour",
                        m.params.base_price_per_gpu_hour.to_string(),
                    ),
                    ("total_staked", m.total_staked.to_string()),
                ],
            );
            Ok(())
        }
    }
}
