//! `gpu-market token …`: the few SPL token operations a local cluster needs, so that a
//! newcomer does not need the separate `spl-token` CLI to try the market.

use anyhow::Result;
use clap::Subcommand;
use gpu_market_sdk::token as sdk_token;
use solana_keypair::Keypair;
use solana_program_pack::Pack;
use solana_pubkey::Pubkey;
use solana_signer::Signer;
use spl_token_interface::state::Account as TokenAccount;

use crate::config::Config;
use crate::output::{print_record, text};
use crate::parse;

#[derive(Subcommand)]
pub enum TokenCommand {
    /// Creates a mint whose mint authority is the keypair.
    CreateMint {
        #[arg(long, default_value_t = 6)]
        decimals: u8,
    },
    /// Creates a token account of MINT for OWNER (default: the keypair).
    CreateAccount {
        mint: Pubkey,
        #[arg(long)]
        owner: Option<Pubkey>,
    },
    /// Mints AMOUNT (token units) of MINT into the token account TO (the keypair is the
    /// authority).
    Mint {
        mint: Pubkey,
        to: Pubkey,
        /// Token units, e.g. 1.5 (negative amounts are refused with a reason).
        #[arg(allow_hyphen_values = true)]
        amount: String,
    },
    /// Shows a token account's balance in token units.
    Balance { account: Pubkey },
}

pub fn run(config: &Config, command: TokenCommand) -> Result<()> {
    match command {
        TokenCommand::CreateMint { decimals } => {
            let payer = config.signer()?;
            let mint = Keypair::new();
            let rent = config.rent_exempt_minimum(sdk_token::MINT_LEN)?;
            let ixs = sdk_token::create_mint(
                &payer.pubkey(),
                &mint.pubkey(),
                rent,
                decimals,
                &payer.pubkey(),
            );
            let signature = config.send(&payer, &ixs, &[&mint])?;
            print_record(
                config.output,
                &[
                    ("mint", text(mint.pubkey())),
                    ("signature", text(signature)),
                ],
            );
        }
        TokenCommand::CreateAccount { mint, owner } => {
            let payer = config.signer()?;
            let owner = owner.unwrap_or(payer.pubkey());
            let account = Keypair::new();
            let rent = config.rent_exempt_minimum(sdk_token::ACCOUNT_LEN)?;
            let ixs =
                sdk_token::create_account(&payer.pubkey(), &account.pubkey(), rent, &mint, &owner);
            let signature = config.send(&payer, &ixs, &[&account])?;
            print_record(
                config.output,
                &[
                    ("account", text(account.pubkey())),
                    ("signature", text(signature)),
                ],
            );
        }
        TokenCommand::Mint { mint, to, amount } => {
            let decimals = config.mint_decimals(&mint)?;
            let amount = parse::positive_amount(&amount, decimals, "amount")?;
            let payer = config.signer()?;
            let ix = sdk_token::mint_to(&mint, &to, &payer.pubkey(), amount);
            let signature = config.send(&payer, &[ix], &[])?;
            print_record(config.output, &[("signature", text(signature))]);
        }
        TokenCommand::Balance { account } => {
            let data = config.account_data(&account, "token account")?;
            let acc = TokenAccount::unpack(&data)
                .map_err(|_| anyhow::anyhow!("{account} is not a token account"))?;
            print_record(
                config.output,
                &[
                    ("account", text(account)),
                    ("mint", text(acc.mint)),
                    ("owner", text(acc.owner)),
                    (
                        "amount",
                        parse::tokens(acc.amount, config.mint_decimals(&acc.mint)?),
                    ),
                ],
            );
        }
    }
    Ok(())
}
