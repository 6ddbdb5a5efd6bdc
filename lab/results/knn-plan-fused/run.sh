#!/bin/bash
# Issue 49, the tiled plan in fewer launches (5c8d166: the tensor-core filter's select and
# re-rank one kernel; passes of up to 128 queries plan, scan and scatter in one block), from the
# repository root on the GPU machine, one device call a step:
#   tests:   every GPU check of the new build (scripts/gpu-check run tests; the 1M data made
#            meanwhile), then `bench gpu-kernels` (1M, nlist 4096, nprobe 16; cohorts 64 /
#            1 024 / 8 192, f32 and u8) for the new build beside each cohort-NAME carried
#            (cohort-main: main before; cohort-base: d5016a9, the "today"), alternating,
#            ROUNDS rounds (1), then the cohorts between (128, 256, 512, u8) for every build.
#   more:    the same kernels, round 2; then the new build with the tensor-core filter from
#            64 queries (COHORT_KNN_FILTER=tensor:64) at cohorts 64 and 128, u8.
#   last:    the kernels alone for every build carried: 1M (cohorts 64 / 1 024 / 8 192, u8), then
#            the 10M index (nlist 16384, nprobe 32; cohorts 1 024 / 2 048 / 8 192, u8).
#   served:  as knn-search-warp-h100/run.sh served (the 10M index, one GPU, 8 cores).
# Carried: dist-base/kv.tar.xz (cohort and cohort-NAME builds, one xz'd tar), dist-base/b
# (the test executables of `scripts/gpu-check build`, each xz'd), dist-base/debs.
set -u
source scripts/lib/device-run.sh
unpack_carried dist-base/b/*.xz
case "$1" in
tests)
    checks_and_1m_data
    rc=$?
    kernels_beside "${ROUNDS:-1}" > "$OUT/kernels.log" 2>&1
    for b in $(carried_builds); do
        timeout 120 dist/$b bench gpu-kernels --data $D --nlist 4096 --nprobe 16 --cohorts 128,256,512 \
            --precision u8 --out "$OUT/gpu-kernels-mid-$b.json" --log-level warn >> "$OUT/kernels.log" 2>&1
    done
    pack_results kernels.tgz kernels.log
    exit $rc
    ;;
more)
    knn_1m_data
    for b in $(carried_builds); do
        timeout 120 dist/$b bench gpu-kernels --data $D --nlist 4096 --nprobe 16 --cohorts 64,1024,8192 \
            --precision f32,u8 --out "$OUT/gpu-kernels-$b-r2.json" --log-level warn > /dev/null 2>&1 || echo "$b failed"
    done
    COHORT_KNN_FILTER=tensor:64 timeout 120 dist/cohort bench gpu-kernels --data $D --nlist 4096 --nprobe 16 \
        --cohorts 64,128 --precision u8 --out "$OUT/gpu-kernels-tensor64.json" --log-level warn > /dev/null 2>&1 || echo "tensor:64 failed"
    pack_results kernels.tgz
    ;;
last)
    (knn_10m_synth > /tmp/synth-10m.log 2>&1 &)
    knn_1m_data
    for b in $(carried_builds); do
        timeout 100 dist/$b bench gpu-kernels --data $D --nlist 4096 --nprobe 16 --cohorts 64,1024,8192 \
            --precision u8 --out "$OUT/gpu-kernels-$b-r2.json" --log-level warn > /dev/null 2>&1 || echo "$b failed"
    done
    sleep 1
    knn_10m_data
    for b in $(carried_builds); do
        timeout 100 dist/$b bench gpu-kernels --data $T --nlist 16384 --nprobe 32 --cohorts 1024,2048,8192 \
            --precision u8 --out "$OUT/gpu-kernels-10m-$b.json" --log-level warn > /dev/null 2>&1 || echo "10m $b failed"
    done
    pack_results kernels.tgz
    ;;
served)
    exec bash bench/results/knn-search-warp-h100/run.sh served
    ;;
*)
    echo "usage: $0 tests | more | last | served" >&2
    exit 2
    ;;
esac
