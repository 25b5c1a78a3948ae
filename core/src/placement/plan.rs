//! A packing plan: which sharing pods belong together on one GPU, learned from reference pods.
//!
//! Fragmentation scores (FGD and ours) look one placement ahead: a 230-milli pod on a GPU that
//! holds a 650 leaves 120 milli that almost nothing can use, and FGD cannot tell that from a 320
//! (30 left) when both land in the same score step. The plan looks to the end of each GPU: the
//! reference pods' sharing requests are packed best-fit-decreasing onto 1 000-milli GPUs
//! (the offline packing that knows every size), and each resulting GPU — `(650, 320)`,
//! `(470, 470)`, `(810, 160)`, … — is a *planned GPU*. Online, a GPU whose pods so far are part
//! of some planned GPU is *on plan*; a pod is preferably put where the GPU stays on plan.
//!
//! A planned completion also needs the host's CPU and memory: the plan records, for each partial
//! GPU, what the pods still missing would ask of the host (each size's most common request in
//! the reference pods), so a GPU is only kept open for partners the node can still host.
//!
//! The plan also knows what the workload's GPU pods ask of the host per whole GPU, on average,
//! and so how much of a node's idle GPU its CPU and memory could still feed: the rest is
//! *stranded* ([`PackingPlan::stranded`]), idle milli that only unusually light pods could use.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use super::types::{counted, Pod, MILLI_PER_GPU};

/// The most sharing pods a planned GPU holds; a GPU with more is off plan.
pub const MAX_PLANNED_PODS: usize = 8;

/// The sharing pods on one GPU, by size (milli), ascending.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct GpuPods {
    len: u8,
    sizes: [u16; MAX_PLANNED_PODS],
}

impl GpuPods {
    /// No pod yet.
    pub const EMPTY: GpuPods = GpuPods {
        len: 0,
        sizes: [0; MAX_PLANNED_PODS],
    };

    pub fn sizes(&self) -> &[u16] {
        &self.sizes[..self.len as usize]
    }

    /// These pods and one more of `milli`; `None` past [`MAX_PLANNED_PODS`].
    pub fn with(&self, milli: u16) -> Option<GpuPods> {
        let n = self.len as usize;
        if n == MAX_PLANNED_PODS {
            return None;
        }
        let mut next = *self;
        let at = self.sizes().partition_point(|&s| s <= milli);
        next.sizes.copy_within(at..n, at + 1);
        next.sizes[at] = milli;
        next.len += 1;
        Some(next)
    }
}

/// CPU milli and memory MiB the host must still give.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct HostNeed {
    pub cpu_milli: u64,
    pub memory_mib: u64,
}

impl HostNeed {
    /// What `pod` asks of its host.
    pub fn of(pod: &Pod) -> HostNeed {
        HostNeed {
            cpu_milli: pod.cpu_milli() as u64,
            memory_mib: pod.memory_mib() as u64,
        }
    }

    pub fn plus(self, other: HostNeed) -> HostNeed {
        HostNeed {
            cpu_milli: self.cpu_milli.saturating_add(other.cpu_milli),
            memory_mib: self.memory_mib.saturating_add(other.memory_mib),
        }
    }

    /// This need less `other` (never below zero).
    pub fn less(self, other: HostNeed) -> HostNeed {
        HostNeed {
            cpu_milli: self.cpu_milli.saturating_sub(other.cpu_milli),
            memory_mib: self.memory_mib.saturating_sub(other.memory_mib),
        }
    }

    /// Whether a host with this much CPU and memory free covers the need.
    pub fn fits(self, cpu_free: u32, memory_free: u32) -> bool {
        self.cpu_milli <= cpu_free as u64 && self.memory_mib <= memory_free as u64
    }
}

/// The planned GPUs of a workload, and the host needs of their completions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackingPlan {
    /// Every part of every planned GPU → what each of its completions still needs from the
    /// host (one entry per planned GPU it is part of, cheapest first).
    completions: HashMap<GpuPods, Vec<HostNeed>>,
    /// CPU milli and memory MiB the reference GPU pods ask per whole GPU, on average.
    per_gpu: HostNeed,
}

impl PackingPlan {
    /// Plans from `pods` (FGD's "original" pods: the workload's mix, not the arrival order).
    pub fn from_pods(pods: &[Pod]) -> PackingPlan {
        Self::from_counted(&counted(pods))
    }

    /// [`PackingPlan::from_pods`] of a workload given as pods and how many of each (a pod may
    /// come more than once).
    pub fn from_counted(pods: &[(Pod, u32)]) -> PackingPlan {
        // Each sharing size's most common host request (ties: the larger request).
        let mut requests: HashMap<u16, HashMap<HostNeed, u32>> = HashMap::new();
        let (mut gpu_host, mut gpu_milli) = (HostNeed::default(), 0u64);
        let mut sizes = Vec::new();
        for &(p, n) in pods {
            if p.num_gpu() > 0 {
                let need = HostNeed::of(&p);
                gpu_host = gpu_host.plus(HostNeed {
                    cpu_milli: need.cpu_milli.saturating_mul(n as u64),
                    memory_mib: need.memory_mib.saturating_mul(n as u64),
                });
                gpu_milli += p.total_gpu_milli() as u64 * n as u64;
            }
            if p.is_sharing() {
                sizes.extend(std::iter::repeat_n(p.gpu_milli(), n as usize));
                let count = requests
                    .entry(p.gpu_milli())
                    .or_default()
                    .entry(HostNeed::of(&p))
                    .or_default();
                *count = count.saturating_add(n);
            }
        }
        let need: HashMap<u16, HostNeed> = requests
            .into_iter()
            .filter_map(|(size, counts)| {
                let common = counts.into_iter().max_by_key(|&(need, n)| (n, need))?;
                Some((size, common.0))
            })
            .collect();

        let mut completions: HashMap<GpuPods, Vec<HostNeed>> = HashMap::new();
        // Each distinct planned GPU once: the packing of a large workload repeats a few
        // patterns thousands of times, and each adds nothing new after its first.
        let planned: std::collections::HashSet<GpuPods> =
            best_fit_decreasing(sizes).into_iter().collect();
        for gpu in planned {
            let sizes = gpu.sizes();
            // Every sub-multiset (by position; equal sizes give equal parts, recorded again).
            for subset in 0u32..1 << sizes.len() {
                let (mut part, mut rest) = (GpuPods::EMPTY, HostNeed::default());
                for (i, &s) in sizes.iter().enumerate() {
                    if subset >> i & 1 == 1 {
                        part = part.with(s).unwrap_or(part);
                    } else {
                        rest = rest.plus(need[&s]);
                    }
                }
                let needs = completions.entry(part).or_default();
                if !needs.contains(&rest) {
                    needs.push(rest);
                }
            }
        }
        for needs in completions.values_mut() {
            needs.sort_unstable();
        }
        PackingPlan {
            completions,
            per_gpu: HostNeed {
                cpu_milli: per_whole_gpu(gpu_host.cpu_milli, gpu_milli),
                memory_mib: per_whole_gpu(gpu_host.memory_mib, gpu_milli),
            },
        }
    }

    /// Whether these pods are part of some planned GPU.
    pub fn on_plan(&self, pods: &GpuPods) -> bool {
        self.completions.contains_key(pods)
    }

    /// What the cheapest completion of a GPU holding `pods` still needs from the host; nothing
    /// when the GPU is off plan (nothing is kept for it) or empty.
    pub fn pending(&self, pods: &GpuPods) -> HostNeed {
        if pods.len == 0 {
            return HostNeed::default();
        }
        self.completions
            .get(pods)
            .and_then(|needs| needs.first().copied())
            .unwrap_or_default()
    }

    /// Whether a GPU holding `pods` is on plan with a completion that fits in this much host
    /// CPU and memory once `reserved` (the other GPUs' completions) is set aside.
    pub fn completes(
        &self,
        pods: &GpuPods,
        reserved: HostNeed,
        cpu_free: u32,
        memory_free: u32,
    ) -> bool {
        self.completions.get(pods).is_some_and(|needs| {
            needs
                .iter()
                .any(|&n| n.plus(reserved).fits(cpu_free, memory_free))
        })
    }

    /// CPU milli and memory MiB the workload's GPU pods ask per whole GPU, on average (what an
    /// idle GPU will want from its host).
    pub fn per_gpu(&self) -> HostNeed {
        self.per_gpu
    }

    /// The idle GPU milli of a node that its free CPU and memory cannot feed at the workload's
    /// average request per GPU: `max(0, idle − min(cpu_free / cpu per GPU, memory_free /
    /// memory per GPU))`, in milli-GPU. A resource the workload does not ask for feeds any
    /// number of GPUs.
    pub fn stranded(&self, cpu_free: u32, memory_free: u32, idle_gpu_milli: u32) -> u64 {
        let fed = |free: u32, per_gpu: u64| {
            (free as u64 * MILLI_PER_GPU as u64)
                .checked_div(per_gpu)
                .unwrap_or(u64::MAX)
        };
        let fed =
            fed(cpu_free, self.per_gpu.cpu_milli).min(fed(memory_free, self.per_gpu.memory_mib));
        (idle_gpu_milli as u64).saturating_sub(fed)
    }

    /// How many distinct partial GPUs the plan knows (for tests and reports).
    pub fn parts(&self) -> usize {
        self.completions.len()
    }
}

/// `total` per 1 000 GPU milli, over `gpu_milli` (0 when there is no GPU milli).
fn per_whole_gpu(total: u64, gpu_milli: u64) -> u64 {
    (total * MILLI_PER_GPU as u64)
        .checked_div(gpu_milli)
        .unwrap_or(0)
}

/// Best-fit decreasing onto 1 000-milli GPUs: each size, largest first, goes to the GPU with
/// the least room that still fits it (of those, the first opened), or a new GPU.
fn best_fit_decreasing(mut sizes: Vec<u16>) -> Vec<GpuPods> {
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    let mut gpus: Vec<(u16, GpuPods)> = Vec::new();
    let mut open = OpenGpus::default();
    for s in sizes {
        let i = match open.take_least_fitting(s) {
            Some(i) => i,
            None => {
                gpus.push((MILLI_PER_GPU, GpuPods::EMPTY));
                gpus.len() - 1
            }
        };
        let (room, pods) = &mut gpus[i];
        // Only GPUs below MAX_PLANNED_PODS are open, so `with` has room.
        if let Some(next) = pods.with(s) {
            *pods = next;
            *room -= s;
        }
        if *room > 0 && pods.sizes().len() < MAX_PLANNED_PODS {
            open.put(*room, i);
        }
    }
    gpus.into_iter().map(|(_, pods)| pods).collect()
}

/// The GPUs that can take one more pod, by room: each room's GPUs (first opened on top), and
/// which rooms have any, so the least room that fits a size is found in a few words.
struct OpenGpus {
    by_room: Vec<BinaryHeap<Reverse<usize>>>,
    rooms: [u64; ROOM_WORDS],
}

/// Words of one bit per room, 0..=1 000 milli.
const ROOM_WORDS: usize = MILLI_PER_GPU as usize / 64 + 1;

impl Default for OpenGpus {
    fn default() -> OpenGpus {
        OpenGpus {
            by_room: vec![BinaryHeap::new(); MILLI_PER_GPU as usize + 1],
            rooms: [0; ROOM_WORDS],
        }
    }
}

impl OpenGpus {
    fn put(&mut self, room: u16, gpu: usize) {
        self.by_room[room as usize].push(Reverse(gpu));
        self.rooms[room as usize / 64] |= 1 << (room % 64);
    }

    /// The first opened of the GPUs with the least room of at least `size`, taken out.
    fn take_least_fitting(&mut self, size: u16) -> Option<usize> {
        let (mut w, mut bits) = (
            size as usize / 64,
            self.rooms[size as usize / 64] >> (size % 64) << (size % 64),
        );
        while bits == 0 {
            w += 1;
            bits = *self.rooms.get(w)?;
        }
        let room = (w * 64 + bits.trailing_zeros() as usize) as u16;
        let gpus = &mut self.by_room[room as usize];
        let Reverse(gpu) = gpus.pop()?;
        if gpus.is_empty() {
            self.rooms[w] &= !(1 << (room % 64));
        }
        Some(gpu)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::placement::ModelSet;
    use proptest::prelude::*;

    fn pod(cpu: u32, memory: u32, milli: u16) -> Pod {
        Pod::new(cpu, memory, 1, milli, ModelSet::ANY).unwrap()
    }

    fn gpu(sizes: &[u16]) -> GpuPods {
        sizes
            .iter()
            .fold(GpuPods::EMPTY, |g, &s| g.with(s).unwrap())
    }

    #[test]
    fn gpu_pods_keep_their_sizes_sorted_and_bounded() {
        let g = gpu(&[470, 160, 320, 160]);
        assert_eq!(g.sizes(), &[160, 160, 320, 470]);
        assert_eq!(g, gpu(&[320, 160, 470, 160]));
        let full = gpu(&[10; MAX_PLANNED_PODS]);
        assert_eq!(full.with(10), None);
    }

    #[test]
    fn the_plan_pairs_sizes_best_fit_decreasing_and_prices_the_partners() {
        // 650s with 320s, 470s with 470s; 320s ask 4 CPUs / 15 GiB, 470s 12 CPUs / 46 GiB.
        let pods = [
            pod(12_000, 47_104, 650),
            pod(4_000, 15_258, 320),
            pod(12_000, 47_104, 650),
            pod(4_000, 15_258, 320),
            pod(12_000, 47_104, 470),
            pod(12_000, 47_104, 470),
            pod(8_000, 30_517, 470),
        ];
        let plan = PackingPlan::from_pods(&pods);
        // Planned GPUs: (650, 320) twice, (470, 470), (470): their parts.
        for part in [&[][..], &[650], &[320], &[320, 650], &[470], &[470, 470]] {
            assert!(plan.on_plan(&gpu(part)), "{part:?}");
        }
        for off in [&[320, 470][..], &[650, 470], &[320, 320], &[470, 470, 470]] {
            assert!(!plan.on_plan(&gpu(off)), "{off:?}");
        }
        assert_eq!(plan.parts(), 6);
        // A 650 waits for a 320: 4 CPUs and 15,258 MiB.
        let need_320 = HostNeed {
            cpu_milli: 4_000,
            memory_mib: 15_258,
        };
        assert_eq!(plan.pending(&gpu(&[650])), need_320);
        // A 470 may be complete alone or wait for another (the most common 470 request).
        assert_eq!(plan.pending(&gpu(&[470])), HostNeed::default());
        assert_eq!(plan.pending(&GpuPods::EMPTY), HostNeed::default());
        assert_eq!(plan.pending(&gpu(&[320, 470])), HostNeed::default());
        // A 320 completes a 650 only where the host still has the 320's CPU and memory after
        // what other GPUs' partners are owed.
        let with_320 = gpu(&[320]);
        assert!(plan.completes(&with_320, HostNeed::default(), 12_000, 47_104));
        assert!(!plan.completes(&with_320, HostNeed::default(), 11_999, 47_104));
        assert!(!plan.completes(&with_320, need_320, 12_000, 47_104));
        assert!(!plan.completes(&gpu(&[320, 470]), HostNeed::default(), u32::MAX, u32::MAX));
        // 7 GPU pods ask 64 CPUs and 249,449 MiB for 3,350 milli, per whole GPU:
        let per_gpu = HostNeed {
            cpu_milli: 64_000 * 1_000 / 3_350,
            memory_mib: 249_449 * 1_000 / 3_350,
        };
        assert_eq!(plan.per_gpu(), per_gpu);
        assert_eq!(
            per_gpu,
            HostNeed {
                cpu_milli: 19_104,
                memory_mib: 74_462
            }
        );
    }

    #[test]
    fn stranded_milli_is_the_idle_gpu_the_host_cannot_feed() {
        // 10 CPUs and 40 GiB per whole GPU.
        let whole = Pod::new(10_000, 40_960, 1, 1_000, ModelSet::ANY).unwrap();
        let plan = PackingPlan::from_pods(&[whole]);
        assert_eq!(plan.stranded(40_000, 163_840, 4_000), 0);
        assert_eq!(plan.stranded(80_000, 1_000_000, 4_000), 0);
        // CPU for 2.5 GPUs: 1.5 GPUs stranded; memory for 1 GPU: 3 stranded.
        assert_eq!(plan.stranded(25_000, 163_840, 4_000), 1_500);
        assert_eq!(plan.stranded(80_000, 40_960, 4_000), 3_000);
        assert_eq!(plan.stranded(0, 0, 650), 650);
        assert_eq!(plan.stranded(0, 0, 0), 0);
        // A workload without GPU pods strands nothing.
        let cpu_only = Pod::new(1_000, 1_024, 0, 0, ModelSet::ANY).unwrap();
        assert_eq!(PackingPlan::from_pods(&[cpu_only]).stranded(0, 0, 8_000), 0);
    }

    proptest! {
        /// Stranding never exceeds the idle milli, and more free CPU or memory never strands
        /// more.
        #[test]
        fn stranding_is_bounded_and_falls_with_free_host(
            cpu in 1u32..64_000, memory in 1u32..500_000, milli in 1u16..=1_000, gpus in 1u8..=8,
            cpu_free in 0u32..200_000, memory_free in 0u32..1_000_000, idle in 0u32..=8_000,
            more in 0u32..100_000,
        ) {
            let plan = PackingPlan::from_pods(&[Pod::new(cpu, memory, if milli < 1_000 { 1 } else { gpus }, milli, ModelSet::ANY).unwrap()]);
            let s = plan.stranded(cpu_free, memory_free, idle);
            prop_assert!(s <= idle as u64);
            prop_assert!(plan.stranded(cpu_free + more, memory_free, idle) <= s);
            prop_assert!(plan.stranded(cpu_free, memory_free + more, idle) <= s);
        }

        /// Best-fit decreasing places every size exactly once and never past 1 000 milli.
        #[test]
        fn best_fit_decreasing_conserves_sizes_and_capacity(sizes in prop::collection::vec(1u16..1_000, 0..300)) {
            let gpus = best_fit_decreasing(sizes.clone());
            let mut placed: Vec<u16> = gpus.iter().flat_map(|g| g.sizes().to_vec()).collect();
            let mut expect = sizes;
            placed.sort_unstable();
            expect.sort_unstable();
            prop_assert_eq!(placed, expect);
            for g in &gpus {
                prop_assert!(g.sizes().iter().map(|&s| s as u32).sum::<u32>() <= 1_000);
            }
        }

        /// The rooms' index chooses as the rule reads, checked against a scan of every GPU:
        /// the least room that fits, of those the first opened. Sizes from few values, as a
        /// workload's repeat (and an attacker's bids may), so that rooms tie often.
        #[test]
        fn best_fit_decreasing_takes_the_least_room_that_fits_first_opened_first(
            sizes in prop::collection::vec(prop::sample::select(vec![1u16, 2, 125, 160, 250, 320, 333, 470, 500, 650, 999]), 0..400),
        ) {
            let mut sorted = sizes.clone();
            sorted.sort_unstable_by(|a, b| b.cmp(a));
            let mut scanned: Vec<(u16, GpuPods)> = Vec::new();
            for s in sorted {
                let open = |(room, pods): &(u16, GpuPods)| *room >= s && pods.sizes().len() < MAX_PLANNED_PODS;
                let least = scanned.iter().enumerate().filter(|(_, g)| open(g)).min_by_key(|(i, (room, _))| (*room, *i));
                let i = match least {
                    Some((i, _)) => i,
                    None => {
                        scanned.push((MILLI_PER_GPU, GpuPods::EMPTY));
                        scanned.len() - 1
                    }
                };
                let (room, pods) = &mut scanned[i];
                *pods = pods.with(s).unwrap();
                *room -= s;
            }
            let scanned: Vec<GpuPods> = scanned.into_iter().map(|(_, pods)| pods).collect();
            prop_assert_eq!(best_fit_decreasing(sizes), scanned);
        }

        /// A workload given counted plans as the same workload given pod by pod.
        #[test]
        fn a_counted_workload_plans_as_its_pods_one_by_one(
            shapes in prop::collection::vec((1u32..8, 1u32..4, prop::sample::select(vec![160u16, 320, 470, 650, 1_000]), 1u8..3, 1u32..20), 1..12),
        ) {
            let counted: Vec<(Pod, u32)> = shapes.iter().map(|&(cpu, memory, milli, gpus, n)| {
                let gpus = if milli < MILLI_PER_GPU { 1 } else { gpus };
                (Pod::new(cpu * 1_000, memory * 1_024, gpus, milli, ModelSet::ANY).unwrap(), n)
            }).collect();
            let one_by_one: Vec<Pod> = counted.iter().flat_map(|&(p, n)| vec![p; n as usize]).collect();
            prop_assert_eq!(PackingPlan::from_counted(&counted), PackingPlan::from_pods(&one_by_one));
        }
    }
}
