//! Why a request fits nowhere: for each node, the first constraint it fails, counted over the
//! cluster (as the Kubernetes scheduler says "0/5 nodes are available: 3 Insufficient cpu, …").

use super::cluster::Cluster;
use super::types::{Node, Pod};

/// The constraints, in the order they are checked (the order of [`Node::check`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Refusal {
    /// The node has no GPU, or none of a model the request accepts.
    GpuModel,
    Cpu,
    Memory,
    /// The node has fewer GPUs than requested, even when idle.
    TooFewGpus,
    /// Less GPU is idle on the node than requested.
    GpuCapacity,
    /// Enough GPU is idle, but split over GPUs so that no fitting GPU (or set of whole GPUs)
    /// is left.
    GpuFragmented,
    /// Enough whole GPUs are free, but not inside one topology group.
    Topology,
}

impl Refusal {
    pub const ALL: [Refusal; 7] = [
        Refusal::GpuModel,
        Refusal::Cpu,
        Refusal::Memory,
        Refusal::TooFewGpus,
        Refusal::GpuCapacity,
        Refusal::GpuFragmented,
        Refusal::Topology,
    ];

    pub fn describe(&self) -> &'static str {
        match self {
            Refusal::GpuModel => "no GPU of an accepted model",
            Refusal::Cpu => "insufficient CPU",
            Refusal::Memory => "insufficient memory",
            Refusal::TooFewGpus => "fewer GPUs than requested",
            Refusal::GpuCapacity => "insufficient idle GPU",
            Refusal::GpuFragmented => "idle GPU too fragmented",
            Refusal::Topology => "free GPUs split across topology groups",
        }
    }
}

/// The first constraint `node` fails for `pod`; `None` when the pod fits.
pub fn refusal(node: &Node, pod: &Pod) -> Option<Refusal> {
    let wants_gpu = pod.num_gpu() > 0;
    if wants_gpu && !(node.num_gpus() > 0 && pod.gpu_spec().allows(node.model())) {
        return Some(Refusal::GpuModel);
    }
    if pod.cpu_milli() > node.cpu_free() {
        return Some(Refusal::Cpu);
    }
    if pod.memory_mib() > node.memory_free() {
        return Some(Refusal::Memory);
    }
    if node.gpus_fit(pod) {
        return None;
    }
    // From here on the pod wants GPUs (a CPU-only pod always passes `gpus_fit`).
    if node.num_gpus() < pod.num_gpu() {
        Some(Refusal::TooFewGpus)
    } else if node.idle_gpu_milli() < pod.total_gpu_milli() {
        Some(Refusal::GpuCapacity)
    } else if pod.is_sharing() || node.fully_free_gpus() < pod.num_gpu() {
        Some(Refusal::GpuFragmented)
    } else {
        Some(Refusal::Topology)
    }
}

/// How many nodes refused a request, and for what.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Explanation {
    pub nodes: u32,
    /// Nodes that could take the request now.
    pub fits: u32,
    /// Nodes refusing, per [`Refusal`] (indexed like [`Refusal::ALL`]).
    pub refused: [u32; 7],
}

impl Explanation {
    pub fn count(&self, r: Refusal) -> u32 {
        self.refused[r as usize]
    }

    /// The refusal met on most nodes (the first in check order among equals).
    pub fn most_common(&self) -> Option<(Refusal, u32)> {
        Refusal::ALL
            .iter()
            .map(|&r| (r, self.count(r)))
            .filter(|&(_, n)| n > 0)
            .fold(None, |best, (r, n)| match best {
                Some((_, m)) if m >= n => best,
                _ => Some((r, n)),
            })
    }
}

impl core::fmt::Display for Explanation {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}/{} nodes can take it", self.fits, self.nodes)?;
        for r in Refusal::ALL {
            let n = self.count(r);
            if n > 0 {
                write!(f, "; {n} {}", r.describe())?;
            }
        }
        Ok(())
    }
}

/// Why `pod` fits (or does not fit) on each node of `cluster`.
pub fn explain(cluster: &Cluster, pod: &Pod) -> Explanation {
    let mut e = Explanation::default();
    for node in cluster.nodes() {
        e.nodes += 1;
        match refusal(node, pod) {
            None => e.fits += 1,
            Some(r) => e.refused[r as usize] += 1,
        }
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::{ModelId, ModelSet};
    use proptest::prelude::*;

    fn pod(cpu: u32, mem: u32, n: u8, milli: u16) -> Pod {
        Pod::new(cpu, mem, n, milli, ModelSet::ANY).unwrap()
    }

    #[test]
    fn each_constraint_is_named() {
        let mut fragmented = Node::new(32_000, 64_000, ModelId(0), 2, 2).unwrap();
        fragmented.allocate(&pod(1, 1, 1, 600), 0b01).unwrap();
        fragmented.allocate(&pod(1, 1, 1, 600), 0b10).unwrap();
        let mut split = Node::new(32_000, 64_000, ModelId(0), 4, 2).unwrap();
        split.allocate(&pod(1, 1, 1, 1_000), 0b0001).unwrap();
        split.allocate(&pod(1, 1, 1, 1_000), 0b0100).unwrap();
        let nodes = vec![
            Node::new(32_000, 64_000, ModelId(1), 2, 2).unwrap(), // wrong model
            Node::new(1_000, 64_000, ModelId(0), 8, 8).unwrap(),  // CPU
            Node::new(32_000, 1_000, ModelId(0), 8, 8).unwrap(),  // memory
            Node::new(32_000, 64_000, ModelId(0), 1, 1).unwrap(), // one GPU only
            fragmented,                                           // 800 idle in two pieces
            split,                                                // GPUs 1 and 3 free
            Node::new(32_000, 64_000, ModelId(0), 0, 0).unwrap(), // no GPU
        ];
        let cluster = Cluster::in_order(nodes).unwrap();
        let only_0 = ModelSet::ANY.with(ModelId(0)).unwrap();
        let two = Pod::new(4_000, 4_000, 2, 1_000, only_0).unwrap();
        let e = explain(&cluster, &two);
        assert_eq!(e.nodes, 7);
        assert_eq!(e.fits, 0);
        assert_eq!(e.refused, [2, 1, 1, 1, 1, 0, 1]);
        assert_eq!(e.most_common(), Some((Refusal::GpuModel, 2)));
        assert_eq!(
            e.to_string(),
            "0/7 nodes can take it; 2 no GPU of an accepted model; 1 insufficient CPU; \
             1 insufficient memory; 1 fewer GPUs than requested; 1 insufficient idle GPU; \
             1 free GPUs split across topology groups"
        );
        // A 0.5-GPU pod: the fragmented node has 800 idle but 400 per GPU.
        let half = Pod::new(4_000, 4_000, 1, 500, only_0).unwrap();
        let e = explain(&cluster, &half);
        assert_eq!(e.count(Refusal::GpuFragmented), 1);
        assert_eq!(e.fits, 2); // the one-GPU node and the split node
                               // A CPU-only pod ignores GPUs.
        let e = explain(&cluster, &pod(4_000, 4_000, 0, 0));
        assert_eq!(
            (e.fits, e.count(Refusal::Cpu), e.count(Refusal::Memory)),
            (5, 1, 1)
        );
        assert_eq!(Explanation::default().most_common(), None);
    }

    fn node_strategy() -> impl Strategy<Value = Node> {
        (
            1u32..32,
            1u32..64,
            0u8..2,
            prop::sample::select(vec![(0u8, 0u8), (1, 1), (2, 1), (4, 2), (8, 4), (8, 8)]),
            prop::collection::vec(0u16..=1_000, 8),
        )
            .prop_map(|(cpu, mem, model, (gpus, group), used)| {
                let mut n =
                    Node::new(cpu * 1_000, mem * 1_024, ModelId(model), gpus, group).unwrap();
                for (g, &u) in used.iter().take(gpus as usize).enumerate() {
                    if u > 0 {
                        n.allocate(&Pod::new(0, 0, 1, u, ModelSet::ANY).unwrap(), 1 << g)
                            .unwrap();
                    }
                }
                n
            })
    }

    fn pod_strategy() -> impl Strategy<Value = Pod> {
        let shape = prop_oneof![
            Just((0u8, 0u16)),
            (1u16..1_000).prop_map(|m| (1, m)),
            prop::sample::select(vec![1u8, 2, 4, 8]).prop_map(|n| (n, 1_000)),
        ];
        (0u32..40, 0u32..80, shape, any::<bool>()).prop_map(|(cpu, mem, (n, milli), strict)| {
            let spec = if strict {
                ModelSet::ANY.with(ModelId(1)).unwrap()
            } else {
                ModelSet::ANY
            };
            Pod::new(cpu * 1_000, mem * 1_024, n, milli, spec).unwrap()
        })
    }

    proptest! {
        /// A node is refused exactly when it is infeasible, and every node is counted once.
        #[test]
        fn the_report_agrees_with_feasibility(nodes in prop::collection::vec(node_strategy(), 1..10), pod in pod_strategy()) {
            for n in &nodes {
                prop_assert_eq!(refusal(n, &pod).is_none(), n.feasible(&pod));
            }
            let cluster = Cluster::in_order(nodes).unwrap();
            let e = explain(&cluster, &pod);
            prop_assert_eq!(e.fits + e.refused.iter().sum::<u32>(), e.nodes);
            prop_assert_eq!(e.fits as usize, cluster.nodes().iter().filter(|n| n.feasible(&pod)).count());
        }
    }
}
