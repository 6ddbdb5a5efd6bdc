#!/bin/bash
# The tensor-core filter's warp tiles (issue 49), one H100 lease, one device call a step:
#   kernels: the 1M SIFT-like data and index (kept in /tmp/k for later calls), the k-NN
#            self-test of the new build (its kernels against the CPU twins), then the k-NN
#            kernels alone (bench gpu-kernels, cohorts 64 / 1 024 / 8 192, f32 and u8), the new
#            build beside each cohort-NAME carried, alternating, two rounds.
#   ncu:     Nsight Compute's sections for the filter at cohort 8 192 (u8 data).
#   tenm:    the 10M index (nlist 16384, nprobe 32, u8 storage) in process, kernels alone and
#            the gpu-cohort engine, the new build beside e2c6bad.
#   tenm-wide: tenm's engine step with --max-cohort 8192.
#   tenm-ctl: the 10M index's engine over 1 and 2 control threads.
#   small:   cohorts of 64 and 256 through the engine, launched and as CUDA graphs.
#   tests:   every GPU check of the carried build (scripts/gpu-check run tests), with the data
#            for a later `kernels` call made on the CPU meanwhile (SELFTEST=0 kernels then
#            leaves out the self-test the tests ran, and runs one round).
# Carried: dist-base/kv.tar.xz (cohort and cohort-NAME builds, one xz'd tar) and dist-base/b
# (the test executables of `scripts/gpu-check build`, each xz'd).
set -u
source scripts/lib/device-run.sh
unpack_carried dist-base/b/*.xz
case "$1" in
kernels)
    while pgrep -f "index build --device cpu" > /dev/null; do sleep 2; done
    knn_1m_data
    rounds=2
    if [ "${SELFTEST:-1}" = 1 ]; then
        knn_selftest 200 || exit $?
    else
        rounds=1; echo "self-test left to the tests step; one round"
    fi
    kernels_beside $rounds
    ;;
ncu)
    knn_1m_data
    ncu_kernels 8192 'knn_filter_tc' 2 ncu-8192-filter.txt
    ;;
tenm)
    # The 10M index (nlist 16384, nprobe 32), u8 storage, in process: the kernels alone and
    # the gpu-cohort engine (8 drivers), the new build beside e2c6bad, alternating.
    knn_10m_data
    for b in cohort cohort-e2c6bad; do
        timeout 90 dist/$b bench gpu-kernels --data $T --nlist 16384 --nprobe 32 --cohorts 1024,8192 --precision u8 \
            --out "$OUT/gpu-kernels-10m-$b.json" --log-level warn > /dev/null 2>&1 || echo "kernels $b failed"
    done
    for b in cohort cohort-e2c6bad; do
        timeout 90 dist/$b bench engine --data $T --nlist 16384 --nprobe 32 --k 10 --engines gpu-cohort \
            --drivers 8 --max-cohort 2048 --window 2048,8192,16384 --duration 2 --gpu-precision u8 --log-level warn \
            --out "$OUT/engine-10m-u8-$b.json" > /dev/null 2>&1 || echo "engine $b failed"
    done
    ;;
tenm-wide)
    # As tenm's engine step with cohorts up to 8 192 (the kernels' best), the new build first.
    knn_10m_data
    for b in cohort cohort-e2c6bad; do
        timeout 60 dist/$b bench engine --data $T --nlist 16384 --nprobe 32 --k 10 --engines gpu-cohort \
            --drivers 8 --max-cohort 8192 --window 16384,32768 --duration 2 --gpu-precision u8 --log-level warn \
            --out "$OUT/engine-10m-u8-wide-$b.json" > /dev/null 2>&1 || echo "engine $b failed"
    done
    ;;
tenm-ctl)
    # The 10M index's engine with its host work over 1 and 2 control threads (one control
    # thread stages and answers ~2 M requests/s: is that where the engine loses to its kernels?).
    knn_10m_data
    knn_10m_engine "$OUT" 1 2
    ;;
small)
    # Small cohorts through the engine (1M, u8): launched kernels against replayed CUDA graphs.
    knn_1m_data
    for mc in 64 256; do
        for gr in "" --cohort-graphs; do
            timeout 60 $B bench engine --data $D --nlist 4096 --nprobe 16 --k 10 --engines gpu-cohort $gr \
                --drivers 8 --max-cohort $mc --window $mc,$((4 * mc)) --duration 2 --gpu-precision u8 --log-level warn \
                --out "$OUT/engine-1m-u8-c$mc${gr:+-graphs}.json" > /dev/null 2>&1 || echo "engine $mc $gr failed"
        done
    done
    ;;
tests)
    # The data for a `kernels` call after this one, made on the CPU meanwhile.
    (knn_1m_data cpu > /tmp/data.log 2>&1 &)
    gpu_checks
    ;;
esac
