"""asyncio clients: native frames over TCP (TLS, signed, pipelined: every call is in flight
at once up to `window`) and UDP, with the same service methods as the blocking ones."""

from __future__ import annotations

import asyncio
import ssl
import time
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import services as sv
from .protocol import ERROR, GOAWAY, HEADER_LEN, RESPONSE, CohortError, Header, Key, Nonces, NotSent, encode_request, goaway_ids
from .sync import Answer


class _AsyncServices:
    async def call_many(self, service: int, payloads: Sequence[bytes], timeout_us: int = 0) -> List[Answer]:
        raise NotImplementedError

    async def call(self, service: int, payload: bytes, timeout_us: int = 0) -> bytes:
        a = (await self.call_many(service, [payload], timeout_us))[0]
        if isinstance(a, CohortError):
            raise a
        return a

    async def echo(self, data: bytes) -> bytes:
        return await self.call(sv.ECHO, data)

    async def knn(self, queries: np.ndarray, k: int = 10, nprobe: int = 0) -> Tuple[np.ndarray, np.ndarray]:
        q = np.asarray(queries)
        q = q[None] if q.ndim == 1 else q
        return sv.knn_join(await self.call_many(sv.KNN, [sv.knn_request(r, k, nprobe) for r in q]), k)

    async def search_many(self, queries: np.ndarray, k: int = 10, nprobe: int = 0,
                          per_request: int = 0) -> Tuple[np.ndarray, np.ndarray]:
        """Several queries a request (the sync client's `search_many`)."""
        q = np.asarray(queries)
        q = q[None] if q.ndim == 1 else q
        n = per_request or sv.knn_queries_per_request(q.shape[1], k, q.dtype == np.uint8)
        chunks = [q[i : i + n] for i in range(0, len(q), n)]
        answers = await self.call_many(sv.KNN, [sv.knn_queries_request(c, k, nprobe) for c in chunks])
        return sv.knn_queries_join(answers, [len(c) for c in chunks], k)

    async def lenet(self, images: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        rows = sv.lenet_images(images)
        return sv.lenet_join(await self.call_many(sv.LENET, [r.tobytes() for r in rows]))


class _AsyncFrames(_AsyncServices):
    def __init__(self, key: Optional[Key], window: int):
        self.key = key
        self._window = asyncio.Semaphore(window)
        self._next_id = int(time.time_ns()) & 0xFFFF_FFFF_0000_0000
        self._nonces = Nonces()
        self._waiting: Dict[int, asyncio.Future] = {}

    def _frame(self, service: int, payload: bytes, timeout_us: int) -> Tuple[int, bytes]:
        self._next_id = (self._next_id + 1) % (1 << 64)
        nonce = self._nonces.take() if self.key else 0
        return self._next_id, encode_request(service, self._next_id, payload, timeout_us, self.key, nonce)

    def _settle(self, h: Header, body: bytes) -> None:
        f = self._waiting.pop(h.request_id, None)
        if f is not None and not f.done():
            f.set_result(CohortError.from_payload(body) if h.kind == ERROR else body)

    def _send(self, frame: bytes) -> None:
        raise NotImplementedError

    async def _one(self, service: int, payload: bytes, timeout_us: int) -> Answer:
        async with self._window:
            rid, frame = self._frame(service, payload, timeout_us)
            fut = asyncio.get_running_loop().create_future()
            self._waiting[rid] = fut
            self._send(frame)
            return await fut

    async def call_many(self, service: int, payloads: Sequence[bytes], timeout_us: int = 0) -> List[Answer]:
        return list(await asyncio.gather(*(self._one(service, p, timeout_us) for p in payloads)))


class AsyncTcpClient(_AsyncFrames):
    """`await AsyncTcpClient.connect(host, port)`; one reader task settles every answer. After
    GOAWAY the listed requests are still answered and the others settle as `NotSent`."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, key: Optional[Key], window: int):
        super().__init__(key, window)
        self.reader, self.writer = reader, writer
        self.goaway: Optional[List[int]] = None
        self._task = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def connect(cls, host: str, port: int, key: Optional[Key] = None, window: int = 512,
                      tls_ca: Optional[str] = None, server_name: Optional[str] = None) -> "AsyncTcpClient":
        ctx = ssl.create_default_context(cafile=tls_ca) if tls_ca else None
        r, w = await asyncio.open_connection(host, port, ssl=ctx,
                                             server_hostname=(server_name or host) if ctx else None)
        return cls(r, w, key, window)

    def _send(self, frame: bytes) -> None:
        if self.goaway is not None or self.writer.is_closing():
            raise CohortError(6, "UNAVAILABLE", "the server sent GOAWAY on this connection", True)
        self.writer.write(frame)

    async def _read(self) -> None:
        try:
            while True:
                head = await self.reader.readexactly(HEADER_LEN)
                h = Header.decode(head)
                body = await self.reader.readexactly(h.payload_len)
                if h.kind == GOAWAY:
                    self.goaway = goaway_ids(body)
                elif h.kind in (RESPONSE, ERROR):
                    self._settle(h, body)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            for rid, f in list(self._waiting.items()):
                if not f.done():
                    f.set_result(NotSent(rid))
            self._waiting.clear()

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except ConnectionError:
            pass
        self._task.cancel()


class _Datagrams(asyncio.DatagramProtocol):
    def __init__(self, client: "AsyncUdpClient"):
        self.client = client

    def datagram_received(self, data: bytes, addr: object) -> None:
        try:
            h = Header.decode(data)
        except Exception:
            return
        self.client._settle(h, data[HEADER_LEN : HEADER_LEN + h.payload_len])


class AsyncUdpClient(_AsyncFrames):
    """`await AsyncUdpClient.connect(host, port)`; a request unanswered within `timeout_s`
    raises `TimeoutError` (datagrams can be lost)."""

    def __init__(self, key: Optional[Key], window: int, timeout_s: float):
        super().__init__(key, window)
        self.timeout_s = timeout_s
        self.transport: Optional[asyncio.DatagramTransport] = None

    @classmethod
    async def connect(cls, host: str, port: int, key: Optional[Key] = None, window: int = 64,
                      timeout_s: float = 5.0) -> "AsyncUdpClient":
        c = cls(key, window, timeout_s)
        loop = asyncio.get_running_loop()
        c.transport, _ = await loop.create_datagram_endpoint(lambda: _Datagrams(c), remote_addr=(host, port))
        return c

    def _send(self, frame: bytes) -> None:
        assert self.transport is not None
        self.transport.sendto(frame)

    async def _one(self, service: int, payload: bytes, timeout_us: int) -> Answer:
        return await asyncio.wait_for(super()._one(service, payload, timeout_us), self.timeout_s)

    async def close(self) -> None:
        if self.transport:
            self.transport.close()
