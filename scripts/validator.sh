#!/usr/bin/env bash
# Starts a local validator on 127.0.0.1 with the program's SBF build deployed, prints the RPC URL
# and the program id, and runs until Ctrl-C or SIGTERM, then stops what it started.
#
#   scripts/validator.sh [--rpc-port 8899] [--ledger DIR] [--mint PUBKEY] [--no-build]
#
# --mint: the key the genesis SOL goes to (the faucet's otherwise), as under `anchor test`.
#
# The websocket listens on the RPC port + 1 (8900 by default), the faucet on the RPC port + 1001,
# gossip on the RPC port + 2 and the validator's other ports on the 64 after it: every port
# follows the RPC port, so that a second validator (Anchor's, a test's) can run beside it. Note: in agave 4.2.2 the RPC and
# pubsub sockets listen on 0.0.0.0 whatever --bind-address says; run it where that is harmless.
# A port another program holds is named, with that program, before anything starts.
source "$(dirname "$0")/lib.sh"

RPC_PORT=8899
LEDGER="$REPO_ROOT/target/test-ledger"
BUILD=1
MINT=()
while [ $# -gt 0 ]; do
    case "$1" in
        --rpc-port) RPC_PORT="$2"; shift 2 ;;
        --ledger) LEDGER="$2"; shift 2 ;;
        --mint) MINT=(--mint "$2"); shift 2 ;;
        --no-build) BUILD=0; shift ;;
        *) die "unknown option $1 (see the comment at the top of $0)" ;;
    esac
done

bash "$REPO_ROOT/scripts/install-validator.sh"
[ "$BUILD" = 1 ] && bash "$REPO_ROOT/scripts/build-sbf.sh"
SO="$REPO_ROOT/target/deploy/gpu_market.so"
[ -f "$SO" ] || die "$SO is missing: run scripts/build-sbf.sh"
PROGRAM_ID="$(program_id)"

PORTS=("$RPC_PORT:its RPC port" "$((RPC_PORT + 1)):its websocket" "$((RPC_PORT + 2)):its gossip port"
    "$((RPC_PORT + 1001)):its faucet")
for p in $(seq "$((RPC_PORT + 3))" "$((RPC_PORT + 67))"); do PORTS+=("$p:one of its dynamic ports"); done
require_free_ports "${PORTS[@]}"

mkdir -p "$LEDGER"
# Beside the ledger, not in it: `--reset` empties the ledger folder after the shell opened it.
OUT="$LEDGER.out"
# History: `lease audit`, and `lease show` of a settled lease, read proofs and settlements back
# from the ledger. solana-test-validator keeps 10,000 shreds by default, a few minutes of slots
# (fewer under load: the demo's audit once found none of a lease's proofs a minute after they
# landed, under the whole suite's traffic); 250,000 keep over an hour, in at most a few hundred MB.
solana-test-validator --ledger "$LEDGER" --reset --quiet --bind-address 127.0.0.1 \
    --limit-ledger-size 250000 \
    --rpc-port "$RPC_PORT" --faucet-port "$((RPC_PORT + 1001))" \
    --gossip-port "$((RPC_PORT + 2))" --dynamic-port-range "$((RPC_PORT + 3))-$((RPC_PORT + 67))" \
    --bpf-program "$PROGRAM_ID" "$SO" "${MINT[@]}" >"$OUT" 2>&1 &
VALIDATOR_PID=$!
stop() {
    kill "$VALIDATOR_PID" 2>/dev/null || true
    wait "$VALIDATOR_PID" 2>/dev/null || true
}
trap 'stop; exit 0' INT TERM
trap stop EXIT

URL="http://127.0.0.1:$RPC_PORT"
healthy() {
    curl -fsS -X POST -H 'content-type: application/json' \
        -d '{"jsonrpc":"2.0","id":1,"method":"getHealth"}' "$URL" 2>/dev/null | grep -q '"ok"'
}
# A loaded 2-core machine can take a minute or more to bring a fresh ledger up.
for _ in $(seq 1 480); do
    healthy && break
    kill -0 "$VALIDATOR_PID" 2>/dev/null || { tail -30 "$OUT" >&2; die "the validator exited (log: $OUT)"; }
    sleep 0.5
done
healthy || { tail -30 "$OUT" >&2; die "the validator did not answer on $URL within 4 minutes (log: $OUT)"; }
echo "RPC URL:    $URL"
echo "Websocket:  ws://127.0.0.1:$((RPC_PORT + 1))"
echo "Program id: $PROGRAM_ID"
echo "Ledger:     $LEDGER (Ctrl-C to stop)"
wait "$VALIDATOR_PID"
