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
#   tail:    the served 10M index at 100 K with and without the load's NVML sampling, then at
#            RATES (200k 300k) without (see the mode). CLOCKS=1 (this mode and tenm-served)
#            also keeps the GPU's clocks during each load (scripts/lib/device-run.sh, load_10m).
#   tenm-served: the served 10M index (u8, gpu-cohort, 8 cores) for every build at 100 K,
#            300 K and 400 K, echo anchor first.
#   warp:    branch next/search-warp's kernels beside main's, then its k-NN self-test.
#   served:  the served 1M index (u8, gpu-cohort, 8 cores) for every build, echo anchor first.
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
    kernels_mid
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
tail)
    # The served 10M index's tail (p99 2.6 ms at 100 K, p50 0.31, engine p99 under 1.3 ms;
    # lease2-tenm-tail/, `knn-small-cohort-h100/run.sh tenm-tail`): one `serve` (cores 0-7, --max-cohort 256), the load on
    # 8-15 at 100 K with and without its NVML board-power sampling (--no-gpu-energy), then
    # without it at RATES; the server's histograms read after each run.
    knn_10m_data
    R=$OUT/r; mkdir -p $R
    serve_10m $R/serve.log
    for round in 1 2; do
        load_10m "100k-nvml-r$round" 100k $R
        load_10m "100k-quiet-r$round" 100k $R --no-gpu-energy
    done
    for rate in ${RATES:-200k 300k}; do load_10m "$rate-quiet" $rate $R --no-gpu-energy; done
    stop_served
    tar czf "$OUT/tail.tgz" -C "$R" . && rm -rf "$R"
    ;;
warp)
    # Branch next/search-warp (the u8 search a warp per work item; untested there): the
    # kernels alone (u8, cohorts 64 / 1 024 / 8 192) of main's build (cohort, its block search)
    # and of the branch's (cohort-warp) with COHORT_KNN_SEARCH=warp, warp32 and block, then
    # the branch's k-NN self-test (the new kernel against the CPU twins).
    knn_1m_data
    for v in "cohort block" "cohort-warp warp" "cohort-warp warp32" "cohort-warp block"; do
        set -- $v
        COHORT_KNN_SEARCH=$2 timeout 60 dist/$1 bench gpu-kernels --data $D --nlist 4096 --nprobe 16 \
            --cohorts 64,1024,8192 --precision u8 --out "$OUT/gpu-kernels-$1-$2.json" --log-level warn 2>&1 | tail -1 | cut -c1-300
    done
    B=dist/cohort-warp knn_selftest "${SELFTEST_S:-120}"
    ;;
tenm-served)
    # The served 10M index (u8, gpu-cohort, cores 0-7, the load on 8-15, NVML sampled as in
    # every served run) for each build in turn at RATES (100k 300k 400k), the echo anchor
    # (inline engine) at 300k first; the server's histograms after each run.
    knn_10m_data
    R=$OUT/t; mkdir -p $R
    $B bench served --services echo --engines inline --cores 8 --rates 100k,300k --duration 5 \
        --connections 16 --io-threads 4 --out $R/served-echo-anchor.json --log-level warn 2>&1 | tail -3
    for b in $(carried_builds); do
        B=dist/$b
        serve_10m $R/serve-$b.log
        for rate in ${RATES:-100k 300k 400k}; do echo "$b $rate: $(load_10m $b-$rate $rate $R)"; done
        stop_served
    done
    tar czf "$OUT/tenm-served.tgz" -C "$R" . && rm -rf "$R"
    ;;
served)
    # The served 1M index (u8, gpu-cohort, 8 server cores, the load on 8-15), each build in
    # turn, the echo anchor (inline engine) first; `bench served` as bank-pages-groups-h100.
    knn_1m_data
    R=$OUT/s; mkdir -p $R
    $B bench served --services echo --engines inline --cores 8 --rates 300k,600k,900k,1200k --duration 2 \
        --connections 16 --io-threads 4 --out $R/served-echo-anchor.json --log-level warn 2>&1 | tail -6
    for b in $(carried_builds); do
        dist/$b bench served --services knn --engines gpu-cohort --cores 8 --rates 300k,600k,900k,1200k \
            --duration 2 --connections 16 --io-threads 4 --index $D/ivf4096.index --queries $D/query.fvecs \
            --gt $D/groundtruth.ivecs --serve-arg=--gpus=0 --serve-arg=--gpu-precision=u8 \
            --out $R/served-knn-u8-$b.json --log-level warn 2>&1 | tail -7
    done
    tar czf "$OUT/served.tgz" -C "$R" . && rm -rf "$R"
    ;;
*)
    echo "usage: $0 kernels | tests | tail | tenm-served | served | warp" >&2
    exit 2
    ;;
esac
