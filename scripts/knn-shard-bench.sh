#!/usr/bin/env bash
# Centaur's Fig. 6 shape on one GPU (issue 29): k-NN (1M x 128 SIFT-like, IVF nlist 4096,
# nprobe 16, k 10) in process against the number of virtual GPUs (N groups of 8 SMs of GPU 0,
# green contexts), the index replicated on every group vs sharded over them by bytes.
# Usage: OUT=dir TAG=h200 PART=check|vgpus|exchange|served scripts/knn-shard-bench.sh
#   check:  the sharded-vs-whole GPU check (`cohort selftest gpu` runs it too) and the
#           placement's per-device list bytes for 2, 4, 8 and 15 devices.
#   vgpus:  `bench engine` gpu-cohort (or ENGINE), GROUPS_LIST (1 2 4 8 15) x PLACEMENTS
#           (replicate shard), each run's host threads' CPU sampled every second beside it
#           (*-threads.txt: are 15 control threads and 8 drivers on 16 cores the limit?).
#           OPTS: more options for every run (gpu-persistent: `--service-opt
#           knn.persistent_plan=per-pair`, the plan its sharded index runs, for both placements).
#   shard-kernels: the tiled plan's kernels on one group of 8 SMs, on the whole index and on
#           one device's shard of it placed over 2, 4, 8 and 15 devices (`bench gpu-kernels
#           --shards`): which stages do not shrink as 1/N.
#   exchange: sharded over 2 and 4 groups, partials peer-to-peer vs through host memory.
#   served: `bench served` gpu-cohort on 8 server cores, 1/2/4 groups sharded vs replicated.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/gpu-env.sh
OUT=${OUT:-bench/results}; TAG=${TAG:-h200}; mkdir -p "$OUT"
t0=$(date +%s)
knn_data
echo "data and index: $(( $(date +%s) - t0 )) s"
case ${PART:-vgpus} in
check)
    for n in 2 4 8 15; do $B index place $IX --devices $n | tail -n 2; done | tee "$OUT/knn-shard-place-$TAG.txt"
    ;;
vgpus)
    E=${ENGINE:-gpu-cohort}; P=knn-vgpus${ENGINE:+-$ENGINE}
    for pl in ${PLACEMENTS:-replicate shard}; do
        for n in ${GROUPS_LIST:-1 2 4 8 15}; do
            sampled "$OUT/$P-$pl-$n-$TAG-threads.txt" \
                timeout ${BOUND:-120} $B --virtual-gpus "0:${n}x8" bench engine --data $D --nlist $NL --nprobe 16 --k 10 \
                --engines $E --gpus "$(seq -s, 0 $((n - 1)))" --service-opt knn.placement=$pl ${OPTS:-} \
                --window ${WINDOWS:-8192} --max-cohort ${MAX_COHORT:-2048} --duration 2 --drivers 8 \
                --out "$OUT/$P-$pl-$n-$TAG.json" --log-level warn 2>&1 | tail -n 3
            echo "rc $? ($E, $pl, $n groups)"
        done
        $B bench scaling-plot --title "k-NN 1M x 128 on $E ($pl) on N groups of 8 SMs of one $TAG" \
            --out "$OUT/$P-$pl-$TAG.png" "$OUT"/$P-$pl-*-$TAG.json | tee "$OUT/$P-$pl-$TAG.txt"
    done
    ;;
shard-kernels)
    $B --virtual-gpus 0:1x8 bench gpu-kernels --data $D --nlist $NL --nprobe 16 --cohorts ${COHORTS:-2048,8192} \
        --precision f32 --shards ${SHARDS:-1,2,4,8,15} --seconds 0.3 --out "$OUT/knn-shard-kernels-$TAG.json" \
        --log-level warn 2>&1 | grep -v '^{' | tail -n 4
    python3 - "$OUT/knn-shard-kernels-$TAG.json" <<'PY' | tee "$OUT/knn-shard-kernels-$TAG.txt"
import json, sys
d = json.load(open(sys.argv[1]))
pts = d.get("results", d).get("points", [])
whole = {p["cohort"]: p for p in pts if p["shards"] == 1}
for p in pts:
    st = p.get("tiled_stage_ms", {})
    w = whole.get(p["cohort"], p)
    print(f"cohort {p['cohort']:5} shards {p['shards']:2}: tiled {p['tiled_ms']:7.2f} ms "
          f"(x{p['tiled_ms'] / w['tiled_ms']:.2f} of whole, 1/N = {1 / p['shards']:.2f}); "
          + ", ".join(f"{k} {v:.2f}" for k, v in st.items()))
PY
    ;;
exchange)
    # Partial results peer-to-peer vs through mapped host memory (knn.shard_exchange).
    for x in peer host; do
        for n in ${GROUPS_LIST:-2 4}; do
            timeout 120 $B --virtual-gpus "0:${n}x8" bench engine --data $D --nlist $NL --nprobe 16 --k 10 \
                --engines gpu-cohort --gpus "$(seq -s, 0 $((n - 1)))" --service-opt knn.placement=shard \
                --service-opt knn.shard_exchange=$x --window 8192 --max-cohort 2048 --duration 2 --drivers 8 \
                --out "$OUT/knn-exchange-$x-$n-$TAG.json" --log-level warn 2>&1 | tail -n 1 | cut -c1-160
            echo "rc $? ($x, $n groups)"
        done
    done
    ;;
served)
    for pl in replicate shard; do
        for n in ${GROUPS_LIST:-1 2 4}; do
            timeout 200 $B --virtual-gpus "0:${n}x8" bench served --services knn --engines gpu-cohort \
                --cores 8 --index $IX --queries $D/query.fvecs --gt $D/groundtruth.ivecs \
                "--serve-arg=--gpus=$(seq -s, 0 $((n - 1)))" "--serve-arg=--service-opt=knn.placement=$pl" --rates ${RATES:-50k,100k,200k,300k,400k} \
                --duration 2 --warmup 1 --out "$OUT/knn-served-vgpus-$pl-$n-$TAG.json" --log-level warn 2>&1 | tail -n 8
            echo "rc $? ($pl, $n groups)"
        done
    done
    ;;
esac
echo "knn-shard-bench ${PART:-vgpus}: $(( $(date +%s) - t0 )) s"
