# Sourced by the benchmark scripts. wait_port PORT [SECONDS]: returns 0 once something accepts
# TCP connections on 127.0.0.1:PORT (a server listens only once its engines are ready), 1
# after SECONDS (default 20).
wait_port() {
    local tries=$(( ${2:-20} * 20 ))
    for _ in $(seq 1 "$tries"); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.05
    done
    echo "nothing listens on 127.0.0.1:$1" >&2
    return 1
}
