#!/usr/bin/env bash
# The whole test suite, as `anchor test` runs it (Anchor.toml's `test` script) and as the README's
# test command runs it through `anchor test`: every test of the workspace with cargo-nextest.
# Under `anchor test` the tests that need a cluster use Anchor's validator (ANCHOR_PROVIDER_URL,
# ANCHOR_WALLET); run alone they start their own. Arguments, and those the test command was
# given (GPU_MARKET_TEST_ARGS, shell-quoted), go to nextest.
set -euo pipefail
cd "$(dirname "$0")/.."
eval "set -- ${GPU_MARKET_TEST_ARGS:-} \"\$@\""
exec cargo nextest run --workspace "$@"
