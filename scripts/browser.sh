#!/usr/bin/env bash
# What the market page's browser test (client/tests/page.rs) needs: Debian's Chromium, Node.js
# and the pinned playwright-core that drives it (client/tests/browser/package-lock.json).
# Installs only what is missing; never downloads a browser of its own (`playwright install`):
# the test launches /usr/bin/chromium.
source "$(dirname "$0")/lib.sh"

apt_install chromium
if ! command -v node >/dev/null; then
    apt_install nodejs npm
fi
BROWSER_DIR="$REPO_ROOT/client/tests/browser"
# The version the lock pins, and the one installed (none: empty).
pinned() { node -p "require('$BROWSER_DIR/package-lock.json').packages['node_modules/playwright-core'].version"; }
installed() { node -p "require('$BROWSER_DIR/node_modules/playwright-core/package.json').version" 2>/dev/null || true; }
if [ "$(installed)" != "$(pinned)" ]; then
    log "installing playwright-core into $BROWSER_DIR/node_modules"
    npm ci --prefix "$BROWSER_DIR" --no-audit --no-fund --loglevel=error
fi
