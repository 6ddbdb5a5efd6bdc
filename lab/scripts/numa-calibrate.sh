#!/usr/bin/env bash
# On the 2-GPU machine (no cargo; dist/ built by `scripts/gpu-check build` and carried):
# the GPU checks of the calibration kernels, then `cohort-lab sim numa calibrate` (real speedups
# of a triad and a stencil over two GPUs beside the simulator's prediction), then, with the
# cores left, every figure of the simulator. Logs and JSON to $OUT (default lab/results).
# Any failing check or command makes it exit non-zero.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-lab/results}
TAG=${TAG:-h200x2}
mkdir -p "$OUT"
nv=$(python3 -c "import nvidia, os; print(os.path.join(nvidia.__path__[0], 'cu13', 'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH="${nv}:${LD_LIBRARY_PATH:-}"
export CUDA_MODULE_LOADING=EAGER
B=${BIN:-dist/cohort}
L=${LAB:-dist/cohort-lab}
failed=0
step() { # name, timeout, command...
    local name=$1 limit=$2; shift 2
    if timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; then
        echo "PASS $name"; tail -n 12 "$OUT/$name.log"
    else
        echo "FAIL $name (exit $?)"; tail -n 30 "$OUT/$name.log"; failed=1
    fi
}
$B gpus
nvidia-smi topo -m 2>/dev/null | head -5
step "numa-calib-test-gpu-$TAG" 300 env COHORT_REQUIRE_NVRTC=1 dist/test-experiments --nocapture --test-threads 1 twins
step "sim-numa-calibrate-$TAG" 400 $L sim numa calibrate --out "$OUT" --tag "$TAG" --scale 0.25
if [ "${FIGURES:-1}" = 1 ]; then
    step "sim-numa-all-$TAG" 500 $L sim numa all --out "$OUT" --tag "$TAG-cpu"
fi
exit $failed
