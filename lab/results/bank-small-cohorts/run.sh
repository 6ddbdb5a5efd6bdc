#!/usr/bin/env bash
# Device script for the bank's small cohorts (issue 49, item 4; 2026-11-28), run from the
# repository root on the GPU machine: `bash bench/results/bank-small-cohorts/run.sh MODE`,
# $OUT the folder that comes back.
#   probe:  the bank's GPU checks alone (selftest --only bank), then `bench bank-gpu` (cohorts
#           64 / 1 024 / 4 096 / 8 192, both layouts, pages in GPU memory and copied out) for
#           the new build and the build before (dist/cohort-prev) in turn, twice.
#   checks: every GPU check of the new build (scripts/gpu-check run tests), then `bench
#           bank-gpu` at cohorts 4 096 / 8 192 / 16 384 (shorter) for both builds.
#   served: the bank served by inline and by gpu-cohort, new build then the build before, in
#           one run (server on cores 0-7, generator on 8-15, open loop on 256 connections).
# Carried: dist-base/bank/cohort-prev.xz (the build before), dist-base/b (the new build's
# test executables), dist-base/debs; the new build in dist-base/kv.tar.xz (cohort).
set -u
source scripts/lib/device-run.sh
unpack_carried dist-base/b/*.xz dist-base/bank/*.xz
bank_gpu() { # BUILD TAG: bench bank-gpu of dist/BUILD into $OUT/bank-gpu-TAG.json
    timeout 200 dist/$1 bench bank-gpu --cohorts 64,1024,4096,8192 --iters 20 --streams 1 --energy-secs 1 \
        --log-level warn --out "$OUT/bank-gpu-$2.json" > "$OUT/bank-gpu-$2.log" 2>&1 || echo "$1 failed"
    grep "bank on" "$OUT/bank-gpu-$2.log" | sed "s/^bank on NVIDIA [^:]*:/$2:/"
    python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))['results']
for p in d['points']:
    if p['cohort'] == 64:
        t = p['per_type']
        us = sorted(v['us_per_cohort_in_gpu'] for v in t.values())
        print(sys.argv[2], 'cohort 64', 'transposed' if p['transposed'] else 'row-major', 'us a cohort: min %.0f median %.0f max %.0f' % (us[0], us[len(us) // 2], us[-1]))
" "$OUT/bank-gpu-$2.json" "$2"
}
case "$1" in
probe)
    timeout 300 dist/cohort selftest gpu --only bank > "$OUT/selftest-bank.log" 2>&1
    rc=$?
    tail -12 "$OUT/selftest-bank.log"
    [ $rc = 0 ] || { echo "selftest --only bank failed: $rc"; exit $rc; }
    for round in 1 2; do
        bank_gpu cohort new-r$round
        bank_gpu cohort-prev prev-r$round
    done
    pack_results bank-gpu.tgz selftest-bank.log $(cd "$OUT" && ls bank-gpu-*.log)
    ;;
checks)
    gpu_checks
    rc=$?
    # The large cohorts again, shorter (the lanes rule changed there).
    for b in cohort cohort-prev; do
        timeout 100 dist/$b bench bank-gpu --cohorts 4096,8192,16384 --iters 10 --streams 1 --energy-secs 0.3 \
            --log-level warn --out "$OUT/bank-large-$b.json" 2>&1 | grep "bank on" | sed "s/^bank on NVIDIA [^:]*:/$b:/"
    done
    exit $rc
    ;;
served)
    R=$OUT/t; mkdir -p $R
    for run in inline:8:cohort gpu-cohort:7:cohort gpu-cohort:7:cohort-prev; do
        IFS=: read engine io build <<< "$run"
        cp dist/$build /tmp/srv && B=/tmp/srv
        taskset -c 0-7 $B serve --http 127.0.0.1:18093 --io-threads $io --log-level warn \
            --bank-users 100000 --service "bank:$engine" &
        BANK_PID=$!
        wait_port 18093 120
        taskset -c 8-15 dist/cohort load --target http://127.0.0.1:18093 --service bank --users 100000 --poisson \
            --sweep ${BANK_RATES:-200k,230k,250k,260k,270k} --connections 256 --duration 4 --warmup 1 \
            --answer-timeout-ms 2000 --server-pid $BANK_PID --log-level warn --json $R/bank-$engine-$build.json 2>&1 | tail -7
        stop_bank
    done
    mv $R/*.json $OUT/ && rmdir $R
    pack_results served.tgz
    ;;
esac
