//! Smart batching: may two small jobs share one GPU, and what does each lose?
//!
//! **Off-chain only.** This module uses `f64` (a fitted regression); the program never calls
//! it. The market's packing policy (`placement::Placer`) asks it which co-tenants of a shared
//! GPU get along; every agent computes the same answer from the same chain state.
//!
//! A job is described by its [`Profile`]: its SM utilisation, as its usage proofs report it
//! (a lease keeps its last proof's). The [`InterferenceModel`] predicts a job's normalised speed
//! (speed when sharing ÷ speed alone) from the two profiles, by least squares on measured pairs,
//! with the features `1, u_a, u_b, u_a·u_b` (u: SM utilisation as a fraction). Every coefficient
//! can be read and explained: how much a job slows down per unit of its neighbour's load. On
//! Lucid's 1,388 measured pairs, adding the jobs' memory-bandwidth utilisation changes held-out
//! decisions by 0.1 point (BENCHMARKS.md), so the model needs nothing a proof does not carry.

/// A job as the market measures it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Profile {
    /// SM utilisation, in basis points (0..=10 000; more counts as 10 000).
    pub sm_util_bps: u16,
}

/// Number of regression features.
pub const FEATURES: usize = 4;

/// The least speed, as a share of its speed alone, that each of two co-tenants must keep for
/// the market to seat them together.
pub const MIN_SPEED: f64 = 0.8;

/// A linear model of the normalised speed of job `a` when it shares a GPU with job `b`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InterferenceModel {
    pub coef: [f64; FEATURES],
}

/// One measured pair: `a`'s speed when sharing with `b`, normalised to `a` alone.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    pub a: Profile,
    pub b: Profile,
    pub speed: f64,
}

/// Ridge added to the normal equations: keeps the fit defined when a feature never varies.
const RIDGE: f64 = 1e-6;

impl InterferenceModel {
    /// No interference: every job keeps its full speed.
    pub const NONE: InterferenceModel = InterferenceModel {
        coef: [1.0, 0.0, 0.0, 0.0],
    };

    /// The market's model: the fit on all of Lucid's 1,388 measured pairs (ML training jobs on
    /// one GPU), rounded to 4 places; `gpu-market-bench colocate` refits it and prints both.
    pub const MARKET: InterferenceModel = InterferenceModel {
        coef: [1.0168, 0.0404, -0.0147, -0.4254],
    };

    pub fn features(a: &Profile, b: &Profile) -> [f64; FEATURES] {
        let frac = |p: &Profile| p.sm_util_bps.min(10_000) as f64 / 10_000.0;
        let (ua, ub) = (frac(a), frac(b));
        [1.0, ua, ub, ua * ub]
    }

    /// Least squares over `samples`; `None` when there are none or the speeds are not finite.
    pub fn fit(samples: &[Sample]) -> Option<InterferenceModel> {
        if samples.is_empty() || samples.iter().any(|s| !s.speed.is_finite()) {
            return None;
        }
        // Normal equations (XᵀX + λI) β = Xᵀy, solved by Gaussian elimination.
        let mut m = [[0.0f64; FEATURES + 1]; FEATURES];
        for s in samples {
            let x = Self::features(&s.a, &s.b);
            for i in 0..FEATURES {
                for j in 0..FEATURES {
                    m[i][j] += x[i] * x[j];
                }
                m[i][FEATURES] += x[i] * s.speed;
            }
        }
        for (i, row) in m.iter_mut().enumerate() {
            row[i] += RIDGE * samples.len() as f64;
        }
        solve(m).map(|coef| InterferenceModel { coef })
    }

    /// Predicted normalised speed of `a` next to `b`, in `0..=1`.
    pub fn speed(&self, a: &Profile, b: &Profile) -> f64 {
        let x = Self::features(a, b);
        let v: f64 = x.iter().zip(&self.coef).map(|(x, c)| x * c).sum();
        if v.is_finite() {
            v.clamp(0.0, 1.0)
        } else {
            0.0
        }
    }

    /// Whether `a` and `b` get along on one GPU: each keeps at least [`MIN_SPEED`] of its
    /// speed alone, as predicted. Whether their memory fits is the fit rule's to say.
    pub fn get_along(&self, a: &Profile, b: &Profile) -> bool {
        self.speed(a, b) >= MIN_SPEED && self.speed(b, a) >= MIN_SPEED
    }
}

/// Solves the augmented system in place; `None` when it is singular.
fn solve(mut m: [[f64; FEATURES + 1]; FEATURES]) -> Option<[f64; FEATURES]> {
    for col in 0..FEATURES {
        let pivot = (col..FEATURES).max_by(|&a, &b| m[a][col].abs().total_cmp(&m[b][col].abs()))?;
        if m[pivot][col].abs() < 1e-12 {
            return None;
        }
        m.swap(col, pivot);
        let pivot_row = m[col];
        for (r, row) in m.iter_mut().enumerate() {
            if r != col {
                let f = row[col] / pivot_row[col];
                for (x, p) in row.iter_mut().zip(&pivot_row).skip(col) {
                    *x -= f * p;
                }
            }
        }
    }
    let mut out = [0.0; FEATURES];
    for (i, o) in out.iter_mut().enumerate() {
        *o = m[i][FEATURES] / m[i][i];
    }
    out.iter().all(|v| v.is_finite()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn profile(pct: u16) -> Profile {
        Profile {
            sm_util_bps: pct * 100,
        }
    }

    /// A made-up ground truth: a job loses 40 % of its neighbour's SM load and 30 % of the
    /// product of both loads.
    fn truth(a: &Profile, b: &Profile) -> f64 {
        let [_, _, ub, uab] = InterferenceModel::features(a, b);
        1.0 - 0.4 * ub - 0.3 * uab
    }

    #[test]
    fn the_fit_recovers_a_linear_truth() {
        let mut samples = Vec::new();
        for i in 0..12 {
            for j in 0..12 {
                let (a, b) = (profile(i * 8), profile(((j * 7) % 12) * 8));
                samples.push(Sample {
                    a,
                    b,
                    speed: truth(&a, &b),
                });
            }
        }
        let model = InterferenceModel::fit(&samples).unwrap();
        let expect = [1.0, 0.0, -0.4, -0.3];
        for (c, e) in model.coef.iter().zip(expect) {
            assert!((c - e).abs() < 1e-3, "{:?}", model.coef);
        }
        assert_eq!(InterferenceModel::fit(&[]), None);
    }

    /// Two busy training jobs slow each other past the bar; a busy one and a light one, or two
    /// at half load, get along.
    #[test]
    fn the_market_model_keeps_busy_jobs_apart() {
        let m = InterferenceModel::MARKET;
        assert!(!m.get_along(&profile(95), &profile(90)));
        assert!(m.get_along(&profile(95), &profile(20)));
        assert!(m.get_along(&profile(50), &profile(50)));
        assert!(InterferenceModel::NONE.get_along(&profile(100), &profile(100)));
        // Past 100 % counts as 100 %.
        let over = Profile {
            sm_util_bps: u16::MAX,
        };
        assert_eq!(
            m.speed(&over, &profile(60)),
            m.speed(&profile(100), &profile(60))
        );
    }

    proptest! {
        #[test]
        fn predicted_speed_is_bounded(a in any::<u16>(), b in any::<u16>(), coef in prop::array::uniform4(-1e6f64..1e6)) {
            let s = InterferenceModel { coef }.speed(&Profile { sm_util_bps: a }, &Profile { sm_util_bps: b });
            prop_assert!((0.0..=1.0).contains(&s));
        }

        /// The pair is judged the same whichever job comes first, and under the market's
        /// model a lighter neighbour never turns "get along" into a clash.
        #[test]
        fn the_verdict_is_symmetric_and_monotone(a in 0u16..=10_000, b in 0u16..=10_000, lighter in 0u16..=10_000) {
            let m = InterferenceModel::MARKET;
            let (pa, pb) = (Profile { sm_util_bps: a }, Profile { sm_util_bps: b });
            prop_assert_eq!(m.get_along(&pa, &pb), m.get_along(&pb, &pa));
            if m.get_along(&pa, &pb) {
                let lighter = Profile { sm_util_bps: b.min(lighter) };
                prop_assert!(m.get_along(&pa, &lighter));
            }
        }
    }
}
