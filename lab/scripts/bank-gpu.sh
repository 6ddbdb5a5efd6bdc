#!/usr/bin/env bash
# The bank's GPU figures on one GPU machine (Rhythm's Table 3 GPU rows, Figs. 9 and 10):
#  1. the parser alone on a mixed trace (`cohort-lab bench bank-parse-gpu`);
#  2. in-process, requests pre-built in pinned memory (Rhythm's emulation): per-type cohorts
#     swept 256..8192 in both layouts, the PCIe bound, and the sustained mix on 1..8 streams
#     under the NVML power meter (`cohort-lab bench bank-gpu`);
#  3. served over loopback HTTP on gpu-cohort (lab/scripts/bank-served.sh): transposed per-type
#     cohorts, row-major, and mixed cohorts.
# Usage: lab/scripts/bank-gpu.sh OUT_DIR [TAG]   (COHORT=path/to/cohort, default target/release;
# SERVED_ONLY=1 skips 1-2; IO_THREADS, default 4.)
set -euo pipefail
out=${1:?usage: lab/scripts/bank-gpu.sh OUT_DIR [TAG]}
tag=${2:-$(hostname)}
cohort=${COHORT:-target/release/cohort}
export COHORT=$cohort CUDA_MODULE_LOADING=EAGER
mkdir -p "$out"
if [ -z "${SERVED_ONLY:-}" ]; then
    "$cohort" bench bank-parse-gpu --out "$out/bank-parse-gpu-$tag.json"
    "$cohort" bench bank-gpu --out "$out/bank-gpu-$tag.json"
fi
io=${IO_THREADS:-4}
# A cohort waits up to its timeout, so a connection (one request at a time) offers about
# 1 / (timeout + GPU time): many more connections than the cpu engine needs.
export CONNECTIONS=${CONNECTIONS:-1024} RATES=${RATES:-20k,40k,60k,80k,100k,120k,160k,200k}
gpu=(--engine gpu-cohort --io-threads "$io" --max-cohort 1024 --cohort-timeout-us 300 --streams 16)
lab/scripts/bank-served.sh "$out/bank-gpu-served-$tag-transposed" "${gpu[@]}" --bank-layout transposed
lab/scripts/bank-served.sh "$out/bank-gpu-served-$tag-rowmajor" "${gpu[@]}" --bank-layout row-major
lab/scripts/bank-served.sh "$out/bank-gpu-served-$tag-mixed" "${gpu[@]}" --bank-cohorts mixed
