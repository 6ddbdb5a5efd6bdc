#!/usr/bin/env bash
# Runs every cargo-fuzz target for a bounded time where a nightly toolchain is present.
# (The proptest garbage/round-trip tests cover the same decoders on stable, always.)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    echo "fuzz: skipped (no nightly toolchain); proptest garbage tests ran instead"
    exit 0
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz"
    cargo install cargo-fuzz --locked --quiet
fi
for t in $(cargo +nightly fuzz list); do
    echo "fuzz: $t for ${secs}s"
    cargo +nightly fuzz run "$t" -- -max_total_time="$secs" -rss_limit_mb=2048 2>&1 | tail -n 3
done
