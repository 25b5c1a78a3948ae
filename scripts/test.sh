#!/usr/bin/env bash
# The README's test command: installs what the tests need (skipping what is there), builds the
# program to SBF, starts the container engine, the local registry and a local validator with the
# program deployed, each on free loopback ports, and runs every test of the workspace with
# cargo-nextest under `anchor test` on that validator (see Anchor.toml). Arguments go to nextest.
# Stops what it started.
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
VALIDATOR_PID=""
# Keeps the tests' exit status: nothing here may turn a pass into a failure.
cleanup() {
    local rc=$?
    kill "$VALIDATOR_INSTALL" "$ANCHOR_INSTALL" ${TEST_BUILD:-} 2>/dev/null || true
    if [ -n "$VALIDATOR_PID" ]; then
        kill "$VALIDATOR_PID" 2>/dev/null || true
        wait "$VALIDATOR_PID" 2>/dev/null || true
    fi
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
# The program (its own toolchain and target folder) and the tests build side by side: neither
# needs the other until the tests run.
stamp "building the tests (in the background; log: target/test-build.log) and the program to SBF"
mkdir -p target
cargo nextest run --workspace --no-run > target/test-build.log 2>&1 &
TEST_BUILD=$!
bash scripts/build-sbf.sh
stamp "waiting for the test build"
if ! wait "$TEST_BUILD"; then
    tail -60 target/test-build.log >&2
    die "building the tests failed (log: target/test-build.log)"
fi
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
# The wallet that pays for the tests (ANCHOR_WALLET): the genesis SOL goes to it.
WALLET="$TOOLS_DIR/anchor-test-wallet.json"
[ -f "$WALLET" ] || target/debug/gpu-market keygen --outfile "$WALLET" >/dev/null

bash scripts/engine.sh status || ENGINE_STARTED=1
bash scripts/engine.sh start
eval "$(bash scripts/engine.sh env)"

# The suite's validator, on a block of ports chosen free (whatever else holds 8899 or 8000 here),
# started here and handed to `anchor test` as its cluster: Anchor's own validator would take
# the fixed default ports.
RPC_PORT="$(free_port_block 68)"
URL="http://127.0.0.1:$RPC_PORT"
LEDGER="$REPO_ROOT/target/suite-ledger"
stamp "starting the suite's validator on $URL (ports $RPC_PORT-$((RPC_PORT + 67)) and $((RPC_PORT + 1001)); log: $LEDGER.log)"
bash scripts/validator.sh --no-build --rpc-port "$RPC_PORT" --ledger "$LEDGER" \
    --mint "$(pubkey_of "$WALLET")" > "$LEDGER.log" 2>&1 &
VALIDATOR_PID=$!
until grep -q '^Program id:' "$LEDGER.log"; do
    kill -0 "$VALIDATOR_PID" 2>/dev/null || { cat "$LEDGER.log" >&2; die "the suite's validator did not start"; }
    sleep 0.5
done

stamp "running the tests under anchor test"
GPU_MARKET_TEST_ARGS="$(printf '%q ' "$@")" \
    anchor test --skip-build --skip-deploy --skip-local-validator --validator legacy \
    --provider.cluster "$URL" --provider.wallet "$WALLET"
stamp "done"
