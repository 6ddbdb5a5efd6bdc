#!/bin/bash
# This session's GPU runs. `tests`: every GPU check of the carried build (scripts/gpu-check).
# `bank`: the bank on one GPU in process (bench bank-gpu: the new build with threads per page
# by cohort size and with one thread a page, and the previous build), then served closed loop
# on cores 0-7 (inline, gpu-cohort new, gpu-cohort previous) with `cohort load` on 8-15.
# `knn`: k-NN served (bench suite served's steps) with f32 and u8 storage, echo anchor beside.
set -u
export CUDA_MODULE_LOADING=EAGER
mkdir -p dist/debs
cp dist-base/debs/*.deb dist/debs/ 2>/dev/null
for f in dist-base/b/*.xz dist-base/bx/*.xz; do [ -f $f ] || continue; n=$(basename $f .xz); [ -x dist/$n ] || { xz -dc $f > dist/$n; chmod +x dist/$n; }; done
nvidia-smi -L > $OUT/gpus.txt
old=$(cd dist && ls cohort-* 2>/dev/null | head -1)
case "$1" in
tests)
    OUT=$OUT/tests scripts/gpu-check run tests 2>&1 | tail -40
    ;;
bank)
    # Files come back in one archive (the device returns only a few files).
    R=$OUT/r; mkdir -p $R
    G="--cohorts 64,1024,4096,8192 --iters 10 --streams 1 --energy-secs 1 --log-level warn"
    for l in ${LANES:-auto}; do
        a=""; [ $l = auto ] || a="--page-lanes $l"
        dist/cohort bench bank-gpu $G $a --out $R/bank-gpu-new-lanes-$l.json > $R/bank-gpu-new-lanes-$l.log 2>&1
        grep "bank on\|sustained" $R/bank-gpu-new-lanes-$l.log | sed "s/^/lanes $l: /"
    done
    [ -n "$old" ] && dist/$old bench bank-gpu $G --out $R/bank-gpu-$old.json > $R/bank-gpu-$old.log 2>&1
    grep "bank on\|sustained" $R/bank-gpu-$old.log | sed "s/^/$old: /"
    . scripts/lib/wait-port.sh
    for run in ${RUNS:-inline:cohort:8 gpu-cohort:cohort:7 ${old:+gpu-cohort:$old:7}}; do
        IFS=: read engine b io <<< "$run"
        taskset -c 0-7 dist/$b serve --http 127.0.0.1:18093 --io-threads $io --log-level warn \
            --bank-users 100000 --service "bank:$engine" &
        srv=$!
        wait_port 18093 120
        for c in 128 256; do
            taskset -c 8-15 dist/cohort load --target http://127.0.0.1:18093 --duration 3 --warmup 1 \
                --answer-timeout-ms 2000 --server-pid $srv --log-level warn --service bank \
                --users 100000 --concurrency $c --connections $c \
                --json $R/bank-closed-$engine-$b-io$io-c$c.json > /dev/null 2>&1
            python3 -c "import json,sys;d=json.load(open(sys.argv[1]));l=d['latency_us'];print(sys.argv[1].split('/')[-1], round(d['achieved_rate']), 'p50', l.get('p50'), 'p99', l.get('p99'), 'errors', d['errors'], 'unexpected', d['unexpected_answers'], 'server us/answer', round(d['cpu']['server']['cpu_us_per_answer'],1))" $R/bank-closed-$engine-$b-io$io-c$c.json
        done
        curl -s http://127.0.0.1:18093/metrics > $R/bank-closed-$engine-$b-io$io.metrics || true
        kill -INT $srv; wait $srv
    done
    (cd $R && tar czf $OUT/bank.tgz .) && rm -rf $R
    ;;
knn)
    D=/tmp/k/sift-like-1m; IX=$D/ivf4096.index
    [ -f $D/groundtruth.ivecs ] || dist/cohort data synth --n 1000000 --dim 128 --queries 1000 --out $D --log-level warn
    [ -f $IX ] || dist/cohort index build --base $D/base.fvecs --nlist 4096 --out $IX --log-level warn
    dist/cohort bench served --services echo --engines inline --cores 8 --rates 300k,600k,900k,1200k --duration 2 \
        --connections 16 --io-threads 4 --out $OUT/served-echo-anchor.json --log-level warn 2>&1 | tail -6
    for p in f32 u8; do
        dist/cohort bench served --services knn --engines gpu-cohort,gpu-persistent --cores 8 --rates 300k,600k,900k,1200k \
            --duration 2 --connections 16 --io-threads 4 --index $IX --queries $D/query.fvecs --gt $D/groundtruth.ivecs \
            --serve-arg=--gpus=0 --serve-arg=--gpu-slots=8192 --serve-arg=--gpu-precision=$p \
            --out $OUT/served-knn-8-cores-$p.json --log-level warn 2>&1 | tail -8
    done
    ;;
esac
