//! Nodes, pod requests, and the feasibility rule every policy obeys.

/// Milli-GPU in one whole GPU.
pub const MILLI_PER_GPU: u16 = 1_000;
/// The most GPUs one node may carry (GPU sets are `u8` bit masks).
pub const MAX_GPUS_PER_NODE: usize = 8;

/// A GPU model, numbered by whoever builds the cluster (at most 32 models).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ModelId(pub u8);

/// The models a pod accepts; the empty set accepts every model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ModelSet(u32);

impl ModelSet {
    /// No restriction.
    pub const ANY: ModelSet = ModelSet(0);

    /// This set plus `model`; `None` for an id beyond 31.
    pub fn with(self, model: ModelId) -> Option<ModelSet> {
        let bit = 1u32.checked_shl(model.0 as u32)?;
        Some(ModelSet(self.0 | bit))
    }

    pub fn allows(self, model: ModelId) -> bool {
        self.0 == 0 || (model.0 < 32 && self.0 & (1 << model.0) != 0)
    }
}

/// Why a node or a pod description was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpecError {
    TooManyGpus,
    BadTopologyGroup,
    GpuMilliAboveOne,
    /// `gpu_milli` must be 0 exactly when `num_gpu` is 0.
    GpuMilliWithoutGpu,
    /// Only a one-GPU pod may ask for part of a GPU.
    PartialMultiGpu,
    /// More free than the node has, or free milli given for GPUs it does not have.
    FreeAboveCapacity,
}

impl core::fmt::Display for SpecError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            SpecError::TooManyGpus => "more than 8 GPUs",
            SpecError::BadTopologyGroup => "the topology group does not divide the GPU count",
            SpecError::GpuMilliAboveOne => "gpu_milli above 1000",
            SpecError::GpuMilliWithoutGpu => "gpu_milli and num_gpu disagree",
            SpecError::PartialMultiGpu => "a multi-GPU pod must take whole GPUs",
            SpecError::FreeAboveCapacity => "more free than the node has",
        })
    }
}

impl std::error::Error for SpecError {}

/// A resource request. `gpu_milli` is the share of each requested GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Pod {
    cpu_milli: u32,
    memory_mib: u32,
    num_gpu: u8,
    gpu_milli: u16,
    gpu_spec: ModelSet,
}

impl Pod {
    pub fn new(
        cpu_milli: u32,
        memory_mib: u32,
        num_gpu: u8,
        gpu_milli: u16,
        gpu_spec: ModelSet,
    ) -> Result<Pod, SpecError> {
        if num_gpu as usize > MAX_GPUS_PER_NODE {
            return Err(SpecError::TooManyGpus);
        }
        if gpu_milli > MILLI_PER_GPU {
            return Err(SpecError::GpuMilliAboveOne);
        }
        if (num_gpu == 0) != (gpu_milli == 0) {
            return Err(SpecError::GpuMilliWithoutGpu);
        }
        if num_gpu > 1 && gpu_milli != MILLI_PER_GPU {
            return Err(SpecError::PartialMultiGpu);
        }
        Ok(Pod {
            cpu_milli,
            memory_mib,
            num_gpu,
            gpu_milli,
            gpu_spec,
        })
    }

    pub fn cpu_milli(&self) -> u32 {
        self.cpu_milli
    }
    pub fn memory_mib(&self) -> u32 {
        self.memory_mib
    }
    pub fn num_gpu(&self) -> u8 {
        self.num_gpu
    }
    pub fn gpu_milli(&self) -> u16 {
        self.gpu_milli
    }
    pub fn gpu_spec(&self) -> ModelSet {
        self.gpu_spec
    }

    /// One GPU, part of it.
    pub fn is_sharing(&self) -> bool {
        self.num_gpu == 1 && self.gpu_milli < MILLI_PER_GPU
    }

    /// `num_gpu × gpu_milli`.
    pub fn total_gpu_milli(&self) -> u32 {
        self.num_gpu as u32 * self.gpu_milli as u32
    }
}

/// A set of GPU indices on one node.
pub type GpuMask = u8;

/// Where a pod went: a node index and the GPUs it uses there (empty for a CPU-only pod).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    pub node: u32,
    pub gpus: GpuMask,
}

/// Why a placement was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlacementError {
    NoSuchNode,
    ModelNotAllowed,
    CpuExhausted,
    MemoryExhausted,
    WrongGpuCount,
    NoSuchGpu,
    GpuExhausted,
    /// A pod of at most one topology group's size spans two groups.
    SplitsTopologyGroup,
}

impl core::fmt::Display for PlacementError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{self:?}")
    }
}

impl std::error::Error for PlacementError {}

/// A node and what is still free on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    cpu_capacity: u32,
    memory_capacity: u32,
    cpu_free: u32,
    memory_free: u32,
    model: ModelId,
    num_gpus: u8,
    /// GPUs `[k·group, (k+1)·group)` share a fast interconnect.
    topology_group: u8,
    gpu_free: [u16; MAX_GPUS_PER_NODE],
}

impl Node {
    /// An idle node. `topology_group` must divide `num_gpus` (pass `num_gpus` for no topology).
    pub fn new(
        cpu_milli: u32,
        memory_mib: u32,
        model: ModelId,
        num_gpus: u8,
        topology_group: u8,
    ) -> Result<Node, SpecError> {
        if num_gpus as usize > MAX_GPUS_PER_NODE {
            return Err(SpecError::TooManyGpus);
        }
        if num_gpus > 0 && (topology_group == 0 || !num_gpus.is_multiple_of(topology_group)) {
            return Err(SpecError::BadTopologyGroup);
        }
        let mut gpu_free = [0; MAX_GPUS_PER_NODE];
        gpu_free[..num_gpus as usize].fill(MILLI_PER_GPU);
        Ok(Node {
            cpu_capacity: cpu_milli,
            memory_capacity: memory_mib,
            cpu_free: cpu_milli,
            memory_free: memory_mib,
            model,
            num_gpus,
            topology_group: topology_group.max(1),
            gpu_free,
        })
    }

    /// This node with only `cpu_free`, `memory_free` and `gpu_free` (milli per GPU) left: a
    /// node in use, as something outside the cluster (the chain) reports it.
    pub fn holding(
        mut self,
        cpu_free: u32,
        memory_free: u32,
        gpu_free: &[u16],
    ) -> Result<Node, SpecError> {
        if cpu_free > self.cpu_capacity
            || memory_free > self.memory_capacity
            || gpu_free.len() != self.num_gpus as usize
            || gpu_free.iter().any(|&g| g > MILLI_PER_GPU)
        {
            return Err(SpecError::FreeAboveCapacity);
        }
        self.cpu_free = cpu_free;
        self.memory_free = memory_free;
        self.gpu_free[..gpu_free.len()].copy_from_slice(gpu_free);
        Ok(self)
    }

    pub fn cpu_capacity(&self) -> u32 {
        self.cpu_capacity
    }
    pub fn memory_capacity(&self) -> u32 {
        self.memory_capacity
    }
    pub fn cpu_free(&self) -> u32 {
        self.cpu_free
    }
    pub fn memory_free(&self) -> u32 {
        self.memory_free
    }
    pub fn model(&self) -> ModelId {
        self.model
    }
    pub fn num_gpus(&self) -> u8 {
        self.num_gpus
    }
    pub fn topology_group(&self) -> u8 {
        self.topology_group
    }

    /// Free milli of each GPU, by index.
    pub fn gpu_free(&self) -> &[u16] {
        &self.gpu_free[..self.num_gpus as usize]
    }

    /// Free GPU milli summed over the node's GPUs.
    pub fn idle_gpu_milli(&self) -> u32 {
        self.gpu_free().iter().map(|&g| g as u32).sum()
    }

    pub fn fully_free_gpus(&self) -> u8 {
        self.gpu_free()
            .iter()
            .filter(|&&g| g == MILLI_PER_GPU)
            .count() as u8
    }

    /// Mask of the GPUs that are completely free.
    pub fn free_mask(&self) -> GpuMask {
        let mut mask = 0;
        for (i, &g) in self.gpu_free().iter().enumerate() {
            if g == MILLI_PER_GPU {
                mask |= 1 << i;
            }
        }
        mask
    }

    /// The mask of topology group `k`.
    pub fn group_mask(&self, k: u8) -> GpuMask {
        let width = self.topology_group as u32;
        let ones = ((1u32 << width) - 1) as GpuMask;
        ones << (k as u32 * width)
    }

    pub fn groups(&self) -> u8 {
        self.num_gpus / self.topology_group
    }

    /// Whether the pod's CPU, memory and model requirements are met (GPUs not looked at).
    pub fn host_fits(&self, pod: &Pod) -> bool {
        pod.cpu_milli <= self.cpu_free
            && pod.memory_mib <= self.memory_free
            && (pod.num_gpu == 0 || (self.num_gpus > 0 && pod.gpu_spec.allows(self.model)))
    }

    /// Whether some set of GPUs can take the pod.
    ///
    /// A sharing pod needs one GPU with at least `gpu_milli` free; a whole-GPU pod needs
    /// `num_gpu` completely free GPUs, inside one topology group when it is no larger than one.
    pub fn gpus_fit(&self, pod: &Pod) -> bool {
        if pod.num_gpu == 0 {
            true
        } else if pod.is_sharing() {
            self.gpu_free().iter().any(|&g| g >= pod.gpu_milli)
        } else if pod.num_gpu <= self.topology_group {
            let free = self.free_mask();
            (0..self.groups())
                .any(|k| (free & self.group_mask(k)).count_ones() >= pod.num_gpu as u32)
        } else {
            self.fully_free_gpus() >= pod.num_gpu
        }
    }

    /// Whether the pod fits on this node at all.
    pub fn feasible(&self, pod: &Pod) -> bool {
        self.host_fits(pod) && self.gpus_fit(pod)
    }

    /// The lowest-indexed free GPUs for a whole-GPU pod (inside the first topology group that
    /// can hold it when it is no larger than a group).
    pub fn first_free_gpus(&self, pod: &Pod) -> Option<GpuMask> {
        let free = self.free_mask();
        let n = pod.num_gpu as u32;
        if n == 0 {
            Some(0)
        } else if n <= self.topology_group as u32 {
            let k = (0..self.groups()).find(|&k| (free & self.group_mask(k)).count_ones() >= n)?;
            Some(lowest_bits(free & self.group_mask(k), n))
        } else if free.count_ones() >= n {
            Some(lowest_bits(free, n))
        } else {
            None
        }
    }

    /// Checks that the pod can go on `gpus` of this node.
    pub fn check(&self, pod: &Pod, gpus: GpuMask) -> Result<(), PlacementError> {
        if pod.num_gpu > 0 && !(self.num_gpus > 0 && pod.gpu_spec.allows(self.model)) {
            return Err(PlacementError::ModelNotAllowed);
        }
        if pod.cpu_milli > self.cpu_free {
            return Err(PlacementError::CpuExhausted);
        }
        if pod.memory_mib > self.memory_free {
            return Err(PlacementError::MemoryExhausted);
        }
        if gpus.count_ones() != pod.num_gpu as u32 {
            return Err(PlacementError::WrongGpuCount);
        }
        if (gpus as u32) >> self.num_gpus != 0 {
            return Err(PlacementError::NoSuchGpu);
        }
        for i in bits(gpus) {
            if self.gpu_free[i] < pod.gpu_milli {
                return Err(PlacementError::GpuExhausted);
            }
        }
        if pod.num_gpu > 1
            && pod.num_gpu <= self.topology_group
            && !(0..self.groups()).any(|k| gpus & !self.group_mask(k) == 0)
        {
            return Err(PlacementError::SplitsTopologyGroup);
        }
        Ok(())
    }

    /// Takes the pod's resources, after [`Node::check`].
    pub fn allocate(&mut self, pod: &Pod, gpus: GpuMask) -> Result<(), PlacementError> {
        self.check(pod, gpus)?;
        // `check` proved every subtraction below stays at or above zero.
        self.cpu_free -= pod.cpu_milli;
        self.memory_free -= pod.memory_mib;
        for i in bits(gpus) {
            self.gpu_free[i] -= pod.gpu_milli;
        }
        Ok(())
    }
}

/// `items` as a counted workload (pods, or a market's demands): each one once.
pub fn counted<T: Copy>(items: &[T]) -> Vec<(T, u32)> {
    items.iter().map(|&t| (t, 1)).collect()
}

/// The indices of the set bits of `mask`, lowest first.
pub fn bits(mask: GpuMask) -> impl Iterator<Item = usize> {
    (0..MAX_GPUS_PER_NODE).filter(move |i| mask & (1 << i) != 0)
}

/// The `n` lowest set bits of `mask` (all of them if it has fewer).
fn lowest_bits(mask: GpuMask, n: u32) -> GpuMask {
    let mut out = 0;
    let mut rest = mask;
    for _ in 0..n {
        if rest == 0 {
            break;
        }
        let low = rest & rest.wrapping_neg();
        out |= low;
        rest &= !low;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(cpu: u32, mem: u32, n: u8, milli: u16) -> Pod {
        Pod::new(cpu, mem, n, milli, ModelSet::ANY).unwrap()
    }

    #[test]
    fn pod_shapes_are_validated() {
        let any = ModelSet::ANY;
        assert_eq!(Pod::new(1, 1, 9, 1_000, any), Err(SpecError::TooManyGpus));
        assert_eq!(
            Pod::new(1, 1, 1, 1_001, any),
            Err(SpecError::GpuMilliAboveOne)
        );
        assert_eq!(
            Pod::new(1, 1, 0, 500, any),
            Err(SpecError::GpuMilliWithoutGpu)
        );
        assert_eq!(
            Pod::new(1, 1, 1, 0, any),
            Err(SpecError::GpuMilliWithoutGpu)
        );
        assert_eq!(Pod::new(1, 1, 2, 500, any), Err(SpecError::PartialMultiGpu));
        assert!(pod(1, 1, 1, 500).is_sharing());
        assert!(!pod(1, 1, 1, 1_000).is_sharing());
        assert_eq!(pod(1, 1, 4, 1_000).total_gpu_milli(), 4_000);
        assert_eq!(
            Node::new(1, 1, ModelId(0), 9, 9),
            Err(SpecError::TooManyGpus)
        );
        assert_eq!(
            Node::new(1, 1, ModelId(0), 8, 3),
            Err(SpecError::BadTopologyGroup)
        );
    }

    #[test]
    fn feasibility_table() {
        let mut n = Node::new(16_000, 64_000, ModelId(1), 4, 2).unwrap();
        n.allocate(&pod(1_000, 1_000, 1, 600), 0b0001).unwrap();
        n.allocate(&pod(1_000, 1_000, 1, 1_000), 0b0100).unwrap();
        // Free milli per GPU: [400, 1000, 0, 1000]; CPU 14 000, memory 62 000.
        let only_v0 = ModelSet::ANY.with(ModelId(0)).unwrap();
        let cases = [
            (pod(1_000, 1_000, 1, 400), true),    // fits GPU 0 exactly
            (pod(1_000, 1_000, 1, 900), true),    // a free GPU
            (pod(1_000, 1_000, 2, 1_000), false), // free GPUs 1 and 3 sit in different groups
            (pod(1_000, 1_000, 1, 1_000), true),
            (pod(14_001, 1_000, 1, 100), false), // CPU
            (pod(1_000, 62_001, 0, 0), false),   // memory
            (pod(14_000, 62_000, 0, 0), true),   // exactly the rest
            (Pod::new(1, 1, 1, 100, only_v0).unwrap(), false), // model
            (Pod::new(1, 1, 0, 0, only_v0).unwrap(), true), // no GPU: the model does not matter
        ];
        for (i, (p, ok)) in cases.iter().enumerate() {
            assert_eq!(n.feasible(p), *ok, "case {i}");
        }
        assert_eq!(
            n.check(&pod(1, 1, 2, 1_000), 0b1010),
            Err(PlacementError::SplitsTopologyGroup)
        );
        assert_eq!(
            n.check(&pod(1, 1, 1, 500), 0b0001),
            Err(PlacementError::GpuExhausted)
        );
        assert_eq!(
            n.check(&pod(1, 1, 1, 500), 0b0011),
            Err(PlacementError::WrongGpuCount)
        );
        assert_eq!(
            n.check(&pod(1, 1, 1, 500), 0b1_0000),
            Err(PlacementError::NoSuchGpu)
        );
        assert_eq!(n.first_free_gpus(&pod(1, 1, 1, 1_000)), Some(0b0010));
        assert_eq!(n.first_free_gpus(&pod(1, 1, 0, 0)), Some(0));
        assert_eq!(n.idle_gpu_milli(), 2_400);
        let mut whole = Node::new(8_000, 8_000, ModelId(0), 8, 4).unwrap();
        assert_eq!(whole.first_free_gpus(&pod(1, 1, 8, 1_000)), Some(0xff));
        whole.allocate(&pod(1, 1, 1, 1_000), 0b1).unwrap();
        assert_eq!(whole.first_free_gpus(&pod(1, 1, 4, 1_000)), Some(0xf0));
        assert!(!whole.feasible(&pod(1, 1, 8, 1_000)));
    }
}
