//! `-k/--keypair` takes the Solana CLI's signer sources (through `solana-clap-utils`): a
//! keypair file, `stdin://` or `-` (a keypair's JSON on standard input) and `prompt://` (a seed phrase typed
//! at the terminal), against a private solana-test-validator.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::*;
use serde_json::Value;
use solana_keypair::Keypair;
use solana_signer::Signer;

/// Runs `command` with `input` on its standard input; its output.
fn fed(mut command: Command, input: &str) -> std::process::Output {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).unwrap();
    drop(stdin);
    child.wait_with_output().unwrap()
}

/// `gpu-market --keypair SOURCE ARGS…` with `input` on standard input; its JSON output.
fn with_stdin(t: &T, source: &str, args: &[&str], input: &str) -> Value {
    let mut command = Command::new(env!("CARGO_BIN_EXE_gpu-market"));
    command
        .args([
            "--url",
            &t.cluster.rpc_url,
            "--output",
            "json",
            "--keypair",
            source,
        ])
        .args(args);
    let out = fed(command, input);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?}: {stderr}");
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn a_keypair_on_standard_input_or_from_a_typed_seed_phrase_signs() {
    let t = T::start();
    // stdin:// (or -): the keypair's JSON, read once for the whole command (airdrop, then a mint it signs
    // and pays for).
    let key = Keypair::new();
    let json = serde_json::to_string(&key.to_bytes().to_vec()).unwrap();
    let out = with_stdin(&t, "stdin://", &["airdrop", "2"], &json);
    assert_eq!(pk(&out["pubkey"]), key.pubkey());
    let out = with_stdin(&t, "-", &["token", "create-mint", "--decimals", "6"], &json);
    assert!(t.exists(&pk(&out["mint"])), "{out}");

    // prompt://: a seed phrase and an empty passphrase typed at a terminal (`script` gives the
    // command one); the key is the one the phrase derives at the Solana CLI's default path.
    let phrase = "abandon abandon abandon abandon abandon abandon abandon abandon abandon \
                  abandon abandon about";
    let seed = solana_seed_phrase::generate_seed_from_seed_phrase_and_passphrase(phrase, "");
    let expected =
        solana_keypair::seed_derivable::keypair_from_seed_and_derivation_path(&seed, None)
            .unwrap()
            .pubkey();
    let command = format!(
        "{} --url {} --output json --keypair prompt:// airdrop 1",
        env!("CARGO_BIN_EXE_gpu-market"),
        t.cluster.rpc_url
    );
    let mut script = Command::new("script");
    script.args(["-qec", &command, "/dev/null"]);
    let out = fed(script, &format!("{phrase}\n\n"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("seed phrase"),
        "the terminal was asked: {text}"
    );
    let record: Value = text
        .lines()
        .find_map(|l| serde_json::from_str(l.trim()).ok())
        .unwrap_or_else(|| panic!("no JSON in {text}"));
    assert_eq!(pk(&record["pubkey"]), expected);

    // A hardware wallet goes through the library's HID transport: with no device attached
    // (as on every test machine), one clear line saying so.
    let e = t.fails(std::path::Path::new("usb://ledger"), &["airdrop", "1"]);
    assert!(
        e.contains("cannot use the hardware wallet usb://ledger: no device found"),
        "{e}"
    );
}
