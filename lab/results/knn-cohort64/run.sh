#!/usr/bin/env bash
# Device script for the cohort-of-64 work (issue 49, 2026-11-28), run from the repository root
# on the GPU machine: `bash bench/results/knn-cohort64/run.sh MODE`, $OUT the folder that
# comes back.
#   probe:  the carried build's kernels at cohorts 64 and 1 024 under each search kind (warp,
#           warp32, block) and Nsight Compute's sections of each kernel of a cohort of 64.
#   quick:  the k-NN self-test of the new build (its kernels against the CPU twins), then the
#           kernels round 1 (as in tests); checks: every GPU check alone.
#   tests:  every GPU check of the new build (scripts/gpu-check run tests), then the kernels
#           (1M x 128, nlist 4096, nprobe 16, u8; cohorts 64 / 1 024 / 8 192) of each carried
#           build in turn.
#   more:   the kernels again (round 2), Nsight Compute's sections of the new build's cohort of
#           64, and the bank served by inline and by gpu-cohort in one run (server on cores 0-7,
#           generator on 8-15, open loop on 256 connections, a fine sweep near both knees).
#   bank-long: the bank sweep again with 8-second points (2 s warm-up) at 200-260 K.
# Carried: dist-base/kv.tar.xz (cohort and the cohort-NAME builds: -prev the build before,
# -base issue 49's "today" with graph replay), dist-base/b (the new build's test executables),
# dist-base/debs.
set -u
source scripts/lib/device-run.sh
unpack_carried dist-base/b/*.xz
kernels_round() { # ROUND: each carried build's kernels, JSON per build and round in $OUT
    kernels_round_u8 "$1" 64,1024,8192
}
case "$1" in
probe)
    knn_1m_data
    for kind in warp warp32 block; do
        COHORT_KNN_SEARCH=$kind timeout 60 dist/cohort bench gpu-kernels --data $D --nlist 4096 --nprobe 16 \
            --cohorts 64,1024 --precision u8 --seconds 0.3 --out "$OUT/k-cohort-$kind.json" --log-level warn > /dev/null 2>&1 || echo "$kind failed"
        kernels_summary "$OUT/k-cohort-$kind.json"
    done
    ncu_kernels 64 "knn_filter_tiled|knn_select_filter_wide|knn_plan_one_block|knn_search_warp_u8|knn_select_search_wide" 5 ncu64.txt
    pack_results probe.tgz ncu64.txt
    ;;
quick)
    selftest_and_1m_data
    rc=$?
    kernels_round 1
    pack_results kernels-r1.tgz selftest-knn.log
    exit $rc
    ;;
checks)
    gpu_checks
    ;;
tests)
    checks_and_1m_data
    rc=$?
    kernels_round 1
    pack_results kernels-r1.tgz
    exit $rc
    ;;
more)
    knn_1m_data
    kernels_round 2
    ncu_kernels 64 "knn_plan_one_block|knn_search_warp_u8" 2 ncu64.txt
    grep -E "^  knn_|Duration|Spilling|Achieved Active|No Eligible|SM Active Cycles|Elapsed Cycles" $OUT/ncu64.txt | head -24
    R=$OUT/t; mkdir -p $R
    for run in inline:8 gpu-cohort:7; do
        IFS=: read engine io <<< "$run"
        serve_bank $engine $io
        taskset -c 8-15 dist/cohort load --target http://127.0.0.1:18093 --service bank --users 100000 --poisson \
            --sweep ${BANK_RATES:-220k,230k,240k,250k,260k,270k,280k} --connections 256 --duration 3 --warmup 1 \
            --answer-timeout-ms 2000 --server-pid $BANK_PID --log-level warn --json $R/bank-$engine.json 2>&1 | tail -8
        stop_bank
    done
    mv $R/*.json $OUT/ && rmdir $R
    pack_results more.tgz ncu64.txt
    ;;
bank-long)
    for run in inline:8 gpu-cohort:7; do
        IFS=: read engine io <<< "$run"
        serve_bank $engine $io
        taskset -c 8-15 dist/cohort load --target http://127.0.0.1:18093 --service bank --users 100000 --poisson \
            --sweep ${BANK_RATES:-200k,220k,240k,250k,260k} --connections 256 --duration 8 --warmup 2 \
            --answer-timeout-ms 2000 --server-pid $BANK_PID --log-level warn --json $OUT/bank-long-$engine.json 2>&1 | head -7
        stop_bank
    done
    pack_results bank-long.tgz
    ;;
esac
