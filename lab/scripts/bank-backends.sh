#!/usr/bin/env bash
# The bank's record placements on one GPU machine (Rhythm's Table 3 rows with the backend on
# the host - Titan A - and in GPU memory - Titan B), beside the computed records:
#  1. in-process (requests pre-built in pinned memory), cohorts of 4096, per type in both
#     layouts and the sustained mix on 1/4/16 streams under the power meter, for
#     --backend computed, gpu and memcached (`cohort-lab bench bank-gpu`);
#  2. served over loopback HTTP on gpu-cohort (lab/scripts/bank-served.sh): transposed with the
#     GPU's record table, transposed and row-major with memcached; the cpu engine with
#     memcached.
# memcached (Debian's, 4 threads) runs on four of the server's cores: a backend on the server's host.
# Usage: lab/scripts/bank-backends.sh OUT_DIR [TAG]   (COHORT=path/to/cohort, default
# target/release; SERVED_ONLY=1 skips 1; PLACEMENTS, default "computed gpu memcached", picks
# the placements run; MEMCACHED_PORT, default 11311.)
set -euo pipefail
out=${1:?usage: lab/scripts/bank-backends.sh OUT_DIR [TAG]}
tag=${2:-$(hostname)}
cohort=${COHORT:-target/release/cohort}
export COHORT=$cohort CUDA_MODULE_LOADING=EAGER
mkdir -p "$out"
command -v memcached >/dev/null || {
    echo "memcached is not installed (apt-get install memcached)" >&2
    exit 1
}
cores=$(nproc)
half=$((cores / 2))
port=${MEMCACHED_PORT:-11311}
# 1 M records of 1.7 KB each, with room for memcached's per-item overhead.
taskset -c "$((half - 4))-$((half - 1))" memcached -l 127.0.0.1 -p "$port" -U 0 -m 4096 \
    -t 4 -c 8192 -u "${USER:-root}" &
mc=$!
trap 'kill $mc 2>/dev/null || true' EXIT
for _ in $(seq 1 50); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then break; fi
    sleep 0.1
done
memcached="memcached://127.0.0.1:$port"
placements=${PLACEMENTS:-computed gpu memcached}
if [ -z "${SERVED_ONLY:-}" ]; then
    for name in $placements; do
        b=$name
        [ "$name" = memcached ] && b=$memcached
        "$cohort" bench bank-gpu --backend "$b" --cohorts 4096 --streams 1,4,16 \
            --energy-secs 3 --out "$out/bank-gpu-$tag-records-$name.json"
    done
fi
export CONNECTIONS=${CONNECTIONS:-256} RATES=${RATES:-10k,20k,40k,60k,80k}
gpu=(--engine gpu-cohort --io-threads 4 --max-cohort 1024 --cohort-timeout-us 300 --streams 16)
for name in $placements; do
    case $name in
    gpu)
        lab/scripts/bank-served.sh "$out/bank-gpu-served-$tag-transposed-gpurecords" "${gpu[@]}" \
            --bank-layout transposed --bank-backend gpu
        ;;
    memcached)
        lab/scripts/bank-served.sh "$out/bank-gpu-served-$tag-transposed-memcached" "${gpu[@]}" \
            --bank-layout transposed --bank-backend "$memcached"
        lab/scripts/bank-served.sh "$out/bank-gpu-served-$tag-rowmajor-memcached" "${gpu[@]}" \
            --bank-layout row-major --bank-backend "$memcached"
        lab/scripts/bank-served.sh "$out/bank-cpu-served-$tag-memcached" --engine cpu \
            --io-threads 4 --workers $((half - 4)) --bank-backend "$memcached"
        ;;
    esac
done
