//! Smart batching: may two small jobs share one GPU, and what does each lose?
//!
//! **Off-chain only.** This module uses `f64` (a fitted regression); the program never calls
//! it. The agent or the matcher decides co-location with it before anything reaches the chain.
//!
//! A job is described by its profile when run alone on the GPU: SM utilisation, memory-bandwidth
//! utilisation (the `gmem_util` of nvidia-smi: the share of time the memory controller is busy)
//! and memory in MiB. The [`InterferenceModel`] predicts a job's normalised speed (speed when
//! sharing ÷ speed alone) from the two profiles, by least squares on measured pairs, with the
//! features `1, u_a, u_b, u_a·u_b, m_a, m_b, m_a·m_b` (u: SM, m: memory bandwidth, as fractions).
//! Every coefficient can be read and explained: how much a job slows down per unit of its
//! neighbour's load.

/// A job measured alone on one GPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Profile {
    /// SM utilisation, 0..=100.
    pub gpu_util_pct: f64,
    /// Memory-bandwidth utilisation, 0..=100.
    pub gmem_util_pct: f64,
    /// GPU memory the job holds, MiB.
    pub memory_mib: u32,
}

/// Number of regression features.
pub const FEATURES: usize = 7;

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
        coef: [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    };

    pub fn features(a: &Profile, b: &Profile) -> [f64; FEATURES] {
        let frac = |p: f64| p.clamp(0.0, 100.0) / 100.0;
        let (ua, ub) = (frac(a.gpu_util_pct), frac(b.gpu_util_pct));
        let (ma, mb) = (frac(a.gmem_util_pct), frac(b.gmem_util_pct));
        [1.0, ua, ub, ua * ub, ma, mb, ma * mb]
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

/// Whether two jobs may share a GPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ShareVerdict {
    /// They fit and both keep at least the required speed (predicted speeds of `a` and `b`).
    Share { speed_a: f64, speed_b: f64 },
    /// Their memory does not fit on the GPU.
    OutOfMemory { need_mib: u64, have_mib: u64 },
    /// They fit, but one of them would run slower than allowed.
    TooSlow { speed_a: f64, speed_b: f64 },
}

impl ShareVerdict {
    pub fn shares(&self) -> bool {
        matches!(self, ShareVerdict::Share { .. })
    }
}

/// Memory a pair needs beyond the sum of the two jobs alone (allocator pools, a second
/// context's growth). On Lucid's 1,388 measured pairs the median excess is 22 MiB and the 95th
/// percentile 924 MiB.
pub const PAIR_HEADROOM_MIB: u64 = 1_024;

/// Two jobs may share a GPU of `gpu_memory_mib` when their memory plus [`PAIR_HEADROOM_MIB`]
/// fits in it and the model predicts each keeps at least `min_speed` (e.g. 0.8) of its speed
/// alone.
pub fn may_share(
    model: &InterferenceModel,
    a: &Profile,
    b: &Profile,
    gpu_memory_mib: u32,
    min_speed: f64,
) -> ShareVerdict {
    let need_mib = a.memory_mib as u64 + b.memory_mib as u64 + PAIR_HEADROOM_MIB;
    if need_mib > gpu_memory_mib as u64 {
        return ShareVerdict::OutOfMemory {
            need_mib,
            have_mib: gpu_memory_mib as u64,
        };
    }
    let (speed_a, speed_b) = (model.speed(a, b), model.speed(b, a));
    if speed_a >= min_speed && speed_b >= min_speed {
        ShareVerdict::Share { speed_a, speed_b }
    } else {
        ShareVerdict::TooSlow { speed_a, speed_b }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn profile(u: f64, m: f64, mib: u32) -> Profile {
        Profile {
            gpu_util_pct: u,
            gmem_util_pct: m,
            memory_mib: mib,
        }
    }

    fn profile_strategy() -> impl Strategy<Value = Profile> {
        (0.0f64..=100.0, 0.0f64..=100.0, 0u32..40_000).prop_map(|(u, m, mib)| profile(u, m, mib))
    }

    /// A made-up ground truth: a job loses 40 % of the neighbour's SM load and 20 % of its
    /// memory-bandwidth load.
    fn truth(b: &Profile) -> f64 {
        1.0 - 0.4 * b.gpu_util_pct / 100.0 - 0.2 * b.gmem_util_pct / 100.0
    }

    #[test]
    fn the_fit_recovers_a_linear_truth() {
        let mut samples = Vec::new();
        for i in 0..12 {
            for j in 0..12 {
                let a = profile(i as f64 * 8.0, ((i * 5) % 11) as f64 * 9.0, 1_000);
                let b = profile(j as f64 * 8.0, ((j * 7) % 11) as f64 * 9.0, 1_000);
                samples.push(Sample {
                    a,
                    b,
                    speed: truth(&b),
                });
            }
        }
        let model = InterferenceModel::fit(&samples).unwrap();
        let expect = [1.0, 0.0, -0.4, 0.0, 0.0, -0.2, 0.0];
        for (c, e) in model.coef.iter().zip(expect) {
            assert!((c - e).abs() < 1e-3, "{:?}", model.coef);
        }
        assert_eq!(InterferenceModel::fit(&[]), None);
    }

    #[test]
    fn sharing_needs_memory_and_speed() {
        let model = InterferenceModel {
            coef: [1.0, 0.0, -0.4, 0.0, 0.0, -0.2, 0.0],
        };
        let light = profile(20.0, 10.0, 2_000);
        let heavy = profile(100.0, 80.0, 6_000);
        // 1 − 0.08 − 0.02 = 0.90 each.
        let v = may_share(&model, &light, &light, 16_384, 0.8);
        assert!(v.shares(), "{v:?}");
        // The light job would keep 1 − 0.4 − 0.16 = 0.44 next to the heavy one.
        assert!(matches!(
            may_share(&model, &light, &heavy, 16_384, 0.8),
            ShareVerdict::TooSlow { .. }
        ));
        assert_eq!(
            may_share(&model, &heavy, &heavy, 13_023, 0.0),
            ShareVerdict::OutOfMemory {
                need_mib: 13_024,
                have_mib: 13_023
            }
        );
        assert!(may_share(&InterferenceModel::NONE, &heavy, &heavy, 13_024, 1.0).shares());
    }

    proptest! {
        #[test]
        fn predicted_speed_is_bounded(a in profile_strategy(), b in profile_strategy(), coef in prop::array::uniform7(-1e6f64..1e6)) {
            let s = InterferenceModel { coef }.speed(&a, &b);
            prop_assert!((0.0..=1.0).contains(&s));
        }

        /// More GPU memory, or a lower speed requirement, never turns "share" into a refusal.
        #[test]
        fn the_verdict_is_monotone(a in profile_strategy(), b in profile_strategy(), mem in 0u32..80_000, extra in 0u32..80_000, s in 0.0f64..1.0, ds in 0.0f64..1.0) {
            let model = InterferenceModel { coef: [1.0, -0.1, -0.3, 0.1, -0.05, -0.2, 0.05] };
            if may_share(&model, &a, &b, mem, s).shares() {
                prop_assert!(may_share(&model, &a, &b, mem + extra, s).shares());
                prop_assert!(may_share(&model, &a, &b, mem, s - ds).shares());
            }
            // Symmetric: the pair is judged the same whichever job comes first.
            prop_assert_eq!(may_share(&model, &a, &b, mem, s).shares(), may_share(&model, &b, &a, mem, s).shares());
        }
    }
}
