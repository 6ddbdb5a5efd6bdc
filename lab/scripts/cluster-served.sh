#!/usr/bin/env bash
# Issue 51's measurements on one GPU machine (no cargo there): a real etcd, `cohort node`
# processes and a `cohort serve --cluster` front end, each pinned to its own cores, the load
# generator on others, open loop (Poisson), every answer checked.
#   hop: echo (cpu engine) through a front end and one node against the same echo served
#        directly, at low load, over UCX's transports (blocking on events: TCP; busy polling:
#        shared memory between the processes, or TCP alone with UCX_TLS=tcp; polling, the
#        batches written into the node's ring, and as messages: poll_messages).
#        HOP_VARIANTS picks among wake wake_tcp poll poll_messages poll_tcp (a suffix such as
#        poll.2 runs one again under its own file names); HOP_RATES the
#        offered rates (2000 by default: the hop alone; a higher one shows batching's part).
#   knn: k-NN 1M (nlist 4096, nprobe 16) on gpu-cohort, one node per GPU behind a front end on
#        8 cores, 1 / 2 / 4 nodes, against one `cohort serve` on the same 4 GPUs and 8 cores;
#        NODES="1 2s 4s" splits the index over the 2 and 4 nodes instead of copying it;
#        FE_IO / FE_LANES set the front end's io threads and lanes (4, 2); PROFILE_RATE=R
#        keeps every thread's CPU (top -H) during a run at R after each sweep; ANCHOR=0 skips
#        the echo anchor run first, SETTLE_S waits that long before measuring.
#        SINGLE_ARGS adds flags to the one `serve` (e.g. --gpu-precision u8).
# Usage: OUT=DIR lab/scripts/cluster-served.sh [hop|knn|all]
# Needs: dist/cohort, dist/etcd (Debian's etcd-server), dist/ucx (libucp and its libraries).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-lab/results/cluster}
mkdir -p "$OUT"
B=${B:-dist/cohort}
ETCD=${ETCD:-dist/etcd}
export COHORT_UCX_LIB=${COHORT_UCX_LIB:-$PWD/dist/ucx}
part=${1:-all}
cores=$(nproc)
# A core range, or every core where the machine has fewer (a small machine tries the script;
# its figures mean nothing).
pin() { # LO-HI
    local lo=${1%-*} hi=${1#*-}
    if [ "$lo" -ge 0 ] && [ "$hi" -lt "$cores" ]; then echo "$1"; else echo "0-$((cores - 1))"; fi
}
gen=$(pin "$((cores > 8 ? cores - 8 : 0))-$((cores - 1))") # the load generator's cores
WORK=${WORK:-/tmp/cohort-cluster}
mkdir -p "$WORK"
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; pids=(); sleep 0.5; }
trap cleanup EXIT

start() { # NAME CORES ARGS...: a cohort process pinned to CORES; waits for its listening line
    local name=$1 cpus=$2; shift 2
    taskset -c "$(pin "$cpus")" "$B" "$@" --log-level warn > "$WORK/$name.out" 2> "$OUT/$name.log" &
    pids+=($!)
    eval "pid_$name=$!"
    for _ in $(seq 1 600); do
        grep -q '^listening' "$WORK/$name.out" 2>/dev/null && return 0
        sleep 0.1
    done
    echo "$name did not start"; cat "$OUT/$name.log"; return 1
}

etcd_up() {
    local c=$((cores > 9 ? cores - 9 : 0))
    taskset -c "$(pin "$c-$c")" "$ETCD" --data-dir "$WORK/etcd" --log-level error \
        --listen-client-urls http://127.0.0.1:23790 --advertise-client-urls http://127.0.0.1:23790 \
        --listen-peer-urls http://127.0.0.1:23800 > "$OUT/etcd.log" 2>&1 &
    pids+=($!)
    sleep 2
}

routed() { # PORT SERVICE ARGS...: short loads until the front end answers without error
    local port=$1 svc=$2; shift 2
    for _ in $(seq 1 50); do
        if taskset -c "$gen" "$B" load --target "udp://127.0.0.1:$port" --service "$svc" "$@" \
            --rate 200 --duration 0.3 --json "$WORK/probe.json" --log-level error >/dev/null 2>&1 &&
            python3 -c "import json,sys; d=json.load(open('$WORK/probe.json')); d=d[0] if isinstance(d,list) else d; sys.exit(0 if d['sent']>0 and d['ok']==d['sent'] else 1)"; then
            return 0
        fi
        sleep 0.2
    done
    echo "the front end on $port never answered $svc without error"; return 1
}

CL=etcd://127.0.0.1:23790

hop() {
    local rates=(${HOP_RATES:-2000})
    load_at() { # RATE: the hop's load at that rate
        echo --service echo --payload-bytes 64 --rate "$1" --poisson --duration 5 --warmup 1
    }
    # The rate in a file's name, but for the default (the names earlier runs used).
    at() { [ "$1" = 2000 ] || echo "-r$1"; }
    start direct 0-1 serve --service echo --udp 127.0.0.1:7100 --io-threads 1 --workers 1
    for r in "${rates[@]}"; do
        taskset -c "$gen" "$B" load --target udp://127.0.0.1:7100 $(load_at "$r") --server-pid "$pid_direct" \
            --json "$OUT/hop-direct$(at "$r").json" --label "direct, $r/s" --log-level warn | sed -n 1,2p # (sed reads to the end: no broken pipe)
    done
    cleanup
    etcd_up
    for v in ${HOP_VARIANTS:-wake wake_tcp poll poll_messages poll_tcp}; do
        unset UCX_TLS
        local flags=() fe_flags=()
        case ${v%.*} in
            wake_tcp) export UCX_TLS=tcp ;;
            poll) flags=(--cluster-busy-poll) ;;
            poll_messages) flags=(--cluster-busy-poll); fe_flags=(--cluster-no-rings) ;;
            poll_tcp) export UCX_TLS=tcp; flags=(--cluster-busy-poll) ;;
        esac
        # UCX says which protocols it chose (the node's log).
        UCX_PROTO_INFO=y start "node_${v/./_}" 2-3 node --cluster $CL --node-listen 127.0.0.1:0 \
            --node-id "hop-$v" --service echo --workers 1 "${flags[@]}" || return 1
        start "fe_${v/./_}" 0-1 serve --cluster $CL --service echo --udp 127.0.0.1:7101 --io-threads 1 \
            --admin 127.0.0.1:7109 "${flags[@]}" "${fe_flags[@]}" || return 1
        routed 7101 echo --payload-bytes 64 || return 1
        local fe_pid
        eval "fe_pid=\$pid_fe_${v/./_}"
        for r in "${rates[@]}"; do
            taskset -c "$gen" "$B" load --target udp://127.0.0.1:7101 $(load_at "$r") --server-pid "$fe_pid" \
                --json "$OUT/hop-$v$(at "$r").json" --label "cluster $v, $r/s" --log-level warn | sed -n 1,2p # (sed reads to the end: no broken pipe)
        done
        # What went through the rings, and what as messages.
        python3 -c "import urllib.request as u; print(u.urlopen('http://127.0.0.1:7109/metrics').read().decode())" |
            grep '^cohort_cluster_' > "$OUT/hop-$v-metrics.txt" || true
        kill "${pids[@]:1}" 2>/dev/null; pids=("${pids[0]}"); sleep 1
    done
    unset UCX_TLS
    cleanup
}

knn() { # N=1000000 NLIST=4096 NPROBE=16 by default; N=10000000 NLIST=16384 NPROBE=32: the 10M index
    local n=${N:-1000000} nlist=${NLIST:-4096} nprobe=${NPROBE:-16}
    local d=$WORK/sift-like-$n ix=$WORK/sift-like-$n/ivf$nlist.index tag=${TAG:-1m}
    [ -f "$d/groundtruth.ivecs" ] || "$B" data synth --n "$n" --dim 128 --queries 1000 --out "$d" --log-level warn
    [ -f "$ix" ] || "$B" index build --base "$d/base.fvecs" --nlist "$nlist" --out "$ix" --log-level warn
    local q=(--queries "$d/query.fvecs" --gt "$d/groundtruth.ivecs" --k 10 --nprobe "$nprobe")
    local sweep=(--sweep "${RATES:-200k,400k,600k,900k,1200k}" --poisson --duration 2 --connections 16)
    local gpus=${GPUS:-$(nvidia-smi -L | wc -l)}
    # A lease's first minutes have shown tails of ms on the anchor itself (docs/gpu.md):
    # SETTLE_S waits before measuring.
    sleep "${SETTLE_S:-0}"
    # The physical anchor beside the figures: echo on the cpu engine, the same cores, rates
    # and generator.
    if [ "${ANCHOR:-1}" = 1 ]; then
        start anchor 0-7 serve --service echo:cpu --udp 127.0.0.1:7202 --io-threads 4 --workers 4
        taskset -c "$gen" "$B" load --target udp://127.0.0.1:7202 --service echo --payload-bytes 64 \
            "${sweep[@]}" --server-pid "$pid_anchor" --json "$OUT/knn-$tag-anchor-echo.json" \
            --label "anchor: echo on the cpu engine, same cores" --log-level warn | sed -n 1,8p
        cleanup
    fi
    local single=${SINGLE_GPUS:-$gpus} # the GPUs of the one `serve` compared with (0: none)
    [ "$single" -gt 0 ] && {
    start single 0-7 serve --service knn:gpu-cohort --index "$ix" --gpus "$(seq -s, 0 $((single - 1)))" \
        --udp 127.0.0.1:7200 --io-threads 4 --max-cohort 2048 ${SINGLE_ARGS:-}
    routed 7200 knn "${q[@]}" || return 1
    taskset -c "$gen" "$B" load --target udp://127.0.0.1:7200 --service knn "${q[@]}" "${sweep[@]}" --server-pid "$pid_single" \
        --json "$OUT/knn-$tag-single-g$single.json" --label "one serve, $single GPUs" --log-level warn | sed -n 1,8p # (sed reads to the end: no broken pipe)
    cleanup
    }
    etcd_up
    # NODES: node counts; a count ending in s splits the index over its nodes (shard g of N
    # on node g, `--index-shard`), else every node holds the whole index.
    for each in ${NODES:-1 2 4}; do
        local nodes=${each%s} split=() name=n$each what="whole index each"
        [ "$nodes" -le "$gpus" ] || continue
        for g in $(seq 0 $((nodes - 1))); do
            [ "$each" = "$nodes" ] || { split=(--index-shard "$g/$nodes"); what="index split over them"; }
            start "node$g" "$((8 + 8 * g))-$((15 + 8 * g))" node --cluster $CL --node-listen 127.0.0.1:0 \
                --node-id "gpu$g" --service knn:gpu-cohort --index "$ix" "${split[@]}" --gpus "$g" --max-cohort 2048 \
                --admin "127.0.0.1:$((7300 + g))"
        done
        start fe 0-7 serve --cluster $CL --service knn --index "$ix" --udp 127.0.0.1:7201 \
            --io-threads "${FE_IO:-4}" --cluster-lanes "${FE_LANES:-2}" --admin 127.0.0.1:7299
        routed 7201 knn "${q[@]}" || return 1
        taskset -c "$gen" "$B" load --target udp://127.0.0.1:7201 --service knn "${q[@]}" "${sweep[@]}" --server-pid "$pid_fe" \
            --json "$OUT/knn-$tag-cluster-$name.json" --label "front end + $nodes nodes, $what" --log-level warn | sed -n 1,8p # (sed reads to the end: no broken pipe)
        # Who answered what (outcomes per role: an OVERLOADED at a node or at the front end),
        # and each node's queue waits, after the sweep.
        for port in 7299 $(seq 7300 $((7300 + nodes - 1))); do
            python3 -c "import urllib.request,sys; sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:$port/metrics').read().decode())" \
                > "$OUT/metrics-$tag-$name-$port.txt" 2>&1
        done
        if [ -n "${PROFILE_RATE:-}" ]; then # every thread's CPU, 2 s into a run at this rate
            taskset -c "$gen" "$B" load --target udp://127.0.0.1:7201 --service knn "${q[@]}" --rate "$PROFILE_RATE" \
                --poisson --duration 4 --connections 16 --log-level error > /dev/null &
            sleep 3
            top -H -b -n 1 -d 1 -p "$pid_fe,$(pgrep -d, -f 'cohort node')" | head -45 > "$OUT/threads-$tag-$name.txt"
            wait $!
        fi
        kill "${pids[@]:1}" 2>/dev/null; pids=("${pids[0]}"); sleep 1
    done
    cleanup
}

case $part in
    hop) hop ;;
    knn) knn ;;
    all) hop; knn ;;
esac
cp "$WORK"/*.out "$OUT"/ 2>/dev/null || true # each role's stdout (UCX_PROTO_INFO's tables)
cat dist/COMMIT > "$OUT/COMMIT" 2>/dev/null || true
nvidia-smi -L > "$OUT/gpus.txt" 2>/dev/null || true
lscpu > "$OUT/lscpu.txt" 2>/dev/null || true
