#!/usr/bin/env bash
# On a 16-core GPU machine with dist/ carried (and dist-before/, the binary of the commit
# before a change, for a before/after comparison): 1M x 128 SIFT-like data, IVF nlist 4096,
# nprobe 16, k 10. (1) `cohort-lab bench engine` (no sockets) for gpu-direct and gpu-cohort;
# (2) served sweeps over loopback UDP with the server pinned to cores 0-7 (taskset) and the
# generator, a separate process, on cores 8-15, Poisson arrivals, 8 sockets, every answer
# checked, recall against exact search; (3) one server with knn:gpu-cohort, echo:cpu,
# spin:gpu-direct, each service loaded alone, then all three at once. JSON into $OUT.
set -uo pipefail
OUT=${OUT:-lab/results}; TAG=${TAG:-gpu}; mkdir -p "$OUT"
nv=$(python3 -c "import nvidia, os; print(os.path.join(nvidia.__path__[0], 'cu13', 'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH="${nv}:${LD_LIBRARY_PATH:-}" CUDA_MODULE_LOADING=EAGER
D=${DATA:-/tmp/sift-like-1m}; NL=4096; IX=$D/ivf$NL.index
RATES=${RATES:-300k,400k,500k,600k,700k,800k}
REPEAT=${REPEAT:-1}   # served before/after sweeps, alternated this many times (p99 varies run to run)
ENGINE=${ENGINE:-1}; MIXED=${MIXED:-1}
nproc; nvidia-smi -L
t0=$(date +%s)
[ -f $D/groundtruth.ivecs ] || dist/cohort data synth --n 1000000 --dim 128 --queries 1000 --out $D --log-level warn
[ -f $IX ] || dist/cohort index build --base $D/base.fvecs --nlist $NL --out $IX --log-level warn
echo "data and index: $(( $(date +%s) - t0 )) s"
for bin in dist-before dist; do
    [ -x $bin/cohort ] && [ "$ENGINE" = 1 ] || continue
    $bin/cohort-lab bench engine --data $D --nlist $NL --nprobe 16 --k 10 --max-cohort 1024 --engines gpu-direct,gpu-cohort \
        --window 64,1024,8192 --duration 2 --drivers 4 --out "$OUT/engine-$bin-$TAG.json" --log-level warn 2>&1 |
        grep '^{' | cut -c1-200
done
SPID=
serve() { # binary folder, serve flags...: starts a pinned server on :7000 and waits until it listens
    local bin=$1; shift
    taskset -c 0-7 $bin/cohort serve --udp 127.0.0.1:7000 --io-threads 8 --index $IX --log-level warn "$@" \
        > /tmp/serve.log 2>&1 &
    SPID=$!
    for _ in $(seq 1 120); do grep -q listening /tmp/serve.log && return 0; sleep 0.5; done
    echo "server did not start:"; cat /tmp/serve.log; return 1
}
stop() { kill -TERM $SPID; wait $SPID; echo "server exit $?"; }
load() { taskset -c 8-15 dist/cohort load --target udp://127.0.0.1:7000 --poisson --log-level warn "$@"; }
knn() { load --service knn --queries $D/query.fvecs --gt $D/groundtruth.ivecs --k 10 --nprobe 16 "$@"; }
# (2) gpu-cohort served sweeps, before and after (alternated REPEAT times).
for run in $(seq 1 $REPEAT); do
    sfx=$TAG; [ "$REPEAT" = 1 ] || sfx=$TAG-run$run
    if [ -x dist-before/cohort ]; then
        serve dist-before --service knn --engine gpu-cohort && {
            knn --sweep $RATES --duration 2 --warmup 1 --connections 8 --json "$OUT/served-gpu-cohort-before-$sfx.json" \
                --label "taskset -c 0-7 dist-before/cohort serve --service knn --engine gpu-cohort --io-threads 8"
            stop; }
    fi
    serve dist --service knn:gpu-cohort && {
        knn --sweep $RATES --duration 2 --warmup 1 --connections 8 --json "$OUT/served-gpu-cohort-after-$sfx.json" \
            --label "taskset -c 0-7 dist/cohort serve --service knn:gpu-cohort --io-threads 8"
        stop; }
done
[ "$MIXED" = 1 ] || { echo "total $(( $(date +%s) - t0 )) s"; exit 0; }
# (3) three services, three engines, one server.
MIX="knn:gpu-cohort,echo:cpu,spin:gpu-direct"
KR=${KNN_RATE:-300k}; ER=${ECHO_RATE:-100k}; SR=${SPIN_RATE:-20k}
serve dist --service $MIX --service-opt echo.workers=2 && {
    label="taskset -c 0-7 dist/cohort serve --service $MIX --service-opt echo.workers=2 --io-threads 8"
    knn --rate $KR --duration 4 --warmup 1 --connections 4 --json "$OUT/mixed-solo-knn-$TAG.json" --label "$label"
    load --service echo --rate $ER --duration 4 --warmup 1 --connections 2 --json "$OUT/mixed-solo-echo-$TAG.json" --label "$label"
    load --service spin --spin-us 20 --rate $SR --duration 4 --warmup 1 --connections 2 --json "$OUT/mixed-solo-spin-$TAG.json" --label "$label"
    knn --rate $KR --duration 4 --warmup 1 --connections 4 --json "$OUT/mixed-all-knn-$TAG.json" --label "$label" > /tmp/k.txt 2>&1 &
    p1=$!
    load --service echo --rate $ER --duration 4 --warmup 1 --connections 2 --json "$OUT/mixed-all-echo-$TAG.json" --label "$label" > /tmp/e.txt 2>&1 &
    p2=$!
    load --service spin --spin-us 20 --rate $SR --duration 4 --warmup 1 --connections 2 --json "$OUT/mixed-all-spin-$TAG.json" --label "$label" > /tmp/s.txt 2>&1 &
    p3=$!
    wait $p1 $p2 $p3
    echo "all three at once:"; cat /tmp/k.txt /tmp/e.txt /tmp/s.txt
    stop; }
echo "total $(( $(date +%s) - t0 )) s"
