//! The job planner behind `gpu-market bid plan`: the memory each GPU needs to train or serve a
//! transformer under each way of spreading it over GPUs, and the way a machine's GPUs should use.
//!
//! A way ([`Layout`]) is data parallel `d` (with a ZeRO stage), tensor parallel `t` inside one
//! topology group (it all-reduces inside every layer, so it needs the group's fast links) and
//! pipeline parallel `p` across groups (only activations cross, once per micro-batch), with or
//! without full activation recomputation; it uses `d·t·p` GPUs.
//!
//! The memory model, per GPU, integer bytes (a figure too large saturates, and then fits nowhere):
//! - **Model states** (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion
//!   Parameter Models", SC 2020, §3.1 and §5.1): mixed-precision Adam keeps Ψ 16-bit weights,
//!   Ψ 16-bit gradients and K·Ψ bytes of optimizer state (K = 12: fp32 weights, momentum and
//!   variance). Tensor and pipeline parallelism split Ψ over `t·p` GPUs; ZeRO stage 1 divides the
//!   optimizer state by `d`, stage 2 the gradients too, stage 3 the weights too.
//! - **Activations** (Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
//!   Models", MLSys 2023, §4): one layer keeps `s·b·h·(34 + 5·a·s/h)` bytes of 16-bit activations
//!   for a micro-batch of `b` sequences of `s` tokens; tensor parallelism with sequence
//!   parallelism divides it by `t`; the `5·a·s/h` term is the attention scores, which
//!   FlashAttention never stores ([`Attention::Flash`]); full recomputation keeps only each
//!   layer's input, `2·s·b·h/t`, and rebuilds one layer's activations at a time in the backward
//!   pass; with the 1F1B pipeline schedule the first stage holds `p` micro-batches of its layers
//!   (L layers' worth whatever `p`); the output layer's cross entropy keeps `4·s·b·v/t` on the
//!   last stage.
//! - **KV cache** for inference (Kwon et al., "Efficient Memory Management for Large Language
//!   Model Serving with PagedAttention", SOSP 2023, §3): each token keeps a key and a value of
//!   the key-value width in every layer, `2 · layers · kv_heads · head_dim · 2` bytes.
//! - **Overhead**: [`CONTEXT_BYTES`] per GPU for the CUDA context, library workspaces and
//!   communication buffers, and [`FRAGMENTATION_BPS`] of the rest for the caching allocator's
//!   fragmentation. These two are round figures, not from a paper: what a real step measures
//!   beyond the model is the place to check them.
//!
//! Off-chain only, like [`crate::colocate`]: the program never calls it.

use crate::math::BPS;

/// Bytes in a GiB.
pub const GIB: u64 = 1 << 30;
/// Each GPU's CUDA context, cuBLAS and NCCL workspaces: memory a job never gets.
pub const CONTEXT_BYTES: u64 = GIB;
/// The caching allocator's fragmentation, in bps of what the job allocates.
pub const FRAGMENTATION_BPS: u64 = 1_000;
/// The most GPUs one plan spreads over (a machine's).
pub const MAX_GPUS: u32 = 16;

/// A transformer's shape as a Hugging Face `config.json` declares it, enough to count its
/// parameters ([`Architecture::params`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Architecture {
    pub layers: u32,
    pub hidden: u32,
    pub heads: u32,
    /// Key-value heads (grouped-query attention); `heads` without it.
    pub kv_heads: u32,
    /// The MLP's inner width.
    pub intermediate: u32,
    pub vocab: u32,
    /// Learned position embeddings (GPT-2, OPT); 0 for rotary ones.
    pub positions: u32,
    /// A gated MLP (Llama's SwiGLU: three matrices) rather than two.
    pub gated_mlp: bool,
    /// Linear layers and layer norms with biases (GPT-2, OPT) rather than without (Llama).
    pub biases: bool,
    /// The output layer shares the input embedding's weights.
    pub tied_embeddings: bool,
}

impl Architecture {
    /// Its parameter count, saturating.
    pub fn params(&self) -> u64 {
        let h = self.hidden as u64;
        let kv_width = (self.kv_heads as u64).saturating_mul(self.head_dim() as u64);
        let f = self.intermediate as u64;
        let bias = |n: u64| if self.biases { n } else { 0 };
        let attention = (2 * h * h + bias(2 * h))
            .saturating_add(2u64.saturating_mul(h).saturating_mul(kv_width))
            .saturating_add(bias(2 * kv_width));
        let mlp_matrices = if self.gated_mlp { 3 } else { 2 };
        let mlp = (mlp_matrices * h)
            .saturating_mul(f)
            .saturating_add(bias(f + h));
        // Two norms per layer, one at the end: a scale, and a shift with biases.
        let norm = h * if self.biases { 2 } else { 1 };
        let layer = attention.saturating_add(mlp).saturating_add(2 * norm);
        let embeddings = (self.vocab as u64)
            .saturating_mul(h)
            .saturating_mul(if self.tied_embeddings { 1 } else { 2 })
            .saturating_add((self.positions as u64).saturating_mul(h));
        layer
            .saturating_mul(self.layers as u64)
            .saturating_add(embeddings)
            .saturating_add(norm)
    }

    fn head_dim(&self) -> u32 {
        self.hidden.checked_div(self.heads).unwrap_or(0)
    }

    /// What the memory model needs of it.
    pub fn model(&self) -> Model {
        Model {
            params: self.params(),
            layers: self.layers,
            hidden: self.hidden,
            heads: self.heads,
            kv_heads: self.kv_heads,
            vocab: self.vocab,
        }
    }
}

/// Published checkpoints' shapes (from each one's Hugging Face `config.json`): the figures
/// the memory model is checked against in its tests and in `gpu-market-bench plan`.
pub mod reference {
    use super::Architecture;

    /// meta-llama/Llama-2-7b-hf.
    pub const LLAMA2_7B: Architecture = Architecture {
        layers: 32,
        hidden: 4096,
        heads: 32,
        kv_heads: 32,
        intermediate: 11_008,
        vocab: 32_000,
        positions: 0,
        gated_mlp: true,
        biases: false,
        tied_embeddings: false,
    };

    /// meta-llama/Llama-2-70b-hf: grouped-query attention, 8 key-value heads of 64.
    pub const LLAMA2_70B: Architecture = Architecture {
        layers: 80,
        hidden: 8192,
        heads: 64,
        kv_heads: 8,
        intermediate: 28_672,
        ..LLAMA2_7B
    };

    /// meta-llama/Meta-Llama-3-8B: grouped-query attention, 8 key-value heads.
    pub const LLAMA3_8B: Architecture = Architecture {
        kv_heads: 8,
        intermediate: 14_336,
        vocab: 128_256,
        ..LLAMA2_7B
    };

    /// openai-community/gpt2-xl.
    pub const GPT2_XL: Architecture = Architecture {
        layers: 48,
        hidden: 1600,
        heads: 25,
        kv_heads: 25,
        intermediate: 6400,
        vocab: 50_257,
        positions: 1024,
        gated_mlp: false,
        biases: true,
        tied_embeddings: true,
    };

    /// facebook/opt-13b.
    pub const OPT_13B: Architecture = Architecture {
        layers: 40,
        hidden: 5120,
        heads: 40,
        kv_heads: 40,
        intermediate: 20_480,
        vocab: 50_272,
        positions: 2048,
        ..GPT2_XL
    };
}

/// What the memory model needs of a transformer: its parameter count and the widths its
/// activations and KV cache scale with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Model {
    pub params: u64,
    pub layers: u32,
    pub hidden: u32,
    pub heads: u32,
    pub kv_heads: u32,
    pub vocab: u32,
}

/// The weights' number format. Training runs in [`Precision::Fp32`] or mixed precision
/// ([`Precision::Bf16`], which stands for fp16 too); the 8- and 4-bit formats serve quantized
/// weights only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    Fp32,
    Bf16,
    Int8,
    Int4,
}

impl Precision {
    fn weight_bits(self) -> u64 {
        match self {
            Precision::Fp32 => 32,
            Precision::Bf16 => 16,
            Precision::Int8 => 8,
            Precision::Int4 => 4,
        }
    }

    /// Bytes of one activation, gradient or cached key: 16-bit unless the job runs in fp32.
    fn value_bytes(self) -> u64 {
        if self == Precision::Fp32 {
            4
        } else {
            2
        }
    }
}

/// A training job's optimizer, by the state it keeps per parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Optimizer {
    /// Adam or AdamW: momentum and variance in fp32.
    AdamW,
    /// 8-bit AdamW (bitsandbytes): momentum and variance in one byte each.
    AdamW8bit,
    /// SGD with momentum in fp32.
    Sgd,
}

impl Optimizer {
    /// Optimizer state bytes per parameter: mixed precision keeps an fp32 copy of the weights
    /// besides (ZeRO's K: 12 for Adam).
    fn state_bytes(self, precision: Precision) -> u64 {
        let moments = match self {
            Optimizer::AdamW => 8,
            Optimizer::AdamW8bit => 2,
            Optimizer::Sgd => 4,
        };
        let master_copy = if precision == Precision::Fp32 { 0 } else { 4 };
        moments + master_copy
    }
}

/// How attention keeps its scores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attention {
    /// FlashAttention (PyTorch's scaled-dot-product attention): scores are never stored.
    Flash,
    /// The `s × s` scores and their softmax and dropout are kept per head.
    Eager,
}

/// Training with an optimizer, or serving.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Work {
    Train(Optimizer),
    Infer,
}

/// A job to place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Job {
    pub model: Model,
    pub precision: Precision,
    /// Tokens per sequence (for inference: prompt and output together).
    pub seq_len: u32,
    /// Sequences per micro-batch (for inference: served at once).
    pub batch: u32,
    pub attention: Attention,
    pub work: Work,
}

/// Why a job cannot be planned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanError {
    /// A size of the model or the job is zero, or the heads do not divide the hidden width or
    /// are not a multiple of the key-value heads.
    BadShape,
    /// Training in 8 or 4 bits: optimizers need 16-bit weights at least.
    QuantizedTraining,
    /// On every layout of every GPU count up to the machine's, a GPU would need `need` bytes;
    /// it has `has`.
    DoesNotFit { need: u64, has: u64 },
}

impl core::fmt::Display for PlanError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            PlanError::BadShape => f.write_str(
                "the model's sizes must be positive, its heads must divide its hidden width and \
                 be a multiple of its key-value heads",
            ),
            PlanError::QuantizedTraining => {
                f.write_str("training needs fp32 or 16-bit weights, not 8- or 4-bit ones")
            }
            PlanError::DoesNotFit { need, has } => write!(
                f,
                "each GPU would need {:.1} GiB at the least, and has {:.1} GiB",
                *need as f64 / GIB as f64,
                *has as f64 / GIB as f64
            ),
        }
    }
}

impl std::error::Error for PlanError {}

impl Job {
    /// The job's sizes are usable: positive, heads dividing the hidden width into whole heads
    /// shared by whole key-value groups, and weights a training optimizer can update.
    pub fn check(&self) -> Result<(), PlanError> {
        let m = &self.model;
        let sizes = [
            m.layers,
            m.hidden,
            m.heads,
            m.kv_heads,
            m.vocab,
            self.seq_len,
        ];
        if sizes.contains(&0)
            || self.batch == 0
            || m.params == 0
            || !m.hidden.is_multiple_of(m.heads)
            || !m.heads.is_multiple_of(m.kv_heads)
        {
            return Err(PlanError::BadShape);
        }
        if matches!(self.work, Work::Train(_))
            && matches!(self.precision, Precision::Int8 | Precision::Int4)
        {
            return Err(PlanError::QuantizedTraining);
        }
        Ok(())
    }
}

/// One way to spread a job over `data · tensor · pipeline` GPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Layout {
    pub data: u32,
    pub tensor: u32,
    pub pipeline: u32,
    /// ZeRO stage over the data-parallel ranks (0: none; 0 when `data` is 1 or for inference).
    pub zero: u8,
    /// Full activation recomputation (training only).
    pub recompute: bool,
}

impl Layout {
    pub fn gpus(&self) -> u32 {
        self.data * self.tensor * self.pipeline
    }

    /// The order layouts of one GPU count are preferred in, the first best: least extra work
    /// first. Recomputation costs a third more compute (one more forward pass of three);
    /// a pipeline idles `(p−1)/m` of each step; tensor parallelism all-reduces inside every
    /// layer; a ZeRO stage only partitions what data parallelism replicates (stage 3 gathers
    /// the weights once more per step, still overlapped with compute).
    fn cost_order(&self) -> (bool, u32, u32, u8) {
        (self.recompute, self.pipeline, self.tensor, self.zero)
    }
}

/// Per-GPU memory, in bytes, on the busiest GPU of a layout.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Memory {
    pub weights: u64,
    pub gradients: u64,
    pub optimizer: u64,
    pub activations: u64,
    pub kv_cache: u64,
    pub overhead: u64,
}

impl Memory {
    pub fn total(&self) -> u64 {
        [
            self.weights,
            self.gradients,
            self.optimizer,
            self.activations,
            self.kv_cache,
            self.overhead,
        ]
        .into_iter()
        .fold(0, u64::saturating_add)
    }

    /// Model states: weights, gradients and optimizer state.
    pub fn model_states(&self) -> u64 {
        self.weights
            .saturating_add(self.gradients)
            .saturating_add(self.optimizer)
    }

    /// Whole GiB a bid asks of each GPU for it.
    pub fn gib(&self) -> u64 {
        self.total().div_ceil(GIB)
    }
}

/// `a · b · …`, saturating.
fn product(factors: &[u64]) -> u64 {
    factors.iter().fold(1, |acc, &f| acc.saturating_mul(f))
}

/// Per-GPU model states for `params` parameters (weights, gradients, optimizer state), a ZeRO
/// stage partitioning them over `data` ranks: ZeRO §3.1's `(2 + 2 + K)·Ψ` and its stages.
pub fn model_states(
    params: u64,
    precision: Precision,
    optimizer: Optimizer,
    data: u32,
    zero: u8,
) -> Memory {
    let split = |bytes: u64, from_stage: u8| {
        if zero >= from_stage {
            bytes.div_ceil(data as u64)
        } else {
            bytes
        }
    };
    let value = precision.value_bytes();
    Memory {
        weights: split(params.saturating_mul(value), 3),
        gradients: split(params.saturating_mul(value), 2),
        optimizer: split(params.saturating_mul(optimizer.state_bytes(precision)), 1),
        ..Memory::default()
    }
}

/// The per-GPU memory of `job` spread as `layout` says.
pub fn memory(job: &Job, layout: &Layout) -> Memory {
    let m = &job.model;
    let (t, p) = (layout.tensor as u64, layout.pipeline as u64);
    let (s, b, h, v) = (
        job.seq_len as u64,
        job.batch as u64,
        m.hidden as u64,
        m.vocab as u64,
    );
    let params = m.params.div_ceil(t * p);
    let stage_layers = (m.layers as u64).div_ceil(p);
    // Korthikanti et al. §4, in 16-bit values (twice as much in fp32).
    let scale = job.precision.value_bytes() / 2;
    let scores = match job.attention {
        Attention::Flash => 0,
        Attention::Eager => product(&[5, m.heads as u64, s, s, b]),
    };
    let layer_full = product(&[34, s, b, h]).saturating_add(scores) / t * scale;
    let mut used = match job.work {
        Work::Train(optimizer) => {
            let layer_kept = if layout.recompute {
                product(&[2, s, b, h]) / t * scale
            } else {
                layer_full
            };
            // Recomputation rebuilds one layer's activations at a time.
            let working = if layout.recompute { layer_full } else { 0 };
            let first_stage = product(&[p, stage_layers, layer_kept]);
            let last_stage =
                product(&[stage_layers, layer_kept]).saturating_add(product(&[4, s, b, v]) / t);
            Memory {
                activations: first_stage.max(last_stage).saturating_add(working),
                ..model_states(params, job.precision, optimizer, layout.data, layout.zero)
            }
        }
        Work::Infer => {
            let head_dim = (m.hidden / m.heads) as u64;
            // Key-value heads split over the tensor-parallel ranks; a rank holds at least one.
            let kv_heads = (m.kv_heads as u64).div_ceil(t);
            Memory {
                weights: product(&[params, job.precision.weight_bits()]).div_ceil(8),
                kv_cache: product(&[
                    2,
                    stage_layers,
                    kv_heads,
                    head_dim,
                    s,
                    b,
                    job.precision.value_bytes(),
                ]),
                // The prompt's pass through one layer, and the next token's logits in fp32.
                activations: layer_full.saturating_add(product(&[4, b, v]) / t),
                ..Memory::default()
            }
        }
    };
    let allocated = used.total();
    used.overhead = CONTEXT_BYTES.saturating_add(allocated / BPS * FRAGMENTATION_BPS);
    used
}

/// GPUs of one class on one machine, as a plan sees them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gpus {
    pub count: u32,
    pub memory_gib: u32,
    /// GPUs in its largest topology group: the widest tensor parallelism it runs well.
    pub group: u32,
}

/// A layout that fits, and its memory per GPU ([`Memory::gib`]: what a bid asks of each GPU).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    pub layout: Layout,
    pub memory: Memory,
}

/// Every layout of `job` on exactly `count` GPUs whose tensor parallelism stays inside a
/// topology group of `group` GPUs: powers of two for `t` that divide the key-value heads (so no
/// rank holds part of a head), any `p` up to the layers, ZeRO stages only where there is data
/// parallelism to partition over, recomputation only for training.
pub fn layouts(job: &Job, count: u32, group: u32) -> Vec<Layout> {
    let m = &job.model;
    let training = matches!(job.work, Work::Train(_));
    let mut all = Vec::new();
    let tensors = (0..5)
        .map(|k| 1u32 << k)
        .filter(|t| *t <= group.min(count) && m.kv_heads.is_multiple_of(*t));
    for t in tensors {
        for p in (1..=count / t).filter(|p| (count / t).is_multiple_of(*p) && *p <= m.layers) {
            let data = count / t / p;
            if t * p * data != count {
                continue;
            }
            let stages: &[u8] = if training && data > 1 {
                &[0, 1, 2, 3]
            } else {
                &[0]
            };
            for &zero in stages {
                for recompute in [false, true] {
                    if recompute && !training {
                        continue;
                    }
                    all.push(Layout {
                        data,
                        tensor: t,
                        pipeline: p,
                        zero,
                        recompute,
                    });
                }
            }
        }
    }
    all
}

/// The layout of least extra work ([`Layout::cost_order`]) among those on exactly `count` of
/// `gpus` that fit their memory, or what the least demanding of them needs per GPU.
pub fn plan_on(job: &Job, gpus: &Gpus, count: u32) -> Result<Plan, PlanError> {
    let has = gpus.memory_gib as u64 * GIB;
    let mut need = u64::MAX;
    let mut best: Option<Plan> = None;
    for layout in layouts(job, count, gpus.group) {
        let memory = memory(job, &layout);
        need = need.min(memory.total());
        let better = best.is_none_or(|b| layout.cost_order() < b.layout.cost_order());
        if memory.total() <= has && better {
            best = Some(Plan { layout, memory });
        }
    }
    best.ok_or(PlanError::DoesNotFit { need, has })
}

/// The plan on the fewest of `gpus` that hold the job, or what a GPU would need on all of them.
pub fn plan(job: &Job, gpus: &Gpus) -> Result<Plan, PlanError> {
    job.check()?;
    let mut last = PlanError::DoesNotFit {
        need: u64::MAX,
        has: gpus.memory_gib as u64 * GIB,
    };
    for count in 1..=gpus.count.min(MAX_GPUS) {
        match plan_on(job, gpus, count) {
            Ok(plan) => return Ok(plan),
            Err(e) => last = e,
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests;
