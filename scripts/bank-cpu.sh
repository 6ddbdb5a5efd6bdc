#!/usr/bin/env bash
# The bank's CPU baseline (Rhythm's Table 3 CPU rows) on one machine:
#  1. in-process: sessions pre-built in memory, 1/4/8/16 worker threads calling the service;
#  2. served over loopback HTTP: `cohort serve` pinned to its cores, `cohort load` (session
#     replay, every page checked) as a separate process on the other cores, Poisson open loop
#     raised until p99 passes the limit.
# Usage: scripts/bank-cpu.sh OUT_DIR [TAG]   (COHORT=path/to/cohort, default target/release;
# IO_THREADS=n server io threads, default 1; RATES=a,b,c the sweep; SERVED_ONLY=1 skips 1.)
set -euo pipefail
out=${1:?usage: scripts/bank-cpu.sh OUT_DIR [TAG]}
tag=${2:-$(hostname)}
cohort=${COHORT:-target/release/cohort}
mkdir -p "$out"
cores=$(nproc)
users=1000000

[ -n "${SERVED_ONLY:-}" ] || "$cohort" bench bank-cpu --workers 1,4,8,16 --users "$users" --served-workers 0 \
    --out "$out/bank-cpu-inprocess-$tag.json"

# Served: the server on the first half of the cores (1 io thread + the rest workers), the
# generator on the second half.
half=$((cores / 2))
io=${IO_THREADS:-1}
workers=$((half - io))
port=18080
taskset -c "0-$((half - 1))" "$cohort" serve --service bank --bank-users "$users" \
    --http "127.0.0.1:$port" --io-threads "$io" --workers "$workers" --log-level warn &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
sleep 2
rates=${RATES:-5k,10k,20k,40k,60k,80k,120k,160k,240k}
taskset -c "$half-$((cores - 1))" "$cohort" load --target "http://127.0.0.1:$port" \
    --service bank --bank-users "$users" --poisson --sweep "$rates" --connections 64 \
    --duration 3 --warmup 1 --answer-timeout-ms 2000 \
    --label "cohort serve --service bank --io-threads $io --workers $workers (cores 0-$((half - 1))); load on cores $half-$((cores - 1))" \
    --json "$out/bank-cpu-served-$tag-io$io.json" --plot "$out/bank-cpu-served-$tag-io$io.png"
kill -INT $server
wait $server || true
