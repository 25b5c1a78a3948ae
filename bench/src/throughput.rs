//! Raw placement speed of our policy on a synthetic cluster: 10,000 GPUs in 1,250 nodes of
//! 8 GPUs (four GPU classes, NVLink-style topology groups of 4) and 100,000 waiting requests,
//! placed one after the other on one core.

use std::time::Instant;

use gpu_market_core::placement::{
    Cluster, FragModel, ModelId, ModelSet, Node, PackingPlan, Planned, Pod,
};

const NODES: usize = 1_250;
const REQUESTS: usize = 100_000;

/// xorshift64*: the bench's own deterministic randomness.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn pick<'a, T>(&mut self, weighted: &'a [(u32, T)]) -> &'a T {
        let total: u64 = weighted.iter().map(|w| w.0 as u64).sum();
        let mut x = self.next() % total;
        for (w, item) in weighted {
            if x < *w as u64 {
                return item;
            }
            x -= *w as u64;
        }
        &weighted[weighted.len() - 1].1
    }
}

fn cluster(rng: &mut Rng) -> Result<Cluster, String> {
    // (share of nodes, cpu milli, memory MiB) per class; model id = class index.
    let classes = [
        (20, 192_000, 2_097_152),
        (30, 128_000, 1_048_576),
        (30, 96_000, 786_432),
        (20, 64_000, 393_216),
    ];
    let weighted: Vec<(u32, (u8, u32, u32))> = classes
        .iter()
        .enumerate()
        .map(|(i, &(w, c, m))| (w, (i as u8, c, m)))
        .collect();
    let nodes = (0..NODES)
        .map(|_| {
            let &(model, cpu, mem) = rng.pick(&weighted);
            Node::new(cpu, mem, ModelId(model), 8, 4).map_err(|e| e.to_string())
        })
        .collect::<Result<Vec<_>, _>>()?;
    Cluster::in_order(nodes).map_err(|e| e.to_string())
}

/// cpu milli, memory MiB, GPUs, milli per GPU, allowed models.
type Shape = (u32, u32, u8, u16, ModelSet);

fn requests(rng: &mut Rng) -> Result<Vec<Pod>, String> {
    let any = ModelSet::ANY;
    let big = any
        .with(ModelId(0))
        .and_then(|s| s.with(ModelId(1)))
        .ok_or("model set")?;
    // (weight, shape): an openb-like mix.
    let catalogue: [(u32, Shape); 12] = [
        (14, (8_000, 32_768, 0, 0, any)),
        (4, (2_000, 8_192, 0, 0, any)),
        (6, (4_000, 16_384, 1, 250, any)),
        (10, (6_000, 24_576, 1, 500, any)),
        (8, (8_000, 32_768, 1, 750, any)),
        (6, (12_000, 49_152, 1, 800, any)),
        (30, (12_000, 65_536, 1, 1_000, any)),
        (6, (16_000, 131_072, 1, 1_000, big)),
        (6, (24_000, 131_072, 2, 1_000, any)),
        (4, (48_000, 262_144, 4, 1_000, any)),
        (2, (48_000, 262_144, 4, 1_000, big)),
        (4, (96_000, 524_288, 8, 1_000, any)),
    ];
    (0..REQUESTS)
        .map(|_| {
            let &(cpu, mem, n, milli, spec) = rng.pick(&catalogue);
            Pod::new(cpu, mem, n, milli, spec).map_err(|e| e.to_string())
        })
        .collect()
}

/// Peak resident memory of this process in KiB, from /proc/self/status.
fn vm_hwm_kib() -> Option<u64> {
    status_kib("VmHWM:")
}

/// The field `name` (in KiB) of /proc/self/status: `VmHWM:`, `VmRSS:`.
pub fn status_kib(name: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(name))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

pub fn main() -> Result<(), String> {
    let mut rng = Rng(0x5EED_0042);
    let mut cluster = cluster(&mut rng)?;
    let pods = requests(&mut rng)?;
    let gpus = cluster.total_gpu_milli() / 1_000;
    let hwm_before = vm_hwm_kib();

    let start = Instant::now();
    let frag = FragModel::from_pods(&pods, 95);
    let mut policy = Planned::new(frag, PackingPlan::from_pods(&pods));
    let setup_s = start.elapsed().as_secs_f64();

    let start = Instant::now();
    let (mut placed, mut refused) = (0u64, 0u64);
    for pod in &pods {
        match cluster.place(&mut policy, pod).map_err(|e| e.to_string())? {
            Some(_) => placed += 1,
            None => refused += 1,
        }
    }
    let wall_s = start.elapsed().as_secs_f64();
    let hwm = vm_hwm_kib();

    let allocated = 100.0 * cluster.allocated_gpu_milli() as f64 / cluster.total_gpu_milli() as f64;
    println!(
        "synthetic: {} nodes, {gpus} GPUs (4 classes, topology groups of 4), {} requests\n",
        cluster.nodes().len(),
        pods.len()
    );
    println!("| policy | requests/s | placements/s | placed | refused | GPU alloc % | typical-pod setup | wall time | VmHWM |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let kib =
        |v: Option<u64>| v.map_or("?".to_string(), |k| format!("{:.1} MiB", k as f64 / 1024.0));
    println!(
        "| FGD+plan | {:.0} | {:.0} | {placed} | {refused} | {allocated:.2} | {:.3} s | {:.3} s | {} (before placing: {}) |",
        pods.len() as f64 / wall_s,
        placed as f64 / wall_s,
        setup_s,
        wall_s,
        kib(hwm),
        kib(hwm_before)
    );
    Ok(())
}
