//! Allocation scoring: `score = w_s·S + w_u·U + w_c·C` on 0..=10 000, plus aging.
//!
//! The inputs are derived from facts the program can check, never from self-declared numbers:
//! S from the bidder's staked amount, U from the deadline relative to the requested duration, C
//! from the requested resources (GPUs × GiB per GPU × seconds).

use crate::math::{normalise_bps, BPS};

/// Weights of the three inputs, in bps; they must add up to 10 000.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Weights {
    pub stake_bps: u16,
    pub urgency_bps: u16,
    pub complexity_bps: u16,
}

impl Weights {
    /// The Neurolov defaults: stake 0.4, urgency 0.3, complexity 0.3.
    pub const DEFAULT: Weights = Weights {
        stake_bps: 4_000,
        urgency_bps: 3_000,
        complexity_bps: 3_000,
    };

    pub fn is_valid(&self) -> bool {
        self.stake_bps as u64 + self.urgency_bps as u64 + self.complexity_bps as u64 == BPS
    }
}

/// What a bid's score is computed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Inputs {
    /// Tokens the bidder has staked and not asked to unstake.
    pub stake: u64,
    /// The stake at which S saturates.
    pub stake_bound: u64,
    /// Requested run time in seconds.
    pub duration_secs: u64,
    /// Seconds from now until the bid's deadline (0 once it has passed).
    pub time_left_secs: u64,
    /// GPUs × GiB per GPU × seconds.
    pub resource_gib_secs: u64,
    /// The resource volume at which C saturates.
    pub resource_bound: u64,
}

/// Urgency in bps: requested duration over time left. A bid that must start now to finish before
/// its deadline scores 10 000; one whose deadline is far away scores little.
pub fn urgency_bps(duration_secs: u64, time_left_secs: u64) -> u64 {
    if time_left_secs <= duration_secs {
        return BPS;
    }
    normalise_bps(duration_secs, time_left_secs)
}

/// Complexity in bps, normalised against the market's bound.
pub fn complexity_bps(resource_gib_secs: u64, bound: u64) -> u64 {
    normalise_bps(resource_gib_secs, bound)
}

/// The weighted score on 0..=10 000 (rounded down).
pub fn base_score(w: Weights, i: &Inputs) -> u64 {
    let s = normalise_bps(i.stake, i.stake_bound);
    let u = urgency_bps(i.duration_secs, i.time_left_secs);
    let c = complexity_bps(i.resource_gib_secs, i.resource_bound);
    // Each term is at most 10 000 × 10 000: the sum fits easily in u64.
    (w.stake_bps as u64 * s + w.urgency_bps as u64 * u + w.complexity_bps as u64 * c) / BPS
}

/// The score with aging: every billing interval waited adds `aging_per_interval`, capped at
/// 10 000. Ties are broken by the book in placement order, so a waiting bid is never starved.
pub fn aged_score(base: u64, aging_per_interval: u64, intervals_waited: u64) -> u64 {
    base.saturating_add(aging_per_interval.saturating_mul(intervals_waited))
        .min(BPS)
}

/// The key a bid is ranked by in a book that never re-sorts: `base + aging × (2³² − 1 − placed)`,
/// where `placed` is the billing interval in which the bid was placed. At any later interval `t`,
/// `base + aging × (t − placed)` (the uncapped aged score) differs from this key by the same
/// amount for every bid, so ordering by the key is ordering by aged score: earlier bids gain
/// `aging` per interval waited relative to newer ones, and none starves.
pub fn rank_key(base: u64, aging_per_interval: u64, placed_interval: u64) -> u64 {
    let remaining = (u32::MAX as u64).saturating_sub(placed_interval);
    base.saturating_add(aging_per_interval.saturating_mul(remaining))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn inputs() -> Inputs {
        Inputs {
            stake: 500,
            stake_bound: 1_000,
            duration_secs: 3_600,
            time_left_secs: 7_200,
            resource_gib_secs: 50,
            resource_bound: 100,
        }
    }

    #[test]
    fn default_weights_reproduce_the_formula() {
        // S = 0.5, U = 0.5, C = 0.5 -> 0.4·0.5 + 0.3·0.5 + 0.3·0.5 = 0.5
        assert_eq!(base_score(Weights::DEFAULT, &inputs()), 5_000);
        let full = Inputs {
            stake: 10_000,
            time_left_secs: 0,
            resource_gib_secs: 1_000,
            ..inputs()
        };
        assert_eq!(base_score(Weights::DEFAULT, &full), BPS);
        assert!(Weights::DEFAULT.is_valid());
        assert!(!Weights {
            stake_bps: 1,
            ..Weights::DEFAULT
        }
        .is_valid());
    }

    #[test]
    fn aging_lifts_a_starving_bid_to_the_top() {
        assert_eq!(aged_score(1_000, 500, 0), 1_000);
        assert_eq!(aged_score(1_000, 500, 4), 3_000);
        assert_eq!(aged_score(1_000, 500, 1_000), BPS);
        assert_eq!(aged_score(u64::MAX, u64::MAX, u64::MAX), BPS);
    }

    proptest! {
        #[test]
        fn rank_keys_order_bids_as_their_aged_scores_do(
            b1 in 0u64..=10_000, b2 in 0u64..=10_000, aging in 0u64..=1_000,
            p1 in 0u64..1_000_000, p2 in 0u64..1_000_000, later in 0u64..1_000_000,
        ) {
            let now = p1.max(p2) + later;
            let aged = |b: u64, p: u64| b + aging * (now - p);
            prop_assert_eq!(
                rank_key(b1, aging, p1).cmp(&rank_key(b2, aging, p2)),
                aged(b1, p1).cmp(&aged(b2, p2))
            );
        }

        #[test]
        fn score_is_bounded(stake: u64, sb: u64, d: u64, t: u64, r: u64, rb: u64) {
            let i = Inputs { stake, stake_bound: sb, duration_secs: d, time_left_secs: t, resource_gib_secs: r, resource_bound: rb };
            prop_assert!(base_score(Weights::DEFAULT, &i) <= BPS);
        }

        #[test]
        fn score_is_monotone_in_stake(a: u64, b: u64) {
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            let s = |stake| base_score(Weights::DEFAULT, &Inputs { stake, ..inputs() });
            prop_assert!(s(lo) <= s(hi));
        }

        #[test]
        fn score_rises_as_the_deadline_nears(a: u64, b: u64) {
            let (near, far) = if a <= b { (a, b) } else { (b, a) };
            let s = |t| base_score(Weights::DEFAULT, &Inputs { time_left_secs: t, ..inputs() });
            prop_assert!(s(near) >= s(far));
        }

        #[test]
        fn score_is_monotone_in_resources(a: u64, b: u64) {
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            let bound = u64::MAX / 3;
            let s = |r| base_score(Weights::DEFAULT, &Inputs { resource_gib_secs: r, resource_bound: bound, ..inputs() });
            prop_assert!(s(lo) <= s(hi));
        }
    }
}
