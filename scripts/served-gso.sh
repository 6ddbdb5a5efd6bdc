#!/usr/bin/env bash
# Session run v26 (issue 25): UDP GSO trains for answers (--udp-gso on|off), the same
# `cohort bench served` points for both, one after the other in one device session.
# PART=tests|echo|knn; VARIANTS="on off fifo before": on = GSO and fair queueing (both given:
# fair queueing is off by default since), off = --udp-gso off, fifo = --fair-queue off, before = dist/cohort-before (the
# build without GSO, the exact --max-queue count and fair queueing); CONNS = generator sockets.
set -uo pipefail
OUT=${OUT:-/tmp/out}; TAG=${TAG:-h200-v26}; mkdir -p "$OUT"
. "$(dirname "$0")/lib/gpu-env.sh"
t0=$(date +%s)
# variant -> the binary and the serve flag it runs with
bin() { [ "$1" = before ] && echo dist/cohort-before || echo $B; }
flag() { case $1 in on) echo "--serve-arg=--udp-gso=on --serve-arg=--fair-queue=on" ;; off) echo "--serve-arg=--udp-gso=off --serve-arg=--fair-queue=on" ;; fifo) echo "--serve-arg=--fair-queue=off" ;; *) echo "" ;; esac; }
case ${PART:-echo} in
tests)
    OUT="$OUT/tests" bash scripts/gpu-check run tests
    ;;
echo)
    for g in ${VARIANTS:-on off fifo before}; do
        for c in ${CONNS:-8 32}; do
            $(bin $g) bench served --services echo --engines ${ENGINES:-inline,cpu} --cores 1 --connections $c \
                --rates ${RATES1:-150k,200k,250k,300k,350k} --duration 2 --warmup 1 \
                $(flag $g) --out "$OUT/served-echo-1core-c$c-$g-$TAG.json" --log-level warn 2>&1 | grep -v '^wrote' | tail -n 14
            $(bin $g) bench served --services echo --engines ${ENGINES:-inline,cpu} --cores 8 --connections $c \
                --rates ${RATES8:-500k,700k,1m,1.4m} --duration 2 --warmup 1 \
                $(flag $g) --out "$OUT/served-echo-8core-c$c-$g-$TAG.json" --log-level warn 2>&1 | grep -v '^wrote' | tail -n 12
        done
    done
    ;;
knn)
    mkdir -p $D
    [ -f $D/groundtruth.ivecs ] || $B data synth --n 1000000 --dim 128 --queries 1000 --out $D --log-level warn
    [ -f $IX ] || $B index build --base $D/base.fvecs --nlist $NL --out $IX --log-level warn
    echo "data and index: $(( $(date +%s) - t0 )) s"
    for g in ${VARIANTS:-on off before}; do
        $(bin $g) bench served --services knn --engines ${ENGINES:-gpu-persistent,gpu-cohort} --cores ${CORES:-1,8} \
            --rates ${RATES:-100k,150k,200k,300k,500k,700k,900k} --duration 2 --warmup 1 --connections ${CONNS:-8} \
            --index $IX --queries $D/query.fvecs --gt $D/groundtruth.ivecs --k 10 --nprobe 16 \
            $(flag $g) --out "$OUT/served-knn-$g-$TAG.json" --log-level warn 2>&1 | grep -v '^wrote' | tail -n 40
    done
    ;;
esac
echo "part ${PART:-echo}: $(( $(date +%s) - t0 )) s"
