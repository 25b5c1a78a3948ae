//! `cargo run -p gpu-market-idl [OUT]`: builds the program's IDL through its `idl-build` feature
//! (as `anchor idl build` does) and writes it as JSON (`idl/gpu_market.json`), with its
//! TypeScript type beside it (`idl/gpu_market.ts`, `anchor idl type`'s: `Program<GpuMarket>` of
//! `@anchor-lang/core`).

use std::path::{Path, PathBuf};
use std::process::Command;

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
    let mut idl = anchor_lang_idl::build::IdlBuilder::new()
        .program_path(root.join("programs/gpu-market"))
        .build()
        .context("building the IDL (cargo test __anchor_private_print_idl --features idl-build)")?;
    // The book's entries come in as the types of a print that is no event (see
    // `gpu_market::state::book::__anchor_private_print_idl_book_entries`): keep the types only.
    let before = idl.events.len();
    idl.events.retain(|e| e.name != BOOK_ENTRIES_PRINT);
    anyhow::ensure!(
        idl.events.len() + 1 == before && idl.types.iter().any(|t| t.name == "BookSlot"),
        "the IDL lacks the book's entries (the {BOOK_ENTRIES_PRINT} print)"
    );
    Ok(idl)
}

/// `gpu_market::state::BOOK_ENTRIES_PRINT`, which exists in the `idl-build` build only.
const BOOK_ENTRIES_PRINT: &str = "BookEntries";

/// The IDL as `idl/gpu_market.json` holds it.
fn render(idl: &Idl) -> Result<String> {
    Ok(serde_json::to_string_pretty(idl)? + "\n")
}

/// Writes the IDL `json` holds as its TypeScript type at `ts`, with the Anchor CLI the README's
/// test command installs (its camelCase conversion is Anchor's own, not copied here).
fn typescript(root: &Path, json: &Path, ts: &Path) -> Result<()> {
    let status = Command::new("anchor")
        .args(["idl", "type"])
        .arg(json)
        .arg("-o")
        .arg(ts)
        .current_dir(root)
        .status()
        .context("running `anchor idl type` (the Anchor CLI: `bash scripts/install-anchor.sh`)")?;
    anyhow::ensure!(status.success(), "`anchor idl type` failed: {status}");
    Ok(())
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
    typescript(&root, &out, &out.with_extension("ts"))?;
    println!(
        "{} (and .ts): {} instructions, {} accounts, {} events, {} errors",
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

    /// Integrators read `idl/gpu_market.json` alone (and TypeScript ones its type,
    /// `idl/gpu_market.ts`): both must be what the program builds now.
    #[test]
    fn the_committed_idl_and_its_typescript_type_are_the_programs() {
        let root = root();
        let built = render(&build(&root).unwrap()).unwrap();
        let committed = std::fs::read_to_string(root.join("idl/gpu_market.json")).unwrap();
        assert!(
            built == committed,
            "idl/gpu_market.json is not the program's IDL: run `cargo run -p gpu-market-idl`"
        );
        let dir = std::env::temp_dir().join(format!("gpu-market-idl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ts = dir.join("gpu_market.ts");
        typescript(&root, &root.join("idl/gpu_market.json"), &ts).unwrap();
        let typed = std::fs::read_to_string(&ts).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            typed == std::fs::read_to_string(root.join("idl/gpu_market.ts")).unwrap(),
            "idl/gpu_market.ts is not the IDL's type: run `cargo run -p gpu-market-idl`"
        );
    }
}
