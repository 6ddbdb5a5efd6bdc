#!/usr/bin/env bash
# Multi-stream processing, energy, hybrid engine and GPU index build, on a 16-core GPU machine
# with dist/ carried. Parts (PART=streams,build,energy,hybrid; each part fits one 10-minute
# device call after the data build):
#  streams: `cohort bench streams` (Czarnul Fig. 2, 6/14, 8/9, 10-12), 1.6 GB of input.
#  build:   `cohort bench index-build`: 1M x 128, nlist 4096, CPU (all cores) and GPU builds,
#           recall of each index; then the serving indexes are built on the GPU.
#  energy:  k-NN served per engine (cpu, gpu-direct, gpu-cohort), server taskset 0-7, generator
#           on 8-15, Poisson: requests per joule at the best rate with p99 <= 1 ms.
#  hybrid:  hybrid vs gpu-cohort (and the cpu engine) on the default setting (nlist 4096,
#           nprobe 16) and on a GPU-bound one (nlist 1024, nprobe 64).
set -uo pipefail
OUT=${OUT:-bench/results}; TAG=${TAG:-h200}; mkdir -p "$OUT"
nv=$(python3 -c "import nvidia, os; print(os.path.join(nvidia.__path__[0], 'cu13', 'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH="${nv}:${LD_LIBRARY_PATH:-}" CUDA_MODULE_LOADING=EAGER
D=${DATA:-/tmp/sift-like-1m}
PART=${PART:-streams}
B=dist/cohort
t0=$(date +%s)
if [[ $PART == *streams* ]]; then
    # Each part's JSON is written as it ends; progress goes to a log as it happens.
    $B bench streams --out "$OUT/streams-$TAG.json" --parts ${STREAMS_PARTS:-fig2,memory,cpu} \
        --log-level warn > "$OUT/streams-$TAG.log" 2>&1; echo "streams exit $?"; tail -n 30 "$OUT/streams-$TAG.log"
fi
if [[ $PART == *build* || $PART == *energy* || $PART == *hybrid* ]]; then
    [ -f $D/groundtruth.ivecs ] || $B data synth --n 1000000 --dim 128 --queries 1000 --out $D --log-level warn
    echo "data: $(( $(date +%s) - t0 )) s"
fi
if [[ $PART == *build* ]]; then
    $B bench index-build --data $D --nlist 4096 --devices gpu,cpu --streams 1,4 --nprobe 16 \
        --out "$OUT/index-build-$TAG.json" --log-level warn 2>&1 | grep '^{' | python3 -c "import json,sys
for l in sys.stdin:
    r = json.loads(l); print(r['assigner'], 'build %.1f s' % r['build_s'], 'recall', [x['recall_at_k'] for x in r['recall']], 'GPU energy %.0f J' % r['energy']['gpu_energy_j'])"
fi
for nl in 4096 1024; do
    if [[ $PART == *energy* || $PART == *hybrid* ]] && [ ! -f $D/ivf$nl.index ]; then
        $B index build --device gpu --base $D/base.fvecs --nlist $nl --out $D/ivf$nl.index --log-level warn 2>&1 | tail -n 1
    fi
done
SPID=
serve() { # index, cores, serve flags...: a pinned server on :7000, waits until it listens
    local ix=$1 cores=$2; shift 2
    taskset -c $cores $B serve --udp 127.0.0.1:7000 --index $ix --log-level warn "$@" > /tmp/serve.log 2>&1 &
    SPID=$!
    for _ in $(seq 1 120); do grep -q listening /tmp/serve.log && return 0; sleep 0.5; done
    echo "server did not start:"; cat /tmp/serve.log; return 1
}
stop() { kill -TERM $SPID; wait $SPID; echo "server exit $?"; }
knn() { # nprobe, load flags...
    local np=$1; shift
    taskset -c 8-15 $B load --target udp://127.0.0.1:7000 --poisson --log-level warn --service knn \
        --queries $D/query.fvecs --gt $D/groundtruth.ivecs --k 10 --nprobe $np --connections 8 "$@"; }
run() { # name, index, nprobe, rates, serve flags...
    local name=$1 ix=$2 np=$3 rates=$4; shift 4
    serve $ix 0-7 "$@" || return
    knn $np --sweep $rates --duration 2 --warmup 1 --json "$OUT/$name-$TAG.json" \
        --label "taskset -c 0-7 dist/cohort serve --index $(basename $ix) $*" 2>&1 | tail -n 9
    stop
}
if [[ $PART == *energy* ]]; then
    run energy-cpu $D/ivf4096.index 16 5k,10k,20k,30k --service knn:cpu --io-threads 2 --service-opt knn.workers=6
    run energy-gpu-direct $D/ivf4096.index 16 10k,20k,40k,60k --service knn:gpu-direct --io-threads 8
    run energy-gpu-cohort $D/ivf4096.index 16 100k,300k,500k,700k --service knn:gpu-cohort --io-threads 8
    python3 scripts/energy-table.py "$OUT" energy "$TAG" | tee "$OUT/energy-table-$TAG.txt"
fi
if [[ $PART == *hybrid* ]]; then
    # Default setting: the network path is the limit; hybrid must never do worse.
    run hybrid-default-gpu-cohort $D/ivf4096.index 16 200k,400k,600k,800k,1000k --service knn:gpu-cohort --io-threads 4
    run hybrid-default-hybrid $D/ivf4096.index 16 200k,400k,600k,800k,1000k --service knn:hybrid --io-threads 4 \
        --service-opt knn.workers=3
    # GPU-bound setting: nlist 1024, nprobe 64.
    # Server cores 0-7: 4 io threads + the GPU's control thread + 3 cpu workers for hybrid; the
    # cpu engine alone gets the same 3 workers.
    run hybrid-heavy-cpu $D/ivf1024.index 64 250,500,1k,2k --service knn:cpu --io-threads 1 --service-opt knn.workers=3
    run hybrid-heavy-gpu-cohort $D/ivf1024.index 64 50k,100k,200k,250k,300k,450k --service knn:gpu-cohort --io-threads 4
    run hybrid-heavy-hybrid $D/ivf1024.index 64 50k,100k,200k,250k,300k,450k --service knn:hybrid --io-threads 4 \
        --service-opt knn.workers=3
    python3 scripts/energy-table.py "$OUT" hybrid "$TAG" | tee "$OUT/hybrid-table-$TAG.txt"
fi
echo "total $(( $(date +%s) - t0 )) s"
