#!/bin/bash
# One H100 lease, three steps (one device call each, on the warm machine):
#   tests:   every GPU check of the carried build (scripts/gpu-check run tests), then the 1M
#            SIFT-like data and index for the kernel runs (kept in /tmp/k for the next call).
#   kernels: the k-NN kernels alone (bench gpu-kernels, cohorts 64 / 1 024 / 8 192, f32 and u8),
#            the new build beside 90dd8c2's (the last checked one), alternating, two rounds.
#   ncu:     Nsight Compute's sections for the u8 scan, the filter and the search select at
#            cohort 8 192 (bench gpu-kernels under ncu).
#   served:  k-NN 1M served on 8 cores, one GPU, u8: the new build beside 90dd8c2's.
#   hop:     the cluster hop (echo) polling with rings both ways and with messages, beside the
#            direct echo, at 2 000/s and 100 000/s (scripts/cluster-served.sh hop).
# Needs dist-base/b (scripts/gpu-check build, xz'd) for tests (dist-base/c3, a later cohort
# alone, is taken first where carried); dist-base/bx (the old cohort)
# and dist-base/cl2/cl.tar.xz (etcd + UCX libraries) for the rest.
set -u
export CUDA_MODULE_LOADING=EAGER NCCL_NVLS_ENABLE=0
source scripts/lib/device-run.sh
unpack_carried dist-base/c3/*.xz dist-base/b/*.xz dist-base/bx/*.xz
D=/tmp/k/sift-like-1m
B=dist/cohort
case "$1" in
tests)
    gpu_checks
    rc=$?
    [ -f $D/groundtruth.ivecs ] || timeout 150 $B data synth --n 1000000 --dim 128 --queries 1000 --out $D --log-level warn
    [ -f $D/ivf4096.index ] || timeout 150 $B index build --base $D/base.fvecs --nlist 4096 --out $D/ivf4096.index --log-level warn
    exit $rc
    ;;
kernels)
    kernels_beside 2
    ;;
ncu)
    # Where the u8 scan and the filter spend their time (hardware counters; clocks left alone).
    [ -f $D/groundtruth.ivecs ] || timeout 150 $B data synth --n 1000000 --dim 128 --queries 1000 --out $D --log-level warn
    [ -f $D/ivf4096.index ] || timeout 150 $B index build --base $D/base.fvecs --nlist 4096 --out $D/ivf4096.index --log-level warn
    ncu_kernels 8192 'knn_search_tiled_u8|knn_filter_tc|knn_select_search$' 3 ncu-8192-u8.txt
    ;;
served)
    # k-NN 1M served on 8 cores, one GPU, u8 storage: the new build and 90dd8c2's, alternating,
    # the echo anchor first (scripts/cluster-served.sh knn, the one `serve` alone: NODES=9).
    R=$OUT/r; mkdir -p $R
    export WORK=/tmp/cw NODES=9 SINGLE_GPUS=1 SINGLE_ARGS="--gpu-precision u8"
    # A lease whose generator cannot keep 300 K/s of echo measures nothing: probe it first.
    B=dist/cohort OUT=$R TAG=probe SINGLE_GPUS=0 RATES=300k timeout 60 scripts/cluster-served.sh knn > /dev/null 2>&1
    if ! python3 -c "import json,sys; r=json.load(open('$R/knn-probe-anchor-echo.json'))['runs'][0]; print('probe: echo at 300k p99', r['latency_us']['p99'], 'saturated', r['generator_saturated']); sys.exit(1 if r['generator_saturated'] or r['latency_us']['p99'] > 1000 else 0)"; then
        tar czf "$OUT/served.tgz" -C "$R" .; echo "this lease's generator cannot keep the rate: not measured"; exit 3
    fi
    export RATES=${RATES:-200k,400k,600k,800k,1000k}
    for b in cohort-90dd8c2 cohort cohort-90dd8c2.2 cohort.2; do
        B=dist/${b%.2} OUT=$R TAG=1m-u8-$b ANCHOR=$([ $b = cohort-90dd8c2 ] && echo 1 || echo 0) \
            timeout 150 scripts/cluster-served.sh knn 2>&1 | grep -v Killed | tail -9
    done
    tar czf "$OUT/served.tgz" -C "$R" . && rm -rf "$R"
    ;;
hop)
    mkdir -p dist && tar xJf dist-base/cl2/cl.tar.xz -C dist
    OUT=$OUT/r WORK=/tmp/cw HOP_RATES="2000 100000" HOP_VARIANTS="poll poll_messages poll.2 poll_messages.2" \
        timeout 300 scripts/cluster-served.sh hop
    tar czf "$OUT/hop.tgz" -C "$OUT/r" . 2>/dev/null && rm -rf "$OUT/r"
    ;;
esac
