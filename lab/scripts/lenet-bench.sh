#!/usr/bin/env bash
# The lenet service on the GPU machine (dist/ carried): PART=tests runs every GPU check;
# PART=engine the engines fed in process (`cohort-lab bench engine --service lenet`, the built-in
# MNIST digits, windows 1..8192, each engine in turn); PART=served the served matrix (server
# pinned to 1 and 8 cores, generator on the others, every answer checked) with the cpu
# engine's echo measured beside it as the host's anchor; PART=vgpus throughput against the
# number of virtual GPUs (groups of 8 SMs, green contexts; Lynx Fig. 8b's shape); PART=math
# the engines in process in each `lenet.math` (tensor cores in 3xTF32, CUDA cores in FP32);
# PART=plans gpu-persistent in each `lenet.persistent` plan and math, with the engine's
# profile of one request at a time beside it; PART=served-plans both plans served over UDP
# on gpu-persistent (1 and 8 server cores), the echo anchor beside them.
# Usage: OUT=dir TAG=h200 PART=tests|engine|math|plans|served|served-plans|vgpus lab/scripts/lenet-bench.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/lib/gpu-env.sh
OUT=${OUT:-lab/results}; TAG=${TAG:-h200}; mkdir -p "$OUT"
t0=$(date +%s)
case ${PART:-engine} in
tests)
    OUT="$OUT/tests" bash scripts/gpu-check run tests
    ;;
engine)
    $L bench engine --service lenet --engines ${ENGINES:-gpu-direct,gpu-cohort,gpu-persistent} \
        --window ${WINDOWS:-1,64,1024,8192} --max-cohort ${MAX_COHORT:-8192} --duration 2 \
        --drivers 4 --out "$OUT/lenet-engine-$TAG.json" --log-level warn 2>&1 | tail -n 20
    $L bench engine --service lenet --engines cpu --window 64 --duration 2 --drivers 4 \
        --out "$OUT/lenet-engine-cpu-$TAG.json" --log-level warn 2>&1 | tail -n 4
    ;;
math)
    for m in ${MATHS:-tf32x3 fp32}; do
        $L bench engine --service lenet --service-opt lenet.math=$m \
            --engines ${ENGINES:-gpu-direct,gpu-cohort,gpu-persistent} --window ${WINDOWS:-1,64,1024,8192} \
            --max-cohort 8192 --duration 2 --drivers 4 --out "$OUT/lenet-engine-$m-$TAG.json" \
            --log-level warn 2>&1 | tail -n 14
    done
    # Register spills in the tensor-core kernels would show as local loads and stores.
    for f in "$COHORT_KERNEL_CACHE"/lenet*.ptx; do
        echo "$f: $(grep -c 'mma.sync' "$f") mma, $(grep -c 'ld.local\|st.local' "$f") local loads/stores"
    done
    ;;
plans)
    for p in ${PLANS:-image team}; do
        for m in ${MATHS:-tf32x3 fp32}; do
            opts=(--service-opt lenet.persistent=$p --service-opt lenet.math=$m)
            $L bench engine --service lenet "${opts[@]}" --engines gpu-persistent \
                --window ${WINDOWS:-1,64,1024,8192} --duration 2 --drivers 4 \
                --out "$OUT/lenet-persistent-$p-$m-$TAG.json" --log-level warn 2>&1 | tail -n 6
            f="$OUT/lenet-persistent-profile-$p-$m-$TAG.json"
            $L bench engine --service lenet "${opts[@]}" --service-opt lenet.profile=50000 \
                --engines gpu-persistent --window 1 --drivers 1 --duration 2 --out "$f" \
                --log-level warn > /dev/null 2>&1 && python3 lab/scripts/profile-summary.py "$f"
        done
    done
    ;;
served-plans)
    COHORT_BIN=$B $L bench served --services echo --engines cpu --cores 1,8 --rates ${ECHO_RATES:-100k,300k,500k,700k} \
        --duration 2 --warmup 1 --out "$OUT/lenet-served-plans-anchor-$TAG.json" --log-level warn 2>&1 | tail -n 8
    for p in ${PLANS:-image team}; do
        COHORT_BIN=$B $L bench served --services lenet --engines gpu-persistent --cores 1,8 \
            --rates ${RATES:-5k,20k,50k,100k,200k,400k,700k} --duration 2 --warmup 1 \
            --serve-arg=--service-opt=lenet.persistent=$p \
            --out "$OUT/lenet-served-$p-$TAG.json" --log-level warn 2>&1 | tail -n 20
    done
    ;;
served)
    COHORT_BIN=$B $L bench served --services echo --engines cpu --cores 1,8 --rates ${ECHO_RATES:-100k,200k,300k,500k,700k} \
        --duration 2 --warmup 1 --out "$OUT/lenet-served-anchor-$TAG.json" --log-level warn 2>&1 | tail -n 12
    COHORT_BIN=$B $L bench served --services lenet --engines ${ENGINES:-cpu,gpu-cohort,gpu-persistent} --cores 1,8 \
        --rates ${RATES:-1k,5k,20k,50k,100k,200k,300k,400k} --duration 2 --warmup 1 \
        --out "$OUT/lenet-served-$TAG.json" --log-level warn 2>&1 | tail -n 40
    ;;
vgpus)
    # Lynx Fig. 8b's shape: throughput against GPUs, the GPUs being virtual - N groups of 8
    # SMs of GPU 0 (green contexts) - each a serving device with its own lane and backend.
    for n in ${GROUPS_LIST:-1 2 4 8 15}; do
        timeout 90 $L --virtual-gpus "0:${n}x8" bench engine --service lenet \
            --engines ${ENGINES:-gpu-cohort} --gpus "$(seq -s, 0 $((n - 1)))" \
            --window ${WINDOWS:-8192} --max-cohort 8192 --duration 2 --drivers 8 \
            --out "$OUT/lenet-vgpus-$n-$TAG.json" --log-level warn 2>&1 | tail -n 6
    done
    $L bench scaling-plot --title "lenet in process on N groups of 8 SMs of one $TAG" \
        --out "$OUT/lenet-vgpus-$TAG.png" "$OUT"/lenet-vgpus-*-$TAG.json | tee "$OUT/lenet-vgpus-$TAG.txt"
    ;;
esac
echo "lenet-bench ${PART:-engine}: $(( $(date +%s) - t0 )) s"
