#!/usr/bin/env bash
# Same speed before and after a change (issue 27's check), on the GPU machine with dist/
# carried: `cohort bench engine` (k-NN 1M x 128 SIFT-like, nlist 4096, nprobe 16, k 10,
# windows 64/1024/8192) on gpu-direct, gpu-cohort and gpu-persistent, and the bank's
# `bench bank-gpu`, each run by the binary before (BEFORE, default dist/cohort-before) and after
# (dist/cohort), alternating, REPS times. Results: $OUT/same-speed-{before,after}-*.json and a
# summary table. PART=engine or bank runs one half (each fits a 10-minute device call).
# Usage: OUT=dir TAG=h200 [PART=all|engine|bank] scripts/same-speed.sh
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/gpu-env.sh
OUT=${OUT:-bench/results}; TAG=${TAG:-h200}; REPS=${REPS:-2}; mkdir -p "$OUT"
BEFORE=${BEFORE:-dist/cohort-before}
PART=${PART:-all}
t0=$(date +%s)
if [ "$PART" != bank ]; then
[ -f $D/groundtruth.ivecs ] || $B data synth --n 1000000 --dim 128 --queries 1000 --out $D --log-level warn
[ -f $IX ] || $B index build --base $D/base.fvecs --nlist $NL --out $IX --log-level warn
echo "data and index: $(( $(date +%s) - t0 )) s"
for rep in $(seq 1 "$REPS"); do
    for side in before after; do
        bin=$B; [ $side = before ] && bin=$BEFORE
        $bin bench engine --data $D --nlist $NL --nprobe 16 --k 10 --max-cohort 1024 \
            --engines gpu-direct,gpu-cohort,gpu-persistent --window 64,1024,8192 --duration 2 --drivers 4 \
            --out "$OUT/same-speed-$side-engine-r$rep-$TAG.json" --log-level warn > /dev/null 2>&1 ||
            echo "FAIL bench engine $side rep $rep"
    done
done
fi
[ "$PART" != engine ] && for side in before after; do
    bin=$B; [ $side = before ] && bin=$BEFORE
    $bin bench bank-gpu --cohorts 1024,8192 --iters 10 --energy-secs 1 \
        --out "$OUT/same-speed-$side-bank-gpu-$TAG.json" --log-level warn > /dev/null 2>&1 ||
        echo "FAIL bench bank-gpu $side"
done
python3 - "$OUT" "$TAG" "$REPS" <<'PY'
import json, sys, glob, statistics
out, tag, reps = sys.argv[1], sys.argv[2], int(sys.argv[3])
def rows(side):
    best = {}
    for f in glob.glob(f"{out}/same-speed-{side}-engine-r*-{tag}.json"):
        doc = json.load(open(f))
        for r in doc.get("results", []):
            if "window" not in r:
                continue
            k = (r["engine"], r["window"])
            best.setdefault(k, []).append(r["queries_per_s"])
    return {k: statistics.median(v) for k, v in best.items()}
b, a = rows("before"), rows("after")
print(f"{'engine':16} {'window':>6} {'before q/s':>12} {'after q/s':>12} {'after/before':>12}")
for k in sorted(b):
    if k in a:
        print(f"{k[0]:16} {k[1]:>6} {b[k]:>12.0f} {a[k]:>12.0f} {a[k] / b[k]:>12.3f}")
def bank(side):
    try:
        doc = json.load(open(f"{out}/same-speed-{side}-bank-gpu-{tag}.json"))
    except Exception:
        return {}
    return {(str(p["cohort"]), "transposed" if p["transposed"] else "row-major"):
            p["mix_requests_per_s_to_host"] for p in doc["results"].get("points", [])}
bb, ba = bank("before"), bank("after")
for k in sorted(bb):
    if k in ba:
        print(f"bank-gpu cohort {k[0]:>5} {k[1]:10} {bb[k]:>12.0f} {ba[k]:>12.0f} {ba[k] / bb[k]:>12.3f}")
PY
echo "same-speed: $(( $(date +%s) - t0 )) s"
