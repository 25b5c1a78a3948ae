//! The reserve price's history, as this service has seen it.
//!
//! The chain keeps no past demand: `Market::demand_bps` is overwritten by each `tick_demand`, no
//! program event carries it, and a transaction's record holds no account data. What the page
//! plots is therefore what this process sampled since it started serving: the market's demand
//! and each class's reserve price (`quote::reserve`, the program's `Market::reserve_price`) at
//! the cluster time of each billing interval (`gpu-market serve`'s sampler) and of each page rendered.

use std::collections::VecDeque;
use std::sync::{LazyLock, Mutex};

use anyhow::Result;
use gpu_market::state::{Market, GPU_CLASSES};
use solana_pubkey::Pubkey;

use crate::quote;

/// The samples of this process: one per rendered market page (one market per service).
pub static HISTORY: LazyLock<History> = LazyLock::new(History::default);

/// Samples kept, oldest dropped first: a day of pages every minute.
const KEPT: usize = 1_440;

#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// The cluster's unix time.
    pub at: i64,
    pub demand_bps: u64,
    /// The reserve price per GPU-hour of each class, in payment base units.
    pub reserve: [u64; GPU_CLASSES],
}

#[derive(Default)]
pub struct History {
    /// The market sampled and its samples, oldest first.
    samples: Mutex<(Pubkey, VecDeque<Sample>)>,
}

impl History {
    /// Records `market` (`m`) at cluster time `now` (a sample at the same second replaces the
    /// last; a different market starts over) and returns every sample, oldest first.
    pub fn sample(&self, market: &Pubkey, m: &Market, now: i64) -> Result<Vec<Sample>> {
        let mut reserve = [0; GPU_CLASSES];
        for (class, r) in reserve.iter_mut().enumerate() {
            *r = quote::reserve(m, class as u8, now)?;
        }
        let sample = Sample {
            at: now,
            demand_bps: m.demand_bps.min(m.params.demand_cap_bps as u64),
            reserve,
        };
        let mut guard = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        let (sampled, samples) = &mut *guard;
        if sampled != market {
            *sampled = *market;
            samples.clear();
        }
        if samples.back().is_some_and(|s| s.at >= now) {
            samples.pop_back();
        }
        samples.push_back(sample);
        while samples.len() > KEPT {
            samples.pop_front();
        }
        Ok(samples.iter().cloned().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_market::state::MarketParams;

    fn market(demand_bps: u64) -> Market {
        let mut params = MarketParams::recommended(5, 0, 60);
        params.base_price_per_gpu_hour = 1_000;
        let mut market = Market::opening(params);
        market.demand_bps = demand_bps;
        market
    }

    #[test]
    fn samples_are_kept_in_time_order_one_per_second_per_market() {
        let h = History::default();
        let (a, b) = (Pubkey::new_unique(), Pubkey::new_unique());
        h.sample(&a, &market(0), 100).unwrap();
        h.sample(&a, &market(5_000), 110).unwrap();
        let all = h.sample(&a, &market(2_000), 110).unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!((all[0].at, all[1].at), (100, 110));
        assert_eq!(all[1].demand_bps, 2_000);
        assert_eq!(
            all[1].reserve[0],
            market(2_000).reserve_price(0, 110).unwrap()
        );
        assert!(all[1].reserve[0] > all[0].reserve[0]);
        let other = h.sample(&b, &market(0), 120).unwrap();
        assert_eq!(other.len(), 1);
    }
}
