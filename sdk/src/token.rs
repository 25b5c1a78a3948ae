//! SPL token accounts the market needs around it: mints and token accounts.

use solana_instruction::Instruction;
use solana_program_pack::Pack;
use solana_pubkey::Pubkey;
use spl_token_interface::state::{Account, AccountState, Mint};

pub const MINT_LEN: usize = Mint::LEN;
pub const ACCOUNT_LEN: usize = Account::LEN;

/// Creates `mint` (a new keypair's address, which signs) with `decimals`, minted by `authority`;
/// `rent` is the rent-exempt minimum of [`MINT_LEN`] bytes.
pub fn create_mint(
    payer: &Pubkey,
    mint: &Pubkey,
    rent: u64,
    decimals: u8,
    authority: &Pubkey,
) -> [Instruction; 2] {
    [
        solana_system_interface::instruction::create_account(
            payer,
            mint,
            rent,
            MINT_LEN as u64,
            &spl_token_interface::ID,
        ),
        spl_token_interface::instruction::initialize_mint2(
            &spl_token_interface::ID,
            mint,
            authority,
            None,
            decimals,
        )
        .expect("the SPL token program id is the token program's"),
    ]
}

/// Creates token account `account` (a new keypair's address, which signs) of `mint` owned by
/// `owner`; `rent` is the rent-exempt minimum of [`ACCOUNT_LEN`] bytes.
pub fn create_account(
    payer: &Pubkey,
    account: &Pubkey,
    rent: u64,
    mint: &Pubkey,
    owner: &Pubkey,
) -> [Instruction; 2] {
    [
        solana_system_interface::instruction::create_account(
            payer,
            account,
            rent,
            ACCOUNT_LEN as u64,
            &spl_token_interface::ID,
        ),
        spl_token_interface::instruction::initialize_account3(
            &spl_token_interface::ID,
            account,
            mint,
            owner,
        )
        .expect("the SPL token program id is the token program's"),
    ]
}

/// Mints `amount` base units of `mint` to `to`, signed by the mint `authority`.
pub fn mint_to(mint: &Pubkey, to: &Pubkey, authority: &Pubkey, amount: u64) -> Instruction {
    spl_token_interface::instruction::mint_to(
        &spl_token_interface::ID,
        mint,
        to,
        authority,
        &[],
        amount,
    )
    .expect("the SPL token program id is the token program's")
}

/// The balance of a token account's data.
pub fn balance(data: &[u8]) -> Option<u64> {
    Account::unpack(data).ok().map(|a| a.amount)
}

/// The supply of a mint account's data (what `collect_fees` burns leaves it).
pub fn supply(data: &[u8]) -> Option<u64> {
    spl_token_interface::state::Mint::unpack(data)
        .ok()
        .map(|m| m.supply)
}

/// Whether an account (its owning program and data) is a live token account of `owner` for
/// `mint` that can receive tokens: what the program accepts as a client's refund account.
/// A closed account (no data), another program's account or a frozen one is not.
pub fn is_account_of(program: &Pubkey, data: &[u8], owner: &Pubkey, mint: &Pubkey) -> bool {
    *program == spl_token_interface::ID
        && Account::unpack(data).is_ok_and(|a| {
            a.owner == *owner && a.mint == *mint && a.state == AccountState::Initialized
        })
}

/// Moves `amount` base units of `mint` (with `decimals`) from `from` to `to`, signed by
/// `from`'s owner.
pub fn transfer(
    from: &Pubkey,
    mint: &Pubkey,
    to: &Pubkey,
    owner: &Pubkey,
    amount: u64,
    decimals: u8,
) -> Instruction {
    spl_token_interface::instruction::transfer_checked(
        &spl_token_interface::ID,
        from,
        mint,
        to,
        owner,
        &[],
        amount,
        decimals,
    )
    .expect("the SPL token program id is the token program's")
}

/// Closes the empty token account `account`, its rent to `to`, signed by its owner.
pub fn close_account(account: &Pubkey, to: &Pubkey, owner: &Pubkey) -> Instruction {
    spl_token_interface::instruction::close_account(
        &spl_token_interface::ID,
        account,
        to,
        owner,
        &[],
    )
    .expect("the SPL token program id is the token program's")
}
