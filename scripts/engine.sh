#!/usr/bin/env bash
# A real container engine for tests and the demo: dockerd and a local OCI registry on loopback,
# installed from Debian's packages, started without systemd, stopped by pid.
#
#   scripts/engine.sh start   installs if needed, starts both, seeds the test image; idempotent
#   scripts/engine.sh stop    stops what `start` started
#   scripts/engine.sh status  exits 0 when both run
#   scripts/engine.sh env     prints the variables clients need (eval "$(scripts/engine.sh env)")
#
# Variables: GPU_MARKET_ENGINE_DIR (state, default ~/.cache/gpu-market/engine),
# GPU_MARKET_REGISTRY (host:port; by default 127.0.0.1:5000 when that port is free, else a free
# loopback port, kept in $GPU_MARKET_ENGINE_DIR/registry.addr while the registry runs).
source "$(dirname "$0")/lib.sh"

ENGINE_DIR="${GPU_MARKET_ENGINE_DIR:-$TOOLS_DIR/engine}"
running() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
if [ -n "${GPU_MARKET_REGISTRY:-}" ]; then
    REGISTRY="$GPU_MARKET_REGISTRY"
elif running "$ENGINE_DIR/registry.pid" && [ -s "$ENGINE_DIR/registry.addr" ]; then
    REGISTRY="$(cat "$ENGINE_DIR/registry.addr")"
else
    REGISTRY="127.0.0.1:$(free_port_block 1 5000)"
fi
SOCK="$ENGINE_DIR/docker.sock"
TEST_IMAGE="$REGISTRY/gpu-market/busybox:latest"
# Lease workloads for the agent's tests and the demo (same rootfs, other commands): `worker` keeps
# a CPU busy at whatever share the container's limit allows, `idler` sleeps; both stop on SIGTERM.
WORKER_IMAGE="$REGISTRY/gpu-market/worker:latest"
IDLER_IMAGE="$REGISTRY/gpu-market/idler:latest"
# `server` writes a result into its scratch volume, logs it, and serves the volume over HTTP on
# port 8080 until SIGTERM: a lease a client reaches, reads and fetches from.
SERVER_IMAGE="$REGISTRY/gpu-market/server:latest"
# `gang` meets as torchrun's ranks do: rank 0 (`NODE_RANK=0`) listens on `MASTER_PORT`, answers
# each rank that reaches it and logs what it heard; the others greet `MASTER_ADDR:MASTER_PORT`
# until rank 0 answers, and log its answer.
GANG_IMAGE="$REGISTRY/gpu-market/gang:latest"

# The containerd that dockerd starts under our exec root: it outlives a dockerd that was killed
# (SIGKILL after the stop's grace period, or a killed script), and the next dockerd then fails
# with "timeout waiting for containerd to start" (seen after an interrupted test run).
CONTAINERD_CONFIG="$ENGINE_DIR/exec/containerd/containerd.toml"
stop_orphaned_containerd() {
    pkill -f -- "--config $CONTAINERD_CONFIG" 2>/dev/null || return 0
    for _ in $(seq 1 40); do pgrep -f -- "--config $CONTAINERD_CONFIG" >/dev/null || return 0; sleep 0.25; done
    pkill -9 -f -- "--config $CONTAINERD_CONFIG" 2>/dev/null || true
}

start_dockerd() {
    running "$ENGINE_DIR/dockerd.pid" && return 0
    stop_orphaned_containerd
    mkdir -p "$ENGINE_DIR/data" "$ENGINE_DIR/exec" "$ENGINE_DIR/hooks"
    # SIMULATED GPU ONLY: dockerd registers its `nvidia` device driver only when this hook is on
    # its PATH. A no-op stand-in lets GPU device requests be accepted (and NVIDIA_VISIBLE_DEVICES
    # be passed) on machines without a GPU; it exposes no device. Never installed on a GPU host,
    # where the real NVIDIA Container Toolkit provides the hook.
    if ! command -v nvidia-container-runtime-hook >/dev/null; then
        printf '#!/bin/sh\n# no-op stand-in for tests without a GPU\nexit 0\n' \
            > "$ENGINE_DIR/hooks/nvidia-container-runtime-hook"
        chmod +x "$ENGINE_DIR/hooks/nvidia-container-runtime-hook"
    fi
    # The engine's own firewall management on, IPv6 included, as hosts run it: the lease
    # firewall must hold against the rules the engine writes (`--experimental` lets this
    # engine's version manage ip6tables; later versions do by default).
    log "starting dockerd on $SOCK"
    PATH="$PATH:$ENGINE_DIR/hooks" nohup dockerd -H "unix://$SOCK" \
        --data-root "$ENGINE_DIR/data" --exec-root "$ENGINE_DIR/exec" \
        --pidfile "$ENGINE_DIR/dockerd.pid" --storage-driver "${GPU_MARKET_STORAGE_DRIVER:-overlay2}" \
        --bridge=none --experimental --ip6tables \
        >"$ENGINE_DIR/dockerd.log" 2>&1 &
    for _ in $(seq 1 120); do
        DOCKER_HOST="unix://$SOCK" docker version >/dev/null 2>&1 && return 0
        sleep 0.5
    done
    tail -20 "$ENGINE_DIR/dockerd.log" >&2
    die "dockerd did not start (log: $ENGINE_DIR/dockerd.log)"
}

start_registry() {
    running "$ENGINE_DIR/registry.pid" && return 0
    require_free_ports "${REGISTRY##*:}:the registry's port"
    mkdir -p "$ENGINE_DIR/registry"
    echo "$REGISTRY" > "$ENGINE_DIR/registry.addr"
    cat > "$ENGINE_DIR/registry.yml" <<YML
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $ENGINE_DIR/registry
  delete:
    enabled: true
http:
  addr: $REGISTRY
YML
    log "starting the registry on $REGISTRY"
    nohup docker-registry serve "$ENGINE_DIR/registry.yml" >"$ENGINE_DIR/registry.log" 2>&1 &
    echo $! > "$ENGINE_DIR/registry.pid"
    for _ in $(seq 1 60); do
        curl -fsS "http://$REGISTRY/v2/" >/dev/null 2>&1 && return 0
        sleep 0.5
    done
    tail -20 "$ENGINE_DIR/registry.log" >&2
    die "the registry did not start (log: $ENGINE_DIR/registry.log)"
}

# The test images, made without internet: a busybox rootfs, imported with each image's command,
# pushed to the local registry, and removed locally so that tests pull them for real.
seed_images() {
    curl -fsS "http://$REGISTRY/v2/gpu-market/gang/tags/list" 2>/dev/null | grep -q latest && return 0
    log "seeding $TEST_IMAGE, $WORKER_IMAGE, $IDLER_IMAGE, $SERVER_IMAGE, $GANG_IMAGE"
    local rootfs
    rootfs="$(mktemp -d)"
    mkdir -p "$rootfs/bin" "$rootfs/tmp" "$rootfs/etc"
    cp /bin/busybox "$rootfs/bin/busybox"
    for applet in $("$rootfs/bin/busybox" --list); do
        [ "$applet" = busybox ] || ln -sf busybox "$rootfs/bin/$applet"
    done
    echo 'root:x:0:0:root:/root:/bin/sh' > "$rootfs/etc/passwd"
    export DOCKER_HOST="unix://$SOCK"
    seed() {
        tar -C "$rootfs" -c . | docker import -c "CMD $2" - "$1" >/dev/null
        docker push "$1" >/dev/null
        docker rmi -f "$1" >/dev/null
    }
    seed "$TEST_IMAGE" '["/bin/sh"]'
    seed "$WORKER_IMAGE" '["/bin/sh", "-c", "trap \"exit 0\" TERM; while :; do :; done"]'
    seed "$IDLER_IMAGE" '["/bin/sh", "-c", "trap \"exit 0\" TERM; while :; do sleep 1; done"]'
    seed "$SERVER_IMAGE" '["/bin/sh", "-c", "trap \"exit 0\" TERM; echo \"epoch 1 loss=0.25\" > /workspace/result.txt; echo \"training done: loss=0.25, serving /workspace on :8080\"; httpd -p 8080 -h /workspace; while :; do sleep 1; done"]'
    seed "$GANG_IMAGE" '["/bin/sh", "-c", "trap \"exit 0\" TERM; if [ \"$NODE_RANK\" = 0 ]; then while :; do heard=$(echo \"hello from rank 0\" | nc -l -p \"$MASTER_PORT\"); [ -n \"$heard\" ] && echo \"rank 0 heard: $heard\"; done & else until heard=$(echo \"hello from rank $NODE_RANK\" | nc -w 5 \"$MASTER_ADDR\" \"$MASTER_PORT\") && [ -n \"$heard\" ]; do sleep 1; done; echo \"rank $NODE_RANK heard: $heard\"; fi; while :; do sleep 1; done"]'
    rm -rf "$rootfs"
}

# The manifest digest the registry serves for an image reference (what a bid pins).
digest_of() {
    local ref="${1#"$REGISTRY"/}"
    curl -fsSI -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
        "http://$REGISTRY/v2/${ref%%:*}/manifests/${ref##*:}" \
        | tr -d '\r' | awk -F': ' 'tolower($1) == "docker-content-digest" { print $2 }'
}

stop_pid() {
    local f="$1"
    if running "$f"; then
        local pid
        pid="$(cat "$f")"
        kill "$pid"
        for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
        kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$f"
}

case "${1:-}" in
    start)
        # iptables and iproute2: the agent's lease firewall and the network tests' namespaces.
        apt_install docker.io docker-registry busybox-static curl iptables iproute2
        mkdir -p "$ENGINE_DIR"
        start_dockerd
        start_registry
        seed_images
        log "engine: unix://$SOCK, registry: $REGISTRY, test image: $TEST_IMAGE"
        ;;
    stop)
        stop_pid "$ENGINE_DIR/registry.pid"
        stop_pid "$ENGINE_DIR/dockerd.pid"
        stop_orphaned_containerd
        ;;
    status)
        running "$ENGINE_DIR/dockerd.pid" && running "$ENGINE_DIR/registry.pid"
        ;;
    env)
        echo "export DOCKER_HOST=unix://$SOCK"
        echo "export GPU_MARKET_REGISTRY=$REGISTRY"
        echo "export GPU_MARKET_TEST_IMAGE=$TEST_IMAGE"
        echo "export GPU_MARKET_WORKER_IMAGE=$WORKER_IMAGE"
        echo "export GPU_MARKET_WORKER_DIGEST=$(digest_of "$WORKER_IMAGE")"
        echo "export GPU_MARKET_IDLER_IMAGE=$IDLER_IMAGE"
        echo "export GPU_MARKET_IDLER_DIGEST=$(digest_of "$IDLER_IMAGE")"
        echo "export GPU_MARKET_SERVER_IMAGE=$SERVER_IMAGE"
        echo "export GPU_MARKET_SERVER_DIGEST=$(digest_of "$SERVER_IMAGE")"
        echo "export GPU_MARKET_GANG_IMAGE=$GANG_IMAGE"
        echo "export GPU_MARKET_GANG_DIGEST=$(digest_of "$GANG_IMAGE")"
        ;;
    *) die "usage: $0 start|stop|status|env" ;;
esac
