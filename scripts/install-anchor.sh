#!/usr/bin/env bash
# Installs anchor-cli 1.2.2 (the Anchor version the program is built with, Anchor.toml's
# [toolchain]) from crates.io into $TOOLS_DIR/bin, once; an `anchor` 1.2.2 already on PATH is
# used as it is. About 6 minutes on 2 cores.
source "$(dirname "$0")/lib.sh"

VERSION=1.2.2
if command -v anchor >/dev/null && anchor --version 2>/dev/null | grep -q "^anchor-cli $VERSION$"; then
    log "using $(command -v anchor): $(anchor --version)"
    exit 0
fi
log "building anchor-cli $VERSION from crates.io"
cargo install anchor-cli --version "$VERSION" --locked --root "$TOOLS_DIR" \
    --target-dir "$TOOLS_DIR/anchor-build"
rm -rf "$TOOLS_DIR/anchor-build"
anchor --version
