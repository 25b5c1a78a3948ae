#!/usr/bin/env bash
# Builds the program to SBF: target/deploy/gpu_market.so (and copies the program keypair beside it
# as Anchor expects). Installs the toolchain first if it is missing.
source "$(dirname "$0")/lib.sh"

bash "$REPO_ROOT/scripts/install-sbf-toolchain.sh"
# shellcheck disable=SC1091
source "$TOOLS_DIR/sbf-env.sh"

TARGET_SPEC="$REPO_ROOT/scripts/sbf/bpfel-solana-solana.json"
SBF_TARGET_DIR="$REPO_ROOT/target/sbf"
RUSTFLAGS_SBF=(
    -C "linker=$SBF_LINKER" -Z unstable-options -C panic=immediate-abort
    -C relocation-model=static -C target-cpu=v3 -C target-feature=+allows-misaligned-mem-access
    -C link-arg=--llvm-args=--bpf-stack-size=4096
    -C link-arg=--llvm-args=--disable-ldsx -C link-arg=--llvm-args=--disable-movsx
    -C link-arg=--disable-math-builtins
)

log "building programs/gpu-market to SBF"
cd "$REPO_ROOT"
# Debian's cargo and rustc 1.96 (not rustup's): only they match the patched library sources.
env -u RUSTUP_TOOLCHAIN -u CARGO_BUILD_TARGET \
    RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1 RUSTC_BOOTSTRAP_SYNTHETIC_TARGET=1 \
    __CARGO_TESTS_ONLY_SRC_ROOT="$SBF_STD_DIR" \
    RUSTFLAGS="${RUSTFLAGS_SBF[*]}" \
    /usr/bin/cargo build --release -p gpu-market \
    --target "$TARGET_SPEC" -Z json-target-spec -Z build-std=std,panic_abort \
    --config 'unstable.build-std-features=[]' --target-dir "$SBF_TARGET_DIR"

mkdir -p target/deploy
cp "$SBF_TARGET_DIR/bpfel-solana-solana/release/libgpu_market.so" target/deploy/gpu_market.so
cp keys/gpu_market-keypair.json target/deploy/gpu_market-keypair.json
log "target/deploy/gpu_market.so ($(stat -c %s target/deploy/gpu_market.so) bytes), program id $(program_id)"
