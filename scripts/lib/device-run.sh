# Sourced by the device scripts under lab/results/ (run on the GPU machine, from the
# repository root, $OUT the folder that comes back): the steps every such script takes.

# Persistent kernels need their modules loaded up front; NVLink multicast stays off. $B: the
# build a script runs unless it names a cohort-NAME variant; $L: the lab's binary beside it
# (benchmarks, suites, model tools: `cohort-lab`, which starts the `cohort` beside it).
export CUDA_MODULE_LOADING=EAGER NCCL_NVLS_ENABLE=0
B=${B:-dist/cohort}
L=${L:-dist/cohort-lab}
. scripts/lib/wait-port.sh

# Puts what the call carried from dist-base/ into dist/ and names the GPUs in $OUT/gpus.txt.
# Usage: unpack_carried XZ_FILE... - each an xz'd binary (dist/NAME from NAME.xz, kept if
# there already); then the cohort-NAME variants' one xz'd tar (near-identical binaries
# compress to one) and the Debian packages, where carried.
unpack_carried() {
    mkdir -p dist
    local f n
    for f in "$@"; do
        [ -f "$f" ] || continue
        n=$(basename "$f" .xz)
        [ -x "dist/$n" ] || { xz -dc "$f" > "dist/$n"; chmod +x "dist/$n"; }
    done
    [ -f dist-base/kv.tar.xz ] && tar xJf dist-base/kv.tar.xz -C dist
    [ -d dist-base/debs ] && mkdir -p dist/debs && cp dist-base/debs/*.deb dist/debs/
    nvidia-smi -L > "$OUT/gpus.txt"
}

# Every GPU check of the carried build (scripts/gpu-check run tests), its logs packed into
# $OUT/tests.tgz (only a few files come back from a call); returns the checks' exit status.
gpu_checks() {
    OUT=$OUT/tests scripts/gpu-check run tests > "$OUT/tests.log" 2>&1
    local rc=$?
    tail -30 "$OUT/tests.log"
    tar czf "$OUT/tests.tgz" -C "$OUT" tests tests.log 2>/dev/null && rm -rf "$OUT/tests"
    return $rc
}

# gpu_checks while the 1M data set ($D, knn_1m_data below) is made beside it, then the data
# ready for the kernels; returns the checks' exit status.
checks_and_1m_data() {
    (knn_1m_data > /tmp/data-1m.log 2>&1 &)
    gpu_checks
    local rc=$?
    while pgrep -f "ivf4096.index|sift-like-1m" > /dev/null; do sleep 2; done
    knn_1m_data
    return $rc
}

# The k-NN self-test (knn_selftest) while the 1M data set ($D) is made beside it, then the
# data ready; returns the self-test's exit status.
selftest_and_1m_data() {
    (knn_1m_data > /tmp/data-1m.log 2>&1 &)
    knn_selftest 200
    local rc=$?
    while pgrep -f "ivf4096.index|sift-like-1m" > /dev/null; do sleep 2; done
    knn_1m_data
    return $rc
}

# The k-NN self-test with the 1M data made beside it (selftest_and_1m_data), then KERNELS (a
# command: a round of the builds' kernels), then Nsight Compute on the kernels REGEX names,
# COUNT launches at cohort 64 (ncu_kernels), everything packed into $OUT/probe.tgz; returns
# the self-test's status. Usage: probe_cohort64 KERNELS REGEX COUNT
probe_cohort64() {
    selftest_and_1m_data
    local rc=$?
    $1
    ncu_kernels 64 "$2" "$3" ncu64.txt
    grep -E "^  knn_|Duration" $OUT/ncu64.txt | head -24
    pack_results probe.tgz ncu64.txt
    return $rc
}

# One line a `bench gpu-kernels` JSON: its cohorts, each with the tiled plan's launched and
# graph-replayed M q/s, its recall@k and its stage times (us). Usage: kernels_summary JSON...
kernels_summary() {
    python3 -c "
import json, sys
for f in sys.argv[1:]:
    j = json.load(open(f))
    print(f.split('/')[-1], [(r['cohort'], round(r['tiled_queries_per_s'] / 1e6, 3), round(r.get('tiled_graph_queries_per_s', 0) / 1e6, 3),
        r.get('tiled_recall_at_k'), {k: round(v * 1000, 1) for k, v in r.get('tiled_stage_ms', {}).items()})
        for r in j['results']['points']])" "$@"
}

# Each carried build's k-NN kernels on the 1M data $D (nlist 4096, nprobe 16, u8, 0.3 s a
# cohort) at COHORTS, a JSON per build and round in $OUT, summarised as it goes.
# Usage: kernels_round_u8 ROUND COHORTS
kernels_round_u8() {
    local b
    for b in $(carried_builds); do
        timeout 100 $(lab_of $b) bench gpu-kernels --data $D --nlist 4096 --nprobe 16 --cohorts "$2" \
            --precision u8 --seconds 0.3 --out "$OUT/gpu-kernels-$b-r$1.json" --log-level warn > /dev/null 2>&1 || echo "$b failed"
        kernels_summary "$OUT/gpu-kernels-$b-r$1.json"
    done
}

# Every JSON in $OUT, and the files named, packed into $OUT/TGZ and removed (only a few files
# come back from a call). Usage: pack_results TGZ [FILE...]
pack_results() {
    local tgz=$1
    shift
    (cd "$OUT" && tar czf "$tgz" $(ls *.json 2>/dev/null) "$@" && rm -f *.json "$@")
}

# The builds a call carried: cohort, then each cohort-NAME variant in dist/ (a variant's lab
# binary, cohort-lab-NAME, beside it: lab_of).
carried_builds() {
    echo cohort
    (cd dist && ls cohort-* 2>/dev/null | grep -v '^cohort-lab')
}

# The lab binary of a carried build NAME (carried_builds): dist/cohort-lab for cohort,
# dist/cohort-lab-X for cohort-X. Usage: lab_of NAME
lab_of() {
    case $1 in
        cohort) echo dist/cohort-lab ;;
        *) echo "dist/cohort-lab-${1#cohort-}" ;;
    esac
}

# Nsight Compute's sections (clocks left alone) for the kernels named by REGEX, COUNT launches
# after the first 3, in `bench gpu-kernels` on the 1M data $D at cohort COHORT with u8 storage,
# the lab binary $L; the report to $OUT/FILE. Usage: ncu_kernels COHORT REGEX COUNT FILE
ncu_kernels() {
    timeout 240 ncu --clock-control none --kernel-name regex:"$2" \
        --launch-skip 3 --launch-count "$3" --section SpeedOfLight --section Occupancy --section LaunchStats \
        --section WarpStateStats --section MemoryWorkloadAnalysis --section SchedulerStats --section ComputeWorkloadAnalysis \
        $L bench gpu-kernels --data $D --nlist 4096 --nprobe 16 --cohorts "$1" --precision u8 \
        --out /tmp/ncu-bench.json --log-level warn > "$OUT/$4" 2>&1
    tail -5 "$OUT/$4"
}

# The k-NN kernels alone (`bench gpu-kernels`, 1M data $D, nlist 4096, nprobe 16, cohorts
# 64 / 1 024 / 8 192, f32 and u8) for dist/cohort and each carried dist/cohort-NAME in turn,
# ROUNDS rounds (alternating, so a lease's drift falls on every build alike); JSON per build
# and round in $OUT. Usage: kernels_beside ROUNDS
kernels_beside() {
    local round b
    for round in $(seq 1 "$1"); do
        for b in $(carried_builds); do
            timeout 120 $(lab_of $b) bench gpu-kernels --data $D --nlist 4096 --nprobe 16 --cohorts 64,1024,8192 \
                --precision f32,u8 --out "$OUT/gpu-kernels-$b-r$round.json" --log-level warn 2>&1 | tail -14
        done
    done
}

# The k-NN data sets the device scripts measure on (SIFT-like, made by the build $B): the 1M set
# in $D, the 10M set in $T, each made once a lease (/tmp is lost when the machine goes back).
D=${D:-/tmp/k/sift-like-1m}
T=${T:-/tmp/cw/sift-like-10000000}
# The 1M set and its nlist 4096 index, built on DEVICE (default auto). Usage: knn_1m_data [DEVICE]
knn_1m_data() {
    [ -f $D/groundtruth.ivecs ] || timeout 150 $B data synth --n 1000000 --dim 128 --queries 1000 --out $D --log-level warn
    [ -f $D/ivf4096.index ] || timeout 150 $B index build --device "${1:-auto}" --base $D/base.fvecs --nlist 4096 \
        --out $D/ivf4096.index --log-level warn
}
# The 10M set (48 s of CPU), waiting for one already being made in the background.
knn_10m_synth() {
    while pgrep -f "data synth --n 10000000" > /dev/null; do sleep 2; done
    [ -f $T/groundtruth.ivecs ] || timeout 200 $B data synth --n 10000000 --dim 128 --queries 1000 --out $T --log-level warn
}
# The 10M set and its nlist 16384 index (about 30 s on the GPU).
knn_10m_data() {
    knn_10m_synth
    [ -f $T/ivf16384.index ] || timeout 150 $B index build --base $T/base.fvecs --nlist 16384 --out $T/ivf16384.index --log-level warn
}

# The k-NN self-test of the build $B (its kernels against the CPU twins), its log in
# $OUT/selftest-knn.log, within LIMIT seconds (it takes about 100); returns its status.
# Usage: knn_selftest LIMIT
knn_selftest() {
    local nv rc
    nv=$(python3 -c "import nvidia, os; print(os.path.join(nvidia.__path__[0], 'cu13', 'lib'))" 2>/dev/null)
    LD_LIBRARY_PATH="$nv:${LD_LIBRARY_PATH:-}" timeout "$1" $B selftest gpu --only knn --log-level warn > "$OUT/selftest-knn.log" 2>&1
    rc=$?
    echo "selftest knn: exit $rc"; tail -5 "$OUT/selftest-knn.log"
    return $rc
}

# The 10M set (nlist 16384, nprobe 32, u8 storage) in process, JSON per run into DIR:
# knn_10m_kernels DIR - the kernels alone (`bench gpu-kernels`, cohorts 1 024 and 8 192) for
# dist/cohort and each carried dist/cohort-NAME; knn_10m_engine DIR CTL... - the gpu-cohort
# engine of $L (8 drivers, --max-cohort 2048, windows 8 192 and 16 384) over each count of
# control threads.
knn_10m_kernels() {
    local b
    for b in $(carried_builds); do
        timeout 90 $(lab_of $b) bench gpu-kernels --data $T --nlist 16384 --nprobe 32 --cohorts 1024,8192 --precision u8 \
            --out "$1/gpu-kernels-10m-$b.json" --log-level warn > /dev/null 2>&1 || echo "kernels $b failed"
    done
}
knn_10m_engine() {
    local dir=$1 ct
    shift
    for ct in "$@"; do
        timeout 60 $L bench engine --data $T --nlist 16384 --nprobe 32 --k 10 --engines gpu-cohort --control-threads $ct \
            --drivers 8 --max-cohort 2048 --window 8192,16384 --duration 2 --gpu-precision u8 --log-level warn \
            --out "$dir/engine-10m-u8-ctl$ct.json" > /dev/null 2>&1 || echo "engine ctl $ct failed"
    done
}

# The cohorts between (256 and 512, u8, the 1M data $D) for dist/cohort and each carried
# dist/cohort-NAME, a JSON per build in $OUT. Usage: kernels_mid
kernels_mid() {
    local b
    for b in $(carried_builds); do
        timeout 120 $(lab_of $b) bench gpu-kernels --data $D --nlist 4096 --nprobe 16 --cohorts 256,512 \
            --precision u8 --out "$OUT/gpu-kernels-mid-$b.json" --log-level warn 2>&1 | tail -2
    done
}

# The 10M index ($T, u8 storage) served by the build $B on one GPU: gpu-cohort on cores 0-7,
# UDP 127.0.0.1:7210, admin (metrics) on 7219; returns once it listens, its pid in SERVED_PID.
# Usage: serve_10m LOG [SERVE FLAGS...]; load_10m NAME RATE DIR [LOAD FLAGS...] drives it from
# cores 8-15 (Poisson, LOAD_CONNECTIONS sockets, default 16, each its own thread: 8 gives one
# a core, whose send lag may then be lower; 5 s after 1 s of warm-up, every answer checked),
# prints the result row and keeps DIR/load-NAME.json and the server's metrics after it in
# DIR/metrics-NAME.txt (CLOCKS=1: the GPU's clocks in DIR/clocks-NAME.csv); stop_served ends it.
serve_10m() {
    local log=$1
    shift
    rm -f /tmp/serve-10m.out
    taskset -c 0-7 $B serve --service knn:gpu-cohort --index $T/ivf16384.index --gpus 0 --udp 127.0.0.1:7210 \
        --io-threads 4 --gpu-precision u8 --admin 127.0.0.1:7219 --log-level warn "$@" > /tmp/serve-10m.out 2> "$log" &
    SERVED_PID=$!
    for _ in $(seq 1 600); do grep -q '^listening' /tmp/serve-10m.out 2>/dev/null && break; sleep 0.1; done
}
load_10m() {
    local name=$1 rate=$2 dir=$3 clocks=
    shift 3
    # CLOCKS=1: the GPU's SM and memory clocks, P-state and temperature every 200 ms during
    # the run (read only; a tail that differs between machines may be a clock that differs).
    if [ "${CLOCKS:-0}" = 1 ]; then
        nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,pstate,temperature.gpu,power.draw \
            --format=csv -lms 200 > "$dir/clocks-$name.csv" 2>&1 &
        clocks=$!
    fi
    taskset -c 8-15 $B load --target udp://127.0.0.1:7210 --service knn --queries $T/query.fvecs --gt $T/groundtruth.ivecs \
        --k 10 --nprobe 32 --rate "$rate" --poisson --duration 5 --warmup 1 --connections "${LOAD_CONNECTIONS:-16}" \
        --server-pid $SERVED_PID \
        --json "$dir/load-$name.json" --log-level warn "$@" | sed -n 2p
    python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:7219/metrics').read().decode())" \
        > "$dir/metrics-$name.txt" 2>&1
    [ -n "$clocks" ] && kill $clocks
    return 0
}
stop_served() {
    kill $SERVED_PID
    wait $SERVED_PID 2>/dev/null
}

# The inline engine's UDP echo served on cores 0-7 at 300 K/s (the anchor a served k-NN run
# stands beside), then the 10M index served by each build named (dist/NAME) at each of RATES
# (default 300k 400k); every file into DIR. Usage: served_10m_beside DIR NAME...
served_10m_beside() {
    local dir=$1 b rate
    shift
    COHORT_BIN=$B $L bench served --services echo --engines inline --cores 8 --rates 300k --duration 5 \
        --connections 16 --io-threads 4 --out $dir/served-echo-anchor.json --log-level warn 2>&1 | tail -2
    for b in "$@"; do
        B=dist/$b serve_10m $dir/serve-$b.log
        for rate in ${RATES:-300k 400k}; do echo "$b $rate: $(B=dist/$b load_10m $b-$rate $rate $dir)"; done
        stop_served
    done
}

# served_10m_beside for the builds named, into $OUT/served.tgz (only a few files come back from
# a call), the 10M data made first where missing. Usage: served_10m_packed NAME...
served_10m_packed() {
    local r=$OUT/s
    mkdir -p $r
    knn_10m_data
    served_10m_beside $r "$@"
    (cd $OUT && tar czf served.tgz s && rm -rf s)
}

# The bank (100 000 users) served over HTTP on cores 0-7 by dist/cohort's ENGINE with IO io
# threads at 127.0.0.1:18093; returns once it listens, its pid in BANK_PID; stop_bank ends it.
# Usage: serve_bank ENGINE IO
serve_bank() {
    taskset -c 0-7 dist/cohort serve --http 127.0.0.1:18093 --io-threads $2 --log-level warn \
        --bank-users 100000 --service "bank:$1" &
    BANK_PID=$!
    wait_port 18093 120
}
stop_bank() {
    kill -INT $BANK_PID
    wait $BANK_PID
}
