#!/bin/bash
# Issue 49, cohort 1 024: the search's work items taken from a counter (a590aa4), one device
# call a step, from the repository root on the GPU machine:
#   kernels: the 1M SIFT-like data and index, the k-NN self-test of the new build, then
#            `bench gpu-kernels` (cohorts 64 / 1 024 / 8 192, f32 and u8) for the new build
#            beside each cohort-NAME carried, alternating, ROUNDS rounds (2), then cohorts 256
#            and 512 for every build; NCU=1 adds Nsight Compute on the u8 search at 1 024 for
#            every build.
#   tests:   every GPU check of the new build (scripts/gpu-check run tests), the 10M data made
#            on the CPU meanwhile; then the 10M index's kernels alone for every build and the
#            gpu-cohort engine over 1 and 2 control threads (the new build).
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
    for b in $(carried_builds); do
        timeout 120 dist/$b bench gpu-kernels --data $D --nlist 4096 --nprobe 16 --cohorts 256,512 \
            --precision u8 --out "$OUT/gpu-kernels-mid-$b.json" --log-level warn 2>&1 | tail -2
    done
    if [ "${NCU:-0}" = 1 ]; then
        for b in $(carried_builds); do
            B=dist/$b ncu_kernels 1024 'knn_search_tiled_u8' 2 "ncu-search-1024-$b.txt"
        done
    fi
    tar czf "$OUT/kernels.tgz" -C "$OUT" $(cd "$OUT" && ls *.json *.log *.txt | grep -v gpus.txt) &&
        (cd "$OUT" && rm -f *.json selftest-knn.log ncu-*.txt)
    ;;
tests)
    (knn_10m_synth > /tmp/synth.log 2>&1 &)
    gpu_checks
    rc=$?
    knn_10m_data
    knn_10m_kernels "$OUT"
    knn_10m_engine "$OUT" 1 2
    tar czf "$OUT/tenm.tgz" -C "$OUT" $(cd "$OUT" && ls *.json) && (cd "$OUT" && rm -f *.json)
    exit $rc
    ;;
*)
    echo "usage: $0 kernels | tests" >&2
    exit 2
    ;;
esac
