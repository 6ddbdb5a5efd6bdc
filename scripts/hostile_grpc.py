"""Hostile gRPC clients for scripts/hostile-clients.py --grpc (issue 84), in raw HTTP/2
frames over plain sockets (no gRPC library misbehaves on purpose). Each client answers the
server's SETTINGS and PINGs, as a live peer does, and never grants flow-control window.

 - window_stall: one connection, STREAMS ModelStreamInfer streams of 60 KB echoes, sent as
   long as the server grants window for them; the answers are never granted window. Goal:
   the answers show in cohort_buffered_bytes, RSS stays under start + budget + slack, and
   the server closes the connection within the read timeout of its last progress.
 - half_sent: CONNS connections each send HEADERS and 20 bytes of a ModelInfer message;
   plus an empty and a preface-only connection. Goal: each closed within the read timeout.
Bounded: every phase has a deadline, loopback only, at most 200 connections.
"""
import socket
import struct
import threading
import time

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0, 1, 4, 6, 7, 8
END_STREAM, END_HEADERS, ACK = 1, 4, 1


def frame(kind, flags, stream, payload=b""):
    n = len(payload)
    return struct.pack(">BHBBI", n >> 16, n & 0xFFFF, kind, flags, stream) + payload


def hpack_literal(name, value):
    # Literal header field without indexing, new name, no Huffman (RFC 7541 6.2.2).
    def s(b):
        assert len(b) < 127
        return bytes([len(b)]) + b
    return b"\x00" + s(name.encode()) + s(value.encode())


def call_headers(method):
    fields = [(":method", "POST"), (":scheme", "http"), (":authority", "x"),
              (":path", f"/inference.GRPCInferenceService/{method}"),
              ("content-type", "application/grpc"), ("te", "trailers")]
    return b"".join(hpack_literal(n, v) for n, v in fields)


def echo_message(size):
    """A gRPC-framed ModelInferRequest for echo with one BYTES element of `size` bytes."""
    def field(num, payload):  # length-delimited field
        return varint(num << 3 | 2) + varint(len(payload)) + payload

    def varint(v):
        out = b""
        while True:
            b = v & 0x7F
            v >>= 7
            if v:
                out += bytes([b | 0x80])
            else:
                return out + bytes([b])
    tensor = field(1, b"data") + field(2, b"BYTES") + varint(3 << 3) + varint(1)
    raw = struct.pack("<I", size) + b"x" * size
    body = field(1, b"echo") + field(5, tensor) + field(7, raw)
    return b"\x00" + struct.pack(">I", len(body)) + body


class Conn:
    """One HTTP/2 connection; a thread reads its frames, acknowledges SETTINGS and PINGs,
    tracks the send windows, and notes when the server closes it."""

    def __init__(self, addr, preface="full", answer=True):
        """preface: "full" (the preface and SETTINGS), "bare" (the preface alone) or None."""
        self.s = socket.create_connection(addr, timeout=5)
        self.answer = answer  # (an empty connection says nothing at all, not even acks)
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.conn_window, self.initial, self.windows = 65535, 65535, {}
        self.closed_at = None
        self.last_grant = time.time()
        if preface:  # (before the reader starts: an ack must not go first)
            self.send(PREFACE + (frame(SETTINGS, 0, 0) if preface == "full" else b""))
        threading.Thread(target=self._read, daemon=True).start()

    def send(self, b):
        with self.lock:
            self.s.sendall(b)

    def _recv(self, n):
        b = b""
        while len(b) < n:
            got = self.s.recv(n - len(b))
            if not got:
                raise EOFError
            b += got
        return b

    def _read(self):
        self.s.settimeout(None)
        try:
            while True:
                h = self._recv(9)
                n = h[0] << 16 | h[1] << 8 | h[2]
                kind, flags, stream = h[3], h[4], struct.unpack(">I", h[5:])[0] & 0x7FFFFFFF
                p = self._recv(n)
                if kind == SETTINGS and not flags & ACK:
                    for i in range(0, len(p), 6):
                        ident, value = struct.unpack(">HI", p[i:i + 6])
                        if ident == 4:  # INITIAL_WINDOW_SIZE
                            with self.cond:
                                for k in self.windows:
                                    self.windows[k] += value - self.initial
                                self.initial = value
                    if self.answer:
                        self.send(frame(SETTINGS, ACK, 0))
                elif kind == PING and not flags & ACK and self.answer:
                    self.send(frame(PING, ACK, 0, p))
                elif kind == WINDOW_UPDATE:
                    inc = struct.unpack(">I", p)[0] & 0x7FFFFFFF
                    with self.cond:
                        if stream == 0:
                            self.conn_window += inc
                        else:
                            self.windows[stream] = self.windows.get(stream, self.initial) + inc
                        self.last_grant = time.time()
                        self.cond.notify_all()
        except (OSError, EOFError):
            pass
        with self.cond:
            self.closed_at = time.time()
            self.cond.notify_all()

    def open(self, stream, method):
        with self.cond:
            self.windows.setdefault(stream, self.initial)
        self.send(frame(HEADERS, END_HEADERS, stream, call_headers(method)))

    def send_data(self, stream, data, wait_s):
        """Sends `data` on `stream` once the server's windows allow; False if they do not
        within `wait_s` or the connection closed."""
        deadline = time.time() + wait_s
        with self.cond:
            while (self.conn_window < len(data) or self.windows[stream] < len(data)) \
                    and self.closed_at is None and time.time() < deadline:
                self.cond.wait(deadline - time.time())
            if self.closed_at is not None or self.conn_window < len(data) \
                    or self.windows[stream] < len(data):
                return False
            self.conn_window -= len(data)
            self.windows[stream] -= len(data)
        for i in range(0, len(data), 16384):  # the default SETTINGS_MAX_FRAME_SIZE
            self.send(frame(DATA, 0, stream, data[i:i + 16384]))
        return True

    def wait_closed(self, until):
        with self.cond:
            while self.closed_at is None and time.time() < until:
                self.cond.wait(until - time.time())
            return self.closed_at

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass


def window_stall(addr, read_timeout_s, sample, streams=20, per_stream=100):
    """`sample()` returns (cohort_buffered_bytes, rss_kb); sampled while the attack runs."""
    c = Conn(addr)
    msg = echo_message(60_000)
    sent = [0] * streams
    peak = {"buffered_bytes": 0, "rss_kb": 0}

    def stream(i):
        sid = 1 + 2 * i
        c.open(sid, "ModelStreamInfer")
        for _ in range(per_stream):
            if not c.send_data(sid, msg, 1.5):
                return
            sent[i] += 1
    senders = [threading.Thread(target=stream, args=(i,), daemon=True) for i in range(streams)]
    for t in senders:
        t.start()
    deadline = time.time() + 3 * read_timeout_s + 30
    while c.closed_at is None and time.time() < deadline:
        b, rss = sample()
        peak["buffered_bytes"] = max(peak["buffered_bytes"], b or 0)
        peak["rss_kb"] = max(peak["rss_kb"], rss)
        time.sleep(0.1)
    c.close()
    closed = c.closed_at
    return {
        "requests_sent": sum(sent),
        "peak_buffered_bytes": peak["buffered_bytes"],
        "peak_rss_kb": peak["rss_kb"],
        "closed": closed is not None,
        "close_after_last_grant_s": round(closed - c.last_grant, 3) if closed else None,
    }


def half_sent(addr, read_timeout_s, conns=20):
    msg = echo_message(1000)
    out = {}
    hold = []
    start = time.time()
    for _ in range(min(conns, 200)):
        c = Conn(addr)
        c.open(1, "ModelInfer")
        c.send_data(1, msg[:20], 5)
        hold.append(c)
    until = start + 3 * read_timeout_s + 10
    took = [c.wait_closed(until) for c in hold]
    out["half_sent_calls"] = len(hold)
    out["half_sent_left_open"] = sum(t is None for t in took)
    out["half_sent_close_max_s"] = round(max((t or until) - start for t in took), 3)
    for c in hold:
        c.close()
    for kind, preface in (("empty", None), ("preface_only", "bare")):
        start = time.time()
        c = Conn(addr, preface=preface, answer=preface is not None)
        t = c.wait_closed(start + 3 * read_timeout_s + 10)
        out[f"{kind}_closed_after_s"] = round(t - start, 3) if t else None
        c.close()
    return out
