//! What a lease's container is told of its GPUs, so that a distributed launcher runs on them
//! without flags: the conventions of PyTorch's `torchrun` (which reads each of its options from a
//! `PET_` variable: `torchrun train.py` starts one process per GPU) and of the launchers that
//! read `WORLD_SIZE`, `MASTER_ADDR` and `MASTER_PORT` themselves, for one node; the CUDA
//! device order pinned to the PCI bus (the order `nvidia-smi` and the machine's GPU indices
//! follow); and each device's topology group, in that order, for a planner that keeps its
//! tensor-parallel ranks inside one group. The lease's own environment may set any of them:
//! these are defaults ([`crate::reconcile`] puts them before it).

use super::GpuInfo;

/// The rendezvous port `torchrun` and `torch.distributed` use by default.
pub const MASTER_PORT: u16 = 29_500;

/// The variables of a container on the machine GPUs `gpu_indices` (of the machine's `gpus`);
/// none for a lease of one GPU, which has nothing to launch across.
pub fn launch_env(gpu_indices: &[u8], gpus: &[GpuInfo]) -> Vec<(String, String)> {
    if gpu_indices.len() < 2 {
        return Vec::new();
    }
    let n = gpu_indices.len().to_string();
    // The container numbers its devices in PCI bus order: the machine's indices ascending.
    let mut order = gpu_indices.to_vec();
    order.sort_unstable();
    let groups: Vec<String> = order
        .iter()
        .map(|&i| {
            gpus.iter()
                .find(|g| g.index == i as u32)
                .and_then(|g| g.topology_group)
                .map_or_else(|| "?".to_string(), |t| t.to_string())
        })
        .collect();
    let master_addr = "127.0.0.1".to_string();
    let port = MASTER_PORT.to_string();
    [
        ("CUDA_DEVICE_ORDER", "PCI_BUS_ID".to_string()),
        ("WORLD_SIZE", n.clone()),
        ("LOCAL_WORLD_SIZE", n.clone()),
        ("NODE_RANK", "0".to_string()),
        ("MASTER_ADDR", master_addr.clone()),
        ("MASTER_PORT", port.clone()),
        ("PET_NPROC_PER_NODE", n),
        ("PET_NNODES", "1".to_string()),
        ("PET_NODE_RANK", "0".to_string()),
        ("PET_MASTER_ADDR", master_addr),
        ("PET_MASTER_PORT", port),
        ("GPU_MARKET_GPU_GROUPS", groups.join(",")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(index: u32, group: u8) -> GpuInfo {
        crate::gpu::test_gpu(index, 80, Some(group))
    }

    #[test]
    fn a_multi_gpu_lease_gets_torchruns_variables_and_its_devices_groups_in_bus_order() {
        let gpus: Vec<GpuInfo> = [0, 0, 1, 1]
            .iter()
            .enumerate()
            .map(|(i, &g)| gpu(i as u32, g))
            .collect();
        let env = launch_env(&[3, 1], &gpus);
        let get = |k: &str| {
            env.iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("WORLD_SIZE"), Some("2"));
        assert_eq!(get("PET_NPROC_PER_NODE"), Some("2"));
        assert_eq!(get("PET_NNODES"), Some("1"));
        assert_eq!(get("MASTER_ADDR"), Some("127.0.0.1"));
        assert_eq!(get("MASTER_PORT"), Some("29500"));
        assert_eq!(get("CUDA_DEVICE_ORDER"), Some("PCI_BUS_ID"));
        // Devices 1 and 3 of the machine are the container's 0 and 1: groups 0 and 1.
        assert_eq!(get("GPU_MARKET_GPU_GROUPS"), Some("0,1"));
        assert!(
            launch_env(&[2], &gpus).is_empty(),
            "one GPU: nothing to launch across"
        );
    }
}
