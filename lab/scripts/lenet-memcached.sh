#!/usr/bin/env bash
# Lynx Fig. 9's shape on the GPU machine (dist/ carried, memcached and memcaslap from
# dist/debs): memcached beside the LeNet server on one host. memcached (4 threads) runs on
# cores 0-7; memcaslap (cores 12-15, 90% gets) measures its throughput, first alone, then
# while the LeNet server answers RATE images/s (`cohort load` on cores 8-11, every answer
# checked): the cpu engine spread on cores 0-7 (the host does the inference, as a CPU LeNet
# server would), then gpu-cohort and gpu-persistent confined to core 7 (one core: network I/O
# and the GPU's control). Writes $OUT/lenet-memcached-$TAG.json.
# Usage: OUT=dir TAG=h200 RATE=20k lab/scripts/lenet-memcached.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
. scripts/lib/gpu-env.sh
OUT=${OUT:-lab/results}; TAG=${TAG:-h200}; RATE=${RATE:-5k}; SECS=${SECS:-6}; mkdir -p "$OUT"
if ! command -v memcaslap > /dev/null && ls dist/debs/libmemcached-tools_*.deb > /dev/null 2>&1; then
    mc=/tmp/cohort-memcached
    for f in dist/debs/memcached_*.deb dist/debs/libevent-*.deb dist/debs/libmemcached*.deb dist/debs/libhashkit*.deb; do
        dpkg -x "$f" $mc
    done
    export PATH="$mc/usr/bin:$PATH" LD_LIBRARY_PATH="$mc/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH"
fi
port=22124
taskset -c 0-7 memcached -l 127.0.0.1 -p $port -U 0 -t 4 -c 8192 -m 512 -u "${USER:-root}" &
mcpid=$!
srv=
trap 'kill $mcpid $srv 2>/dev/null' EXIT
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.05; done
# memcached's rate (ops/s) over SECS seconds, printed alone.
slap() {
    taskset -c 12-15 memcaslap -s 127.0.0.1:$port -t "${SECS}s" -T 4 -c 128 2>&1 |
        sed -n 's/.*TPS: \([0-9]*\).*/\1/p' | tail -n 1
}
rows=()
alone=$(slap); echo "memcached alone: $alone ops/s"
rows+=("{\"lenet\": \"none\", \"memcached_ops_per_s\": ${alone:-0}}")
for case in "cpu 0-7 8" "gpu-cohort 7 1" "gpu-persistent 7 1"; do
    set -- $case; engine=$1; cpus=$2; io=$3
    taskset -c "$cpus" $B serve --udp 127.0.0.1:7401 --io-threads "$io" \
        --service "lenet:$engine" --log-level error &
    srv=$!
    for _ in $(seq 200); do (exec 3<>/dev/udp/127.0.0.1/7401) 2>/dev/null && break; sleep 0.05; done
    sleep 3
    json="$OUT/lenet-memcached-load-$engine-$TAG.json"
    taskset -c 8-11 $B load --target udp://127.0.0.1:7401 --service lenet --rate "$RATE" \
        --duration $((SECS + 2)) --warmup 0 --json "$json" --log-level warn > /dev/null &
    gen=$!
    sleep 1
    with=$(slap)
    wait $gen; rc=$?
    kill $srv; wait $srv 2>/dev/null; srv=
    ok=$(python3 -c "import json,sys; r=json.load(open('$json')); r=r[0] if isinstance(r,list) else r; print(r['ok'], r['sent'])")
    echo "lenet on $engine (cores $cpus): memcached $with ops/s; lenet ok/sent $ok (generator rc $rc)"
    rows+=("{\"lenet\": \"$engine\", \"lenet_cores\": \"$cpus\", \"lenet_rate\": \"$RATE\", \"lenet_ok_sent\": \"$ok\", \"memcached_ops_per_s\": ${with:-0}}")
done
commit=$(cat dist/COMMIT 2>/dev/null || echo unknown)
python3 - "$OUT/lenet-memcached-$TAG.json" "$commit" "$0 RATE=$RATE SECS=$SECS" "${rows[@]}" <<'PY'
import json, sys, platform, os
out, commit, cmd, rows = sys.argv[1], sys.argv[2], sys.argv[3], [json.loads(r) for r in sys.argv[4:]]
gpus = os.popen("nvidia-smi --query-gpu=name --format=csv,noheader").read().split("\n")
json.dump({"machine": {"hostname": platform.node(), "cpus": os.cpu_count(), "gpus": [g for g in gpus if g]},
           "commit": commit, "command": cmd, "memcached": "4 threads on cores 0-7; memcaslap 4 threads x 128 conns on 12-15, 90% get",
           "points": rows}, open(out + ".tmp", "w"), indent=1)
os.replace(out + ".tmp", out)
print("wrote", out)
PY
