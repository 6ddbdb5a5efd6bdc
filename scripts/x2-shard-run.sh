#!/usr/bin/env bash
# The sharded k-NN on two physical GPUs (issue 30), on an nvidia-h200-x2 machine with dist/
# carried (`scripts/gpu-check build`). k-NN 1M x 128 SIFT-like, IVF nlist 4096, nprobe 16,
# k 10, one device (--gpus 0) against two (--gpus 0,1), the index replicated vs sharded.
# Usage: OUT=dir TAG=h200x2 PART="..." scripts/x2-shard-run.sh, results under RES (default
# $OUT/x2) and, after every part, all of them in $OUT/x2.tgz (a run cut short keeps what it
# finished). PART:
#   tests:    `cohort selftest gpu --gpus 0,1 [--only ONLY]` (the sharded checks over both
#             devices); a failing check makes the script exit non-zero.
#   engine:   `bench engine` in process, ENGINES (gpu-cohort gpu-persistent) x 1/2 devices x
#             replicate/shard (one device: replicate only; sharding over one is the same).
#   served:   `bench served` on 8 server cores (generator on others), the same matrix, with
#             the cpu engine's echo measured beside it as the host's anchor.
#   exchange: sharded over both, partials peer-to-peer vs through host memory (forced).
#   model:    `cohort model centaur knn` over the engine runs, with the whole device's run.
#   numa:     scripts/numa-calibrate.sh with this build.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/gpu-env.sh
TOP=${OUT:-bench/results}; OUT=${RES:-$TOP/x2}; TAG=${TAG:-h200x2}; mkdir -p "$OUT"
t0=$(date +%s)
failed=0
knn_data
echo "data and index: $(( $(date +%s) - t0 )) s"
$B gpus
nvidia-smi topo -m 2> /dev/null | head -n 4
# One point: engine, devices (0 or 0,1), placement, extra args.
engine() {
    local e=$1 g=$2 pl=$3 out=$4; shift 4
    bounded ${BOUND:-150} $B bench engine --data $D --nlist $NL --nprobe 16 --k 10 --engines $e --gpus $g \
        --service-opt knn.placement=$pl --window ${WINDOWS:-8192,16384} --max-cohort 2048 --duration 2 \
        --drivers 8 --out "$out" "$@" --log-level warn > "$out.log" 2>&1
    echo "rc $? ($e, gpus $g, $pl)"; grep -E "skipped|error|TIMEOUT" "$out.log" | head -n 3; summary "$out"
}
for part in ${PART:-tests engine exchange served model numa}; do
    echo "== $part ($(( $(date +%s) - t0 )) s)"
    case $part in
    tests)
        if bounded 400 $B selftest gpu --gpus 0,1 ${ONLY:+--only $ONLY} > "$OUT/selftest-gpus0_1-$TAG.log" 2>&1; then
            echo "PASS selftest gpu --gpus 0,1 ${ONLY:+--only $ONLY}"; grep -i "shard" "$OUT/selftest-gpus0_1-$TAG.log" | tail -n 14
        else
            echo "FAIL selftest gpu --gpus 0,1"; tail -n 30 "$OUT/selftest-gpus0_1-$TAG.log"; failed=1
        fi
        grep -h SKIPPED "$OUT/selftest-gpus0_1-$TAG.log" && echo "(a check above skipped)"
        ;;
    engine)
        for e in ${ENGINES:-gpu-cohort gpu-persistent}; do
            engine $e 0 replicate "$OUT/x2-engine-$e-1-replicate-$TAG.json"
            for pl in replicate shard; do
                engine $e 0,1 $pl "$OUT/x2-engine-$e-2-$pl-$TAG.json"
            done
        done
        ;;
    exchange)
        for x in peer host; do
            engine gpu-cohort 0,1 shard "$OUT/x2-exchange-$x-$TAG.json" --service-opt knn.shard_exchange=$x
        done
        ;;
    served)
        bounded 60 $B bench served --services echo --engines cpu --cores 8 --rates ${ECHO_RATES:-300k,500k,700k} \
            --duration 2 --warmup 1 --out "$OUT/x2-served-anchor-$TAG.json" --log-level warn > /dev/null 2>&1
        summary "$OUT/x2-served-anchor-$TAG.json"
        for e in ${ENGINES:-gpu-cohort gpu-persistent}; do
            for spec in 0:replicate 0,1:replicate 0,1:shard; do
                g=${spec%%:*}; pl=${spec#*:}; n=$(( $(tr -cd , <<< "$g" | wc -c) + 1 ))
                f="$OUT/x2-served-$e-$n-$pl-$TAG.json"
                bounded 120 $B bench served --services knn --engines $e --cores 8 --index $IX \
                    --queries $D/query.fvecs --gt $D/groundtruth.ivecs "--serve-arg=--gpus=$g" \
                    "--serve-arg=--service-opt=knn.placement=$pl" --rates ${RATES:-300k,600k,900k} \
                    --duration 2 --warmup 1 --out "$f" --log-level warn > "$f.log" 2>&1
                echo "rc $? ($e served, gpus $g, $pl)"; summary "$f"
            done
        done
        ;;
    model)
        # The model's runs: gpu-cohort at the names `cohort model centaur knn` reads.
        for spec in 1:0:replicate 2:0,1:replicate 2:0,1:shard; do
            IFS=: read -r n g pl <<< "$spec"
            WINDOWS=8192 engine gpu-cohort $g $pl "$OUT/centaur-$pl-$n-w8192-$TAG.json"
        done
        cp "$OUT/centaur-replicate-1-w8192-$TAG.json" "$OUT/whole-device-w8192-$TAG.json"
        $B model centaur knn "$OUT"/centaur-*-$TAG.json --whole-device "$OUT/whole-device-w8192-$TAG.json" \
            --index $IX --queries $D/query.fvecs --out "$OUT/centaur-model-$TAG" > "$OUT/centaur-model-$TAG.txt" 2>&1
        tail -n 8 "$OUT/centaur-model-$TAG.txt"
        ;;
    numa)
        OUT=$OUT TAG=$TAG FIGURES=0 bounded 300 scripts/numa-calibrate.sh || failed=1
        ;;
    esac
    tar czf "$TOP/x2.tgz" -C "$OUT" .
done
echo "x2-shard-run: $(( $(date +%s) - t0 )) s"
exit $failed
