//! Loading the openb trace (Alibaba cluster-trace-gpu-v2023) and the peer's seed-42 files.

use std::collections::HashMap;
use std::fs;
use std::path::Path;

use gpu_market_core::placement::{ModelId, ModelSet, Node, Pod};

pub struct Trace {
    /// Nodes in the order of `openb_node_list_gpu_node.csv`.
    pub nodes: Vec<Node>,
    /// The peer's tie-break rank of each node.
    pub rank: Vec<u32>,
    /// The 8,152 original pods: FGD's typical pods come from them.
    pub original: Vec<Pod>,
    /// The inflated arrival sequence.
    pub arrivals: Vec<Pod>,
    /// `cum_gpu_milli` of the arrival file, to check our own arithmetic against.
    pub arrival_cum_gpu_milli: Vec<u64>,
}

pub type Rows = Vec<HashMap<String, String>>;

pub fn read_csv(path: &Path) -> Result<Rows, String> {
    let text = fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().ok_or("empty csv")?.split(',').collect();
    let mut rows = Vec::new();
    for line in lines.filter(|l| !l.trim().is_empty()) {
        let cells: Vec<&str> = line.split(',').collect();
        if cells.len() != header.len() {
            return Err(format!("{}: bad row {line:?}", path.display()));
        }
        rows.push(
            header
                .iter()
                .map(|h| h.to_string())
                .zip(cells.iter().map(|c| c.to_string()))
                .collect(),
        );
    }
    Ok(rows)
}

pub fn num<T: std::str::FromStr>(row: &HashMap<String, String>, key: &str) -> Result<T, String> {
    let v = row
        .get(key)
        .ok_or_else(|| format!("missing column {key}"))?;
    v.trim()
        .parse()
        .map_err(|_| format!("column {key}: {v:?} is not a number"))
}

struct Models(HashMap<String, ModelId>);

impl Models {
    fn id(&mut self, name: &str) -> Result<ModelId, String> {
        let next = self.0.len();
        if let Some(&id) = self.0.get(name) {
            return Ok(id);
        }
        let id = ModelId(u8::try_from(next).map_err(|_| "too many GPU models")?);
        self.0.insert(name.to_string(), id);
        Ok(id)
    }

    fn spec(&mut self, spec: &str) -> Result<ModelSet, String> {
        let mut set = ModelSet::ANY;
        for name in spec.split('|').filter(|s| !s.is_empty()) {
            let id = self.id(name)?;
            set = set.with(id).ok_or("more than 32 GPU models")?;
        }
        Ok(set)
    }
}

fn pod(row: &HashMap<String, String>, models: &mut Models) -> Result<Pod, String> {
    let spec = models.spec(row.get("gpu_spec").map(String::as_str).unwrap_or(""))?;
    Pod::new(
        num(row, "cpu_milli")?,
        num(row, "memory_mib")?,
        num(row, "num_gpu")?,
        num(row, "gpu_milli")?,
        spec,
    )
    .map_err(|e| e.to_string())
}

pub fn load(dir: &Path) -> Result<Trace, String> {
    let base = dir.join("alibaba-gpu-v2023");
    let mut models = Models(HashMap::new());

    let node_rows = read_csv(&base.join("openb_node_list_gpu_node.csv"))?;
    let ranks: HashMap<String, u32> = read_csv(&base.join("fgd-seed42/node_priority.csv"))?
        .iter()
        .map(|r| Ok((r["node"].clone(), num(r, "tie_rank")?)))
        .collect::<Result<_, String>>()?;
    let mut nodes = Vec::new();
    let mut rank = Vec::new();
    for r in &node_rows {
        let gpus: u8 = num(r, "gpu")?;
        let model = models.id(&r["model"])?;
        nodes.push(
            Node::new(
                num(r, "cpu_milli")?,
                num(r, "memory_mib")?,
                model,
                gpus,
                gpus.max(1),
            )
            .map_err(|e| e.to_string())?,
        );
        rank.push(
            *ranks
                .get(&r["sn"])
                .ok_or_else(|| format!("no rank for {}", r["sn"]))?,
        );
    }

    let original = read_csv(&base.join("openb_pod_list_default.csv"))?
        .iter()
        .map(|r| pod(r, &mut models))
        .collect::<Result<_, _>>()?;
    let arrival_rows = read_csv(&base.join("fgd-seed42/arrival_order.csv"))?;
    let arrivals = arrival_rows
        .iter()
        .map(|r| pod(r, &mut models))
        .collect::<Result<_, _>>()?;
    let arrival_cum_gpu_milli = arrival_rows
        .iter()
        .map(|r| num(r, "cum_gpu_milli"))
        .collect::<Result<_, _>>()?;
    Ok(Trace {
        nodes,
        rank,
        original,
        arrivals,
        arrival_cum_gpu_milli,
    })
}
