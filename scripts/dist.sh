#!/usr/bin/env bash
# Builds the release binary into dist/ (ignored; carried to the GPU machine, which has no cargo).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p cohort-cli
mkdir -p dist
cp target/release/cohort dist/cohort
strip dist/cohort 2>/dev/null || true
ls -la dist/
