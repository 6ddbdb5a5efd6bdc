#!/usr/bin/env python3
"""Goal check (issue 26): N idle TCP connections are all closed by the idle timeout (GOAWAY,
then EOF), and the server's descriptor count comes back down.
    scripts/idle-connections.py COHORT_BINARY [N=10000] [IDLE_MS=1000]"""
import os, re, resource, select, socket, subprocess, sys, time

binary = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 10000
idle_ms = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
srv = subprocess.Popen([binary, "serve", "--service", "echo", "--tcp", "127.0.0.1:0",
                        "--idle-timeout-ms", str(idle_ms), "--log-level", "warn"],
                       stdout=subprocess.PIPE, text=True)
port = int(re.search(r"tcp=[\d.]+:(\d+)", srv.stdout.readline()).group(1))
fds = lambda: len(os.listdir(f"/proc/{srv.pid}/fd"))
base = fds()
t0 = time.time()
conns = []
for _ in range(n):
    c = socket.create_connection(("127.0.0.1", port))
    c.setblocking(False)
    conns.append(c)
opened = time.time() - t0
time.sleep(0.3)
peak = fds()
deadline = time.time() + idle_ms / 1000 * 2 + 10
closed, goaway = set(), 0
poller = select.epoll()
for i, c in enumerate(conns):
    poller.register(c.fileno(), select.EPOLLIN)
by_fd = {c.fileno(): c for c in conns}
while len(closed) < n and time.time() < deadline:
    for fd, _ in poller.poll(0.5):
        c = by_fd[fd]
        try:
            data = c.recv(65536)
        except (BlockingIOError, ConnectionResetError):
            data = b""
        if data:
            goaway += data[3:4] == b"\x04"  # frame kind 4: GOAWAY
            continue
        closed.add(fd)
        poller.unregister(fd)
took = time.time() - t0
time.sleep(0.5)
after = fds()
srv.terminate()
srv.wait(timeout=15)
print(f"{n} connections opened in {opened:.1f} s; server fds {base} -> {peak} -> {after}; "
      f"closed by the server {len(closed)} (GOAWAY {goaway}) within {took:.1f} s of opening "
      f"(idle timeout {idle_ms} ms)")
sys.exit(0 if len(closed) == n and after <= base + 8 else 1)
