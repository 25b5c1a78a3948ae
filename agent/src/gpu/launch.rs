//! What a lease's container is told of its GPUs, so that a distributed launcher runs on them
//! without flags: the conventions of PyTorch's `torchrun` (which reads each of its options from a
//! `PET_` variable: `torchrun train.py` starts one process per GPU) and of the launchers that
//! read `WORLD_SIZE`, `MASTER_ADDR` and `MASTER_PORT` themselves, for one node; the CUDA
//! device order pinned to the PCI bus (the order `nvidia-smi` and the machine's GPU indices
//! follow); and each device's topology group, in that order, for a planner that keeps its
//! tensor-parallel ranks inside one group. The lease's own environment may set any of them:
//! these are defaults ([`crate::reconcile`] puts them before it).

use super::GpuInfo;
use crate::chain::Gang;

/// The rendezvous port `torchrun` and `torch.distributed` use by default.
pub const MASTER_PORT: u16 = 29_500;

/// The variables of a container on the machine GPUs `gpu_indices` (of the machine's `gpus`),
/// as part `gang` of a gang where it is one: every part runs `gpu_indices.len()` processes, the
/// first part's machine is the rendezvous (`MASTER_ADDR`), and each part is one node of
/// `torchrun`'s. None for a lease of one GPU that is no gang's part, which has nothing to launch
/// across.
pub fn launch_env(
    gpu_indices: &[u8],
    gpus: &[GpuInfo],
    gang: Option<&Gang>,
) -> Vec<(String, String)> {
    if gpu_indices.len() < 2 && gang.is_none() {
        return Vec::new();
    }
    let local = gpu_indices.len();
    let (part, parts, master_addr) = match gang {
        Some(g) => (g.part, g.parts, g.first_host().to_string()),
        None => (0, 1, "127.0.0.1".to_string()),
    };
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
    let port = gang
        .map(Gang::master_port)
        .filter(|&p| p != 0)
        .unwrap_or(MASTER_PORT)
        .to_string();
    let (n, world) = (local.to_string(), (local * parts as usize).to_string());
    let (node, nodes) = (part.to_string(), parts.to_string());
    [
        ("CUDA_DEVICE_ORDER", "PCI_BUS_ID".to_string()),
        ("WORLD_SIZE", world),
        ("LOCAL_WORLD_SIZE", n.clone()),
        ("NODE_RANK", node.clone()),
        ("MASTER_ADDR", master_addr.clone()),
        ("MASTER_PORT", port.clone()),
        ("PET_NPROC_PER_NODE", n),
        ("PET_NNODES", nodes),
        ("PET_NODE_RANK", node),
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
        let env = launch_env(&[3, 1], &gpus, None);
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
            launch_env(&[2], &gpus, None).is_empty(),
            "one GPU: nothing to launch across"
        );
    }

    #[test]
    fn each_part_of_a_gang_is_one_node_of_the_first_parts_rendezvous() {
        let gpus: Vec<GpuInfo> = (0..4).map(|i| gpu(i, 0)).collect();
        let gang = Gang {
            part: 2,
            parts: 3,
            hosts: [
                "gpu-a.example.net",
                "gpu-b.example.net",
                "gpu-c.example.net",
            ]
            .map(String::from)
            .to_vec(),
            port: 29_500,
            rendezvous: Some(31_007),
        };
        for (indices, local) in [(&[0u8, 1][..], "2"), (&[3u8][..], "1")] {
            let env = launch_env(indices, &gpus, Some(&gang));
            let get = |k: &str| {
                env.iter()
                    .find(|(key, _)| key == k)
                    .map(|(_, v)| v.as_str())
            };
            let world = (3 * indices.len()).to_string();
            assert_eq!(get("WORLD_SIZE"), Some(world.as_str()));
            assert_eq!(get("LOCAL_WORLD_SIZE"), Some(local));
            assert_eq!(get("PET_NPROC_PER_NODE"), Some(local));
            assert_eq!(get("NODE_RANK"), Some("2"));
            assert_eq!(get("PET_NODE_RANK"), Some("2"));
            assert_eq!(get("PET_NNODES"), Some("3"));
            assert_eq!(get("MASTER_ADDR"), Some("gpu-a.example.net"));
            assert_eq!(get("PET_MASTER_ADDR"), Some("gpu-a.example.net"));
            // Where it reaches the first part: the host port that part published.
            assert_eq!(get("MASTER_PORT"), Some("31007"));
        }
        // The first part listens on its own container port.
        let first = Gang { part: 0, ..gang };
        let env = launch_env(&[0], &gpus, Some(&first));
        assert!(
            env.contains(&("MASTER_PORT".into(), "29500".into())),
            "{env:?}"
        );
    }
}
