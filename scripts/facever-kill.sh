#!/usr/bin/env bash
# facever under load while its memcached is killed and restarted (GPU machine, dist/
# carried): the server (ENGINE, default gpu-cohort, design gpu) pinned to cores 0-7, the
# generator (RATE, default 100k, 8 s, every answer checked) on 8-11, memcached on the last
# four; memcached is killed 3 s in and restarted and refilled 1 s later. Every request sent
# must be answered: a verdict, or UNAVAILABLE / NOT_FOUND while the database is gone.
# Usage: OUT=dir TAG=h200 scripts/facever-kill.sh
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/gpu-env.sh
OUT=${OUT:-bench/results}; TAG=${TAG:-h200}; mkdir -p "$OUT"
if ! command -v memcached > /dev/null && ls dist/debs/memcached_*.deb > /dev/null 2>&1; then
    mc=/tmp/cohort-memcached
    for f in dist/debs/memcached_*.deb dist/debs/libevent-*.deb; do dpkg -x "$f" $mc; done
    export PATH="$mc/usr/bin:$PATH" LD_LIBRARY_PATH="$mc/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH"
fi
n=$(nproc); port=22123; addr=127.0.0.1:$port; engine=${ENGINE:-gpu-cohort}
start_mc() {
    taskset -c "$((n - 4))-$((n - 1))" memcached -l 127.0.0.1 -p "$port" -U 0 -t 4 -c 8192 \
        -m 256 -u "${USER:-root}" &
    mcpid=$!
    for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.05; done
    $B model load-db facever --memcached "$addr" > /dev/null || exit 1
}
start_mc
taskset -c 0-7 $B serve --udp 127.0.0.1:7400 --io-threads 8 --service "facever:$engine" \
    --facever-memcached "$addr" --facever-design "${DESIGN:-gpu}" --log-level error &
srv=$!
trap 'kill $srv $mcpid 2>/dev/null' EXIT
sleep 3
json="$OUT/facever-kill-$engine-$TAG.json"
taskset -c 8-11 $B load --target udp://127.0.0.1:7400 --service facever --rate "${RATE:-100k}" \
    --duration 8 --warmup 0 --json "$json" --log-level warn > /dev/null &
gen=$!
sleep 3; kill -9 $mcpid; wait $mcpid 2>/dev/null; echo "memcached killed at 3 s"
sleep 1; start_mc; echo "memcached back and refilled at about 4 s"
wait $gen; rc=$?
python3 - "$json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
r = r[0] if isinstance(r, list) else r
errs = r.get("errors", {})
errs = errs if isinstance(errs, dict) else {}
answered = r["ok"] + sum(errs.values()) - errs.get("no_answer", 0)
print(f"sent {r['sent']} ok {r['ok']} errors {errs} answered {answered}")
sys.exit(0 if errs.get("no_answer", 0) == 0 and errs.get("wrong_answer", 0) == 0 and answered == r["sent"] else 1)
PY
ok=$?
echo "facever-kill $engine: generator rc=$rc, every request answered: $([ $ok = 0 ] && echo yes || echo NO)"
[ $rc = 0 ] && [ $ok = 0 ]
