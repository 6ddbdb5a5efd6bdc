#!/usr/bin/env bash
# Issue 24's measurements in one run on the GPU machine (16 cores), from the repository root
# with dist/ carried (dist/cohort, dist/debs/*.deb):
#   PART=http: nginx beside the gateway's JSON echo on the cpu and inline engines, 1 KB and
#              16 KB, server on 1/4/8 cores, wrk on 8-15 (scripts/http-served.sh);
#   PART=bank: the bank served (`cohort bench served --services bank`: every page checked)
#              on cpu, inline and gpu-cohort at 1/4/8 server cores, generator on 8-15.
# Results into $OUT (default bench/results) as http-served-$TAG.json and served-bank-$TAG.json.
set -uo pipefail
OUT=${OUT:-bench/results}
TAG=${TAG:-device}
B=${COHORT:-dist/cohort}
mkdir -p "$OUT"
nproc
nvidia-smi -L 2>/dev/null || true
case ${PART:-http} in
http)
    ENGINES=${ENGINES:-cpu inline} CORES=${CORES:-1 4 8} SECS=${SECS:-4} \
        scripts/http-served.sh "$OUT/http-served-$TAG.json" dist/debs "cohort=$B"
    ;;
bank)
    CUDA_MODULE_LOADING=EAGER $B bench served --services bank \
        --engines "${ENGINES:-cpu,inline,gpu-cohort}" --cores "${CORES:-1,4,8}" \
        --rates "${RATES:-20k,40k,80k,120k,160k,240k}" --duration "${SECS:-2}" --warmup 1 \
        --connections "${CONNS:-256}" --p99-us 5000 --out "$OUT/served-bank-$TAG.json" \
        --log-level warn 2>&1 | grep -v "^\s*$"
    ;;
esac
