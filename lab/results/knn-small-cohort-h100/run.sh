#!/bin/bash
# Issue 49's small and mid cohorts (the u8 search's query staging, the plan a warp per query,
# scan_items unrolled) and the 10M index served, one H100 lease, one device call a step:
#   kernels: the 1M SIFT-like data and index (kept in /tmp/k), the k-NN self-test of the new
#            build, then `bench gpu-kernels` (cohorts 64 / 1 024 / 8 192, f32 and u8) for the
#            new build beside each cohort-NAME carried, alternating, two rounds; then the new
#            build at cohorts 64..1 024 (u8) with the tensor-core filter from 64 queries
#            (COHORT_KNN_FILTER=tensor:64) and from its default (1 024).
#   tests:   every GPU check of the carried build (scripts/gpu-check run tests), the 10M data
#            made on the CPU meanwhile; with TENM=1 then the 10M index's kernels alone (every
#            build) and the engine over 2 control threads (the new build).
#   tenm-tail: the served 10M index at RATE (100k) with --max-cohort 2048 and 256, the engine's
#            histograms (cohort size, queue wait, compute) read from its admin endpoint after.
#   ROUNDS=N kernels: N rounds (2); MID=0 leaves out cohorts 256 and 512; SELFTEST_S the
#            self-test's limit (200 s; it takes about 100).
#   FILTER_FROM=1 kernels: the new build's cohorts 64..1 024 with the tensor-core filter
#            from 64 queries and from its default (else: cohorts 256 and 512, every build).
#   tenm:    the 10M index (nlist 16384, nprobe 32, u8 storage): the kernels alone (both
#            builds), the gpu-cohort engine over 1 and 2 control threads, then served on cores
#            0-7 against the load generator on 8-15, open loop, echo anchor first.
# Carried: dist-base/kv.tar.xz (cohort and cohort-NAME builds, one xz'd tar) and dist-base/b
# (the test executables of `scripts/gpu-check build`, each xz'd).
set -u
source scripts/lib/device-run.sh
unpack_carried dist-base/b/*.xz
case "$1" in
kernels)
    knn_1m_data
    knn_selftest "${SELFTEST_S:-200}" || exit $?
    kernels_beside "${ROUNDS:-2}"
    if [ "${FILTER_FROM:-0}" = 1 ]; then # where the tensor-core filter should start (lease 1)
        for f in tensor:64 tensor; do
            COHORT_KNN_FILTER=$f timeout 120 $B bench gpu-kernels --data $D --nlist 4096 --nprobe 16 --cohorts 64,256,512,1024 \
                --precision u8 --out "$OUT/gpu-kernels-filter-${f/:/}.json" --log-level warn 2>&1 | tail -4
        done
    elif [ "${MID:-1}" = 1 ]; then # the cohorts between, each build once
        kernels_mid
    fi
    tar czf "$OUT/kernels.tgz" -C "$OUT" $(cd "$OUT" && ls *.json *.log) && (cd "$OUT" && rm -f *.json selftest-knn.log)
    ;;
tests)
    # The GPU checks, then (TENM=1) the 10M index's kernels alone for every build and the
    # engine over 2 control threads for the new one, its data made on the CPU meanwhile.
    (knn_10m_synth > /tmp/synth.log 2>&1 &)
    gpu_checks
    rc=$?
    if [ "${TENM:-0}" = 1 ]; then
        knn_10m_data
        knn_10m_kernels "$OUT"
        knn_10m_engine "$OUT" 2
        tar czf "$OUT/tenm.tgz" -C "$OUT" $(cd "$OUT" && ls *.json) && (cd "$OUT" && rm -f *.json)
    fi
    exit $rc
    ;;
tenm)
    knn_10m_data
    R=$OUT/r; mkdir -p $R
    knn_10m_kernels "$R"
    knn_10m_engine "$R" 1 2
    # Served: one `serve` on one GPU (cores 0-7), the echo anchor first, on the same data.
    OUT=$R WORK=/tmp/cw N=10000000 NLIST=16384 NPROBE=32 NODES=9 SINGLE_GPUS=1 TAG=10m-u8 \
        SINGLE_ARGS="--gpu-precision u8" RATES=${RATES:-100k,200k,300k,400k} \
        timeout 300 scripts/cluster-served.sh knn 2>&1 | grep -v Killed | tail -20
    tar czf "$OUT/tenm.tgz" -C "$R" . && rm -rf "$R"
    ;;
tenm-tail)
    # Where the served 10M index's tail comes from (lease 1: p99 4.6 ms at 100 K, p50 0.43):
    # one `serve` as in tenm, the load at RATE (100k) for 5 s, then the engine's histograms
    # (cohort sizes, queue waits, compute) from its admin endpoint, once with --max-cohort 2048
    # and once with 256 (the default).
    knn_10m_data
    R=$OUT/r; mkdir -p $R
    for mc in 2048 256; do
        serve_10m $R/serve-c$mc.log --max-cohort $mc
        load_10m c$mc "${RATE:-100k}" $R | sed -n 1p
        grep -E '^cohort_cohort_size|^cohort_.*(queue_wait|compute).*(_sum|_count)' $R/metrics-c$mc.txt | head -20
        stop_served
    done
    tar czf "$OUT/tail.tgz" -C "$R" . && rm -rf "$R"
    ;;
esac
