#!/usr/bin/env bash
# Session run v25 (issue 26): the limits, quotas, keys and TLS must not cost the served path.
# PART=tests: every GPU check. PART=bench: before (dist/cohort-before) vs after (dist/cohort)
# on UDP (echo cpu, k-NN gpu-cohort; 8 server cores, the generator on the others), HTTP
# (16 KB and 1 KB echo beside nginx), then TLS against plaintext on the same cores: HTTP (wrk)
# and TCP frames (cohort load, closed loop).
set -uo pipefail
OUT=${OUT:-/tmp/out}; TAG=${TAG:-h200-v25}; mkdir -p "$OUT"
nv=$(python3 -c "import nvidia, os; print(os.path.join(nvidia.__path__[0], 'cu13', 'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH="${nv}:${LD_LIBRARY_PATH:-}" CUDA_MODULE_LOADING=EAGER
export COHORT_KERNEL_CACHE=/tmp/cohort-kernels
D=/tmp/sift-like-1m; NL=4096; IX=$D/ivf$NL.index
TLS="crates/cli/tests/data/tls"
t0=$(date +%s)
rc=0
case ${PART:-tests} in
tests)
    ( mkdir -p $D
      [ -f $D/groundtruth.ivecs ] || dist/cohort data synth --n 1000000 --dim 128 --queries 1000 --out $D --log-level warn
      [ -f $IX ] || dist/cohort index build --base $D/base.fvecs --nlist $NL --out $IX --log-level warn
      echo "data and index: $(( $(date +%s) - t0 )) s" ) > "$OUT/data.log" 2>&1 &
    OUT="$OUT/tests" bash scripts/gpu-check run tests; rc=$?
    wait; cat "$OUT/data.log"
    ;;
bench)
    for b in before after; do
        B=dist/cohort; [ $b = before ] && B=dist/cohort-before
        $B bench served --services echo --engines cpu --cores 8 --rates 300k,500k,700k,1m \
            --duration 2 --warmup 1 --connections 32 --out "$OUT/served-echo-$b-$TAG.json" --log-level warn 2>&1 | grep -v '^wrote' | tail -n 8
        [ -f $IX ] && $B bench served --services knn --engines gpu-cohort --cores 8 \
            --rates 300k,500k,700k --duration 2 --warmup 1 \
            --index $IX --queries $D/query.fvecs --gt $D/groundtruth.ivecs --k 10 --nprobe 16 \
            --out "$OUT/served-knn-$b-$TAG.json" --log-level warn 2>&1 | grep -v '^wrote' | tail -n 6
    done
    CORES=8 SIZES="1024 16384" SECS=3 \
        VARIANTS="--tls-cert $TLS/cert.pem --tls-key $TLS/key.pem" \
        bash scripts/http-served.sh "$OUT/http-served-$TAG.json" dist/debs before=dist/cohort-before after=dist/cohort 2>&1 | grep -v "^wrote" | tail -n 40
    PART=tcp OUT="$OUT" TAG="$TAG" bash "$0"
    ;;
tcp)
    # TCP frames, closed loop (64 connections x 16 in flight), plaintext then TLS.
    for tls in plain tls; do
        args=(); largs=()
        [ $tls = tls ] && { args=(--tls-cert $TLS/cert.pem --tls-key $TLS/key.pem); largs=(--tls-ca $TLS/ca.pem); }
        taskset -c 0-7 dist/cohort serve --service echo --engine inline --tcp 127.0.0.1:18095 \
            --io-threads 8 --log-level warn "${args[@]}" > /dev/null &
        srv=$!
        sleep 1
        for bytes in 64 16384; do
            taskset -c 8-15 dist/cohort load --target tcp://127.0.0.1:18095 --service echo \
                --payload-bytes $bytes --concurrency 1024 --connections 64 --duration 3 --warmup 1 \
                "${largs[@]}" --json "$OUT/tcp-$tls-$bytes-$TAG.json" --log-level warn 2>&1 | tail -n 3
        done
        kill -INT $srv; wait $srv
    done
    ;;
esac
echo "part ${PART:-tests}: $(( $(date +%s) - t0 )) s, exit $rc"
exit $rc
