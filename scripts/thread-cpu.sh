#!/usr/bin/env bash
# Per-thread CPU use of a running process over an interval, from /proc (no perf needed):
# which thread of an engine is saturated. Prints "cpu% tid name", busiest first, then the
# total per thread name ("name: cpu% over N threads": 15 gpu-control-N threads, 8 drivers).
# Usage: scripts/thread-cpu.sh PID [SECONDS=1]
set -uo pipefail
pid=$1; secs=${2:-1}
hz=$(getconf CLK_TCK)
snap() { # tid utime+stime name, for every thread of $pid
    for t in /proc/"$pid"/task/*; do
        # Fields after the parenthesised name: utime is the 12th, stime the 13th.
        read -r line < "$t/stat" 2> /dev/null || continue
        rest=${line##*) }
        set -- $rest
        echo "${t##*/} $(( ${12} + ${13} )) $(tr ' ' '_' < "$t/comm" 2> /dev/null)"
    done
}
a=$(snap); sleep "$secs"; b=$(snap)
rows=$(join <(sort <<< "$a") <(sort <<< "$b") |
    awk -v hz="$hz" -v s="$secs" '{ printf "%6.1f %s %s\n", 100 * ($4 - $2) / hz / s, $1, $3 }' |
    sort -rn)
echo "$rows"
# Threads named alike (gpu-control-0..14: one family) summed.
echo "$rows" | awk 'NF == 3 { n = $3; sub(/-[0-9]+$/, "", n); t[n] += $1; c[n]++ }
    END { for (n in t) if (t[n] > 0) printf "%s: %.1f%% over %d threads\n", n, t[n], c[n] }' |
    sort -t: -k2 -rn
