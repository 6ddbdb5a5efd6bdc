#!/bin/bash
# Issue 49: the tensor-core filter's select and re-rank fused only where the selects are wide
# (76573a2), and the tiled plan replayed as one CUDA graph. From the repository root on the GPU
# machine, one device call a mode:
#   tests:   every GPU check of the new build (scripts/gpu-check run tests; the 1M data made
#            meanwhile, the 10M set's vectors too), then `bench gpu-kernels` (1M, nlist 4096,
#            nprobe 16, u8; cohorts 64 / 256 / 1 024 / 8 192) for `cohort` and each carried
#            cohort-NAME (cohort-prev: 8847abf, main before; cohort-base: d5016a9, issue 49's
#            "today", with the graph timing patched in), then the new build with the
#            tensor-core filter from 64 queries (COHORT_KNN_FILTER=tensor:64) at 64 and 128.
#   served:  (the 10M set made after the bank, if the tests call's machine is gone) the bank served over HTTP on cores 0-7 by the inline engine and by gpu-cohort
#            (one run, default knobs, Poisson sweep, every page checked, board energy in each
#            JSON), then k-NN on the 10M index served by gpu-cohort on one GPU (the new build
#            beside cohort-prev, the echo anchor first), then Nsight Compute's time of each
#            kernel of the new build's cohorts of 64 (ncu-64.txt).
#   more:    the kernels again (round 2; 64 / 128 / 1 024 / 8 192), the bank closed loop (256
#            and 1 024 connections) and open loop on 64 connections for both engines, the 10M
#            index in process on gpu-cohort over 1 and 2 control threads (bench engine).
#   served-more: the 10M index served by the new build at higher rates (500 K, 600 K), over 1
#            and 2 control threads (the echo anchor first).
#   bank-gen: the bank open loop on 256 and 1 024 connections, inline and gpu-cohort (server
#            76573a2), driven by a1418b6's generator (one recorder a generator thread) and, on
#            inline, by 76573a2's (a recorder a connection).
# Carried: dist-base/kv.tar.xz (cohort and the cohort-NAME builds, one xz'd tar), dist-base/b
# (the new build's test executables, each xz'd), dist-base/debs.
set -u
source scripts/lib/device-run.sh
unpack_carried dist-base/b/*.xz
case "$1" in
tests)
    (knn_10m_synth > /tmp/synth-10m.log 2>&1 &)
    checks_and_1m_data
    rc=$?
    for b in $(carried_builds); do
        timeout 100 dist/$b bench gpu-kernels --data $D --nlist 4096 --nprobe 16 --cohorts 64,256,1024,8192 \
            --precision u8 --seconds 0.3 --out "$OUT/gpu-kernels-$b.json" --log-level warn > /dev/null 2>&1 || echo "$b failed"
    done
    COHORT_KNN_FILTER=tensor:64 timeout 60 dist/cohort bench gpu-kernels --data $D --nlist 4096 --nprobe 16 \
        --cohorts 64,128 --precision u8 --out "$OUT/gpu-kernels-tensor64.json" --log-level warn > /dev/null 2>&1 \
        || echo "tensor:64 failed"
    pack_results kernels.tgz
    exit $rc
    ;;
served)
    R=$OUT/t; mkdir -p $R
    for run in inline:8 gpu-cohort:7; do
        IFS=: read engine io <<< "$run"
        serve_bank $engine $io
        taskset -c 8-15 dist/cohort load --target http://127.0.0.1:18093 --service bank --users 100000 --poisson \
            --sweep ${BANK_RATES:-100k,200k,250k,300k,350k} --connections ${BANK_CONNECTIONS:-256} --duration 3 --warmup 1 \
            --answer-timeout-ms 2000 --server-pid $BANK_PID --log-level warn --json $R/bank-$engine.json 2>&1 | tail -7
        stop_bank
    done
    knn_10m_data
    served_10m_beside $R ${BUILDS:-cohort cohort-prev}
    knn_1m_data
    timeout 90 ncu --clock-control none --kernel-name regex:knn_ --launch-skip 20 --launch-count 15 \
        --metrics gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,launch__grid_size \
        dist/cohort bench gpu-kernels --data $D --nlist 4096 --nprobe 16 --cohorts 64 --precision u8 --seconds 0.05 \
        --out /tmp/ncu-bench.json --log-level warn > $R/ncu-64.txt 2>&1 || echo "ncu failed"
    grep -E "knn_|duration" $R/ncu-64.txt | head -40
    tar czf "$OUT/served.tgz" -C "$R" . && rm -rf "$R"
    ;;
more)
    (knn_10m_synth > /tmp/synth-10m.log 2>&1 &)
    knn_1m_data
    for b in $(carried_builds); do
        timeout 60 dist/$b bench gpu-kernels --data $D --nlist 4096 --nprobe 16 --cohorts 64,128,1024,8192 \
            --precision u8 --seconds 0.3 --out "$OUT/gpu-kernels-$b-r2.json" --log-level warn > /dev/null 2>&1 || echo "$b failed"
    done
    R=$OUT/t; mkdir -p $R
    knn_10m_synth  # done before the bank, whose cores it would share
    for run in inline:8 gpu-cohort:7; do
        IFS=: read engine io <<< "$run"
        serve_bank $engine $io
        for c in 256 1024; do
            taskset -c 8-15 dist/cohort load --target http://127.0.0.1:18093 --service bank --users 100000 \
                --concurrency $c --connections $c --duration 3 --warmup 1 --answer-timeout-ms 2000 --server-pid $BANK_PID \
                --log-level warn --json $R/bank-closed-$engine-c$c.json 2>&1 | sed -n 2p | sed "s/^/$engine c=$c /"
        done
        taskset -c 8-15 dist/cohort load --target http://127.0.0.1:18093 --service bank --users 100000 --poisson \
            --sweep 20k,50k,80k --connections 64 --duration 3 --warmup 1 --answer-timeout-ms 2000 --server-pid $BANK_PID \
            --log-level warn --json $R/bank-open64-$engine.json 2>&1 | sed -n 2,4p | sed "s/^/$engine 64 conns /"
        stop_bank
    done
    knn_10m_data
    knn_10m_engine $R 1 2
    for f in $R/engine-10m-*.json; do python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(sys.argv[1].split('/')[-1], json.dumps(j['results'])[:600])" $f; done
    tar czf "$OUT/more.tgz" -C "$R" . && rm -rf "$R"
    pack_results kernels-r2.tgz
    ;;
served-more)
    knn_10m_data
    R=$OUT/t; mkdir -p $R
    $B bench served --services echo --engines inline --cores 8 --rates 300k --duration 5 \
        --connections 16 --io-threads 4 --out $R/served-echo-anchor.json --log-level warn 2>&1 | tail -2
    for ct in 1 2; do
        serve_10m $R/serve-ctl$ct.log --control-threads $ct
        for rate in ${RATES:-500k 600k}; do echo "ctl $ct $rate: $(load_10m ctl$ct-$rate $rate $R)"; done
        stop_served
    done
    tar czf "$OUT/served-more.tgz" -C "$R" . && rm -rf "$R"
    ;;
bank-gen)
    # The server is 76573a2 (dist/cohort); the generator a1418b6 (dist/cohort-gen: one recorder
    # a generator thread), beside 76573a2's own generator on the inline engine.
    R=$OUT/t; mkdir -p $R
    for run in inline:8 gpu-cohort:7; do
        IFS=: read engine io <<< "$run"
        serve_bank $engine $io
        gens="cohort-gen"; [ $engine = inline ] && gens="cohort-gen cohort"
        for g in $gens; do
            for c in 256 1024; do
                taskset -c 8-15 dist/$g load --target http://127.0.0.1:18093 --service bank --users 100000 --poisson \
                    --sweep ${BANK_RATES:-100k,200k,280k} --connections $c --duration 2 --warmup 1 --answer-timeout-ms 2000 \
                    --server-pid $BANK_PID --log-level warn --json $R/bank-open-$engine-$g-c$c.json 2>&1 | sed -n 2,4p \
                    | sed "s/^/$engine $g c=$c /"
            done
        done
        stop_bank
    done
    tar czf "$OUT/bank-gen.tgz" -C "$R" . && rm -rf "$R"
    ;;
*)
    echo "usage: $0 tests | served | more | served-more | bank-gen" >&2
    exit 2
    ;;
esac
