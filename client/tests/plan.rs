//! `gpu-market bid plan` against a private solana-test-validator with the program deployed: a
//! model's config.json in, the market's machines and reserve prices read from chain, the
//! cheapest plans out; `--place` places the first as a queue bid with the plan's GPUs, memory,
//! class and price; bad input gets one line and moves nothing.

mod common;

use common::*;
use gpu_market::state::{Bid, Market};
use serde_json::{json, Value};
use solana_signer::Signer;

/// meta-llama/Llama-2-7b-hf's config.json, as published.
const LLAMA2_7B: &str = include_str!("fixtures/llama-2-7b-config.json");

#[test]
fn a_plan_from_a_models_config_is_priced_on_the_market_and_placed_as_its_bid() {
    let t = T::start();
    // Class 1 (the 40 GiB GPU) costs half as much again as class 0 (the 80 GiB one).
    let s = MarketSetup::new(
        &t,
        &["--billing-interval-secs", "1", "--capability", "1=5000"],
    );
    let m = s.m();
    let host = register_host(&t, &s);
    let client = t.wallet("client");
    let tokens = s.fund(&t, &client, "100");
    let config = t.path("config.json");
    std::fs::write(&config, LLAMA2_7B).unwrap();
    let config = config.to_str().unwrap();
    let with_config = |extra: &[&'static str]| {
        let mut args = vec!["bid", "plan", "--market", &m, "--model-config", config];
        args.extend_from_slice(extra);
        args
    };
    let plan = |extra: &[&'static str]| t.ok(&client, &with_config(extra));

    // Serving it in bf16 takes one GPU of either class: ~13.5 GB of weights and 2 GB of cache
    // for 4,096 tokens. The 80 GiB GPU at the class-0 reserve price is the cheaper per hour.
    let served = plan(&["--inference"]);
    let rows = served.as_array().unwrap();
    assert_eq!(rows.len(), 2, "{served}");
    let market: Market = t.account(&s.market);
    let now = t.cluster_time();
    let reserve =
        |class| gpu_market_core::amount::format(market.reserve_price(class, now).unwrap(), 6);
    for (row, class) in rows.iter().zip([0, 1]) {
        assert_eq!(row["class"], class, "{served}");
        assert_eq!(row["gpus"], 1);
        assert_eq!(row["layout"], "single GPU");
        assert_eq!(row["weights_gib"], 12.6, "{row}");
        assert_eq!(row["kv_cache_gib"], 2.0, "{row}");
        assert!(
            (17..=19).contains(&row["gib_per_gpu"].as_u64().unwrap()),
            "{row}"
        );
        // The reserve price is above the host's 0.5 floor.
        assert_eq!(row["price_per_gpu_hour"], reserve(class).as_str());
        assert_eq!(
            (row["machines"].as_u64(), row["free_now"].as_u64()),
            (Some(1), Some(1))
        );
    }
    assert_eq!(rows[0]["plan"], 1);

    // Training it with AdamW needs more than one 80 GiB GPU, and the machine has one per class:
    // refused with what a GPU would need, nothing placed.
    let e = t.fails(&client, &with_config(&["--train", "adamw"]));
    assert!(
        e.contains("no active machine of the market holds the job") && e.contains("has 80.0 GiB"),
        "{e}"
    );
    // A model given by its sizes: GPT-2 Large's 774M parameters train on one GPU.
    let small = t.ok(
        &client,
        &[
            "bid",
            "plan",
            "--market",
            &m,
            "--params",
            "774M",
            "--layers",
            "36",
            "--hidden",
            "1280",
            "--heads",
            "20",
            "--vocab",
            "50257",
            "--train",
            "adamw",
            "--seq-len",
            "1024",
        ],
    );
    assert_eq!(small[0]["gpus"], 1, "{small}");
    // 12 bytes of AdamW state per parameter: 9.3 GB.
    assert_eq!(small[0]["optimizer_gib"], 8.7, "{small}");

    // Bad input: one line each, nothing moved, and no file written where the CLI runs.
    let plan_files = || {
        std::fs::read_dir(".")
            .unwrap()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("gpu-market-plan-")
            })
            .count()
    };
    let files_before = plan_files();
    let before = t.balance(&tokens);
    let bad_config = t.path("bad.json");
    std::fs::write(&bad_config, json!({"hidden_size": 4096}).to_string()).unwrap();
    let bad_config = bad_config.to_str().unwrap();
    let sizes = "--params 7B --layers 32 --hidden 4096";
    for (args, says) in [
        (
            format!("--model-config {bad_config} --inference"),
            "no whole-number num_hidden_layers",
        ),
        (
            "--params 7X --layers 32 --hidden 4096 --heads 32 --inference".into(),
            "e.g. 7B",
        ),
        (
            format!("{sizes} --heads 30 --inference"),
            "heads must divide",
        ),
        (
            "--model-config C --train adamw --dtype int4".into(),
            "training needs fp32 or 16-bit",
        ),
        (
            "--model-config C --inference --place -- --gpus 2".into(),
            "--gpus is the plan's",
        ),
        (
            "--model-config C --inference --place -- --duration 1h".into(),
            "--image",
        ),
        (
            "--model-config C --inference --place --choose 3".into(),
            "there is no plan 3",
        ),
    ] {
        let mut argv = vec!["bid", "plan", "--market", &m];
        argv.extend(args.split(' ').map(|a| if a == "C" { config } else { a }));
        let e = t.fails(&client, &argv);
        assert!(e.contains(says), "{argv:?}: {e}");
    }
    assert_eq!(t.balance(&tokens), before);
    assert_eq!(
        plan_files(),
        files_before,
        "a refused --place left its environment file"
    );

    // --place: the first plan, as `bid place` with the plan's GPUs, memory, class and price,
    // and the client's environment with the plan's degrees added for the container.
    let env = t.path("serve.env");
    std::fs::write(&env, "HF_TOKEN=s3cret").unwrap();
    // The test's arguments are `'static`: its folder outlives the test.
    let env_arg: &'static str = Box::leak(env.to_str().unwrap().to_string().into_boxed_str());
    let placed = plan(&[
        "--inference",
        "--place",
        "--",
        "--image",
        "registry.example/serve:v1",
        "--image-digest",
        DIGEST,
        "--overclock",
        "power=300",
        "--duration",
        "1h",
        "--env",
        env_arg,
        "--nonce",
        "9",
    ]);
    let bid: Bid = t.account(&pk(&placed["bid"]));
    let first = &rows[0];
    assert_eq!(bid.gpu_count as u64, first["gpus"].as_u64().unwrap());
    assert_eq!(Value::from(bid.gib_per_gpu), first["gib_per_gpu"]);
    assert_eq!(bid.accepted_classes, 1 << 0);
    assert_eq!(
        shown(bid.price),
        first["price_per_gpu_hour"].as_str().unwrap()
    );
    assert_eq!(bid.client, key_of(&client).pubkey());
    let key = pk(&placed["bid"]);
    let agent = key_of(&host.agent);
    let copy: gpu_market::state::SealedEnv =
        t.account(&gpu_market::pda::sealed_env(&key, &agent.pubkey()).0);
    let opened = gpu_market_sdk::envelope::open_env(&copy.sealed, &agent, &bid.env_hash).unwrap();
    let layout = first["layout"].as_str().unwrap();
    let expected = format!("HF_TOKEN=s3cret\nGPU_MARKET_PLAN={layout}\n");
    let opened = String::from_utf8(opened).unwrap();
    assert!(opened.starts_with(&expected), "{opened}");
    let degree = |name: &str| -> u64 {
        opened
            .lines()
            .find_map(|l| l.strip_prefix(&format!("GPU_MARKET_PLAN_{name}=")))
            .unwrap_or_else(|| panic!("{name} in {opened}"))
            .parse()
            .unwrap()
    };
    assert_eq!(
        degree("DP") * degree("TP") * degree("PP"),
        bid.gpu_count as u64,
        "{opened}"
    );
    // The file sealed is kept beside the client's, for `bid seal` later.
    let kept = std::fs::read_to_string(format!("{}.plan", env.display())).unwrap();
    assert_eq!(kept, opened);
    assert_eq!(
        t.balance(&tokens),
        before - bid.escrow - bid.urgency_premium
    );
}
