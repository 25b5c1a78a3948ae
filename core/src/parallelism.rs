//! Choosing how to spread one training or inference job over a machine's GPUs: data, tensor or
//! pipeline parallelism, and how many of each.
//!
//! Integer bytes throughout. The memory model is the usual first-order one:
//! - a replica needs `params × bytes_per_param` (the caller counts what it keeps per parameter:
//!   2 for fp16 weights, 16 for mixed-precision Adam training) plus `activation_bytes`;
//! - splitting a replica `k` ways (tensor × pipeline) divides both by `k`;
//! - each GPU keeps `RESERVE_BPS` of its memory free (CUDA context, allocator fragmentation).
//!
//! The rule, cheapest communication first:
//! 1. one replica fits on one GPU: **data parallel** over all GPUs;
//! 2. otherwise split the replica over the fewest GPUs that hold it (`k`), rounded up to a
//!    power of two; inside one NVLink island that is **tensor parallel** (all-reduce every layer
//!    needs NVLink bandwidth);
//! 3. a replica larger than an island: tensor parallel over the whole island and **pipeline
//!    parallel** across islands (only activations cross PCIe, once per micro-batch);
//!    with no NVLink at all (islands of one GPU) that is pipeline parallel alone;
//! 4. the GPUs left over replicate the split replica: data parallel on top.

use crate::math::BPS;

/// Memory kept free on every GPU, in bps of its capacity.
pub const RESERVE_BPS: u64 = 1_000;

const GIB: u64 = 1 << 30;

/// A machine's GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gpus {
    pub count: u32,
    pub memory_gib: u32,
    /// GPUs per NVLink island (a power of two dividing `count`); 1 for PCIe only.
    pub nvlink_island: u32,
}

/// The job's memory needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Model {
    pub params: u64,
    /// Bytes kept per parameter (weights, and for training gradients and optimiser state).
    pub bytes_per_param: u64,
    /// Activation (and batch) memory of one replica.
    pub activation_bytes: u64,
}

impl Model {
    /// Bytes one replica needs, saturating.
    pub fn replica_bytes(&self) -> u64 {
        self.params
            .saturating_mul(self.bytes_per_param)
            .saturating_add(self.activation_bytes)
    }
}

/// Degrees of each kind of parallelism; their product is the GPUs used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    pub data: u32,
    pub tensor: u32,
    pub pipeline: u32,
}

impl Plan {
    pub fn gpus(&self) -> u32 {
        self.data * self.tensor * self.pipeline
    }
}

/// Why no plan exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanError {
    /// The machine description is unusable (no GPUs, or an island that does not divide them
    /// or is not a power of two).
    BadMachine,
    /// Even split over every GPU, one replica does not fit: bytes needed per GPU vs usable.
    DoesNotFit {
        per_gpu_bytes: u64,
        usable_bytes: u64,
    },
}

/// Usable bytes of one GPU after the reserve.
pub fn usable_bytes(gpus: &Gpus) -> u64 {
    gpus.memory_gib as u64 * GIB / BPS * (BPS - RESERVE_BPS)
}

/// The plan for `model` on `gpus`, by the rule in the module documentation.
pub fn choose(model: &Model, gpus: &Gpus) -> Result<Plan, PlanError> {
    let island = gpus.nvlink_island;
    if gpus.count == 0
        || island == 0
        || !island.is_power_of_two()
        || !gpus.count.is_multiple_of(island)
    {
        return Err(PlanError::BadMachine);
    }
    let usable = usable_bytes(gpus);
    let need = model.replica_bytes();
    // The fewest GPUs that hold one replica, as a power of two.
    let shards = need.div_ceil(usable.max(1)).max(1);
    let split = shards.checked_next_power_of_two().unwrap_or(u64::MAX);
    if split > gpus.count as u64 {
        return Err(PlanError::DoesNotFit {
            per_gpu_bytes: need.div_ceil(gpus.count as u64),
            usable_bytes: usable,
        });
    }
    let split = split as u32;
    let (tensor, pipeline) = if split == 1 {
        (1, 1)
    } else if split <= island {
        (split, 1)
    } else {
        (island, split / island)
    };
    // Both are powers of two: a split larger than the island is a whole number of islands.
    Ok(Plan {
        data: gpus.count / split,
        tensor,
        pipeline,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const B: u64 = 1_000_000_000;

    fn model(params_b: u64, bytes: u64, act_gib: u64) -> Model {
        Model {
            params: params_b * B,
            bytes_per_param: bytes,
            activation_bytes: act_gib * GIB,
        }
    }

    fn gpus(count: u32, memory_gib: u32, nvlink_island: u32) -> Gpus {
        Gpus {
            count,
            memory_gib,
            nvlink_island,
        }
    }

    fn plan(data: u32, tensor: u32, pipeline: u32) -> Plan {
        Plan {
            data,
            tensor,
            pipeline,
        }
    }

    #[test]
    fn well_known_configurations() {
        let dgx = gpus(8, 80, 8);
        // 7B fp16 (14 GB) + 8 GiB activations fits one 80 GB GPU: data parallel over all 8.
        assert_eq!(choose(&model(7, 2, 8), &dgx), Ok(plan(8, 1, 1)));
        // 7B with mixed-precision Adam (16 B/param = 112 GB): two GPUs per replica, NVLink.
        assert_eq!(choose(&model(7, 16, 8), &dgx), Ok(plan(4, 2, 1)));
        // 70B fp16 = 140 GB: needs 2 × 80 GB, tensor parallel inside the island, 4 replicas.
        assert_eq!(choose(&model(70, 2, 0), &dgx), Ok(plan(4, 2, 1)));
        // 70B fp16 with 40 GiB of activations: 4 GPUs.
        assert_eq!(choose(&model(70, 2, 40), &dgx), Ok(plan(2, 4, 1)));
        // The same 70B on eight 80 GB PCIe GPUs: no NVLink, so a 2-stage pipeline.
        assert_eq!(choose(&model(70, 2, 0), &gpus(8, 80, 1)), Ok(plan(4, 1, 2)));
        // Two NVLink pairs over PCIe (e.g. 4 × 24 GB): 70B fp16 needs 8 shards -> too big...
        assert!(matches!(
            choose(&model(70, 2, 0), &gpus(4, 24, 2)),
            Err(PlanError::DoesNotFit { .. })
        ));
        // ...13B fp16 (26 GB) needs 2 × 24 GB: tensor parallel in each NVLink pair.
        assert_eq!(choose(&model(13, 2, 0), &gpus(4, 24, 2)), Ok(plan(2, 2, 1)));
        // 30B fp16 (60 GB) on 4 × 24 GB in NVLink pairs: 4 shards, tensor 2 × pipeline 2.
        assert_eq!(choose(&model(30, 2, 0), &gpus(4, 24, 2)), Ok(plan(1, 2, 2)));
        // 175B fp16 (350 GB) on one 8 × 80 GB node: 8 shards, the whole island.
        assert_eq!(choose(&model(175, 2, 0), &dgx), Ok(plan(1, 8, 1)));
        // 175B with Adam (2.8 TB) does not fit on one node.
        assert!(matches!(
            choose(&model(175, 16, 0), &dgx),
            Err(PlanError::DoesNotFit { .. })
        ));
        assert_eq!(
            choose(&model(1, 2, 0), &gpus(6, 80, 4)),
            Err(PlanError::BadMachine)
        );
        assert_eq!(
            choose(&model(1, 2, 0), &gpus(6, 80, 3)),
            Err(PlanError::BadMachine)
        );
        assert_eq!(
            choose(&model(1, 2, 0), &gpus(0, 80, 1)),
            Err(PlanError::BadMachine)
        );
    }

    fn machine() -> impl Strategy<Value = Gpus> {
        (0u32..4, 0u32..4, 1u32..200).prop_map(|(c, i, mem)| gpus(1 << (c + i), mem, 1 << i))
    }

    proptest! {
        /// A plan uses at most the machine's GPUs, each shard fits its GPU, tensor parallelism
        /// stays inside an NVLink island, and a pipeline is used only when the island is full.
        #[test]
        fn plans_fit_and_respect_the_topology(params in 0u64..1 << 44, bytes in 1u64..20, act in 0u64..1 << 38, g in machine()) {
            let m = Model { params, bytes_per_param: bytes, activation_bytes: act };
            match choose(&m, &g) {
                Ok(p) => {
                    prop_assert!(p.gpus() <= g.count && p.gpus() * 2 > g.count);
                    let split = (p.tensor * p.pipeline) as u64;
                    prop_assert!(m.replica_bytes().div_ceil(split) <= usable_bytes(&g));
                    prop_assert!(g.nvlink_island.is_multiple_of(p.tensor));
                    prop_assert!(p.pipeline == 1 || p.tensor == g.nvlink_island);
                }
                Err(PlanError::DoesNotFit { .. }) => {
                    prop_assert!(m.replica_bytes() > usable_bytes(&g) * g.count as u64 / 2);
                }
                Err(PlanError::BadMachine) => prop_assert!(false, "valid machine refused"),
            }
        }

        /// A bigger model never gets more replicas.
        #[test]
        fn bigger_models_get_fewer_replicas(a in 0u64..1 << 40, b in 0u64..1 << 40, g in machine()) {
            let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
            let replicas = |p| choose(&Model { params: p, bytes_per_param: 2, activation_bytes: 0 }, &g).map_or(0, |p| p.data);
            prop_assert!(replicas(lo) >= replicas(hi));
        }
    }
}
