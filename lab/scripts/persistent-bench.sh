#!/usr/bin/env bash
# The gpu-persistent experiments (issue 10) on a 16-core GPU machine with dist/ carried:
# 1M x 128 SIFT-like data, IVF nlist 4096, nprobe 16, k 10. Parts (PART=engine,served,noisy;
# each fits one 10-minute device call after the ~2.5 min data build):
#  engine: `cohort-lab bench engine` without sockets (Centaur emulated the network): k-NN per
#          engine and window; the empty-request round trip (echo, window 1); Lynx Fig. 6/7
#          (spin 0/50/200/800 us x 1/8/64/132 queues, gpu-direct vs gpu-persistent).
#  served: Centaur Fig. 11 (throughput-latency per engine, server on 8 cores) and Fig. 1/7
#          (highest rate at p99 <= 1 ms with 1, 2, 4, 8 server cores), server pinned with
#          taskset to cores 0..N-1, the generator a separate process on cores 8-15, Poisson.
#  noisy:  Centaur Fig. 10 / Lynx: one server core; a CPU-hungry program on cores 1-7, then on
#          the server's own core; the neighbour's own rate alone and beside the server.
#  plans:  k-NN in process per window: gpu-persistent's cohort plan (8192 slots, and the default
#          2048) beside its per-pair plan and gpu-cohort, with the GPU's stamped profile.
#  stages: k-NN's filter:search:reduce block ratio (STAGES="132:264:33 ..."), window 1024; each
#          run bounded by `timeout` (a start that cannot place its blocks must fail, not hang).
# BIN picks the binary (default dist/cohort); SERVE_EXTRA adds serve flags to every served run.
set -uo pipefail
OUT=${OUT:-lab/results}; TAG=${TAG:-h200}; mkdir -p "$OUT"
nv=$(python3 -c "import nvidia, os; print(os.path.join(nvidia.__path__[0], 'cu13', 'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH="${nv}:${LD_LIBRARY_PATH:-}" CUDA_MODULE_LOADING=EAGER
D=${DATA:-/tmp/sift-like-1m}; NL=4096; IX=$D/ivf$NL.index
PART=${PART:-engine}
B=${BIN:-dist/cohort}
L=${LAB:-dist/cohort-lab}
t0=$(date +%s)
if [[ $PART == *engine* || $PART == *served* || $PART == *noisy* || $PART == *stages* || $PART == *plans* ]]; then
    [ -f $D/groundtruth.ivecs ] || $B data synth --n 1000000 --dim 128 --queries 1000 --out $D --log-level warn
    [ -f $IX ] || $B index build --base $D/base.fvecs --nlist $NL --out $IX --log-level warn
    echo "data and index: $(( $(date +%s) - t0 )) s"
fi
short() { grep '^{' | python3 -c "import json,sys
for l in sys.stdin:
    r = json.loads(l); print(r.get('engine'), r.get('service'), r.get('spin_us'), r.get('service_opt'), 'window', r.get('window'), 'q/s %.0f' % r.get('queries_per_s', 0), 'p50 %.1f p99 %.1f us' % (r['latency_us']['p50'], r['latency_us']['p99']), 'errors', r.get('errors'))"; }
if [[ $PART == *engine* ]]; then
    $L bench engine --data $D --nlist $NL --nprobe 16 --k 10 --max-cohort 1024 --engines gpu-persistent,gpu-cohort,gpu-direct \
        --window 1,64,1024,8192 --duration 2 --drivers 4 --out "$OUT/persistent-engine-knn-$TAG.json" --log-level warn 2>&1 | short
    $L bench engine --data $D --nlist $NL --nprobe 16 --k 10 --engines gpu-persistent --service-opt knn.gpu_batch=4 \
        --window 64,1024,8192 --duration 2 --drivers 4 --out "$OUT/persistent-engine-knn-batch4-$TAG.json" --log-level warn 2>&1 | short
    # The engine's own round trip (arrival at ingress to answer read from TX) is logged at info.
    $L bench engine --service echo --engines gpu-persistent,gpu-direct,cpu --window 1,64 --drivers 1 --duration 2 \
        --out "$OUT/persistent-engine-echo-$TAG.json" --log-level info 2>&1 | tee /tmp/echo.log | short
    grep ring-to-ring /tmp/echo.log | tee "$OUT/persistent-ring-to-ring-$TAG.log"
fi
if [[ $PART == *plans* ]]; then
    W=${WINDOWS:-1,64,1024,8192}
    # NAME=OPT[+OPT...]: the service options of one configuration.
    for plan in ${PLANS:-cohort=knn.gpu_slots=8192 cohort2048=knn.gpu_slots=2048 per-pair=knn.persistent_plan=per-pair}; do
        opts=""; for o in ${plan#*=}; do opts="$opts --service-opt $o"; done
        opts=${opts//+/ --service-opt }
        $L bench engine --data $D --nlist $NL --nprobe 16 --k 10 --engines gpu-persistent $opts \
            --window $W --duration 2 --drivers 4 --out "$OUT/persistent-plan-${plan%%=*}-$TAG.json" --log-level warn 2>&1 | short
    done
    [ "${GPU_COHORT:-1}" = 1 ] && $L bench engine --data $D --nlist $NL --nprobe 16 --k 10 --max-cohort 1024 --engines gpu-cohort \
        --window $W --duration 2 --drivers 4 --out "$OUT/persistent-plan-gpu-cohort-$TAG.json" --log-level warn 2>&1 | short
    # Where a request's time goes on the cohort plan (the GPU's stamps), windows 1 and 1024.
    for w in ${PROFILE_WINDOWS:-1 1024}; do
        f="$OUT/persistent-plan-cohort-profile-w$w-$TAG.json"
        $L bench engine --data $D --nlist $NL --nprobe 16 --k 10 --engines gpu-persistent \
            --service-opt knn.gpu_slots=8192 --service-opt knn.profile=50000 --window $w --duration 2 --drivers 4 \
            --out "$f" --log-level warn 2>&1 | short
        python3 lab/scripts/profile-summary.py "$f"
    done
fi
if [[ $PART == *stages* ]]; then
    for r in ${STAGES:-132:264:33 264:264:33 66:264:33 132:132:33 132:396:33 264:528:66}; do
        timeout 90 $L bench engine --data $D --nlist $NL --nprobe 16 --k 10 --engines gpu-persistent \
            --service-opt knn.stages=$r --window 1024 --duration 2 --drivers 4 \
            --out "$OUT/persistent-stages-${r//:/-}-$TAG.json" --log-level warn > /tmp/stages.log 2>&1
        rc=$?
        short < /tmp/stages.log; grep -v '^{' /tmp/stages.log | tail -n 3
        echo "stages $r: exit $rc"
    done
fi
if [[ $PART == *engine* && ${LYNX:-1} = 1 ]]; then
    echo "[" > /tmp/lynx.json
    for us in 0 50 200 800; do
        for q in 1 8 64 132; do
            w=$(( q * 4 ))
            $L bench engine --service spin --spin-us $us --engines gpu-persistent --service-opt spin.stages=$q \
                --window $w --drivers 1 --duration 1 --out /tmp/p.json --log-level warn 2>&1 | short
            cat /tmp/p.json >> /tmp/lynx.json; echo "," >> /tmp/lynx.json
            $L bench engine --service spin --spin-us $us --engines gpu-direct --service-opt spin.streams=$q \
                --window $w --drivers 1 --duration 1 --out /tmp/p.json --log-level warn 2>&1 | short
            cat /tmp/p.json >> /tmp/lynx.json; echo "," >> /tmp/lynx.json
        done
    done
    echo "[]]" >> /tmp/lynx.json
    cp /tmp/lynx.json "$OUT/persistent-lynx-spin-$TAG.json"
fi
SPID=
serve() { # cores, serve flags...: a pinned server on :7000, waits until it listens
    local cores=$1; shift
    taskset -c $cores $B serve --udp 127.0.0.1:7000 --index $IX --log-level warn "$@" > /tmp/serve.log 2>&1 &
    SPID=$!
    # A fresh machine compiles the persistent module first (NVRTC, ~100 s).
    for _ in $(seq 1 300); do grep -q listening /tmp/serve.log && return 0; sleep 0.5; done
    echo "server did not start:"; cat /tmp/serve.log; return 1
}
stop() { kill -TERM $SPID; wait $SPID; echo "server exit $?"; }
knn() { taskset -c 8-15 $B load --target udp://127.0.0.1:7000 --poisson --log-level warn --service knn \
    --queries $D/query.fvecs --gt $D/groundtruth.ivecs --k 10 --nprobe 16 --connections 8 "$@"; }
engine_rates() {
    case $1 in
        cpu) echo 5k,10k,20k,40k ;;
        gpu-direct) echo 10k,20k,40k,60k ;;
        gpu-cohort) echo 50k,150k,300k,500k,700k ;;
        gpu-persistent) echo ${P_RATES:-50k,100k,200k,300k,500k,700k} ;;
        echo-cpu) echo ${E_RATES:-100k,200k,300k,500k,700k,1m} ;;
    esac
}
if [[ $PART == *served* ]]; then
    for n in ${CORES:-8 1 2 4}; do
        last=$(( n - 1 )); io=$n
        for e in ${ENGINES:-gpu-persistent gpu-cohort gpu-direct cpu}; do
            [ $e = cpu ] && [ $n != 8 ] && continue
            flags="--service knn:$e --io-threads $io"
            [ $e = cpu ] && flags="$flags --service-opt knn.workers=$(( n > 1 ? n - 1 : 1 )) --io-threads 1"
            # The physical anchor: the host's UDP path alone (echo on the cpu engine, same cores).
            [ $e = echo-cpu ] && flags="--service echo:cpu --io-threads $io --service-opt echo.workers=$n"
            flags="$flags ${SERVE_EXTRA:-}"  # e.g. --io-spin-us 50
            serve 0-$last $flags || continue
            if [ $e = echo-cpu ]; then
                taskset -c 8-15 $B load --target udp://127.0.0.1:7000 --poisson --log-level warn --service echo \
                    --connections 8 --sweep $(engine_rates $e) --duration 2 --warmup 1 \
                    --json "$OUT/persistent-served-$e-${n}core-$TAG.json" --label "taskset -c 0-$last dist/cohort serve $flags" 2>&1 | tail -n 8
            else
                knn --sweep $(engine_rates $e) --duration 2 --warmup 1 --json "$OUT/persistent-served-$e-${n}core-$TAG.json" \
                    --label "taskset -c 0-$last dist/cohort serve $flags" 2>&1 | tail -n 8
            fi
            stop
        done
    done
fi
if [[ $PART == *served* ]]; then
    # Fig. 11 (8 cores, one curve per engine) and the Fig. 1/7 table.
    curves=""
    for e in gpu-persistent gpu-cohort gpu-direct cpu echo-cpu; do
        f="$OUT/persistent-served-$e-8core-$TAG.json"; [ -f "$f" ] && curves="$curves $e=$f"
    done
    [ -n "$curves" ] && $L bench plot --title "k-NN served over UDP, server on 8 cores (1M x 128, nprobe 16)" \
        --out "$OUT/persistent-fig11-$TAG.png" $curves
    python3 lab/scripts/best-rate.py "$OUT" persistent-served "$TAG" > "$OUT/persistent-cores-$TAG.txt"; cat "$OUT/persistent-cores-$TAG.txt"
fi
if [[ $PART == *noisy* ]]; then
    for e in ${NOISY_ENGINES:-gpu-persistent gpu-cohort gpu-direct}; do
        for where in none others own; do
            case $where in none) hog= ;; others) hog=1-7 ;; own) hog=0 ;; esac
            serve 0 --service knn:$e --io-threads 1 || continue
            hp=
            if [ -n "$hog" ]; then
                taskset -c $hog $L bench hog --cpus $hog --seconds 9 --out "$OUT/persistent-noisy-hog-$e-$where-$TAG.json" > /dev/null 2>&1 &
                hp=$!
            fi
            knn --sweep $(engine_rates $e) --duration 1 --warmup 0.5 --json "$OUT/persistent-noisy-$e-$where-$TAG.json" \
                --label "taskset -c 0 dist/cohort serve --service knn:$e --io-threads 1; hog on: ${hog:-none}" 2>&1 | tail -n 7
            [ -n "$hp" ] && wait $hp
            stop
        done
    done
    # The neighbour alone: its rate without a server beside it.
    taskset -c 1-7 $L bench hog --cpus 1-7 --seconds 3 --out "$OUT/persistent-noisy-hog-alone-others-$TAG.json"
    taskset -c 0 $L bench hog --cpus 0 --seconds 3 --out "$OUT/persistent-noisy-hog-alone-own-$TAG.json"
    python3 lab/scripts/best-rate.py "$OUT" persistent-noisy "$TAG" > "$OUT/persistent-noisy-$TAG.txt"; cat "$OUT/persistent-noisy-$TAG.txt"
fi
echo "total $(( $(date +%s) - t0 )) s"
