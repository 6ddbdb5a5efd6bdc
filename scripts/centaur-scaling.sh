#!/usr/bin/env bash
# Centaur's scaling figure (Fig. 7 shape, issue 48 item 4) on the physical GPUs of one machine,
# with dist/ carried: k-NN (1M x 128 SIFT-like, IVF nlist 4096, nprobe 16, k 10) on 1, 2 and 4
# GPUs (those the machine has), gpu-cohort and gpu-persistent, replicated and sharded, in
# process (`bench engine`; one GPU also at smaller windows: each engine's eq. 6 calibration)
# and served on 8 server cores at p99 <= 1 ms (`bench served`, the inline engine's echo beside
# as the network path's anchor: answered on the io threads, no engine hand-off), then
# `cohort model centaur knn` over all of it: every measured point beside the model's
# prediction, OUT/fig7.json, fig7-fig7.png, fig7-fig7-served.png.
# Usage: OUT=dir [IO=io threads, default 4] [RATES=300k,...] scripts/centaur-scaling.sh
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/gpu-env.sh
OUT=${OUT:-bench/results/centaur-scaling}; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
t0=$(date +%s)
G=$(nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpus.txt" | wc -l)
nproc >> "$OUT/gpus.txt"
knn_data > /dev/null
echo "data ready: $(( $(date +%s) - t0 )) s"
gpus() { seq -s, 0 $(($1 - 1)); }
counts=$(for n in 1 2 4; do [ $n -le "$G" ] && echo $n; done)
K="--data $D --nlist $NL --nprobe 16 --k 10 --duration 2 --log-level warn"
declare -A OPTS=(
    [gpu-cohort]="--drivers 8 --max-cohort 2048"
    [gpu-persistent]="--drivers 4 --service-opt knn.gpu_slots=8192"
)
engine() { # engine gpus placement windows
    local f="$OUT/engine-$1-g$2-$3.json"
    timeout 150 $B bench engine $K --engines $1 ${OPTS[$1]} --gpus "$(gpus $2)" \
        --service-opt knn.placement=$3 --window $4 --out "$f" > "$f.log" 2>&1 \
        || echo "FAILED: bench engine $1 on $2 GPUs ($3), rc $? (its log: $f.log)"
    summary "$f"
}
for e in gpu-cohort gpu-persistent; do
    engine $e 1 replicate 2048,4096,8192,16384
    for n in $counts; do
        [ $n -gt 1 ] || continue
        engine $e $n replicate 8192,$((8192 * n))
        engine $e $n shard 8192,$((8192 * n))
    done
done
echo "in process: $(( $(date +%s) - t0 )) s"
# r(N) of eq. 9: the tiled plan per stage on one shard of N, on GPU 0.
$B bench gpu-kernels --data $D --nlist $NL --nprobe 16 --cohorts 2048 --precision f32 \
    --shards "$(echo $counts | tr ' ' ,)" --seconds 0.3 --out "$OUT/shard-profile.json" \
    --log-level warn > /dev/null 2>&1 || echo "shard profile failed: r(N) = 1"
S="--cores 8 --rates ${RATES:-300k,600k,900k,1200k} --duration 2 --connections 16 --index $IX"
S="$S --queries $D/query.fvecs --gt $D/groundtruth.ivecs --io-threads ${IO:-4} --log-level warn"
$B bench served --services echo --engines inline $S --out "$OUT/served-echo-anchor.json" > /dev/null 2>&1 \
    || echo "FAILED: the echo anchor"
summary "$OUT/served-echo-anchor.json"
served() { # engine gpus placement
    local f="$OUT/served-$1-g$2-$3.json" extra=()
    [ $1 = gpu-persistent ] && extra=(--serve-arg=--service-opt=knn.gpu_slots=8192)
    timeout 150 $B bench served --services knn --engines $1 $S --serve-arg=--gpus=$(gpus $2) \
        --serve-arg=--service-opt=knn.placement=$3 "${extra[@]}" --out "$f" > "$f.log" 2>&1 \
        || echo "FAILED: bench served $1 on $2 GPUs ($3), rc $? (its log: $f.log)"
    summary "$f"
}
for e in gpu-cohort gpu-persistent; do
    for n in $counts; do served $e $n replicate; done
    [ "$G" -ge 4 ] && served $e 4 shard
done
echo "served: $(( $(date +%s) - t0 )) s"
prof=(); [ -s "$OUT/shard-profile.json" ] && prof=(--shard-profile "$OUT/shard-profile.json")
$B model centaur knn "$OUT"/engine-*.json --index $IX --queries $D/query.fvecs --memories devices \
    "${prof[@]}" --served "$OUT"/served-gpu-*.json --anchor "$OUT/served-echo-anchor.json" \
    --out "$OUT/fig7" 2>&1 | tee "$OUT/fig7.txt"
echo "centaur-scaling: $(( $(date +%s) - t0 )) s"
