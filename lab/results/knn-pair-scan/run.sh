#!/usr/bin/env bash
# Device script for the pair scan of small cohorts (issue 49, 2026-11-28, twenty-fifth
# session), run from the repository root on the GPU machine:
# `bash bench/results/knn-pair-scan/run.sh MODE`, $OUT the folder that comes back.
#   probe:  the k-NN self-test of the new build (its kernels, the pair scan's among them,
#           against the CPU twins), then the kernels (1M x 128, nlist 4096, nprobe 16, u8;
#           cohorts 16 to 8 192) of the new build, of the same build with the pair scan off
#           (`cohort-grouped`: COHORT_KNN_SEARCH=warp:0, main's plan), with 8 loads a lane
#           (`cohort-warp32`: COHORT_KNN_SEARCH=warp32) and of issue 49's
#           "today" (cohort-base, d5016a9), then Nsight Compute on the pair scan's kernels at 64.
#   checks: every GPU check of the new build (scripts/gpu-check run tests).
#   kernels: the kernels again (round 2) for each build.
#   served: the 10M index served by the new build and by cohort-grouped (gpu-cohort on cores
#           0-7, the generator on 8-15, Poisson, every answer checked) beside the UDP echo anchor.
#   final:  every GPU check of the build the session stops on, then the kernels of each build
#           (64 / 128 / 1 024 / 8 192, round 2).
#   extra:  the kernels at 64 and 128 again (round 3), then the pair scan served at 450 K and
#           500 K beside the echo.
# Carried: dist-base/kv.tar.xz (cohort, cohort-base), dist-base/b (the new build's test
# executables), dist-base/debs.
set -u
source scripts/lib/device-run.sh
unpack_carried dist-base/b/*.xz
# The same binary with the pair scan off: the plan main ran before it.
printf '#!/bin/sh\nCOHORT_KNN_SEARCH=warp:0 exec "$(dirname "$0")/cohort" "$@"\n' > dist/cohort-grouped
# And with 8 loads a lane in flight in the pair scan (the _x2 kernels; 32 rows a step in the
# grouped search from 256 queries).
printf '#!/bin/sh\nCOHORT_KNN_SEARCH=warp32 exec "$(dirname "$0")/cohort" "$@"\n' > dist/cohort-warp32
chmod +x dist/cohort-grouped dist/cohort-warp32
COHORTS=16,64,128,256,1024,8192
case "$1" in
probe)
    probe_cohort64 "kernels_round_u8 1 $COHORTS" \
        "knn_select_filter_plan_wide|knn_search_pairs_u8|knn_filter_tiled|knn_select_search_wide" 8
    ;;
checks)
    gpu_checks
    ;;
kernels)
    knn_1m_data
    kernels_round_u8 2 $COHORTS
    pack_results kernels-r2.tgz
    ;;
served)
    served_10m_packed cohort cohort-grouped
    ;;
extra)
    # A third round at the small cohorts (this build, grouped, d5016a9), then the pair scan
    # served at 450 K and 500 K beside a fresh echo anchor.
    rm -f dist/cohort-warp32
    knn_1m_data
    kernels_round_u8 3 64,128
    pack_results kernels-r3.tgz
    RATES="450k 500k" served_10m_packed cohort
    ;;
final)
    # Every GPU check of the build, then each build's kernels (round 2; the JSON of the
    # checked build is gpu-kernels-cohort-r2.json).
    checks_and_1m_data
    rc=$?
    kernels_round_u8 2 64,128,1024,8192
    pack_results kernels-r2.tgz
    exit $rc
    ;;
esac
