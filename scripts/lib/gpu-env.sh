# Sourced by the GPU-machine scripts: NVRTC from the machine's Python packages, eager module
# loading (persistent kernels), a kernel cache, the carried binaries and the k-NN data set.
nv=$(python3 -c "import nvidia, os; print(os.path.join(nvidia.__path__[0], 'cu13', 'lib'))" 2>/dev/null)
export LD_LIBRARY_PATH="${nv}:${LD_LIBRARY_PATH:-}" CUDA_MODULE_LOADING=EAGER
export COHORT_KERNEL_CACHE=/tmp/cohort-kernels
B=dist/cohort
# The lab's binary (benchmarks, suites, model tools), which starts the cohort beside it.
L=dist/cohort-lab
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
    local p=$! c
    while kill -0 $p 2> /dev/null; do
        # A wrapper (timeout, env) runs the command as its child: sample the child.
        c=$(pgrep -P $p | head -n 1)
        { echo "-- $(date +%T)"; scripts/thread-cpu.sh ${c:-$p} 1 | head -n ${TOP:-30}; } >> "$f" 2> /dev/null
    done
    wait $p
}

# One line per point of a `bench engine` JSON (engine, devices, options, window, rate,
# latency, errors) or per engine of a `bench served` JSON (its runs, offered -> achieved).
summary() {
    python3 - "$@" <<'PY'
import json, sys
for f in sys.argv[1:]:
    try:
        d = json.load(open(f))
    except Exception as e:
        print(f"{f}: unreadable ({e})"); continue
    res = d.get("results", d)
    res = res if isinstance(res, list) else [res]
    for r in res:
        for pt in r.get("points", []) if isinstance(r, dict) else []:
            runs = ", ".join(f"{x['offered'] / 1e3:.0f}K->{x['achieved'] / 1e3:.0f}K p99 {x['p99_us']:.0f}us e{x['errors']}" for x in pt.get("runs", []))
            print(f"{f.rsplit('/', 1)[-1]}: {pt.get('engine')} best at p99 bound {pt.get('best_at_p99_bound', 0) / 1e3:.0f}K: {runs}")
    for r in res:
        # `bench engine`: one point per window.
        if not isinstance(r, dict) or "queries_per_s" not in r:
            continue
        l = r["latency_us"]
        print(f"{f.rsplit('/', 1)[-1]}: {r['engine']} gpus {r['gpus']} {r.get('service_opt', '')} window {r['window']}: "
              f"{r['queries_per_s'] / 1e6:.3f} M/s, p50 {l['p50']:.0f} us, p99 {l['p99']:.0f} us, errors {r['errors']}")
PY
}

# Runs a command for at most SECS; past that, prints its threads (name, kernel wait channel)
# before killing it: where a run that never ends waits. Usage: bounded SECS command...
bounded() {
    local secs=$1; shift
    "$@" &
    local p=$! t=0
    while kill -0 $p 2> /dev/null && [ $t -lt $((secs * 10)) ]; do sleep 0.1; t=$((t + 1)); done
    if kill -0 $p 2> /dev/null; then
        echo "TIMEOUT after ${secs}s: $*"
        for d in /proc/$p/task/*; do echo "  $(cat $d/comm 2> /dev/null) $(cat $d/wchan 2> /dev/null)"; done | sort | uniq -c | head -n 40
        kill -9 $p 2> /dev/null
        wait $p 2> /dev/null
        return 124
    fi
    wait $p
}
