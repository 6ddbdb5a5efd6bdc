#!/usr/bin/env bash
# Device script for the small-cohort filter (issue 49, 2026-11-28, twenty-fourth session), run
# from the repository root on the GPU machine: `bash bench/results/knn-filter-rows/run.sh MODE`,
# $OUT the folder that comes back.
#   probe:  the k-NN self-test of the new build (its kernels against the CPU twins), then the
#           kernels (1M x 128, nlist 4096, nprobe 16, u8; cohorts 64 / 128 / 1 024 / 8 192) of
#           each carried build, the new build again with the tile filter (COHORT_KNN_ROW_FILTER=0),
#           and Nsight Compute's sections of the new build's cohort of 64. (Lease 2 also ran the
#           build of b67e89c with COHORT_KNN_PDL=0, a variable that build had.)
#   checks: every GPU check of the new build (scripts/gpu-check run tests).
#   kernels: the kernels again (round 2) for each carried build.
#   probe-served: probe (Nsight Compute on the row filter and the warp search only), then served.
#   final: every GPU check of the build the session stops on, then its kernels (64 / 1 024 / 8 192).
#   served: the 10M index served by the new build and by cohort-prev (gpu-cohort on cores 0-7,
#           generator on 8-15, Poisson, every answer checked) beside the UDP echo anchor.
# Carried: dist-base/kv.tar.xz (cohort, cohort-prev = main before, cohort-base = issue 49's
# "today"), dist-base/b (the new build's test executables), dist-base/debs.
set -u
source scripts/lib/device-run.sh
unpack_carried dist-base/b/*.xz
kernels_round() { # ROUND: each carried build's kernels, JSON per build and round in $OUT
    kernels_round_u8 "$1" 64,128,1024,8192
    # The new build with the tile filter at every pass size.
    COHORT_KNN_ROW_FILTER=0 timeout 100 dist/cohort bench gpu-kernels --data $D --nlist 4096 --nprobe 16 \
        --cohorts 64,128 --precision u8 --seconds 0.3 --out "$OUT/gpu-kernels-cohort-tilefilter-r$1.json" \
        --log-level warn > /dev/null 2>&1 || echo "tile filter failed"
    kernels_summary "$OUT/gpu-kernels-cohort-tilefilter-r$1.json"
}
case "$1" in
probe)
    probe_cohort64 "kernels_round 1" \
        "knn_filter_rows|knn_select_filter_wide|knn_plan_one_block|knn_search_warp_u8|knn_select_search_wide" 5
    ;;
checks)
    gpu_checks
    ;;
kernels)
    knn_1m_data
    kernels_round 2
    pack_results kernels-r2.tgz
    ;;
probe-served)
    # probe (the search and row filter alone under Nsight Compute), then served, in one call.
    selftest_and_1m_data
    rc=$?
    kernels_round 1
    (knn_10m_synth > /tmp/data-10m.log 2>&1 &)
    ncu_kernels 64 "knn_filter_rows|knn_search_warp_u8" 3 ncu64.txt
    grep -E "^  knn_|Duration" $OUT/ncu64.txt | head -12
    pack_results probe.tgz ncu64.txt
    [ $rc = 0 ] || exit $rc
    served_10m_packed cohort cohort-prev
    ;;
final)
    # The build the session stops on: every GPU check, then its kernels (a JSON naming it).
    checks_and_1m_data
    rc=$?
    timeout 100 dist/cohort bench gpu-kernels --data $D --nlist 4096 --nprobe 16 --cohorts 64,1024,8192 \
        --precision u8 --seconds 0.3 --out "$OUT/gpu-kernels-cohort-final.json" --log-level warn > /dev/null 2>&1 || echo "kernels failed"
    kernels_summary "$OUT/gpu-kernels-cohort-final.json"
    exit $rc
    ;;
served)
    served_10m_packed cohort cohort-prev
    ;;
esac
