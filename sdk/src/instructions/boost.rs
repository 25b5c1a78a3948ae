//! `boost_bid`'s builder.

use gpu_market::pda;
use solana_instruction::Instruction;
use solana_pubkey::Pubkey;
use solana_signer::Signer;

use super::{ix, ClientInstruction};

/// `boost_bid`: more urgency premium for a waiting queue bid, from `client_tokens`.
pub struct BoostBid<'a> {
    pub client: &'a (dyn Signer + Sync),
    pub market: Pubkey,
    pub bid: Pubkey,
    /// The market's queue book.
    pub book: Pubkey,
    pub payment_mint: Pubkey,
    pub client_tokens: Pubkey,
    pub premium: u64,
}

impl ClientInstruction for BoostBid<'_> {
    const NAME: &'static str = "boost_bid";

    fn instruction(&self) -> Instruction {
        let client = self.client.pubkey();
        ix(
            gpu_market::accounts::BoostBid {
                client,
                market: self.market,
                bid: self.bid,
                client_stake: pda::stake(&self.market, &client).0,
                book: self.book,
                payment_mint: self.payment_mint,
                client_tokens: self.client_tokens,
                payment_vault: pda::payment_vault(&self.market).0,
                token_program: spl_token_interface::ID,
            },
            gpu_market::instruction::BoostBid {
                premium: self.premium,
            },
        )
    }

    fn signers(&self) -> Vec<&dyn Signer> {
        vec![self.client]
    }
}
