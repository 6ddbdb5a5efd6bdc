#!/usr/bin/env bash
# Where the cores go at 700K and 1M echo/s (inline, 8 io threads on cores 0-7, generator on 8-15):
# /proc/stat per core (user, system, softirq, idle) over the measured window, and /proc/softirqs.
set -uo pipefail
OUT=${OUT:-/tmp/out}; B=dist/cohort
for io in recvmmsg; do
taskset -c 0-7 $B serve --udp 127.0.0.1:7300 --service echo:inline --io-threads 8 --cpus 0-7 --udp-io $io --log-level warn > /tmp/s.log 2>&1 &
SP=$!; sleep 2
for r in ${RATES:-700k 1m}; do
  taskset -c 8-15 $B load --target udp://127.0.0.1:7300 --rate $r --poisson --connections ${CONNS:-8} --duration 4 --warmup 1 --log-level warn --server-pid $SP --json $OUT/cores-$r-c${CONNS:-8}.json > $OUT/load-$r-c${CONNS:-8}.txt 2>&1 &
  LP=$!; sleep 2.0
  cat /proc/stat > /tmp/stat-a-$r.txt; sleep 2
  cat /proc/stat > /tmp/stat-b-$r.txt
  wait $LP; tail -n 2 $OUT/load-$r-c${CONNS:-8}.txt
  python3 - /tmp/stat-a-$r.txt /tmp/stat-b-$r.txt <<'PY'
import sys
def rd(f):
    d={}
    for l in open(f):
        if l.startswith('cpu') and l[3].isdigit():
            p=l.split(); d[int(p[0][3:])]=list(map(int,p[1:9]))
    return d
a,b=rd(sys.argv[1]),rd(sys.argv[2])
print('core user nice sys idle iowait irq softirq steal (% of the window)')
for c in sorted(a):
    dl=[y-x for x,y in zip(a[c],b[c])]; t=sum(dl) or 1
    print(c, ' '.join('%5.1f'%(100*v/t) for v in dl))
PY
done
kill -TERM $SP; wait $SP
done
