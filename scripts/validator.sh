#!/usr/bin/env bash
# Starts a local validator on 127.0.0.1 with the program's SBF build deployed, prints the RPC URL
# and the program id, and runs until Ctrl-C or SIGTERM, then stops what it started.
#
#   scripts/validator.sh [--rpc-port 8899] [--ledger DIR] [--no-build]
#
# The websocket listens on the RPC port + 1 (8900 by default), the faucet on the RPC port + 1001,
# gossip on the RPC port + 2 and the validator's other ports on the 64 after it: every port
# follows the RPC port, so that a second validator (Anchor's, a test's) can run beside it. Note: in agave 4.2.2 the RPC and
# pubsub sockets listen on 0.0.0.0 whatever --bind-address says; run it where that is harmless.
source "$(dirname "$0")/lib.sh"

RPC_PORT=8899
LEDGER="$REPO_ROOT/target/test-ledger"
BUILD=1
while [ $# -gt 0 ]; do
    case "$1" in
        --rpc-port) RPC_PORT="$2"; shift 2 ;;
        --ledger) LEDGER="$2"; shift 2 ;;
        --no-build) BUILD=0; shift ;;
        *) die "unknown option $1 (see the comment at the top of $0)" ;;
    esac
done

bash "$REPO_ROOT/scripts/install-validator.sh"
[ "$BUILD" = 1 ] && bash "$REPO_ROOT/scripts/build-sbf.sh"
SO="$REPO_ROOT/target/deploy/gpu_market.so"
[ -f "$SO" ] || die "$SO is missing: run scripts/build-sbf.sh"
PROGRAM_ID="$(program_id)"

mkdir -p "$LEDGER"
# Beside the ledger, not in it: `--reset` empties the ledger folder after the shell opened it.
OUT="$LEDGER.out"
solana-test-validator --ledger "$LEDGER" --reset --quiet --bind-address 127.0.0.1 \
    --rpc-port "$RPC_PORT" --faucet-port "$((RPC_PORT + 1001))" \
    --gossip-port "$((RPC_PORT + 2))" --dynamic-port-range "$((RPC_PORT + 3))-$((RPC_PORT + 67))" \
    --bpf-program "$PROGRAM_ID" "$SO" >"$OUT" 2>&1 &
VALIDATOR_PID=$!
stop() {
    kill "$VALIDATOR_PID" 2>/dev/null || true
    wait "$VALIDATOR_PID" 2>/dev/null || true
}
trap 'stop; exit 0' INT TERM
trap stop EXIT

URL="http://127.0.0.1:$RPC_PORT"
for _ in $(seq 1 240); do
    if curl -fsS -X POST -H 'content-type: application/json' \
        -d '{"jsonrpc":"2.0","id":1,"method":"getHealth"}' "$URL" 2>/dev/null | grep -q '"ok"'; then
        break
    fi
    kill -0 "$VALIDATOR_PID" 2>/dev/null || { tail -30 "$OUT" >&2; die "the validator exited"; }
    sleep 0.5
done
echo "RPC URL:    $URL"
echo "Websocket:  ws://127.0.0.1:$((RPC_PORT + 1))"
echo "Program id: $PROGRAM_ID"
echo "Ledger:     $LEDGER (Ctrl-C to stop)"
wait "$VALIDATOR_PID"
