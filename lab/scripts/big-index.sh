#!/usr/bin/env bash
# Issue 48 item 3 on a 4-GPU machine, with dist/ carried: an IVF-Flat index whose vectors do not
# fit one GPU (default 180M x 128 f32: 92 GB of vectors against 80 GB on an H100), built
# streamed from disk and served sharded over the GPUs. Each part fits one device call; the
# machine must stay warm between them (the files live under $BIG, default /tmp/big):
#   PART=data   `data synth` a part at a time: base.fvecs, 200 queries, their exact top-100
#               (every base row searched on the CPU).
#   PART=build  `index build --stream` on GPU 0 (nlist 16384), timed, host RSS sampled.
#   PART=serve  recall on the CPU (`index eval --mapped`, nprobe 32) - the reference - then
#               `bench served` gpu-cohort sharded over every GPU (load time, memory per GPU,
#               served rate and recall against the same ground truth).
#   PART=all    the three in turn (a smaller N, to try the whole path in one call).
# JSON and logs into $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/lib/gpu-env.sh
OUT=${OUT:-lab/results/big-index}; mkdir -p "$OUT"
BIG=${BIG:-/tmp/big}; N=${N:-180000000}; NLIST=${NLIST:-16384}; NPROBE=${NPROBE:-32}
mkdir -p "$BIG"
export NCCL_NVLS_ENABLE=0
peak_rss() { # command...: runs it, prints its peak RSS (kB) from /usr/bin/time or /proc
    "$@" &
    local p=$! peak=0 r
    while kill -0 $p 2> /dev/null; do
        r=$(awk '/VmHWM/ {print $2}' /proc/$p/status 2> /dev/null); [ -n "$r" ] && peak=$r
        sleep 1
    done
    wait $p; local rc=$?
    echo "peak RSS ${peak} kB (rc $rc)"
    return $rc
}
parts=${PART:-data}; [ "$parts" = all ] && parts="data build serve"
for part in $parts; do
case $part in
data)
    df -h "$BIG" | tee "$OUT/disk.txt"
    t0=$(date +%s)
    peak_rss $B data synth --n $N --dim 128 --queries ${QUERIES:-200} --out "$BIG" --log-level warn 2>&1 | tee "$OUT/data.log"
    echo "data: $(( $(date +%s) - t0 )) s, $(du -sh "$BIG" | cut -f1)" | tee -a "$OUT/data.log"
    ;;
build)
    t0=$(date +%s)
    peak_rss $B index build --base "$BIG/base.fvecs" --nlist $NLIST --stream --device ${DEVICE:-gpu:0} ${SAMPLE:+--sample $SAMPLE} \
        --out "$BIG/ivf.index" --log-level warn 2>&1 | tr '\r' '\n' | grep -v "^$" | tail -n 5 | tee "$OUT/build.log"
    echo "build: $(( $(date +%s) - t0 )) s; index $(du -h "$BIG/ivf.index" | cut -f1)" | tee -a "$OUT/build.log"
    $B index info "$BIG/ivf.index" | tee "$OUT/info.txt"
    ;;
serve)
    G=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
    Q="--queries $BIG/query.fvecs --gt $BIG/groundtruth.ivecs"
    $B index eval --index "$BIG/ivf.index" $Q --nprobe $NPROBE --k 10 --mapped \
        --json "$OUT/cpu-recall.json" --log-level warn 2>&1 | tail -n 3 | tee "$OUT/cpu-recall.txt"
    ( while sleep 2; do nvidia-smi --query-gpu=index,memory.used --format=csv,noheader; done ) > "$OUT/gpu-memory.log" &
    mon=$!
    t0=$(date +%s)
    timeout 500 env COHORT_BIN=$B $L bench served --services knn --engines gpu-cohort --cores 8 --rates ${RATES:-5k,10k,20k,40k} \
        --duration 3 --connections 16 --index "$BIG/ivf.index" $Q --k 10 --nprobe $NPROBE \
        --p99-us ${P99:-5000} --start-timeout-s 400 --serve-arg=--gpus=$(seq -s, 0 $((G - 1))) \
        --serve-arg=--service-opt=knn.placement=shard --out "$OUT/served.json" --log-level warn 2>&1 | tee "$OUT/served.log"
    kill $mon
    echo "serve (load included): $(( $(date +%s) - t0 )) s" | tee -a "$OUT/served.log"
    # Each GPU's most memory used while serving.
    awk -F', ' '{ v = $2 + 0; if (v > m[$1]) m[$1] = v } END { for (g in m) print "gpu " g ": " m[g] " MiB at most" }' \
        "$OUT/gpu-memory.log" | sort | tee "$OUT/gpu-memory.txt"
    ;;
*) echo "PART: data, build, serve or all"; exit 2 ;;
esac
done
