use super::reference::{GPT2_XL, LLAMA2_70B, LLAMA2_7B, LLAMA3_8B, OPT_13B};
use super::*;
use proptest::prelude::*;

fn job(model: Model, work: Work) -> Job {
    Job {
        model,
        precision: Precision::Bf16,
        seq_len: 4096,
        batch: 1,
        attention: Attention::Flash,
        work,
    }
}

const ADAMW: Work = Work::Train(Optimizer::AdamW);

fn gpus(count: u32, memory_gib: u32, group: u32) -> Gpus {
    Gpus {
        count,
        memory_gib,
        group,
    }
}

/// `bytes` in decimal GB rounded to one decimal, as the papers print them.
fn gb(bytes: u64) -> f64 {
    (bytes as f64 / 1e8).round() / 10.0
}

#[test]
fn parameter_counts_are_the_published_ones() {
    // The counts Hugging Face's model pages print for these checkpoints.
    assert_eq!(LLAMA2_7B.params(), 6_738_415_616);
    assert_eq!(LLAMA3_8B.params(), 8_030_261_248);
    assert_eq!(LLAMA2_70B.params(), 68_976_648_192);
    assert_eq!(GPT2_XL.params(), 1_557_611_200);
    // OPT-13B's position table has two more rows than its config's 2,048 (an offset of OPT's);
    // Kwon et al. (PagedAttention, Fig. 1): its parameters take 26 GB in 16 bits.
    assert_eq!(gb(OPT_13B.params() * 2), 25.7);
}

#[test]
fn model_states_are_zeros_figure_for_7_5b_parameters_on_64_gpus() {
    // Rajbhandari et al. (ZeRO), Figure 1: Ψ = 7.5B, K = 12, Nd = 64 — 120 GB for the
    // baseline, 31.4 GB with P_os, 16.6 GB with P_os+g, 1.9 GB with P_os+g+p.
    let per_gpu = |zero| {
        model_states(7_500_000_000, Precision::Bf16, Optimizer::AdamW, 64, zero).model_states()
    };
    let published = [120.0, 31.4, 16.6, 1.9];
    for (zero, want) in published.into_iter().enumerate() {
        assert_eq!(gb(per_gpu(zero as u8)), want, "stage {zero}");
    }
    // §3.1: "a GPT-2 model with 1.5B parameters ... requires at least 24 GB" to train with Adam
    // in mixed precision: 16 bytes per parameter.
    let gpt2 = model_states(1_500_000_000, Precision::Bf16, Optimizer::AdamW, 1, 0).model_states();
    assert_eq!(gpt2, 24_000_000_000);
    // Fp32 training keeps no master copy: 4 + 4 + 8 bytes per parameter.
    let fp32 = model_states(1_000, Precision::Fp32, Optimizer::AdamW, 1, 0);
    assert_eq!(
        (fp32.weights, fp32.gradients, fp32.optimizer),
        (4_000, 4_000, 8_000)
    );
}

#[test]
fn the_kv_cache_is_pagedattentions_800_kb_per_token_for_opt_13b() {
    // Kwon et al. §3: "2 (key and value vectors) × 5120 (hidden state size) × 40 (number of
    // layers) × 2 (bytes per FP16)" = 800 KB per token.
    let one_token = Job {
        seq_len: 1,
        ..job(OPT_13B.model(), Work::Infer)
    };
    let single = Layout {
        data: 1,
        tensor: 1,
        pipeline: 1,
        zero: 0,
        recompute: false,
    };
    assert_eq!(memory(&one_token, &single).kv_cache, 800 * 1024);
    // Split four ways by tensor parallelism, each GPU keeps a quarter of the heads.
    let four = Layout {
        tensor: 4,
        ..single
    };
    assert_eq!(memory(&one_token, &four).kv_cache, 200 * 1024);
    // Grouped-query attention keeps only the key-value heads: a quarter of Llama 3 8B's.
    let gqa = Job {
        seq_len: 1,
        ..job(LLAMA3_8B.model(), Work::Infer)
    };
    assert_eq!(memory(&gqa, &single).kv_cache, 2 * 32 * 8 * 128 * 2);
}

#[test]
fn activations_follow_korthikantis_per_layer_formula() {
    // Korthikanti et al. §4, GPT-3 175B's shape (a = 96, h = 12 288, s = 2 048, L = 96), t = 8
    // with sequence parallelism: sbh(34 + 5as/h)/t per layer without recomputation, the
    // 5as/h term gone with FlashAttention, 2sbh/t per layer with full recomputation; the
    // output layer's 4sbv/t once.
    let gpt3 = Model {
        params: 175_000_000_000,
        layers: 96,
        hidden: 12_288,
        heads: 96,
        kv_heads: 96,
        vocab: 51_200,
    };
    let eager = Job {
        seq_len: 2048,
        attention: Attention::Eager,
        ..job(gpt3, ADAMW)
    };
    let flash = Job {
        attention: Attention::Flash,
        ..eager
    };
    let layout = Layout {
        data: 1,
        tensor: 8,
        pipeline: 1,
        zero: 0,
        recompute: false,
    };
    let (s, b, h, a, v, t, l) = (2048u64, 1, 12_288, 96, 51_200, 8, 96);
    let logits = 4 * s * b * v / t;
    let per_layer = s * b * h * (34 + 5 * a * s / h) / t;
    assert_eq!(per_layer, 358_612_992);
    assert_eq!(memory(&eager, &layout).activations, l * per_layer + logits);
    assert_eq!(
        memory(&flash, &layout).activations,
        l * 34 * s * b * h / t + logits
    );
    let recomputed = Layout {
        recompute: true,
        ..layout
    };
    assert_eq!(
        memory(&flash, &recomputed).activations,
        l * 2 * s * b * h / t + logits + 34 * s * b * h / t
    );
    // 1F1B: the first of 8 stages holds 8 micro-batches of its 12 layers, as much as all 96.
    let piped = Layout {
        pipeline: 8,
        ..layout
    };
    assert_eq!(memory(&flash, &piped).activations, l * 34 * s * b * h / t);
}

#[test]
fn a_7b_model_serves_on_one_24_gib_gpu_and_trains_on_two_80_gib_ones() {
    let serve = job(LLAMA2_7B.model(), Work::Infer);
    let plan_24 = plan(&serve, &gpus(8, 24, 8)).unwrap();
    assert_eq!(plan_24.layout.gpus(), 1);
    // 13.5 GB of weights, 2.1 GB of cache for 4,096 tokens.
    assert_eq!(gb(plan_24.memory.weights), 13.5);
    assert_eq!(gb(plan_24.memory.kv_cache), 2.1);
    assert!(plan_24.memory.gib() <= 24);

    // Full fine-tuning with AdamW: 108 GB of model states do not fit one 80 GiB GPU; two
    // with ZeRO-3 (weights, gradients and optimizer state halved) do, without recomputation.
    let train = job(LLAMA2_7B.model(), ADAMW);
    let p = plan(&train, &gpus(8, 80, 8)).unwrap();
    assert_eq!(
        p.layout,
        Layout {
            data: 2,
            tensor: 1,
            pipeline: 1,
            zero: 3,
            recompute: false
        }
    );
    assert!(p.memory.gib() <= 80);
    assert!(plan_on(&train, &gpus(8, 80, 8), 1).is_err());
    // On 24 GiB GPUs without NVLink (groups of one) it takes 8, with ZeRO-3 and recomputation.
    let consumer = plan(&train, &gpus(8, 24, 1)).unwrap();
    assert_eq!(consumer.layout.tensor, 1);
    assert!(consumer.layout.gpus() > 2, "{consumer:?}");
    assert!(consumer.memory.gib() <= 24);
}

#[test]
fn bad_jobs_get_typed_errors() {
    let good = job(LLAMA2_7B.model(), ADAMW);
    let odd_heads = Job {
        model: Model {
            heads: 30,
            ..good.model
        },
        ..good
    };
    assert_eq!(plan(&odd_heads, &gpus(1, 80, 1)), Err(PlanError::BadShape));
    let no_batch = Job { batch: 0, ..good };
    assert_eq!(plan(&no_batch, &gpus(1, 80, 1)), Err(PlanError::BadShape));
    let int8 = Job {
        precision: Precision::Int8,
        ..good
    };
    assert_eq!(
        plan(&int8, &gpus(1, 80, 1)),
        Err(PlanError::QuantizedTraining)
    );
    // Llama 2 70B's training needs more than 16 GPUs of 24 GiB hold.
    let huge = Job {
        model: LLAMA2_70B.model(),
        ..good
    };
    match plan(&huge, &gpus(16, 24, 8)) {
        Err(PlanError::DoesNotFit { need, has }) => {
            assert!(need > has);
            assert_eq!(has, 24 * GIB);
        }
        other => panic!("{other:?}"),
    }
    // Sizes that would overflow saturate and fit nowhere.
    let absurd = Job {
        seq_len: u32::MAX,
        batch: u32::MAX,
        ..good
    };
    assert!(matches!(
        plan(&absurd, &gpus(16, u32::MAX, 16)),
        Err(PlanError::DoesNotFit { .. })
    ));
}

fn any_job() -> impl Strategy<Value = Job> {
    (
        1u32..=96,
        prop::sample::select(vec![8u32, 16, 32, 64]),
        prop::sample::select(vec![64u32, 128]),
        prop::sample::select(vec![1u32, 2, 4, 8]),
        1u64..200_000_000_000,
        prop::sample::select(vec![1u32, 512, 2048, 8192]),
        1u32..=8,
        prop::sample::select(vec![
            ADAMW,
            Work::Train(Optimizer::AdamW8bit),
            Work::Train(Optimizer::Sgd),
            Work::Infer,
        ]),
        any::<bool>(),
    )
        .prop_map(
            |(layers, heads, head_dim, group, params, seq_len, batch, work, eager)| Job {
                model: Model {
                    params,
                    layers,
                    hidden: heads * head_dim,
                    heads,
                    kv_heads: heads / group,
                    vocab: 50_000,
                },
                precision: Precision::Bf16,
                seq_len,
                batch,
                attention: if eager {
                    Attention::Eager
                } else {
                    Attention::Flash
                },
                work,
            },
        )
}

fn any_gpus() -> impl Strategy<Value = Gpus> {
    (
        prop::sample::select(vec![(1u32, 1u32), (2, 2), (4, 2), (8, 8), (8, 4), (16, 8)]),
        prop::sample::select(vec![16u32, 24, 48, 80, 141]),
    )
        .prop_map(|((count, group), memory_gib)| gpus(count, memory_gib, group))
}

proptest! {
    /// The plan fits, keeps tensor parallelism in a group, uses the fewest GPUs any layout
    /// fits on, and no layout of that count that does less extra work fits.
    #[test]
    fn a_plan_fits_on_the_fewest_gpus_with_the_least_extra_work(j in any_job(), g in any_gpus()) {
        let has = g.memory_gib as u64 * GIB;
        match plan(&j, &g) {
            Ok(p) => {
                let n = p.layout.gpus();
                prop_assert!(p.memory.total() <= has && p.memory.gib() <= g.memory_gib as u64);
                prop_assert!(p.layout.tensor <= g.group && n <= g.count);
                prop_assert_eq!(p.memory, memory(&j, &p.layout));
                for fewer in 1..n {
                    for l in layouts(&j, fewer, g.group) {
                        prop_assert!(memory(&j, &l).total() > has, "{:?} fits", l);
                    }
                }
                for l in layouts(&j, n, g.group) {
                    if l.cost_order() < p.layout.cost_order() {
                        prop_assert!(memory(&j, &l).total() > has, "{:?} fits", l);
                    }
                }
            }
            Err(PlanError::DoesNotFit { need, has: h }) => {
                prop_assert_eq!(h, has);
                prop_assert!(need > has);
                for n in 1..=g.count {
                    for l in layouts(&j, n, g.group) {
                        prop_assert!(memory(&j, &l).total() > has);
                    }
                }
            }
            Err(e) => prop_assert!(false, "{}", e),
        }
    }

    /// More of the job never takes less memory; a higher ZeRO stage or more tensor parallelism
    /// never takes more.
    #[test]
    fn memory_grows_with_the_job_and_shrinks_with_partitioning(j in any_job(), more in 1u32..4) {
        for l in layouts(&j, 8, 8) {
            let base = memory(&j, &l).total();
            let bigger = Job { batch: j.batch * more, ..j };
            prop_assert!(memory(&bigger, &l).total() >= base);
            let longer = Job { seq_len: j.seq_len * more, ..j };
            prop_assert!(memory(&longer, &l).total() >= base);
            if l.zero < 3 && l.data > 1 {
                let deeper = Layout { zero: l.zero + 1, ..l };
                prop_assert!(memory(&j, &deeper).total() <= base);
            }
            if l.pipeline == 1 && l.tensor < 8 && j.model.kv_heads.is_multiple_of(l.tensor * 2) && l.data >= 2 {
                let wider = Layout { tensor: l.tensor * 2, data: l.data / 2, zero: 0, ..l };
                let same_zero = Layout { zero: 0, ..l };
                prop_assert!(memory(&j, &wider).total() <= memory(&j, &same_zero).total());
            }
        }
    }
}
