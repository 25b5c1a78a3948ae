//! The container runtime against the real Docker engine and the local registry started by
//! `scripts/engine.sh start` (the README's test command starts them).

mod support;

use gpu_market_agent::docker::{ContainerSpec, DockerEngine, Sandbox, LOG_DRIVER};
use gpu_market_agent::runtime::ContainerRuntime;
use std::time::Duration;

fn engine_env() -> (String, String) {
    let host = std::env::var("DOCKER_HOST").expect(
        "DOCKER_HOST is not set: start the engine with scripts/engine.sh start and eval \"$(scripts/engine.sh env)\"",
    );
    let image = std::env::var("GPU_MARKET_TEST_IMAGE")
        .expect("GPU_MARKET_TEST_IMAGE is not set: see scripts/engine.sh env");
    (host, image)
}

/// Removes the image from the engine's store so that the next pull fetches it from the registry.
async fn forget_image(host: &str, image: &str) {
    let docker = bollard::Docker::connect_with_unix(host, 60, bollard::API_DEFAULT_VERSION)
        .unwrap()
        .negotiate_version()
        .await
        .unwrap();
    let _ = docker
        .remove_image(
            image,
            Some(bollard::query_parameters::RemoveImageOptions {
                force: true,
                ..Default::default()
            }),
            None,
        )
        .await;
    assert!(
        docker.inspect_image(image).await.is_err(),
        "image still present"
    );
}

#[tokio::test]
async fn pulls_from_the_registry_and_runs_with_env_and_limits() {
    let (host, image) = engine_env();
    let engine = DockerEngine::connect(&host, "engine-test")
        .await
        .expect("connect");
    forget_image(&host, &image).await;
    let progress = engine.pull(&image).await.expect("pull");
    assert!(progress > 0, "a real pull reports progress");

    let spec = ContainerSpec {
        image: image.clone(),
        cmd: Some(vec![
            "sh".into(),
            "-c".into(),
            "echo \"lease=$LEASE\"; echo oops >&2; \
             cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes; \
             exit 3"
                .into(),
        ]),
        env: vec![("LEASE".into(), "abc123".into())],
        labels: [("io.gpu-market.lease".to_string(), "abc123".to_string())].into(),
        memory_bytes: Some(64 << 20),
        nano_cpus: Some(500_000_000),
        pids_limit: Some(32),
        ..Default::default()
    };
    let id = engine.run(&spec).await.expect("run");
    assert!(engine.managed_containers().await.unwrap().contains(&id));
    // The agent of another machine on the same engine does not see it as its own.
    let other = DockerEngine::connect(&host, "another-machine")
        .await
        .expect("connect");
    assert!(!other.managed_containers().await.unwrap().contains(&id));
    assert_eq!(
        engine.wait(&id).await.unwrap(),
        3,
        "the exit code comes back"
    );
    let logs = engine.logs(&id).await.unwrap();
    assert!(logs.stdout.contains("lease=abc123"), "{logs:?}");
    assert!(
        logs.stdout.contains(&(64u64 << 20).to_string()),
        "memory limit applied: {logs:?}"
    );
    assert_eq!(logs.stderr.trim(), "oops");
    engine.remove(&id).await.unwrap();
    assert!(!engine.managed_containers().await.unwrap().contains(&id));
}

#[tokio::test]
async fn gpu_device_requests_name_exactly_the_leased_gpus() {
    let (host, image) = engine_env();
    let engine = DockerEngine::connect(&host, "engine-test")
        .await
        .expect("connect");
    engine.pull(&image).await.expect("pull");
    let spec = ContainerSpec {
        image,
        cmd: Some(vec![
            "sh".into(),
            "-c".into(),
            "echo $NVIDIA_VISIBLE_DEVICES".into(),
        ]),
        gpu_indices: vec![0, 2],
        ..Default::default()
    };
    let id = engine
        .run(&spec)
        .await
        .expect("run with a GPU device request");
    assert_eq!(engine.wait(&id).await.unwrap(), 0);
    assert_eq!(engine.logs(&id).await.unwrap().stdout.trim(), "0,2");
    engine.remove(&id).await.unwrap();
}

#[tokio::test]
async fn pulling_an_unknown_image_is_a_typed_error() {
    let (host, image) = engine_env();
    let engine = DockerEngine::connect(&host, "engine-test")
        .await
        .expect("connect");
    let missing = format!("{}/no-such-image:1", image.split('/').next().unwrap());
    let err = engine.pull(&missing).await.unwrap_err();
    assert!(
        matches!(err, gpu_market_agent::docker::RuntimeError::Pull { .. }),
        "{err}"
    );
}

async fn inspect(host: &str, id: &str) -> bollard::models::ContainerInspectResponse {
    bollard::Docker::connect_with_unix(host, 60, bollard::API_DEFAULT_VERSION)
        .unwrap()
        .negotiate_version()
        .await
        .unwrap()
        .inspect_container(
            id,
            None::<bollard::query_parameters::InspectContainerOptions>,
        )
        .await
        .unwrap()
}

/// Runs `script` under `sandbox`; returns the container's host config and its output.
async fn run_sandboxed(sandbox: Sandbox, script: &str) -> (bollard::models::HostConfig, String) {
    let (host, image) = engine_env();
    let engine = DockerEngine::connect(&host, "engine-test")
        .await
        .expect("connect");
    engine.pull(&image).await.expect("pull");
    let spec = ContainerSpec {
        image,
        cmd: Some(vec!["sh".into(), "-c".into(), script.into()]),
        memory_bytes: Some(256 << 20),
        pids_limit: Some(32),
        sandbox,
        ..Default::default()
    };
    let id = engine.run(&spec).await.expect("run");
    assert_eq!(
        engine.wait(&id).await.unwrap(),
        0,
        "{:?}",
        engine.logs(&id).await
    );
    let host_config = inspect(&host, &id).await.host_config.unwrap();
    let logs = engine.logs(&id).await.unwrap();
    engine.remove(&id).await.unwrap();
    (host_config, logs.stdout + &logs.stderr)
}

#[tokio::test]
async fn containers_run_without_capabilities_on_a_read_only_root_with_bounded_tmpfs_and_logs() {
    let sandbox = Sandbox {
        tmp_bytes: 4 << 20,
        scratch_bytes: 8 << 20,
        log_max_bytes: 1 << 20,
        log_max_files: 2,
        ..Sandbox::default()
    };
    assert!(sandbox.read_only_root, "the default");
    let (hc, out) = run_sandboxed(
        sandbox,
        "touch /escape 2>/dev/null && echo root-writable || echo root-read-only; \
         echo x > /tmp/f && echo tmp-writable; \
         echo x > /workspace/f && echo scratch-writable; \
         dd if=/dev/zero of=/tmp/big bs=1M count=8 2>/dev/null || echo tmp-full; \
         dd if=/dev/zero of=/workspace/big bs=1M count=16 2>/dev/null || echo scratch-full; \
         grep -E '^(CapEff|CapPrm|NoNewPrivs):' /proc/self/status",
    )
    .await;
    for line in [
        "root-read-only",
        "tmp-writable",
        "scratch-writable",
        "tmp-full",
        "scratch-full",
        "CapEff:\t0000000000000000",
        "CapPrm:\t0000000000000000",
        "NoNewPrivs:\t1",
    ] {
        assert!(
            out.lines().any(|l| l == line),
            "{line:?} missing from {out}"
        );
    }
    assert_eq!(hc.cap_drop, Some(vec!["ALL".to_string()]));
    assert!(
        hc.security_opt
            .as_ref()
            .is_some_and(|o| o.iter().any(|o| o.starts_with("no-new-privileges"))),
        "{:?}",
        hc.security_opt
    );
    assert_eq!(hc.readonly_rootfs, Some(true));
    let log = hc.log_config.unwrap();
    assert_eq!(log.typ.as_deref(), Some(LOG_DRIVER));
    let log = log.config.unwrap();
    assert_eq!(log["max-size"], (1u64 << 20).to_string());
    assert_eq!(log["max-file"], "2");
    let tmpfs = hc.tmpfs.unwrap();
    assert!(
        tmpfs["/tmp"].contains(&format!("size={}", 4u64 << 20)),
        "{tmpfs:?}"
    );
    assert!(
        tmpfs["/workspace"].contains(&format!("size={}", 8u64 << 20)),
        "{tmpfs:?}"
    );
    assert_eq!(hc.storage_opt, None, "nothing to cap on a read-only root");
}

#[tokio::test]
async fn a_read_only_bind_is_readable_and_not_writable_inside_the_container() {
    let (host, image) = engine_env();
    let engine = DockerEngine::connect(&host, "engine-test")
        .await
        .expect("connect");
    engine.pull(&image).await.expect("pull");
    // World-readable: the container's user need not be root.
    let dir = tempfile::Builder::new()
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .tempdir()
        .unwrap();
    std::fs::write(dir.path().join("0.json"), "{\"interval\":0}").unwrap();
    let spec = ContainerSpec {
        image,
        cmd: Some(vec![
            "sh".into(),
            "-c".into(),
            "cat /run/gpu-market/evidence/0.json; echo; \
             touch /run/gpu-market/evidence/x 2>/dev/null && echo writable || echo read-only"
                .into(),
        ]),
        memory_bytes: Some(256 << 20),
        pids_limit: Some(32),
        binds: vec![gpu_market_agent::runtime::BindMount {
            host: dir.path().to_path_buf(),
            container: "/run/gpu-market/evidence".into(),
            read_only: true,
        }],
        ..Default::default()
    };
    let id = engine.run(&spec).await.expect("run");
    assert_eq!(engine.wait(&id).await.unwrap(), 0);
    let logs = engine.logs(&id).await.unwrap();
    engine.remove(&id).await.unwrap();
    let lines: Vec<&str> = logs.stdout.lines().collect();
    assert_eq!(lines, ["{\"interval\":0}", "read-only"], "{logs:?}");
    assert!(!dir.path().join("x").exists());
}

#[tokio::test]
async fn a_writable_root_runs_even_where_the_storage_driver_cannot_cap_it() {
    let sandbox = Sandbox {
        read_only_root: false,
        writable_layer_bytes: 64 << 20,
        ..Sandbox::default()
    };
    let (hc, out) = run_sandboxed(
        sandbox,
        "touch /written && echo root-writable; grep '^CapEff:' /proc/self/status",
    )
    .await;
    assert!(out.lines().any(|l| l == "root-writable"), "{out}");
    assert!(out.contains("CapEff:\t0000000000000000"), "{out}");
    assert_eq!(hc.readonly_rootfs, Some(false));
    assert_eq!(hc.cap_drop, Some(vec!["ALL".to_string()]));
    // Capped where the driver can (btrfs, zfs, overlay2 on xfs with pquota), else not at all:
    // the engine refused the capped container, and the agent ran it without the cap.
    let (host, _) = engine_env();
    let info = bollard::Docker::connect_with_unix(&host, 60, bollard::API_DEFAULT_VERSION)
        .unwrap()
        .info()
        .await
        .unwrap();
    let backing = info
        .driver_status
        .unwrap_or_default()
        .into_iter()
        .find(|kv| kv.first().is_some_and(|k| k == "Backing Filesystem"))
        .and_then(|kv| kv.get(1).cloned());
    if info.driver.as_deref() == Some("overlay2") && backing.as_deref() != Some("xfs") {
        assert_eq!(
            hc.storage_opt, None,
            "overlay2 on {backing:?} cannot cap a layer"
        );
    } else if let Some(opts) = hc.storage_opt {
        assert_eq!(opts["size"], (64u64 << 20).to_string());
    }
}

/// Whether the engine's store holds `image` (pinned to `digest`).
async fn stored(image: &str, digest: &[u8; 32]) -> bool {
    let pinned = gpu_market_agent::runtime::pinned_reference(image, digest).unwrap();
    let docker =
        bollard::Docker::connect_with_unix(&engine_env().0, 60, bollard::API_DEFAULT_VERSION)
            .unwrap();
    docker.inspect_image(&pinned).await.is_ok()
}

/// Over the limit, whether its layers are fetched now or already stored, an image is refused
/// and not kept in the store (before, a refused image stayed, and the next filled the disk).
#[tokio::test]
async fn an_image_over_the_size_limit_is_refused_fetched_or_stored_and_not_kept() {
    let (host, _) = engine_env();
    let engine = DockerEngine::connect(&host, "engine-test-size")
        .await
        .expect("connect");
    let (image, digest) = support::pushed_image("oversized", &[], 0);
    let refused = |err: gpu_market_agent::runtime::RuntimeError| {
        assert!(
            matches!(
                err,
                gpu_market_agent::runtime::RuntimeError::ImageTooLarge { max_bytes: 1, .. }
            ),
            "{err}"
        )
    };
    refused(
        ContainerRuntime::pull(&engine, &image, &digest, None, 1)
            .await
            .expect_err("a 1-byte limit"),
    );
    assert!(!stored(&image, &digest).await, "a refused image stayed");
    // Stored already (pulled within no limit), then asked for under the limit.
    ContainerRuntime::pull(&engine, &image, &digest, None, u64::MAX)
        .await
        .expect("within no limit");
    assert!(stored(&image, &digest).await);
    refused(
        ContainerRuntime::pull(&engine, &image, &digest, None, 1)
            .await
            .expect_err("a 1-byte limit"),
    );
    assert!(!stored(&image, &digest).await, "a refused image stayed");
}

/// An image whose own `ENV` sets `LD_PRELOAD` (CVE-2025-23266's way onto the host through the
/// NVIDIA toolkit's hook) is refused and removed; one asking for every driver capability gets
/// the engine's compute and utility only, set after its own environment.
#[tokio::test]
async fn an_image_environment_that_steers_the_loader_is_refused_and_driver_capabilities_are_ours() {
    let (host, _) = engine_env();
    let engine = DockerEngine::connect(&host, "engine-test-image-env")
        .await
        .expect("connect");
    let (image, digest) =
        support::pushed_image("preload", &["LD_PRELOAD=/proc/self/cwd/poc.so"], 0);
    let err = ContainerRuntime::pull(&engine, &image, &digest, None, u64::MAX)
        .await
        .expect_err("an image that preloads");
    assert!(
        matches!(
            &err,
            gpu_market_agent::runtime::RuntimeError::ImageEnv { key, .. } if key == "LD_PRELOAD"
        ),
        "{err}"
    );
    assert!(!stored(&image, &digest).await, "a refused image stayed");

    let (image, digest) = support::pushed_image(
        "allcaps",
        &[
            "NVIDIA_DRIVER_CAPABILITIES=all",
            "LD_LIBRARY_PATH=/usr/local/nvidia/lib64",
        ],
        0,
    );
    ContainerRuntime::pull(&engine, &image, &digest, None, u64::MAX)
        .await
        .expect("CUDA images set LD_LIBRARY_PATH and NVIDIA_* themselves");
    let spec = ContainerSpec {
        image: gpu_market_agent::runtime::pinned_reference(&image, &digest).unwrap(),
        cmd: Some(vec!["/bin/busybox".into(), "env".into()]),
        gpu_indices: vec![1],
        ..Default::default()
    };
    let id = engine.run(&spec).await.expect("run");
    assert_eq!(engine.wait(&id).await.unwrap(), 0);
    let env = engine.logs(&id).await.unwrap().stdout;
    // As the toolkit reads the container's environment from its spec: a key's last value.
    let last = |key: &str| {
        env.lines()
            .rev()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .map(str::to_string)
    };
    assert_eq!(
        last("NVIDIA_DRIVER_CAPABILITIES").as_deref(),
        Some("compute,utility"),
        "{env}"
    );
    assert_eq!(
        last("NVIDIA_VISIBLE_DEVICES").as_deref(),
        Some("1"),
        "{env}"
    );
    engine.remove(&id).await.unwrap();
}

#[tokio::test]
async fn the_listing_and_the_inspection_agree_on_created_running_and_exited() {
    use gpu_market_agent::runtime::ContainerState;
    let (host, image) = engine_env();
    let engine = DockerEngine::connect(&host, "engine-test-created")
        .await
        .expect("connect");
    engine.pull(&image).await.expect("pull");
    // It runs until it is stopped and then exits with 0, so it is still running when looked at
    // however slowly this machine goes; the 20 s sleep bounds it should the stop never come.
    let spec = ContainerSpec {
        image,
        cmd: Some(vec![
            "sh".into(),
            "-c".into(),
            "trap 'exit 0' TERM; echo ready; sleep 20 & wait".into(),
        ]),
        ..Default::default()
    };
    let id = engine.create(&spec).await.expect("create");
    let listed = || async {
        engine
            .managed()
            .await
            .unwrap()
            .into_iter()
            .find(|c| c.id == id)
            .expect("listed")
            .listed
    };
    // Created but not started: not running, and nothing to bill.
    assert_eq!(engine.state(&id).await.unwrap(), ContainerState::Created);
    assert_eq!(listed().await, Some(ContainerState::Created));
    engine.start(&id).await.expect("start");
    assert_eq!(engine.state(&id).await.unwrap(), ContainerState::Running);
    assert_eq!(listed().await, Some(ContainerState::Running));
    // Stopped once its trap is set (it says so), it exits at once, with 0.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !engine.logs(&id).await.unwrap().stdout.contains("ready") {
        assert!(
            std::time::Instant::now() < deadline,
            "the container never said it was ready"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    engine
        .stop(&id, std::time::Duration::from_secs(10))
        .await
        .expect("stop");
    assert_eq!(engine.wait(&id).await.unwrap(), 0);
    // Only the inspection tells the exit code.
    assert_eq!(
        engine.state(&id).await.unwrap(),
        ContainerState::Exited { code: 0 }
    );
    assert_eq!(listed().await, None);
    engine.remove(&id).await.expect("remove");
}

/// Over its budget, the store loses the agent's images that no container uses, the machine
/// does not advertise and no lease asked for lately; never one a container uses, an advertised
/// one, or one within the grace (`images::tests` has the order, and images not the agent's).
#[tokio::test]
async fn an_image_store_over_its_budget_loses_only_the_agents_unused_images() {
    let (host, _) = engine_env();
    // A scope of this run's own: the marks of another run's images are not this one's.
    let scope = format!("engine-test-gc-{}", std::process::id());
    let engine = DockerEngine::connect(&host, &scope).await.expect("connect");
    let running = support::pushed_image("gc-running", &[], 0);
    let advertised = support::pushed_image("gc-advertised", &[], 0);
    let unused = support::pushed_image("gc-unused", &[], 0);
    for (image, digest) in [&running, &advertised, &unused] {
        ContainerRuntime::pull(&engine, image, digest, None, u64::MAX)
            .await
            .expect("pull");
        // Marked used, within any budget: nothing goes.
        let removed = engine
            .collect_images(image, digest, &[], u64::MAX, Duration::ZERO)
            .await
            .unwrap();
        assert_eq!(removed, 0);
    }
    let id = engine
        .create(&ContainerSpec {
            image: gpu_market_agent::runtime::pinned_reference(&running.0, &running.1).unwrap(),
            ..Default::default()
        })
        .await
        .unwrap();
    let keep = [advertised.1];
    // Asked for within the grace: kept, however far over the budget.
    let removed = engine
        .collect_images(&running.0, &running.1, &keep, 0, Duration::from_secs(600))
        .await
        .unwrap();
    assert_eq!(removed, 0);
    let removed = engine
        .collect_images(&running.0, &running.1, &keep, 0, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(removed, 1);
    assert!(
        !stored(&unused.0, &unused.1).await,
        "the unused image stayed"
    );
    assert!(stored(&running.0, &running.1).await);
    assert!(stored(&advertised.0, &advertised.1).await);
    engine.remove(&id).await.unwrap();
    for (image, digest) in [&running, &advertised] {
        let pinned = gpu_market_agent::runtime::pinned_reference(image, digest).unwrap();
        forget_image(&host, &pinned).await;
    }
}
