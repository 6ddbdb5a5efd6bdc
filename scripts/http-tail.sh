#!/usr/bin/env bash
# Where the served bank's p99 tail comes from (issue 24): the same generator (`cohort load`,
# HTTP, open loop, Poisson) against (1) the gateway's 16 KB JSON echo on the inline engine, whose
# server path wrk measured at p99 0.27 ms at 437 K/s, and (2) the bank on inline with 64, 256
# and 1024 connections, plus (3) the bank closed loop. Server on cores 0-7, generator on 8-15.
# Usage: scripts/http-tail.sh OUT_DIR TAG (COHORT=dist/cohort by default)
set -uo pipefail
out=${1:?OUT_DIR}
tag=${2:?TAG}
B=${COHORT:-dist/cohort}
mkdir -p "$out"
. "$(dirname "$0")/lib/wait-port.sh"
serve() {
    taskset -c 0-7 "$B" serve --http 127.0.0.1:18092 --io-threads 8 --log-level warn \
        --bank-users 100000 "$@" &
    srv=$!
    wait_port 18092
}
load() {
    taskset -c 8-15 "$B" load --target http://127.0.0.1:18092 --duration 2 --warmup 1 \
        --answer-timeout-ms 2000 --server-pid "$srv" --log-level warn "$@" 2>&1 | grep -v "^$"
}
serve --service echo:inline
load --service echo --payload-bytes 16384 --poisson --sweep 40k,80k,160k,240k,320k \
    --connections 256 --json "$out/tail-echo16k-$tag.json"
kill -INT $srv; wait $srv
serve --service bank:inline
for c in 64 256 1024; do
    load --service bank --users 100000 --poisson --sweep 40k,80k,160k \
        --connections "$c" --json "$out/tail-bank-c$c-$tag.json"
done
load --service bank --users 100000 --concurrency 256 --json "$out/tail-bank-closed-$tag.json"
kill -INT $srv; wait $srv
