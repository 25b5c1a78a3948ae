use anchor_lang::prelude::*;
use anchor_spl::token::{self, Mint, Token, TransferChecked};

use crate::state::Market;

pub mod allocate;
pub mod bid;
pub mod book;
pub mod close;
pub mod init_market;
pub mod lease;
pub mod machine;
pub mod slash;
pub mod stake;
pub mod unstake;

pub use allocate::*;
pub use bid::*;
pub use book::*;
pub use close::*;
pub use init_market::*;
pub use lease::*;
pub use machine::*;
pub use slash::*;
pub use stake::*;
pub use unstake::*;

/// Moves `amount` of the payment vault to `to`, signed by the market.
pub(crate) fn pay_out<'info>(
    market: &Market,
    market_info: AccountInfo<'info>,
    vault: AccountInfo<'info>,
    mint: &Account<'info, Mint>,
    to: AccountInfo<'info>,
    token_program: &Program<'info, Token>,
    amount: u64,
) -> Result<()> {
    if amount == 0 {
        return Ok(());
    }
    market.with_signer(|signer| {
        token::transfer_checked(
            CpiContext::new_with_signer(
                token_program.key(),
                TransferChecked {
                    from: vault,
                    mint: mint.to_account_info(),
                    to,
                    authority: market_info,
                },
                signer,
            ),
            amount,
            mint.decimals,
        )
    })
}
