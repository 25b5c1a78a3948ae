//! The market page's sealing (`client/src/serve/web/seal.mjs`, served at /web/seal.mjs) against
//! the sdk's envelope: what the browser seals for a bid, the agent opens with
//! `envelope::open_env`, and the hash the browser computes from the wallet's signature is the one
//! `bid place --env FILE` computes from the same key and text. And the committed bundles are what
//! their sources and pinned libraries build (`client/web`, `node build.mjs`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use gpu_market_sdk::envelope::{self, EnvelopeError, Environment};
use gpu_market_sdk::offchain;
use serde_json::{json, Value};
use solana_keypair::Keypair;
use solana_signer::Signer;

fn web() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("web")
}

/// The committed bundles' folder.
fn bundles() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/serve/web")
}

/// Runs the committed bundle in Node as the page imports it (an ES module), with `request` on
/// its standard input: `{"plain", "signature", "recipients"}`
/// in hex → `{"hash", "sealed": [...]}` in hex, or `{"error"}` for each recipient it refused.
fn browser_seal(request: &Value) -> Value {
    const SCRIPT: &str = r#"
const fs = require('node:fs');
const { pathToFileURL } = require('node:url');
import(pathToFileURL(process.argv[1]).href).then((gpuMarketSeal) => {
const hex = (b) => Buffer.from(b).toString('hex');
const bytes = (h) => new Uint8Array(Buffer.from(h, 'hex'));
const r = JSON.parse(fs.readFileSync(0, 'utf8'));
const env = gpuMarketSeal.environment(bytes(r.plain), bytes(r.signature));
const sealed = r.recipients.map((k) => {
  try { return hex(gpuMarketSeal.seal(env.salted, bytes(k))); } catch (e) { return { error: e.message }; }
});
process.stdout.write(JSON.stringify({ digest: hex(gpuMarketSeal.digest(bytes(r.plain))), hash: hex(env.hash), sealed }));
});
"#;
    let mut child = Command::new("node")
        .args(["-e", SCRIPT])
        .arg(bundles().join("seal.mjs"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("node runs (bash scripts/browser.sh installs it)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(request.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "node failed");
    serde_json::from_slice(&out.stdout).unwrap()
}

fn unhex(v: &Value) -> Vec<u8> {
    hex::decode(v.as_str().unwrap_or_else(|| panic!("not hex: {v}"))).unwrap()
}

#[test]
fn what_the_page_seals_the_agent_opens_and_its_hash_is_the_clis() {
    let client = Keypair::new();
    let agents = [Keypair::new(), Keypair::new()];
    let plain = b"HF_TOKEN=hf_abc123\nWANDB_MODE=offline\n".to_vec();
    // The wallet's signature of the salt's message, as `solana:signMessage` gives it.
    let signature = offchain::sign(&client, &envelope::salt_text(&plain)).unwrap();
    let mut recipients: Vec<String> = agents
        .iter()
        .map(|a| hex::encode(a.pubkey().to_bytes()))
        .collect();
    // An attacker's "agent key" that is not a point of the curve, and one of small order (the
    // identity): sealing to them is refused, as the sdk refuses it.
    let off_curve = (0u8..=255)
        .map(|b| [b; 32])
        .find(|k| {
            envelope::seal(b"x", &solana_pubkey::Pubkey::new_from_array(*k))
                == Err(EnvelopeError::BadRecipient)
        })
        .unwrap();
    let mut identity = [0u8; 32];
    identity[0] = 1;
    recipients.extend([hex::encode(off_curve), hex::encode(identity)]);
    let answer = browser_seal(&json!({
        "plain": hex::encode(&plain),
        "signature": hex::encode(signature.as_ref()),
        "recipients": recipients,
    }));

    // The hash the bid stores is the CLI's for the same key and text.
    let cli = Environment::new(&plain, &client).unwrap();
    assert_eq!(unhex(&answer["hash"]), cli.hash());
    assert_eq!(unhex(&answer["digest"]), sha2_of(&plain));
    let sealed = answer["sealed"].as_array().unwrap();
    for (i, agent) in agents.iter().enumerate() {
        let copy = unhex(&sealed[i]);
        assert!(copy.starts_with(envelope::MAGIC));
        // Its agent opens it, checked against the bid's hash; the other agent cannot.
        assert_eq!(
            envelope::open_env(&copy, agent, &cli.hash()).unwrap(),
            plain
        );
        assert_eq!(
            envelope::open_env(&copy, &agents[1 - i], &cli.hash()),
            Err(EnvelopeError::CannotOpen)
        );
        // A byte changed anywhere is refused.
        let mut altered = copy.clone();
        *altered.last_mut().unwrap() ^= 1;
        assert_eq!(
            envelope::open(&altered, agent),
            Err(EnvelopeError::CannotOpen)
        );
    }
    // A fresh ephemeral key each time: the two copies share nothing but the header.
    assert_ne!(unhex(&sealed[0])[8..40], unhex(&sealed[1])[8..40]);
    for refused in &sealed[2..] {
        assert!(refused["error"].is_string(), "{refused}");
    }
}

fn sha2_of(bytes: &[u8]) -> Vec<u8> {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).to_vec()
}

#[test]
fn the_served_bundles_are_what_their_sources_and_pinned_libraries_build() {
    assert!(
        web().join("node_modules/esbuild").exists(),
        "client/web's pinned packages are missing: run `bash scripts/browser.sh`"
    );
    let out = tempfile::tempdir().unwrap();
    let status = Command::new("node")
        .arg(web().join("build.mjs"))
        .arg(out.path())
        .status()
        .unwrap();
    assert!(status.success());
    let names = |dir: &Path| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    assert_eq!(names(out.path()), names(&bundles()));
    for name in names(out.path()) {
        assert!(
            std::fs::read(out.path().join(&name)).unwrap()
                == std::fs::read(bundles().join(&name)).unwrap(),
            "client/src/serve/web/{name} is not what client/web builds: run `node build.mjs` there"
        );
    }
}
