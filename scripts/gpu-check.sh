#!/usr/bin/env bash
# The check a host runs on its real GPUs before it lists a machine: `gpu-market-agent check` on
# the NVML backend, loading the GPUs with scripts/gpu-workload.py (a Python with PyTorch or CuPy),
# with an NVIDIA MPS daemon of the check's own, started as a shared lease's is.
#
#   bash scripts/gpu-check.sh [CONFIG] [-- CHECK-ARGS...]
#
# CONFIG is the agent's configuration (only [gpu] and billing_poll_interval_secs are read). Without
# one, a configuration is written for the NVML backend at the agent's sampling rate of the README's
# example (5 s; GPU_CHECK_POLL_SECS), with the classes in GPU_CHECK_CLASSES (TOML lines such as
# '"NVIDIA H100 80GB HBM3" = 0') and, where nvidia-cuda-mps-control is installed, `mps_control`
# (the check starts and stops its own daemon). The report goes to $GPU_CHECK_OUT.json and .txt (default
# ./gpu-check). The agent is $GPU_MARKET_AGENT, else target/release/gpu-market-agent, else the one
# on PATH; the workload's Python is $GPU_CHECK_PYTHON, else python3.
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

CONFIG=""
if [ $# -gt 0 ] && [ "$1" != "--" ]; then CONFIG="$1"; shift; fi
[ "${1:-}" = "--" ] && shift
OUT="${GPU_CHECK_OUT:-gpu-check}"

AGENT="${GPU_MARKET_AGENT:-}"
if [ -z "$AGENT" ]; then
    if [ -x "$REPO_ROOT/target/release/gpu-market-agent" ]; then
        AGENT="$REPO_ROOT/target/release/gpu-market-agent"
    else
        AGENT="$(command -v gpu-market-agent)" || die "no gpu-market-agent: build it (cargo build --release -p gpu-market-agent) or set GPU_MARKET_AGENT"
    fi
fi
PYTHON="${GPU_CHECK_PYTHON:-python3}"
"$PYTHON" -c 'import torch' 2>/dev/null || "$PYTHON" -c 'import cupy' 2>/dev/null ||
    die "$PYTHON has neither PyTorch nor CuPy: set GPU_CHECK_PYTHON to a Python that has one"

# NVML comes with the driver; some installs keep it off the loader's path.
if ! ldconfig -p 2>/dev/null | grep -q 'libnvidia-ml.so.1'; then
    for d in /usr/local/nvidia/lib64 /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/cuda/compat; do
        if [ -e "$d/libnvidia-ml.so.1" ]; then
            export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
            break
        fi
    done
fi

WORK="$(mktemp -d)"
cleanup() {
    rm -rf "$WORK"
}
trap cleanup EXIT

if [ -z "$CONFIG" ]; then
    CONFIG="$WORK/check.toml"
    {
        echo "billing_poll_interval_secs = ${GPU_CHECK_POLL_SECS:-5}"
        echo "[gpu]"
        echo 'backend = "nvml"'
        if command -v nvidia-cuda-mps-control >/dev/null; then
            echo "mps_control = \"$(command -v nvidia-cuda-mps-control)\""
        else
            log "no nvidia-cuda-mps-control here: the MPS step is skipped"
        fi
        echo "[gpu.classes]"
        if [ -n "${GPU_CHECK_CLASSES:-}" ]; then printf '%s\n' "$GPU_CHECK_CLASSES"; fi
    } > "$CONFIG"
fi

log "$AGENT check --config $CONFIG (workload: $PYTHON $REPO_ROOT/scripts/gpu-workload.py)"
set +e
"$AGENT" check --config "$CONFIG" --workload "$PYTHON $REPO_ROOT/scripts/gpu-workload.py" \
    --json "$OUT.json" "$@" | tee "$OUT.txt"
RC=${PIPESTATUS[0]}
set -e
log "report: $OUT.json, $OUT.txt (exit $RC)"
exit "$RC"
