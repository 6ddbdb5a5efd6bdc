# Sourced by the GPU-machine scripts: NVRTC from the machine's Python packages, eager module
# loading (persistent kernels), a kernel cache, the carried binary and the k-NN data set.
nv=$(python3 -c "import nvidia, os; print(os.path.join(nvidia.__path__[0], 'cu13', 'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH="${nv}:${LD_LIBRARY_PATH:-}" CUDA_MODULE_LOADING=EAGER
export COHORT_KERNEL_CACHE=/tmp/cohort-kernels
B=dist/cohort
D=/tmp/sift-like-1m; NL=4096; IX=$D/ivf$NL.index

# The k-NN data set and its index, built once per machine (kept in /tmp between calls).
knn_data() {
    [ -f $D/groundtruth.ivecs ] || $B data synth --n 1000000 --dim 128 --queries 1000 --out $D --log-level warn
    [ -f $IX ] || $B index build --base $D/base.fvecs --nlist $NL --out $IX --log-level warn
}

# Runs a command with its threads' CPU sampled each second until it exits
# (scripts/thread-cpu.sh), appended to FILE: which host thread saturates, run by run.
# Usage: sampled FILE command...
sampled() {
    local f=$1; shift
    "$@" &
    local p=$!
    while kill -0 $p 2> /dev/null; do
        { echo "-- $(date +%T)"; scripts/thread-cpu.sh $p 1 | head -n ${TOP:-30}; } >> "$f" 2> /dev/null
    done
    wait $p
}
