#!/usr/bin/env bash
# The HTTP path beside the host's anchor, in one run: nginx (Debian) serving a file of the
# same size from memory, and Cohort's gateway echoing JSON bodies (`POST /v1/echo`), each on
# the first SERVER_CORES cores with wrk (Debian) on the others, keep-alive, closed loop; every
# echo answer checked byte for byte by bench/http/post.lua.
#   scripts/http-served.sh OUT_JSON DEBS_DIR NAME=COHORT_BINARY [NAME=COHORT_BINARY ...]
# DEBS_DIR holds the nginx, nginx-common, wrk and libluajit2 .deb files (`apt-get download
# nginx nginx-common wrk libluajit2-5.1-2`). Env: CORES (server core counts, default "1 4 8"),
# SIZES (bytes, default "1024 16384"), CONNS (default 64), SECS (default 5), ENGINES (the
# echo's engines, default "cpu"; e.g. "cpu inline"),
# VARIANTS (extra `serve` flag sets for the last binary at the largest core count, ';'-separated;
# one with --tls-cert is driven over https).
set -euo pipefail
out=${1:?usage: scripts/http-served.sh OUT_JSON DEBS_DIR NAME=BINARY...}
debs=${2:?DEBS_DIR}
shift 2
here=$(cd "$(dirname "$0")/.." && pwd)
lua="$here/bench/http/post.lua"
cores_list=${CORES:-1 4 8}
sizes=${SIZES:-1024 16384}
conns=${CONNS:-64}
secs=${SECS:-5}
total=$(nproc)
x=$(mktemp -d)
mkdir -p "$x/root" "$x/www" "$x/tmp"
for f in "$debs"/*.deb; do dpkg -x "$f" "$x/root"; done
export LD_LIBRARY_PATH="$x/root/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
wrk="$x/root/usr/bin/wrk"
nginx="$x/root/usr/sbin/nginx"
points="$x/points.txt"
: >"$points"
client="$((total / 2))-$((total - 1))"
wrk_threads=$((total / 2))

# One wrk run (ECHO=1: POST checked echo bodies); appends "server variant cores bytes | wrk
# output" to the points file.
measure() {
    local label=$1 variant=$2 cores=$3 bytes=$4 url=$5 echo=${6:-}
    local w args=(-t"$wrk_threads" -c"$conns" -d"${secs}s" --latency)
    if [ -n "$echo" ]; then
        args+=(-s "$lua" "$url" -- "$bytes")
    else
        args+=("$url")
    fi
    w=$(taskset -c "$client" "$wrk" "${args[@]}" 2>&1 || true)
    echo "== $label [$variant] cores=$cores bytes=$bytes"
    echo "$w" | grep -E "Requests/sec|Transfer/sec|^ +(50|99)%|checked|Non-2xx|Socket errors" || true
    printf '%s\t%s\t%s\t%s\t%s\n' "$label" "$variant" "$cores" "$bytes" "$(echo "$w" | tr '\n' '|')" >>"$points"
}

. "$here/scripts/lib/wait-port.sh"

for cores in $cores_list; do
    scores="0-$((cores - 1))"
    for bytes in $sizes; do
        # nginx: the same number of bytes in the answer body as the echo's JSON answer.
        head -c "$((bytes + 11))" /dev/zero | tr '\0' a >"$x/www/page"
        cat >"$x/nginx.conf" <<CONF
worker_processes $cores; pid $x/nginx.pid; error_log $x/error.log; daemon off;
events { worker_connections 4096; }
http { access_log off; sendfile on; tcp_nopush on; keepalive_requests 1000000; open_file_cache max=100;
  client_body_temp_path $x/tmp; proxy_temp_path $x/tmp; fastcgi_temp_path $x/tmp; uwsgi_temp_path $x/tmp; scgi_temp_path $x/tmp;
  server { listen 127.0.0.1:18090 reuseport backlog=4096; root $x/www; } }
CONF
        taskset -c "$scores" "$nginx" -c "$x/nginx.conf" -p "$x" &
        ng=$!
        wait_port 18090
        measure nginx file "$cores" "$bytes" http://127.0.0.1:18090/page
        kill "$ng"
        wait "$ng" 2>/dev/null || true
    done
    for spec in "$@"; do
        name=${spec%%=*}
        bin=${spec#*=}
        for engine in ${ENGINES:-cpu}; do
            taskset -c "$scores" "$bin" serve --service echo --engine "$engine" \
                --http 127.0.0.1:18091 --io-threads "$cores" --log-level warn &
            srv=$!
            wait_port 18091
            for bytes in $sizes; do
                measure "$name" "engine=$engine" "$cores" "$bytes" http://127.0.0.1:18091 echo
            done
            kill -INT "$srv"
            wait "$srv" || true
        done
    done
done

# Variants of the last binary at the largest core count.
last=${*: -1}
name=${last%%=*}
bin=${last#*=}
cores=${cores_list##* }
IFS=';' read -r -a variants <<<"${VARIANTS:-}"
for v in "${variants[@]}"; do
    [ -n "$v" ] || continue
    # shellcheck disable=SC2086
    taskset -c "0-$((cores - 1))" "$bin" serve --service echo --engine cpu --http 127.0.0.1:18091 \
        --io-threads "$cores" --log-level warn $v &
    srv=$!
    wait_port 18091
    # A variant with TLS is driven over https (wrk does not check the certificate).
    scheme=http
    case "$v" in *--tls-cert*) scheme=https ;; esac
    for bytes in $sizes; do
        measure "$name" "$v" "$cores" "$bytes" "$scheme://127.0.0.1:18091" echo
    done
    kill -INT "$srv"
    wait "$srv" || true
done

python3 - "$points" "$out" "$*" <<'PY'
import json, re, sys, subprocess, platform, os
points, out, bins = sys.argv[1], sys.argv[2], sys.argv[3]
def secs(v):
    m = re.match(r"([\d.]+)(us|ms|s)", v)
    return float(m.group(1)) * {"us": 1e-6, "ms": 1e-3, "s": 1.0}[m.group(2)] if m else None
rows = []
for line in open(points):
    label, variant, cores, nbytes, text = line.rstrip("\n").split("\t", 4)
    t = text.replace("|", "\n")
    rate = re.search(r"Requests/sec:\s+([\d.]+)", t)
    p50 = re.search(r"^\s+50%\s+(\S+)", t, re.M)
    p99 = re.search(r"^\s+99%\s+(\S+)", t, re.M)
    chk = re.search(r"checked (\d+) wrong (\d+)", t)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", t)
    rows.append({
        "server": label, "variant": variant, "server_cores": int(cores), "body_bytes": int(nbytes),
        "rate": float(rate.group(1)) if rate else None,
        "p50_s": secs(p50.group(1)) if p50 else None, "p99_s": secs(p99.group(1)) if p99 else None,
        "checked": int(chk.group(1)) if chk else None, "wrong": int(chk.group(2)) if chk else None,
        "non_2xx": int(non2xx.group(1)) if non2xx else 0,
    })
def sh(c):
    try:
        return subprocess.run(c, shell=True, capture_output=True, text=True).stdout.strip()
    except Exception:
        return ""
doc = {
    "bench": "http-served",
    "machine": {"gpu": sh("nvidia-smi --query-gpu=name --format=csv,noheader | head -1"),
                "cores": os.cpu_count(), "kernel": platform.release(),
                "cpu": sh("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2")},
    "commit": sh("git rev-parse --short HEAD") + ("-dirty" if sh("git status --porcelain --untracked-files=no") else ""),
    "command": "scripts/http-served.sh " + out + " DEBS " + bins,
    "client": "wrk, half the cores, closed loop, keep-alive, answers checked by bench/http/post.lua",
    "points": rows,
}
json.dump(doc, open(out, "w"), indent=1)
for r in rows:
    print(f"{r['server']:>8} {r['variant'][:40]:>40} cores={r['server_cores']} bytes={r['body_bytes']:>6} "
          f"rate={r['rate']} p99={r['p99_s']} wrong={r['wrong']}")
PY
