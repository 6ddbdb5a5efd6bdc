#!/usr/bin/env bash
# The io thread's CPU per refused request vs per answered request (issue 84), on one machine:
# a server with one io thread pinned to core 0 (workers on the same core, not spinning), `cohort load`
# open-loop on core 1, far past what the io thread can serve, so that it sheds. Reads the
# io thread's CPU (/proc/PID/task/*/stat, thread net-io-0) and the answers and refusals in
# /metrics before and after a measured window; prints us of io-thread CPU per request and
# the split that explains it (least squares over the rates tried: cpu = a*answers + b*refused).
# Usage: lab/scripts/refusal-cpu.sh COHORT_BINARY [grpc|http] [RATES...]
set -euo pipefail
BIN=${1:?cohort binary}; PROTO=${2:-grpc}; shift 2 || true
RATES=${*:-"8000 20000 40000"}
SERVICE=${SERVICE:-lenet}; SECS=${SECS:-4}; CONNS=${CONNS:-16}
PORT=$((20000 + RANDOM % 20000)); ADMIN=$((PORT + 1))
taskset -c 0 "$BIN" serve --service "$SERVICE" --engine cpu --io-threads 1 --workers 1 --worker-spin-us 0 \
  --"$PROTO" 127.0.0.1:$PORT --admin 127.0.0.1:$ADMIN --log-level warn &
SRV=$!
trap 'kill $SRV 2>/dev/null; wait $SRV 2>/dev/null' EXIT
for _ in $(seq 50); do curl -sf http://127.0.0.1:$ADMIN/metrics >/dev/null && break; sleep 0.2; done
# WORKERS_CPU=1: the engine's threads (all but the io thread) onto core 1 beside the
# generator, so that a costly model (lenet) leaves core 0 to the io thread alone.
if [ -n "${WORKERS_CPU:-}" ]; then
  for t in /proc/$SRV/task/*; do
    [ "$(cat $t/comm)" = net-io-0 ] || taskset -pc "$WORKERS_CPU" "$(basename $t)" >/dev/null
  done
fi
io_cpu() { # the io thread's utime+stime in clock ticks
  for t in /proc/$SRV/task/*; do
    if [ "$(cat $t/comm)" = net-io-0 ]; then awk '{print $14+$15}' $t/stat; fi
  done
}
counts() { # answered (code ok) and refused (ingress) so far
  curl -s http://127.0.0.1:$ADMIN/metrics | awk '
    /^cohort_requests_total\{/ && /outcome="ok"/ {ok+=$NF}
    /^cohort_requests_refused_total\{/ && /reason="ingress"/ {ref+=$NF}
    /^cohort_requests_refused_total\{/ {all+=$NF}
    END {printf "%d %d %d\n", ok, ref, all}'
}
HZ=$(getconf CLK_TCK)
for R in $RATES; do
  taskset -c 1 "$BIN" load --target "$PROTO://127.0.0.1:$PORT" --service "$SERVICE" \
    --rate "$R" --connections "$CONNS" --duration $((SECS + 2)) --warmup 0 \
    --answer-timeout-ms 2000 >/tmp/refusal-cpu-load.$$ 2>&1 &
  GEN=$!
  sleep 1.5
  c0=$(io_cpu); read -r ok0 ref0 all0 < <(counts); t0=$(date +%s.%N)
  sleep "$SECS"
  c1=$(io_cpu); read -r ok1 ref1 all1 < <(counts); t1=$(date +%s.%N)
  wait $GEN || true
  awk -v r=$R -v p=$PROTO -v c=$((c1 - c0)) -v hz=$HZ -v ok=$((ok1 - ok0)) -v ref=$((ref1 - ref0)) \
      -v all=$((all1 - all0)) -v t0=$t0 -v t1=$t1 'BEGIN {
    s = t1 - t0; cpu = c / hz;
    printf "%s rate %d/s: io thread %.0f%% busy, answered %.0f/s, refused %.0f/s (ingress %.0f/s), %.1f us io CPU per request\n",
      p, r, 100*cpu/s, ok/s, all/s, ref/s, 1e6*cpu/((ok+all)>0?(ok+all):1) }'
  echo "$R $((c1 - c0)) $HZ $((ok1 - ok0)) $((all1 - all0))" >> /tmp/refusal-cpu-rows.$$
done
# cpu = a*answered + b*refused over the rates (two unknowns, least squares).
awk '{cpu=$2/$3; x=$4; y=$5; sxx+=x*x; syy+=y*y; sxy+=x*y; sxc+=x*cpu; syc+=y*cpu}
  END { d = sxx*syy - sxy*sxy; if (d == 0) { print "fit: not enough spread"; exit }
        a = (sxc*syy - syc*sxy)/d; b = (syc*sxx - sxc*sxy)/d;
        printf "fit: %.1f us io CPU per answer, %.1f us per refusal (ratio r = %.2f)\n", 1e6*a, 1e6*b, b/a }' \
  /tmp/refusal-cpu-rows.$$
rm -f /tmp/refusal-cpu-rows.$$ /tmp/refusal-cpu-load.$$
