#!/usr/bin/env bash
# The bank served on 8 cores (0-7) by each engine in ENGINES, loaded by `cohort load` (cores
# 8-15, open loop, Poisson, every page checked) with each connection count in CONNS over RATES.
# Usage: scripts/bank-conns.sh OUT_DIR TAG  (ENGINES="inline cpu gpu-cohort", CONNS="64 128",
# RATES=80k,160k,240k,320k; COHORT=dist/cohort; SERVE_ARGS: more `cohort serve` flags, e.g.
# "--service-opt bank.streams=40"; NAME: the file name's engine part, the engine by default).
# The server's /metrics (cohort sizes, stage waits) is kept beside each run's JSON.
set -uo pipefail
out=${1:?OUT_DIR}
tag=${2:?TAG}
B=${COHORT:-dist/cohort}
mkdir -p "$out"
. "$(dirname "$0")/lib/wait-port.sh"
for engine in ${ENGINES:-inline cpu gpu-cohort}; do
    CUDA_MODULE_LOADING=EAGER taskset -c 0-7 "$B" serve --http 127.0.0.1:18093 --io-threads 8 \
        --log-level warn --bank-users 100000 --service "bank:$engine" ${SERVE_ARGS:-} &
    srv=$!
    wait_port 18093 120
    for c in ${CONNS:-64 128}; do
        echo "== bank on $engine, 8 cores, $c connections"
        taskset -c 8-15 "$B" load --target http://127.0.0.1:18093 --duration 2 --warmup 1 \
            --answer-timeout-ms 2000 --server-pid "$srv" --log-level warn --service bank \
            --users 100000 --poisson --sweep "${RATES:-80k,160k,240k,320k}" \
            --connections "$c" --json "$out/bank-conns-${NAME:-$engine}-c$c-$tag.json" 2>&1 |
            grep -v "^$"
        curl -s http://127.0.0.1:18093/metrics >"$out/bank-conns-${NAME:-$engine}-c$c-$tag.metrics" ||
            true
    done
    kill -INT $srv
    wait $srv
done
