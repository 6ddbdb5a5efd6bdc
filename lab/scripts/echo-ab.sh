#!/usr/bin/env bash
# The HTTP (16 KB) and UDP echo served by two binaries, in one run, on the inline engine:
# the server on core 0, the load generator (AFTER's, for both) on core 1, two rounds.
#   lab/scripts/echo-ab.sh BEFORE_BIN AFTER_BIN OUT_DIR
set -euo pipefail
BEFORE=$1; AFTER=$2; OUT=$3; mkdir -p $OUT
L=$AFTER
for round in 1 2; do
for b in $BEFORE $AFTER; do
  n=$([ $b = $AFTER ] && echo after || echo before)
  taskset -c 0 $b serve --udp 127.0.0.1:7601 --http 127.0.0.1:7602 --service echo:inline --io-threads 1 --log-level warn > /dev/null 2>&1 & sp=$!
  sleep 1
  for r in 5000 10000; do
    taskset -c 1 $L load --target http://127.0.0.1:7602 --service echo --payload-bytes 16384 --poisson --rate $r --duration 3 --connections 4 --server-pid $sp --json $OUT/http16k-$n-$r-r$round.json > /dev/null 2>&1
  done
  for r in 50000 100000; do
    taskset -c 1 $L load --target udp://127.0.0.1:7601 --service echo --payload-bytes 64 --poisson --rate $r --duration 3 --connections 2 --server-pid $sp --json $OUT/udp-$n-$r-r$round.json > /dev/null 2>&1
  done
  kill $sp; wait $sp 2>/dev/null || true
done
done
python3 - $OUT <<'PY'
import json,glob,sys,os
for f in sorted(glob.glob(sys.argv[1]+'/*.json')):
    r=json.load(open(f)); l=r['latency_us']
    print(os.path.basename(f), int(r['achieved_rate']), 'p50', l['p50'], 'p99', l['p99'], 'srv us/ans', round(r['cpu']['server']['cpu_us_per_answer'],2), 'errors', sum(r.get('errors',{}).values()) if isinstance(r.get('errors'),dict) else r.get('errors'))
PY
