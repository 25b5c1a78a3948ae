//! `cargo run -p gpu-market-idl [OUT]`: builds the program's IDL through its `idl-build` feature
//! (as `anchor idl build` does, without the Anchor CLI) and writes it as JSON.

use std::path::{Path, PathBuf};

use anchor_lang_idl::types::Idl;
use anyhow::{Context, Result};

/// The repository's root.
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The program's IDL as its `idl-build` feature builds it. Changes the process's environment:
/// call it before anything else runs.
fn build(root: &Path) -> Result<Idl> {
    // anchor-lang-idl 0.1.4 passes the literal "+{toolchain}" to cargo when RUSTUP_TOOLCHAIN is
    // set (as `cargo run` sets it): build with the default toolchain instead.
    std::env::remove_var("RUSTUP_TOOLCHAIN");
    anchor_lang_idl::build::IdlBuilder::new()
        .program_path(root.join("programs/gpu-market"))
        .build()
        .context("building the IDL (cargo test __anchor_private_print_idl --features idl-build)")
}

/// The IDL as `idl/gpu_market.json` holds it.
fn render(idl: &Idl) -> Result<String> {
    Ok(serde_json::to_string_pretty(idl)? + "\n")
}

fn main() -> Result<()> {
    let root = root();
    let out = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("idl/gpu_market.json"));
    let idl = build(&root)?;
    if let Some(dir) = out.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&out, render(&idl)?)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Integrators read `idl/gpu_market.json` alone: it must be what the program builds now.
    #[test]
    fn the_committed_idl_is_the_programs() {
        let root = root();
        let built = render(&build(&root).unwrap()).unwrap();
        let committed = std::fs::read_to_string(root.join("idl/gpu_market.json")).unwrap();
        assert!(
            built == committed,
            "idl/gpu_market.json is not the program's IDL: run `cargo run -p gpu-market-idl`"
        );
    }
}
