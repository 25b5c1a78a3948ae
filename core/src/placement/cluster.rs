//! A cluster: nodes, their tie-break ranks, and the one door through which pods are placed.

use super::policy::Policy;
use super::types::{Node, Placement, PlacementError, Pod};

/// Why a cluster could not be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterError {
    /// One rank per node is needed.
    RankCount,
    TooManyNodes,
}

impl core::fmt::Display for ClusterError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            ClusterError::RankCount => "one tie-break rank per node is needed",
            ClusterError::TooManyNodes => "more than u32::MAX nodes",
        })
    }
}

impl std::error::Error for ClusterError {}

#[derive(Debug, Clone)]
pub struct Cluster {
    nodes: Vec<Node>,
    rank: Vec<u32>,
}

impl Cluster {
    /// `rank[i]` breaks ties between equally scored nodes: the lowest rank wins.
    pub fn new(nodes: Vec<Node>, rank: Vec<u32>) -> Result<Cluster, ClusterError> {
        if rank.len() != nodes.len() {
            return Err(ClusterError::RankCount);
        }
        if u32::try_from(nodes.len()).is_err() {
            return Err(ClusterError::TooManyNodes);
        }
        Ok(Cluster { nodes, rank })
    }

    /// Ranks in node order.
    pub fn in_order(nodes: Vec<Node>) -> Result<Cluster, ClusterError> {
        let rank = (0..nodes.len() as u64).map(|r| r as u32).collect();
        Cluster::new(nodes, rank)
    }

    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    pub fn rank(&self, node: usize) -> u32 {
        self.rank[node]
    }

    /// Node `n` is now `node` (its machine changed outside [`Cluster::place`]); its policy must
    /// be told ([`super::policy::Planned::set_gpu_pods`]). `false`: there is no node `n`.
    pub fn set_node(&mut self, n: usize, node: Node) -> bool {
        match self.nodes.get_mut(n) {
            Some(slot) => {
                *slot = node;
                true
            }
            None => false,
        }
    }

    /// Asks `policy` where `pod` goes and allocates it there. `Ok(None)`: it fits nowhere.
    /// A policy that proposes an infeasible placement gets an error and changes nothing.
    pub fn place(
        &mut self,
        policy: &mut dyn Policy,
        pod: &Pod,
    ) -> Result<Option<Placement>, PlacementError> {
        let Some(at) = policy.choose(self, pod) else {
            return Ok(None);
        };
        let node = self
            .nodes
            .get_mut(at.node as usize)
            .ok_or(PlacementError::NoSuchNode)?;
        node.allocate(pod, at.gpus)?;
        policy.placed(self, pod, at);
        Ok(Some(at))
    }

    /// GPU milli the cluster has in all.
    pub fn total_gpu_milli(&self) -> u64 {
        self.nodes.iter().map(|n| n.num_gpus() as u64 * 1_000).sum()
    }

    /// GPU milli held by placed pods.
    pub fn allocated_gpu_milli(&self) -> u64 {
        self.total_gpu_milli() - self.idle_gpu_milli()
    }

    pub fn idle_gpu_milli(&self) -> u64 {
        self.nodes.iter().map(|n| n.idle_gpu_milli() as u64).sum()
    }
}
