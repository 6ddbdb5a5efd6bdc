#!/usr/bin/env bash
# Session run v22 (issue 25): the host's UDP path, recvmmsg vs io_uring, and a busy loop on the
# server's own core. PART=tests|echo|hog|knn (IOS="recvmmsg uring").
set -uo pipefail
OUT=${OUT:-/tmp/out}; TAG=${TAG:-h200-v22}; mkdir -p "$OUT"
. "$(dirname "$0")/lib/gpu-env.sh"
t0=$(date +%s)
rc=0
case ${PART:-tests} in
tests)
    uname -a; nproc; grep se.slice /proc/self/sched; cat /proc/sys/kernel/io_uring_disabled 2>&1
    ( mkdir -p $D
      [ -f $D/groundtruth.ivecs ] || $B data synth --n 1000000 --dim 128 --queries 1000 --out $D --log-level warn
      [ -f $IX ] || $B index build --base $D/base.fvecs --nlist $NL --out $IX --log-level warn
      echo "data and index: $(( $(date +%s) - t0 )) s" ) > "$OUT/data.log" 2>&1 &
    OUT="$OUT/tests" bash scripts/gpu-check run tests; rc=$?
    wait; cat "$OUT/data.log"
    ;;
echo)
    for io in ${IOS:-recvmmsg uring}; do
        $B bench served --services echo --engines cpu,inline --cores 1,8 \
            --rates 100k,200k,300k,500k,700k,1m,1.4m --duration 2 --warmup 1 \
            --serve-arg=--udp-io=$io --out "$OUT/served-echo-$io-$TAG.json" --log-level warn 2>&1 | grep -v '^wrote' | tail -n 40
    done
    ;;
hog)
    # A busy loop on the server's own core (one core: io thread and the inline echo).
    i=0
    for v in "" "--io-spin-us=0" "--io-spin-us=0 --sched-slice-us=100" "--udp-io=uring --io-spin-us=0 --sched-slice-us=100" "--io-spin-us=0 --sched-slice-us=1000"; do
        i=$((i + 1)); args=""; for f in $v; do args="$args --serve-arg=$f"; done
        echo "== hog own, serve flags: ${v:-(defaults)}"
        $B bench served --services echo --engines inline --cores 1 --rates 10k,25k,50k,100k --hog own \
            --duration 2 --warmup 1 $args --out "$OUT/served-hog-own-$i-$TAG.json" --log-level warn 2>&1 | tail -n 8
    done
    ;;
knn)
    [ -f $IX ] || { echo "no index at $IX (run PART=tests first on this machine)"; exit 1; }
    for io in ${IOS:-recvmmsg uring}; do
        $B bench served --services knn --engines ${ENGINES:-gpu-persistent,gpu-cohort} --cores ${CORES:-1,8} \
            --rates ${RATES:-50k,100k,200k,300k,500k,700k,900k} --duration 2 --warmup 1 \
            --index $IX --queries $D/query.fvecs --gt $D/groundtruth.ivecs --k 10 --nprobe 16 \
            --serve-arg=--udp-io=$io --out "$OUT/served-knn-$io-$TAG.json" --log-level warn 2>&1 | grep -v '^wrote' | tail -n 40
    done
    ;;
esac
echo "part ${PART:-tests}: $(( $(date +%s) - t0 )) s, exit $rc"
exit $rc
