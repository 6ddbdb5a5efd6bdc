#!/usr/bin/env bash
# The bank's CPU baseline (Rhythm's Table 3 CPU rows) on one machine:
#  1. in-process: sessions pre-built in memory, 1/4/8/16 worker threads calling the service;
#  2. served over loopback HTTP: `cohort serve` pinned to its cores, `cohort load` (session
#     replay, every page checked) as a separate process on the other cores, Poisson open loop
#     raised until p99 passes the limit.
# Usage: lab/scripts/bank-cpu.sh OUT_DIR [TAG]   (COHORT=path/to/cohort, default target/release;
# IO_THREADS=n server io threads, default 1; RATES=a,b,c the sweep; SERVED_ONLY=1 skips 1.)
set -euo pipefail
out=${1:?usage: lab/scripts/bank-cpu.sh OUT_DIR [TAG]}
tag=${2:-$(hostname)}
cohort=${COHORT:-target/release/cohort}
mkdir -p "$out"
cores=$(nproc)
users=1000000

[ -n "${SERVED_ONLY:-}" ] || "$cohort" bench bank-cpu --workers 1,4,8,16 --users "$users" \
    --out "$out/bank-cpu-inprocess-$tag.json"

# Served: the server on the first half of the cores (io threads + the rest workers), the
# generator on the second half.
io=${IO_THREADS:-1}
workers=$(($(nproc) / 2 - io))
USERS=$users COHORT=$cohort lab/scripts/bank-served.sh "$out/bank-cpu-served-$tag-io$io" \
    --io-threads "$io" --workers "$workers"
