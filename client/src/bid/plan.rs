//! `gpu-market bid plan`: how many GPUs of which class a job needs, spread how, at what cost per
//! hour on the market's machines now; `--place` places the chosen plan as a queue bid. The
//! memory model and the choice of layout are `gpu_market_core::parallelism`'s.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, ValueEnum};
use gpu_market::state::{Machine, MachineStatus, Market};
use gpu_market_core::parallelism::{
    self, Architecture, Attention, Gpus, Job, Layout, Model, Optimizer, Plan, Precision, Work, GIB,
};
use serde_json::Value;
use solana_pubkey::Pubkey;

use crate::config::Config;
use crate::output::{clap_sentence, print_list, text, Fields};
use crate::parse;
use crate::quote::reserve;

#[derive(Args)]
pub struct PlanArgs {
    #[arg(long)]
    market: Pubkey,
    /// The model's Hugging Face config.json (Llama, Mistral, Qwen, GPT-2, OPT and their kin).
    #[arg(long, value_name = "FILE", required_unless_present = "params")]
    model_config: Option<PathBuf>,
    /// The parameter count instead, e.g. 7B, 1.5B or 350M, with --layers, --hidden and --heads.
    #[arg(long, conflicts_with = "model_config", requires_all = ["layers", "hidden", "heads"])]
    params: Option<String>,
    #[arg(long, requires = "params")]
    layers: Option<u32>,
    /// The hidden width.
    #[arg(long, requires = "params")]
    hidden: Option<u32>,
    /// Attention heads.
    #[arg(long, requires = "params")]
    heads: Option<u32>,
    /// Key-value heads (grouped-query attention) [default: --heads].
    #[arg(long, requires = "params")]
    kv_heads: Option<u32>,
    #[arg(long, requires = "params", default_value_t = 32_000)]
    vocab: u32,
    /// Train with this optimizer.
    #[arg(long, value_enum, required_unless_present = "inference")]
    train: Option<OptimizerArg>,
    /// Serve the model instead (weights and KV cache).
    #[arg(long, conflicts_with = "train")]
    inference: bool,
    /// The weights' number format (bf16 and fp16 train in mixed precision; int8 and int4
    /// serve only).
    #[arg(long, value_enum, default_value = "bf16")]
    dtype: DtypeArg,
    /// Tokens per sequence (for serving: prompt and output together).
    #[arg(long, default_value_t = 4096)]
    seq_len: u32,
    /// Sequences per micro-batch (training) or served at once (inference).
    #[arg(long, default_value_t = 1)]
    batch: u32,
    /// How attention keeps its scores: flash (PyTorch's scaled-dot-product attention) never
    /// stores them; eager keeps s×s per head.
    #[arg(long, value_enum, default_value = "flash")]
    attention: AttentionArg,
    /// Exactly this many GPUs (more data parallelism: faster, at the same price per GPU-hour)
    /// [default: the fewest that hold the job].
    #[arg(long)]
    gpus: Option<u8>,
    /// How many plans to show, cheapest per hour first.
    #[arg(long, default_value_t = 5)]
    top: usize,
    /// Places plan number --choose as a queue bid; the arguments after `--` are `bid place`'s
    /// (--image, --image-digest, --overclock, --duration, …; --price defaults to the plan's):
    /// the plan sets --gpus, --gib-per-gpu and --class.
    #[arg(long)]
    place: bool,
    #[arg(long, default_value_t = 1, requires = "place")]
    choose: usize,
    #[arg(last = true, requires = "place", value_name = "BID_PLACE_ARGS")]
    place_args: Vec<String>,
}

#[derive(Clone, Copy, ValueEnum)]
enum OptimizerArg {
    Adamw,
    #[value(name = "adamw-8bit")]
    Adamw8bit,
    Sgd,
}

#[derive(Clone, Copy, ValueEnum)]
enum DtypeArg {
    Fp32,
    Bf16,
    Fp16,
    Int8,
    Int4,
}

#[derive(Clone, Copy, ValueEnum)]
enum AttentionArg {
    Flash,
    Eager,
}

/// One plan the market can run: a class, a layout, its memory, and the machines that take it.
struct Offer {
    class: u8,
    plan: Plan,
    /// The lowest price per GPU-hour at which one of `machines` takes it: its floor or the
    /// class's reserve price, whichever is higher.
    price: u64,
    machines: usize,
    /// Of those, machines with the GPUs free now.
    free_now: usize,
}

pub fn plan(config: &Config, a: PlanArgs) -> Result<()> {
    let job = job(&a)?;
    job.check()?;
    let m: Market = config.fetch(&a.market, "market")?;
    let decimals = config.mint_decimals(&m.payment_mint)?;
    let now = config.cluster_time()?;
    let machines: Vec<Machine> = config
        .program_accounts_of::<Machine>(&[(0, a.market)])?
        .into_iter()
        .map(|(_, mach)| mach)
        .filter(|mach| mach.status == MachineStatus::Active)
        .collect();
    let offers = offers(&job, &machines, a.gpus, |class| reserve(&m, class, now))?;
    let rows: Vec<Fields> = offers
        .iter()
        .take(a.top.max(a.choose))
        .enumerate()
        .map(|(i, o)| offer_fields(i + 1, o, decimals))
        .collect();
    if !a.place {
        print_list(config.output, COLUMNS, &rows[..rows.len().min(a.top)]);
        return Ok(());
    }
    let chosen = offers.get(a.choose.saturating_sub(1)).ok_or_else(|| {
        anyhow!(
            "there is no plan {} (the market offers {})",
            a.choose,
            offers.len()
        )
    })?;
    for taken in [
        "--gpus",
        "--gib-per-gpu",
        "--class",
        "--market",
        "--machine",
    ] {
        if a.place_args
            .iter()
            .any(|arg| arg.split('=').next() == Some(taken))
        {
            bail!("{taken} is the plan's: leave it out of the arguments after --");
        }
    }
    let mut argv = vec![
        format!("--market={}", a.market),
        format!("--gpus={}", chosen.plan.layout.gpus()),
        format!("--gib-per-gpu={}", chosen.plan.memory.gib()),
        format!("--class={}", chosen.class),
    ];
    if !a.place_args.iter().any(|arg| arg.starts_with("--price")) {
        argv.push(format!(
            "--price={}",
            gpu_market_core::amount::format(chosen.price, decimals)
        ));
    }
    let (env, text) = plan_env(&a.place_args, &chosen.plan.layout)?;
    argv.extend(without_env(&a.place_args));
    argv.push(format!("--env={}", env.display()));
    let place = super::place_args_from(argv).map_err(|e| {
        anyhow!(
            "bid place's arguments after --: {}",
            clap_sentence(&e).trim_start_matches("error: ")
        )
    })?;
    // Written once the arguments hold: a refused command leaves no file behind.
    std::fs::write(&env, text)
        .with_context(|| format!("cannot write the environment file {}", env.display()))?;
    eprintln!(
        "placing plan {}: {} GPU(s) of class {}, {}; the environment sealed is {} (the plan's \
         degrees added): give it to `bid seal` for machines registered later",
        a.choose,
        chosen.plan.layout.gpus(),
        chosen.class,
        layout_text(&chosen.plan.layout),
        env.display()
    );
    super::place(config, place)
}

/// The columns `bid plan` prints of each offer.
const COLUMNS: &[&str] = &[
    "plan",
    "class",
    "gpus",
    "gib_per_gpu",
    "layout",
    "price_per_gpu_hour",
    "per_hour",
    "machines",
    "free_now",
];

fn offer_fields(number: usize, o: &Offer, decimals: u8) -> Fields {
    let mem = &o.plan.memory;
    let gib = |bytes: u64| Value::from((bytes as f64 / GIB as f64 * 10.0).round() / 10.0);
    let gpus = o.plan.layout.gpus();
    vec![
        ("plan", number.into()),
        ("class", o.class.into()),
        ("gpus", gpus.into()),
        ("gib_per_gpu", mem.gib().into()),
        ("layout", text(layout_text(&o.plan.layout))),
        ("data_parallel", o.plan.layout.data.into()),
        ("tensor_parallel", o.plan.layout.tensor.into()),
        ("pipeline_parallel", o.plan.layout.pipeline.into()),
        ("zero_stage", o.plan.layout.zero.into()),
        ("recompute", o.plan.layout.recompute.into()),
        ("weights_gib", gib(mem.weights)),
        ("gradients_gib", gib(mem.gradients)),
        ("optimizer_gib", gib(mem.optimizer)),
        ("activations_gib", gib(mem.activations)),
        ("kv_cache_gib", gib(mem.kv_cache)),
        ("overhead_gib", gib(mem.overhead)),
        ("price_per_gpu_hour", parse::tokens(o.price, decimals)),
        (
            "per_hour",
            parse::tokens(o.price.saturating_mul(gpus as u64), decimals),
        ),
        ("machines", o.machines.into()),
        ("free_now", o.free_now.into()),
    ]
}

/// `dp4 zero3`, `tp2 pp2 recompute`: the degrees above one, for people.
/// The plan's degrees as the container's environment reads them: `GPU_MARKET_PLAN` (the layout
/// as `bid plan` prints it) and `GPU_MARKET_PLAN_DP`, `_TP`, `_PP`, `_ZERO`, `_RECOMPUTE`.
fn plan_lines(l: &Layout) -> String {
    format!(
        "GPU_MARKET_PLAN={}\nGPU_MARKET_PLAN_DP={}\nGPU_MARKET_PLAN_TP={}\nGPU_MARKET_PLAN_PP={}\n\
         GPU_MARKET_PLAN_ZERO={}\nGPU_MARKET_PLAN_RECOMPUTE={}\n",
        layout_text(l),
        l.data,
        l.tensor,
        l.pipeline,
        l.zero,
        u8::from(l.recompute)
    )
}

/// The `--env` file of `bid place`'s arguments `args`, if any (`--env FILE` or `--env=FILE`).
fn env_arg(args: &[String]) -> Option<PathBuf> {
    args.iter().enumerate().find_map(|(i, a)| match a.as_str() {
        "--env" => args.get(i + 1).map(PathBuf::from),
        _ => a.strip_prefix("--env=").map(PathBuf::from),
    })
}

/// `bid place`'s arguments `args` without their `--env`.
fn without_env(args: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut skip = false;
    for a in args {
        match (skip, a.as_str()) {
            (true, _) => skip = false,
            (false, "--env") => skip = true,
            (false, a) if a.starts_with("--env=") => {}
            (false, _) => out.push(a.clone()),
        }
    }
    out
}

/// The environment the placed bid seals: the client's `--env` file (if any) and the plan's
/// degrees; and where it is to be written: as `FILE.plan` beside the client's, or as
/// `gpu-market-plan-SECS.env` in the current folder without one.
fn plan_env(args: &[String], layout: &Layout) -> Result<(PathBuf, String)> {
    let (mut text, path) = match env_arg(args) {
        Some(file) => {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("cannot read the environment file {}", file.display()))?;
            let mut path = file.into_os_string();
            path.push(".plan");
            (text, PathBuf::from(path))
        }
        None => {
            let secs = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            (
                String::new(),
                PathBuf::from(format!("gpu-market-plan-{secs}.env")),
            )
        }
    };
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&plan_lines(layout));
    Ok((path, text))
}

fn layout_text(l: &Layout) -> String {
    let mut parts = Vec::new();
    for (name, degree) in [("dp", l.data), ("tp", l.tensor), ("pp", l.pipeline)] {
        if degree > 1 {
            parts.push(format!("{name}{degree}"));
        }
    }
    if l.zero > 0 {
        parts.push(format!("zero{}", l.zero));
    }
    if l.recompute {
        parts.push("recompute".into());
    }
    if parts.is_empty() {
        "single GPU".into()
    } else {
        parts.join(" ")
    }
}

/// The job the flags describe.
fn job(a: &PlanArgs) -> Result<Job> {
    let model = match (&a.model_config, &a.params) {
        (Some(path), _) => architecture(&read_json(path)?)
            .with_context(|| format!("reading {}", path.display()))?
            .model(),
        (None, Some(params)) => {
            let heads = a.heads.unwrap_or(0);
            Model {
                params: parse::count(params)?,
                layers: a.layers.unwrap_or(0),
                hidden: a.hidden.unwrap_or(0),
                heads,
                kv_heads: a.kv_heads.unwrap_or(heads),
                vocab: a.vocab,
            }
        }
        (None, None) => bail!("give --model-config FILE or --params N"),
    };
    let precision = match a.dtype {
        DtypeArg::Fp32 => Precision::Fp32,
        DtypeArg::Bf16 | DtypeArg::Fp16 => Precision::Bf16,
        DtypeArg::Int8 => Precision::Int8,
        DtypeArg::Int4 => Precision::Int4,
    };
    let work = match a.train {
        Some(OptimizerArg::Adamw) => Work::Train(Optimizer::AdamW),
        Some(OptimizerArg::Adamw8bit) => Work::Train(Optimizer::AdamW8bit),
        Some(OptimizerArg::Sgd) => Work::Train(Optimizer::Sgd),
        None => Work::Infer,
    };
    Ok(Job {
        model,
        precision,
        seq_len: a.seq_len,
        batch: a.batch,
        attention: match a.attention {
            AttentionArg::Flash => Attention::Flash,
            AttentionArg::Eager => Attention::Eager,
        },
        work,
    })
}

fn read_json(path: &Path) -> Result<Value> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_slice(&bytes).with_context(|| format!("{} is not JSON", path.display()))
}

/// A Hugging Face `config.json`'s transformer shape, under the names the common families give
/// it (Llama's, GPT-2's, OPT's).
pub(crate) fn architecture(config: &Value) -> Result<Architecture> {
    let number = |keys: &[&str]| -> Option<u32> {
        keys.iter()
            .find_map(|k| config.get(*k).and_then(Value::as_u64))
            .and_then(|n| u32::try_from(n).ok())
    };
    let required = |keys: &[&str]| {
        number(keys).ok_or_else(|| anyhow!("it has no whole-number {}", keys.join(" or ")))
    };
    if number(&["num_local_experts", "num_experts", "n_routed_experts"]).is_some() {
        bail!("mixture-of-experts models are not modelled: plan with --params for the experts a token uses");
    }
    let model_type = config
        .get("model_type")
        .and_then(Value::as_str)
        .unwrap_or("");
    let activation = ["hidden_act", "activation_function"]
        .iter()
        .find_map(|k| config.get(*k).and_then(Value::as_str))
        .unwrap_or("");
    let layers = required(&["num_hidden_layers", "n_layer", "num_layers"])?;
    let hidden = required(&["hidden_size", "n_embd", "d_model"])?;
    let heads = required(&["num_attention_heads", "n_head"])?;
    let learned_positions = matches!(model_type, "gpt2" | "opt" | "gpt_bigcode" | "bert");
    Ok(Architecture {
        layers,
        hidden,
        heads,
        kv_heads: number(&["num_key_value_heads"]).unwrap_or(heads),
        intermediate: number(&["intermediate_size", "ffn_dim", "n_inner"])
            .unwrap_or(hidden.saturating_mul(4)),
        vocab: required(&["vocab_size"])?,
        positions: if learned_positions {
            required(&["max_position_embeddings", "n_positions"])?
        } else {
            0
        },
        gated_mlp: matches!(activation, "silu" | "swish" | "swiglu")
            || model_type.starts_with("gemma"),
        biases: matches!(
            model_type,
            "gpt2" | "opt" | "gpt_bigcode" | "bert" | "gpt_neox"
        ),
        // Hugging Face's default when a config does not say.
        tied_embeddings: config
            .get("tie_word_embeddings")
            .and_then(Value::as_bool)
            .unwrap_or(true),
    })
}

/// The GPUs of `class` on `machine`, as a plan sees them.
fn gpus_of(machine: &Machine, class: u8) -> Gpus {
    let of_class: Vec<_> = machine.gpus().iter().filter(|g| g.class == class).collect();
    let mut groups: BTreeMap<u8, u32> = BTreeMap::new();
    for g in &of_class {
        *groups.entry(g.topology_group).or_default() += 1;
    }
    Gpus {
        count: of_class.len() as u32,
        memory_gib: of_class
            .iter()
            .map(|g| g.memory_gib as u32)
            .min()
            .unwrap_or(0),
        group: groups.values().copied().max().unwrap_or(0),
    }
}

/// Whether `machine` has `gpus` GPUs of `class` with `gib` GiB each free now.
fn free_now(machine: &Machine, class: u8, gpus: u32, gib: u64) -> bool {
    let free = machine
        .gpus()
        .iter()
        .zip(machine.used_gib)
        .filter(|(g, used)| g.class == class && g.memory_gib.saturating_sub(*used) as u64 >= gib)
        .count();
    free as u32 >= gpus
}

/// Of two reasons no plan fits, the one of the machine with the largest GPUs.
fn closer(
    known: Option<parallelism::PlanError>,
    new: parallelism::PlanError,
) -> Option<parallelism::PlanError> {
    use parallelism::PlanError::DoesNotFit;
    Some(match (known, new) {
        (Some(DoesNotFit { need, has }), DoesNotFit { has: new_has, .. }) if has > new_has => {
            DoesNotFit { need, has }
        }
        (_, new) => new,
    })
}

/// Every plan the market's active `machines` run, cheapest per hour first (then fewest GPUs):
/// the fewest GPUs of each machine's classes that hold `job` (or exactly `gpus`), machines that
/// run the same plan counted together. `reserve` is a class's reserve price per GPU-hour now.
fn offers(
    job: &Job,
    machines: &[Machine],
    gpus: Option<u8>,
    reserve: impl Fn(u8) -> Result<u64>,
) -> Result<Vec<Offer>> {
    let mut by_plan: BTreeMap<(u8, Layout, u64), Offer> = BTreeMap::new();
    let mut closest: Option<parallelism::PlanError> = None;
    for machine in machines {
        let mut classes: Vec<u8> = machine.gpus().iter().map(|g| g.class).collect();
        classes.sort_unstable();
        classes.dedup();
        for class in classes {
            let shape = gpus_of(machine, class);
            let found = match gpus {
                Some(n) if n as u32 > shape.count => continue,
                Some(n) => parallelism::plan_on(job, &shape, n as u32),
                None => parallelism::plan(job, &shape),
            };
            let plan = match found {
                Ok(plan) => plan,
                Err(e) => {
                    closest = closer(closest, e);
                    continue;
                }
            };
            let price = machine.price_floor_per_gpu_hour.max(reserve(class)?);
            let free = free_now(machine, class, plan.layout.gpus(), plan.memory.gib());
            let offer = by_plan
                .entry((class, plan.layout, plan.memory.gib()))
                .or_insert(Offer {
                    class,
                    plan,
                    price,
                    machines: 0,
                    free_now: 0,
                });
            offer.price = offer.price.min(price);
            offer.machines += 1;
            offer.free_now += free as usize;
        }
    }
    let mut offers: Vec<Offer> = by_plan.into_values().collect();
    if offers.is_empty() {
        return Err(match closest {
            Some(e) => anyhow!("no active machine of the market holds the job: {e}"),
            None => anyhow!("the market has no active machine with that many GPUs of one class"),
        });
    }
    offers.sort_by_key(|o| {
        let gpus = o.plan.layout.gpus();
        (o.price.saturating_mul(gpus as u64), gpus, o.class)
    });
    Ok(offers)
}

#[cfg(test)]
mod tests;
