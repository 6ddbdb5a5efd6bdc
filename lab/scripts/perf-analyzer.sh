#!/usr/bin/env bash
# NVIDIA's perf_analyzer (unchanged) against Cohort's Open Inference Protocol, beside Cohort's
# own load generator on the native TCP frames, same service, engine and cores, closed loop
# at concurrency 1, 3, 5 and 7 (perf_analyzer steps linearly).
#   lab/scripts/perf-analyzer.sh OUT_DIR [ENGINE] [SERVER_CPUS] [CLIENT_CPUS]
# PERF_ANALYZER names the binary (tritonclient 2.35.0's manylinux wheel ships one in
# tritonclient-2.35.0.data/data/bin/; it needs libb64-0d from Debian and libcudart.so.12,
# e.g. the nvidia-cuda-runtime-cu12 wheel, on LD_LIBRARY_PATH). COHORT names Cohort's binary.
set -euo pipefail
out=$1; engine=${2:-cpu}; scpu=${3:-0}; ccpu=${4:-1}
pa=${PERF_ANALYZER:?set PERF_ANALYZER to the perf_analyzer binary}
bin=${COHORT:-target/release/cohort}
mkdir -p "$out"
taskset -c "$scpu" "$bin" serve --tcp 127.0.0.1:7551 --http 127.0.0.1:7552 \
    --service "lenet:$engine" --log-level warn > "$out/serve.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
sleep 2
{ echo "commit $(git describe --always --dirty)"; echo "engine $engine, server cpus $scpu, client cpus $ccpu"; nproc; } > "$out/machine.txt"
taskset -c "$ccpu" "$pa" -m lenet -u 127.0.0.1:7552 -i http --shape image:1,28,28 \
    --concurrency-range 1:8:2 --measurement-interval 3000 -f "$out/perf_analyzer.csv" \
    > "$out/perf_analyzer.txt" 2>&1
for c in 1 3 5 7; do
    taskset -c "$ccpu" "$bin" load --target tcp://127.0.0.1:7551 --service lenet --concurrency "$c" \
        --duration 3 --server-pid "$server" --json "$out/cohort-load-tcp-c$c.json" \
        > "$out/cohort-load-tcp-c$c.txt" 2>&1
done
grep -E "^Concurrency" "$out/perf_analyzer.txt"
for c in 1 3 5 7; do
    python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print('cohort load tcp concurrency $c:', round(r['achieved_rate']), 'answers/s, p50', r['latency_us']['p50'], 'us, p99', r['latency_us']['p99'], 'us')" "$out/cohort-load-tcp-c$c.json"
done
