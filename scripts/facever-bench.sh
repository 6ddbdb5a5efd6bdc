#!/usr/bin/env bash
# The facever service on the GPU machine (dist/ carried, memcached from dist/debs): a real
# memcached (4 threads) pinned to the last four cores and filled by `cohort model load-db
# facever` (the faces built in), then PART=engine: the engines fed in process (cpu, and
# gpu-direct and gpu-cohort in both designs, gpu-persistent); PART=served: the server pinned to 8 cores
# (0-7), the generator on 8-11, every answer checked - cpu engine, host-centric (gpu-direct
# and gpu-cohort), GPU-centric (gpu-cohort, and gpu-persistent: no launch per request) - with
# the cpu engine's echo beside it.
# Usage: OUT=dir TAG=h200 PART=engine|served|persistent scripts/facever-bench.sh
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/gpu-env.sh
OUT=${OUT:-bench/results}; TAG=${TAG:-h200}; mkdir -p "$OUT"
t0=$(date +%s)
if ! command -v memcached > /dev/null && ls dist/debs/memcached_*.deb > /dev/null 2>&1; then
    mc=/tmp/cohort-memcached
    for f in dist/debs/memcached_*.deb dist/debs/libevent-*.deb; do dpkg -x "$f" $mc; done
    export PATH="$mc/usr/bin:$PATH" LD_LIBRARY_PATH="$mc/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH"
fi
n=$(nproc); port=${MC_PORT:-22122}; addr=127.0.0.1:$port
taskset -c "$((n - 4))-$((n - 1))" memcached -l 127.0.0.1 -p "$port" -U 0 -t 4 -c 8192 -m 256 \
    -u "${USER:-root}" &
mcpid=$!
trap 'kill $mcpid 2>/dev/null' EXIT
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.05; done
$B model load-db facever --memcached "$addr" || exit 1
opt="--service-opt facever.memcached=$addr"
case ${PART:-engine} in
persistent)
    # gpu-persistent alone (in process, then served beside the echo anchor and gpu-cohort's
    # GPU-centric design measured in the same run).
    $B bench engine --service facever --engines gpu-persistent,gpu-cohort $opt \
        --window ${WINDOWS:-1,64,1024} --max-cohort 1024 --duration 2 --drivers 4 \
        --out "$OUT/facever-engine-persistent-$TAG.json" --log-level warn 2>&1 | tail -n 8
    $B bench served --services echo --engines cpu --cores 8 --client-cpus 8-11 \
        --rates ${ECHO_RATES:-300k,500k} --duration 2 --warmup 1 \
        --out "$OUT/facever-served-anchor-persistent-$TAG.json" --log-level warn 2>&1 | tail -n 4
    $B bench served --services facever --engines gpu-persistent,gpu-cohort --cores 8 \
        --client-cpus 8-11 "--serve-arg=--facever-memcached=$addr" \
        --rates ${RATES:-10k,50k,100k,200k,300k,400k,600k} --duration 2 --warmup 1 \
        --out "$OUT/facever-served-persistent-$TAG.json" --log-level warn 2>&1 | tail -n 16
    ;;
engine)
    for design in host gpu; do
        $B bench engine --service facever --engines gpu-direct,gpu-cohort $opt \
            --service-opt facever.design=$design --window ${WINDOWS:-1,64,1024} \
            --max-cohort 1024 --duration 2 --drivers 4 \
            --out "$OUT/facever-engine-$design-$TAG.json" --log-level warn 2>&1 | tail -n 8
    done
    # gpu-persistent runs the GPU-centric design only (the worker posts its own fetches).
    $B bench engine --service facever --engines gpu-persistent $opt \
        --window ${WINDOWS:-1,64,1024} --duration 2 --drivers 4 \
        --out "$OUT/facever-engine-persistent-$TAG.json" --log-level warn 2>&1 | tail -n 6
    $B bench engine --service facever --engines cpu $opt --window 64 --duration 2 --drivers 4 \
        --out "$OUT/facever-engine-cpu-$TAG.json" --log-level warn 2>&1 | tail -n 4
    ;;
served)
    $B bench served --services echo --engines cpu --cores 8 --client-cpus 8-11 \
        --rates ${ECHO_RATES:-300k,500k,700k} --duration 2 --warmup 1 \
        --out "$OUT/facever-served-anchor-$TAG.json" --log-level warn 2>&1 | tail -n 6
    rates=${RATES:-10k,25k,50k,100k,200k,300k,400k}
    sa="--serve-arg=--facever-memcached=$addr"
    $B bench served --services facever --engines cpu --cores 8 --client-cpus 8-11 "$sa" \
        --rates "$rates" --duration 2 --warmup 1 \
        --out "$OUT/facever-served-cpu-$TAG.json" --log-level warn 2>&1 | tail -n 10
    for design in host gpu; do
        $B bench served --services facever --engines gpu-direct,gpu-cohort --cores 8 \
            --client-cpus 8-11 "$sa" "--serve-arg=--facever-design=$design" \
            --rates "$rates" --duration 2 --warmup 1 \
            --out "$OUT/facever-served-$design-$TAG.json" --log-level warn 2>&1 | tail -n 18
    done
    $B bench served --services facever --engines gpu-persistent --cores 8 --client-cpus 8-11 \
        "$sa" --rates "$rates" --duration 2 --warmup 1 \
        --out "$OUT/facever-served-persistent-$TAG.json" --log-level warn 2>&1 | tail -n 10
    ;;
esac
echo "facever-bench ${PART:-engine}: $(( $(date +%s) - t0 )) s"
