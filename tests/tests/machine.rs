//! Host machines: register, update, pause/resume/retire, heartbeat, on the SBF build in LiteSVM.

use gpu_market_tests::program_test;

use anchor_lang::error::{ErrorCode as AnchorErrorCode, ERROR_CODE_OFFSET};
use gpu_market::errors::MarketError;
use gpu_market::state::MarketParams;
use gpu_market::state::{
    Cidr, Egress, GpuSpec, Machine, MachineFault, MachineNetwork, MachineStatus, MachineTerms,
};
use gpu_market_sdk::budget;
use gpu_market_sdk::instructions::TRANSACTION_SIZE_LIMIT;
use program_test::*;
use solana_keypair::Keypair;
use solana_pubkey::Pubkey;
use solana_signer::Signer;

fn code(e: MarketError) -> Option<u32> {
    Some(ERROR_CODE_OFFSET + e as u32)
}

/// An RTX 4090-like GPU: 24 GiB, 150..450 W, locks and offsets allowed.
fn gpu(class: u8, group: u8) -> GpuSpec {
    GpuSpec {
        uuid: [0; 16],
        class,
        topology_group: group,
        memory_gib: 24,
        power_w: [150, 450],
        core_lock_mhz: [210, 2_520],
        mem_lock_mhz: [405, 10_501],
        core_offset_mhz: [-200, 200],
        mem_offset_mhz: [0, 1_500],
    }
}

/// Terms with `gpus`, each given its own UUID.
fn terms(agent: Pubkey, mut gpus: Vec<GpuSpec>) -> MachineTerms {
    for (i, g) in gpus.iter_mut().enumerate() {
        g.uuid = [i as u8 + 1; 16];
    }
    let mut region = [0u8; 16];
    region[..10].copy_from_slice(b"eu-central");
    MachineTerms {
        agent,
        region,
        gpus,
        price_floor_per_gpu_hour: 400_000,
        electricity_cost_per_kwh: 150_000,
        network: MachineNetwork::default(),
        cpu_milli: 0,
        memory_mib: 0,
    }
}

struct Fixture {
    ctx: TestContext,
    market: Pubkey,
    host: Keypair,
    agent: Keypair,
}

/// A market with the recommended parameters, listing eu-central, and a host staked exactly
/// their `min_host_stake`.
fn fixture() -> Fixture {
    let mut ctx = TestContext::new();
    let params = MarketParams::recommended(60, 250, 3_600);
    let (authority, mint, market) = ctx.create_market(1, params);
    let mut eu = [0u8; 16];
    eu[..10].copy_from_slice(b"eu-central");
    ctx.run(&AddRegion {
        authority: &authority,
        market,
        region: eu,
    })
    .expect("add_region");
    let (host, tokens) = ctx.funded_user(&mint, params.min_host_stake);
    let agent = ctx.wallet(1);
    ctx.run(&OpenStake {
        owner: &host,
        market,
    })
    .expect("open_stake");
    ctx.run(&Stake {
        owner: &host,
        market,
        stake_mint: mint,
        owner_tokens: tokens,
        amount: params.min_host_stake,
    })
    .expect("stake");
    Fixture {
        ctx,
        market,
        host,
        agent,
    }
}

fn register(f: &mut Fixture, id: u64, gpus: Vec<GpuSpec>) -> Result<Pubkey, Failure> {
    let r = RegisterMachine {
        owner: &f.host,
        market: f.market,
        id,
        terms: terms(f.agent.pubkey(), gpus),
    };
    let machine = r.machine();
    f.ctx.run(&r).map(|_| machine)
}

#[test]
fn register_machine_records_gpus_ranges_and_topology() {
    let mut f = fixture();
    let gpus: Vec<GpuSpec> = (0..8).map(|i| gpu(1, i / 4)).collect();
    let key = register(&mut f, 0, gpus.clone()).expect("register_machine");
    let gpus = terms(f.agent.pubkey(), gpus).gpus; // as sent: each with its UUID
    let m: Machine = f.ctx.account(&key);
    assert_eq!(
        (m.owner, m.agent, m.market),
        (f.host.pubkey(), f.agent.pubkey(), f.market)
    );
    assert_eq!(m.gpus(), gpus.as_slice());
    assert_eq!(m.status, MachineStatus::Active);
    assert_eq!(m.cached_image_count, 0, "images are declared apart");
    assert_eq!(m.price_floor_per_gpu_hour, 400_000);
    assert_eq!(&m.region[..10], b"eu-central");
    assert_eq!(
        m.bump,
        gpu_market::pda::machine(&f.market, &f.host.pubkey(), 0).1
    );
}

#[test]
fn bad_machines_are_rejected_and_create_nothing() {
    let mut f = fixture();
    let zero_memory = GpuSpec {
        memory_gib: 0,
        ..gpu(0, 0)
    };
    let power_inverted = GpuSpec {
        power_w: [500, 450],
        ..gpu(0, 0)
    };
    let offset_inverted = GpuSpec {
        core_offset_mhz: [100, -100],
        ..gpu(0, 0)
    };
    let cases: Vec<(Vec<GpuSpec>, MarketError)> = vec![
        (vec![], MarketError::BadGpuCount),
        (vec![gpu(0, 0); 17], MarketError::BadGpuCount),
        (vec![zero_memory], MarketError::BadGpuMemory),
        (vec![gpu(8, 0)], MarketError::UnknownGpuClass),
        (
            vec![gpu(0, 0), power_inverted],
            MarketError::BadOverclockRange,
        ),
        (vec![offset_inverted], MarketError::BadOverclockRange),
    ];
    for (i, (gpus, expected)) in cases.into_iter().enumerate() {
        let id = 100 + i as u64;
        let err = register(&mut f, id, gpus).unwrap_err();
        assert_eq!(
            err.custom_code(),
            code(expected),
            "case {i}: {:?}",
            err.logs
        );
        let key = gpu_market::pda::machine(&f.market, &f.host.pubkey(), id).0;
        assert!(!f.ctx.account_exists(&key));
    }
    // Network declarations a client could not rely on.
    let network = |host: &str, api_port, ports, egress, allow: Vec<Cidr>| MachineNetwork {
        host: host.to_string(),
        api_port,
        ports_per_lease: ports,
        scratch_gib: 8,
        egress,
        allow,
    };
    let net = Cidr {
        addr: [203, 0, 113, 0],
        prefix: 24,
    };
    let bad_networks = [
        // Ports or an API with no address to reach them at.
        network("", 7450, 0, Egress::Open, vec![]),
        network("", 0, 2, Egress::Open, vec![]),
        network(&"h".repeat(65), 7450, 2, Egress::Open, vec![]),
        network("gpu host.example", 7450, 2, Egress::Open, vec![]),
        // An allow-list under another policy, too long, or with a bad prefix.
        network("203.0.113.5", 7450, 2, Egress::Open, vec![net]),
        network("203.0.113.5", 7450, 2, Egress::AllowList, vec![net; 5]),
        network(
            "203.0.113.5",
            7450,
            2,
            Egress::AllowList,
            vec![Cidr { prefix: 33, ..net }],
        ),
    ];
    for (i, bad) in bad_networks.into_iter().enumerate() {
        let mut t = terms(f.agent.pubkey(), vec![gpu(0, 0)]);
        t.network = bad;
        let r = RegisterMachine {
            owner: &f.host,
            market: f.market,
            id: 300 + i as u64,
            terms: t,
        };
        let err = f.ctx.run(&r).unwrap_err();
        assert_eq!(err.custom_code(), code(MarketError::BadNetwork), "case {i}");
        assert!(!f.ctx.account_exists(&r.machine()));
    }
    // The same physical GPU declared twice (one UUID) would double the machine's capacity.
    let mut twice = terms(f.agent.pubkey(), vec![gpu(0, 0), gpu(0, 0)]);
    twice.gpus[1].uuid = twice.gpus[0].uuid;
    let r = RegisterMachine {
        owner: &f.host,
        market: f.market,
        id: 201,
        terms: twice,
    };
    let err = f.ctx.run(&r).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::DuplicateGpu));
    assert!(!f.ctx.account_exists(&r.machine()));
    // The recommended parameters ask a host for stake: one without it registers nothing.
    let unstaked = f.ctx.wallet(10);
    f.ctx
        .run(&OpenStake {
            owner: &unstaked,
            market: f.market,
        })
        .unwrap();
    let r = RegisterMachine {
        owner: &unstaked,
        market: f.market,
        id: 0,
        terms: terms(f.agent.pubkey(), vec![gpu(0, 0)]),
    };
    let err = f.ctx.run(&r).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::HostStakeTooLow));
    assert!(!f.ctx.account_exists(&r.machine()));
    // A sound declaration is taken as given.
    let mut good = terms(f.agent.pubkey(), vec![gpu(0, 0)]);
    good.network = network("gpu-7.example.net", 7450, 2, Egress::AllowList, vec![net]);
    let r = RegisterMachine {
        owner: &f.host,
        market: f.market,
        id: 399,
        terms: good.clone(),
    };
    f.ctx.run(&r).expect("a declared network");
    assert_eq!(f.ctx.account::<Machine>(&r.machine()).network, good.network);
}

#[test]
fn only_the_owner_updates_and_a_retired_machine_stays_retired() {
    let mut f = fixture();
    let key = register(&mut f, 0, vec![gpu(0, 0)]).unwrap();
    let new_agent = Keypair::new();
    let update = |owner, gpus| UpdateMachine {
        owner,
        market: f.market,
        machine: key,
        spot_book: None,
        terms: terms(new_agent.pubkey(), gpus),
    };
    f.ctx
        .run(&update(&f.host, vec![gpu(2, 0), gpu(2, 0)]))
        .expect("update_machine");
    let m: Machine = f.ctx.account(&key);
    assert_eq!((m.gpu_count, m.agent), (2, new_agent.pubkey()));

    // Somebody else: the machine's address does not derive from their key.
    let thief = f.ctx.wallet(1);
    let err = f.ctx.run(&update(&thief, vec![gpu(0, 0)])).unwrap_err();
    assert_eq!(
        err.custom_code(),
        Some(AnchorErrorCode::ConstraintSeeds as u32)
    );
    let err = f
        .ctx
        .run(&SetMachineStatus {
            owner: &thief,
            market: f.market,
            machine: key,
            status: MachineStatus::Retired,
        })
        .unwrap_err();
    assert_eq!(
        err.custom_code(),
        Some(AnchorErrorCode::ConstraintSeeds as u32)
    );
    // A bad update leaves the old terms.
    let err = f.ctx.run(&update(&f.host, vec![])).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::BadGpuCount));
    assert_eq!(f.ctx.account::<Machine>(&key).gpu_count, 2);

    for status in [
        MachineStatus::Paused,
        MachineStatus::Active,
        MachineStatus::Retired,
    ] {
        f.ctx
            .run(&SetMachineStatus {
                owner: &f.host,
                market: f.market,
                machine: key,
                status,
            })
            .expect("set_machine_status");
        assert_eq!(f.ctx.account::<Machine>(&key).status, status);
    }
    let err = f
        .ctx
        .run(&SetMachineStatus {
            owner: &f.host,
            market: f.market,
            machine: key,
            status: MachineStatus::Active,
        })
        .unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::MachineRetired));
    let err = f.ctx.run(&update(&f.host, vec![gpu(0, 0)])).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::MachineRetired));
}

#[test]
fn cached_images_are_the_owners_to_declare_apart_from_the_terms_and_a_16_gpu_machine_fits_a_packet()
{
    let mut f = fixture();
    // The largest declaration (16 GPUs, a 64-byte address, four allowed networks) registers in
    // one transaction with its compute budget; with eight images besides it would not.
    let mut largest = terms(f.agent.pubkey(), (0..16).map(|i| gpu(0, i / 8)).collect());
    largest.network = MachineNetwork {
        host: "h".repeat(gpu_market::state::HOST_LEN),
        api_port: 7450,
        ports_per_lease: 4,
        scratch_gib: 100,
        egress: Egress::AllowList,
        allow: vec![
            Cidr {
                addr: [10, 0, 0, 0],
                prefix: 8
            };
            gpu_market::state::MAX_ALLOW
        ],
    };
    let register = RegisterMachine {
        owner: &f.host,
        market: f.market,
        id: 0,
        terms: largest,
    };
    let size = |ixs: &[solana_instruction::Instruction]| {
        let budgeted = budget::sized(
            budget::MAX_COMPUTE_UNITS as u64,
            Some(budget::MAX_LOADED_ACCOUNTS_DATA_SIZE),
            ixs,
        );
        budget::transaction_size(&budgeted, &f.host.pubkey())
    };
    let alone = size(&[register.instruction()]);
    assert!(alone <= TRANSACTION_SIZE_LIMIT, "{alone} bytes");
    let images = SetCachedImages {
        owner: &f.host,
        machine: register.machine(),
        images: (0..8).map(|i| [i; 32]).collect(),
    };
    let with_images = size(&[register.instruction(), images.instruction()]);
    assert!(with_images > TRANSACTION_SIZE_LIMIT, "{with_images} bytes");
    println!("register_machine at its largest: {alone} bytes of {TRANSACTION_SIZE_LIMIT}");
    let key = register.machine();
    f.ctx.run(&register).expect("the largest machine registers");

    let set = |owner, images: Vec<[u8; 32]>| SetCachedImages {
        owner,
        machine: key,
        images,
    };
    let images: Vec<[u8; 32]> = (0..8).map(|i| [i; 32]).collect();
    f.ctx
        .run(&set(&f.host, images.clone()))
        .expect("set_cached_images");
    let m: Machine = f.ctx.account(&key);
    assert_eq!(
        &m.cached_images[..m.cached_image_count as usize],
        images.as_slice()
    );
    // A later list replaces it; nine are refused and leave it.
    f.ctx.run(&set(&f.host, vec![[9; 32]])).unwrap();
    let err = f.ctx.run(&set(&f.host, vec![[1; 32]; 9])).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::TooManyCachedImages));
    let m: Machine = f.ctx.account(&key);
    assert_eq!(
        &m.cached_images[..m.cached_image_count as usize],
        &[[9; 32]]
    );
    // Nobody else declares them.
    let thief = f.ctx.wallet(1);
    let err = f.ctx.run(&set(&thief, vec![])).unwrap_err();
    assert_eq!(
        err.custom_code(),
        Some(AnchorErrorCode::ConstraintSeeds as u32)
    );
    // Nor the owner of a retired machine.
    f.ctx
        .run(&SetMachineStatus {
            owner: &f.host,
            market: f.market,
            machine: key,
            status: MachineStatus::Retired,
        })
        .unwrap();
    let err = f.ctx.run(&set(&f.host, vec![])).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::MachineRetired));
}

#[test]
fn heartbeats_come_from_the_agent_key_only() {
    let mut f = fixture();
    let key = register(&mut f, 0, vec![gpu(0, 0)]).unwrap();
    let registered = f.ctx.account::<Machine>(&key).last_heartbeat;
    f.ctx.advance_time(90);
    f.ctx
        .run(&Heartbeat {
            agent: &f.agent,
            machine: key,
        })
        .expect("heartbeat");
    assert_eq!(
        f.ctx.account::<Machine>(&key).last_heartbeat,
        registered + 90
    );
    let err = f
        .ctx
        .run(&Heartbeat {
            agent: &f.host,
            machine: key,
        })
        .unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::WrongAgent));
}

#[test]
fn a_gpu_fault_from_the_agent_pauses_the_machine_until_its_owner_resumes_it() {
    let mut f = fixture();
    let key = register(&mut f, 0, vec![gpu(0, 0), gpu(0, 0)]).unwrap();
    let report = |agent, gpu, xid| ReportFault {
        agent,
        machine: key,
        gpu,
        xid,
    };
    // Nobody but the machine's agent may pause it so, and only for a GPU it has.
    let err = f.ctx.run(&report(&f.host, 1, 79)).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::WrongAgent));
    let err = f.ctx.run(&report(&f.agent, 2, 79)).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::NoSuchGpu));
    let machine = f.ctx.account::<Machine>(&key);
    assert_eq!(
        (machine.status, machine.fault),
        (MachineStatus::Active, None)
    );

    f.ctx.advance_time(30);
    let at = f.ctx.now();
    f.ctx.run(&report(&f.agent, 1, 79)).expect("report_fault");
    let machine = f.ctx.account::<Machine>(&key);
    assert_eq!(machine.status, MachineStatus::Paused);
    assert_eq!(
        machine.fault,
        Some(MachineFault {
            gpu: 1,
            xid: 79,
            at
        })
    );
    // Pausing again keeps the fault; resuming clears it.
    let status = |status| SetMachineStatus {
        owner: &f.host,
        market: f.market,
        machine: key,
        status,
    };
    f.ctx.run(&status(MachineStatus::Paused)).unwrap();
    assert!(f.ctx.account::<Machine>(&key).fault.is_some());
    f.ctx.run(&status(MachineStatus::Active)).unwrap();
    let machine = f.ctx.account::<Machine>(&key);
    assert_eq!(
        (machine.status, machine.fault),
        (MachineStatus::Active, None)
    );
    // A retired machine stays retired whatever its agent says.
    f.ctx.run(&status(MachineStatus::Retired)).unwrap();
    let err = f.ctx.run(&report(&f.agent, 0, 48)).unwrap_err();
    assert_eq!(err.custom_code(), code(MarketError::MachineRetired));
}

#[test]
fn compute_units_of_machine_instructions() {
    let mut f = fixture();
    let key = register(&mut f, 0, (0..16).map(|i| gpu(0, i / 8)).collect()).unwrap();
    f.ctx
        .run(&UpdateMachine {
            owner: &f.host,
            market: f.market,
            machine: key,
            spot_book: None,
            terms: terms(f.agent.pubkey(), (0..16).map(|i| gpu(1, i / 8)).collect()),
        })
        .unwrap();
    f.ctx
        .run(&SetCachedImages {
            owner: &f.host,
            machine: key,
            images: vec![[7; 32]; 8],
        })
        .unwrap();
    f.ctx
        .run(&SetMachineStatus {
            owner: &f.host,
            market: f.market,
            machine: key,
            status: MachineStatus::Paused,
        })
        .unwrap();
    f.ctx
        .run(&Heartbeat {
            agent: &f.agent,
            machine: key,
        })
        .unwrap();
    f.ctx
        .run(&ReportFault {
            agent: &f.agent,
            machine: key,
            gpu: 3,
            xid: 79,
        })
        .unwrap();
    let space = 8 + <Machine as anchor_lang::Space>::INIT_SPACE;
    println!("| instruction (16 GPUs) | compute units |");
    println!("|---|---|");
    for name in [
        "register_machine",
        "update_machine",
        "set_cached_images",
        "set_machine_status",
        "heartbeat",
        "report_fault",
    ] {
        println!("| {name} | {} |", f.ctx.compute_units[name]);
    }
    println!(
        "machine account: {space} bytes, rent {} lamports",
        f.ctx.svm.minimum_balance_for_rent_exemption(space)
    );
    // Budgets with headroom over the measured figures (Borsh accounts: every instruction that
    // loads the machine pays for its 1,304 bytes; see BENCHMARKS.md).
    assert!(f.ctx.compute_units["register_machine"] <= 40_000);
    assert!(f.ctx.compute_units["heartbeat"] <= 21_000);
}
