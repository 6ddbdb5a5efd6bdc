#!/usr/bin/env bash
# Runs every cargo-fuzz target for a bounded time where a nightly toolchain is present, as many
# side by side as there are cores (each target still gets its full time on a core of its own).
# (The proptest garbage/round-trip tests cover the same decoders on stable, always.)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
# The sanitizer build is CI's one compile outside profile ci (its own flags, its own target
# folder): unoptimised (`--dev`, fuzz/Cargo.toml's dev profile) it took 171 s of CPU against
# release's 297 s (every target, from nothing, on the 2-core machine), and a run of seconds
# needs coverage more than speed. FUZZ_RELEASE=1 builds and runs the targets optimised, for
# long runs.
mode=--dev
[ "${FUZZ_RELEASE:-0}" = 1 ] && mode=--release
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    echo "fuzz: skipped (no nightly toolchain); proptest garbage tests ran instead"
    exit 0
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz"
    cargo install cargo-fuzz --locked --quiet
fi
# One sanitizer build of every target first, so the runs below only start binaries.
cargo +nightly fuzz build "$mode"
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
fuzz_one() { # TARGET SECONDS LOGDIR MODE: one bounded run of the build above; its log's tail, all of it on failure
    local log="$3/$1.log"
    if cargo +nightly fuzz run "$4" "$1" -- -max_total_time="$2" -rss_limit_mb=2048 >"$log" 2>&1; then
        echo "fuzz: $1 for $2s: $(tail -n 1 "$log")"
    else
        echo "fuzz: $1 FAILED"; tail -n 40 "$log"; return 1
    fi
}
export -f fuzz_one
cargo +nightly fuzz list | xargs -P "$(nproc)" -I{} bash -c 'fuzz_one "$@"' _ {} "$secs" "$logs" "$mode"
