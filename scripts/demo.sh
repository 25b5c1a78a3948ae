#!/usr/bin/env bash
# The README's demo command. On an embedded local default: the stock solana-test-validator with the
# program deployed, dockerd and a registry on 127.0.0.1:5000, real SPL tokens. Creates a market,
# shows it, and checks that the host side can pull and run the demo image from the local registry.
# Stops everything it started.
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"

RPC_PORT="${DEMO_RPC_PORT:-8899}"
URL="http://127.0.0.1:$RPC_PORT"
DEMO_DIR="$REPO_ROOT/target/demo"
mkdir -p "$DEMO_DIR"

apt_install docker.io docker-registry busybox-static curl
bash scripts/install-validator.sh
bash scripts/build-sbf.sh
log "building the client and the agent"
cargo build -q -p gpu-market-client -p gpu-market-agent
CLI="$REPO_ROOT/target/debug/gpu-market"
AGENT="$REPO_ROOT/target/debug/gpu-market-agent"

ENGINE_STARTED=0
bash scripts/engine.sh status || ENGINE_STARTED=1
VALIDATOR_PID=""
cleanup() {
    [ -n "$VALIDATOR_PID" ] && kill "$VALIDATOR_PID" 2>/dev/null && wait "$VALIDATOR_PID" 2>/dev/null
    [ "$ENGINE_STARTED" = 1 ] && bash scripts/engine.sh stop
    log "stopped what the demo started"
}
trap cleanup EXIT
bash scripts/engine.sh start
eval "$(bash scripts/engine.sh env)"

log "starting the local validator on $URL"
bash scripts/validator.sh --no-build --rpc-port "$RPC_PORT" --ledger "$DEMO_DIR/ledger" \
    > "$DEMO_DIR/validator.log" 2>&1 &
VALIDATOR_PID=$!
for _ in $(seq 1 240); do
    grep -q '^Program id:' "$DEMO_DIR/validator.log" && break
    kill -0 "$VALIDATOR_PID" 2>/dev/null || { cat "$DEMO_DIR/validator.log" >&2; die "the validator did not start"; }
    sleep 0.5
done
cat "$DEMO_DIR/validator.log"

json() { python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])"; }
cli() { "$CLI" --url "$URL" --keypair "$DEMO_DIR/authority.json" "$@"; }

echo
log "a market authority with SOL for fees"
"$CLI" keygen --outfile "$DEMO_DIR/authority.json" --force
cli airdrop 100

log "a token for stakes and payments (6 decimals) and a treasury account"
MINT=$(cli --output json token create-mint --decimals 6 | json mint)
TREASURY=$(cli --output json token create-account "$MINT" | json account)
cli token mint "$MINT" "$TREASURY" 1000000000 >/dev/null
echo "mint $MINT, treasury $TREASURY"

log "creating the market"
MARKET=$(cli --output json market init --stake-mint "$MINT" --treasury "$TREASURY" \
    --billing-interval-secs 10 --protocol-fee-bps 250 --unstake-cooldown-secs 60 | json market)
cli market show "$MARKET"

echo
log "the host side: pull and run the demo image from the local registry"
"$AGENT" check-engine "$GPU_MARKET_TEST_IMAGE"
echo
log "demo complete: market $MARKET on $URL"
