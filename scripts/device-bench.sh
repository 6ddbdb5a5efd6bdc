#!/usr/bin/env bash
# Runs on the GPU machine (16 cores) from the repository root with dist/ carried:
# the network and cpu-engine benchmarks, results into $OUT (default bench/results).
set -uo pipefail
OUT=${OUT:-bench/results}
mkdir -p "$OUT"
B=dist/cohort
tag=${TAG:-device}
nproc; cat /proc/cpuinfo | grep -m1 "model name"; nvidia-smi -L 2>/dev/null || true
$B bench echo --transports udp,tcp --io-threads 1,2,4 --connections 4 --duration 2 \
    --start-rate 100k --step 1.3 --out "$OUT/echo-$tag.json" --log-level warn 2>&1 | tail -n 80
