#!/usr/bin/env bash
# Runs on the GPU machine (16 cores) from the repository root with dist/ carried:
# the network and cpu-engine benchmarks, results into $OUT (default bench/results).
set -uo pipefail
OUT=${OUT:-bench/results}
mkdir -p "$OUT"
B=dist/cohort
tag=${TAG:-device}
nproc; cat /proc/cpuinfo | grep -m1 "model name"; nvidia-smi -L 2>/dev/null || true
$B bench echo --transports udp,tcp --io-threads 1,2,4 --connections 8 --duration 2 \
    --start-rate 100k --step 1.3 --closed 64,256,1024 --out "$OUT/echo-$tag.json" --log-level warn 2>&1 | tail -n 80

# k-NN on the cpu engine with all 16 cores: 1M x 128 SIFT-like, nlist 1024.
$B bench knn-cpu --data /tmp/sift-like-1m --n 1000000 --queries 1000 --nlist 1024 --nprobe 8,16,32,64 \
    --serve-nprobe 16 --sweep 2k,5k,10k,20k,30k,40k --io-threads 2 --connections 4 --duration 3 \
    --out "$OUT/knn-cpu-$tag.json" --plot "$OUT/knn-cpu-$tag.png" --log-level warn 2>&1 | tail -n 30
