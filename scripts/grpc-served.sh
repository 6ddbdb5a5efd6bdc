#!/usr/bin/env bash
# What the standard front door costs (issue 52), on a 16-core GPU machine with dist/ carried:
# one server, LeNet on ENGINE (default gpu-cohort), pinned to cores 0-7 (8 io threads),
# listening on native UDP, the Open Inference Protocol over gRPC and over HTTP; the load
# generator a separate process on cores 8-15. (1) The physical anchor: echo on the cpu
# engine over UDP. (2) Open-loop Poisson sweeps of the native UDP path and of gRPC
# (`cohort load --target grpc://`, every answer's tensors checked against the CPU function).
# (3) NVIDIA's perf_analyzer, unchanged, over gRPC and HTTP at fixed concurrencies, beside
# `cohort load` closed loop at the same concurrencies on gRPC and UDP. (4) The server's
# /metrics GPU lines under load. JSON and logs into $OUT.
#   PERF_ANALYZER=path/to/perf_analyzer (needs libb64 and libcudart.so.12 on LD_LIBRARY_PATH)
set -uo pipefail
OUT=${OUT:-bench/results}; mkdir -p "$OUT"
ENGINE=${ENGINE:-gpu-cohort}
SCPU=${SERVER_CPUS:-0-7}; CCPU=${CLIENT_CPUS:-8-15}; IO=${IO_THREADS:-8}
UDP_RATES=${UDP_RATES:-200k,400k,500k,600k,700k,800k}
GRPC_RATES=${GRPC_RATES:-50k,100k,150k,200k,300k,400k}
nv=$(python3 -c "import nvidia, os; print(os.path.join(nvidia.__path__[0], 'cu13', 'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH="${nv}:${LD_LIBRARY_PATH:-}" CUDA_MODULE_LOADING=EAGER
{ echo "commit $(cat dist/COMMIT 2>/dev/null || git describe --always --dirty)"; nproc; nvidia-smi -L; } > "$OUT/machine.txt"
cat "$OUT/machine.txt"
SPID=
serve() { # serve flags...: a server pinned to cores 0-7, waited for until it listens
    taskset -c $SCPU dist/cohort serve --udp 127.0.0.1:7000 --grpc 127.0.0.1:8001 --http 127.0.0.1:8080 \
        --io-threads $IO --log-level warn "$@" > /tmp/serve.log 2>&1 &
    SPID=$!
    for _ in $(seq 1 240); do grep -q listening /tmp/serve.log && return 0; sleep 0.5; done
    echo "server did not start:"; cat /tmp/serve.log; return 1
}
stop() { kill -TERM $SPID; wait $SPID; echo "server exit $?"; }
load() { taskset -c $CCPU dist/cohort load --log-level warn "$@"; }
# (1) The anchor: the cpu engine's echo over UDP.
serve --service echo:cpu --workers 4 && {
    load --target udp://127.0.0.1:7000 --service echo --poisson --sweep 300k,600k,900k --duration 2 --warmup 1 \
        --connections 8 --json "$OUT/anchor-echo-udp.json" --label "taskset -c $SCPU dist/cohort serve --service echo:cpu --workers 4 --io-threads $IO"
    stop; }
# (2) LeNet served, native UDP then gRPC, open loop.
label="taskset -c $SCPU dist/cohort serve --service lenet:$ENGINE --io-threads $IO --udp --grpc --http"
serve --service "lenet:$ENGINE" && {
    load --target udp://127.0.0.1:7000 --service lenet --poisson --sweep "$UDP_RATES" --duration 2 --warmup 1 \
        --connections 8 --server-pid $SPID --json "$OUT/lenet-udp.json" --label "$label"
    load --target grpc://127.0.0.1:8001 --service lenet --poisson --sweep "$GRPC_RATES" --duration 2 --warmup 1 \
        --connections 16 --server-pid $SPID --json "$OUT/lenet-grpc.json" --label "$label"
    # (4) The GPU lines of /metrics while gRPC load runs.
    load --target grpc://127.0.0.1:8001 --service lenet --poisson --rate 100k --duration 3 --connections 16 > /dev/null &
    sleep 2; curl -s 127.0.0.1:8080/metrics | grep -E "^nv_gpu" > "$OUT/metrics-gpu.txt"; wait $!
    # (3) perf_analyzer beside cohort load, closed loop, same concurrencies.
    if [ -n "${PERF_ANALYZER:-}" ]; then
        for proto in grpc http; do
            port=8001; [ $proto = http ] && port=8080
            taskset -c $CCPU "$PERF_ANALYZER" -m lenet -u 127.0.0.1:$port -i $proto --shape image:1,28,28 \
                --concurrency-range 16:64:16 --measurement-interval 2000 -f "$OUT/perf_analyzer-$proto.csv" \
                > "$OUT/perf_analyzer-$proto.txt" 2>&1 || echo "perf_analyzer $proto failed"
            grep -E "^Concurrency" "$OUT/perf_analyzer-$proto.txt"
        done
    else
        echo "perf_analyzer: SKIPPED (PERF_ANALYZER not set)"
    fi
    for c in 16 32 48 64; do
        for t in grpc://127.0.0.1:8001 udp://127.0.0.1:7000; do
            proto=${t%%:*}
            load --target $t --service lenet --concurrency $c --duration 2 --warmup 1 --connections $c \
                --server-pid $SPID --json "$OUT/closed-$proto-c$c.json" > /tmp/closed.txt 2>&1
            sed -n 2p /tmp/closed.txt | sed "s/^/$proto /"
        done
    done
    stop; }
for f in "$OUT"/lenet-udp.json "$OUT"/lenet-grpc.json "$OUT"/anchor-echo-udp.json; do
    python3 - "$f" <<'EOF'
import json, sys
runs = json.load(open(sys.argv[1]))["runs"]
ok = lambda r, lim: r["latency_us"]["p99"] <= lim and not sum(r.get("errors", {}).values()) and not r.get("generator_saturated")
best = lambda lim: max([r["achieved_rate"] for r in runs if ok(r, lim)] or [0])
print(sys.argv[1].rsplit("/", 1)[-1], "best at p99<=1ms", round(best(1000)), "at p99<=5ms", round(best(5000)),
      "|", ", ".join(f'{r["offered_rate"]/1e3:.0f}k: p99 {r["latency_us"]["p99"]:.0f} us{" SAT" if r.get("generator_saturated") else ""}' for r in runs))
EOF
done
