//! `gpu-market token …`: the few SPL token operations a local cluster needs, so that a
//! newcomer does not need the separate `spl-token` CLI to try the market.

use anyhow::Result;
use clap::Subcommand;
use solana_keypair::Keypair;
use solana_program_pack::Pack;
use solana_pubkey::Pubkey;
use solana_signer::Signer;
use spl_token_interface::state::{Account as TokenAccount, Mint};

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
    let token = spl_token_interface::ID;
    match command {
        TokenCommand::CreateMint { decimals } => {
            let payer = config.signer()?;
            let mint = Keypair::new();
            let rent = config.rent_exempt_minimum(Mint::LEN)?;
            let ixs = [
                solana_system_interface::instruction::create_account(
                    &payer.pubkey(),
                    &mint.pubkey(),
                    rent,
                    Mint::LEN as u64,
                    &token,
                ),
                spl_token_interface::instruction::initialize_mint2(
                    &token,
                    &mint.pubkey(),
                    &payer.pubkey(),
                    None,
                    decimals,
                )?,
            ];
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
            let rent = config.rent_exempt_minimum(TokenAccount::LEN)?;
            let ixs = [
                solana_system_interface::instruction::create_account(
                    &payer.pubkey(),
                    &account.pubkey(),
                    rent,
                    TokenAccount::LEN as u64,
                    &token,
                ),
                spl_token_interface::instruction::initialize_account3(
                    &token,
                    &account.pubkey(),
                    &mint,
                    &owner,
                )?,
            ];
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
            let ix = spl_token_interface::instruction::mint_to(
                &token,
                &mint,
                &to,
                &payer.pubkey(),
                &[],
                amount,
            )?;
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
