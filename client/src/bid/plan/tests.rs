use gpu_market::state::{GpuSpec, GpuTable, MachineData, MachineNetwork};
use serde_json::json;

use super::*;

/// meta-llama/Llama-2-7b-hf's config.json, as published.
fn llama2_7b_config() -> Value {
    serde_json::from_str(include_str!(
        "../../../tests/fixtures/llama-2-7b-config.json"
    ))
    .unwrap()
}

#[test]
fn configs_of_the_common_families_give_their_published_parameter_counts() {
    assert_eq!(
        architecture(&llama2_7b_config()).unwrap().params(),
        6_738_415_616
    );
    // openai-community/gpt2-xl's: GPT-2's names, no intermediate size (4h), tied by default.
    let gpt2_xl = json!({
        "activation_function": "gelu_new",
        "model_type": "gpt2",
        "n_ctx": 1024,
        "n_embd": 1600,
        "n_head": 25,
        "n_layer": 48,
        "n_positions": 1024,
        "vocab_size": 50257
    });
    assert_eq!(architecture(&gpt2_xl).unwrap().params(), 1_557_611_200);
    // Qwen/Qwen2.5-7B's: grouped-query attention (4 key-value heads of 28), untied.
    let qwen = json!({
        "hidden_act": "silu",
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "model_type": "qwen2",
        "num_attention_heads": 28,
        "num_hidden_layers": 28,
        "num_key_value_heads": 4,
        "tie_word_embeddings": false,
        "vocab_size": 152064
    });
    // 7.62B on its model page; its q, k and v biases (0.4M) are not counted.
    let qwen_params = architecture(&qwen).unwrap().params();
    assert!(
        (7_610_000_000..7_620_000_000).contains(&qwen_params),
        "{qwen_params}"
    );
}

#[test]
fn a_config_the_planner_cannot_model_is_refused_with_the_reason() {
    let mut moe = llama2_7b_config();
    moe["num_local_experts"] = json!(8);
    let e = architecture(&moe).unwrap_err().to_string();
    assert!(e.contains("mixture-of-experts"), "{e}");
    let mut headless = llama2_7b_config();
    headless
        .as_object_mut()
        .unwrap()
        .remove("num_attention_heads");
    let e = architecture(&headless).unwrap_err().to_string();
    assert!(e.contains("num_attention_heads or n_head"), "{e}");
    let mut text = llama2_7b_config();
    text["hidden_size"] = json!("4096");
    assert!(architecture(&text).is_err());
}

/// An active machine of `count` GPUs of `class` with `gib` each, in topology groups of
/// `group`, whose host asks at least `floor` per GPU-hour; `used` GiB of its first GPU leased.
fn machine(class: u8, count: u8, gib: u16, group: u8, floor: u64, used: u16) -> Machine {
    let mut gpus = GpuTable::default();
    for g in 0..count {
        gpus[g as usize] = GpuSpec {
            class,
            memory_gib: gib,
            topology_group: g / group,
            ..GpuSpec::default()
        };
    }
    let mut data = MachineData {
        gpu_count: count,
        gpus,
        price_floor_per_gpu_hour: floor,
        ..MachineData::default()
    };
    data.used_gib[0] = used;
    Machine {
        data,
        status: MachineStatus::Active,
        network: MachineNetwork::default(),
        fault: None,
    }
}

fn llama_training() -> Job {
    Job {
        model: architecture(&llama2_7b_config()).unwrap().model(),
        precision: Precision::Bf16,
        seq_len: 4096,
        batch: 1,
        attention: Attention::Flash,
        work: Work::Train(Optimizer::AdamW),
    }
}

#[test]
fn offers_are_the_cheapest_per_hour_first_with_the_machines_that_run_them() {
    // Class 0: two 8 × 80 GiB NVLink machines (one asks more); class 1: an 8 × 24 GiB PCIe one.
    let machines = [
        machine(0, 8, 80, 8, 3_000, 0),
        machine(0, 8, 80, 8, 5_000, 80),
        machine(1, 8, 24, 1, 400, 0),
    ];
    let reserve = |class: u8| Ok(if class == 0 { 2_000 } else { 500 });
    let offers = offers(&llama_training(), &machines, None, reserve).unwrap();
    assert_eq!(offers.len(), 2);
    // Two H100-like GPUs at 3,000 an hour each beat the consumer GPUs it takes more of, 500 each.
    let per_hour: Vec<u64> = offers
        .iter()
        .map(|o| o.price * o.plan.layout.gpus() as u64)
        .collect();
    assert!(per_hour.is_sorted(), "{per_hour:?}");
    let big = offers.iter().find(|o| o.class == 0).unwrap();
    assert_eq!(big.plan.layout.gpus(), 2);
    assert_eq!(
        big.price, 3_000,
        "the cheaper machine's floor over the reserve"
    );
    assert_eq!((big.machines, big.free_now), (2, 2));
    let small = offers.iter().find(|o| o.class == 1).unwrap();
    assert_eq!(
        small.price, 500,
        "the reserve over the machine's lower floor"
    );
    assert!(small.plan.memory.gib() <= 24 && small.plan.layout.tensor == 1);

    // Exactly 8 GPUs: more data parallelism, and each GPU needs less.
    let eight = offers_for(&machines, Some(8));
    let big8 = eight.iter().find(|o| o.class == 0).unwrap();
    assert_eq!(big8.plan.layout.gpus(), 8);
    assert!(big8.plan.memory.gib() < big.plan.memory.gib());
    // A GPU leased in part on the second machine: 8 of its GPUs are not all free now.
    assert_eq!((big8.machines, big8.free_now), (2, 1));
}

fn offers_for(machines: &[Machine], gpus: Option<u8>) -> Vec<Offer> {
    offers(&llama_training(), machines, gpus, |_| Ok(1)).unwrap()
}

#[test]
fn a_job_no_machine_holds_says_what_a_gpu_would_need() {
    let machines = [machine(1, 2, 24, 1, 0, 0), machine(0, 1, 80, 1, 0, 0)];
    let e = offers(&llama_training(), &machines, None, |_| Ok(1))
        .err()
        .unwrap()
        .to_string();
    // The 80 GiB machine's reason: its one GPU, not the 24 GiB ones.
    assert!(
        e.contains("no active machine") && e.contains("has 80.0 GiB"),
        "{e}"
    );
    let e = offers(&llama_training(), &machines, Some(4), |_| Ok(1))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("that many GPUs"), "{e}");
}

#[test]
fn layouts_read_as_their_degrees() {
    let l = Layout {
        data: 4,
        tensor: 2,
        pipeline: 1,
        zero: 3,
        recompute: true,
    };
    assert_eq!(layout_text(&l), "dp4 tp2 zero3 recompute");
    let single = Layout {
        data: 1,
        tensor: 1,
        pipeline: 1,
        zero: 0,
        recompute: false,
    };
    assert_eq!(layout_text(&single), "single GPU");
}

#[test]
fn the_plan_takes_the_clients_env_in_either_form_and_adds_its_degrees() {
    let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    for given in [
        args(&["--duration", "1h", "--env", "job.env", "--nonce", "9"]),
        args(&["--duration", "1h", "--env=job.env", "--nonce", "9"]),
    ] {
        assert_eq!(env_arg(&given), Some(PathBuf::from("job.env")));
        assert_eq!(
            without_env(&given),
            args(&["--duration", "1h", "--nonce", "9"])
        );
    }
    assert_eq!(env_arg(&args(&["--duration", "1h"])), None);
    let layout = Layout {
        data: 2,
        tensor: 4,
        pipeline: 1,
        zero: 3,
        recompute: true,
    };
    assert_eq!(
        plan_lines(&layout),
        "GPU_MARKET_PLAN=dp2 tp4 zero3 recompute\nGPU_MARKET_PLAN_DP=2\nGPU_MARKET_PLAN_TP=4\n\
         GPU_MARKET_PLAN_PP=1\nGPU_MARKET_PLAN_ZERO=3\nGPU_MARKET_PLAN_RECOMPUTE=1\n"
    );
}
