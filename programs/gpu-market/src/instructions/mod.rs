//! Every mutable `Account` field is marked `dup`, which turns off Anchor's duplicate check of
//! mutable accounts: that check hashes each key into a `HashSet` (SipHash) and cost about 3.5k
//! compute units an instruction (measured on `place_bid`), paid by every bidder, host and agent.
//! Two fields can only alias where they hold the same account type, as each account is
//! checked against its own type's discriminator; where an instruction has two mutable fields of
//! one program-owned type (the stakes of `place_bid` and `close_lease`), a constraint compares
//! their keys. Token accounts are owned by the token program: Anchor never writes them back.

use anchor_lang::prelude::*;
use anchor_spl::token::{self, Mint, Token, TransferChecked};

use crate::events::RefundDue;
use crate::state::{Market, StakeAccount};

pub mod allocate;
pub mod bid;
pub mod book;
pub mod boost;
pub mod close;
pub mod env;
pub mod extend;
pub mod gang;
pub mod init_market;
pub mod lease;
pub mod machine;
pub mod reserve;
pub mod slash;
pub mod stake;
pub mod unstake;
pub mod walk;

pub use allocate::*;
pub use bid::*;
pub use book::*;
pub use boost::*;
pub use close::*;
pub use env::*;
pub use extend::*;
pub use gang::*;
pub use init_market::*;
pub use lease::*;
pub use machine::*;
pub use reserve::*;
pub use slash::*;
pub use stake::*;
pub use unstake::*;
pub use walk::*;

/// Moves `amount` from `from` (a token account of `authority`, who signs) to `to`: what a
/// client or staker pays into one of the market's vaults.
pub(crate) fn pay_in<'info>(
    from: AccountInfo<'info>,
    to: AccountInfo<'info>,
    authority: AccountInfo<'info>,
    mint: &Account<'info, Mint>,
    token_program: &Program<'info, Token>,
    amount: u64,
) -> Result<()> {
    token::transfer_checked(
        CpiContext::new(
            token_program.key(),
            TransferChecked {
                from,
                mint: mint.to_account_info(),
                to,
                authority,
            },
        ),
        amount,
        mint.decimals,
    )
}

/// [`pay_in`] of `amount` from the client's token account into the market's payment vault, for
/// the accounts `$a` of an instruction that names them `client_tokens`, `payment_vault`,
/// `client`, `payment_mint` and `token_program` (placing, topping up and boosting a bid,
/// extending a lease).
macro_rules! client_pays {
    ($a:expr, $amount:expr) => {
        crate::instructions::pay_in(
            $a.client_tokens.to_account_info(),
            $a.payment_vault.to_account_info(),
            $a.client.to_account_info(),
            &$a.payment_mint,
            &$a.token_program,
            $amount,
        )
    };
}
pub(crate) use client_pays;

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

/// Refunds `amount` of escrow (already out of `total_escrow`) to the client of `stake`: into
/// `to`, a token account of the client, when one is given; otherwise it stays in the payment
/// vault, owed by the client's stake account (`refunds_due`) until `claim_refunds`. So no
/// refund, and nothing that refunds (settling a lease, pruning or evicting a bid), depends on
/// a token account its client could close.
pub(crate) fn refund_escrow<'info>(
    market: &mut Account<'info, Market>,
    stake: &mut Account<'info, StakeAccount>,
    to: Option<AccountInfo<'info>>,
    vault: AccountInfo<'info>,
    mint: &Account<'info, Mint>,
    token_program: &Program<'info, Token>,
    amount: u64,
) -> Result<()> {
    if let Some(to) = to {
        let market_info = market.to_account_info();
        return pay_out(market, market_info, vault, mint, to, token_program, amount);
    }
    if amount == 0 {
        return Ok(());
    }
    market.owe_refund(stake, amount)?;
    emit!(RefundDue {
        market: market.key(),
        owner: stake.owner,
        amount,
        refunds_due: stake.refunds_due,
    });
    Ok(())
}
