//! The CLI's manners where no cluster is needed: a reader that goes away ends a command quietly,
//! and shells get completion scripts.

use std::process::{Command, Stdio};

fn cli() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gpu-market"))
}

#[test]
fn a_closed_standard_output_ends_the_command_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let outfile = dir.path().join("k.json");
    // A pipe whose reader is gone before the command writes: every write fails with EPIPE, as
    // when `gpu-market … | head` has read its lines.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = cli()
        .args(["--output", "json", "keygen", "--outfile"])
        .arg(&outfile)
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(stderr.is_empty(), "{stderr}");
    assert!(outfile.exists(), "the command did its work before it wrote");
}

#[test]
fn completion_scripts_name_every_verb() {
    for shell in ["bash", "zsh", "fish"] {
        let out = cli().args(["completions", shell]).output().unwrap();
        assert!(out.status.success(), "{shell}");
        let script = String::from_utf8(out.stdout).unwrap();
        for verb in ["keeper", "reclaim", "audit", "inactive", "seal"] {
            assert!(script.contains(verb), "{shell}: no {verb}");
        }
    }
    let out = cli().args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}
