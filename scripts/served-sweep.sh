#!/usr/bin/env bash
# Runs on the GPU machine with dist/ carried: served k-NN sweeps over loopback UDP for the gpu
# engines (and the cpu engine beside them), then the engines without sockets. Writes JSON to
# $OUT. Knobs: IO (io thread counts for gpu-cohort), CONN (generator sockets), NLIST.
set -uo pipefail
OUT=${OUT:-bench/results}
mkdir -p "$OUT"
nv=$(python3 -c "import nvidia, os; print(os.path.join(nvidia.__path__[0], 'cu13', 'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH="${nv}:${LD_LIBRARY_PATH:-}"
B=dist/cohort
D=${DATA:-/tmp/sift-like-1m}
NL=${NLIST:-1024}
udp_errs() { awk '/^Udp:/ { if (h) { print "udp counters:", $0 } else { h = 1 } }' /proc/net/snmp; }
for io in ${IO:-1 4 8}; do
    udp_errs
    $B bench knn-cpu --data $D --nlist $NL --served-only --engine gpu-cohort --serve-nprobe 16 \
        --sweep ${COHORT_RATES:-100k,200k,300k,400k,500k,600k,700k,800k} --io-threads $io --connections ${CONN:-8} \
        --duration 2 --out "$OUT/served-gpu-cohort-io$io.json" --log-level warn 2>&1 | tail -n 9
    udp_errs
done
for io in 1 4; do
    $B bench knn-cpu --data $D --nlist $NL --served-only --engine gpu-direct --serve-nprobe 16 \
        --sweep 10k,20k,30k,40k,50k,60k --io-threads $io --connections 8 --duration 2 \
        --out "$OUT/served-gpu-direct-io$io.json" --log-level warn 2>&1 | tail -n 7
done
$B bench knn-cpu --data $D --nlist $NL --served-only --engine cpu --serve-nprobe 16 \
    --sweep 2k,5k,10k,15k --io-threads 4 --connections 8 --duration 2 \
    --out "$OUT/served-cpu-io4.json" --log-level warn 2>&1 | tail -n 5
# Engines without sockets: without and with gpu-cohort's per-bucket CUDA graphs, and nlist 4096.
$B bench engine --data $D --nlist $NL --nprobe 16 --max-cohort 1024 --engines gpu-direct,gpu-cohort --window 64,1024,8192 \
    --duration 2 --drivers 4 --out "$OUT/engine.json" --log-level warn 2>&1 | grep '^{' | cut -c1-300
$B bench engine --data $D --nlist $NL --nprobe 16 --max-cohort 1024 --engines gpu-cohort --window 64,1024,8192 --cohort-graphs \
    --duration 2 --drivers 4 --out "$OUT/engine-graphs.json" --log-level warn 2>&1 | grep '^{' | cut -c1-300
if [ -f $D/ivf4096.index ]; then
    $B bench engine --data $D --nlist 4096 --nprobe 16 --max-cohort 1024 --engines gpu-cohort --window 64,1024,8192 \
        --duration 2 --drivers 4 --out "$OUT/engine-nlist4096.json" --log-level warn 2>&1 | grep '^{' | cut -c1-300
fi
