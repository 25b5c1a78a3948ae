//! Loading Gavel's Philly-derived traces (`traces/philly-gavel/`): one `.trace` file per virtual
//! cluster, throughputs per GPU type, and the cluster spec.

use std::fs;
use std::path::Path;

use crate::json::{self, Json};

/// The GPU type the replay runs on: `cluster_specs.json` (`"500:0:0"`) is V100 only.
const GPU_TYPE: &str = "v100";

pub struct Job {
    /// Index into [`Workload::vcs`].
    pub vc: usize,
    pub gpus: u32,
    /// Seconds from the trace start.
    pub arrival: f64,
    /// Run time in seconds on `gpus` V100s: `total_steps / throughput`.
    pub work: f64,
}

pub struct Workload {
    /// Virtual-cluster names (trace file stems), sorted.
    pub vcs: Vec<String>,
    /// All jobs of all virtual clusters, by arrival (ties: file order).
    pub jobs: Vec<Job>,
    /// GPUs in the cluster.
    pub gpus: u32,
    /// Jobs whose (type, GPU count) has no measured throughput (see [`throughput`]).
    pub derived: usize,
}

/// Steps per second of `job_type` on `gpus` GPUs. Gavel measured 1, 2, 4 and 8 GPUs, and only
/// one GPU for some types; a missing count is scaled linearly from the largest measured count
/// below it (optimistic for 16- and 32-GPU jobs, which are 2 % of the jobs). `None` when the
/// type is unknown. The second value says whether it was derived.
fn throughput(table: &Json, job_type: &str, gpus: u32) -> Option<(f64, bool)> {
    let measured = |s: u32| {
        table
            .get(&format!("('{job_type}', {s})"))
            .and_then(|e| e.get("null"))
            .and_then(Json::as_f64)
            .filter(|&v| v > 0.0)
    };
    if let Some(v) = measured(gpus) {
        return Some((v, false));
    }
    let base = [8, 4, 2, 1]
        .into_iter()
        .find(|&s| s < gpus && measured(s).is_some())?;
    Some((measured(base)? * gpus as f64 / base as f64, true))
}

fn cluster_gpus(dir: &Path) -> Result<u32, String> {
    let path = dir.join("cluster_specs.json");
    let text = fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let spec = match json::parse(&text)?.get("philly") {
        Some(Json::Array(v)) => v.first().and_then(Json::as_str).map(str::to_string),
        _ => None,
    }
    .ok_or("cluster_specs.json: no philly spec")?;
    let counts: Vec<u32> = spec
        .split(':')
        .map(|c| c.parse().map_err(|_| format!("bad cluster spec {spec:?}")))
        .collect::<Result<_, _>>()?;
    match counts.as_slice() {
        [v100, 0, 0] => Ok(*v100),
        _ => Err(format!(
            "cluster spec {spec:?}: only a V100-only cluster is replayed"
        )),
    }
}

pub fn load(traces: &Path) -> Result<Workload, String> {
    let dir = traces.join("philly-gavel");
    let path = dir.join("simulation_throughputs.json");
    let text = fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let all = json::parse(&text)?;
    let table = all
        .get(GPU_TYPE)
        .ok_or("simulation_throughputs.json: no v100")?;

    let mut files: Vec<_> = fs::read_dir(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "trace"))
        .collect();
    files.sort();
    let mut vcs = Vec::new();
    let mut jobs = Vec::new();
    let mut derived = 0;
    for file in &files {
        let vc = vcs.len();
        vcs.push(
            file.file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or("?")
                .to_string(),
        );
        let text = fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let f: Vec<&str> = line.split('\t').collect();
            let bad = || format!("{}: bad line {line:?}", file.display());
            if f.len() != 7 {
                return Err(bad());
            }
            let steps: f64 = f[4].parse().map_err(|_| bad())?;
            let arrival: f64 = f[5].parse().map_err(|_| bad())?;
            let gpus: u32 = f[6].parse().map_err(|_| bad())?;
            let (tput, was_derived) = throughput(table, f[0], gpus)
                .ok_or_else(|| format!("no throughput for {:?} on {gpus} GPUs", f[0]))?;
            derived += was_derived as usize;
            jobs.push(Job {
                vc,
                gpus,
                arrival,
                work: steps / tput,
            });
        }
    }
    jobs.sort_by(|a, b| a.arrival.total_cmp(&b.arrival));
    Ok(Workload {
        vcs,
        jobs,
        gpus: cluster_gpus(&dir)?,
        derived,
    })
}
