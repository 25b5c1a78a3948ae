#!/usr/bin/env bash
# Installs the stock solana-test-validator from the agave 4.2.2 crates (the Agave install script
# and its prebuilt binaries cannot be downloaded here). Built once into $TOOLS_DIR/bin
# (~/.cache/gpu-market/bin), reused afterwards.
source "$(dirname "$0")/lib.sh"

VERSION=4.2.2
if command -v solana-test-validator >/dev/null &&
    solana-test-validator --version 2>/dev/null | grep -q "solana-test-validator $VERSION"; then
    exit 0
fi
apt_install clang libclang-dev libudev-dev protobuf-compiler cmake pkg-config libssl-dev
log "building solana-test-validator $VERSION from crates.io (long: RocksDB and the agave stack)"
cargo install agave-validator --version "$VERSION" --locked --bin solana-test-validator \
    --root "$TOOLS_DIR" --target-dir "$TOOLS_DIR/validator-build"
rm -rf "$TOOLS_DIR/validator-build"
solana-test-validator --version
