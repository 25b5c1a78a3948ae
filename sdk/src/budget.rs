//! Compute budgets and base fees: what a transaction asks for and pays, the one rule the agent, the CLI, the tests and
//! `gpu-market-bench chain` share.

use solana_compute_budget_interface::ComputeBudgetInstruction;
use solana_instruction::Instruction;

/// Lamports a cluster charges per signature (the base fee; the default of
/// `solana_fee_calculator`'s target, halved as the cluster does).
pub const LAMPORTS_PER_SIGNATURE: u64 = 5_000;

/// The most compute units a transaction may ask for (the cluster's limit per transaction).
pub const MAX_COMPUTE_UNITS: u32 = 1_400_000;

/// The most account data a transaction may load, and what it may load when it asks for no
/// limit (the runtime's `MAX_LOADED_ACCOUNTS_DATA_SIZE_BYTES`).
pub const MAX_LOADED_ACCOUNTS_DATA_SIZE: u32 = 64 * 1024 * 1024;

/// The compute-unit limit for a transaction a simulation found to use `used` units: 20,000 and
/// a sixteenth more, at most [`MAX_COMPUTE_UNITS`]. The margin is for what may change between
/// the simulation and the landing: each bid placed above the chosen one costs `allocate` about
/// 90 units (it reads the entry's summary off the book; BENCHMARKS.md, "Allocation at depth"),
/// so 20,000 cover over 200 of them, and a sixteenth the rest (a deeper path in the book). The
/// leader reserves this many units of its block, and of each account the transaction writes,
/// until it has run, and a priority fee is paid on all of them: the quarter asked before dated
/// from when each bid above cost `allocate` 5,000 units, and reserved 90,000 units for nothing
/// in an allocation below 4,095 bids.
pub fn compute_unit_limit(used: u64) -> u32 {
    used.saturating_add(used / 16)
        .saturating_add(20_000)
        .min(MAX_COMPUTE_UNITS as u64) as u32
}

/// The loaded-accounts limit for a transaction a simulation found to load `loaded` bytes of
/// account data: a quarter more and 256 KiB over that (a book grows by each bid placed before
/// the transaction lands), at most [`MAX_LOADED_ACCOUNTS_DATA_SIZE`]. Unasked, the leader
/// reserves 16,384 units for 64 MiB; the program and its accounts take about 2.3 MiB, 600 units.
pub fn loaded_data_limit(loaded: u32) -> u32 {
    loaded
        .saturating_add(loaded / 4)
        .saturating_add(256 * 1024)
        .min(MAX_LOADED_ACCOUNTS_DATA_SIZE)
}

/// `ixs` as a simulation should run them to size a transaction: under the most compute units
/// a transaction may ask for.
pub fn probe(ixs: &[Instruction]) -> Vec<Instruction> {
    let mut all = vec![ComputeBudgetInstruction::set_compute_unit_limit(
        MAX_COMPUTE_UNITS,
    )];
    all.extend_from_slice(ixs);
    all
}

/// `ixs` with the compute budget a simulation of their [`probe`] found them to need: `used`
/// compute units and, when the node said, `loaded` bytes of account data. The leader reserves
/// what a transaction asks, of its block and of each account it writes, while it packs it;
/// without these limits a one-instruction transaction asks for 200,000 units and 64 MiB
/// (216,384 units reserved) whatever it uses.
pub fn sized(used: u64, loaded: Option<u32>, ixs: &[Instruction]) -> Vec<Instruction> {
    let mut all = vec![ComputeBudgetInstruction::set_compute_unit_limit(
        compute_unit_limit(used),
    )];
    all.extend(loaded.map(|l| {
        ComputeBudgetInstruction::set_loaded_accounts_data_size_limit(loaded_data_limit(l))
    }));
    all.extend_from_slice(ixs);
    all
}

/// Bytes on the wire of the signed transaction of `ixs` paid by `payer`: the signature count
/// (one byte under 128), the signatures, the message.
pub fn transaction_size(ixs: &[Instruction], payer: &solana_pubkey::Pubkey) -> usize {
    let message = solana_message::Message::new(ixs, Some(payer));
    let signatures = message.header.num_required_signatures as usize;
    1 + 64 * signatures + message.serialize().len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compute_limit_is_the_simulation_plus_a_margin_up_to_the_most_allowed() {
        assert_eq!(compute_unit_limit(40_000), 62_500);
        assert_eq!(compute_unit_limit(800_000), 870_000);
        assert_eq!(compute_unit_limit(1_300_000), MAX_COMPUTE_UNITS);
        assert_eq!(compute_unit_limit(u64::MAX), MAX_COMPUTE_UNITS);
    }

    #[test]
    fn the_loaded_data_limit_is_the_simulation_plus_a_margin_up_to_the_most_allowed() {
        assert_eq!(loaded_data_limit(2_000_000), 2_500_000 + 262_144);
        assert_eq!(loaded_data_limit(u32::MAX), MAX_LOADED_ACCOUNTS_DATA_SIZE);
    }

    #[test]
    fn a_sized_transaction_asks_for_its_units_and_its_data_only_when_the_node_said() {
        let ix = Instruction::new_with_bytes(solana_pubkey::Pubkey::new_unique(), &[1], vec![]);
        let with = sized(10_000, Some(1_000), std::slice::from_ref(&ix));
        assert_eq!(
            with,
            vec![
                ComputeBudgetInstruction::set_compute_unit_limit(30_625),
                ComputeBudgetInstruction::set_loaded_accounts_data_size_limit(1_250 + 262_144),
                ix.clone(),
            ]
        );
        let without = sized(10_000, None, std::slice::from_ref(&ix));
        assert_eq!(
            without,
            vec![
                ComputeBudgetInstruction::set_compute_unit_limit(30_625),
                ix.clone()
            ]
        );
        assert_eq!(
            probe(std::slice::from_ref(&ix)),
            vec![
                ComputeBudgetInstruction::set_compute_unit_limit(MAX_COMPUTE_UNITS),
                ix
            ]
        );
    }
}
