//! The `gpu-market` binary against a private solana-test-validator with the program deployed.
//! Each test is one flow over several verbs (a validator costs seconds and a gigabyte): after
//! each verb it checks the JSON output and the accounts and token balances on chain, and for
//! each bad input a non-zero exit, one `error: ...` line, and nothing moved.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use gpu_market::instructions::UsageProofArgs;
use gpu_market::state::{
    book_space, Bid, Lease, Machine, MachineStatus, Market, StakeAccount, BOOK_EMPTY_SPACE,
};
use gpu_market_sdk::budget::{compute_unit_limit, MAX_LOADED_ACCOUNTS_DATA_SIZE};
use gpu_market_sdk::{ReportFault, SetWholeGpus, SubmitUsage};
use serde_json::Value;
use solana_keypair::Keypair;
use solana_pubkey::Pubkey;
use solana_signer::Signer;

#[test]
fn market_and_stake_verbs() {
    let t = T::start();
    // A notice of 31 s: the cooldown (30 s) and one billing interval (1 s). Both are long
    // enough that the refusals checked right after an update or an unstake still come before
    // the cluster's clock reaches the end, on a machine that stalls for a while.
    let s = MarketSetup::new(
        &t,
        &[
            "--unstake-cooldown-secs",
            "30",
            "--protocol-fee-bps",
            "100",
            "--billing-interval-secs",
            "1",
            "--spend-bound",
            "32",
            "--urgency-premium-bps",
            "500",
            "--aging-cap-bps",
            "2000",
        ],
    );
    let m = s.m();
    let stranger = t.wallet("stranger");

    // market show reads back what init wrote.
    let show = t.ok(&s.authority, &["market", "show", &m]);
    assert_eq!(show["protocol_fee_bps"], 100);
    assert_eq!(show["unstake_cooldown_secs"], 30);
    assert_eq!(show["base_price_per_gpu_hour"], "1");
    assert_eq!(pk(&show["treasury"]), s.treasury);
    assert_eq!(show["spend_bound"], "32");
    assert_eq!(show["urgency_premium_bps"], 500);
    assert_eq!(show["aging_cap_bps"], 2000);
    assert_eq!(show["fees_due"], "0");
    assert_eq!(show["slashed_due"], "0");
    assert!(show.get("pending_params").is_none(), "{show}");
    let on_chain: Market = t.account(&s.market);
    assert_eq!(on_chain.params.spend_bound, 32_000_000);

    // Nothing scheduled: `market apply` is refused.
    let e = t.fails(&stranger, &["market", "apply", &m]);
    assert!(e.contains("has no change of rules scheduled"), "{e}");

    // market update schedules only what it is given (amounts in token units); `market show`
    // shows the rules in force and the scheduled ones with when they apply.
    let out = t.ok(
        &s.authority,
        &[
            "market",
            "update",
            &m,
            "--base-price",
            "2.5",
            "--min-host-stake",
            "5",
            "--seasonal",
            "18=12000",
        ],
    );
    let effective_at = out["effective_at"].as_i64().unwrap();
    let on_chain: Market = t.account(&s.market);
    assert_eq!(on_chain.params.base_price_per_gpu_hour, 1_000_000);
    assert_eq!(on_chain.pending_at, effective_at);
    let show = t.ok(&stranger, &["market", "show", &m]);
    assert_eq!(show["base_price_per_gpu_hour"], "1");
    assert_eq!(show["pending_params"]["base_price_per_gpu_hour"], "2.5");
    assert_eq!(show["pending_params"]["min_host_stake"], "5");
    assert_eq!(show["pending_params"]["protocol_fee_bps"], 100);
    assert_eq!(show["pending_at"], effective_at);
    // Before the notice is over: refused, nothing applied.
    let now = t.cluster_time();
    assert!(
        now < effective_at,
        "the notice ended (at {effective_at}) before it could be checked: the cluster's clock reads {now}"
    );
    let e = t.fails(&stranger, &["market", "apply", &m]);
    assert!(e.contains("is not over"), "{e}");
    assert_eq!(t.account::<Market>(&s.market).params, on_chain.params);
    // A second update builds on the scheduled one; after its notice anyone applies both.
    let applied = s.update(&t, &stranger, &["--protocol-fee-bps", "200"]);
    assert_eq!(applied["base_price_per_gpu_hour"], "2.5");
    assert_eq!(applied["protocol_fee_bps"], 200);
    let on_chain: Market = t.account(&s.market);
    assert_eq!(on_chain.params.base_price_per_gpu_hour, 2_500_000);
    assert_eq!(on_chain.params.min_host_stake, 5_000_000);
    assert_eq!(on_chain.params.seasonal_bps[18], 12_000);
    assert_eq!(on_chain.params.protocol_fee_bps, 200);
    assert_eq!(on_chain.pending_at, 0);
    let params = on_chain.params;

    // Bad inputs to market verbs: nothing changes.
    let e = t.fails(
        &stranger,
        &["market", "update", &m, "--protocol-fee-bps", "0"],
    );
    assert!(e.contains("only the market's authority"), "{e}");
    let e = t.fails(
        &s.authority,
        &["market", "update", &m, "--base-price", "1.2.3"],
    );
    assert!(e.contains("bad base price"), "{e}");
    let e = t.fails(
        &s.authority,
        &["market", "update", &m, "--protocol-fee-bps", "2000"],
    );
    assert!(
        e.contains("the protocol fee must be at most 1000 bps"),
        "{e}"
    );
    let e = t.fails(
        &s.authority,
        &["market", "update", &m, "--weights-bps", "5000,5000,5000"],
    );
    assert!(e.contains("score weights must add up to 10000"), "{e}");
    let e = t.fails(
        &t.path("missing.json"),
        &["market", "update", &m, "--protocol-fee-bps", "0"],
    );
    assert!(
        e.contains("keypair file") && e.contains("does not exist"),
        "{e}"
    );
    let unknown = Pubkey::new_unique().to_string();
    let e = t.fails(&s.authority, &["market", "show", &unknown]);
    assert!(
        e.contains(&format!("market {unknown} does not exist")),
        "{e}"
    );
    let e = t.fails(&s.authority, &["market", "show", "not-a-key"]);
    assert!(e.contains("invalid value"), "{e}");
    assert_eq!(t.account::<Market>(&s.market).params, params);

    // stake deposit: opens the account, moves exactly 10.5 tokens.
    let user = t.wallet("user");
    let tokens = s.fund(&t, &user, "50");
    let vault = on_chain.stake_vault;
    let out = t.ok(&user, &["stake", "deposit", "10.5", "--market", &m]);
    assert_eq!(out["amount"], "10.5");
    assert!(out["signature"].is_string());
    assert_eq!(t.balance(&tokens), 39_500_000);
    assert_eq!(t.balance(&vault), 10_500_000);
    let stake_key = pk(&out["stake"]);
    assert_eq!(t.account::<StakeAccount>(&stake_key).amount, 10_500_000);
    // A second deposit reuses the account.
    t.ok(&user, &["stake", "deposit", "0.5", "--market", &m]);
    assert_eq!(t.account::<StakeAccount>(&stake_key).amount, 11_000_000);

    // Bad deposits: insufficient balance, bad amounts, unknown market, bad keypair. Nothing moves.
    let before = (t.balance(&tokens), t.balance(&vault));
    let e = t.fails(&user, &["stake", "deposit", "1000", "--market", &m]);
    assert!(e.contains("insufficient balance"), "{e}");
    for (amount, says) in [
        ("-1", "is not a decimal number"),
        ("0.0000001", "7 decimal places given, the token has 6"),
        ("abc", "is not a decimal number"),
        ("0", "must be greater than zero"),
        ("99999999999999999999", "too large"),
    ] {
        let e = t.fails(&user, &["stake", "deposit", amount, "--market", &m]);
        assert!(e.contains(says), "{amount}: {e}");
    }
    let e = t.fails(&user, &["stake", "deposit", "1", "--market", &unknown]);
    assert!(e.contains("does not exist"), "{e}");
    let e = t.fails(
        &t.path("nope/id.json"),
        &["stake", "deposit", "1", "--market", &m],
    );
    assert!(e.contains("does not exist"), "{e}");
    assert_eq!((t.balance(&tokens), t.balance(&vault)), before);

    // stake show, unstake more than staked (refused), unstake, withdraw before and after the
    // cooldown.
    let show = t.ok(&user, &["stake", "show", "--market", &m]);
    assert_eq!(show["amount"], "11");
    let e = t.fails(&user, &["stake", "unstake", "12", "--market", &m]);
    assert!(
        e.contains("the stake is smaller than the amount asked back"),
        "{e}"
    );
    let out = t.ok(&user, &["stake", "unstake", "4", "--market", &m]);
    assert_eq!(out["amount"], "7");
    assert_eq!(out["pending_unstake"], "4");
    let unlocks_at = out["unlocks_at"].as_i64().unwrap();
    let now = t.cluster_time();
    assert!(
        now < unlocks_at,
        "the cooldown ended (at {unlocks_at}) before it could be checked: the cluster's clock reads {now}"
    );
    let e = t.fails(&user, &["stake", "withdraw", "--market", &m]);
    assert!(e.contains("the unstake cooldown is not over"), "{e}");
    assert_eq!(t.balance(&tokens), 39_000_000);
    let out = t.ok(&user, &["stake", "withdraw", "--market", &m, "--wait"]);
    assert_eq!(out["pending_unstake"], "0");
    assert_eq!(t.balance(&tokens), 43_000_000);
    assert_eq!(t.balance(&vault), 7_000_000);
    let e = t.fails(&user, &["stake", "withdraw", "--market", &m]);
    assert!(e.contains("nothing is waiting to be withdrawn"), "{e}");
    let e = t.fails(&stranger, &["stake", "show", "--market", &m]);
    assert!(e.contains("has no stake in market"), "{e}");
    assert_eq!(t.account::<Market>(&s.market).total_staked, 7_000_000);
    // `market apply` and `market update` leave a market with nothing scheduled as it was.
    assert_eq!(t.account::<Market>(&s.market).params, params);

    // stake close: refused while the stake holds tokens (nothing moves); once all of it is
    // withdrawn, the account closes and its rent goes back to the owner.
    let e = t.fails(&user, &["stake", "close", "--market", &m]);
    assert!(e.contains("the stake is not empty (7 staked"), "{e}");
    assert!(t.exists(&stake_key));
    t.ok(&user, &["stake", "unstake", "7", "--market", &m]);
    let e = t.fails(&user, &["stake", "close", "--market", &m]);
    assert!(e.contains("7 waiting to be withdrawn"), "{e}");
    t.ok(&user, &["stake", "withdraw", "--market", &m, "--wait"]);
    assert_eq!(t.balance(&tokens), 50_000_000);
    let lamports = t.rpc().get_balance(&key_of(&user).pubkey()).unwrap();
    let rent = t.rpc().get_balance(&stake_key).unwrap();
    let out = t.ok(&user, &["stake", "close", "--market", &m]);
    assert_eq!(pk(&out["stake"]), stake_key);
    assert!(!t.exists(&stake_key));
    assert_eq!(
        t.rpc().get_balance(&key_of(&user).pubkey()).unwrap(),
        lamports + rent - 5_000
    );
    let e = t.fails(&user, &["stake", "close", "--market", &m]);
    assert!(e.contains("has no stake in market"), "{e}");
    let e = t.fails(&stranger, &["market", "collect", &m]);
    assert!(
        e.contains("holds no fees, slashed stake or tokens to burn"),
        "{e}"
    );
}

#[test]
fn host_verbs() {
    let t = T::start();
    let s = MarketSetup::new(&t, &["--min-host-stake", "5"]);
    let m = s.m();
    let owner = t.wallet("host");
    let agent_key = Keypair::new();
    let agent = agent_key.pubkey().to_string();
    s.fund(&t, &owner, "100");
    let gpus = t.path("gpus.toml");
    std::fs::write(&gpus, GPUS_TOML).unwrap();
    let g = gpus.to_str().unwrap();
    let register = |kp: &Path| {
        t.run(
            kp,
            &[
                "host",
                "register",
                "--market",
                &m,
                "--gpus",
                g,
                "--agent",
                &agent,
                "--price-floor",
                "0.25",
            ],
        )
    };

    // No stake, then too little stake: refused, nothing created.
    let e = t.fails(&owner, &["host", "register", "--market", &m, "--gpus", g]);
    assert!(
        e.contains("has no stake in market") && e.contains("at least 5"),
        "{e}"
    );
    t.ok(&owner, &["stake", "deposit", "2", "--market", &m]);
    let e = t.fails(&owner, &["host", "register", "--market", &m, "--gpus", g]);
    assert!(
        e.contains("0 bonded by its 0 machines and the market's minimum of 5 for this one"),
        "{e}"
    );
    t.ok(&owner, &["stake", "deposit", "3", "--market", &m]);

    // Bad GPU files and bad keypair: refused before anything is sent.
    let bad = t.path("bad.toml");
    std::fs::write(&bad, GPUS_TOML.replace("[100, 400]", "[400, 100]")).unwrap();
    let e = t.fails(
        &owner,
        &[
            "host",
            "register",
            "--market",
            &m,
            "--gpus",
            bad.to_str().unwrap(),
        ],
    );
    assert!(
        e.contains("GPU 0") && e.contains("minimum above its maximum"),
        "{e}"
    );
    std::fs::write(&bad, GPUS_TOML.replace("class = 1", "klass = 1")).unwrap();
    let e = t.fails(
        &owner,
        &[
            "host",
            "register",
            "--market",
            &m,
            "--gpus",
            bad.to_str().unwrap(),
        ],
    );
    assert!(e.contains("is not valid"), "{e}");
    let e = t.fails(
        &owner,
        &[
            "host",
            "register",
            "--market",
            &m,
            "--gpus",
            "/no/such/gpus.toml",
        ],
    );
    assert!(e.contains("cannot read the GPUs file"), "{e}");
    assert!(!register(&t.path("missing.json")).status.success());
    let e = t.fails(
        &owner,
        &[
            "host",
            "register",
            "--market",
            &Pubkey::new_unique().to_string(),
            "--gpus",
            g,
        ],
    );
    assert!(e.contains("does not exist"), "{e}");
    assert_eq!(t.account::<Market>(&s.market).gpus_offered, 0);

    // register: machine and spot book on chain, GPUs as declared.
    let out = register(&owner);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out: Value = serde_json::from_slice(&out.stdout).unwrap();
    let machine = pk(&out["machine"]);
    let mc = machine.to_string();
    let on_chain: Machine = t.account(&machine);
    assert_eq!(on_chain.gpu_count, 2);
    assert_eq!(on_chain.gpus[0].power_w, [100, 400]);
    assert_eq!(on_chain.gpus[0].core_lock_mhz, [500, 2000]);
    assert_eq!(on_chain.gpus[1].topology_group, 1);
    assert_eq!(on_chain.gpus[1].uuid[15], 2);
    assert_eq!(on_chain.agent.to_string(), agent);
    assert_eq!(on_chain.price_floor_per_gpu_hour, 250_000);
    assert!(t.exists(&on_chain.spot_book));
    assert_eq!(pk(&out["spot_book"]), on_chain.spot_book);
    assert_eq!(out["gpus"][1]["memory_gib"], 40);
    assert_eq!(t.account::<Market>(&s.market).gpus_offered, 2);

    // The machine bonds the 5 staked: none of it can be asked back while it is registered.
    let shown = t.ok(&owner, &["stake", "show", "--market", &m]);
    assert_eq!(
        (shown["machines"].as_u64(), shown["bonded"].as_str()),
        (Some(1), Some("5"))
    );
    let e = t.fails(&owner, &["stake", "unstake", "1", "--market", &m]);
    assert!(
        e.contains("backs your 1 machines") && e.contains("at most 0 can be unstaked"),
        "{e}"
    );

    // A second machine from a JSON GPUs file: it needs 5 more.
    let json_gpus = t.path("gpus.json");
    std::fs::write(
        &json_gpus,
        r#"{"gpu": [{"uuid": "0123456789abcdef0123456789abcdef", "class": 2, "memory_gib": 24, "power_w": [150, 450]}]}"#,
    )
    .unwrap();
    let json = json_gpus.to_str().unwrap();
    let e = t.fails(
        &owner,
        &[
            "host", "register", "--market", &m, "--id", "1", "--gpus", json,
        ],
    );
    assert!(e.contains("below the 10 its machines need"), "{e}");
    t.ok(&owner, &["stake", "deposit", "5", "--market", &m]);
    let second = t.ok(
        &owner,
        &[
            "host",
            "register",
            "--market",
            &m,
            "--id",
            "1",
            "--gpus",
            json_gpus.to_str().unwrap(),
        ],
    );
    assert_eq!(second["gpus"][0]["class"], 2);
    assert_eq!(t.account::<Market>(&s.market).gpus_offered, 3);

    // list, and list by owner.
    let list = t.ok(&owner, &["host", "list", "--market", &m]);
    assert_eq!(list.as_array().unwrap().len(), 2);
    let other = Keypair::new().pubkey().to_string();
    let list = t.ok(&owner, &["host", "list", "--market", &m, "--owner", &other]);
    assert_eq!(list.as_array().unwrap().len(), 0);

    // update: new floor and region (one the market lists), GPUs unchanged.
    let e = t.fails(&owner, &["host", "update", &mc, "--region", "us-east"]);
    assert!(
        e.contains("UnknownRegion") || e.contains("not one the market lists"),
        "{e}"
    );
    let listed = t.ok(&s.authority, &["market", "add-region", &m, "us-east"]);
    assert_eq!(listed["regions"], serde_json::json!(["us-east"]));
    let out = t.ok(
        &owner,
        &[
            "host",
            "update",
            &mc,
            "--price-floor",
            "0.75",
            "--region",
            "us-east",
        ],
    );
    assert_eq!(out["price_floor_per_gpu_hour"], "0.75");
    assert_eq!(out["region"], "us-east");
    let after: Machine = t.account(&machine);
    assert_eq!(after.price_floor_per_gpu_hour, 750_000);
    assert_eq!(after.gpus, on_chain.gpus);
    // update: the CPU and memory the machine gives its leases in all.
    let out = t.ok(
        &owner,
        &[
            "host", "update", &mc, "--cpus", "47.5", "--memory", "256GiB",
        ],
    );
    assert_eq!(out["cpus"], "47.5");
    assert_eq!(out["memory_mib"], 262_144);
    assert_eq!(out["cpus_held"], "0");
    let after: Machine = t.account(&machine);
    assert_eq!((after.cpu_milli, after.memory_mib), (47_500, 262_144));
    let e = t.fails(&owner, &["host", "update", &mc, "--memory", "256"]);
    assert!(e.contains("give a unit, e.g. 512MiB or 32GiB"), "{e}");
    let e = t.fails(&owner, &["host", "update", &mc, "--cpus", "1.0001"]);
    assert!(e.contains("bad CPU count"), "{e}");
    assert_eq!(t.account::<Machine>(&machine).memory_mib, 262_144);
    let e = t.fails(&owner, &["host", "update", &mc]);
    assert!(e.contains("nothing to change"), "{e}");
    let e = t.fails(
        &owner,
        &["host", "update", &mc, "--region", "a-region-name-too-long"],
    );
    assert!(e.contains("longer than 16 bytes"), "{e}");
    let stranger = t.wallet("stranger");
    let e = t.fails(&stranger, &["host", "update", &mc, "--price-floor", "0"]);
    assert!(e.contains("belongs to"), "{e}");
    assert_eq!(
        t.account::<Machine>(&machine).price_floor_per_gpu_hour,
        750_000
    );

    // pause, resume, retire; then nothing more.
    let out = t.ok(&owner, &["host", "pause", &mc]);
    assert_eq!(out["status"], "paused");
    // A paused machine still counts as offered (pausing cannot move the reserve price).
    assert_eq!(t.account::<Market>(&s.market).gpus_offered, 3);
    let e = t.fails(&owner, &["host", "pause", &mc]);
    assert!(e.contains("already paused"), "{e}");
    t.ok(&owner, &["host", "resume", &mc]);
    assert_eq!(t.account::<Machine>(&machine).status, MachineStatus::Active);
    assert_eq!(t.account::<Market>(&s.market).gpus_offered, 3);
    // A fatal GPU fault its agent reports pauses the machine: `host show` and `host list` say
    // why and how to resume it; resuming clears the fault.
    let fault = ReportFault {
        agent: &agent_key,
        machine,
        gpu: 1,
        xid: 79,
    };
    t.send(&key_of(&owner), &[&fault]);
    let out = t.ok(&owner, &["host", "show", &mc]);
    assert_eq!(out["status"], "paused (GPU fault)", "{out}");
    assert_eq!(
        (out["fault"]["gpu"].as_u64(), out["fault"]["xid"].as_u64()),
        (Some(1), Some(79))
    );
    let why = out["paused_because"].as_str().unwrap();
    assert!(
        why.starts_with("paused: GPU 1 reported a fatal fault (Xid 79) at unix time")
            && why.ends_with(&format!(
                "resume it with `gpu-market host resume {mc}` once the GPU is serviced"
            )),
        "{why}"
    );
    let list = t.ok(&owner, &["host", "list", "--market", &m]);
    let listed = list
        .as_array()
        .unwrap()
        .iter()
        .find(|r| pk(&r["machine"]) == machine);
    assert_eq!(listed.unwrap()["status"], "paused (GPU fault)", "{list}");
    let out = t.ok(&owner, &["host", "resume", &mc]);
    assert_eq!(
        (&out["status"], &out["fault"]),
        (&Value::from("active"), &Value::Null)
    );
    assert_eq!(t.account::<Machine>(&machine).fault, None);
    // An agent whose host has no MPS says its GPUs go whole; `host show` says so.
    let out = t.ok(&owner, &["host", "show", &mc]);
    assert!(
        out["gpu_sharing"]
            .as_str()
            .unwrap()
            .starts_with("GiB slices"),
        "{out}"
    );
    let whole = SetWholeGpus {
        agent: &agent_key,
        machine,
        whole: true,
    };
    t.send(&key_of(&owner), &[&whole]);
    let out = t.ok(&owner, &["host", "show", &mc]);
    assert!(
        out["gpu_sharing"]
            .as_str()
            .unwrap()
            .starts_with("whole GPUs only: its agent cannot confine a lease to a GiB slice"),
        "{out}"
    );
    let e = t.fails(&stranger, &["host", "retire", &mc]);
    assert!(e.contains("belongs to"), "{e}");
    // Only a retired machine closes.
    let e = t.fails(&owner, &["host", "close", &mc]);
    assert!(e.contains("is active: retire it"), "{e}");
    assert!(t.exists(&machine));
    t.ok(&owner, &["host", "retire", &mc]);
    assert_eq!(
        t.account::<Machine>(&machine).status,
        MachineStatus::Retired
    );
    let e = t.fails(&owner, &["host", "resume", &mc]);
    assert!(e.contains("the machine is retired"), "{e}");
    let e = t.fails(&owner, &["host", "update", &mc, "--price-floor", "1"]);
    assert!(e.contains("the machine is retired"), "{e}");
    assert_eq!(t.account::<Market>(&s.market).gpus_offered, 1);
    let list = t.ok(&owner, &["host", "list", "--market", &m]);
    let statuses: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert!(statuses.contains(&"retired") && statuses.contains(&"active"));

    // host close: the retired machine and its empty spot book close; their rent goes back to
    // the owner. Nobody else may close it.
    let spot_book = t.account::<Machine>(&machine).spot_book;
    let e = t.fails(&stranger, &["host", "close", &mc]);
    assert!(e.contains("belongs to"), "{e}");
    let rent = t.rpc().get_balance(&machine).unwrap() + t.rpc().get_balance(&spot_book).unwrap();
    let lamports = t.rpc().get_balance(&key_of(&owner).pubkey()).unwrap();
    let out = t.ok(&owner, &["host", "close", &mc]);
    assert_eq!(pk(&out["spot_book"]), spot_book);
    assert!(!t.exists(&machine) && !t.exists(&spot_book));
    assert_eq!(
        t.rpc().get_balance(&key_of(&owner).pubkey()).unwrap(),
        lamports + rent - 5_000
    );
    let e = t.fails(&owner, &["host", "close", &mc]);
    assert!(e.contains("does not exist"), "{e}");
    // Closing it released its bond: 5 of the 10 can be asked back, not more.
    let out = t.ok(&owner, &["stake", "unstake", "5", "--market", &m]);
    assert_eq!(
        (out["machines"].as_u64(), out["amount"].as_str()),
        (Some(1), Some("5"))
    );
    let e = t.fails(&owner, &["stake", "unstake", "1", "--market", &m]);
    assert!(e.contains("backs your 1 machines"), "{e}");
}

#[test]
fn bid_verbs() {
    let t = T::start();
    // A notice of 2 s for its rule changes (1 s cooldown, 1 s interval); a queue bid may wait
    // 300 intervals (the aging cap 3000 at 10 per interval).
    let s = MarketSetup::new(
        &t,
        &[
            "--unstake-cooldown-secs",
            "1",
            "--billing-interval-secs",
            "1",
        ],
    );
    let m = s.m();
    let host = register_host(&t, &s);
    let mc = host.machine.to_string();
    let client = t.wallet("client");
    let tokens = s.fund(&t, &client, "100");
    // A queue bid: 2 tokens escrowed for its run (2 per GPU-hour, 1 GPU, 1 h) and up to 1/6 more
    // for the 300 s it may wait (the most this market lets a bid wait), from when it lands.
    let out = t.ok(
        &client,
        &place_args(
            &m,
            &["--overclock", "power=300", "--price", "2", "--nonce", "1"],
        ),
    );
    let good = pk(&out["bid"]);
    // It asked for the compute units and account data it uses, with the sdk's margin
    // (`sdk::budget::sized`), not the runtime's 200,000 units and 64 MiB: the leader reserves
    // what a transaction asks, of the market's and its queue book's per-block limits.
    let (asked, used) = t.budget_of(out["signature"].as_str().expect("a signature"));
    let units = asked.units.expect("a compute-unit limit") as u64;
    assert!(
        units >= used && units <= compute_unit_limit(used + 300) as u64,
        "asked {units} units for {used}"
    );
    let loaded = asked.loaded_bytes.expect("a loaded-accounts limit");
    assert!(
        loaded < MAX_LOADED_ACCOUNTS_DATA_SIZE / 8,
        "asked {loaded} bytes"
    );
    let b: Bid = t.account(&good);
    let good_escrow = placed_escrow(&b);
    assert_eq!(b.escrow, good_escrow);
    assert!((2_000_000..=2_166_667).contains(&good_escrow), "{out}");
    assert_eq!(out["escrow"], shown(good_escrow).as_str());
    assert_eq!(out["kind"], "queue");
    assert_eq!(t.balance(&tokens), 100_000_000 - good_escrow);
    assert_eq!(b.overclock[0].power_limit_w, 300);
    assert_eq!(
        (b.auto_power, &out["auto_power"]),
        (None, &Value::from("off"))
    );
    // A queue bid under the reserve price (0.5 < 1 per GPU-hour) could never run: no machine
    // of the market is its witness, so it is refused at placement with the fit rule's reason,
    // nothing moved, no bid created.
    let queue_book = t.account::<Market>(&s.market).queue_book;
    let book_len = |key: &Pubkey| {
        gpu_market_sdk::book::read_book(&t.rpc().get_account(key).unwrap().data)
            .unwrap()
            .entries
            .len()
    };
    let vault = t.account::<Market>(&s.market).payment_vault;
    let before = (t.balance(&tokens), t.balance(&vault), book_len(&queue_book));
    let e = t.fails(
        &client,
        &place_args(
            &m,
            &["--overclock", "power=300", "--price", "0.5", "--nonce", "2"],
        ),
    );
    assert!(
        e.contains("could run this bid") && e.contains("price below the market's reserve price"),
        "{e}"
    );
    assert_eq!(
        (t.balance(&tokens), t.balance(&vault), book_len(&queue_book)),
        before
    );
    assert!(!t.exists(&gpu_market::pda::bid(&s.market, &key_of(&client).pubkey(), 2).0));

    // explain, from the one fit rule: the good bid fits the machine, and the simulated
    // allocation of its agent passes. The agent heartbeats (the policy leaves out a machine
    // silent for the market's window, 3 s here, however long the test has run).
    heartbeat(&t, &host);
    let ex = t.ok(&client, &["bid", "explain", &good.to_string()]);
    assert_eq!(ex["machines_fitting"], 1, "{ex}");
    assert_eq!(ex["machines_ready"], 1, "{ex}");
    assert_eq!(ex["rank"], 1);
    assert_eq!(ex["allocation_refused"], serde_json::json!([]), "{ex}");
    // The market's packing policy gives it the one machine: its agent starts it.
    assert_eq!(ex["policy_machine"], mc.as_str(), "{ex}");
    // No lease has run its image yet: the co-location model knows nothing of it.
    assert_eq!(ex["image_sm_utilisation_bps"], Value::Null, "{ex}");
    assert!(
        ex["summary"].as_str().unwrap().starts_with(&format!(
            "it fits 1 of 1 machines now and waits for the agent of machine {mc}"
        )),
        "{ex}"
    );
    // When it may start, and how long it runs: before its latest start, its whole duration.
    let b = t.account::<Bid>(&good);
    assert_eq!(ex["latest_start"], b.latest_start(), "{ex}");
    assert_eq!(b.latest_start(), b.deadline - b.max_duration_secs as i64);
    assert_eq!(
        ex["runs_for_secs_if_started_now"], b.max_duration_secs,
        "{ex}"
    );
    assert!(
        ex["summary"].as_str().unwrap().contains(&format!(
            "started now it runs {} s; it may start until {} (its latest start)",
            b.max_duration_secs,
            b.latest_start()
        )),
        "{ex}"
    );
    assert_eq!(ex["reserve"][0]["reserve_price_per_gpu_hour"], "1");
    assert_eq!(ex["reserve"][0]["bid_beats_it"], true);

    // A copy placed later (ranked below) fits too, but the program would
    // refuse its allocation while the better-ranked bid fits the same GPUs: explain says so
    // rather than "waits for the agent".
    let out = t.ok(
        &client,
        &place_args(
            &m,
            &[
                "--overclock",
                "power=300",
                "--price",
                "2",
                "--deadline",
                "+62m",
                "--nonce",
                "5",
            ],
        ),
    );
    let twin = pk(&out["bid"]);
    let ex = t.ok(&client, &["bid", "explain", &twin.to_string()]);
    assert_eq!(ex["rank"], 2, "{ex}");
    assert_eq!(ex["machines_fitting"], 1, "{ex}");
    assert_eq!(ex["machines_ready"], 0, "{ex}");
    let refusal = "a bid ranked above the chosen one is feasible on this machine";
    assert_eq!(pk(&ex["allocation_refused"][0]["machine"]), host.machine);
    assert_eq!(ex["allocation_refused"][0]["error"], refusal, "{ex}");
    assert!(
        ex["summary"].as_str().unwrap().starts_with(&format!(
            "it fits 1 of 1 machines now, but allocation would be refused: {refusal} on 1; started now it runs"
        )),
        "{ex}"
    );
    // A premium paid now ranks the twin as if paid at placement: first.
    let out = t.ok(
        &client,
        &["bid", "boost", &twin.to_string(), "--premium", "0.1"],
    );
    assert_eq!(
        (out["rank_before"].clone(), out["rank"].clone()),
        (2.into(), 1.into()),
        "{out}"
    );
    assert_eq!(out["premium_paid"], "0.1", "{out}");
    let e = t.fails(
        &client,
        &["bid", "boost", &good.to_string(), "--premium", "0"],
    );
    assert!(e.contains("premium"), "{e}");
    t.ok(&client, &["bid", "cancel", &twin.to_string()]);

    // Bids no machine of the market could run, even idle, are refused at placement with the
    // fit rule's reason (no machine is their witness), and nothing moves: a class the machine
    // does not have, more GPU memory than any GPU has, a price below the host's floor.
    let before = t.balance(&tokens);
    let refused = |extra: &[&str], gib: &str, reason: &str| {
        let mut args = vec![
            "bid",
            "place",
            "--market",
            &m,
            "--image",
            "x",
            "--image-digest",
            DIGEST,
            "--gib-per-gpu",
            gib,
            "--duration",
            "1h",
            "--nonce",
            "6",
        ];
        args.extend_from_slice(extra);
        let e = t.fails(&client, &args);
        assert!(
            e.contains("could run this bid") && e.contains(reason),
            "{reason}: {e}"
        );
    };
    let power = ["--overclock", "power=300"];
    refused(
        &[&power[..], &["--price", "2", "--class", "2"]].concat(),
        "40",
        "too few GPUs of an accepted class",
    );
    refused(
        &[&power[..], &["--price", "3"]].concat(),
        "96",
        "too little memory per GPU",
    );
    s.update(&t, &client, &["--base-price", "0.1"]);
    refused(
        &[&power[..], &["--price", "0.3"]].concat(),
        "40",
        "price below the host's floor",
    );
    assert_eq!(t.balance(&tokens), before, "nothing moved");

    // A bid placed while it could run is explained once it no longer can: placed at 0.6 while
    // the reserve price is 0.1, it is below the reserve once the market's base is back at 1.
    let out = t.ok(
        &client,
        &place_args(
            &m,
            &["--overclock", "power=300", "--price", "0.6", "--nonce", "7"],
        ),
    );
    let under_reserve = pk(&out["bid"]);
    s.update(&t, &client, &["--base-price", "1"]);
    let ex = t.ok(&client, &["bid", "explain", &under_reserve.to_string()]);
    assert_eq!(
        ex["blocked_by"][0]["constraint"], "price below the market's reserve price",
        "{ex}"
    );
    assert_eq!(ex["reserve"][0]["bid_beats_it"], false);
    let under_reserve_escrow = t.account::<Bid>(&under_reserve).escrow;
    // The twin's premium (0.1) is burnt: its cancel refunded only its escrow.
    assert_eq!(
        t.balance(&tokens),
        100_000_000 - good_escrow - under_reserve_escrow - 100_000
    );

    // list: best first, with the score's parts; the stored score is what the parts give.
    let list = t.ok(&client, &["bid", "list", "--market", &m]);
    let rows = list.as_array().unwrap();
    assert_eq!(rows.len(), 2);
    // The book's order: the aged score less the duration handicap.
    let ranks: Vec<i64> = rows
        .iter()
        .map(|r| {
            let parts = &r["score_parts"];
            r["aged_score"].as_i64().unwrap() - parts["duration_handicap"].as_i64().unwrap()
        })
        .collect();
    assert!(ranks.windows(2).all(|w| w[0] >= w[1]), "{ranks:?}");
    let market = t.account::<Market>(&s.market);
    let p = market.params;
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r["rank"], i as u64 + 1);
        assert_eq!(r["score"], r["score_parts"]["score_with_stake_now"], "{r}");
        let b: Bid = t.account(&pk(&r["bid"]));
        assert_eq!(r["score"], b.score);
        // What its duration takes off its rank: three durations of aging, on the market's clock.
        let handicap = gpu_market_core::score::duration_handicap(
            b.max_duration_secs as u64,
            p.aging_per_interval as u64,
            market.clock_secs as u64,
        );
        assert_eq!(r["score_parts"]["duration_handicap"], handicap, "{r}");
    }

    // An urgency premium (0.2: the market's 10 % of the 2-token escrow, at which urgency is
    // full) ranks a bid above an otherwise identical one placed before it without one. The
    // premium leaves the wallet with the escrow, is never refunded and is burnt, not the
    // market's fee.
    let market_before = t.account::<Market>(&s.market);
    let (before, fees, burn) = (
        t.balance(&tokens),
        market_before.fees_due,
        market_before.burn_due,
    );
    let plain = t.ok(
        &client,
        &place_args(
            &m,
            &["--overclock", "power=300", "--price", "2", "--nonce", "8"],
        ),
    );
    assert_eq!(plain["urgency_premium"], "0");
    assert_eq!(plain["paid"], plain["escrow"]);
    let urgent = t.ok(
        &client,
        &place_args(
            &m,
            &[
                "--overclock",
                "power=300",
                "--price",
                "2",
                "--nonce",
                "9",
                "--urgency-premium",
                "0.2",
            ],
        ),
    );
    let escrow_of = |out: &Value| t.account::<Bid>(&pk(&out["bid"])).escrow;
    let (urgent_escrow, plain_escrow) = (escrow_of(&urgent), escrow_of(&plain));
    assert_eq!(urgent["urgency_premium"], "0.2");
    assert_eq!(urgent["paid"], shown(urgent_escrow + 200_000).as_str());
    assert_eq!(
        t.balance(&tokens),
        before - plain_escrow - urgent_escrow - 200_000
    );
    let market_after = t.account::<Market>(&s.market);
    assert_eq!(market_after.burn_due, burn + 200_000);
    assert_eq!(market_after.fees_due, fees);
    assert_eq!(urgent["score_parts"]["urgency_bps"], 10_000, "{urgent}");
    assert_eq!(plain["score_parts"]["urgency_bps"], 0, "{plain}");
    assert_eq!(
        urgent["score_parts"]["complexity_bps"],
        plain["score_parts"]["complexity_bps"]
    );
    assert_eq!(
        urgent["score_parts"]["stake_bps"],
        plain["score_parts"]["stake_bps"]
    );
    let (u, p) = (pk(&urgent["bid"]), pk(&plain["bid"]));
    let list = t.ok(&client, &["bid", "list", "--market", &m]);
    let rank_of = |key: &Pubkey| {
        list.as_array()
            .unwrap()
            .iter()
            .find(|r| pk(&r["bid"]) == *key)
            .unwrap()["rank"]
            .as_u64()
            .unwrap()
    };
    assert!(rank_of(&u) < rank_of(&p), "{list}");
    let ex = t.ok(&client, &["bid", "explain", &u.to_string()]);
    assert!(ex["rank"].as_u64().unwrap() < rank_of(&p), "{ex}");
    for bid in [u, p] {
        t.ok(&client, &["bid", "cancel", &bid.to_string()]);
    }
    assert_eq!(t.balance(&tokens), before - 200_000);

    // A spot bid on the machine (per GPU-day), listed in its spot book with the host's profit.
    let place_spot = |nonce: &str| {
        t.ok(
            &client,
            &place_args(
                &m,
                &[
                    "--machine",
                    &mc,
                    "--overclock",
                    "power=250,core-lock=1500",
                    "--price",
                    "24",
                    "--nonce",
                    nonce,
                    "--auto-power",
                    "5%",
                ],
            ),
        )
    };
    let out = place_spot("4");
    let spot = pk(&out["bid"]);
    assert_eq!(out["kind"], "spot");
    // 24 per GPU-day for its hour's run and up to 300 s of wait.
    let spot_escrow = placed_escrow(&t.account::<Bid>(&spot));
    assert!((1_000_000..=1_083_334).contains(&spot_escrow), "{out}");
    assert_eq!(out["escrow"], shown(spot_escrow).as_str());
    assert_eq!(t.account::<Bid>(&spot).auto_power, Some(500));
    assert_eq!(
        out["auto_power"], "up to 5 % throughput for energy",
        "{out}"
    );
    assert_eq!(out["auto_power_tolerance_bps"], 500, "{out}");
    let list = t.ok(&client, &["bid", "list", "--market", &m, "--machine", &mc]);
    assert_eq!(pk(&list[0]["bid"]), spot);
    // At the stated limits, whatever auto power saves the host; its tolerance beside it.
    assert_eq!(list[0]["profit_per_day"], "24"); // no electricity cost declared
    assert_eq!(list[0]["auto_power"], "5 %", "{list}");
    // The electricity cost cannot change under a waiting spot bid (its place in the book is
    // the host's profit at the cost it saw): refused with the way out, nothing sent.
    let e = t.fails(
        &t.path("host.json"),
        &["host", "update", &mc, "--electricity-cost", "1"],
    );
    assert!(
        e.contains("1 spot bids wait on machine") && e.contains("host pause"),
        "{e}"
    );
    assert_eq!(
        t.account::<Machine>(&host.machine).electricity_cost_per_kwh,
        0
    );
    // Once the spot book is empty it changes; the bid placed again ranks at the new cost. At 1
    // token per kWh: 250 W stated cost 6 a day; auto power may hold the GPU down to the
    // machine's least limit (100 W): 2.4 a day.
    t.ok(&client, &["bid", "cancel", &spot.to_string()]);
    t.ok(
        &t.path("host.json"),
        &["host", "update", &mc, "--electricity-cost", "1"],
    );
    let out = place_spot("10");
    let spot = pk(&out["bid"]);
    let list = t.ok(&client, &["bid", "list", "--market", &m, "--machine", &mc]);
    assert_eq!(list[0]["profit_per_day"], "18", "{list}");
    assert_eq!(list[0]["profit_per_day_auto"], "21.6", "{list}");
    let show = t.ok(&client, &["bid", "show", &spot.to_string()]);
    assert_eq!(show["rank"], 1);
    assert_eq!(show["overclock"][0]["core_lock_mhz"], 1500);

    // Bad bids: overclock outside the machine's range, insufficient balance, bad amounts,
    // missing power limit, unknown market, bad keypair. Nothing moves, no bid is created.
    let balance = t.balance(&tokens);
    let spot_book = t.account::<Machine>(&host.machine).spot_book;
    let books = (book_len(&spot_book), book_len(&queue_book));
    for overclock in ["power=500", "power=250,core-lock=2500"] {
        let e = t.fails(
            &client,
            &place_args(
                &m,
                &[
                    "--machine",
                    &mc,
                    "--overclock",
                    overclock,
                    "--price",
                    "24",
                    "--nonce",
                    "9",
                ],
            ),
        );
        assert!(
            e.contains("no GPU of the machine allows the bid's overclock terms"),
            "{overclock}: {e}"
        );
    }
    let e = t.fails(
        &client,
        &place_args(
            &m,
            &[
                "--overclock",
                "power=300",
                "--price",
                "1000",
                "--nonce",
                "9",
            ],
        ),
    );
    assert!(
        // An hour's run and the 300 s it may wait, at 1000 per GPU-hour.
        e.contains("insufficient balance") && e.contains("needs 1083.333334"),
        "{e}"
    );
    let e = t.fails(
        &client,
        &place_args(
            &m,
            &[
                "--overclock",
                "power=300",
                "--price",
                "1.0000001",
                "--nonce",
                "9",
            ],
        ),
    );
    assert!(e.contains("bad price"), "{e}");
    let e = t.fails(
        &client,
        &place_args(
            &m,
            &[
                "--overclock",
                "core-lock=1500",
                "--price",
                "1",
                "--nonce",
                "9",
            ],
        ),
    );
    assert!(e.contains("the power limit is mandatory"), "{e}");
    let e = t.fails(
        &client,
        &place_args(
            &m,
            &[
                "--overclock",
                "power=300",
                "--price",
                "1",
                "--nonce",
                "9",
                "--auto-power",
                "21%",
            ],
        ),
    );
    assert!(
        e.contains("bad auto power tolerance") && e.contains("at most 20 %"),
        "{e}"
    );
    let e = t.fails(&client, &place_args(&m, &["--price", "1", "--nonce", "9"]));
    assert!(e.contains("--overclock"), "{e}");
    let e = t.fails(
        &client,
        &place_args(
            &m,
            &["--overclock", "power=300", "--price", "2", "--nonce", "1"],
        ),
    );
    assert!(e.contains("already has bid"), "{e}");
    let e = t.fails(
        &client,
        &place_args(
            &m,
            &[
                "--overclock",
                "power=300",
                "--price",
                "2",
                "--deadline",
                "+30m",
                "--nonce",
                "9",
            ],
        ),
    );
    assert!(
        e.contains("the deadline leaves less time than the shortest run the bid accepts"),
        "{e}"
    );
    let unknown = Pubkey::new_unique().to_string();
    let e = t.fails(
        &client,
        &[
            "bid",
            "place",
            "--market",
            &unknown,
            "--image",
            "x",
            "--image-digest",
            DIGEST,
            "--gib-per-gpu",
            "1",
            "--duration",
            "60",
            "--overclock",
            "power=200",
            "--price",
            "1",
        ],
    );
    assert!(
        e.contains(&format!("market {unknown} does not exist")),
        "{e}"
    );
    let missing = t.path("missing.json");
    let e = t.fails(
        &missing,
        &place_args(
            &m,
            &["--overclock", "power=300", "--price", "2", "--nonce", "9"],
        ),
    );
    assert!(e.contains("keypair file"), "{e}");
    assert_eq!(t.balance(&tokens), balance);
    assert_eq!((book_len(&spot_book), book_len(&queue_book)), books);
    let nine = gpu_market::pda::bid(&s.market, &key_of(&client).pubkey(), 9).0;
    assert!(!t.exists(&nine));

    // top-up: more escrow at the same price; refused beyond the balance.
    let out = t.ok(&client, &["bid", "top-up", &good.to_string(), "1.5"]);
    assert_eq!(out["escrow"], shown(good_escrow + 1_500_000).as_str());
    assert_eq!(t.balance(&tokens), balance - 1_500_000);
    let e = t.fails(&client, &["bid", "top-up", &good.to_string(), "500"]);
    assert!(e.contains("insufficient balance"), "{e}");
    let e = t.fails(&client, &["bid", "top-up", &good.to_string(), "-2"]);
    assert!(e.contains("bad top-up"), "{e}");
    let stranger = t.wallet("stranger");
    s.fund(&t, &stranger, "10");
    let e = t.fails(&stranger, &["bid", "top-up", &good.to_string(), "1"]);
    assert!(e.contains("belongs to"), "{e}");
    assert_eq!(t.account::<Bid>(&good).escrow, good_escrow + 1_500_000);

    // cancel: full refund, the bid account closed, out of its book.
    let before = t.balance(&tokens);
    let out = t.ok(&client, &["bid", "cancel", &under_reserve.to_string()]);
    assert_eq!(out["refund"], shown(under_reserve_escrow).as_str());
    assert_eq!(t.balance(&tokens), before + under_reserve_escrow);
    assert!(!t.exists(&under_reserve));
    let e = t.fails(&client, &["bid", "show", &under_reserve.to_string()]);
    assert!(e.contains("does not exist"), "{e}");
    let e = t.fails(&stranger, &["bid", "cancel", &good.to_string()]);
    assert!(e.contains("belongs to"), "{e}");
    t.ok(&client, &["bid", "cancel", &spot.to_string()]);
    assert_eq!(book_len(&spot_book), 0);
    let listed = t.ok(&client, &["bid", "list", "--market", &m]);
    let listed: Vec<Pubkey> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|r| pk(&r["bid"]))
        .collect();
    assert_eq!(listed, vec![good]);

    // An image reference as long as registries allow (255 bytes) fits a new client's first bid
    // (its stake account opened in the same transaction); one byte more is refused, nothing
    // moved.
    let newcomer = t.wallet("newcomer");
    let newcomer_tokens = s.fund(&t, &newcomer, "10");
    let mut long = String::from("europe-west4-docker.pkg.dev/project/repo/");
    while long.len() < 255 - "/train:v3".len() {
        long.push('a');
    }
    long.push_str("/train:v3");
    let too_long = format!("{long}x");
    let place_image = |image| {
        place_image_args(
            &m,
            image,
            "1h",
            &["--overclock", "power=300", "--price", "2"],
        )
    };
    let e = t.fails(&newcomer, &place_image(&too_long));
    assert!(e.contains("longer than 255 bytes"), "{e}");
    assert_eq!(t.balance(&newcomer_tokens), 10_000_000, "nothing moved");
    let out = t.ok(&newcomer, &place_image(&long));
    assert_eq!(out["image"], long);

    // A bid reserving CPU and memory the one machine does not give its leases fits no machine:
    // refused at placement with the nearest machine's reason, and nothing moves.
    let before = t.balance(&tokens);
    let e = t.fails(
        &client,
        &place_args(
            &m,
            &[
                "--overclock",
                "power=300",
                "--price",
                "2",
                "--nonce",
                "30",
                "--cpus",
                "2",
                "--memory",
                "8GiB",
            ],
        ),
    );
    assert!(e.contains("no machine of market"), "{e}");
    assert!(e.contains("fewer CPU cores or less memory"), "{e}");
    assert_eq!(t.balance(&tokens), before, "nothing moved");
    let e = t.fails(
        &client,
        &place_args(&m, &["--price", "2", "--nonce", "31", "--memory", "8"]),
    );
    assert!(e.contains("give a unit"), "{e}");

    // Regions: a bid may name only regions the market lists; one the machine is not in is
    // refused as fitting no machine.
    let e = t.fails(
        &client,
        &place_args(
            &m,
            &[
                "--overclock",
                "power=300",
                "--price",
                "2",
                "--nonce",
                "32",
                "--region",
                "ap-south",
            ],
        ),
    );
    assert!(e.contains("does not list region \"ap-south\""), "{e}");
    t.ok(&s.authority, &["market", "add-region", &m, "ap-south"]);
    let e = t.fails(
        &client,
        &place_args(
            &m,
            &[
                "--overclock",
                "power=300",
                "--price",
                "2",
                "--nonce",
                "32",
                "--region",
                "ap-south",
            ],
        ),
    );
    assert!(
        e.contains("the machine's region is not one the bid accepts"),
        "{e}"
    );
    assert_eq!(t.balance(&tokens), before, "nothing moved");
}

#[test]
fn bid_prune() {
    let t = T::start();
    let s = MarketSetup::new(&t, &[]);
    // A machine the bids could run on: a queue bid names one (its witness).
    register_host(&t, &s);
    let m = s.m();
    let client = t.wallet("client");
    let tokens = s.fund(&t, &client, "100");
    let keeper = t.wallet("keeper");
    let vault = t.account::<Market>(&s.market).payment_vault;
    let queue_book = t.account::<Market>(&s.market).queue_book;
    let book_len = || {
        gpu_market_sdk::book::read_book(&t.rpc().get_account(&queue_book).unwrap().data)
            .unwrap()
            .entries
            .len()
    };

    // Three bids that expire in two minutes (two minutes' run within three, a minute's run
    // accepted: they may start until two minutes from now; at 36 per GPU-hour, 1.2 escrowed
    // each for the run and up to 1.2 more for the two minutes they may wait), and one that
    // waits for an hour. Two minutes leave room for the dozen verbs that must run before the
    // first expires, on a machine that stalls for a while.
    let short = |nonce: &'static str| {
        let out = t.ok(
            &client,
            &[
                "bid",
                "place",
                "--market",
                &m,
                "--image",
                "x",
                "--image-digest",
                DIGEST,
                "--gib-per-gpu",
                "8",
                "--duration",
                "120",
                "--min-duration",
                "60",
                "--deadline",
                "+180s",
                "--overclock",
                "power=200",
                "--price",
                "36",
                "--nonce",
                nonce,
            ],
        );
        let bid = pk(&out["bid"]);
        let b = t.account::<Bid>(&bid);
        // It accepts a minute's run: it may start until a minute before its deadline.
        assert_eq!(b.min_duration_secs, 60);
        assert_eq!(b.latest_start(), b.deadline - 60);
        let escrow = placed_escrow(&b);
        assert_eq!(out["escrow"], shown(escrow).as_str());
        // Two minutes' run and up to two minutes' wait at 36 per GPU-hour.
        assert!((1_200_000..=2_400_000).contains(&escrow), "{out}");
        (bid, escrow)
    };
    let (first, first_escrow) = short("1");
    let (second, second_escrow) = short("2");
    let (third, third_escrow) = short("4");
    let out = t.ok(
        &client,
        &place_args(
            &m,
            &["--overclock", "power=200", "--price", "2", "--nonce", "3"],
        ),
    );
    let lasting = pk(&out["bid"]);
    let lasting_escrow = t.account::<Bid>(&lasting).escrow;
    assert_eq!(
        t.balance(&tokens),
        100_000_000 - first_escrow - second_escrow - third_escrow - lasting_escrow
    );
    // When they expire, as the program keeps them (a second after their latest starts); the
    // first placed expires first.
    let expiry = |bid: &Pubkey| t.account::<Bid>(bid).latest_start() + 1;
    let first_expiry = expiry(&first);
    let last_expiry = expiry(&second).max(expiry(&third));
    let not_expired = || {
        let now = t.cluster_time();
        assert!(
            now < first_expiry,
            "the first bid expired (at {first_expiry}) before its refusals could be checked: the cluster's clock reads {now}"
        );
    };

    // Before its latest start nobody may prune it: refused by the program, nothing moved.
    let before = (t.balance(&tokens), t.balance(&vault), book_len());
    not_expired();
    let e = t.fails(&keeper, &["bid", "prune", &first.to_string()]);
    assert!(e.contains("the bid's latest start has not passed"), "{e}");
    let unknown = Pubkey::new_unique().to_string();
    let e = t.fails(&keeper, &["bid", "prune", &unknown]);
    assert!(e.contains(&format!("bid {unknown} does not exist")), "{e}");
    let e = t.fails(&keeper, &["bid", "prune"]);
    assert!(e.contains("required"), "{e}");
    assert_eq!((t.balance(&tokens), t.balance(&vault), book_len()), before);
    assert!(t.exists(&first));
    not_expired();
    let out = t.ok(&keeper, &["bid", "prune", "--all", "--market", &m]);
    assert_eq!(out, serde_json::json!([])); // nothing has expired yet
    assert_eq!((t.balance(&tokens), t.balance(&vault), book_len()), before);

    // Once its latest start has passed, anyone may: the escrow goes back to the client's token
    // account, the bid account's rent and its slot's in the book to the client, the bid leaves
    // the book.
    let slot = t
        .rpc()
        .get_minimum_balance_for_rent_exemption(book_space(1))
        .unwrap()
        - t.rpc()
            .get_minimum_balance_for_rent_exemption(BOOK_EMPTY_SPACE)
            .unwrap();
    let rent = t.rpc().get_balance(&first).unwrap() + slot;
    let lamports = t.rpc().get_balance(&key_of(&client).pubkey()).unwrap();
    wait_until(&t, first_expiry);
    let out = t.ok(&keeper, &["bid", "prune", &first.to_string()]);
    assert_eq!(pk(&out["bid"]), first);
    assert_eq!(out["refund"], shown(first_escrow).as_str());
    assert_eq!(pk(&out["refund_to"]), tokens);
    assert!(!t.exists(&first));
    assert_eq!(t.balance(&tokens), before.0 + first_escrow);
    assert_eq!(t.balance(&vault), before.1 - first_escrow);
    assert_eq!(book_len(), before.2 - 1);
    assert_eq!(
        t.rpc().get_balance(&key_of(&client).pubkey()).unwrap(),
        lamports + rent
    );

    // explain names the way out for an expired bid (the last placed expires a moment after the
    // first); --all prunes every expired one, and only those, in one transaction here.
    wait_until(&t, last_expiry);
    let ex = t.ok(&client, &["bid", "explain", &third.to_string()]);
    let summary = ex["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("its latest start")
            && summary.contains("has passed, so it will not run")
            && summary.contains(&format!("gpu-market bid prune {third}")),
        "{ex}"
    );
    let out = t.ok(&keeper, &["bid", "prune", "--all", "--market", &m]);
    let rows = out.as_array().unwrap();
    assert_eq!(rows.len(), 2, "{out}");
    let pruned: Vec<Pubkey> = rows.iter().map(|r| pk(&r["bid"])).collect();
    assert!(pruned.contains(&second) && pruned.contains(&third), "{out}");
    for (bid, escrow) in [(second, second_escrow), (third, third_escrow)] {
        let row = rows.iter().find(|r| pk(&r["bid"]) == bid).unwrap();
        assert_eq!(row["refund"], shown(escrow).as_str(), "{out}");
    }
    assert!(rows[0]["signature"].is_string(), "{out}");
    assert_eq!(rows[0]["signature"], rows[1]["signature"], "{out}");
    assert!(!t.exists(&second) && !t.exists(&third) && t.exists(&lasting));
    assert_eq!(
        t.balance(&tokens),
        before.0 + first_escrow + second_escrow + third_escrow
    );
    assert_eq!(t.balance(&vault), lasting_escrow);
    assert_eq!(book_len(), 1);
    let e = t.fails(&keeper, &["bid", "prune", &second.to_string()]);
    assert!(e.contains("does not exist"), "{e}");
}

/// GPU classes by model name (issue 36): the authority names them at `market init` and with
/// `market name-class`; `market show` lists them; `quote` prices only the classes that exist
/// (named or declared by a machine), by name; `bid place --class` takes a name in any case; a
/// class keeps its name, and a name not the market's is refused naming those it has.
#[test]
fn gpu_classes_by_model_name() {
    let t = T::start();
    let s = MarketSetup::new(&t, &["--class-name", "H100", "--class-name", "A100"]);
    let m = s.m();
    let show = t.ok(&s.authority, &["market", "show", &m]);
    assert_eq!(
        show["gpu_classes"],
        serde_json::json!([{"class": 0, "name": "H100"}, {"class": 1, "name": "A100"}])
    );
    let out = t.ok(&s.authority, &["market", "name-class", &m, "3", "RTX 4090"]);
    assert_eq!(out["gpu_classes"][2]["name"], "RTX 4090");
    let on_chain: Market = t.account(&s.market);
    assert_eq!(&on_chain.class_names[3][..8], b"RTX 4090");
    let e = t.fails(&s.authority, &["market", "name-class", &m, "0", "B200"]);
    assert!(e.contains("named H100 already"), "{e}");
    let e = t.fails(&s.authority, &["market", "name-class", &m, "2", "a100"]);
    assert!(
        e.contains("GPU class 1 of market") && e.contains("A100"),
        "{e}"
    );
    let e = t.fails(&s.authority, &["market", "name-class", &m, "2", " L4"]);
    assert!(e.contains("printable ASCII"), "{e}");
    let stranger = t.wallet("stranger");
    let e = t.fails(&stranger, &["market", "name-class", &m, "2", "L4"]);
    assert!(e.contains("only market"), "{e}");

    // quote: the named classes (no machine yet), by name.
    let q = t.ok(&s.authority, &["quote", "--market", &m]);
    let names: Vec<&str> = q
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["H100", "A100", "RTX 4090"]);
    let q = t.ok(
        &s.authority,
        &["quote", "--market", &m, "--class", "rtx 4090"],
    );
    assert_eq!(q[0]["class"], 3);
    let e = t.fails(&s.authority, &["quote", "--market", &m, "--class", "L40S"]);
    assert!(e.contains("H100 (0), A100 (1), RTX 4090 (3)"), "{e}");

    // A GPUs file names classes as the market does, in any case; a name it does not give is
    // refused, naming the file's GPU and the market's names, and changes nothing.
    let host = register_host(&t, &s);
    let machine = host.machine.to_string();
    let by_name = t.path("gpus-by-name.toml");
    std::fs::write(
        &by_name,
        GPUS_TOML
            .replace("class = 0", "class = \"rtx 4090\"")
            .replace("class = 1", "class = \"A100\""),
    )
    .unwrap();
    let host_wallet = t.path("host.json");
    let update = |file: &std::path::Path| {
        vec![
            "host".to_string(),
            "update".into(),
            machine.clone(),
            "--gpus".into(),
            file.to_str().unwrap().into(),
        ]
    };
    let args = update(&by_name);
    t.ok(
        &host_wallet,
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let classes = |t: &T| -> Vec<u8> {
        let mach: gpu_market::state::Machine = t.account(&host.machine);
        mach.gpus[..mach.gpu_count as usize]
            .iter()
            .map(|g| g.class)
            .collect()
    };
    assert_eq!(classes(&t), [3, 1]);
    let unknown = t.path("gpus-unknown.toml");
    std::fs::write(&unknown, GPUS_TOML.replace("class = 1", "class = \"L40S\"")).unwrap();
    let args = update(&unknown);
    let e = t.fails(
        &host_wallet,
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    assert!(
        e.contains("GPU 1 in") && e.contains("H100 (0), A100 (1), RTX 4090 (3)"),
        "{e}"
    );
    assert_eq!(classes(&t), [3, 1], "nothing changed");

    // bid place --class by name; a name the market does not give moves nothing.
    let client = t.wallet("client");
    let tokens = s.fund(&t, &client, "100");
    let before = t.balance(&tokens);
    let power = ["--overclock", "power=300", "--price", "3"];
    let e = t.fails(
        &client,
        &place_args(&m, &[&power[..], &["--class", "L40S"]].concat()),
    );
    assert!(e.contains("names no GPU class \"L40S\""), "{e}");
    assert_eq!(t.balance(&tokens), before, "nothing moved");
    let out = t.ok(
        &client,
        &place_args(&m, &[&power[..], &["--class", "a100"]].concat()),
    );
    let bid: gpu_market::state::Bid = t.account(&pk(&out["bid"]));
    assert_eq!(bid.accepted_classes, 1 << 1);
}

#[test]
fn quote_and_lease_verbs() {
    let t = T::start();
    let s = MarketSetup::new(
        &t,
        &[
            "--billing-interval-secs",
            "1",
            "--seasonal",
            "3=20000",
            "--capability",
            "1=5000",
        ],
    );
    let m = s.m();

    // quote: per class, now and by hour, from the market's own reserve price.
    let q = t.ok(&s.authority, &["quote", "--market", &m]);
    let rows = q.as_array().unwrap();
    assert_eq!(rows.len(), 8);
    assert_eq!(rows[0]["by_hour_utc"][3], "2");
    assert_eq!(rows[0]["by_hour_utc"][4], "1");
    assert_eq!(rows[1]["by_hour_utc"][3], "3");
    assert_eq!(rows[1]["by_hour_utc"][12], "1.5");
    let market: Market = t.account(&s.market);
    let now = t.cluster_time();
    let expect = gpu_market_core::amount::format(market.reserve_price(1, now).unwrap(), 6);
    assert_eq!(rows[1]["now"], expect.as_str());
    let q = t.ok(&s.authority, &["quote", "--market", &m, "--class", "1"]);
    assert_eq!(q.as_array().unwrap().len(), 1);
    let e = t.fails(&s.authority, &["quote", "--market", &m, "--class", "9"]);
    assert!(e.contains("GPU class 9"), "{e}");
    let e = t.fails(
        &s.authority,
        &["quote", "--market", &Pubkey::new_unique().to_string()],
    );
    assert!(e.contains("does not exist"), "{e}");

    // A lease: a queue bid, started by the machine's agent with the sdk's allocate.
    let host = register_host(&t, &s);
    let client = t.wallet("client");
    let tokens = s.fund(&t, &client, "100");
    let out = t.ok(
        &client,
        &[
            "bid",
            "place",
            "--market",
            &m,
            "--image",
            "x",
            "--image-digest",
            DIGEST,
            "--gib-per-gpu",
            "40",
            "--duration",
            "1h",
            "--overclock",
            "power=250",
            "--price",
            "3",
            "--class",
            "0",
            "--auto-power",
        ],
    );
    let bid = pk(&out["bid"]);
    assert_eq!(t.account::<Bid>(&bid).auto_power, Some(500)); // the flag's default
    let list = t.ok(&client, &["bid", "list", "--market", &m]);
    assert_eq!(pk(&list[0]["bid"]), bid); // nothing ranked above it: no evidence to pass
    let agent = key_of(&host.agent);
    let client_key = key_of(&client).pubkey();
    let escrow = placed_escrow(&t.account::<Bid>(&bid));
    let lease = allocate_as_agent(&t, &s, &host, bid, client_key);
    let ex = t.ok(&client, &["bid", "explain", &bid.to_string()]);
    assert_eq!(pk(&ex["lease"]), lease);

    let list = t.ok(&client, &["lease", "list", "--market", &m]);
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(pk(&list[0]["lease"]), lease);
    assert_eq!(list[0]["paid"], "0");
    let other = Keypair::new().pubkey().to_string();
    let none = t.ok(
        &client,
        &["lease", "list", "--market", &m, "--client", &other],
    );
    assert_eq!(none.as_array().unwrap().len(), 0);
    let mine = t.ok(
        &client,
        &[
            "lease",
            "list",
            "--market",
            &m,
            "--client",
            &client_key.to_string(),
        ],
    );
    assert_eq!(mine.as_array().unwrap().len(), 1);

    // One usage proof for interval 0 (when it is over): 1 GPU-second, 900 J, 1 % utilisation.
    let submit = |interval: u32| {
        let proof = SubmitUsage {
            agent: &agent,
            market: s.market,
            machine: host.machine,
            proofs: vec![(
                lease,
                UsageProofArgs {
                    interval,
                    intervals: 1,
                    gpu_seconds: 1,
                    energy_j: 900,
                    avg_utilisation_bps: 100,
                    peak_power_w: vec![240],
                    exit_code: None,
                    samples_hash: [0; 32],
                    energy_saved_j: 300,
                },
            )],
        };
        t.submit_usage(&proof);
    };
    submit(0);
    let show = t.ok(&client, &["lease", "show", &lease.to_string()]);
    // 3 tokens per GPU-hour for one proven second: 833 base units.
    assert_eq!(show["paid"], "0.000833", "{show}");
    assert_eq!(show["energy_j"], 900);
    assert_eq!(show["energy_kwh"], "0", "{show}"); // 0.25 Wh
    assert_eq!(show["energy_saved_j"], 300, "{show}");
    assert_eq!(show["energy_saved_kwh"], "0", "{show}");
    assert_eq!(show["auto_power"], "up to 5 % throughput for energy");
    assert_eq!(show["proofs_next_interval"], 1);
    assert_eq!(show["gpu_time_utilisation_bps"], 10_000);
    assert_eq!(show["idle"], false);
    assert_eq!(show["idle_streak"], 1);
    assert_eq!(show["sm_utilisation_bps"], 100, "{show}");
    let l: Lease = t.account(&lease);
    assert_eq!(show["proof_hash"], hex::encode(l.proof_hash));
    // Its image now has a profile: another bid of it is told what the co-location model
    // knows of it (the mean of the leases running it).
    let neighbour = t.wallet("neighbour");
    s.fund(&t, &neighbour, "10");
    let out = t.ok(
        &neighbour,
        &place_args(
            &m,
            &["--overclock", "power=250", "--price", "3", "--class", "0"],
        ),
    );
    let ex = t.ok(
        &neighbour,
        &["bid", "explain", &pk(&out["bid"]).to_string()],
    );
    assert_eq!(ex["image_sm_utilisation_bps"], 100, "{ex}");
    let l: Lease = t.account(&lease);
    assert_eq!(
        show["escrow_left"],
        gpu_market_core::amount::format(l.escrow, 6).as_str()
    );

    // Nobody else may end it; a bad keypair or an unknown lease ends nothing.
    let stranger = t.wallet("stranger");
    let e = t.fails(&stranger, &["lease", "end", &lease.to_string()]);
    assert!(e.contains("only the lease's client"), "{e}");
    let e = t.fails(
        &t.path("missing.json"),
        &["lease", "end", &lease.to_string()],
    );
    assert!(e.contains("keypair file"), "{e}");
    let e = t.fails(
        &client,
        &["lease", "end", &Pubkey::new_unique().to_string()],
    );
    assert!(e.contains("does not exist"), "{e}");
    assert_eq!(t.account::<Lease>(&lease).stop_at, Lease::NOT_STOPPED);

    // The client ends it: it stops now, and settles once the host proves up to the stop.
    let client_before = t.balance(&tokens);
    std::thread::sleep(Duration::from_millis(1500));
    let out = t.ok(&client, &["lease", "end", &lease.to_string()]);
    if out["status"] == "stopping" {
        let l: Lease = t.account(&lease);
        assert_ne!(l.stop_at, Lease::NOT_STOPPED);
        let last = gpu_market_core::lease::interval_index(l.started_at, 1, l.stop() - 1) as u32;
        submit(last);
        let out = t.ok(&client, &["lease", "end", &lease.to_string()]);
        assert_eq!(out["status"], "settled", "{out}");
    } else {
        assert_eq!(out["status"], "settled", "{out}");
    }
    assert!(!t.exists(&lease) && !t.exists(&bid));
    // The proofs accrued the pay to the machine: anyone claims it, for the host only, and
    // its fee then waits in the market.
    let mach: Machine = t.account(&host.machine);
    assert!(mach.unclaimed_pay > 0 && mach.unclaimed_fee > 0);
    assert_eq!(t.account::<Market>(&s.market).fees_due, 0);
    let host_before = t.balance(&host.tokens);
    let claimed = t.ok(&stranger, &["host", "claim", &host.machine.to_string()]);
    assert_eq!(
        claimed["paid"],
        gpu_market_core::amount::format(mach.unclaimed_pay, 6).as_str(),
        "{claimed}"
    );
    assert_eq!(t.balance(&host.tokens) - host_before, mach.unclaimed_pay);
    let again = t.ok(&stranger, &["host", "claim", &host.machine.to_string()]);
    assert_eq!(again["paid"], "0", "nothing left, nothing sent: {again}");
    // The fee stays with the market until anyone collects it into the treasury.
    let fees = t.account::<Market>(&s.market).fees_due;
    assert_eq!(fees, mach.unclaimed_fee);
    assert_eq!(t.balance(&s.treasury), 0);
    let show = t.ok(&stranger, &["market", "show", &m]);
    assert_eq!(
        show["fees_due"],
        gpu_market_core::amount::format(fees, 6).as_str()
    );
    let vault = t.account::<Market>(&s.market).payment_vault;
    let in_vault = t.balance(&vault);
    let out = t.ok(&stranger, &["market", "collect", &m]);
    assert_eq!(
        out["fees"],
        gpu_market_core::amount::format(fees, 6).as_str()
    );
    assert_eq!(pk(&out["treasury"]), s.treasury);
    assert_eq!(t.balance(&s.treasury), fees);
    assert_eq!(t.balance(&vault), in_vault - fees);
    assert_eq!(t.account::<Market>(&s.market).fees_due, 0);
    // Nothing left: refused, nothing moves.
    let e = t.fails(&stranger, &["market", "collect", &m]);
    assert!(
        e.contains("holds no fees, slashed stake or tokens to burn"),
        "{e}"
    );
    assert_eq!(t.balance(&s.treasury), fees);
    // Everything escrowed is either paid (host + fee) or back with the client.
    let paid = t.balance(&host.tokens) - 90_000_000 + t.balance(&s.treasury);
    assert_eq!(t.balance(&tokens), client_before + escrow - paid);
    assert_eq!(t.balance(&tokens) + paid, 100_000_000);
    // Settled and closed: `lease show` reads the settlement back from the chain's history.
    let show = t.ok(&client, &["lease", "show", &lease.to_string()]);
    assert_eq!(show["status"], "settled", "{show}");
    assert_eq!(
        show["paid"],
        gpu_market_core::amount::format(paid, 6).as_str()
    );
    assert_eq!(
        show["refund"],
        gpu_market_core::amount::format(escrow - paid, 6).as_str()
    );
    assert_eq!(show["refund_in_stake"], false);
    assert_eq!(show["exit_code"], Value::Null);
    assert_eq!(pk(&show["client"]), client_key);
    let e = t.fails(
        &client,
        &["lease", "show", &Pubkey::new_unique().to_string()],
    );
    assert!(e.contains("does not exist"), "{e}");
    assert_eq!(t.account::<Machine>(&host.machine).leases, 0);
}
