#!/usr/bin/env bash
# Installs the stock solana-test-validator from the agave 4.2.2 crates (the Agave install script
# and its prebuilt binaries cannot be downloaded here). Built once into $TOOLS_DIR/bin
# (~/.cache/gpu-market/bin), reused afterwards. A validator of the same major line (4.x) already
# on PATH (an Agave install's) is used as it is: nothing is built.
source "$(dirname "$0")/lib.sh"

VERSION=4.2.2
MAJOR=${VERSION%%.*}
if command -v solana-test-validator >/dev/null &&
    solana-test-validator --version 2>/dev/null | grep -q "^solana-test-validator $MAJOR\."; then
    log "using $(command -v solana-test-validator): $(solana-test-validator --version | cut -d' ' -f1-2)"
    exit 0
fi
apt_install clang libclang-dev libudev-dev protobuf-compiler cmake pkg-config libssl-dev
log "building solana-test-validator $VERSION from crates.io (long: RocksDB and the agave stack)"
cargo install agave-validator --version "$VERSION" --locked --bin solana-test-validator \
    --root "$TOOLS_DIR" --target-dir "$TOOLS_DIR/validator-build"
rm -rf "$TOOLS_DIR/validator-build"
solana-test-validator --version
