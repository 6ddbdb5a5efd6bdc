"""Blocking clients: native frames over UDP and TCP (pipelined; signed with a key; TLS on
TCP), and the JSON gateway over HTTP. Each has the same service methods (`echo`, `spin`,
`knn`, `lenet`) and a generic `call_many`."""

from __future__ import annotations

import json
import socket
import ssl
import time
import urllib.error
import urllib.request
from typing import Dict, List, Optional, Sequence, Tuple, TypeVar, Union

import numpy as np

from . import services as sv
from .protocol import (
    ERROR,
    GOAWAY,
    HEADER_LEN,
    RESPONSE,
    CohortError,
    Header,
    Key,
    Nonces,
    NotSent,
    ProtocolError,
    encode_request,
    goaway_ids,
)

Answer = Union[bytes, CohortError]
_F = TypeVar("_F", bound="_Frames")


class _Services:
    """The services' calls over any transport's `call_many`."""

    def call_many(self, service: int, payloads: Sequence[bytes], timeout_us: int = 0) -> List[Answer]:
        raise NotImplementedError

    def call(self, service: int, payload: bytes, timeout_us: int = 0) -> bytes:
        """One request; an error answer is raised as `CohortError`."""
        a = self.call_many(service, [payload], timeout_us)[0]
        if isinstance(a, CohortError):
            raise a
        return a

    def echo(self, data: bytes) -> bytes:
        return self.call(sv.ECHO, data)

    def spin(self, spin_us: int, data: bytes = b"") -> bytes:
        return self.call(sv.SPIN, sv.spin_request(spin_us, data))[4:]

    def knn(self, queries: np.ndarray, k: int = 10, nprobe: int = 0) -> Tuple[np.ndarray, np.ndarray]:
        """The k nearest of each row of `queries` ([N, D] or [D]): ids int64 [N, k] (-1 where
        the probed lists held fewer than k) and distances float32 [N, k] (inf there). Rows
        are pipelined; the first error answer is raised."""
        q = np.asarray(queries)
        q = q[None] if q.ndim == 1 else q
        return sv.knn_join(self.call_many(sv.KNN, [sv.knn_request(row, k, nprobe) for row in q]), k)

    def search_many(self, queries: np.ndarray, k: int = 10, nprobe: int = 0,
                    per_request: int = 0) -> Tuple[np.ndarray, np.ndarray]:
        """`knn`, with `per_request` queries in each request (0: as many as fit a frame,
        at most 1024): one frame and one answer for many queries, each query still batched
        with all other traffic on the server. The same answers as `knn`; an error answer
        (any query's) is raised."""
        q = np.asarray(queries)
        q = q[None] if q.ndim == 1 else q
        n = per_request or sv.knn_queries_per_request(q.shape[1], k, q.dtype == np.uint8)
        chunks = [q[i : i + n] for i in range(0, len(q), n)]
        answers = self.call_many(sv.KNN, [sv.knn_queries_request(c, k, nprobe) for c in chunks])
        return sv.knn_queries_join(answers, [len(c) for c in chunks], k)

    def lenet(self, images: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """The digit of each image: digits int64 [N] and scores (the logits) float32 [N, 10]."""
        rows = sv.lenet_images(images)
        return sv.lenet_join(self.call_many(sv.LENET, [r.tobytes() for r in rows]))


class _Frames(_Services):
    """Request ids, nonces, signing and the socket's lifetime, shared by the frame
    transports."""

    def __init__(self, key: Optional[Key], window: int):
        if window < 1:
            raise ValueError("window must be at least 1")
        self.key, self.window = key, window
        self._next_id = int(time.time_ns()) & 0xFFFF_FFFF_0000_0000
        self._nonces = Nonces()

    sock: socket.socket

    def close(self) -> None:
        self.sock.close()

    def __enter__(self: _F) -> _F:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def upsert(self, name: str, ids: Sequence[int], vectors: np.ndarray,
               attributes: Optional[Sequence[Optional[dict]]] = None) -> int:
        """As `HttpClient.upsert`, over a collections frame (service 7; TCP only, and one frame:
        a batch must fit 65 483 bytes). Answered once durable; returns the points written."""
        return sv.collection_upsert_answer(
            self.call(sv.COLLECTIONS, sv.collection_upsert_request(name, ids, vectors, attributes)))

    def delete(self, name: str, ids: Sequence[int]) -> int:
        """As `HttpClient.delete` by ids, over a collections frame (op 3; TCP only, at most
        10 000 ids). Answered once durable; returns the points deleted."""
        return sv.collection_delete_answer(
            self.call(sv.COLLECTIONS, sv.collection_delete_request(name, ids)))

    def get_points(self, name: str, ids: Sequence[int]) -> List[dict]:
        """As `HttpClient.get_points`, over a collections frame (op 4; TCP only): the points
        present among `ids`, in request order."""
        return sv.collection_get_answer(
            self.call(sv.COLLECTIONS, sv.collection_get_request(name, ids)))

    def search(self, name: str, vectors: np.ndarray, k: int = 10, filter: Optional[dict] = None,
               nprobe: Optional[int] = None) -> List[List[dict]]:
        """As `HttpClient.search` (without attributes), over a collections frame (TCP only)."""
        return sv.collection_search_answer(self.call(
            sv.COLLECTIONS, sv.collection_search_request(name, vectors, k, nprobe or 0, filter)))

    def _frame(self, service: int, payload: bytes, timeout_us: int) -> Tuple[int, bytes]:
        self._next_id = (self._next_id + 1) % (1 << 64)
        rid = self._next_id
        nonce = self._nonces.take() if self.key else 0
        return rid, encode_request(service, rid, payload, timeout_us, self.key, nonce)


class UdpClient(_Frames):
    """Frames over UDP: every request one datagram, answers matched by request id. Up to
    `window` requests in flight; a request unanswered within `timeout_s` raises
    `TimeoutError` (datagrams can be lost: a caller may send it again). The window is what
    the socket's receive buffer holds: each answer takes about 1 KB of it in the kernel
    whatever its size, and Linux's default buffer is 208 KB."""

    def __init__(self, host: str, port: int, key: Optional[Key] = None, window: int = 64,
                 timeout_s: float = 5.0):
        super().__init__(key, window)
        self.timeout_s = timeout_s
        self.sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM)
        # As large as the system allows (net.core.rmem_max), for wider windows.
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock.connect((host, port))

    def call_many(self, service: int, payloads: Sequence[bytes], timeout_us: int = 0) -> List[Answer]:
        out: List[Optional[Answer]] = [None] * len(payloads)
        slot: Dict[int, int] = {}
        sent = 0
        deadline = time.monotonic() + self.timeout_s
        while sent < len(payloads) or slot:
            while sent < len(payloads) and len(slot) < self.window:
                rid, frame = self._frame(service, payloads[sent], timeout_us)
                slot[rid] = sent
                self.sock.send(frame)
                sent += 1
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{len(slot)} of {len(payloads)} requests unanswered after {self.timeout_s} s")
            self.sock.settimeout(left)
            try:
                d = self.sock.recv(65_536)
            except socket.timeout:
                continue
            h = Header.decode(d)
            i = slot.pop(h.request_id, None)
            if i is None:
                continue  # an answer to a request given up on earlier
            body = d[HEADER_LEN : HEADER_LEN + h.payload_len]
            out[i] = CohortError.from_payload(body) if h.kind == ERROR else body
            deadline = time.monotonic() + self.timeout_s
        return out  # type: ignore[return-value]


class TcpClient(_Frames):
    """Frames over one TCP connection (TLS with `tls_ca`, a PEM file of the CAs to trust),
    pipelined up to `window` in flight. After the server's GOAWAY (it is draining) the
    requests it lists are still answered; the others come back as `NotSent` (never read, safe
    to retry elsewhere) and the client is closed."""

    def __init__(self, host: str, port: int, key: Optional[Key] = None, window: int = 512,
                 timeout_s: float = 30.0, tls_ca: Optional[str] = None, server_name: Optional[str] = None):
        super().__init__(key, window)
        s = socket.create_connection((host, port), timeout=timeout_s)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if tls_ca is not None:
            ctx = ssl.create_default_context(cafile=tls_ca)
            s = ctx.wrap_socket(s, server_hostname=server_name or host)
        self.sock = s
        self._buf = bytearray()
        self.goaway: Optional[List[int]] = None

    def _read_frame(self) -> Optional[Tuple[Header, bytes]]:
        """The next frame, or None when the server closed."""
        while True:
            if len(self._buf) >= HEADER_LEN:
                h = Header.decode(bytes(self._buf[:HEADER_LEN]))
                end = HEADER_LEN + h.payload_len
                if len(self._buf) >= end:
                    body = bytes(self._buf[HEADER_LEN:end])
                    del self._buf[:end]
                    return h, body
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                if self._buf:
                    raise ProtocolError("the connection closed inside a frame")
                return None
            self._buf += chunk

    def call_many(self, service: int, payloads: Sequence[bytes], timeout_us: int = 0) -> List[Answer]:
        if self.goaway is not None:
            raise CohortError(6, "UNAVAILABLE", "the server sent GOAWAY on this connection", True)
        out: List[Optional[Answer]] = [None] * len(payloads)
        slot: Dict[int, int] = {}
        sent = 0
        while sent < len(payloads) or slot:
            if self.goaway is None and sent < len(payloads) and len(slot) < self.window:
                batch = []
                while sent < len(payloads) and len(slot) < self.window:
                    rid, frame = self._frame(service, payloads[sent], timeout_us)
                    slot[rid] = sent
                    batch.append(frame)
                    sent += 1
                try:
                    self.sock.sendall(b"".join(batch))
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the server closed: what it read is answered below, the rest NotSent
            f = self._read_frame()
            if f is None:
                break
            h, body = f
            if h.kind == GOAWAY:
                # Nothing more is read; the listed requests are still answered, then the
                # server closes, and what is left in `slot` then was never read.
                self.goaway = goaway_ids(body)
                continue
            i = slot.pop(h.request_id, None)
            if i is None:
                raise ProtocolError(f"an answer to request {h.request_id}, which is not in flight")
            if h.kind == RESPONSE:
                out[i] = body
            elif h.kind == ERROR:
                out[i] = CohortError.from_payload(body)
        for rid, i in slot.items():
            out[i] = NotSent(rid)
        for i in range(sent, len(payloads)):
            out[i] = NotSent(0)
        return out  # type: ignore[return-value]


class HttpClient(_Services):
    """The JSON gateway (`POST /v1/{service}`): one request per HTTP call, keep-alive off.
    `key` goes as `Authorization: Bearer` (use https or loopback); `tls_ca` for https."""

    def __init__(self, base_url: str, key: Optional[Key] = None, timeout_s: float = 30.0,
                 tls_ca: Optional[str] = None):
        self.base = base_url.rstrip("/")
        self.key, self.timeout_s = key, timeout_s
        self.ctx = ssl.create_default_context(cafile=tls_ca) if tls_ca else None

    def post(self, service: str, body: dict) -> dict:
        """One gateway call; an error answer is raised as `CohortError` (code 0: its name
        and message are the server's)."""
        return self.request("POST", f"/v1/{service}", body)

    def request(self, method: str, path: str, body: Optional[dict] = None) -> dict:
        """One JSON call of `method` on `path`; errors raised as in `post`."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.base}{path}", data=data,
                                     headers={"content-type": "application/json"}, method=method)
        if self.key:
            req.add_header("authorization", f"Bearer {self.key.secret.decode()}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s, context=self.ctx) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            try:
                err = json.loads(e.read())
                name, message = err["error"], err["message"]
            except (ValueError, KeyError):
                name, message = f"HTTP_{e.code}", e.reason
            raise CohortError(0, name, message, retryable=e.code == 503) from None

    # Live vector collections (`cohort serve --data-dir DIR`, docs/collections.md). Every
    # write returns once the server has made it durable.

    def create_collection(self, name: str, dim: int, metric: str = "l2", element: str = "f32",
                          attributes: Optional[Dict[str, str]] = None) -> dict:
        """Creates a collection: metric l2 | ip | cosine, element f32 | f16 | u8, attributes
        {name: "integer" | "float" | "keyword"}. Returns its description."""
        return self.request("PUT", f"/v1/collections/{name}", {
            "dim": dim, "metric": metric, "element": element, "attributes": attributes or {}})

    def list_collections(self) -> List[dict]:
        return self.request("GET", "/v1/collections")["collections"]

    def describe_collection(self, name: str) -> dict:
        """Settings and `count` (live points)."""
        return self.request("GET", f"/v1/collections/{name}")

    def drop_collection(self, name: str) -> None:
        self.request("DELETE", f"/v1/collections/{name}")

    def upsert(self, name: str, ids: Sequence[int], vectors: np.ndarray,
               attributes: Optional[Sequence[Optional[dict]]] = None) -> int:
        """Inserts or replaces points `ids[i]` with `vectors[i]` (and `attributes[i]`), as one
        batch applied whole or not at all. Returns the points written."""
        v = np.asarray(vectors, dtype=np.float64)
        v = v[None] if v.ndim == 1 else v
        if len(v) != len(ids) or (attributes is not None and len(attributes) != len(ids)):
            raise ValueError("ids, vectors and attributes differ in length")
        points = []
        for i, (pid, row) in enumerate(zip(ids, v)):
            p = {"id": int(pid), "vector": row.tolist()}
            if attributes is not None and attributes[i]:
                p["attributes"] = attributes[i]
            points.append(p)
        return self.request("POST", f"/v1/collections/{name}/upsert", {"points": points})["upserted"]

    def delete(self, name: str, ids: Optional[Sequence[int]] = None,
               filter: Optional[dict] = None) -> int:
        """Deletes the points with these ids, or those matching `filter` (one of the two).
        Returns the points deleted."""
        if (ids is None) == (filter is None):
            raise ValueError("give ids or filter")
        body = {"ids": [int(i) for i in ids]} if ids is not None else {"filter": filter}
        return self.request("POST", f"/v1/collections/{name}/delete", body)["deleted"]

    def get_points(self, name: str, ids: Sequence[int]) -> List[dict]:
        """The points present among `ids`: {"id", "vector", "attributes"} each."""
        return self.request("POST", f"/v1/collections/{name}/get",
                            {"ids": [int(i) for i in ids]})["points"]

    def search(self, name: str, vectors: np.ndarray, k: int = 10, filter: Optional[dict] = None,
               nprobe: Optional[int] = None, with_attributes: bool = False) -> List[List[dict]]:
        """The k nearest live points of each query vector ([D] or [N, D]), nearest first:
        per query a list of {"id", "distance"[, "attributes"]}. `filter` is the server's
        filter expression, e.g. {"all": [{"eq": ["color", "red"]}, {"range": ["price",
        {"lt": 10}]}]}."""
        q = np.asarray(vectors, dtype=np.float64)
        q = q[None] if q.ndim == 1 else q
        body: dict = {"vectors": q.tolist(), "k": k, "with_attributes": with_attributes}
        if filter is not None:
            body["filter"] = filter
        if nprobe is not None:
            body["nprobe"] = nprobe
        return self.request("POST", f"/v1/collections/{name}/search", body)["results"]

    def get(self, path: str) -> bytes:
        with urllib.request.urlopen(f"{self.base}{path}", timeout=self.timeout_s, context=self.ctx) as r:
            return r.read()

    def call_many(self, service: int, payloads: Sequence[bytes], timeout_us: int = 0) -> List[Answer]:
        raise NotImplementedError("the gateway speaks JSON: use echo, spin, knn, lenet or post")

    def echo(self, data: bytes) -> bytes:
        return self.post("echo", {"data": data.decode()})["data"].encode()

    def spin(self, spin_us: int, data: bytes = b"") -> bytes:
        return self.post("spin", {"spin_us": spin_us, "data": data.decode()})["data"].encode()

    def knn(self, queries: np.ndarray, k: int = 10, nprobe: int = 0) -> Tuple[np.ndarray, np.ndarray]:
        q = np.asarray(queries, dtype=np.float64)
        q = q[None] if q.ndim == 1 else q
        ids = np.full((len(q), k), -1, dtype=np.int64)
        dist = np.full((len(q), k), np.inf, dtype=np.float32)
        for i, row in enumerate(q):
            a = self.post("knn", {"vector": row.tolist(), "k": k, "nprobe": nprobe})
            ids[i, : len(a["ids"])] = a["ids"]
            dist[i, : len(a["distances"])] = a["distances"]
        return ids, dist

    def search_many(self, queries: np.ndarray, k: int = 10, nprobe: int = 0,
                    per_request: int = 0) -> Tuple[np.ndarray, np.ndarray]:
        """The JSON gateway takes one query a request: `knn`."""
        return self.knn(queries, k, nprobe)

    def lenet(self, images: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        rows = sv.lenet_images(images)
        digits = np.empty(len(rows), dtype=np.int64)
        scores = np.empty((len(rows), 10), dtype=np.float32)
        for i, r in enumerate(rows):
            a = self.post("lenet", {"image": r.tolist()})
            digits[i], scores[i] = a["digit"], a["scores"]
        return digits, scores
