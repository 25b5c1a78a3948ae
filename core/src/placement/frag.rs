//! GPU fragmentation as FGD defines it ("Beware of Fragmentation", ATC'23).
//!
//! A workload is summarised by its *typical pods*: the most popular request shapes
//! `(cpu, gpu_milli, num_gpu, gpu_spec)`, most popular first, until they cover a given share of
//! the reference pods. Each keeps its count as its weight.
//!
//! For a typical pod `t` and a node `n`, the idle GPU milli of `n` that `t` could not use is:
//! - all of it when `t` cannot run on `n` at all: `t` asks for no GPU, `n` has a model `t` refuses,
//!   `n` lacks the CPU for `t`, or fewer than `num_gpu` GPUs of `n` have `gpu_milli` free;
//! - otherwise the free milli of the GPUs that have less than `t.gpu_milli` free.
//!
//! The fragmentation of `n` is the weighted sum over typical pods. It is kept as an integer
//! numerator: divide by [`FragModel::weight`] for milli-GPU. Memory plays no part, as in FGD.

use super::types::{counted, ModelId, ModelSet, Pod, MAX_GPUS_PER_NODE};

/// The most typical pods a model keeps. FGD takes shapes until they cover the share asked,
/// however many that takes; a market's long tail of shapes (an attacker's thousands of one-off
/// bids among them: 3,700 typical pods of a 10,000-machine market's 4,237 shapes, against 35
/// without them) would make every node's fragmentation cost thousands of steps. openb's
/// workload needs 35.
pub const MAX_TYPICAL_PODS: usize = 64;

/// One request shape and how many reference pods had it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TypicalPod {
    pub cpu_milli: u32,
    pub gpu_milli: u16,
    pub num_gpu: u8,
    pub gpu_spec: ModelSet,
    pub count: u32,
}

/// The typical pods of a workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FragModel {
    typical: Vec<TypicalPod>,
    /// The same, by GPU milli ascending: what [`FragModel::node_frag`] walks.
    by_milli: Vec<TypicalPod>,
    weight: u64,
}

impl FragModel {
    /// FGD's selection: shapes by decreasing count (ties: the larger shape first, as the peer's
    /// reverse sort does), taken one at a time until they cover at least `coverage_pct` % of
    /// `pods`, or [`MAX_TYPICAL_PODS`] are taken. CPU-only pods count as a shape too.
    pub fn from_pods(pods: &[Pod], coverage_pct: u32) -> FragModel {
        Self::from_counted(&counted(pods), coverage_pct)
    }

    /// [`FragModel::from_pods`] of a workload given as pods and how many of each (a pod may
    /// come more than once).
    pub fn from_counted(pods: &[(Pod, u32)], coverage_pct: u32) -> FragModel {
        let mut counts: std::collections::HashMap<(u32, u16, u8, ModelSet), u32> =
            std::collections::HashMap::new();
        let mut total = 0u64;
        for &(p, n) in pods {
            let key = (p.cpu_milli(), p.gpu_milli(), p.num_gpu(), p.gpu_spec());
            let count = counts.entry(key).or_insert(0);
            *count = count.saturating_add(n);
            total += n as u64;
        }
        let mut shapes: Vec<_> = counts.into_iter().collect();
        shapes.sort_by(|a, b| b.1.cmp(&a.1).then(b.0.cmp(&a.0)));
        let target = coverage_pct as u64 * total;
        let mut typical = Vec::new();
        let mut covered = 0u64;
        for ((cpu_milli, gpu_milli, num_gpu, gpu_spec), count) in shapes {
            if covered * 100 >= target || typical.len() == MAX_TYPICAL_PODS {
                break;
            }
            covered += count as u64;
            typical.push(TypicalPod {
                cpu_milli,
                gpu_milli,
                num_gpu,
                gpu_spec,
                count,
            });
        }
        let mut by_milli = typical.clone();
        by_milli.sort_by_key(|t| t.gpu_milli);
        FragModel {
            typical,
            by_milli,
            weight: covered,
        }
    }

    pub fn typical(&self) -> &[TypicalPod] {
        &self.typical
    }

    /// The sum of the typical pods' counts: fragmentation numerators divide by it.
    pub fn weight(&self) -> u64 {
        self.weight
    }

    /// The fragmentation numerator of a node with `cpu_free` CPU, GPUs of `model` and these
    /// free milli per GPU (in any order).
    pub fn node_frag(&self, cpu_free: u32, model: ModelId, gpu_free: &[u16]) -> u64 {
        let idle: u64 = gpu_free.iter().map(|&g| g as u64).sum();
        if idle == 0 {
            return 0;
        }
        // The free milli, largest first, and the idle milli of the `k` largest: the GPUs a
        // typical pod's share fits are a prefix, shorter as the shares grow.
        let mut free = [0u16; MAX_GPUS_PER_NODE];
        let n = gpu_free.len().min(MAX_GPUS_PER_NODE);
        free[..n].copy_from_slice(&gpu_free[..n]);
        free[..n].sort_unstable_by(|a, b| b.cmp(a));
        let mut largest = [0u64; MAX_GPUS_PER_NODE + 1];
        for k in 0..n {
            largest[k + 1] = largest[k] + free[k] as u64;
        }
        let mut fitting = n;
        let mut total = 0u64;
        for t in &self.by_milli {
            while fitting > 0 && free[fitting - 1] < t.gpu_milli {
                fitting -= 1;
            }
            let unusable = if t.gpu_milli == 0
                || !t.gpu_spec.allows(model)
                || cpu_free < t.cpu_milli
                || fitting < t.num_gpu as usize
            {
                idle
            } else {
                // The free milli of the GPUs with less than its share free.
                idle - largest[fitting]
            };
            // At most 8 000 milli × u32::MAX counts × shapes: far inside u64 for any real trace.
            total = total.saturating_add(t.count as u64 * unusable);
        }
        total
    }
}

/// `ln(k / (100 - k))` for `k = 51..=99`, × 10¹²: where the logistic curve crosses `k` %.
const LOGIT_E12: [i64; 49] = [
    40005334614,
    80042707674,
    120144311842,
    160342650075,
    200670695462,
    241162056817,
    281851152141,
    322773392263,
    363965377201,
    405465108108,
    447312218044,
    489548225319,
    532216813747,
    575364144904,
    619039208406,
    663294217410,
    708185057924,
    753771802376,
    800119300112,
    847297860387,
    895384047055,
    944461608841,
    994622575144,
    1045968555183,
    1098612288668,
    1152679509938,
    1208311205925,
    1265666373331,
    1324925414744,
    1386294361120,
    1450010175506,
    1516347489368,
    1585627263740,
    1658228076604,
    1734601055388,
    1815289966638,
    1900958761193,
    1992430164690,
    2090741096934,
    2197224577336,
    2313634929181,
    2442347035369,
    2586689344098,
    2751535313042,
    2944438979166,
    3178053830348,
    3476098689835,
    3891820298111,
    4595119850135,
];

/// FGD's node score for a fragmentation decrease of `decrease / weight` milli-GPU:
/// `⌊100 · sigmoid(decrease / weight / 1000)⌋`, in `0..=99`, computed without floats.
///
/// The peer scores this way inside the Kubernetes framework (integer scores up to 100), so
/// nodes whose changes differ by less than a step tie, and the tie-break decides.
pub fn sigmoid_score(decrease: i64, weight: u64) -> u8 {
    // score >= k  <=>  decrease / (1000 · weight) >= logit(k / 100)
    //             <=>  decrease · 10⁹ >= logit_e12(k) · weight
    let lhs = decrease as i128 * 1_000_000_000;
    let w = weight as i128;
    let reaches = |logit: i128| lhs >= logit * w;
    if reaches(0) {
        50 + LOGIT_E12
            .iter()
            .take_while(|&&l| reaches(l as i128))
            .count() as u8
    } else {
        // k < 50: logit(k/100) = -logit((100 - k)/100); count the k in 1..=49 still reached.
        49 - LOGIT_E12
            .iter()
            .take_while(|&&l| !reaches(-(l as i128)))
            .count() as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pod(cpu: u32, n: u8, milli: u16) -> Pod {
        Pod::new(cpu, 1, n, milli, ModelSet::ANY).unwrap()
    }

    #[test]
    fn typical_pods_cover_the_requested_share() {
        let mut pods = vec![pod(1_000, 1, 500); 6];
        pods.extend(vec![pod(2_000, 1, 1_000); 3]);
        pods.push(pod(4_000, 0, 0));
        let m = FragModel::from_pods(&pods, 90);
        assert_eq!(m.typical().len(), 2);
        assert_eq!(m.weight(), 9);
        assert_eq!(FragModel::from_pods(&pods, 95).typical().len(), 3);
        // Equal counts: the larger shape first, as the peer sorts.
        let m = FragModel::from_pods(&[pod(1_000, 1, 500), pod(2_000, 1, 500)], 50);
        assert_eq!(m.typical()[0].cpu_milli, 2_000);
    }

    #[test]
    fn fragmentation_follows_the_fgd_definition() {
        let pods = [pod(4_000, 1, 500), pod(4_000, 2, 1_000), pod(1_000, 0, 0)];
        let m = FragModel::from_pods(&pods, 100);
        let model = ModelId(0);
        // GPUs [300, 1000, 1000]: the 500 pod can use two GPUs, the 300 left is lost to it;
        // the 2-GPU pod fits, losing the same 300; the CPU pod loses everything.
        assert_eq!(
            m.node_frag(8_000, model, &[300, 1_000, 1_000]),
            300 + 300 + 2_300
        );
        // Without CPU for the GPU pods, all idle milli is lost to every shape.
        assert_eq!(m.node_frag(2_000, model, &[300, 1_000, 1_000]), 3 * 2_300);
        // One free GPU: the 2-GPU pod cannot fit at all.
        assert_eq!(
            m.node_frag(8_000, model, &[300, 1_000]),
            300 + 1_300 + 1_300
        );
        assert_eq!(m.node_frag(8_000, model, &[0, 0]), 0);
    }

    proptest! {
        /// The fragmentation of any node is FGD's definition, pod by pod and GPU by GPU.
        #[test]
        fn node_frag_is_the_definition_summed_over_typical_pods(
            shapes in prop::collection::vec((0u32..8, 0u8..4, 1u16..=1_000, 1u32..50, 0u32..4), 1..40),
            cpu_free in 0u32..8_000,
            gpu_free in prop::collection::vec(0u16..=1_000, 1..=MAX_GPUS_PER_NODE),
            model in 0u8..3,
        ) {
            let pods: Vec<(Pod, u32)> = shapes.iter().map(|&(cpu, n, milli, count, spec)| {
                let milli = match n { 0 => 0, 1 => milli, _ => 1_000 };
                let spec = match spec { 0 => ModelSet::ANY, s => ModelSet::ANY.with(ModelId(s as u8 - 1)).unwrap() };
                (Pod::new(cpu * 1_000, 1, n, milli, spec).unwrap(), count)
            }).collect();
            let m = FragModel::from_counted(&pods, 100);
            let idle: u64 = gpu_free.iter().map(|&g| g as u64).sum();
            let model = ModelId(model);
            let expect: u64 = m.typical().iter().map(|t| {
                let fits = |g: &&u16| **g >= t.gpu_milli;
                let usable = t.gpu_milli > 0 && t.gpu_spec.allows(model) && cpu_free >= t.cpu_milli
                    && gpu_free.iter().filter(fits).count() >= t.num_gpu as usize;
                let unusable = match usable {
                    true => gpu_free.iter().filter(|g| !fits(g)).map(|&g| g as u64).sum(),
                    false => idle,
                };
                t.count as u64 * unusable
            }).sum();
            prop_assert_eq!(m.node_frag(cpu_free, model, &gpu_free), expect);
        }

        /// A workload given counted learns the typical pods of the same workload given pod by
        /// pod.
        #[test]
        fn a_counted_workload_has_the_typical_pods_of_its_pods_one_by_one(
            shapes in prop::collection::vec((1u32..4, 0u8..3, prop::sample::select(vec![250u16, 500, 1_000]), 1u32..20), 1..12),
            coverage in 1u32..=100,
        ) {
            let counted: Vec<(Pod, u32)> = shapes.iter().map(|&(cpu, n, milli, count)| (pod(cpu * 1_000, n, match n { 0 => 0, 1 => milli, _ => 1_000 }), count)).collect();
            let one_by_one: Vec<Pod> = counted.iter().flat_map(|&(p, n)| vec![p; n as usize]).collect();
            prop_assert_eq!(FragModel::from_counted(&counted, coverage), FragModel::from_pods(&one_by_one, coverage));
        }

        #[test]
        fn sigmoid_score_matches_the_float_formula(decrease in -9_000_000i64..9_000_000, weight in 1u64..20_000) {
            let x = decrease as f64 / weight as f64 / 1000.0;
            let expect = (100.0 / (1.0 + (-x).exp())) as i64;
            let got = sigmoid_score(decrease, weight) as i64;
            // Floats may land on the other side of a step only at the step itself.
            prop_assert!((got - expect).abs() <= 1, "{} vs {}", got, expect);
            prop_assert!(got <= 99);
        }
    }

    #[test]
    fn sigmoid_score_steps() {
        assert_eq!(sigmoid_score(0, 7), 50);
        assert_eq!(sigmoid_score(-1, 7), 49);
        assert_eq!(sigmoid_score(i64::MAX / 2, 1), 99);
        assert_eq!(sigmoid_score(i64::MIN / 2, 1), 0);
        // sigmoid(0.0405) = 0.5101…: one step up.
        assert_eq!(sigmoid_score(40_500, 1_000), 51);
        assert_eq!(sigmoid_score(39_900, 1_000), 50);
    }
}
