#!/usr/bin/env bash
# Run v24: the served matrix with 32 generator sockets (the reuseport hash spreads 32 flows over
# 8 io threads; 8 flows left half of them idle in v23): k-NN on 8 cores, echo on 1 core near its ceiling.
set -uo pipefail
OUT=${OUT:-/tmp/out}; TAG=h200-v24; mkdir -p "$OUT"
nv=$(python3 -c "import nvidia, os; print(os.path.join(nvidia.__path__[0], 'cu13', 'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH="${nv}:${LD_LIBRARY_PATH:-}" CUDA_MODULE_LOADING=EAGER COHORT_KERNEL_CACHE=/tmp/cohort-kernels
B=dist/cohort; D=/tmp/sift-like-1m; IX=$D/ivf4096.index
[ -f $D/groundtruth.ivecs ] || $B data synth --n 1000000 --dim 128 --queries 1000 --out $D --log-level warn
[ -f $IX ] || $B index build --base $D/base.fvecs --nlist 4096 --out $IX --log-level warn
$B bench served --services echo --engines inline --cores 1 --rates 200k,225k,250k,275k --connections 32 \
    --duration 2 --warmup 1 --out "$OUT/served-echo-1core-c32-$TAG.json" --log-level warn 2>&1 | grep -v '^wrote'
$B bench served --services knn --engines gpu-cohort,gpu-persistent --cores 8 --rates 500k,700k,900k,1.1m \
    --connections 32 --duration 2 --warmup 1 --index $IX --queries $D/query.fvecs --gt $D/groundtruth.ivecs \
    --k 10 --nprobe 16 --out "$OUT/served-knn-8core-c32-$TAG.json" --log-level warn 2>&1 | grep -v '^wrote'
