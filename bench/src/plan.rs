//! `gpu-market-bench plan`: `bid plan`'s memory model (`gpu_market_core::parallelism`) beside
//! the figures its sources publish, and its time per plan.
//!
//! Every number in the "planner" column is computed by the functions `bid plan` calls. No
//! figure here was measured on a GPU: that check needs one.

use std::hint::black_box;
use std::time::Instant;

use gpu_market_core::parallelism::reference::{GPT2_XL, LLAMA2_70B, LLAMA2_7B, LLAMA3_8B, OPT_13B};
use gpu_market_core::parallelism::{
    self, model_states, Attention, Gpus, Job, Layout, Model, Optimizer, Precision, Work,
};

/// Decimal GB, as the papers print them.
fn gb(bytes: u64) -> String {
    format!("{:.1} GB", bytes as f64 / 1e9)
}

const SINGLE: Layout = Layout {
    data: 1,
    tensor: 1,
    pipeline: 1,
    zero: 0,
    recompute: false,
};

fn serving(model: Model, seq_len: u32) -> Job {
    Job {
        model,
        precision: Precision::Bf16,
        seq_len,
        batch: 1,
        attention: Attention::Flash,
        work: Work::Infer,
    }
}

fn published() -> Vec<(String, &'static str, String, String)> {
    let mut rows = Vec::new();
    let stages = ["baseline", "P_os", "P_os+g", "P_os+g+p"];
    let zero_figures = ["120 GB", "31.4 GB", "16.6 GB", "1.9 GB"];
    for (zero, (stage, figure)) in stages.iter().zip(zero_figures).enumerate() {
        let m = model_states(
            7_500_000_000,
            Precision::Bf16,
            Optimizer::AdamW,
            64,
            zero as u8,
        );
        rows.push((
            format!("7.5B model states per GPU, 64 GPUs, {stage}"),
            "ZeRO, Fig. 1",
            figure.to_string(),
            gb(m.model_states()),
        ));
    }
    let gpt2 = model_states(GPT2_XL.params(), Precision::Bf16, Optimizer::AdamW, 1, 0);
    rows.push((
        "GPT-2 XL (1.5B) Adam mixed-precision model states".into(),
        "ZeRO, §3.1",
        "at least 24 GB".into(),
        gb(gpt2.model_states()),
    ));
    let opt = memory_single(&serving(OPT_13B.model(), 1));
    rows.push((
        "OPT-13B fp16 weights".into(),
        "PagedAttention, Fig. 1",
        "26 GB".into(),
        gb(opt.weights),
    ));
    rows.push((
        "OPT-13B KV cache per token".into(),
        "PagedAttention, §3",
        "800 KB".into(),
        format!("{} KiB", opt.kv_cache / 1024),
    ));
    let llama2 = memory_single(&serving(LLAMA2_7B.model(), 4096));
    rows.push((
        "Llama 2 7B fp16 weights".into(),
        "checkpoint files",
        "13.5 GB".into(),
        gb(llama2.weights),
    ));
    let llama3 = memory_single(&serving(LLAMA3_8B.model(), 1));
    rows.push((
        "Llama 3 8B KV cache per token (8 KV heads)".into(),
        "2·L·kv·d·2 bytes",
        "128 KiB".into(),
        format!("{} KiB", llama3.kv_cache / 1024),
    ));
    rows
}

fn memory_single(job: &Job) -> parallelism::Memory {
    parallelism::memory(job, &SINGLE)
}

/// ns per `parallelism::plan` call for `job` on `gpus`, and the plan's GPUs and GiB per GPU.
fn time_plan(job: &Job, gpus: &Gpus) -> (f64, String) {
    let found = parallelism::plan(job, gpus);
    let iters = 20_000;
    let start = Instant::now();
    for _ in 0..iters {
        black_box(parallelism::plan(black_box(job), black_box(gpus)).ok());
    }
    let ns = start.elapsed().as_secs_f64() * 1e9 / iters as f64;
    let result = match found {
        Ok(p) => format!(
            "{} GPU(s) of {} GiB: dp{} tp{} pp{} zero{}{}",
            p.layout.gpus(),
            p.memory.gib(),
            p.layout.data,
            p.layout.tensor,
            p.layout.pipeline,
            p.layout.zero,
            if p.layout.recompute { " recompute" } else { "" }
        ),
        Err(e) => format!("does not fit: {e}"),
    };
    (ns, result)
}

pub fn main() -> Result<(), String> {
    println!("## bid plan's memory model beside published figures\n");
    println!("| figure | source | published | planner |");
    println!("|---|---|---|---|");
    for (figure, source, published, planner) in published() {
        println!("| {figure} | {source} | {published} | {planner} |");
    }

    let train = |model: Model| Job {
        work: Work::Train(Optimizer::AdamW),
        ..serving(model, 4096)
    };
    let shapes = [
        (
            "1 × 24 GiB",
            Gpus {
                count: 1,
                memory_gib: 24,
                group: 1,
            },
        ),
        (
            "8 × 24 GiB, PCIe",
            Gpus {
                count: 8,
                memory_gib: 24,
                group: 1,
            },
        ),
        (
            "8 × 80 GiB, NVLink",
            Gpus {
                count: 8,
                memory_gib: 80,
                group: 8,
            },
        ),
        (
            "16 × 141 GiB, 2 NVLink groups",
            Gpus {
                count: 16,
                memory_gib: 141,
                group: 8,
            },
        ),
    ];
    let jobs = [
        (
            "Llama 2 7B serving, 4k tokens",
            serving(LLAMA2_7B.model(), 4096),
        ),
        ("Llama 2 7B AdamW, 4k × 1", train(LLAMA2_7B.model())),
        ("Llama 2 70B AdamW, 4k × 1", train(LLAMA2_70B.model())),
    ];
    println!("\n## Time per plan (one core; `bid plan` makes one per machine and class)\n");
    println!("| job | GPUs | ns per plan | plan |");
    println!("|---|---|---|---|");
    for (job_name, job) in &jobs {
        for (shape_name, gpus) in &shapes {
            let (ns, result) = time_plan(job, gpus);
            println!("| {job_name} | {shape_name} | {ns:.0} | {result} |");
        }
    }
    Ok(())
}
