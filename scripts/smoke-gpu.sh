#!/usr/bin/env bash
# On the GPU machine with dist/ carried: a quick served check of every service on the GPU
# engines over loopback UDP (small data), the answers checked by the load generator. For
# bring-up after engine changes; the measurements are scripts/gpu-check and lab/scripts/served-pinned.sh.
set -uo pipefail
OUT=${OUT:-/tmp/smoke}; mkdir -p "$OUT"
nv=$(python3 -c "import nvidia, os; print(os.path.join(nvidia.__path__[0], 'cu13', 'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH="${nv}:${LD_LIBRARY_PATH:-}" CUDA_MODULE_LOADING=EAGER
B=dist/cohort; D=/tmp/smoke-data
$B data synth --n 100000 --dim 128 --queries 1000 --out $D --log-level warn >/dev/null || exit 1
$B index build --base $D/base.fvecs --nlist 256 --out $D/ivf256.index --log-level warn >/dev/null || exit 1
$B serve --service knn:gpu-cohort,echo:gpu-cohort,spin:gpu-direct --index $D/ivf256.index \
    --udp 127.0.0.1:7100 --io-threads 2 --log-level warn > $OUT/serve.out 2>&1 &
pid=$!; sleep 4
fail=0
$B load --target udp://127.0.0.1:7100 --service knn --queries $D/query.fvecs --gt $D/groundtruth.ivecs \
    --k 10 --nprobe 16 --rate 20000 --poisson --duration 2 --connections 2 --json $OUT/smoke-knn.json || fail=1
$B load --target udp://127.0.0.1:7100 --service echo --rate 20000 --duration 2 --connections 2 || fail=1
$B load --target udp://127.0.0.1:7100 --service spin --spin-us 20 --rate 5000 --duration 2 --connections 2 || fail=1
kill -TERM $pid; wait $pid || { echo "serve exited non-zero"; fail=1; }
tail -n 5 $OUT/serve.out
exit $fail
