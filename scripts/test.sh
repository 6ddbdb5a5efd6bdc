#!/usr/bin/env bash
# The whole test suite, installing what the tests need. `.ci/run` calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never

echo "== toolchain"
cargo --version
rustup component add rustfmt clippy >/dev/null 2>&1 || true

echo "== format and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --release -- -D warnings

echo "== unit, property and integration tests"
cargo test --workspace --release

echo "== fuzz targets (bounded)"
scripts/fuzz.sh "${FUZZ_SECONDS:-20}"
