//! Priority fees: the compute-unit price a transaction offers so that it lands while the
//! cluster is busy, chosen from what recently landed and capped by the operator.
//!
//! `getRecentPrioritizationFees`, given the accounts a transaction writes, answers one sample a
//! recent slot (up to 150): the lowest price a transaction that locked any of those accounts
//! paid to land in it. The agent offers the [`FEE_PERCENTILE`]th percentile of those samples,
//! enough to have landed in three recent slots of four, at most the configured cap
//! (`max_priority_fee_micro_lamports`; 0 never offers a fee). What a transaction then pays on
//! top of its base fee is the price × its compute-unit limit / 10⁶ lamports, which is why the
//! agent sizes that limit from a simulation.

use solana_compute_budget_interface::ComputeBudgetInstruction;
use solana_instruction::Instruction;
use solana_pubkey::Pubkey;
use solana_rpc_client::nonblocking::rpc_client::RpcClient;
use solana_rpc_client_api::client_error::Error as ClientError;

/// The percentile of recent per-slot fees offered.
pub const FEE_PERCENTILE: u64 = 75;
/// The most accounts `getRecentPrioritizationFees` takes (a transaction's lock limit).
pub const MAX_FEE_ACCOUNTS: usize = 128;

/// The compute-unit price, in micro-lamports, to offer given the `recent` per-slot samples:
/// their [`FEE_PERCENTILE`]th percentile (nearest rank), at most `max_micro_lamports`. `None`
/// (no price instruction at all) when the cap is 0, when there are no samples, or when the
/// percentile is 0: transactions land without a fee.
pub fn compute_unit_price(recent: &[u64], max_micro_lamports: u64) -> Option<u64> {
    if max_micro_lamports == 0 || recent.is_empty() {
        return None;
    }
    let mut sorted = recent.to_vec();
    sorted.sort_unstable();
    let rank = (FEE_PERCENTILE * sorted.len() as u64).div_ceil(100).max(1);
    let price = sorted[rank as usize - 1].min(max_micro_lamports);
    (price > 0).then_some(price)
}

/// The accounts `ixs` write, each once, at most [`MAX_FEE_ACCOUNTS`] (the fee market is per
/// written account).
pub fn writable_accounts(ixs: &[Instruction]) -> Vec<Pubkey> {
    let mut out: Vec<Pubkey> = ixs
        .iter()
        .flat_map(|ix| ix.accounts.iter())
        .filter(|a| a.is_writable)
        .map(|a| a.pubkey)
        .collect();
    out.sort();
    out.dedup();
    out.truncate(MAX_FEE_ACCOUNTS);
    out
}

/// The price to offer for a transaction of `ixs` now: asks the node for recent fees on the
/// accounts they write (no call at all when `max_micro_lamports` is 0).
pub async fn priority_price(
    rpc: &RpcClient,
    ixs: &[Instruction],
    max_micro_lamports: u64,
) -> Result<Option<u64>, ClientError> {
    if max_micro_lamports == 0 {
        return Ok(None);
    }
    let recent: Vec<u64> = rpc
        .get_recent_prioritization_fees(&writable_accounts(ixs))
        .await?
        .iter()
        .map(|f| f.prioritization_fee)
        .collect();
    Ok(compute_unit_price(&recent, max_micro_lamports))
}

/// `ixs` preceded by the instruction that offers `price` (none when `None`).
pub fn with_price(price: Option<u64>, ixs: &[Instruction]) -> Vec<Instruction> {
    price
        .map(ComputeBudgetInstruction::set_compute_unit_price)
        .into_iter()
        .chain(ixs.iter().cloned())
        .collect()
}

#[cfg(test)]
mod tests {
    use solana_instruction::AccountMeta;

    use super::*;

    #[test]
    fn the_price_is_the_75th_percentile_of_recent_fees() {
        assert_eq!(compute_unit_price(&[40, 10, 30, 20], 1_000), Some(30));
        assert_eq!(compute_unit_price(&[7], 1_000), Some(7));
        let hundred: Vec<u64> = (1..=100).rev().collect();
        assert_eq!(compute_unit_price(&hundred, 1_000), Some(75));
    }

    #[test]
    fn the_cap_bounds_the_price_and_zero_disables_it() {
        assert_eq!(compute_unit_price(&[5_000_000; 4], 100_000), Some(100_000));
        assert_eq!(compute_unit_price(&[5_000_000; 4], 0), None);
    }

    #[test]
    fn no_fee_is_offered_where_nothing_paid_one() {
        assert_eq!(compute_unit_price(&[], 1_000), None);
        assert_eq!(
            compute_unit_price(&[0, 0, 0, 9], 1_000),
            None,
            "p75 of the slots is 0"
        );
    }

    #[test]
    fn the_written_accounts_are_listed_once_and_read_only_ones_left_out() {
        let (a, b, c) = (
            Pubkey::new_unique(),
            Pubkey::new_unique(),
            Pubkey::new_unique(),
        );
        let ix = |metas| Instruction::new_with_bytes(Pubkey::new_unique(), &[], metas);
        let ixs = [
            ix(vec![
                AccountMeta::new(a, true),
                AccountMeta::new_readonly(b, false),
            ]),
            ix(vec![AccountMeta::new(c, false), AccountMeta::new(a, false)]),
        ];
        let mut expected = vec![a, c];
        expected.sort();
        assert_eq!(writable_accounts(&ixs), expected);
        let many: Vec<AccountMeta> = (0..200)
            .map(|_| AccountMeta::new(Pubkey::new_unique(), false))
            .collect();
        assert_eq!(writable_accounts(&[ix(many)]).len(), MAX_FEE_ACCOUNTS);
    }

    #[test]
    fn the_price_instruction_goes_first_and_only_when_there_is_a_price() {
        let ix = Instruction::new_with_bytes(Pubkey::new_unique(), &[1], vec![]);
        assert_eq!(
            with_price(None, std::slice::from_ref(&ix)),
            vec![ix.clone()]
        );
        let priced = with_price(Some(1_234), std::slice::from_ref(&ix));
        assert_eq!(priced.len(), 2);
        assert_eq!(
            priced[0],
            ComputeBudgetInstruction::set_compute_unit_price(1_234)
        );
        assert_eq!(priced[1], ix);
    }
}
