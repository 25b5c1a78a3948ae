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

# free_port_block N [PREFERRED]: a loopback port P such that P to P+N-1 and P+1001 (a local
# validator's RPC, websocket, gossip and dynamic ports, and its faucet: scripts/validator.sh)
# are free for TCP and UDP; PREFERRED when its block is free, else one the kernel hands out.
free_port_block() {
    python3 - "$1" "${2:-}" <<'PY'
import socket, sys
n, preferred = int(sys.argv[1]), sys.argv[2]
def free(port):
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        s = socket.socket(socket.AF_INET, kind)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        finally:
            s.close()
    return True
def block_free(p):
    return p + n + 1001 < 65536 and all(free(q) for q in range(p, p + n)) and free(p + 1001)
if preferred and block_free(int(preferred)):
    print(preferred); sys.exit(0)
for _ in range(500):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close()
    if p < 60000 and block_free(p):
        print(p); sys.exit(0)
sys.exit("no block of %d free loopback ports was found" % n)
PY
}

# port_holder PORT: who listens on PORT (TCP or UDP), as `ss` names the process; empty if free.
port_holder() {
    ss -Hlntup "( sport = :$1 )" 2>/dev/null | sed -n 's/.*users:((\("[^"]*"\),pid=\([0-9]*\).*/\1 (pid \2)/p' | head -1
}

# require_free_ports PORT:WHAT...: dies naming the first port that is taken, what it was for and
# the program that holds it.
require_free_ports() {
    local taken holder
    taken="$(python3 - "$@" <<'PY'
import socket, sys
for arg in sys.argv[1:]:
    port = int(arg.split(":", 1)[0])
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        s = socket.socket(socket.AF_INET, kind)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            print(arg); sys.exit(0)
        finally:
            s.close()
PY
)"
    [ -z "$taken" ] && return 0
    holder="$(port_holder "${taken%%:*}")"
    die "port ${taken%%:*} (${taken#*:}) is taken${holder:+ by $holder}: stop it, or choose other ports"
}

# pubkey_of KEYPAIR_FILE: the base58 public key of a Solana CLI keypair file.
pubkey_of() {
    python3 - "$1" <<'PY'
import json, sys
alphabet = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
raw = bytes(json.load(open(sys.argv[1]))[32:])
n = int.from_bytes(raw, "big"); out = ""
while n: n, r = divmod(n, 58); out = alphabet[r] + out
print("1" * (len(raw) - len(raw.lstrip(b"\0"))) + out)
PY
}
