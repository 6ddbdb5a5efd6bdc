#!/bin/bash
# The 10M index (nlist 16384, nprobe 32) on one GPU: served on 8 cores with f32 and with u8
# storage (echo anchor first), in process first (it also lets the lease settle before the served runs).
set -u
export CUDA_MODULE_LOADING=EAGER
mkdir -p dist
for f in dist-base/b/cohort.xz; do [ -x dist/cohort ] || { xz -dc $f > dist/cohort; chmod +x dist/cohort; }; done
R=$OUT/r; mkdir -p $R; nvidia-smi -L > $R/gpus.txt
export OUT=$R WORK=/tmp/cw N=10000000 NLIST=16384 NPROBE=32 NODES=9 SINGLE_GPUS=1
RATES=${RATES:-100k,125k,150k,200k,250k,300k}
D=/tmp/cw/sift-like-10000000
[ -f $D/groundtruth.ivecs ] || dist/cohort data synth --n 10000000 --dim 128 --queries 1000 --out $D --log-level warn
[ -f $D/ivf16384.index ] || dist/cohort index build --base $D/base.fvecs --nlist 16384 --out $D/ivf16384.index --log-level warn
for p in f32 u8; do
    timeout 100 dist/cohort bench engine --data /tmp/cw/sift-like-10000000 --nlist 16384 --nprobe 32 --k 10 --engines gpu-cohort \
        --drivers 8 --max-cohort 2048 --window 2048,8192,16384 --duration 2 --gpu-precision $p --log-level warn \
        --out $R/engine-10m-$p.json > $R/engine-10m-$p.log 2>&1 || echo "engine $p failed"
    python3 -c "import json,sys;d=json.load(open(sys.argv[1]));print(sys.argv[2], ' '.join('w%d:%.3fM p50 %.0fus' % (x['window'], x['queries_per_s']/1e6, x['latency_us']['p50']) for x in d['results']))" $R/engine-10m-$p.json $p
done
TAG=10m-f32 RATES=$RATES timeout 250 scripts/cluster-served.sh knn 2>&1 | grep -v Killed | tail -18
TAG=10m-u8 ANCHOR=0 SINGLE_ARGS="--gpu-precision u8" RATES=$RATES timeout 100 scripts/cluster-served.sh knn 2>&1 | grep -v Killed | tail -9
(cd $R && tar czf $OUT/../10m.tgz .)
