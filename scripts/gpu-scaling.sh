#!/usr/bin/env bash
# Issue 48 on a machine of 4 GPUs with dist/ carried (and, for before/after pairs, an older
# build's binary at dist-before/cohort): how gpu-cohort and gpu-persistent scale with the GPUs in
# process (k-NN 1M x 128, nlist 4096, nprobe 16; LeNet), with each run's host threads' CPU
# sampled every second beside it, then served on 8 server cores. JSON into $OUT.
#   PART=engine   gpu-cohort on 1, 2, 4 GPUs (window 8192, and 8192 x GPUs so that each GPU
#                 sees the same load), replicated and sharded, one and two control threads per
#                 GPU (a GPU listed twice: two lanes, two index copies), gpu-persistent.
#   PART=lenet    LeNet in process on 1 GPU with 1-3 control threads, and on 4 GPUs.
#   PART=served   `bench served` k-NN gpu-cohort on 1 and 4 GPUs, the cpu engine's echo beside.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/gpu-env.sh
OUT=${OUT:-bench/results}; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/gpus.txt"; nproc >> "$OUT/gpus.txt"
knn_data > /dev/null
run() { # binary, name, bench engine flags...
    local b=$1 n=$2; shift 2
    [ -x "$b" ] || { echo "SKIPPED $n: no $b"; return; }
    sampled "$OUT/threads-$n.log" timeout 90 "$b" bench engine --duration 3 \
        --out "$OUT/engine-$n.json" --log-level warn "$@" > "$OUT/engine-$n.log" 2>&1
    summary "$OUT/engine-$n.json"
}
K="--data $D --nlist $NL --nprobe 16 --k 10"
C="$K --engines gpu-cohort --drivers 8 --max-cohort 2048"
case ${PART:-engine} in
engine)
    for g in 0 0,1 0,1,2,3; do
        n=$(( (${#g} + 1) / 2 ))
        run $B after-g${g//,/} $C --gpus $g --window 8192,$((8192 * n))
        run dist-before/cohort before-g${g//,/} $C --gpus $g --window 8192,$((8192 * n))
    done
    run $B after-g0123-shard $C --gpus 0,1,2,3 --window 8192,32768 --service-opt knn.placement=shard
    run $B after-g00 $C --gpus 0,0 --window 8192,16384
    run $B after-g00112233 $C --gpus 0,0,1,1,2,2,3,3 --window 8192,32768
    P="$K --engines gpu-persistent --drivers 4 --service-opt knn.gpu_slots=8192"
    run $B after-pers-g0 $P --gpus 0 --window 8192,16384,32768
    run $B after-pers-g0123 $P --gpus 0,1,2,3 --window 8192,32768
    ;;
lenet)
    L="--service lenet --engines gpu-cohort --max-cohort 8192"
    run $B lenet-g0 $L --gpus 0 --drivers 4 --window 8192,16384
    run $B lenet-g00 $L --gpus 0,0 --drivers 8 --window 16384
    run $B lenet-g000 $L --gpus 0,0,0 --drivers 8 --window 16384
    run $B lenet-g0123 $L --gpus 0,1,2,3 --drivers 8 --window 32768,65536
    ;;
served)
    S="--cores 8 --rates 300k,600k,900k,1200k,1500k --duration 2 --connections 16 --index $IX"
    S="$S --queries $D/query.fvecs --gt $D/groundtruth.ivecs --log-level warn"
    $B bench served --services echo --engines cpu --cores 8 --rates 300k,500k,700k,900k \
        --duration 2 --connections 16 --out "$OUT/served-echo-anchor.json" --log-level warn 2>&1 | tail -n 5
    for g in 0 0,1,2,3; do
        $B bench served --services knn --engines gpu-cohort $S --serve-arg=--gpus=$g ${IO:+--io-threads $IO} \
            --out "$OUT/served-knn-g${g//,/}${IO:+-io$IO}.json" 2>&1 | tail -n 6
    done
    ;;
esac
