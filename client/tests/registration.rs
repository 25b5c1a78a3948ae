//! `gpu-market host register` at the largest a machine may declare, against a private
//! solana-test-validator: 16 GPUs, a 64-byte public address, four allowed networks and eight
//! cached images (which took 1,980 bytes in one transaction, over the 1,232 a packet holds);
//! `host update` declares other images and finishes a registration whose spot book did not land.

mod common;

use common::*;
use gpu_market::state::{GpuSpec, Machine, MachineNetwork, MachineTerms, HOST_LEN};
use gpu_market_sdk::RegisterMachine;
use solana_signer::Signer;

/// 16 GPUs of class 0 in two NVLink groups of 8, each with every overclock range.
fn sixteen_gpus() -> String {
    (1..=16)
        .map(|i| {
            format!(
                "[[gpu]]\nuuid = \"GPU-00000000-0000-0000-0000-{i:012}\"\nclass = 0\nmemory_gib = 80\n\
                 topology_group = {}\npower_w = [100, 700]\ncore_lock_mhz = [500, 2000]\n\
                 mem_lock_mhz = [500, 2600]\ncore_offset_mhz = [-200, 200]\nmem_offset_mhz = [0, 1500]\n\n",
                (i - 1) / 8
            )
        })
        .collect()
}

fn digest(i: u8) -> String {
    hex::encode([i; 32])
}

#[test]
fn the_largest_machine_registers_and_update_finishes_what_did_not_land() {
    let t = T::start();
    let s = MarketSetup::new(&t, &["--min-host-stake", "5"]);
    let m = s.m();
    let owner = t.wallet("host");
    s.fund(&t, &owner, "100");
    t.ok(&owner, &["stake", "deposit", "10", "--market", &m]);
    let gpus = t.path("gpus.toml");
    std::fs::write(&gpus, sixteen_gpus()).unwrap();
    let host = "h".repeat(HOST_LEN);
    let images: Vec<String> = (1..=8).map(digest).collect();
    let mut args = vec![
        "host",
        "register",
        "--market",
        &m,
        "--gpus",
        gpus.to_str().unwrap(),
        "--public-host",
        &host,
        "--ports-per-lease",
        "4",
        "--scratch-gib",
        "100",
        "--egress",
        "10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,100.64.0.0/10",
    ];
    for image in &images {
        args.extend(["--cached-image", image]);
    }
    let out = t.ok(&owner, &args);
    let machine = pk(&out["machine"]);
    let mach: Machine = t.account(&machine);
    assert_eq!(mach.gpu_count, 16);
    assert_eq!(mach.network.host, host);
    assert_eq!(mach.network.allow.len(), 4);
    let declared: Vec<String> = mach.cached_images[..mach.cached_image_count as usize]
        .iter()
        .map(hex::encode)
        .collect();
    assert_eq!(declared, images);
    assert!(t.exists(&mach.spot_book), "its spot book is open");
    assert_eq!(out["cached_images"].as_array().unwrap().len(), 8);

    // Other images: declared while the GPUs stay as they are; nine are refused, nothing sent.
    let mc = machine.to_string();
    let other = digest(9);
    let out = t.ok(&owner, &["host", "update", &mc, "--cached-image", &other]);
    assert_eq!(out["cached_images"], serde_json::json!([other]));
    let mut nine = vec!["host", "update", mc.as_str()];
    for image in &images {
        nine.extend(["--cached-image", image]);
    }
    nine.extend(["--cached-image", &other]);
    let e = t.fails(&owner, &nine);
    assert!(e.contains("at most 8 cached images"), "{e}");
    let e = t.fails(&owner, &["host", "update", &mc, "--cached-image", &other]);
    assert!(e.contains("nothing to change"), "{e}");

    // A registration whose spot book never landed (its second transaction lost): `host update`
    // opens the book.
    let key = key_of(&owner);
    let register = RegisterMachine {
        owner: &key,
        market: s.market,
        id: 7,
        terms: MachineTerms {
            agent: key.pubkey(),
            region: [0; 16],
            gpus: vec![GpuSpec {
                uuid: [7; 16],
                class: 0,
                memory_gib: 24,
                power_w: [100, 300],
                ..GpuSpec::default()
            }],
            price_floor_per_gpu_hour: 0,
            electricity_cost_per_kwh: 0,
            network: MachineNetwork::default(),
            cpu_milli: 0,
            memory_mib: 0,
        },
    };
    t.send(&key, &[&register]);
    let bare = register.machine();
    assert_eq!(t.account::<Machine>(&bare).spot_book, Default::default());
    let out = t.ok(&owner, &["host", "update", &bare.to_string()]);
    let book = t.account::<Machine>(&bare).spot_book;
    assert!(t.exists(&book), "{out}");
    assert_eq!(out["spot_book"], book.to_string());
}
