#!/usr/bin/env python3
"""Hostile TCP and HTTP clients against a real `cohort serve` on loopback (issue 47's goals).

Starts the server (echo on the cpu engine, pinned with taskset), then:
 1. flood: CONNS HTTP and CONNS TCP connections pipeline 60 KB echoes and never read. While
    they do, normal clients (UDP; TCP and HTTP with a connection per request; TCP and HTTP on
    a connection kept open from before the flood; one request at a time, every answer
    checked) measure their latency. Recorded: when each flooder's last write went
    through and when the server closed it (its TCP state, read with TCP_INFO: the flooder
    never reads), the host's TCP memory (/proc/net/sockstat) against tcp_mem, the server's
    RSS and counted bytes (cohort_buffered_bytes), and RSS 10 s after the last close.
 2. idle cost: CONNS HTTP and CONNS TCP connections each do one 60 KB echo (answers read) and
    stay open: the server's RSS growth per connection.
 3. with --grpc (or --grpc-only, which skips 1 and 2): the gRPC attacks of issue 84
    (scripts/hostile_grpc.py): a connection that never grants HTTP/2 window to its 20
    streams of 60 KB echoes, 20 calls sent half, an empty and a preface-only connection.
A send cut short restarts the flooder's pipeline from its first byte, so its stream also
carries broken requests (as a hostile client's may): the server refuses those (400 or a
protocol error) and closes, reading what is still sent for a short lingering close.
Bounded: at most --conns connections of each kind, every phase has a deadline, loopback only.
Writes one JSON (machine, commit, command, figures, each goal's verdict) to --out.

  scripts/hostile-clients.py --bin target/release/cohort --conns 1000 --out lab/results/hostile-clients-local.json
"""
import argparse
import fcntl
import json
import multiprocessing
import os
import platform
import random
import re
import selectors
import socket
import struct
import subprocess
import sys
import termios
import threading
import time
import urllib.request

PAYLOAD = 60_000
# The normal clients' own address: another host's, as to a server they would be (the
# engines queue each client address fairly; the flooders all come from 127.0.0.1).
NORMAL_HOST = "127.0.0.2"
ECHO_ID = 1  # cohort_services::echo::ID
# magic, version, kind, service, flags, request id, payload length, timeout (docs/protocol.md)
HEADER = struct.Struct("<HBBHHQII")


def frame(request_id, payload):
    return HEADER.pack(0x4843, 1, 1, ECHO_ID, 0, request_id, len(payload), 0) + payload


def http_request(body):
    return (
        f"POST /v1/echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def tcp_mem_pages():
    with open("/proc/net/sockstat") as f:
        for line in f:
            if line.startswith("TCP:"):
                return int(line.split("mem")[1].split()[0])
    return 0


def tcp_state(s):
    # struct tcp_info's first byte: 1 ESTABLISHED, 7 CLOSE, 8 CLOSE_WAIT (the peer closed).
    try:
        return s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)[0]
    except OSError:
        return 7


def metric(http, name):
    try:
        text = urllib.request.urlopen(f"http://{http}/metrics", timeout=5).read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return 0.0


def cpu_list(text):
    """CPUs written as taskset -c takes them: "0", "0,2", "1-3"."""
    out = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def start_server(args):
    cmd = ["taskset", "-c", args.server_cpus, args.bin, "serve", "--service", "echo",
           "--engine", "cpu", "--udp", "127.0.0.1:0", "--tcp", "127.0.0.1:0",
           "--http", "127.0.0.1:0", "--max-buffered-bytes", args.budget,
           "--read-timeout-ms", str(args.read_timeout_ms), "--log-level", "warn"]
    kinds = ("udp", "tcp", "http")
    if args.grpc:
        cmd += ["--grpc", "127.0.0.1:0"]
        kinds += ("grpc",)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    addrs = {}
    deadline = time.time() + 60
    while len(addrs) < len(kinds) and time.time() < deadline:
        line = p.stdout.readline()
        if not line:
            break
        for kind in kinds:
            m = re.search(rf"\b{kind}[= ]+(127\.0\.0\.1:\d+)", line)
            if m and kind not in addrs:
                addrs[kind] = m.group(1)
    if len(addrs) < len(kinds):
        p.kill()
        sys.exit(f"server did not say its addresses: {addrs} {p.stderr.read()[:2000]}")
    threading.Thread(target=lambda: [None for _ in p.stdout], daemon=True).start()
    threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
    return p, cmd, addrs


def hostport(a):
    h, port = a.rsplit(":", 1)
    return (h, int(port))


class Prober(threading.Thread):
    """A normal client on one transport: one request at a time, every answer checked. `tcp`
    and `http` open a connection per request; `tcp-kept` and `http-kept` keep one open
    (connected before the flood starts), as a client of a long-lived connection does."""

    def __init__(self, kind, addr, stop, every=0.01):
        super().__init__(daemon=True)
        self.kind, self.addr, self.stop, self.every = kind, hostport(addr), stop, every
        self.lat_ms, self.failures = [], []
        self.slow = []  # (wall-clock start, ms) of every answer over 5 ms: where the tail falls
        self.sock = None
        if kind.endswith("-kept"):
            self.connect()

    def connect(self):
        self.sock = socket.create_connection(self.addr, timeout=2, source_address=(NORMAL_HOST, 0))

    def kept(self, i, data):
        if self.sock is None:
            self.connect()  # (the last one failed: a new one, counted in its latency)
        s = self.sock
        try:
            if self.kind == "tcp-kept":
                s.sendall(frame(i, data))
                got = b""
                while len(got) < 24 + len(data):
                    chunk = s.recv(4096)
                    if not chunk:
                        raise ConnectionError("closed by the server")
                    got += chunk
                return got[24:] == data and struct.unpack_from("<Q", got, 8)[0] == i
            body = json.dumps({"data": data.decode()}).encode()
            s.sendall(http_request(body))
            got = b""
            while b"\r\n\r\n" not in got:
                chunk = s.recv(4096)
                if not chunk:
                    raise ConnectionError("closed by the server")
                got += chunk
            head, _, rest = got.partition(b"\r\n\r\n")
            n = int(re.search(rb"content-length: (\d+)", head, re.I).group(1))
            while len(rest) < n:
                chunk = s.recv(4096)
                if not chunk:
                    raise ConnectionError("closed by the server")
                rest += chunk
            return head.startswith(b"HTTP/1.1 200") and data in rest
        except OSError:
            s.close()
            self.sock = None
            raise

    def one(self, i):
        data = b"probe-%d" % i
        if self.kind.endswith("-kept"):
            return self.kept(i, data)
        if self.kind == "udp":
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind((NORMAL_HOST, 0))
            s.settimeout(2)
            s.sendto(frame(i, data), self.addr)
            got = s.recv(2048)
            s.close()
            ok = got[24:] == data and struct.unpack_from("<Q", got, 8)[0] == i
        elif self.kind == "tcp":
            s = socket.create_connection(self.addr, timeout=2, source_address=(NORMAL_HOST, 0))
            s.sendall(frame(i, data))
            got = b""
            while len(got) < 24 + len(data):
                chunk = s.recv(4096)
                if not chunk:
                    break
                got += chunk
            s.close()
            ok = got[24:] == data
        else:
            body = json.dumps({"data": data.decode()}).encode()
            s = socket.create_connection(self.addr, timeout=2, source_address=(NORMAL_HOST, 0))
            s.sendall(http_request(body)[:-len(body)].replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n") + body)
            got = b""
            while True:
                chunk = s.recv(4096)
                if not chunk:
                    break
                got += chunk
            s.close()
            ok = got.startswith(b"HTTP/1.1 200") and data in got
        return ok

    def run(self):
        i = 0
        while not self.stop.is_set():
            i += 1
            t = time.perf_counter()
            try:
                ok = self.one(i)
            except OSError as e:
                ok = False
                self.failures.append(f"{type(e).__name__}: {e}")
            dt = (time.perf_counter() - t) * 1000
            if ok:
                self.lat_ms.append(dt)
                if dt > 5:
                    self.slow.append((time.time() - dt / 1000, dt))
            elif not self.failures or not self.failures[-1].startswith(("Timeout", "Connection")):
                self.failures.append("wrong or missing answer")
            time.sleep(self.every)

    def summary(self):
        v = sorted(self.lat_ms)
        q = lambda p: round(v[min(len(v) - 1, int(p * len(v)))], 3) if v else None
        return {"answered": len(v), "failures": len(self.failures), "first_failures": self.failures[:5],
                "p50_ms": q(0.5), "p99_ms": q(0.99), "max_ms": round(v[-1], 3) if v else None,
                "slow": self.slow}


def probe_process(addrs, stop, ready, results):
    """The normal clients, in a process of their own: in the flooder's process they would
    wait for its interpreter lock (up to 5 ms a switch) and measure that, not the server."""
    inner = threading.Event()
    kinds = ("udp", "tcp", "http", "tcp-kept", "http-kept")
    probers = [Prober(k, addrs[k.split("-")[0]], inner) for k in kinds]
    ready.set()  # the kept connections are open
    for p in probers:
        p.start()
    stop.wait()
    inner.set()
    for p in probers:
        p.join()
    results.put({p.kind: p.summary() for p in probers})


def queued_in(s):
    """Bytes in a socket's receive queue (the server's answers the flooder has not read)."""
    try:
        return struct.unpack("i", fcntl.ioctl(s.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]
    except OSError:
        return -1


def flood(args, addrs, pid, out):
    http_body = json.dumps({"data": "x" * PAYLOAD}).encode()
    reqs = {"http": http_request(http_body) * 4, "tcp": frame(7, b"x" * PAYLOAD) * 4}
    conns = []  # (kind, socket)
    for kind in ("http", "tcp"):
        for _ in range(args.conns):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            # The flooder's own buffers stay small: on loopback they are this host's memory too.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 32 << 10)
            s.connect(hostport(addrs[kind]))
            s.setblocking(False)
            # kind, sock, last write ok, closed at, bytes sent, last answer byte in, queued
            conns.append([kind, s, None, None, 0, None, 0])
    stop, ready = multiprocessing.Event(), multiprocessing.Event()
    results = multiprocessing.Queue()
    probers = multiprocessing.Process(target=probe_process, args=(addrs, stop, ready, results))
    rss0 = out["rss_start_kb"]
    peak = {"rss_kb": rss0, "tcp_mem_pages": tcp_mem_pages(), "buffered_bytes": 0.0}
    probers.start()
    ready.wait(10)
    t0 = time.time()
    os.nice(5)  # the normal clients come first on the shared core
    deadline = t0 + args.flood_seconds
    last_sample = 0
    while time.time() < deadline:
        now = time.time()
        busy = False
        for c in conns:
            if c[3] is not None:
                continue
            try:
                n = c[1].send(reqs[c[0]])
                if n > 0:
                    c[2], busy = now, True
                    c[4] += n
            except BlockingIOError:
                pass
            except OSError:
                c[3] = now
            if c[3] is None:
                q = queued_in(c[1])
                if q > c[6]:
                    c[5], c[6] = now, q  # the server's writes still went through
            if c[3] is None and c[2] is not None and tcp_state(c[1]) in (7, 8):
                c[3] = now
        if now - last_sample > 0.2:
            last_sample = now
            peak["rss_kb"] = max(peak["rss_kb"], rss_kb(pid))
            peak["tcp_mem_pages"] = max(peak["tcp_mem_pages"], tcp_mem_pages())
            b = metric(addrs["http"], "cohort_buffered_bytes")
            if b is not None:
                peak["buffered_bytes"] = max(peak["buffered_bytes"], b)
        if all(c[3] is not None for c in conns):
            break
        if not busy:
            time.sleep(0.005)
    stop.set()
    normal = results.get(timeout=30)
    closes = sorted(c[3] for c in conns if c[3] is not None)
    for c in normal.values():  # slow answers: (seconds into the flood, ms)
        c["slow"] = [(round(t - t0, 3), round(ms, 1)) for t, ms in c["slow"]]
    probers.join()
    last_close = max((c[3] for c in conns if c[3] is not None), default=time.time())
    open_left = sum(1 for c in conns if c[3] is None)
    waits = sorted(c[3] - c[2] for c in conns if c[3] is not None and c[2] is not None)
    # From the server's last write that went through (its stall, for a flooder it answered)
    # to the close: what the write-stall timeout bounds.
    stalls = sorted(c[3] - c[5] for c in conns if c[3] is not None and c[5] is not None)
    # A flooder's stall: from when neither its sends went through nor answer bytes reached it
    # (the later of the two) to its close. A flooder the server paused for the budget is not
    # stalled while it waits (it has had nothing to read): its clock starts with its answers.
    idle = sorted(c[3] - max(c[2] or t0, c[5] or t0) for c in conns if c[3] is not None)
    for c in conns:
        c[1].close()
    # RSS 10 s after the last hostile connection closed.
    time.sleep(max(0.0, last_close + 10 - time.time()))
    out["flood"] = {
        "connections": {"http": args.conns, "tcp": args.conns},
        "seconds": round(time.time() - t0, 1),
        "first_close_s": round(closes[0] - t0, 3) if closes else None,
        # How many flooders the server closed in each 50 ms of the flood (from its start).
        "closes_per_50ms": [sum(1 for c in closes if i <= (c - t0) / 0.05 < i + 1)
                            for i in range(int((closes[-1] - t0) / 0.05) + 1)] if closes else [],
        "left_open_at_deadline": open_left,
        "close_after_last_write_s": {
            "p50": round(waits[len(waits) // 2], 2) if waits else None,
            "p90": round(waits[int(len(waits) * 0.9)], 2) if waits else None,
            "p99": round(waits[int(len(waits) * 0.99)], 2) if waits else None,
            "max": round(waits[-1], 2) if waits else None,
            "over_read_timeout_plus_1s": sum(1 for w in waits if w > args.read_timeout_ms / 1000 + 1),
        },
        "close_after_stall_s": {
            "p50": round(idle[len(idle) // 2], 2) if idle else None,
            "p99": round(idle[int(len(idle) * 0.99)], 2) if idle else None,
            "max": round(idle[-1], 2) if idle else None,
        },
        "close_after_server_write_stall_s": {
            "flooders_answered": len(stalls),
            "p50": round(stalls[len(stalls) // 2], 2) if stalls else None,
            "p99": round(stalls[int(len(stalls) * 0.99)], 2) if stalls else None,
            "max": round(stalls[-1], 2) if stalls else None,
        },
        "partial_frame_timeouts": metric(addrs["http"], 'cohort_connections_timed_out_total{reason="partial_frame"}'),
        "stalled_closed": metric(addrs["http"], 'cohort_connections_timed_out_total{reason="write_stalled"}'),
        "body_timeouts": metric(addrs["http"], 'cohort_connections_timed_out_total{reason="http_body"}'),
        "peak_rss_kb": peak["rss_kb"],
        "peak_tcp_mem_pages": peak["tcp_mem_pages"],
        "peak_buffered_bytes": peak["buffered_bytes"],
        "rss_10s_after_last_close_kb": rss_kb(pid),
        "normal_clients": normal,
    }


def idle_cost(args, addrs, pid, out, payload=PAYLOAD, key="idle_after_one_echo"):
    """Connections that did one echo each (60 KB, or `payload`) and stay open: RSS per connection."""
    before = rss_kb(pid)
    http_body = json.dumps({"data": "y" * payload}).encode()
    keep = []
    for kind in ("http", "tcp"):
        for i in range(args.conns):
            s = socket.create_connection(hostport(addrs[kind]), timeout=5)
            want = payload + (24 if kind == "tcp" else 0)
            s.sendall(http_request(http_body) if kind == "http" else frame(i, b"y" * payload))
            got = 0
            buf = b""
            while True:
                chunk = s.recv(1 << 16)
                if not chunk:
                    raise SystemExit(f"{kind} connection closed before its answer")
                buf += chunk
                if kind == "tcp" and len(buf) >= want:
                    break
                if kind == "http" and b"\r\n\r\n" in buf:
                    head, _, body = buf.partition(b"\r\n\r\n")
                    n = int(re.search(rb"content-length: (\d+)", head, re.I).group(1))
                    if len(body) >= n:
                        break
            keep.append(s)
    time.sleep(3)
    after = rss_kb(pid)
    out[key] = {
        "echo_bytes": payload,
        "connections": 2 * args.conns,
        "rss_before_kb": before,
        "rss_after_kb": after,
        "per_connection_kb": round((after - before) / (2 * args.conns), 1),
    }
    for s in keep:
        s.close()


def grpc_attacks(args, addrs, pid, out, budget):
    import hostile_grpc
    addr = hostport(addrs["grpc"])
    rt = args.read_timeout_ms / 1000
    start_kb = rss_kb(pid)
    g = hostile_grpc.window_stall(
        addr, rt, lambda: (metric(addrs["http"], "cohort_buffered_bytes"), rss_kb(pid)))
    g.update(hostile_grpc.half_sent(addr, rt))
    g["rss_start_kb"] = start_kb
    out["grpc"] = g
    out["goals"].update({
        "grpc_stalled_answers_counted_in_the_budget": g["peak_buffered_bytes"] > 0,
        "grpc_stalled_window_closed_within_read_timeout": g["closed"]
        and g["close_after_last_grant_s"] <= rt + 0.5,
        "grpc_rss_under_start_plus_twice_the_budget_plus_64MB":
            g["peak_rss_kb"] <= start_kb + 2 * budget // 1024 + 64 * 1024,
        "grpc_half_sent_calls_closed_within_read_timeout": g["half_sent_left_open"] == 0
        and g["half_sent_close_max_s"] <= rt + 0.5,
        "grpc_silent_connections_closed_within_read_timeout": all(
            g[k] is not None and g[k] <= rt + 0.5
            for k in ("empty_closed_after_s", "preface_only_closed_after_s")),
    })


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="target/release/cohort")
    ap.add_argument("--conns", type=int, default=1000, help="hostile connections of each kind (at most 2000)")
    ap.add_argument("--budget", default="4M",
                    help="--max-buffered-bytes (4M: what docs/protocol.md advises per io thread where a normal client's tail under a flood matters)")
    ap.add_argument("--read-timeout-ms", type=int, default=2000)
    ap.add_argument("--flood-seconds", type=float, default=40)
    ap.add_argument("--server-cpus", default="0")
    ap.add_argument("--client-cpus", default=None,
                    help="where the flooders and normal clients run (default: every CPU but the server's)")
    ap.add_argument("--grpc", action="store_true", help="also the gRPC attacks (phase 3)")
    ap.add_argument("--grpc-only", action="store_true", help="only the gRPC attacks")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    args.grpc = args.grpc or args.grpc_only
    args.conns = min(args.conns, 2000)
    p, cmd, addrs = start_server(args)
    # The clients off the server's cores (the probers' process inherits this): left to the
    # scheduler, the busy flooder lands on the server's core now and then, and the normal
    # clients would measure that.
    server = cpu_list(args.server_cpus)
    clients = cpu_list(args.client_cpus) if args.client_cpus else (os.sched_getaffinity(0) - server)
    if clients:
        os.sched_setaffinity(0, clients)
    try:
        time.sleep(0.5)
        out = {
            "command": " ".join(sys.argv),
            "server_command": " ".join(cmd),
            "commit": subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True).stdout.strip(),
            "machine": {"hostname": platform.node(), "cpus": os.cpu_count(), "kernel": platform.release()},
            "tcp_mem_pages": [int(x) for x in open("/proc/sys/net/ipv4/tcp_mem").read().split()],
            "rss_start_kb": rss_kb(p.pid),
        }
        budget = int(args.budget.rstrip("MK")) << (20 if args.budget.endswith("M") else 10)
        out["goals"] = {}
        if not args.grpc_only:
            flood(args, addrs, p.pid, out)
            idle_cost(args, addrs, p.pid, out, 16, "idle_after_one_small_echo")
            idle_cost(args, addrs, p.pid, out)
            f = out["flood"]
            # The connection's own cost (state and buffers); the 60 KB row adds the freed pages
            # the allocator has not returned yet (reported beside it).
            per_conn = max(out["idle_after_one_small_echo"]["per_connection_kb"], 0)
            bound_kb = out["rss_start_kb"] + budget // 1024 + 2 * args.conns * 64
            out["goals"].update({
                # Every flooder closed within the read timeout (and 0.25 s of sampling) of its stall:
                # the last moment its sends went through or answer bytes reached it. (The close
                # after the client's last write alone adds the time it waited, unread, for the
                # budget; after the server's last write alone, the time a refused client's sends
                # were still read and dropped: both reported beside.)
                "every_flooder_closed_within_read_timeout_of_its_stall": f["left_open_at_deadline"] == 0
                and (f["close_after_stall_s"]["max"] or 0) <= args.read_timeout_ms / 1000 + 0.25,
                "tcp_mem_below_pressure": f["peak_tcp_mem_pages"] < out["tcp_mem_pages"][1],
                "normal_clients_p99_under_10ms_no_failures": all(
                    c["failures"] == 0 and c["p99_ms"] is not None and c["p99_ms"] < 10
                    for c in f["normal_clients"].values()),
                "rss_under_start_plus_budget_plus_64KB_per_connection": f["peak_rss_kb"] <= bound_kb,
                "rss_back_within_64MB_10s_after": f["rss_10s_after_last_close_kb"] - out["rss_start_kb"] <= 64 * 1024,
                "idle_connection_cost_at_most_64KB": per_conn <= 64,
            })
        if args.grpc:
            grpc_attacks(args, addrs, p.pid, out, budget)
        with open(args.out + ".tmp", "w") as fh:
            json.dump(out, fh, indent=2)
        os.replace(args.out + ".tmp", args.out)
        print(json.dumps(out, indent=2))
    finally:
        p.terminate()
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()


if __name__ == "__main__":
    main()
