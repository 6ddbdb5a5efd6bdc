#!/usr/bin/env bash
# Where gpu-persistent's microseconds go (issue 10): `cohort bench engine` with the GPU's
# per-request stamps on (`NAME.profile=N`), for the empty request (echo) and k-NN (1M x 128,
# nlist 4096, nprobe 16, k 10), at window 1 (the round trip alone) and window 64 (the ingress
# warp saturated). Each JSON holds the bench points and the joined profile (intervals with
# percentiles, the ingress warp's time by phase). BINS names the binaries to compare
# (default dist/cohort), TAG the machine.
set -uo pipefail
OUT=${OUT:-bench/results}; TAG=${TAG:-h200}; mkdir -p "$OUT"
nv=$(python3 -c "import nvidia, os; print(os.path.join(nvidia.__path__[0], 'cu13', 'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH="${nv}:${LD_LIBRARY_PATH:-}" CUDA_MODULE_LOADING=EAGER
D=${DATA:-/tmp/sift-like-1m}; NL=4096; IX=$D/ivf$NL.index
BINS=${BINS:-dist/cohort}
B0=${BINS%% *}
[ -f $D/groundtruth.ivecs ] || $B0 data synth --n 1000000 --dim 128 --queries 1000 --out $D --log-level warn
[ -f $IX ] || $B0 index build --base $D/base.fvecs --nlist $NL --out $IX --log-level warn
summary() { python3 - "$1" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])):
    if 'profile' not in r:
        print(' ', r['engine'], r['service'], 'window', r['window'], 'q/s %.0f' % r['queries_per_s'],
              'client p50 %.1f p99 %.1f us' % (r['latency_us']['p50'], r['latency_us']['p99']))
        continue
    for p in r['profile']:
        print('  profile: %d requests, globaltimer step %d ns' % (p['requests'], p['globaltimer_step_ns']))
        for i in p['intervals']:
            print('    %-18s p50 %8.2f  p90 %8.2f  p99 %8.2f  mean %8.2f us' % (i['name'], i['p50_us'], i['p90_us'], i['p99_us'], i['mean_us']))
        g = p['ingress']
        print('    ingress warp: SM %.0f MHz, %d requests in %d visits (%.1f per visit)' % (g['sm_clock_mhz'], g['requests'], g['visits'], g['requests_per_visit']))
        for ph in g['phases']:
            print('      %-45s %5.1f%%  %8.0f ns/request' % (ph['name'], 100 * ph['share'], ph['ns_per_request']))
PY
}
for B in $BINS; do
    v=$(basename "$B")
    for svc in echo knn; do
        for w in 1 64; do
            f="$OUT/persistent-profile-$svc-w$w-$v-$TAG.json"
            extra=(); [ $svc = knn ] && extra=(--data $D --nlist $NL --nprobe 16 --k 10)
            echo "== $v $svc window $w"
            $B bench engine --service $svc "${extra[@]}" --engines gpu-persistent --window $w --drivers 1 \
                --duration 2 --service-opt $svc.profile=50000 --out "$f" --log-level warn > /dev/null 2>&1 \
                || { echo "FAIL $v $svc $w"; continue; }
            summary "$f"
        done
    done
done
