//! Placing pods on GPU nodes: feasibility, fragmentation, and policies.
//!
//! Integer arithmetic throughout, like the rest of the crate. A [`Cluster`] holds the nodes and
//! their tie-break ranks; a [`Policy`] proposes where each pod goes; [`Cluster::place`] checks
//! the proposal against [`Node::check`] before anything is taken, so no GPU ever goes past
//! 1 000 milli and no node past its CPU or memory.

mod cluster;
mod explain;
mod frag;
mod market;
mod plan;
mod policy;
mod types;

pub use cluster::{Cluster, ClusterError};
pub use explain::{explain, refusal, Explanation, Refusal};
pub use frag::{sigmoid_score, FragModel, TypicalPod};
pub use market::{Affinity, Chosen, Demand, Placer, Seat, Tenant, GRACE_SECS};
pub use plan::{GpuPods, HostNeed, PackingPlan, MAX_PLANNED_PODS};
pub use policy::{BestFit, Fgd, Planned, Policy, Random, SplitMix64, Standing, MAX_SHAPE_INDEXES};
pub use types::{
    bits, counted, GpuMask, ModelId, ModelSet, Node, Placement, PlacementError, Pod, SpecError,
    MAX_GPUS_PER_NODE, MILLI_PER_GPU,
};
