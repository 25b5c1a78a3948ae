//! `gpu-market-agent check` and `detect` as a host runs them before it registers a machine: the
//! binary, a configuration with only its `[gpu]` section and the README's sampling interval
//! (5 s), on SIMULATED GPUs (no hardware here; `scripts/gpu-check.sh` runs the same command on
//! real ones).

use std::path::Path;
use std::process::{Command, Output};

const GPU_ONLY_CONFIG: &str = r#"
billing_poll_interval_secs = 5

[gpu]
backend = "simulated"
mps_control = "{mps_control}"

[[gpu.simulated]]
class = 2
memory_gib = 24
topology_group = 1
power_w = [150, 450]
default_power_w = 350
core_lock_mhz = [210, 2520]
mem_lock_mhz = [405, 10501]
core_offset_mhz = [-200, 200]
mem_offset_mhz = [0, 0]
"#;

fn agent(dir: &Path, args: &[&str]) -> Output {
    let config = dir.join("agent.toml");
    // SIMULATED MPS: the check's daemon is the simulated control program's.
    let control = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/mps-control-simulated"
    );
    std::fs::write(&config, GPU_ONLY_CONFIG.replace("{mps_control}", control)).unwrap();
    Command::new(env!("CARGO_BIN_EXE_gpu-market-agent"))
        .args(args)
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap()
}

#[test]
fn check_passes_healthy_gpus_at_the_agents_sampling_rate_and_writes_its_report() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let out = agent(dir.path(), &["check", "--json", json.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("check passed"), "{stdout}");
    assert!(stdout.contains("power_limit_holds"), "{stdout}");
    assert!(
        stdout.contains("the --gpus file for `gpu-market host register`"),
        "{stdout}"
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["passed"], true);
    assert_eq!(report["sample_every_ms"], 5_000);
    let power = &report["power"][0];
    // Halfway from the minimum to the default, read 5 + 2 times at the agent's rate.
    assert_eq!(power["limit_w"], 250);
    assert_eq!(power["agent_readings_mw"].as_array().unwrap().len(), 7);
    assert_eq!(power["sustained_peak_w"], 250);
    assert_eq!(power["slashable"], false);
    let steps: Vec<(&str, &str)> = report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["step"].as_str().unwrap(), r["outcome"].as_str().unwrap()))
        .collect();
    for step in [
        "holds_under_load",
        "power_limit_holds",
        "mps_within_slice",
        "mps_over_slice",
        "reset",
    ] {
        assert!(steps.contains(&(step, "ok")), "{step}: {steps:?}");
    }
    // The file `host register --gpus` takes, from the same run.
    let file = report["gpus_file"].as_str().unwrap();
    assert!(file.contains("class = 2"), "{file}");
    assert!(file.contains("topology_group = 1"), "{file}");
}

#[test]
fn detect_needs_only_the_gpu_section() {
    let dir = tempfile::tempdir().unwrap();
    let out = agent(dir.path(), &["detect"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("power_w = [150, 450]"), "{text}");
}

#[test]
fn check_without_a_sampling_interval_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agent.toml");
    std::fs::write(
        &config,
        GPU_ONLY_CONFIG.replace("billing_poll_interval_secs = 5", ""),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gpu-market-agent"))
        .args(["check", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("billing_poll_interval_secs"), "{stderr}");
}
