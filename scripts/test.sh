#!/usr/bin/env bash
# The README's test command: installs what the tests need (skipping what is there), builds the
# program to SBF, starts the container engine and the local registry, and runs every test of the
# workspace with cargo-nextest under `anchor test` (Anchor's validator with the program deployed;
# see Anchor.toml). Arguments go to nextest. Stops what it started.
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
START=$(date +%s)
stamp() { log "[$(( $(date +%s) - START ))s] $*"; }

apt_install docker.io docker-registry busybox-static curl python3 clang libclang-dev libudev-dev \
    protobuf-compiler cmake pkg-config libssl-dev
if ! cargo nextest --version >/dev/null 2>&1; then
    stamp "installing cargo-nextest"
    cargo install cargo-nextest --locked
fi

# The validator is the longest build on a fresh machine and spends much of it on one core:
# build it beside the program and the tests.
stamp "installing solana-test-validator (in the background)"
bash scripts/install-validator.sh > "$TOOLS_DIR/validator-install.log" 2>&1 &
VALIDATOR_INSTALL=$!
stamp "installing anchor-cli (in the background)"
bash scripts/install-anchor.sh > "$TOOLS_DIR/anchor-install.log" 2>&1 &
ANCHOR_INSTALL=$!
ENGINE_STARTED=0
# Keeps the tests' exit status: nothing here may turn a pass into a failure.
cleanup() {
    local rc=$?
    kill "$VALIDATOR_INSTALL" "$ANCHOR_INSTALL" 2>/dev/null || true
    if [ "$ENGINE_STARTED" = 1 ]; then bash scripts/engine.sh stop || true; fi
    exit "$rc"
}
trap cleanup EXIT

# A clean clone builds once: incremental state would only take disk (gigabytes here).
if [ "${CI:-}" = true ]; then export CARGO_INCREMENTAL=0; fi
stamp "disk free here: $(df -h --output=avail . | tail -1 | tr -d ' ')"

stamp "installing what the browser test needs"
bash scripts/browser.sh
stamp "checking formatting"
cargo fmt --all --check
stamp "building the program to SBF"
bash scripts/build-sbf.sh
stamp "building the tests"
cargo nextest run --workspace --no-run
stamp "waiting for solana-test-validator"
if ! wait "$VALIDATOR_INSTALL"; then
    tail -40 "$TOOLS_DIR/validator-install.log" >&2
    die "installing solana-test-validator failed"
fi
stamp "waiting for anchor-cli"
if ! wait "$ANCHOR_INSTALL"; then
    tail -40 "$TOOLS_DIR/anchor-install.log" >&2
    die "installing anchor-cli failed"
fi
# The wallet `anchor test` funds on its validator and hands the tests (ANCHOR_WALLET).
WALLET="$TOOLS_DIR/anchor-test-wallet.json"
[ -f "$WALLET" ] || target/debug/gpu-market keygen --outfile "$WALLET" >/dev/null

bash scripts/engine.sh status || ENGINE_STARTED=1
bash scripts/engine.sh start
eval "$(bash scripts/engine.sh env)"

stamp "running the tests under anchor test"
GPU_MARKET_TEST_ARGS="$(printf '%q ' "$@")" \
    anchor test --skip-build --validator legacy --provider.wallet "$WALLET"
stamp "done"
