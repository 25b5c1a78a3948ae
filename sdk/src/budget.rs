//! Compute budgets: what a transaction asks for, the one rule the agent, the CLI, the tests and
//! `gpu-market-bench chain` share.

/// The most compute units a transaction may ask for (the cluster's limit per transaction).
pub const MAX_COMPUTE_UNITS: u32 = 1_400_000;

/// The compute-unit limit for a transaction a simulation found to use `used` units: a quarter
/// more and 20 000 over that, for bids placed above the chosen one before it lands (each costs
/// `allocate` a few hundred units), at most [`MAX_COMPUTE_UNITS`]. The leader reserves this many
/// units of its block, and of each account the transaction writes, until it has run.
pub fn compute_unit_limit(used: u64) -> u32 {
    used.saturating_add(used / 4)
        .saturating_add(20_000)
        .min(MAX_COMPUTE_UNITS as u64) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_compute_limit_is_the_simulation_plus_a_margin_up_to_the_most_allowed() {
        assert_eq!(compute_unit_limit(40_000), 70_000);
        assert_eq!(compute_unit_limit(800_000), 1_020_000);
        assert_eq!(compute_unit_limit(1_200_000), MAX_COMPUTE_UNITS);
        assert_eq!(compute_unit_limit(u64::MAX), MAX_COMPUTE_UNITS);
    }
}
