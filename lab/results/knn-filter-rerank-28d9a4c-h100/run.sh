#!/bin/bash
# This session's GPU runs. `tests`: every GPU check of the carried build (scripts/gpu-check).
# `kernels`: the k-NN kernels alone (bench gpu-kernels) and in process (bench engine), f32 and
# u8 storage, the new build beside the last checked one (f9c61b8), alternating.
set -u
export CUDA_MODULE_LOADING=EAGER
mkdir -p dist/debs
cp dist-base/debs/*.deb dist/debs/
for f in dist-base/b/*.xz dist-base/bx/*.xz; do [ -f $f ] || continue; n=$(basename $f .xz); [ -x dist/$n ] || { xz -dc $f > dist/$n; chmod +x dist/$n; }; done
nvidia-smi -L > $OUT/gpus.txt
case "$1" in
tests)
    OUT=$OUT/tests scripts/gpu-check run tests 2>&1 | tail -40
    ;;
kernels)
    B=dist/cohort; D=/tmp/k/sift-like-1m
    [ -f $D/groundtruth.ivecs ] || $B data synth --n 1000000 --dim 128 --queries 1000 --out $D --log-level warn
    [ -f $D/ivf4096.index ] || $B index build --base $D/base.fvecs --nlist 4096 --out $D/ivf4096.index --log-level warn
    for round in 1 2; do
        for b in cohort $(cd dist && ls cohort-* 2>/dev/null); do
            dist/$b bench gpu-kernels --data $D --nlist 4096 --nprobe 16 --cohorts 64,1024,8192 \
                --precision f32,u8 --out $OUT/gpu-kernels-$b-r$round.json --log-level warn 2>&1 | tail -12
        done
    done
    ;;
engine)
    D=/tmp/k/sift-like-1m
    K="--data $D --nlist 4096 --nprobe 16 --k 10 --duration 2 --log-level warn"
    for b in cohort $(cd dist && ls cohort-* 2>/dev/null); do
        for p in f32 u8; do
            dist/$b bench engine $K --engines gpu-cohort,gpu-persistent --drivers 8 --max-cohort 2048 --gpus 0 \
                --gpu-precision $p --window 1024,8192 --out $OUT/engine-$b-$p.json 2>&1 | tail -6
        done
    done
    ;;
esac
