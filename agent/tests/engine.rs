//! The container runtime against the real Docker engine and the local registry started by
//! `scripts/engine.sh start` (the README's test command starts them).

use gpu_market_agent::docker::{ContainerSpec, DockerEngine};

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
