//! `gpu-market-bench colocate`: the interference model on Lucid's measured pairs
//! (`traces/lucid/`): 1,388 pairs of jobs sharing one GPU, each job also profiled alone.
//!
//! Each pair gives two samples (each job's speed next to the other). The model is fitted on
//! some pairs and judged on pairs it has not seen, two ways: 5 folds of pairs (pair `k` in fold
//! `k mod 5`), and leave-one-model-out (every pair involving a model is held out together, so
//! the model is judged on a workload it never saw). The decision judged is the market's:
//! [`InterferenceModel::get_along`] (both jobs keep ≥ [`MIN_SPEED`] of their speed alone), with
//! the pair's memory fitting a 32 GiB GPU. The market's own coefficients
//! ([`InterferenceModel::MARKET`]) are judged beside the refits, and the fit on all pairs is
//! printed next to them.

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use gpu_market_core::colocate::{InterferenceModel, Profile, Sample, MIN_SPEED};

use crate::trace::{num, read_csv};

const GPU_MEMORY_MIB: u32 = 32 * 1_024;
const FOLDS: usize = 5;
/// Memory a pair needs beyond the sum of the two jobs alone (allocator pools, a second
/// context's growth). On Lucid's 1,388 measured pairs the median excess is 22 MiB and the 95th
/// percentile 924 MiB.
const PAIR_HEADROOM_MIB: u64 = 1_024;

/// A job measured alone: its profile and the GPU memory it held, MiB.
#[derive(Clone, Copy)]
struct Alone {
    profile: Profile,
    memory_mib: u32,
}

pub(crate) struct Pair {
    /// The two jobs: model, dataset, batch size, mixed precision.
    pub jobs: [Key; 2],
    models: [String; 2],
    pub a: Profile,
    pub b: Profile,
    /// The two jobs' memory alone, MiB.
    alone_mib: [u32; 2],
    /// Measured normalised speeds of `a` and `b`.
    pub speed: [f64; 2],
    /// Measured GPU memory of the pair, MiB.
    memory_mib: f64,
}

impl Pair {
    /// Whether the two jobs' memory alone, with the headroom, fits the GPU.
    fn fits(&self) -> bool {
        self.alone_mib.iter().map(|&m| m as u64).sum::<u64>() + PAIR_HEADROOM_MIB
            <= GPU_MEMORY_MIB as u64
    }

    /// The market's decision under `model`: the memory fits and the two get along.
    fn shares(&self, model: &InterferenceModel) -> bool {
        self.fits() && model.get_along(&self.a, &self.b)
    }
}

pub(crate) type Key = (String, String, String, String);

fn key(row: &HashMap<String, String>, suffix: &str) -> Key {
    let get = |c: &str| {
        row.get(&format!("{c}{suffix}"))
            .cloned()
            .unwrap_or_default()
    };
    (get("model"), get("dataset"), get("batchsize"), get("amp"))
}

/// Lucid's measured pairs, each job with its profile alone.
pub(crate) fn load(traces: &Path) -> Result<Vec<Pair>, String> {
    let dir = traces.join("lucid");
    let mut alone: HashMap<Key, Alone> = HashMap::new();
    for r in read_csv(&dir.join("single_data.csv"))? {
        let (memory, util): (f64, f64) = (num(&r, "gmem")?, num(&r, "gpu_util")?);
        alone.insert(
            key(&r, ""),
            Alone {
                profile: Profile {
                    sm_util_bps: (util * 100.0).round().clamp(0.0, 10_000.0) as u16,
                },
                memory_mib: memory.round() as u32,
            },
        );
    }
    read_csv(&dir.join("colocate_info.csv"))?
        .iter()
        .map(|r| {
            let profile = |s: &str| {
                alone
                    .get(&key(r, s))
                    .copied()
                    .ok_or_else(|| format!("no single-job profile for {:?}", key(r, s)))
            };
            let (a, b) = (profile("1")?, profile("2")?);
            Ok(Pair {
                jobs: [key(r, "1"), key(r, "2")],
                models: [key(r, "1").0, key(r, "2").0],
                a: a.profile,
                b: b.profile,
                alone_mib: [a.memory_mib, b.memory_mib],
                speed: [num(r, "speed1")?, num(r, "speed2")?],
                memory_mib: num(r, "gmem")?,
            })
        })
        .collect()
}

fn samples<'a>(pairs: impl Iterator<Item = &'a Pair>) -> Vec<Sample> {
    pairs
        .flat_map(|p| {
            [
                Sample {
                    a: p.a,
                    b: p.b,
                    speed: p.speed[0],
                },
                Sample {
                    a: p.b,
                    b: p.a,
                    speed: p.speed[1],
                },
            ]
        })
        .collect()
}

/// A predictor of both jobs' speeds and of the share decision for a held-out pair.
type Predict<'a> = dyn Fn(&Pair) -> ([f64; 2], bool) + 'a;

#[derive(Default)]
struct Score {
    abs: f64,
    sq: f64,
    n: usize,
    right: usize,
    decided: usize,
    /// Predicted "share" and really both ≥ MIN_SPEED / predicted "share" / really both ≥.
    share_ok: usize,
    share_said: usize,
    share_true: usize,
}

impl Score {
    fn add(&mut self, p: &Pair, speeds: [f64; 2], share: bool) {
        for (predicted, measured) in speeds.iter().zip(p.speed) {
            let e = predicted - measured.min(1.0);
            self.abs += e.abs();
            self.sq += e * e;
            self.n += 1;
        }
        let truth =
            p.memory_mib <= GPU_MEMORY_MIB as f64 && p.speed.iter().all(|&s| s >= MIN_SPEED);
        self.decided += 1;
        self.right += (share == truth) as usize;
        self.share_said += share as usize;
        self.share_true += truth as usize;
        self.share_ok += (share && truth) as usize;
    }

    fn row(&self, name: &str, split: &str) {
        let pct = |a: usize, b: usize| 100.0 * a as f64 / b.max(1) as f64;
        println!(
            "| {name} | {split} | {:.4} | {:.4} | {:.1} | {:.1} | {:.1} |",
            self.abs / self.n as f64,
            (self.sq / self.n as f64).sqrt(),
            pct(self.right, self.decided),
            pct(self.share_ok, self.share_said),
            pct(self.share_ok, self.share_true),
        );
    }
}

/// Held-out score of a predictor built from the training pairs, over the folds given by `fold`.
fn cross_validate(
    pairs: &[Pair],
    folds: &[String],
    fold: impl Fn(usize, &Pair) -> String,
    build: &dyn Fn(&[Sample]) -> Box<Predict<'static>>,
) -> Score {
    let mut score = Score::default();
    for f in folds {
        let train = samples(
            pairs
                .iter()
                .enumerate()
                .filter(|(i, p)| fold(*i, p) != *f && !p.models.contains(f))
                .map(|(_, p)| p),
        );
        let predict = build(&train);
        for (i, p) in pairs.iter().enumerate() {
            if fold(i, p) == *f {
                let (s, share) = predict(p);
                score.add(p, s, share);
            }
        }
    }
    score
}

pub fn main(traces: &Path) -> Result<(), String> {
    let start = Instant::now();
    let pairs = load(traces)?;
    let judge = |model: InterferenceModel| -> Box<Predict<'static>> {
        Box::new(move |p: &Pair| {
            (
                [model.speed(&p.a, &p.b), model.speed(&p.b, &p.a)],
                p.shares(&model),
            )
        })
    };
    let fitted: &dyn Fn(&[Sample]) -> Box<Predict<'static>> =
        &|train| judge(InterferenceModel::fit(train).unwrap_or(InterferenceModel::NONE));
    let market: &dyn Fn(&[Sample]) -> Box<Predict<'static>> = &|_| judge(InterferenceModel::MARKET);
    let mean: &dyn Fn(&[Sample]) -> Box<Predict<'static>> = &|train| {
        let m = train.iter().map(|s| s.speed.min(1.0)).sum::<f64>() / train.len().max(1) as f64;
        judge(InterferenceModel {
            coef: [m, 0.0, 0.0, 0.0],
        })
    };
    // The rule of thumb: share when the SM utilisations add up to at most 100 %.
    let sm_sum: &dyn Fn(&[Sample]) -> Box<Predict<'static>> = &|_| {
        Box::new(|p: &Pair| {
            let sum = p.a.sm_util_bps as u32 + p.b.sm_util_bps as u32;
            ([1.0, 1.0], p.fits() && sum <= 10_000)
        })
    };

    let by_pair: Vec<String> = (0..FOLDS).map(|k| k.to_string()).collect();
    let mut models: Vec<String> = pairs.iter().flat_map(|p| p.models.clone()).collect();
    models.sort();
    models.dedup();

    println!(
        "lucid: {} measured pairs ({} samples), {} models; decision: both jobs keep ≥ {MIN_SPEED} \
         of their speed alone and the memory fits {} GiB\n",
        pairs.len(),
        2 * pairs.len(),
        models.len(),
        GPU_MEMORY_MIB / 1_024
    );
    println!("| predictor | held out | speed MAE | speed RMSE | decision accuracy % | said share: right % | could share: found % |");
    println!("|---|---|---:|---:|---:|---:|---:|");
    // The market's coefficients are the fit on all pairs: judged on every pair, in sample.
    cross_validate(
        &pairs,
        &["all".to_string()],
        |_, _| "all".to_string(),
        market,
    )
    .row("the market's coefficients", "none (fitted on all)");
    for (name, build) in [
        ("interference model", fitted),
        ("mean speed", mean),
        ("SM util sum ≤ 100 %", sm_sum),
    ] {
        cross_validate(&pairs, &by_pair, |i, _| (i % FOLDS).to_string(), build)
            .row(name, "5 folds of pairs");
        // Leave-one-model-out: a pair belongs to the fold of either of its models; it is held
        // out with its first model and left out of training for both.
        cross_validate(&pairs, &models, |_, p| p.models[0].clone(), build)
            .row(name, "one model out");
    }

    let all = InterferenceModel::fit(&samples(pairs.iter())).ok_or("fit failed")?;
    println!("\nCoefficients (u: SM utilisation, as a fraction; a: the job, b: its neighbour):\n");
    println!("| coefficients | 1 | u_a | u_b | u_a·u_b |");
    println!("|---|---:|---:|---:|---:|");
    for (name, model) in [
        ("fit on all pairs", all),
        (
            "the market's (`InterferenceModel::MARKET`)",
            InterferenceModel::MARKET,
        ),
    ] {
        let c: Vec<String> = model.coef.iter().map(|v| format!("{v:+.4}")).collect();
        println!("| {name} | {} |", c.join(" | "));
    }

    let (mut err, mut covered, mut covered_headroom) = (0.0, 0, 0);
    for p in &pairs {
        let sum = p.alone_mib.iter().map(|&m| m as f64).sum::<f64>();
        err += (sum - p.memory_mib).abs();
        covered += (sum >= p.memory_mib) as usize;
        covered_headroom += (sum + PAIR_HEADROOM_MIB as f64 >= p.memory_mib) as usize;
    }
    let pct = |k: usize| 100.0 * k as f64 / pairs.len() as f64;
    println!(
        "\nMemory: the sum of the two jobs' memory alone vs the pair's measured memory: mean \
         absolute error {:.0} MiB; the sum covers the measured value for {:.1} % of pairs, the \
         sum + {PAIR_HEADROOM_MIB} MiB headroom for {:.1} %.\nwall time {:.3} s",
        err / pairs.len() as f64,
        pct(covered),
        pct(covered_headroom),
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
