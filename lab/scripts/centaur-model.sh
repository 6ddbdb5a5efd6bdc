#!/usr/bin/env bash
# Centaur's model (issue 29) against measured runs on one GPU: k-NN (1M x 128 SIFT-like, IVF
# nlist 4096, nprobe 16, k 10) on gpu-cohort over N groups of 8 SMs (green contexts),
# replicated and sharded, plus one group at smaller windows (eq. 6's calibration), then
# `cohort-lab model centaur knn` over all of them (it measures O_k, O_q, g and the copy bandwidth
# on GPU 0; r(N) of eq. 9 from the tiled plan's stages on one shard, profiled here on one
# group of 8 SMs).
# Usage: OUT=dir TAG=h100 [RUNS=dir of recorded centaur-*.json] lab/scripts/centaur-model.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/lib/gpu-env.sh
OUT=${OUT:-lab/results}; TAG=${TAG:-h100}; mkdir -p "$OUT"
t0=$(date +%s)
knn_data
engine() { # groups placement window
    timeout 120 $L --virtual-gpus "0:${1}x8" bench engine --data $D --nlist $NL --nprobe 16 --k 10 \
        --engines gpu-cohort --gpus "$(seq -s, 0 $(($1 - 1)))" --service-opt knn.placement=$2 \
        --window $3 --max-cohort 2048 --duration 2 --drivers 8 \
        --out "$OUT/centaur-$2-$1-w$3-$TAG.json" --log-level warn 2>&1 | tail -n 1
    echo "rc $? ($2, $1 groups, window $3)"
}
if [ -z "${RUNS:-}" ]; then # RUNS=dir: model runs recorded before instead
    for w in 1024 2048 4096; do engine 1 replicate $w; done
    for pl in ${PLACEMENTS:-replicate shard}; do
        for n in ${GROUPS_LIST:-1 2 4 8 15}; do engine $n $pl 8192; done
    done
fi
# The whole device (no green contexts), same settings: eq. 3's ceiling for its groups.
timeout 120 $L bench engine --data $D --nlist $NL --nprobe 16 --k 10 --engines gpu-cohort --gpus 0 \
    --window 8192 --max-cohort 2048 --duration 2 --drivers 8 \
    --out "$OUT/whole-device-w8192-$TAG.json" --log-level warn 2>&1 | tail -n 1
# r(N) of eq. 9: the tiled plan per stage on the whole index and on one shard of 2..15.
$L --virtual-gpus 0:1x8 bench gpu-kernels --data $D --nlist $NL --nprobe 16 --cohorts 2048 \
    --precision f32 --shards 1,2,4,8,15 --seconds 0.3 --out "$OUT/shard-profile-$TAG.json" \
    --log-level warn > /dev/null 2>&1 || echo "shard profile failed: r(N) = 1"
prof=(); [ -f "$OUT/shard-profile-$TAG.json" ] && prof=(--shard-profile "$OUT/shard-profile-$TAG.json")
RUNS=${RUNS:-$OUT}
$L model centaur knn "$RUNS"/centaur-*-$TAG.json --whole-device "$OUT/whole-device-w8192-$TAG.json" \
    "${prof[@]}" --index $IX --queries $D/query.fvecs --out "$OUT/centaur-model-$TAG" 2>&1 | tee "$OUT/centaur-model-$TAG.txt"
echo "centaur-model: $(( $(date +%s) - t0 )) s"
