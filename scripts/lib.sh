# Shared helpers for the project's scripts. Source it; it sets strict mode.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Tools built once and reused across clones (the SBF linker, the patched std, the validator).
TOOLS_DIR="${GPU_MARKET_TOOLS:-$HOME/.cache/gpu-market}"
mkdir -p "$TOOLS_DIR/bin"
export PATH="$TOOLS_DIR/bin:${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"

log() { printf '\033[1;34m==>\033[0m %s\n' "$*" >&2; }
die() { printf '\033[1;31merror:\033[0m %s\n' "$*" >&2; exit 1; }

# apt_install PKG...: installs the Debian packages that are missing, nothing else.
apt_install() {
    local missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    log "installing Debian packages: ${missing[*]}"
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    if [ ! -f "$TOOLS_DIR/.apt-updated" ] || [ -n "$(find "$TOOLS_DIR/.apt-updated" -mmin +1440)" ]; then
        $sudo apt-get update -qq
        touch "$TOOLS_DIR/.apt-updated"
    fi
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# The program id, read from the committed keypair's declare_id! so it is written once.
program_id() {
    sed -n 's/^declare_id!("\([1-9A-HJ-NP-Za-km-z]*\)");/\1/p' "$REPO_ROOT/programs/gpu-market/src/lib.rs"
}
