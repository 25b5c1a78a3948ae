#!/usr/bin/env bash
# The README's demo command: the whole market on one machine, in about two minutes.
#
# Set-up (skipped when done): Debian packages, solana-test-validator, the program's SBF build,
# the CLI and the agent. Then the stock solana-test-validator with the program deployed, dockerd
# and a registry on 127.0.0.1:5000, real SPL tokens, and this story:
#
#   a token mint; a market with 5-second billing intervals; a host stakes and registers a machine
#   with 4 simulated GPUs (3 of class 0: 2 in topology group 0, 1 in group 1; 1 of class 1 in
#   group 1) and starts
#   the agent; three clients stake different amounts and bid: alice a 2-GPU queue bid for a busy
#   worker (with a secret env var, sealed on chain to the agent), bob a 1-GPU queue bid for a
#   container that idles, carol a cheap spot bid. The agent allocates them and runs the
#   containers; bob outbids carol's spot lease, which stops at its interval boundary; bob's idle
#   lease gets flagged; every interval is proven and paid; a bid no machine could run is
#   refused at placement; a keeper removes a bid that expired;
#   at the end a table of balances before and after that adds up to the mint's supply, checked
#   to the last base unit. Everything started is stopped.
#
# Variables: DEMO_RPC_PORT (8899 when its ports are free, else a free block; the websocket is the
# next port: scripts/validator.sh), DEMO_URL (a running local
# cluster with the program deployed, e.g. Anchor's under `anchor test`: the demo starts no
# validator of its own; its websocket is the next port), DEMO_DIR (target/demo),
# DEMO_SUMMARY (a path: a JSON summary is written there), DEMO_BIN_DIR (a directory that already
# holds gpu-market and gpu-market-agent: no cargo build), CARGO_TARGET_DIR.
source "$(dirname "$0")/lib.sh"
cd "$REPO_ROOT"
DEMO_START=$(date +%s)

if [ -n "${DEMO_URL:-}" ]; then
    URL="$DEMO_URL"
    RPC_PORT="${URL##*:}"
    WS_URL="ws://${URL#http://}"
    WS_URL="${WS_URL%:*}:$((RPC_PORT + 1))"
elif [ -n "${DEMO_RPC_PORT:-}" ]; then
    RPC_PORT="$DEMO_RPC_PORT"
else
    RPC_PORT="$(free_port_block 68 8899)"
fi
if [ -z "${DEMO_URL:-}" ]; then
    URL="http://127.0.0.1:$RPC_PORT"
    WS_URL="ws://127.0.0.1:$((RPC_PORT + 1))"
fi
DEMO_DIR="${DEMO_DIR:-$REPO_ROOT/target/demo}"
INTERVAL=5
# 6 decimals: 1 token = 1 000 000 base units.
DECIMALS=6

# ---------------------------------------------------------------------------------------------
# Set-up: each step is a quick no-op once done.
# The validator's build packages too, so that its background build below installs none (two
# apt-get runs at once would fight over dpkg's lock).
apt_install docker.io docker-registry busybox-static curl python3 clang libclang-dev libudev-dev \
    protobuf-compiler cmake pkg-config libssl-dev
# On a fresh machine the validator is the longest build, mostly on one core: it builds beside
# the SBF toolchain, the program and the binaries, as in scripts/test.sh.
log "installing solana-test-validator (in the background; log: $TOOLS_DIR/validator-install.log)"
bash scripts/install-validator.sh > "$TOOLS_DIR/validator-install.log" 2>&1 &
VALIDATOR_INSTALL=$!
trap 'kill "$VALIDATOR_INSTALL" 2>/dev/null || true' EXIT
SO="$REPO_ROOT/target/deploy/gpu_market.so"
if [ -f "$SO" ] && [ -z "$(find programs/gpu-market core/src core/Cargo.toml -newer "$SO" -print -quit)" ]; then
    log "target/deploy/gpu_market.so is newer than the program's sources: not rebuilding it"
else
    bash scripts/build-sbf.sh
fi
if [ -n "${DEMO_BIN_DIR:-}" ]; then
    BIN_DIR="$DEMO_BIN_DIR"
else
    # The test command's build (`cargo test` and nextest build alike): the CLI and the agent come
    # out of it, and `scripts/test.sh` after the demo finds everything built. A build of the two
    # binaries alone would build most of the dependencies a second time, with other features
    # (the tests' dev-dependencies turn on features of tokio and the Solana crates).
    log "building the workspace (the CLI, the agent, and the tests that scripts/test.sh runs)"
    cargo test --workspace --no-run -q
    BIN_DIR="${CARGO_TARGET_DIR:-$REPO_ROOT/target}/debug"
fi
CLI="$BIN_DIR/gpu-market"
AGENT="$BIN_DIR/gpu-market-agent"
[ -x "$CLI" ] && [ -x "$AGENT" ] || die "$BIN_DIR must hold gpu-market and gpu-market-agent"
log "waiting for solana-test-validator"
if ! wait "$VALIDATOR_INSTALL"; then
    tail -40 "$TOOLS_DIR/validator-install.log" >&2
    die "installing solana-test-validator failed"
fi
trap - EXIT

# The scratch volumes the agent retains for clients after their leases are tmpfs mounts under
# its data folder; the demo's agent is gone once the demo ends, so nobody serves them any more.
unmount_scratch() {
    local m
    for m in $(findmnt -rn -o TARGET | { grep -F "$DEMO_DIR/" || true; } | sort -r); do
        umount "$m" || true
    done
}
unmount_scratch
rm -rf "$DEMO_DIR"
mkdir -p "$DEMO_DIR/wallets" "$DEMO_DIR/agent/data" "$DEMO_DIR/facts"

# ---------------------------------------------------------------------------------------------
# Everything the demo starts is stopped on the way out, whatever happens.
ENGINE_STARTED=0
bash scripts/engine.sh status || ENGINE_STARTED=1
VALIDATOR_PID=""
AGENT_PID=""
TAIL_PID=""
POLLER_PID=""
SERVE_PID=""
cleanup() {
    local rc=$?
    if [ -n "$AGENT_PID" ] && kill -0 "$AGENT_PID" 2>/dev/null; then
        kill -TERM "$AGENT_PID" 2>/dev/null || true
        wait "$AGENT_PID" 2>/dev/null || true
    fi
    for pid in "$TAIL_PID" "$POLLER_PID" "$SERVE_PID"; do
        if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
    done
    # Containers of this demo's leases that a failed run may have left.
    if [ -s "$DEMO_DIR/leases" ] && [ -n "${DOCKER_HOST:-}" ]; then
        while read -r lease; do
            for id in $(docker ps -aq --filter "label=io.gpu-market.lease=$lease" 2>/dev/null); do
                docker rm -f "$id" >/dev/null 2>&1 || true
            done
        done < <(sort -u "$DEMO_DIR/leases")
    fi
    if [ -n "$VALIDATOR_PID" ]; then kill "$VALIDATOR_PID" 2>/dev/null || true; wait "$VALIDATOR_PID" 2>/dev/null || true; fi
    unmount_scratch
    [ "$ENGINE_STARTED" = 1 ] && bash scripts/engine.sh stop
    log "stopped what the demo started"
    [ "$rc" = 0 ] || printf '\033[1;31mthe demo failed (exit %s); logs in %s\033[0m\n' "$rc" "$DEMO_DIR" >&2
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

bash scripts/engine.sh start
eval "$(bash scripts/engine.sh env)"

if [ -n "${DEMO_URL:-}" ]; then
    log "using the cluster at $URL (DEMO_URL): no validator of the demo's own"
    curl -fsS -X POST -H 'content-type: application/json' \
        -d '{"jsonrpc":"2.0","id":1,"method":"getHealth"}' "$URL" | grep -q '"ok"' ||
        die "the cluster at $URL does not answer"
else
    log "starting the local validator on $URL"
    bash scripts/validator.sh --no-build --rpc-port "$RPC_PORT" --ledger "$DEMO_DIR/ledger" \
        > "$DEMO_DIR/validator.log" 2>&1 &
    VALIDATOR_PID=$!
    # scripts/validator.sh says when it answers, or why it could not start (a port taken, ...).
    until grep -q '^Program id:' "$DEMO_DIR/validator.log"; do
        kill -0 "$VALIDATOR_PID" 2>/dev/null || { cat "$DEMO_DIR/validator.log" >&2; die "the validator did not start"; }
        sleep 0.5
    done
    cat "$DEMO_DIR/validator.log"
fi

# ---------------------------------------------------------------------------------------------
# Helpers.
step() { printf '\n\033[1;32m[%3ss] %s\033[0m\n' "$(( $(date +%s) - DEMO_START ))" "$*"; }
# cli WALLET ARGS...: the CLI signed by one of the demo's wallets.
cli() { local who="$1"; shift; "$CLI" --url "$URL" --keypair "$DEMO_DIR/wallets/$who.json" "$@"; }
# jget FIELD: one field of the JSON object on stdin.
jget() {
    python3 -c '
import json, sys
text = sys.stdin.read()
if not text.strip():
    sys.exit(1)  # the command before said why
v = json.loads(text)[sys.argv[1]]
print("" if v is None else v)' "$1"
}
# wait_for SECS WHAT CMD...: runs CMD every second until it succeeds.
wait_for() {
    local secs="$1" what="$2"; shift 2
    local deadline=$(( $(date +%s) + secs ))
    until "$@"; do
        [ "$(date +%s)" -lt "$deadline" ] || {
            echo "--- agent log (last 40 lines) ---" >&2; tail -40 "$DEMO_DIR/agent.log" >&2 2>/dev/null || true
            die "$what: not within $secs s"
        }
        sleep 1
    done
}
lease_json() { cli authority --output json lease show "$1" 2>/dev/null; }
lease_exists() { lease_json "$1" >/dev/null; }
leases_json() { cli authority --output json lease list --market "$MARKET"; }
# Prints the demo's lease containers as `docker ps` sees them.
containers() {
    docker ps --filter "label=io.gpu-market.managed=$MACHINE" \
        --format '{{.ID}}  {{.Image}}  {{.Status}}  lease={{.Label "io.gpu-market.lease"}}' |
        grep -F -f "$DEMO_DIR/leases" || echo "(no container)"
}
tokens() { python3 -c 'import sys; print(f"{int(sys.argv[1]) / 10**int(sys.argv[2]):.{sys.argv[2]}f}")' "$1" "$DECIMALS"; }

# ---------------------------------------------------------------------------------------------
step "wallets: a market authority (who also mints the token), a host with its agent's hot key, three clients"
for w in authority host agent alice bob carol; do
    "$CLI" keygen --outfile "$DEMO_DIR/wallets/$w.json" --force >/dev/null
    cli "$w" airdrop 10 >/dev/null
done
declare -A KEY
for w in authority host agent alice bob carol; do
    KEY[$w]=$(pubkey_of "$DEMO_DIR/wallets/$w.json")
    printf '  %-9s %s\n' "$w" "${KEY[$w]}"
done

step "a token for stakes and payments ($DECIMALS decimals), the treasuries, and everyone's token account"
MINT=$(cli authority --output json token create-mint --decimals "$DECIMALS" | jget mint)
TREASURY=$(cli authority --output json token create-account "$MINT" | jget account)
STAKE_TREASURY=$(cli authority --output json token create-account "$MINT" | jget account)
declare -A TOKENS
for w in host alice bob carol; do
    TOKENS[$w]=$(cli "$w" --output json token create-account "$MINT" | jget account)
done
cli authority token mint "$MINT" "${TOKENS[host]}" 1000 >/dev/null
cli authority token mint "$MINT" "${TOKENS[alice]}" 1000 >/dev/null
cli authority token mint "$MINT" "${TOKENS[bob]}" 500 >/dev/null
cli authority token mint "$MINT" "${TOKENS[carol]}" 200 >/dev/null
echo "mint $MINT: host 1000, alice 1000, bob 500, carol 200"

step "the market: ${INTERVAL}-second billing intervals, 2.5 % fee, a lease is flagged idle after 2 intervals under 10 % GPU use and ended after 4; its GPU classes by model name (Simulated 24G, Simulated 48G)"
MARKET=$(cli authority --output json market init --stake-mint "$MINT" --treasury "$TREASURY" \
    --stake-treasury "$STAKE_TREASURY" --billing-interval-secs "$INTERVAL" --protocol-fee-bps 250 \
    --unstake-cooldown-secs 60 --base-price 10 --capability 1=2000 --stake-bound 100 \
    --idle-utilisation-bps 1000 --idle-intervals 2 --idle-end-intervals 4 --min-host-stake 100 \
    --class-name "Simulated 24G" --class-name "Simulated 48G" | jget market)
cli authority market show "$MARKET" | grep -E '^(market|gpu_classes|billing_interval|protocol_fee|score_weights|base_price|capability|idle|min_host|stake_vault|payment_vault|treasury|stake_treasury) '
MARKET_JSON=$(cli authority --output json market show "$MARKET")
STAKE_VAULT=$(jget stake_vault <<<"$MARKET_JSON")
PAYMENT_VAULT=$(jget payment_vault <<<"$MARKET_JSON")

step "the market page and its wallet actions: gpu-market serve (reading works without JavaScript; a wallet signs the actions' transactions)"
"$CLI" --url "$URL" serve --market "$MARKET" --listen "127.0.0.1:${DEMO_PAGE_PORT:-0}" \
    > "$DEMO_DIR/serve.log" 2>&1 &
SERVE_PID=$!
for _ in $(seq 1 40); do grep -q '^serving ' "$DEMO_DIR/serve.log" && break; sleep 0.25; done
PAGE_URL=$(sed -n 's/^serving //p' "$DEMO_DIR/serve.log")
[ -n "$PAGE_URL" ] || { cat "$DEMO_DIR/serve.log" >&2; die "gpu-market serve did not start"; }
echo "market page: $PAGE_URL/   (open it while the demo runs; Solana Actions: $PAGE_URL/actions.json)"

step "the host stakes 100 and registers a machine: 4 simulated GPUs, 3 × class 0 (24 GiB; 2 in group 0, 1 in group 1) and 1 × class 1 (48 GiB, group 1)"
cli host stake deposit --market "$MARKET" 100 >/dev/null
# SIMULATED GPUs: this machine has none; the agent models them (their load is the container's CPU).
# Their UUIDs are the ones `gpu-market-agent detect` prints for them: the agent refuses to run a
# machine whose GPUs on chain are not the ones it drives.
GPU_LINES=(
    "0 24 0 GPU-53494d55-4c41-5445-442d-4750552d0000"
    "0 24 0 GPU-53494d55-4c41-5445-442d-4750552d0001"
    "0 24 1 GPU-53494d55-4c41-5445-442d-4750552d0002"
    "1 48 1 GPU-53494d55-4c41-5445-442d-4750552d0003"
)
: > "$DEMO_DIR/gpus.toml"
: > "$DEMO_DIR/simulated.toml"
for line in "${GPU_LINES[@]}"; do
    read -r class gib group uuid <<<"$line"
    cat >> "$DEMO_DIR/gpus.toml" <<TOML
[[gpu]]
uuid = "$uuid"
class = $class
memory_gib = $gib
topology_group = $group
power_w = [100, 400]
core_lock_mhz = [210, 2100]

TOML
    cat >> "$DEMO_DIR/simulated.toml" <<TOML
[[gpu.simulated]]
class = $class
memory_gib = $gib
topology_group = $group
power_w = [100, 400]
default_power_w = 350
core_lock_mhz = [210, 2100]

TOML
done
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
METRICS_PORT=$(free_port)
API_PORT=$(free_port)
# Leases' published ports: 20 host ports below the kernel's ephemeral range, clear of the agent's
# own (loopback here; a host's public address on a real machine).
PORTS_FIRST=$(python3 -c 'import random, sys
own = [int(p) for p in sys.argv[1:]]
while any(p <= o < p + 20 for o in own) if (p := random.randint(20000, 32000)) else True: pass
print(p)' "$API_PORT" "$METRICS_PORT")
PORTS_LAST=$(( PORTS_FIRST + 19 ))
# The market lists the regions machines may declare and bids may name (book entries keep them
# by index, so they decide exactly).
cli authority market add-region "$MARKET" demo-1 | grep -E '^regions '
# Clients reach the machine at 127.0.0.1: its agent's API, and up to 2 published ports and 1 GiB
# of retained scratch per lease; leases may connect to any public address.
MACHINE=$(cli host --output json host register --market "$MARKET" --gpus "$DEMO_DIR/gpus.toml" \
    --agent "${KEY[agent]}" --region demo-1 --electricity-cost 0.5 \
    --public-host 127.0.0.1 --api-port "$API_PORT" --ports-per-lease 2 --scratch-gib 1 \
    --egress open | jget machine)
cli authority host show "$MACHINE" | grep -E '^(machine|owner|agent|status|gpu_count|region|network) '

cat > "$DEMO_DIR/agent/agent.toml" <<TOML
rpc_url = "$URL"
ws_url = "$WS_URL"
keypair = "$DEMO_DIR/wallets/agent.json"
market = "$MARKET"
machine = "$MACHINE"
commitment = "confirmed"
electricity_cost_per_kwh = 500000
data_dir = "$DEMO_DIR/agent/data"
metrics_listen = "127.0.0.1:$METRICS_PORT"
billing_poll_interval_secs = 1
heartbeat_interval_secs = 30
drain_deadline_secs = 30
engine_socket = "$DOCKER_HOST"

[api]
listen = "127.0.0.1:$API_PORT"

[network]
ports = "$PORTS_FIRST-$PORTS_LAST"
publish_ip = "127.0.0.1"
retention_secs = 600

[container]
memory_mib_per_gpu = 64
millicpus_per_gpu = 100
pids_limit = 64
stop_grace_secs = 2

[gpu]
backend = "simulated"
$(cat "$DEMO_DIR/simulated.toml")
TOML
echo "agent configuration: $DEMO_DIR/agent/agent.toml"

step "three clients stake different amounts (their bids score by stake, urgency premium and spend per hour)"
cli alice stake deposit --market "$MARKET" 50 >/dev/null
cli bob stake deposit --market "$MARKET" 20 >/dev/null
cli carol stake deposit --market "$MARKET" 5 >/dev/null
echo "alice 50, bob 20, carol 5"

# ---------------------------------------------------------------------------------------------
# Balances before any bid: every token account of the mint, and the stakes inside the vault.
# snapshot NAME: writes $DEMO_DIR/facts/NAME.json.
snapshot() {
    local stakes=()
    for w in host alice bob carol; do
        stakes+=("$w=$(cli authority --output json stake show --market "$MARKET" --owner "${KEY[$w]}" | python3 -c '
import json, sys
from decimal import Decimal
s = json.load(sys.stdin)
print(int(Decimal(s["amount"]) * 10**int(sys.argv[1])) + int(Decimal(s["pending_unstake"]) * 10**int(sys.argv[1])))' "$DECIMALS")")
    done
    python3 - "$URL" "$MINT" "$DEMO_DIR/facts/$1.json" "${stakes[@]}" <<'PY'
import json, sys, urllib.request
url, mint, out, stakes = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
def rpc(method, params):
    req = urllib.request.Request(url, json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode(),
                                 {"content-type": "application/json"})
    answer = json.load(urllib.request.urlopen(req, timeout=30))
    if "error" in answer:
        sys.exit(f"error: {method}: {answer['error']}")
    return answer["result"]
token_program = "TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA"
accounts = rpc("getProgramAccounts", [token_program, {"encoding": "jsonParsed", "commitment": "confirmed",
               "filters": [{"dataSize": 165}, {"memcmp": {"offset": 0, "bytes": mint}}]}])
balances = {a["pubkey"]: int(a["account"]["data"]["parsed"]["info"]["tokenAmount"]["amount"]) for a in accounts}
supply = int(rpc("getTokenSupply", [mint, {"commitment": "confirmed"}])["value"]["amount"])
json.dump({"supply": supply, "balances": balances,
           "stakes": {k: int(v) for k, v in (s.split("=") for s in stakes)}}, open(out, "w"), indent=1)
PY
}
snapshot before

# Each lease is long enough for the steps that need it running on a slow machine: alice's for
# her secret and her proofs, carol's until bob's richer spot bid preempts it (the machine's one
# class-1 GPU, so it cannot go elsewhere), bob's spot lease until carol has cancelled.
step "bids: alice 2 Simulated 24G GPUs (busy worker, 36/GPU-hour, 60 s, a sealed secret), bob 1 Simulated 24G (idle container, 30/GPU-hour, 30 s), carol a spot bid for the Simulated 48G (100/GPU-day, up to 10 min)"
printf 'DEMO_SECRET=only-the-agent-can-read-this\n' > "$DEMO_DIR/alice.env"
ALICE_BID_JSON=$(cli alice --output json bid place --market "$MARKET" \
    --image "$GPU_MARKET_WORKER_IMAGE" --image-digest "$GPU_MARKET_WORKER_DIGEST" \
    --gpus 2 --gib-per-gpu 24 --class "Simulated 24G" --overclock power=300,core-lock=1800 --price 36 --duration 60 \
    --env "$DEMO_DIR/alice.env")
ALICE_BID=$(jget bid <<<"$ALICE_BID_JSON")
# A queue bid may run on any machine that fits it: the CLI sealed the environment to each such
# machine's agent key and stored the copies on chain; nobody hands a file to anyone.
echo "alice's environment, sealed on chain to the agent key of each machine that can run her queue bid: $(jget env_sealed_to <<<"$ALICE_BID_JSON" | tr -d "[]'")"
BOB_BID=$(cli bob --output json bid place --market "$MARKET" \
    --image "$GPU_MARKET_IDLER_IMAGE" --image-digest "$GPU_MARKET_IDLER_DIGEST" \
    --gpus 1 --gib-per-gpu 24 --class "Simulated 24G" --overclock power=250 --price 30 --duration 30 | jget bid)
CAROL_BID=$(cli carol --output json bid place --market "$MARKET" --machine "$MACHINE" \
    --image "$GPU_MARKET_WORKER_IMAGE" --image-digest "$GPU_MARKET_WORKER_DIGEST" \
    --gpus 1 --gib-per-gpu 48 --class "Simulated 48G" --overclock power=200 --price 100 --duration 600 | jget bid)
echo "queue book (best first):"
cli authority bid list --market "$MARKET"
echo "machine's spot book (by the host's profit per day):"
cli authority bid list --market "$MARKET" --machine "$MACHINE"

# ---------------------------------------------------------------------------------------------
# What the chain says about each lease, recorded every second while it exists (a settled lease's
# account is closed): $DEMO_DIR/facts/leases/<lease>.json holds its last state, with `ever_idle`
# (of its first run: a requeued spot bid run again takes the same lease address).
mkdir -p "$DEMO_DIR/facts/leases"
python3 - "$CLI" "$URL" "$DEMO_DIR/wallets/authority.json" "$MARKET" "$DEMO_DIR/facts/leases" "$DEMO_DIR/leases" <<'PY' &
import json, os, subprocess, sys, time
cli, url, keypair, market, out, keys = sys.argv[1:]
while True:
    r = subprocess.run([cli, "--url", url, "--keypair", keypair, "--output", "json", "lease", "list",
                        "--market", market], capture_output=True, text=True)
    if r.returncode == 0:
        for lease in json.loads(r.stdout):
            path = os.path.join(out, lease["lease"] + ".json")
            seen = json.load(open(path)) if os.path.exists(path) else {}
            if seen and seen["started_at"] != lease["started_at"]:
                continue  # a requeued bid run again at its lease's address: its first run is kept
            lease["ever_idle"] = bool(lease["idle"] or seen.get("ever_idle"))
            with open(path + ".tmp", "w") as f:
                json.dump(lease, f)
            os.replace(path + ".tmp", path)
            if not seen:
                with open(keys, "a") as f:
                    f.write(lease["lease"] + "\n")
    time.sleep(1)
PY
POLLER_PID=$!
touch "$DEMO_DIR/leases"
# fact LEASE FIELD: a field of a lease's last recorded state.
fact() { jget "$2" < "$DEMO_DIR/facts/leases/$1.json"; }
# lease_of BID: the lease of a bid, once the poller has seen it.
lease_of() {
    local f
    for f in "$DEMO_DIR"/facts/leases/*.json; do
        [ -e "$f" ] && [ "$(jget bid < "$f")" = "$1" ] && { basename "$f" .json; return 0; }
    done
    return 1
}
leases_seen() { [ "$(wc -l < "$DEMO_DIR/leases")" -ge "$1" ]; }
preempted() { lease_json "$1" | grep -q '"preempted":true'; }
in_spot_book() { cli authority --output json bid list --market "$MARKET" --machine "$MACHINE" | grep -q "$1"; }
no_leases() { [ "$(leases_json)" = "[]" ]; }

step "the host starts its agent (log: $DEMO_DIR/agent.log)"
RUST_LOG=info NO_COLOR=1 "$AGENT" run --config "$DEMO_DIR/agent/agent.toml" > "$DEMO_DIR/agent.log" 2>&1 &
AGENT_PID=$!
tail --pid="$AGENT_PID" -n +1 -F "$DEMO_DIR/agent.log" 2>/dev/null |
    grep --line-buffered -E 'allocated|lease started|preempted|proof accepted|final proof|lease ended|draining|drained|WARN|ERROR' |
    sed -u -E 's/^[^ ]+ +//; s/gpu_market_agent(::[a-z_:]+)?: //; s/^/    agent | /' &
TAIL_PID=$!

wait_for 120 "the three bids allocated" leases_seen 3
ALICE_LEASE=$(lease_of "$ALICE_BID"); BOB_LEASE=$(lease_of "$BOB_BID"); CAROL_LEASE=$(lease_of "$CAROL_BID")
step "allocations: the queue book first (alice's 2 GPUs stay in topology group 0), then the spot book"
cli authority lease list --market "$MARKET"
alice_running() { docker ps -q --filter "label=io.gpu-market.lease=$ALICE_LEASE" | grep -q .; }
wait_for 120 "alice's container running" alice_running
step "the containers run, pulled by digest from the local registry, one per lease"
containers
ALICE_CONTAINER=$(docker ps -q --filter "label=io.gpu-market.lease=$ALICE_LEASE")
SECRET=$(docker exec "$ALICE_CONTAINER" sh -c 'echo "$DEMO_SECRET"')
echo "alice's sealed secret, inside her container: DEMO_SECRET=$SECRET"
[ "$SECRET" = "only-the-agent-can-read-this" ] || die "alice's container does not see her sealed secret (it reads '$SECRET')"
printf '%s' "$SECRET" > "$DEMO_DIR/facts/secret.txt"

step "bob outbids carol's spot lease: a spot bid for the class-1 GPU at 400/GPU-day for 30 s"
BOB_SPOT=$(cli bob --output json bid place --market "$MARKET" --machine "$MACHINE" \
    --image "$GPU_MARKET_WORKER_IMAGE" --image-digest "$GPU_MARKET_WORKER_DIGEST" \
    --gpus 1 --gib-per-gpu 48 --class "Simulated 48G" --overclock power=200 --price 400 --duration 30 | jget bid)
cli authority bid list --market "$MARKET" --machine "$MACHINE"
# `lease show` tells a preemption while the lease runs and, from the chain's history, once it
# has settled.
wait_for 60 "carol's spot lease told to stop" preempted "$CAROL_LEASE"
# Her first run as the poller saw it (its start), with what the chain says of the preemption.
python3 -c 'import json, sys
first = json.load(open(sys.argv[1]))
first.update(json.loads(sys.argv[2]))
print(json.dumps(first))' "$DEMO_DIR/facts/leases/$CAROL_LEASE.json" "$(lease_json "$CAROL_LEASE")" \
    > "$DEMO_DIR/facts/preempted.json"
P_START=$(jget started_at < "$DEMO_DIR/facts/preempted.json")
P_STOP=$(jget stop_at < "$DEMO_DIR/facts/preempted.json")
echo "carol's lease $CAROL_LEASE keeps running to the end of its current interval:"
echo "  started_at $P_START, stop_at $P_STOP = $(( P_STOP / INTERVAL )) × $INTERVAL s (every lease's intervals fall on the multiples of the interval)"
wait_for 120 "bob's spot lease" lease_of "$BOB_SPOT" >/dev/null
BOB_SPOT_LEASE=$(lease_of "$BOB_SPOT")
wait_for 60 "bob's spot lease recorded" test -s "$DEMO_DIR/facts/leases/$BOB_SPOT_LEASE.json"
echo "bob's spot lease $BOB_SPOT_LEASE: started_at $(fact "$BOB_SPOT_LEASE" started_at), after carol's stop_at $P_STOP"
cli authority lease list --market "$MARKET"

step "carol's bid went back to the spot book with its remaining escrow; she cancels it (full refund)"
# Should bob's 30 s spot lease have ended before she cancels (a machine stalled that long), the
# agent runs her requeued bid again at once on the freed GPU, and she ends that lease instead.
rerun() { local s; s=$(lease_json "$CAROL_LEASE" | jget started_at) && [ "$s" -gt "$P_START" ]; }
carol_off() {
    if in_spot_book "$CAROL_BID" && cli carol bid cancel "$CAROL_BID" 2>/dev/null; then
        return 0
    fi
    if rerun; then
        echo "a class-1 GPU was free by then: the agent ran carol's bid again at once; she ends that lease"
        cli carol lease end "$CAROL_LEASE"
        return 0
    fi
    return 1
}
cli authority bid list --market "$MARKET" --machine "$MACHINE"
wait_for 120 "carol's bid back in the spot book, cancelled" carol_off

step "usage proofs: one transaction every two intervals proves all the machine's leases, each proof covering both, hash-chained; each lease's pay accrues to the machine out of its escrow"
# From what the poller recorded while the lease existed: it may have ended by the idle rule
# (4 idle intervals) by now.
flagged() { [ "$(fact "$1" ever_idle)" = True ]; }
wait_for 120 "bob's idle lease flagged" flagged "$BOB_LEASE"
echo "alice's busy lease:"
cli authority lease show "$ALICE_LEASE" | grep -E '^(lease|kind|gpus|started_at|proofs_next_interval|proven_until|proof_hash|gpu_seconds|gpu_time_utilisation_bps|energy_kwh|idle|paid|escrow_left) '
echo "bob's lease, whose container sleeps: flagged idle after 2 intervals under 10 %:"
cli authority lease show "$BOB_LEASE" | grep -E '^(lease|kind|proofs_next_interval|idle_streak|idle|paid) '

step "waiting until every lease has ended and settled (unspent escrow refunded)"
wait_for 240 "every lease settled" no_leases
echo "bob's idle lease, ended by the market's idle rule after 4 idle intervals (of its 6):"
cli authority --output json lease show "$BOB_LEASE" > "$DEMO_DIR/facts/idle_end.json"
cli authority lease show "$BOB_LEASE" | grep -E '^(lease|status|paid|refund|exit_code|exit_reason) '
cli authority bid list --market "$MARKET"
cli authority bid list --market "$MARKET" --machine "$MACHINE"

step "carol rents a model server: the server image on 1 class-0 GPU for 20 s, publishing port 8080, with 1 GiB of scratch kept for her after the lease"
SERVER_BID=$(cli carol --output json bid place --market "$MARKET" \
    --image "$GPU_MARKET_SERVER_IMAGE" --image-digest "$GPU_MARKET_SERVER_DIGEST" \
    --gpus 1 --gib-per-gpu 24 --class "Simulated 24G" --overclock power=250 --price 36 --duration 20 \
    --port 8080 --scratch-gib 1 | jget bid)
wait_for 60 "carol's server lease" lease_of "$SERVER_BID" >/dev/null
SERVER_LEASE=$(lease_of "$SERVER_BID")
connect_known() { cli carol --output json lease show "$SERVER_LEASE" 2>/dev/null | grep -q '8080/tcp -> '; }
wait_for 60 "carol's published port" connect_known
echo "carol asks where to connect (only her key is told; the agent's API checks her signature):"
cli carol lease show "$SERVER_LEASE" | grep -E '^(lease|ports|scratch_gib|connect) '
SERVED_AT=$(cli carol --output json lease show "$SERVER_LEASE" | python3 -c 'import json, sys
print(json.load(sys.stdin)["connect"][0].split(" -> ")[1])')
serving() { curl -fsS -m 2 "http://$SERVED_AT/result.txt" >/dev/null 2>&1; }
wait_for 30 "carol's server answering on $SERVED_AT" serving
HTTP_BODY=$(curl -fsS -m 5 "http://$SERVED_AT/result.txt")
echo "GET http://$SERVED_AT/result.txt -> $HTTP_BODY"
echo "her container's log, through the agent's API:"
cli carol lease logs "$SERVER_LEASE" --tail 5 | sed 's/^/    /'
echo "a command in her container (lease exec):"
cli carol lease exec "$SERVER_LEASE" -- ls -l /workspace | sed 's/^/    /'
echo "a shell on a terminal (lease exec -t; here on script(1)'s pseudo-terminal, which tells no size: 24x80):"
TTY_CMD=$(printf '%q ' "$CLI" --url "$URL" --keypair "$DEMO_DIR/wallets/carol.json" \
    lease exec -t "$SERVER_LEASE" -- sh -c 'read line; stty size; tty')
printf 'go\n' | script -qec "$TTY_CMD" /dev/null | tr -d '\r' > "$DEMO_DIR/facts/tty.txt"
sed 's/^/    /' "$DEMO_DIR/facts/tty.txt"
echo "anyone else is refused, before anything is sent:"
cli bob lease logs "$SERVER_LEASE" 2>&1 | sed 's/^/    /' || true
wait_for 120 "carol's server lease settled" no_leases
echo "the lease has settled; its scratch volume stays with the agent for the retention, for her alone:"
mkdir -p "$DEMO_DIR/results"
cli carol lease cp "$SERVER_LEASE:/workspace/result.txt" "$DEMO_DIR/results" --machine "$MACHINE"
cli carol --output json lease cp "$SERVER_LEASE:/workspace/result.txt" "$DEMO_DIR/results" \
    --machine "$MACHINE" > "$DEMO_DIR/facts/fetched.json"
python3 - "$DEMO_DIR/facts/served.json" "$HTTP_BODY" "$DEMO_DIR/results/result.txt" "$SERVER_LEASE" <<'PY'
import json, sys
out, body, fetched, lease = sys.argv[1:]
json.dump({"lease": lease, "http_body": body, "fetched": open(fetched).read()}, open(out, "w"))
PY

step "anyone can check the power readings behind alice's proofs: the agent kept one log per proof, named by its first interval (a proof covers two here; her container saw them at /run/gpu-market/evidence); each is the log its proof committed to on chain, and gives the peaks the proof stated"
AUDIT_DIR="$DEMO_DIR/agent/data/leases/$ALICE_LEASE/evidence"
cli authority lease audit "$ALICE_LEASE" --evidence "$AUDIT_DIR"
cli authority --output json lease audit "$ALICE_LEASE" --evidence "$AUDIT_DIR" > "$DEMO_DIR/facts/audit.json"
python3 -c 'import json, sys
rows = json.load(open(sys.argv[1]))
bad = [r for r in rows if r["verdict"] != "consistent"]
sys.exit(f"error: the audit of alice'"'"'s lease found {bad}" if bad or not rows else 0)' "$DEMO_DIR/facts/audit.json" || die "alice's power logs do not match her proofs"

step "the host drains its agent (gpu-market-agent drain: nothing is left running; SIGTERM alone would leave leases running for a restart)"
"$AGENT" drain --config "$DEMO_DIR/agent/agent.toml" || die "the drain failed"
AGENT_RC=0
wait "$AGENT_PID" || AGENT_RC=$?
AGENT_PID=""
[ "$AGENT_RC" = 0 ] || die "the agent exited with $AGENT_RC after draining"
containers
kill "$POLLER_PID" 2>/dev/null || true
wait "$POLLER_PID" 2>/dev/null || true
POLLER_PID=""

step "a bid no machine could run is refused at placement, with the reason: carol asks for a 200 GiB GPU, which no machine has"
if REFUSAL=$(cli carol bid place --market "$MARKET" \
    --image "$GPU_MARKET_WORKER_IMAGE" --image-digest "$GPU_MARKET_WORKER_DIGEST" \
    --gpus 1 --gib-per-gpu 200 --overclock power=200 --price 30 --duration 5 --deadline +12 2>&1); then
    die "a bid for a 200 GiB GPU was placed in a market with none"
fi
printf '    %s\n' "$REFUSAL"
printf '%s' "$REFUSAL" | grep -q "could run this bid" || die "the refusal gives no reason: $REFUSAL"

step "anyone may run the keeper: carol's 1-GPU bid, which the drained agent no longer takes, expires; the keeper removes it (escrow back in full) and closes the sealed environments of ended bids (rent back to their clients)"
EXPIRING_BID=$(cli carol --output json bid place --market "$MARKET" \
    --image "$GPU_MARKET_WORKER_IMAGE" --image-digest "$GPU_MARKET_WORKER_DIGEST" \
    --gpus 1 --gib-per-gpu 8 --overclock power=200 --price 30 --duration 5 --deadline +12 | jget bid)
bid_expired() { cli authority --output json bid explain "$EXPIRING_BID" | grep -q "has passed, so it will not run"; }
wait_for 60 "carol's bid expired" bid_expired
cli authority keeper --market "$MARKET" --once
cli authority bid show "$EXPIRING_BID" >/dev/null 2>&1 && die "the keeper left the expired bid $EXPIRING_BID"

step "the host claims the pay its machine's proofs accrued (its agent claims every hour; anyone may send it, the pay only goes to the owner)"
cli host host claim "$MACHINE"
cli authority host show "$MACHINE" | grep -E '^unclaimed_pay '

step "the market holds its fees (and any slashed stake) until anyone collects them into its treasuries"
cli authority market show "$MARKET" | grep -E '^(fees_due|slashed_due) '
cli authority market collect "$MARKET"
snapshot after

step "balances before the first bid and after the last settlement, in tokens"
python3 - "$DEMO_DIR/facts" "$DECIMALS" "$INTERVAL" "${DEMO_SUMMARY:-}" \
    "alice=${TOKENS[alice]}" "bob=${TOKENS[bob]}" "carol=${TOKENS[carol]}" "host=${TOKENS[host]}" \
    "treasury (fees)=$TREASURY" "stake treasury (slashes)=$STAKE_TREASURY" \
    "stake vault=$STAKE_VAULT" "payment vault (escrow)=$PAYMENT_VAULT" \
    "@mint=$MINT" "@market=$MARKET" "@carol_lease=$CAROL_LEASE" "@challenger_lease=$BOB_SPOT_LEASE" \
    "@idle_lease=$BOB_LEASE" "@busy_lease=$ALICE_LEASE" <<'PY'
import json, os, sys
facts, decimals, interval, summary_path, pairs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5:]
labels, meta = {}, {}
for p in pairs:
    k, v = p.split("=", 1)
    (meta.__setitem__(k[1:], v) if k.startswith("@") else labels.__setitem__(v, k))
before = json.load(open(os.path.join(facts, "before.json")))
after = json.load(open(os.path.join(facts, "after.json")))
fmt = lambda n: f"{'-' if n < 0 else ''}{abs(n) // 10**decimals}.{abs(n) % 10**decimals:0{decimals}d}"
accounts = list(labels) + sorted((set(before["balances"]) | set(after["balances"])) - set(labels))
rows, problems = [], []
print(f"{'account':<28}{'before':>16}{'after':>16}{'change':>14}")
for a in accounts:
    b, c = before["balances"].get(a, 0), after["balances"].get(a, 0)
    name = labels.get(a, f"other {a[:8]}")
    rows.append({"label": name, "account": a, "before": b, "after": c})
    print(f"{name:<28}{fmt(b):>16}{fmt(c):>16}{fmt(c - b):>14}")
    if name == "stake vault":
        for who in before["stakes"]:
            sb, sa = before["stakes"][who], after["stakes"][who]
            print(f"{'  of which ' + who + ' stake':<28}{fmt(sb):>16}{fmt(sa):>16}{fmt(sa - sb):>14}")
tb, ta = sum(before["balances"].values()), sum(after["balances"].values())
print(f"{'total':<28}{fmt(tb):>16}{fmt(ta):>16}{fmt(ta - tb):>14}")
print(f"{'mint supply':<28}{fmt(before['supply']):>16}{fmt(after['supply']):>16}")
if not (tb == before["supply"] == ta == after["supply"]):
    problems.append(f"totals {tb} -> {ta} and supply {before['supply']} -> {after['supply']} differ")
by_label = {l: a for a, l in labels.items()}
for snap, name in ((before, "before"), (after, "after")):
    vault = snap["balances"].get(by_label["stake vault"], 0)
    if sum(snap["stakes"].values()) != vault:
        problems.append(f"{name}: the stakes add up to {sum(snap['stakes'].values())}, the stake vault holds {vault}")
if after["balances"].get(by_label["payment vault (escrow)"], 0) != 0:
    problems.append("the payment vault still holds escrow after every bid ended")

lease = lambda k: json.load(open(os.path.join(facts, "leases", k + ".json")))
pre = json.load(open(os.path.join(facts, "preempted.json")))
challenger = lease(meta["challenger_lease"])
idle = lease(meta["idle_lease"])
k = pre["stop_at"] // interval - pre["started_at"] // interval
rem = pre["stop_at"] % interval
summary = {
    "mint": meta["mint"], "market": meta["market"], "decimals": decimals, "interval_secs": interval,
    "supply_before": before["supply"], "supply_after": after["supply"],
    "total_before": tb, "total_after": ta,
    "accounts": rows, "stakes_before": before["stakes"], "stakes_after": after["stakes"],
    "preemption": {
        "observed": bool(pre["preempted"]), "lease": pre["lease"], "bid": pre["bid"],
        "started_at": pre["started_at"], "stop_at": pre["stop_at"], "interval_secs": interval,
        "intervals_run": k, "on_boundary": rem == 0,
        "last_seen": lease(meta["carol_lease"]),
        "challenger": {"lease": challenger["lease"], "bid": challenger["bid"],
                       "started_at": challenger["started_at"],
                       "proofs": challenger["proofs_next_interval"], "paid": challenger["paid"]},
    },
    "busy": {"lease": meta["busy_lease"], "flagged": lease(meta["busy_lease"])["ever_idle"]},
    "idle": {"lease": idle["lease"], "bid": idle["bid"], "client": idle["client"],
             "flagged": idle["ever_idle"], "last_seen": idle,
             "settled": json.load(open(os.path.join(facts, "idle_end.json")))},
    "leases": [json.load(open(os.path.join(facts, "leases", f))) for f in sorted(os.listdir(os.path.join(facts, "leases")))],
    "secret": open(os.path.join(facts, "secret.txt")).read(),
    "audit": json.load(open(os.path.join(facts, "audit.json"))),
    "tty": open(os.path.join(facts, "tty.txt")).read(),
    "served": dict(json.load(open(os.path.join(facts, "served.json"))),
                   copied=json.load(open(os.path.join(facts, "fetched.json")))),
    "problems": problems,
}
if summary_path:
    with open(summary_path, "w") as f:
        json.dump(summary, f, indent=1)
if problems:
    sys.exit("error: " + "; ".join(problems))
print(f"conserved: every base unit of the {fmt(before['supply'])} tokens is accounted for, before and after")
PY
step "SOL each wallet spent since its 10 SOL airdrop: fees, and rent its accounts still hold (it comes back when they close)"
python3 - "$URL" "authority=${KEY[authority]}" "host=${KEY[host]}" "agent=${KEY[agent]}" \
    "alice=${KEY[alice]}" "bob=${KEY[bob]}" "carol=${KEY[carol]}" <<'PY'
import json, sys, urllib.request
url, pairs = sys.argv[1], sys.argv[2:]
def rpc(method, params):
    req = urllib.request.Request(url, json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode(),
                                 {"content-type": "application/json"})
    answer = json.load(urllib.request.urlopen(req, timeout=30))
    if "error" in answer:
        sys.exit(f"error: {method}: {answer['error']}")
    return answer["result"]
start = 10 * 10**9
sol = lambda n: f"{n / 10**9:.6f}"
print(f"{'wallet':<11}{'now':>14}{'spent':>12}{'fees':>12}{'rent held':>12}{'txs paid':>10}")
for name, key in (p.split("=", 1) for p in pairs):
    now = rpc("getBalance", [key, {"commitment": "confirmed"}])["value"]
    fees, paid = 0, 0
    for s in rpc("getSignaturesForAddress", [key, {"commitment": "confirmed", "limit": 1000}]):
        tx = rpc("getTransaction", [s["signature"], {"commitment": "confirmed", "encoding": "json",
                                                     "maxSupportedTransactionVersion": 0}])
        if tx and tx["transaction"]["message"]["accountKeys"][0] == key:
            fees += tx["meta"]["fee"]
            paid += 1
    spent = start - now
    print(f"{name:<11}{sol(now):>14}{sol(spent):>12}{sol(fees):>12}{sol(spent - fees):>12}{paid:>10}")
PY
# Read whole before searching: `curl | grep -q` fails under pipefail when grep stops reading at
# its match and curl cannot write the rest ("curl: (23) Failed writing body", seen in the suite).
PAGE=$(curl -fsS "$PAGE_URL/") || die "the market page at $PAGE_URL does not answer"
grep -qF "$MARKET" <<<"$PAGE" || die "the market page at $PAGE_URL does not show market $MARKET"
step "demo complete: market $MARKET on $URL, its page at $PAGE_URL/"
