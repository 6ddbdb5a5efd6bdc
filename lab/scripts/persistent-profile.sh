#!/usr/bin/env bash
# Where gpu-persistent's microseconds go (issue 10): `cohort-lab bench engine` with the GPU's
# per-request stamps on (`NAME.profile=N`), for the empty request (echo) and k-NN (1M x 128,
# nlist 4096, nprobe 16, k 10), at window 1 (the round trip alone) and window 64 (the ingress
# warp saturated). Each JSON holds the bench points and the joined profile (intervals with
# percentiles, the ingress warp's time by phase). BINS names the binaries to compare
# (default dist/cohort; the cohort-lab beside each runs the benchmark), TAG the machine.
set -uo pipefail
OUT=${OUT:-lab/results}; TAG=${TAG:-h200}; mkdir -p "$OUT"
nv=$(python3 -c "import nvidia, os; print(os.path.join(nvidia.__path__[0], 'cu13', 'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH="${nv}:${LD_LIBRARY_PATH:-}" CUDA_MODULE_LOADING=EAGER
D=${DATA:-/tmp/sift-like-1m}; NL=4096; IX=$D/ivf$NL.index
BINS=${BINS:-dist/cohort}
B0=${BINS%% *}
[ -f $D/groundtruth.ivecs ] || $B0 data synth --n 1000000 --dim 128 --queries 1000 --out $D --log-level warn
[ -f $IX ] || $B0 index build --base $D/base.fvecs --nlist $NL --out $IX --log-level warn
for B in $BINS; do
    v=$(basename "$(dirname "$B")")  # dist-base/cohort -> dist-base
    for svc in echo knn; do
        for w in 1 64; do
            f="$OUT/persistent-profile-$svc-w$w-$v-$TAG.json"
            extra=(); [ $svc = knn ] && extra=(--data $D --nlist $NL --nprobe 16 --k 10)
            echo "== $v $svc window $w"
            "$(dirname "$B")/cohort-lab" bench engine --service $svc "${extra[@]}" --engines gpu-persistent --window $w --drivers 1 \
                --duration 2 --service-opt $svc.profile=50000 --out "$f" --log-level warn > /dev/null 2>&1 \
                || { echo "FAIL $v $svc $w"; continue; }
            python3 lab/scripts/profile-summary.py "$f"
        done
    done
done
