#!/usr/bin/env bash
# The bank served over loopback HTTP as its users would see it: `cohort serve` pinned to the
# first half of the cores, `cohort load` (session replay over keep-alive connections, every
# page checked byte for byte against the backend data) as a separate process on the other
# half, Poisson open loop raised through RATES until p99 passes the limit.
# Usage: lab/scripts/bank-served.sh OUT_JSON_BASE SERVE_ARGS...
#   e.g. lab/scripts/bank-served.sh out/bank-gpu-served-h200 --engine gpu-cohort --io-threads 4
# (COHORT=path/to/cohort, default target/release; USERS, default 1000000; RATES=a,b,c;
# PORT, default 18080; CONNECTIONS, default 64: each carries one request at a time, so the
# rate it can offer is CONNECTIONS / latency.) Writes OUT_JSON_BASE.json and .png.
set -euo pipefail
base=${1:?usage: lab/scripts/bank-served.sh OUT_JSON_BASE SERVE_ARGS...}
shift
cohort=${COHORT:-target/release/cohort}
users=${USERS:-1000000}
port=${PORT:-18080}
cores=$(nproc)
half=$((cores / 2))
mkdir -p "$(dirname "$base")"
taskset -c "0-$((half - 1))" "$cohort" serve --service bank --bank-users "$users" \
    --http "127.0.0.1:$port" --log-level warn "$@" &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
# Up when the port answers: the server listens once its engines are ready (a GPU engine
# allocates its pinned slots in seconds; storing 1 M records in an empty memcached takes
# about a minute).
up=""
for _ in $(seq 1 1200); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then up=1; break; fi
    kill -0 $server 2>/dev/null || { echo "the server exited during start-up" >&2; exit 1; }
    sleep 0.5
done
[ -n "$up" ] || { echo "the server did not listen within 10 minutes" >&2; exit 1; }
echo "server up after ${SECONDS}s"
rates=${RATES:-5k,10k,20k,40k,60k,80k,120k,160k,240k}
taskset -c "$half-$((cores - 1))" "$cohort" load --target "http://127.0.0.1:$port" \
    --service bank --users "$users" --poisson --sweep "$rates" --connections "${CONNECTIONS:-64}" \
    --duration 3 --warmup 1 --answer-timeout-ms 2000 --server-pid "$server" \
    --label "cohort serve --service bank $* (cores 0-$((half - 1))); load on cores $half-$((cores - 1))" \
    --json "$base.json" --plot "$base.png"
kill -INT $server
wait $server || true
trap - EXIT
