#!/usr/bin/env bash
# Device call (not committed): k-NN served on 8 cores, 1 and 4 GPUs, one control thread per
# GPU against one for all four (--gpus-per-control-thread 4), beside the echo anchor; and
# the same in process.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
. scripts/lib/gpu-env.sh
R=/tmp/shr; rm -rf $R; mkdir -p $R dist
[ -x dist/cohort ] || { xz -dc dist-base/new11/cohort.xz > dist/cohort; chmod +x dist/cohort; }
C=dist/cohort
nvidia-smi --query-gpu=name --format=csv,noheader | tee $R/gpus.txt; nproc >> $R/gpus.txt
echo "commit $(cat dist-base/new11/COMMIT)" | tee -a $R/gpus.txt
W=/tmp/w; D=$W/sift-like-1m; mkdir -p $W
t0=$(date +%s)
[ -f $D/groundtruth.ivecs ] || $C data synth --n 1000000 --dim 128 --queries 1000 --out $D --log-level warn > $R/data.log 2>&1
[ -f $D/ivf4096.index ] || $C index build --base $D/base.fvecs --nlist 4096 --out $D/ivf4096.index --log-level warn > $R/index.log 2>&1
echo "data+index $(( $(date +%s) - t0 )) s" | tee -a $R/gpus.txt
S="--cores 8 --rates 300k,600k,900k,1200k --duration 2 --connections 16 --index $D/ivf4096.index --queries $D/query.fvecs --gt $D/groundtruth.ivecs --log-level warn"
run() { local name=$1; shift; local t=$(date +%s); timeout 120 $C bench served "$@" $S --out $R/$name.json > $R/$name.log 2>&1; echo "$name rc=$? $(( $(date +%s) - t )) s" | tee -a $R/runs.txt; }
run served-echo-anchor --services echo --engines inline --io-threads 4
run served-g1-io4 --services knn --engines gpu-cohort --io-threads 4 --serve-arg=--gpus=0
run served-g4-io4 --services knn --engines gpu-cohort --io-threads 4 --serve-arg=--gpus=0,1,2,3
run served-g4-shared-io4 --services knn --engines gpu-cohort --io-threads 4 --serve-arg=--gpus=0,1,2,3 --serve-arg=--gpus-per-control-thread=4
run served-g1-io6 --services knn --engines gpu-cohort --io-threads 6 --serve-arg=--gpus=0
run served-g4-shared-io6 --services knn --engines gpu-cohort --io-threads 6 --serve-arg=--gpus=0,1,2,3 --serve-arg=--gpus-per-control-thread=4
run served-g4-shared-io7 --services knn --engines gpu-cohort --io-threads 7 --serve-arg=--gpus=0,1,2,3 --serve-arg=--gpus-per-control-thread=4
K="--data $D --nlist 4096 --nprobe 16 --k 10 --duration 2 --log-level warn --engines gpu-cohort --drivers 8 --max-cohort 2048"
eng() { local name=$1; shift; local t=$(date +%s); timeout 100 $C bench engine $K "$@" --out $R/$name.json > $R/$name.log 2>&1; echo "$name rc=$? $(( $(date +%s) - t )) s" | tee -a $R/runs.txt; }
eng engine-g1 --gpus 0 --window 8192,16384
eng engine-g4 --gpus 0,1,2,3 --window 32768
eng engine-g4-shared --gpus 0,1,2,3 --gpus-per-control-thread 4 --window 8192,32768
eng engine-g4-shared2 --gpus 0,1,2,3 --gpus-per-control-thread 2 --window 32768
grep -h "rate\|M/s\|q/s" $R/*.log | head -80
tar czf $OUT/shared.tgz -C $R .
