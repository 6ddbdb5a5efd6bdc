#!/bin/bash
# Issue 49, small cohorts: the u8 search a warp per work item, the one-block scan of 32 warps and
# the wide filter select, from the repository root on the GPU machine, one device call a step:
#   tests:   every GPU check of the new build (scripts/gpu-check run tests; the 1M data made
#            meanwhile), then `bench gpu-kernels` (1M, nlist 4096, nprobe 16; cohorts 64 /
#            1 024 / 8 192, f32 and u8) for the new build beside each cohort-NAME carried,
#            alternating, ROUNDS rounds (2), then cohorts 256 and 512 (u8) for every build.
#   tenm:    the 10M index's kernels alone (cohorts 1 024 and 8 192, u8) for every build, and
#            the new build's gpu-cohort engine over 1 and 2 control threads.
#   served:  the served 10M index (u8, gpu-cohort, cores 0-7, the load on 8-15, Poisson,
#            every answer checked) for BUILDS (cohort cohort-main) at RATES (300k 400k), the
#            echo anchor (inline engine) first; the server's histograms after each run.
# Carried: dist-base/kv.tar.xz (cohort and cohort-NAME builds, one xz'd tar) and dist-base/b
# (the test executables of `scripts/gpu-check build`, each xz'd).
set -u
source scripts/lib/device-run.sh
unpack_carried dist-base/b/*.xz
case "$1" in
tests)
    checks_and_1m_data
    rc=$?
    kernels_beside "${ROUNDS:-2}" > "$OUT/kernels.log" 2>&1
    kernels_mid >> "$OUT/kernels.log" 2>&1
    pack_results kernels.tgz kernels.log
    exit $rc
    ;;
tenm)
    knn_10m_data
    knn_10m_kernels "$OUT"
    knn_10m_engine "$OUT" 1 2
    pack_results tenm.tgz
    ;;
served)
    knn_10m_data
    R=$OUT/t; mkdir -p $R
    served_10m_beside $R ${BUILDS:-cohort cohort-main}
    tar czf "$OUT/served.tgz" -C "$R" . && rm -rf "$R"
    ;;
*)
    echo "usage: $0 tests | tenm | served" >&2
    exit 2
    ;;
esac
