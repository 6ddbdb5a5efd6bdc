#!/usr/bin/env bash
# Per-thread CPU use of a running process over an interval, from /proc (no perf needed):
# which thread of an engine is saturated. Prints "cpu% tid name", busiest first.
# Usage: scripts/thread-cpu.sh PID [SECONDS=1]
set -euo pipefail
pid=$1; secs=${2:-1}
hz=$(getconf CLK_TCK)
snap() { # tid utime+stime name, for every thread of $pid
    for t in /proc/"$pid"/task/*; do
        # Fields after the parenthesised name: utime is the 12th, stime the 13th.
        read -r line < "$t/stat" || continue
        rest=${line##*) }
        set -- $rest
        echo "${t##*/} $(( ${12} + ${13} )) $(tr ' ' '_' < "$t/comm")"
    done
}
a=$(snap); sleep "$secs"; b=$(snap)
join <(sort <<< "$a") <(sort <<< "$b") |
    awk -v hz="$hz" -v s="$secs" '{ printf "%6.1f %s %s\n", 100 * ($4 - $2) / hz / s, $1, $3 }' |
    sort -rn
