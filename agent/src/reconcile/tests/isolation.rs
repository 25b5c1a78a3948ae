//! Leases that share a GPU in GiB slices: each is confined to its slice (NVIDIA MPS, modelled by
//! the SIMULATED GPU) and billed its part of the GPU, not the whole.

use gpu_market_core::lease::UsageProof;

use super::*;
use crate::gpu::isolation::{ACTIVE_THREAD_PERCENTAGE, PINNED_DEVICE_MEM_LIMIT, PIPE_DIRECTORY};
use crate::gpu::simulated::{AllocationError, CudaProcess};
use crate::runtime::BindMount;

/// A bid for `gib` GiB of one GPU at 250 W.
fn slice(n: u8, gib: u16) -> BidView {
    BidView {
        gib_per_gpu: gib,
        ..bid(n, BidKind::Queue, 1, 1_000, power(250))
    }
}

/// SIMULATED: a process of container `id` allocates `gib` GiB on the container's first GPU and
/// keeps `permille` of its SMs busy; returns its PID, or the allocation's refusal.
fn launch(h: &Harness, id: &str, gib: u64, permille: u16) -> Result<u32, AllocationError> {
    let spec = h.runtime.containers()[id].spec.clone();
    let pid = h.runtime.spawn_process(id);
    h.gpus.start_process(
        spec.gpu_indices[0],
        CudaProcess {
            pid,
            env: &spec.env,
            ordinal: 0,
            memory_mib: gib * 1024,
            load_permille: permille,
        },
    )?;
    Ok(pid)
}

/// Two leases of 40 GiB each on the one 80 GiB GPU of `h`, both running; the first's client
/// environment sets `TOKEN`.
async fn two_tenants(h: &Harness) -> (Reconciler, [(LeaseView, String); 2]) {
    let mut a = slice(1, 40);
    a.env_hash = h.seal_env(a.key, "TOKEN=secret\n");
    let b = slice(2, 40);
    h.chain.place_bid(a.clone());
    h.chain.place_bid(b.clone());
    let mut r = h.reconciler();
    h.run_for(&mut r, 3 * POLL).await;
    let running = h.running();
    assert_eq!(running.len(), 2, "both slices run");
    let tenant = |bid: &BidView| {
        let lease = h.chain.lease_of_bid(bid.key).expect("allocated");
        assert_eq!(lease.gpu_indices, vec![0]);
        let (id, _) = running
            .iter()
            .find(|(_, s)| s.labels[LABEL_LEASE] == lease.key.to_string())
            .expect("its container")
            .clone();
        (lease, id)
    };
    (r, [tenant(&a), tenant(&b)])
}

/// Each slice's container is the client of an MPS daemon of its lease's own (the SIMULATED
/// control program: real processes and pipes): its pipe folder and its `/dev/shm` are the
/// lease's, no other tenant's; the daemon sees only the lease's GPU, had its limits set before
/// the container was created, and runs with the lease's tmpfs as its `/dev/shm`.
#[tokio::test(start_paused = true)]
async fn slices_of_one_gpu_run_as_mps_clients_pinned_to_their_gib() {
    let h = Harness::new(&[0]);
    let (_r, [(lease_a, a), (lease_b, b)]) = two_tenants(&h).await;
    let containers = h.runtime.containers();
    let mps = h.mps.clone().unwrap();
    let mut shms = Vec::new();
    for (lease, id, client_env) in [
        (&lease_a, &a, vec![("TOKEN", "secret")]),
        (&lease_b, &b, vec![]),
    ] {
        let spec = &containers[id].spec;
        let dir = mps.dir(&lease.key);
        let (pipe, shm) = (dir.join("pipe"), dir.join("shm"));
        let mut expected: Vec<(String, String)> = client_env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        // The agent's after the client's.
        expected.extend([
            (
                PIPE_DIRECTORY.to_string(),
                pipe.to_string_lossy().into_owned(),
            ),
            (PINNED_DEVICE_MEM_LIMIT.to_string(), "0=40G".to_string()),
            (ACTIVE_THREAD_PERCENTAGE.to_string(), "50".to_string()),
        ]);
        assert_eq!(spec.env, expected);
        // The lease's MPS folders, read-write; then the lease's power logs (read-only).
        assert_eq!(
            spec.binds[..2],
            [
                BindMount {
                    host: pipe.clone(),
                    container: pipe.clone(),
                    read_only: false,
                },
                BindMount {
                    host: shm.clone(),
                    container: "/dev/shm".into(),
                    read_only: false,
                },
            ]
        );
        assert_eq!(spec.binds.len(), 3);
        assert!(spec.binds[2].read_only);
        // Its daemon: running, on the lease's GPU alone, limits set, the lease's tmpfs its
        // `/dev/shm`.
        assert!(pipe.join("control").exists(), "its daemon runs");
        let log = std::fs::read_to_string(dir.join("log/control.log")).unwrap();
        let uuid = gpu_market_sdk::gpus::format_uuid(&crate::gpu::simulated::uuid(0));
        assert!(
            log.contains(&format!("CUDA_VISIBLE_DEVICES={uuid} ")),
            "{log}"
        );
        for set in [
            "set_default_device_pinned_mem_limit 0 40G",
            "set_default_active_thread_percentage 50",
        ] {
            assert!(log.contains(&format!("command {set}\n")), "{log}");
        }
        use std::os::unix::fs::MetadataExt;
        let dev = std::fs::metadata(&shm).unwrap().dev();
        assert!(log.contains(&format!("shm_dev={dev}\n")), "{log}");
        assert_ne!(dev, std::fs::metadata("/dev/shm").unwrap().dev());
        shms.push(dev);
    }
    assert_ne!(shms[0], shms[1], "one tmpfs each");
    launch(&h, &a, 30, 500).expect("within A's 40 GiB");
    // B tries to take 60 GiB, which only 80 − 30 GiB free would allow without MPS.
    let refused = launch(&h, &b, 60, 500).unwrap_err();
    assert!(
        matches!(
            refused,
            AllocationError::OverPinnedLimit {
                index: 0,
                asked_mib: 61_440,
                limit_mib: 40_960
            }
        ),
        "{refused}"
    );
    launch(&h, &b, 40, 500).expect("B's own 40 GiB");
}

#[tokio::test(start_paused = true)]
async fn co_tenants_are_billed_their_part_of_the_gpu_which_adds_up_to_the_whole() {
    let h = Harness::new(&[0]);
    let (mut r, [(a, a_id), (b, b_id)]) = two_tenants(&h).await;
    let (attributed_before, gpu_before) = attributed_and_used(&h, &r);
    // A keeps 75 % of the SMs busy, B 25 %: the GPU runs flat out at its 250 W limit.
    launch(&h, &a_id, 30, 750).unwrap();
    launch(&h, &b_id, 20, 250).unwrap();
    let busy_from = h.chain.clock() + POLL as i64;
    h.run_for(&mut r, 6 * INTERVAL as u64).await;

    // The windows each lease proved wholly after both were busy (one tick later: the tick the
    // processes appeared splits the idle reading before them).
    let proofs = |lease: &LeaseView| -> Vec<UsageProof> {
        h.chain
            .accepted()
            .into_iter()
            .filter(|p| p.lease == lease.key && p.window.0 >= busy_from)
            .map(|p| p.proof)
            .collect()
    };
    let (pa, pb) = (proofs(&a), proofs(&b));
    assert!(pa.len() >= 2 && pb.len() >= 2, "{pa:?} {pb:?}");
    // Each proof covers two intervals: 120 s.
    let secs = 2 * INTERVAL as u64;
    for (p, q) in pa.iter().zip(&pb) {
        assert_eq!((p.intervals, q.intervals), (2, 2));
        assert_eq!(p.avg_utilisation_bps, 7_500, "A: {p:?}");
        assert_eq!(q.avg_utilisation_bps, 2_500, "B: {q:?}");
        assert_eq!(p.energy_j, 22_500, "75 % of 250 W for 120 s");
        assert_eq!(q.energy_j, 7_500, "25 % of 250 W for 120 s");
        assert_eq!(
            p.energy_j + q.energy_j,
            250 * secs,
            "the GPU's energy over a window, no more"
        );
        assert_eq!(p.peak_power_w, vec![187]);
        assert_eq!(q.peak_power_w, vec![62]);
        assert_eq!(p.gpu_seconds, secs, "time is each lease's own");
    }
    // Since both shared it, the energy attributed to them adds up to what the GPU's counter
    // shows it used, to the millijoule.
    let (attributed_after, gpu_after) = attributed_and_used(&h, &r);
    assert_eq!(attributed_after - attributed_before, gpu_after - gpu_before);
    // The containers' PIDs were asked of the engine once each, when the processes appeared,
    // not at each of the 48 ticks since.
    let asked = h
        .runtime
        .calls()
        .into_iter()
        .filter(|c| matches!(c, Call::Pids { .. }))
        .count();
    assert_eq!(asked, 2);
}

/// The energy attributed to the leases on GPU 0 and the GPU's counter, in mJ.
fn attributed_and_used(h: &Harness, r: &Reconciler) -> (u64, u64) {
    let attributed = r
        .state()
        .leases
        .values()
        .map(|l| l.attributed_energy_mj[&0])
        .sum();
    (attributed, h.gpus.sample(0).unwrap().energy_mj)
}

/// A host without MPS cannot confine a lease to its slice of a GPU. Before, the market still
/// put two 40 GiB slices on its one 80 GiB GPU, and the agent refused the lease it could not
/// confine (its client refunded, the bid never run). Now the agent tells the chain first that
/// its GPUs go whole (`set_whole_gpus`), takes no bid until the chain says so, and then runs the
/// first slice alone on the GPU, as a whole GPU (no MPS variable or folder); the second waits
/// for a GPU of its own.
#[tokio::test(start_paused = true)]
async fn without_mps_the_gpus_go_whole_and_a_slice_runs_alone_on_its_gpu() {
    let mut h = Harness::new(&[0]);
    h.mps = None;
    let first = slice(1, 40);
    let second = slice(2, 40);
    h.chain.place_bid(first.clone());
    h.chain.place_bid(second.clone());
    let mut r = h.reconciler();
    h.run_for(&mut r, 4 * POLL).await;

    assert!(h.chain.whole_gpus(), "the chain was told");
    let leased: Vec<_> = [&first, &second]
        .iter()
        .filter_map(|b| h.chain.lease_of_bid(b.key))
        .collect();
    assert_eq!(leased.len(), 1, "one slice on the one GPU");
    assert!(h.chain.ended().is_empty(), "no lease refused");
    let running = h.running();
    assert_eq!(running.len(), 1);
    assert_eq!(running[0].1.labels[LABEL_LEASE], leased[0].key.to_string());
    // No MPS folder or setting: only its power logs are mounted.
    let spec = &running[0].1;
    assert!(spec.env.is_empty() && spec.binds.len() == 1 && spec.binds[0].read_only);
    assert!(!h
        .metrics
        .render(0)
        .contains("reason=\"isolation_unavailable\""));
}

/// The container's CPU and memory limits are what its lease holds; a lease that reserved none
/// gets the host's share per GPU (the agent's `container` settings: 2 cores, 1 GiB a GPU here).
#[tokio::test(start_paused = true)]
async fn a_container_gets_the_cpu_and_memory_its_lease_holds() {
    let h = Harness::new(&[0, 0]);
    h.chain.set_network(crate::chain::NetworkView {
        room: gpu_market_core::fit::Room {
            host: gpu_market_core::fit::Host {
                cpu_milli: 8_000,
                memory_mib: 16_384,
            },
            ..Default::default()
        },
        ..Default::default()
    });
    let mut reserving = bid(1, BidKind::Queue, 1, 1_000, power(250));
    reserving.room.host = gpu_market_core::fit::Host {
        cpu_milli: 2_500,
        memory_mib: 3_072,
    };
    let plain = bid(2, BidKind::Queue, 1, 1_000, power(250));
    h.chain.place_bid(reserving.clone());
    h.chain.place_bid(plain.clone());
    let mut r = h.reconciler();
    h.run_for(&mut r, 3 * POLL).await;
    let limits = |b: &BidView| {
        let lease = h.chain.lease_of_bid(b.key).expect("allocated");
        let (_, spec) = h
            .running()
            .into_iter()
            .find(|(_, s)| s.labels[LABEL_LEASE] == lease.key.to_string())
            .expect("its container runs");
        (spec.nano_cpus, spec.memory_bytes)
    };
    assert_eq!(limits(&reserving), (Some(2_500_000_000), Some(3_072 << 20)));
    assert_eq!(limits(&plain), (Some(2_000_000_000), Some(1_024 << 20)));
}

/// A tenant that tells its MPS daemon to quit (from its container, through its pipe folder, as
/// `echo quit | nvidia-cuda-mps-control` does) ends its own lease's daemon, not its co-tenant's,
/// which still answers with its limits. When the leases end, their daemons go with them and
/// nothing of them is left on the host.
#[tokio::test(start_paused = true)]
async fn a_tenant_that_quits_its_daemon_ends_no_one_elses_and_an_ended_lease_takes_its_daemon() {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let h = Harness::new(&[0]);
    let (mut r, [(lease_a, _), (lease_b, _)]) = two_tenants(&h).await;
    let mps = h.mps.clone().unwrap();
    let ask = |lease: &LeaseView, command: &str| -> Option<String> {
        let mut child = Command::new(&mps.control)
            .env("CUDA_MPS_PIPE_DIRECTORY", mps.dir(&lease.key).join("pipe"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        writeln!(child.stdin.take().unwrap(), "{command}").unwrap();
        let out = child.wait_with_output().unwrap();
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    assert_eq!(ask(&lease_a, "quit").as_deref(), Some(""));
    let control_a = mps.dir(&lease_a.key).join("pipe/control");
    for _ in 0..200 {
        if !control_a.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(!control_a.exists(), "A's daemon quit");
    assert_eq!(
        ask(&lease_b, "get_default_device_pinned_mem_limit 0").as_deref(),
        Some("40G"),
        "B's daemon still serves B"
    );
    // Both leases run their hour and end.
    h.run_for(&mut r, 3_600 + 3 * INTERVAL as u64).await;
    assert!(h.running().is_empty(), "both ended");
    for lease in [&lease_a, &lease_b] {
        assert!(!mps.dir(&lease.key).exists(), "the daemon's folder is left");
    }
    assert_eq!(std::fs::read_dir(&mps.root).unwrap().count(), 0);
}

/// A tenant that gets past its MPS limit (root in its container, it can raise its own server's
/// limit through its daemon's control pipe) and holds more of the shared GPU than its slice and
/// a context's room is stopped at the next tick, its final proof closed with
/// `exit::OVER_SLICE`; its co-tenant, within its slice, runs on.
#[tokio::test(start_paused = true)]
async fn a_tenant_holding_more_than_its_slice_is_stopped_and_its_co_tenant_runs_on() {
    let h = Harness::new(&[0]);
    let (mut r, [(lease_a, a), (lease_b, b)]) = two_tenants(&h).await;
    launch(&h, &b, 30, 500).expect("within B's 40 GiB");
    // Within its slice and a context's room: nothing happens.
    let within = h.runtime.spawn_process(&a);
    h.gpus
        .start_process(
            0,
            CudaProcess {
                pid: within,
                env: &[],
                ordinal: 0,
                memory_mib: 40 * 1024 + crate::gpu::mps::CONTEXT_ROOM_MIB,
                load_permille: 500,
            },
        )
        .unwrap();
    h.run_for(&mut r, 2 * POLL).await;
    assert_eq!(h.running().len(), 2, "both run");
    // One MiB more, its server's limit lifted: nothing but the GPU caps it.
    let over = h.runtime.spawn_process(&a);
    h.gpus
        .start_process(
            0,
            CudaProcess {
                pid: over,
                env: &[],
                ordinal: 0,
                memory_mib: 1,
                load_permille: 0,
            },
        )
        .unwrap();
    h.run_for(&mut r, 2 * POLL).await;
    let running = h.running();
    assert_eq!(running.len(), 1, "A stopped");
    assert_eq!(running[0].0, b, "B runs on");
    let a_exit = h
        .chain
        .accepted()
        .into_iter()
        .filter(|p| p.lease == lease_a.key)
        .find_map(|p| p.proof.exit_code);
    assert_eq!(a_exit, Some(exit::OVER_SLICE));
    assert!(h
        .chain
        .accepted()
        .into_iter()
        .filter(|p| p.lease == lease_b.key)
        .all(|p| p.proof.exit_code.is_none()));
}
