#!/usr/bin/env bash
# What the market page's browser test (client/tests/page.rs) needs: Debian's Chromium, Node.js
# and the pinned playwright-core that drives it (client/tests/browser/package-lock.json); and
# what the IDL integration test (client/tests/idl.rs) needs: Anchor's TypeScript client, pinned
# in client/tests/idl/package-lock.json, and Codama with @solana/kit and tsc, pinned in
# client/tests/codama/package-lock.json; and what builds the page's bundles (client/web: esbuild,
# the @noble libraries, xterm.js), which client/tests/seal.rs checks the committed ones against.
# Installs only what is missing; never downloads a browser of its own (`playwright install`):
# the test launches /usr/bin/chromium.
source "$(dirname "$0")/lib.sh"

apt_install chromium
if ! command -v node >/dev/null; then
    apt_install nodejs npm
fi
# npm_pinned DIR PACKAGE: installs DIR's locked packages unless PACKAGE is there at the version
# its lock pins.
npm_pinned() {
    local dir="$1" package="$2" pinned installed
    pinned=$(node -p "require('$dir/package-lock.json').packages['node_modules/$package'].version")
    installed=$(node -p "require('$dir/node_modules/$package/package.json').version" 2>/dev/null || true)
    if [ "$installed" != "$pinned" ]; then
        log "installing $package into $dir/node_modules"
        npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error
    fi
}
npm_pinned "$REPO_ROOT/client/tests/browser" playwright-core
npm_pinned "$REPO_ROOT/client/tests/idl" @anchor-lang/core
npm_pinned "$REPO_ROOT/client/web" esbuild
npm_pinned "$REPO_ROOT/client/tests/codama" codama
