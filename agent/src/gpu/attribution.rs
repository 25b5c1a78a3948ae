//! Splitting a shared GPU's readings among the leases on it.
//!
//! The driver measures power, energy and utilisation per GPU; leases that share a GPU in GiB
//! slices must each be billed their part, not the whole. Each lease's part follows what its
//! processes use of the GPU, as the driver lists them per process (NVML's running compute
//! processes and per-process utilisation): in proportion to their SM utilisation, or where the
//! driver tells none (or every tenant is idle), to the GPU memory they hold, or else equally.
//! The parts are whole numbers that add up to the GPU's reading exactly: what the leases of a GPU
//! are billed together is what the GPU measured.

use super::{ProcessUse, Sample};

/// What one lease's processes use of a GPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TenantUse {
    /// The SM utilisation of its processes, summed, in percent; `None` where the driver tells
    /// none for any of them.
    pub sm_util_pct: Option<u32>,
    pub memory_bytes: u64,
}

/// One lease's part of a GPU's reading.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Part {
    pub power_mw: u32,
    pub energy_mj: u64,
    pub utilisation_pct: u8,
}

/// What each tenant uses of a GPU whose processes are `processes`, given each tenant's PIDs
/// (its container's). Processes of no tenant (the MPS server, the operator's own) count for
/// none.
pub fn tenant_uses(processes: &[ProcessUse], tenant_pids: &[Vec<u32>]) -> Vec<TenantUse> {
    tenant_pids
        .iter()
        .map(|pids| {
            processes
                .iter()
                .filter(|p| pids.contains(&p.pid))
                .fold(TenantUse::default(), |u, p| TenantUse {
                    sm_util_pct: match (u.sm_util_pct, p.sm_util_pct) {
                        (None, None) => None,
                        (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0) as u32),
                    },
                    memory_bytes: u.memory_bytes.saturating_add(p.memory_bytes),
                })
        })
        .collect()
}

/// The weights the tenants `uses` split a GPU's reading by: their SM utilisation, else (no
/// tenant busy, or the driver tells none) the memory they hold, else equal.
pub fn weights(uses: &[TenantUse]) -> Vec<u64> {
    let sm: Vec<u64> = uses
        .iter()
        .map(|u| u.sm_util_pct.unwrap_or(0) as u64)
        .collect();
    if sm.iter().any(|&w| w > 0) {
        return sm;
    }
    let memory: Vec<u64> = uses.iter().map(|u| u.memory_bytes).collect();
    if memory.iter().any(|&w| w > 0) {
        return memory;
    }
    vec![1; uses.len()]
}

/// `total` split in proportion to `weights` (equally where they are all zero), in whole units by
/// the largest remainder: the parts add up to `total` exactly and each is within one unit of its
/// exact share. No weights, no parts.
pub fn split(total: u64, weights: &[u64]) -> Vec<u64> {
    let sum: u128 = weights.iter().map(|&w| w as u128).sum();
    if sum == 0 && !weights.is_empty() {
        return split(total, &vec![1; weights.len()]);
    }
    let exact: Vec<(u64, u128)> = weights
        .iter()
        .map(|&w| {
            let scaled = total as u128 * w as u128;
            ((scaled / sum) as u64, scaled % sum)
        })
        .collect();
    let mut parts: Vec<u64> = exact.iter().map(|&(floor, _)| floor).collect();
    let left = total - parts.iter().sum::<u64>();
    // The units the floors left go to the largest remainders, the first tenant first on ties.
    let mut order: Vec<usize> = (0..parts.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(exact[i].1));
    for &i in order.iter().take(left as usize) {
        parts[i] += 1;
    }
    parts
}

/// The tenants' parts of a GPU's reading `sample`, of which `energy_mj` is the energy since the
/// last split, by what they use (`uses`, one per tenant).
pub fn attribute(sample: &Sample, energy_mj: u64, uses: &[TenantUse]) -> Vec<Part> {
    let w = weights(uses);
    let power = split(sample.power_mw as u64, &w);
    let energy = split(energy_mj, &w);
    let utilisation = split(sample.utilisation_pct as u64, &w);
    (0..uses.len())
        .map(|i| Part {
            // Each part is at most the whole, which fits.
            power_mw: power[i] as u32,
            energy_mj: energy[i],
            utilisation_pct: utilisation[i] as u8,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn process(pid: u32, memory_gib: u64, sm: Option<u8>) -> ProcessUse {
        ProcessUse {
            pid,
            memory_bytes: memory_gib << 30,
            sm_util_pct: sm,
        }
    }

    #[test]
    fn parts_follow_sm_utilisation_then_memory_then_equal() {
        let reading = Sample {
            mem_utilisation_pct: 0,
            power_mw: 250_000,
            energy_mj: 0,
            utilisation_pct: 100,
        };
        // Lease A: two processes at 50 % and 25 % of the SMs; lease B one at 25 %; pid 9 is the
        // MPS server, nobody's.
        let procs = [
            process(1, 10, Some(50)),
            process(2, 10, Some(25)),
            process(3, 30, Some(25)),
            process(9, 1, Some(0)),
        ];
        let uses = tenant_uses(&procs, &[vec![1, 2], vec![3]]);
        let parts = attribute(&reading, 15_000_000, &uses);
        assert_eq!(
            parts,
            vec![
                Part {
                    power_mw: 187_500,
                    energy_mj: 11_250_000,
                    utilisation_pct: 75
                },
                Part {
                    power_mw: 62_500,
                    energy_mj: 3_750_000,
                    utilisation_pct: 25
                },
            ]
        );
        // No per-process utilisation (NVML under MPS may tell none): by memory held, 20 : 30.
        let procs = [
            process(1, 10, None),
            process(2, 10, None),
            process(3, 30, None),
        ];
        let uses = tenant_uses(&procs, &[vec![1, 2], vec![3]]);
        assert_eq!(uses[0].sm_util_pct, None);
        let parts = attribute(&reading, 1_000, &uses);
        assert_eq!(
            parts.iter().map(|s| s.energy_mj).collect::<Vec<_>>(),
            vec![400, 600]
        );
        // Nothing on the GPU yet: equal parts, the odd unit to the first.
        let parts = attribute(&reading, 1_001, &tenant_uses(&[], &[vec![1], vec![2]]));
        assert_eq!(
            parts.iter().map(|s| s.energy_mj).collect::<Vec<_>>(),
            vec![501, 500]
        );
        assert_eq!(
            parts.iter().map(|s| s.power_mw).sum::<u32>(),
            reading.power_mw
        );
    }

    #[test]
    fn a_lone_tenant_gets_the_whole_reading() {
        let reading = Sample {
            mem_utilisation_pct: 0,
            power_mw: 123_456,
            energy_mj: 0,
            utilisation_pct: 37,
        };
        let parts = attribute(&reading, 999, &[TenantUse::default()]);
        assert_eq!(
            parts,
            vec![Part {
                power_mw: 123_456,
                energy_mj: 999,
                utilisation_pct: 37
            }]
        );
        assert!(attribute(&reading, 999, &[]).is_empty());
    }

    proptest! {
        #[test]
        fn parts_add_up_to_the_total_and_stay_within_a_unit_of_the_exact_share(
            total in any::<u64>(),
            weights in prop::collection::vec(any::<u64>(), 1..8),
        ) {
            let parts = split(total, &weights);
            prop_assert_eq!(parts.len(), weights.len());
            prop_assert_eq!(parts.iter().map(|&p| p as u128).sum::<u128>(), total as u128);
            let sum: u128 = weights.iter().map(|&w| w as u128).sum();
            for (&part, &w) in parts.iter().zip(&weights) {
                prop_assert!(part <= total);
                if let Some(floor) = (total as u128 * w as u128).checked_div(sum) {
                    let floor = floor as u64;
                    prop_assert!(part == floor || part == floor + 1, "{part} vs {floor}");
                }
            }
        }

    }
}
