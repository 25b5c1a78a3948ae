//! Allocation scoring: `score = w_s·S + w_u·U + w_c·C` on 0..=10 000, plus aging.
//!
//! Each input costs what it buys, so a bid cannot raise its score without paying for it:
//! - S, the bidder's stake, locked while any of its bids waits;
//! - U, urgency, a premium the bid pays at placement and never gets back;
//! - C, complexity, the rate the bid spends while it runs (price × GPUs per hour): every second
//!   it runs is paid at that rate. Neither the memory asked nor the duration (whose unused escrow
//!   is refunded) nor the deadline counts, as they cost nothing.
//!
//! Aging lifts waiting bids, capped by the market (`aging_cap_bps`): a queue bid may not wait
//! longer than the cap takes to reach, so no bid ages past it.

use crate::math::{mul_div_floor, normalise_bps, BPS};

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
    /// The premium the bid paid for urgency (not refunded).
    pub urgency_premium: u64,
    /// The premium at which U saturates (the market's share of the bid's escrow).
    pub urgency_bound: u64,
    /// What the bid spends per hour while it runs: price × GPUs, per hour.
    pub spend_per_hour: u64,
    /// The spend per hour at which C saturates.
    pub spend_bound: u64,
}

/// Urgency in bps: the premium paid against the premium at which urgency is full.
pub fn urgency_bps(premium: u64, bound: u64) -> u64 {
    normalise_bps(premium, bound)
}

/// Complexity in bps: the spend per hour against the market's bound.
pub fn complexity_bps(spend_per_hour: u64, bound: u64) -> u64 {
    normalise_bps(spend_per_hour, bound)
}

/// The weighted score on 0..=10 000 (rounded down).
pub fn base_score(w: Weights, i: &Inputs) -> u64 {
    let s = normalise_bps(i.stake, i.stake_bound);
    let u = urgency_bps(i.urgency_premium, i.urgency_bound);
    let c = complexity_bps(i.spend_per_hour, i.spend_bound);
    // Each term is at most 10 000 × 10 000: the sum fits easily in u64.
    (w.stake_bps as u64 * s + w.urgency_bps as u64 * u + w.complexity_bps as u64 * c) / BPS
}

/// The score with aging: every billing interval waited adds `aging_per_interval`, at most
/// `aging_cap` in all, and never past 10 000.
pub fn aged_score(
    base: u64,
    aging_per_interval: u64,
    intervals_waited: u64,
    aging_cap: u64,
) -> u64 {
    base.saturating_add(
        aging_per_interval
            .saturating_mul(intervals_waited)
            .min(aging_cap),
    )
    .min(BPS)
}

/// The longest a queue bid may wait, in billing intervals, so that its aging never passes
/// `aging_cap` (a book that never re-sorts cannot stop a bid's aging, so it bounds the wait);
/// `None` without aging.
pub fn max_wait_intervals(aging_per_interval: u64, aging_cap: u64) -> Option<u64> {
    (aging_per_interval > 0).then(|| aging_cap / aging_per_interval)
}

/// A bid ranks as if placed this many times its requested duration later ...
pub const DURATION_HANDICAP_FACTOR: u64 = 3;
/// ... but never more than this much later (144 h): a long bid is overtaken only by bids placed
/// within six days after it.
pub const DURATION_HANDICAP_CAP_SECS: u64 = 144 * 3_600;

/// The handicap of a bid that asks to run `duration_secs`, in score points at the book's aging
/// (`aging_per_interval` points per `interval_secs` waited): the points a bid would earn waiting
/// `min(3 × duration, 144 h)`. Subtracted from its rank key, it makes a bid rank as if placed
/// that much later: among bids of equal score the shorter goes first (the order that cuts the
/// average completion time, as the Philly replay measures), yet no bid waits behind bids placed
/// more than `min(3 × its duration, 144 h)` after it, whatever their durations.
pub fn duration_handicap(duration_secs: u64, aging_per_interval: u64, interval_secs: u64) -> u64 {
    let delay = duration_secs
        .saturating_mul(DURATION_HANDICAP_FACTOR)
        .min(DURATION_HANDICAP_CAP_SECS);
    mul_div_floor(delay, aging_per_interval, interval_secs.max(1)).unwrap_or(u64::MAX)
}

/// The key a bid is ranked by in a book that never re-sorts:
/// `base + aging × (2³² − 1 − placed) − handicap`, where `placed` is the billing interval in which
/// the bid was placed and `handicap` its [`duration_handicap`]. At any later interval `t`,
/// `base + aging × (t − placed) − handicap` differs from this key by the same amount for every
/// bid, so ordering by the key is ordering by that aged score: earlier bids gain `aging` per
/// interval waited relative to newer ones, and none starves.
pub fn rank_key(base: u64, aging_per_interval: u64, placed_interval: u64, handicap: u64) -> u64 {
    let remaining = (u32::MAX as u64).saturating_sub(placed_interval);
    base.saturating_add(aging_per_interval.saturating_mul(remaining))
        .saturating_sub(handicap)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn inputs() -> Inputs {
        Inputs {
            stake: 500,
            stake_bound: 1_000,
            urgency_premium: 50,
            urgency_bound: 100,
            spend_per_hour: 50,
            spend_bound: 100,
        }
    }

    #[test]
    fn default_weights_reproduce_the_formula() {
        // S = 0.5, U = 0.5, C = 0.5 -> 0.4·0.5 + 0.3·0.5 + 0.3·0.5 = 0.5
        assert_eq!(base_score(Weights::DEFAULT, &inputs()), 5_000);
        let full = Inputs {
            stake: 10_000,
            urgency_premium: 100,
            spend_per_hour: 1_000,
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
    fn aging_lifts_a_waiting_bid_up_to_its_cap() {
        assert_eq!(aged_score(1_000, 500, 0, BPS), 1_000);
        assert_eq!(aged_score(1_000, 500, 4, BPS), 3_000);
        assert_eq!(aged_score(1_000, 500, 1_000, BPS), BPS);
        assert_eq!(aged_score(1_000, 500, 1_000, 3_000), 4_000);
        assert_eq!(aged_score(u64::MAX, u64::MAX, u64::MAX, u64::MAX), BPS);
        assert_eq!(max_wait_intervals(10, 3_000), Some(300));
        assert_eq!(max_wait_intervals(0, 3_000), None);
    }

    /// One GPU; a steady stream of top-stake bids, one arriving every 30 min, each asking for
    /// 1 h, so the queue never empties. Returns when a zero-stake bid of the same shape, placed
    /// at time 0, starts (`None`: not within 100 h), with bids ranked by `rank` (base score,
    /// arrival, now, in seconds; ties to the earlier bid).
    fn low_stake_start(rank: impl Fn(u64, u64, u64) -> u64) -> Option<u64> {
        let base = |stake: u64| {
            base_score(
                Weights::DEFAULT,
                &Inputs {
                    stake,
                    stake_bound: 1_000,
                    urgency_premium: 0,
                    urgency_bound: 1,
                    spend_per_hour: 1,
                    spend_bound: 8,
                },
            )
        };
        // (arrival, stake); the low-stake bid is the only one with stake 0.
        let mut waiting: Vec<(u64, u64)> = vec![(0, 0)];
        let mut next_high = 0u64;
        let mut now = 0u64;
        while now < 100 * 3_600 {
            while next_high <= now {
                waiting.push((next_high, 1_000));
                next_high += 1_800;
            }
            let best = (0..waiting.len()).max_by_key(|&i| {
                let (arrival, stake) = waiting[i];
                (rank(base(stake), arrival, now), std::cmp::Reverse(arrival))
            })?;
            if waiting.remove(best).1 == 0 {
                return Some(now);
            }
            now += 3_600;
        }
        None
    }

    #[test]
    fn a_low_stake_bid_is_not_starved() {
        // The book's key at the recommended aging: 10 points per 60 s interval.
        let (aging, interval) = (10, 60);
        let handicap = duration_handicap(3_600, aging, interval);
        let book = |b, arrival: u64, _| rank_key(b, aging, arrival / interval, handicap);
        let started = low_stake_start(book);
        // It can be passed only while its base-score deficit (at most 10 000 points) is not
        // aged away, and the GPU frees up once an hour.
        let bound = BPS / aging * interval + 3_600;
        assert!(started.is_some_and(|t| t <= bound), "{started:?}");
        // A capped aging of 10 points an hour leaves it waiting past 100 h.
        assert_eq!(
            low_stake_start(|b, arrival, now| aged_score(b, 10, (now - arrival) / 3_600, BPS)),
            None
        );
    }

    proptest! {
        #[test]
        fn rank_keys_order_bids_as_their_aged_scores_less_handicaps_do(
            b1 in 0u64..=10_000, b2 in 0u64..=10_000, aging in 0u64..=1_000,
            p1 in 0u64..1_000_000, p2 in 0u64..1_000_000, later in 0u64..1_000_000,
            d1 in 0u64..100, d2 in 0u64..100,
        ) {
            // A handicap is aging × the intervals of delay it stands for (`duration_handicap`):
            // none where bids do not age.
            let (h1, h2) = (aging * d1, aging * d2);
            let now = p1.max(p2) + later;
            let aged = |b: u64, p: u64, h: u64| (b + aging * (now - p)) as i64 - h as i64;
            prop_assert_eq!(
                rank_key(b1, aging, p1, h1).cmp(&rank_key(b2, aging, p2, h2)),
                aged(b1, p1, h1).cmp(&aged(b2, p2, h2))
            );
        }

        /// A bid is overtaken by no bid of any duration placed more than min(3 × its duration,
        /// 144 h) after it, whatever their scores' difference within what aging covers.
        #[test]
        fn the_handicap_never_lets_a_later_bid_pass_beyond_it(
            d1 in 1u64..1_000_000, d2 in 1u64..1_000_000, base in 0u64..=10_000,
            placed in 0u64..1_000_000,
        ) {
            let (aging, interval) = (10, 60);
            let h = |d| duration_handicap(d, aging, interval);
            let delay = (3 * d1).min(DURATION_HANDICAP_CAP_SECS);
            // Placed one interval past the delay, with the same base score: ranked below.
            let later = placed + delay / interval + 1;
            prop_assert!(rank_key(base, aging, placed, h(d1)) > rank_key(base, aging, later, h(d2)));
        }

        #[test]
        fn score_is_bounded(stake: u64, sb: u64, p: u64, pb: u64, r: u64, rb: u64) {
            let i = Inputs { stake, stake_bound: sb, urgency_premium: p, urgency_bound: pb, spend_per_hour: r, spend_bound: rb };
            prop_assert!(base_score(Weights::DEFAULT, &i) <= BPS);
        }

        /// Every input is something the bid pays for, and paying more never lowers the score:
        /// stake locked, a premium given up, a higher rate spent while running.
        #[test]
        fn score_rises_only_with_what_is_paid(a: u64, b: u64, which in 0usize..3) {
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            let with = |v: u64| {
                let mut i = Inputs { stake_bound: u64::MAX / 2, urgency_bound: u64::MAX / 2, spend_bound: u64::MAX / 2, ..inputs() };
                match which {
                    0 => i.stake = v,
                    1 => i.urgency_premium = v,
                    _ => i.spend_per_hour = v,
                }
                base_score(Weights::DEFAULT, &i)
            };
            prop_assert!(with(lo) <= with(hi));
        }
    }
}
