//! `cargo run -p gpu-market-idl [OUT]`: builds the program's IDL through its `idl-build` feature
//! (as `anchor idl build` does, without the Anchor CLI) and writes it as JSON.

use std::path::PathBuf;

use anyhow::{Context, Result};

fn main() -> Result<()> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("idl/gpu_market.json"));
    // anchor-lang-idl 0.1.4 passes the literal "+{toolchain}" to cargo when RUSTUP_TOOLCHAIN is
    // set (as `cargo run` sets it): build with the default toolchain instead. Nothing else
    // runs yet, so changing the environment is sound.
    std::env::remove_var("RUSTUP_TOOLCHAIN");
    let idl = anchor_lang_idl::build::IdlBuilder::new()
        .program_path(root.join("programs/gpu-market"))
        .build()
        .context("building the IDL (cargo test __anchor_private_print_idl --features idl-build)")?;
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&out, serde_json::to_string_pretty(&idl)? + "\n")
        .with_context(|| format!("cannot write {}", out.display()))?;
    println!(
        "{}: {} instructions, {} accounts, {} events, {} errors",
        out.display(),
        idl.instructions.len(),
        idl.accounts.len(),
        idl.events.len(),
        idl.errors.len()
    );
    Ok(())
}
