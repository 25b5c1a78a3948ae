#!/usr/bin/env bash
# Installs what building the program to SBF needs, without Solana's platform-tools (which cannot
# be downloaded here): Debian's rustc-web 1.96 (LLVM 22), its std sources patched for
# `target_os = "solana"`, and sbpf-linker 0.2.6 built against the system LLVM with the SBF fix-up
# pass added to its bpf-linker. Idempotent: each step is skipped when its result is already there
# and was made from the same patches.
source "$(dirname "$0")/lib.sh"

SBF_DIR="$REPO_ROOT/scripts/sbf"
stamp_of() { cat "$@" | sha256sum | cut -c1-16; }

apt_install rustc-web cargo-web rust-web-src libstd-rust-web-dev-bpf llvm-22-dev \
    zlib1g-dev libzstd-dev

# 1. The std library sources, patched.
STD_STAMP="$(stamp_of "$SBF_DIR/std-1.96-solana.patch")"
STD_DIR="$TOOLS_DIR/rust-library-$STD_STAMP"
if [ ! -f "$STD_DIR/.done" ]; then
    log "patching Debian's rust library sources for target_os = solana"
    rm -rf "$STD_DIR"
    mkdir -p "$STD_DIR"
    cp -a /usr/lib/rustlib/src/rust/library/. "$STD_DIR/"
    patch -s -d "$STD_DIR" -p1 < "$SBF_DIR/std-1.96-solana.patch"
    touch "$STD_DIR/.done"
fi

# 2. sbpf-linker with the fix-up pass.
LINKER_STAMP="$(stamp_of "$SBF_DIR/sbpf-linker-0.2.6-Cargo.patch" "$SBF_DIR/bpf-linker-0.13.0-sbf-fixups.patch")"
LINKER_DIR="$TOOLS_DIR/sbpf-linker-$LINKER_STAMP"
LINKER="$LINKER_DIR/sbpf-linker/target/release/sbpf-linker"
if [ ! -x "$LINKER" ]; then
    log "building sbpf-linker 0.2.6 against LLVM 22 (about 5 minutes on 2 cores)"
    rm -rf "$LINKER_DIR"  # a half-built earlier try
    mkdir -p "$LINKER_DIR/fetch/src"
    # Fetch the two crates' sources from crates.io with cargo itself.
    cat > "$LINKER_DIR/fetch/Cargo.toml" <<'TOML'
[package]
name = "fetch-sbpf-linker"
version = "0.0.0"
edition = "2021"
[dependencies]
sbpf-linker = { version = "=0.2.6", default-features = false }
bpf-linker = { version = "=0.13.0", default-features = false }
TOML
    touch "$LINKER_DIR/fetch/src/lib.rs"
    (cd "$LINKER_DIR/fetch" && cargo fetch -q)
    for c in sbpf-linker-0.2.6 bpf-linker-0.13.0; do
        crate_file="$(ls "${CARGO_HOME:-$HOME/.cargo}"/registry/cache/*/"$c.crate" | head -n1)"
        tar -xzf "$crate_file" -C "$LINKER_DIR"
        mv "$LINKER_DIR/$c" "$LINKER_DIR/${c%-*}"
    done
    patch -s -d "$LINKER_DIR/sbpf-linker" -p1 < "$SBF_DIR/sbpf-linker-0.2.6-Cargo.patch"
    patch -s -d "$LINKER_DIR/bpf-linker" -p1 < "$SBF_DIR/bpf-linker-0.13.0-sbf-fixups.patch"
    (cd "$LINKER_DIR/sbpf-linker" &&
        RUSTUP_TOOLCHAIN=stable LLVM_PREFIX=/usr/lib/llvm-22 PATH="/usr/lib/llvm-22/bin:$PATH" \
            cargo build -q --release --no-default-features --features system-llvm22)
fi

cat > "$TOOLS_DIR/sbf-env.sh" <<ENV
SBF_STD_DIR="$STD_DIR"
SBF_LINKER="$LINKER"
ENV
log "SBF toolchain ready: $LINKER"
