#!/usr/bin/env bash
# Runs on the nvidia-h200-x2 machine (32 cores, 2 GPUs) with dist/ carried: served gpu-cohort
# sweeps on one GPU and on both (--gpus 0,1: a control thread and a full index copy each),
# 8 and 12 io threads, then the engines without sockets. JSON into $OUT.
nv=$(python3 -c "import nvidia, os; print(os.path.join(nvidia.__path__[0], 'cu13', 'lib'))"); export LD_LIBRARY_PATH=$nv:$LD_LIBRARY_PATH
B=dist/cohort; D=/tmp/sift-like-1m; nproc; nvidia-smi -L
for g in 0 0,1; do
  for io in 8 12; do
    $B bench knn-cpu --data $D --nlist 1024 --served-only --engine gpu-cohort --gpus $g --serve-nprobe 16 \
      --sweep 500k,600k,700k,800k,900k,1000k --io-threads $io --connections 16 --duration 2 \
      --out $OUT/x2-served-gpus${g/,/_}-io$io.json --log-level warn 2>&1 | grep -E "^\s+[0-9]|errors"
  done
done
$B bench engine --data $D --nlist 1024 --nprobe 16 --max-cohort 1024 --engines gpu-cohort --gpus 0,1 --window 1024,8192,16384 --duration 2 --drivers 8 --out $OUT/x2-engine-gpus0_1.json --log-level warn 2>&1 | grep '^{' | cut -c1-260
$B bench engine --data $D --nlist 1024 --nprobe 16 --max-cohort 1024 --engines gpu-cohort --gpus 0 --window 1024,8192,16384 --duration 2 --drivers 8 --out $OUT/x2-engine-gpus0.json --log-level warn 2>&1 | grep '^{' | cut -c1-260
