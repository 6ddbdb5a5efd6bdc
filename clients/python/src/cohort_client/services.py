"""The services' payloads (docs/protocol.md, docs/lenet.md): numpy in, numpy out."""

from __future__ import annotations

import json
import struct
from typing import List, Optional, Sequence, Tuple, Union

import numpy as np

ECHO, SPIN, KNN, BANK, LENET, FACEVER, COLLECTIONS = 1, 2, 3, 4, 5, 6, 7
IDS = {"echo": ECHO, "spin": SPIN, "knn": KNN, "bank": BANK, "lenet": LENET, "facever": FACEVER,
       "collections": COLLECTIONS}

LENET_PIXELS = 28 * 28
# The most query vectors one knn request carries (docs/protocol.md).
KNN_MAX_QUERIES = 1024
# A payload's limit (protocol.MAX_PAYLOAD), repeated to keep this module free of the framing.
_MAX_PAYLOAD = 65_483
_NEIGHBOUR = np.dtype([("id", "<u4"), ("distance", "<f4")])
_HIT = np.dtype([("id", "<u8"), ("distance", "<f4")])


def spin_request(spin_us: int, data: bytes = b"") -> bytes:
    return struct.pack("<I", spin_us) + data


def knn_request(vector: np.ndarray, k: int = 10, nprobe: int = 0) -> bytes:
    """One query: f32 (any float array is converted) or u8 elements."""
    v = np.asarray(vector)
    if v.ndim != 1:
        raise ValueError(f"a query is one vector, got shape {v.shape}")
    if v.dtype == np.uint8:
        elem, body = 1, v.tobytes()
    else:
        elem, body = 0, v.astype("<f4", copy=False).tobytes()
    return struct.pack("<HHB3xI", k, nprobe, elem, v.shape[0]) + body


def knn_queries_request(queries: np.ndarray, k: int = 10, nprobe: int = 0) -> bytes:
    """Several queries ([N, D], 1 <= N <= 1024) in one request; one row is written exactly
    as `knn_request` writes it (query count 0)."""
    q = np.asarray(queries)
    q = q[None] if q.ndim == 1 else q
    if q.ndim != 2 or not 1 <= q.shape[0] <= KNN_MAX_QUERIES:
        raise ValueError(f"queries are [N, D] with 1 <= N <= {KNN_MAX_QUERIES}, got shape {q.shape}")
    if q.dtype == np.uint8:
        elem, body = 1, np.ascontiguousarray(q).tobytes()
    else:
        elem, body = 0, np.ascontiguousarray(q, dtype="<f4").tobytes()
    n = q.shape[0]
    return struct.pack("<HHBHxI", k, nprobe, elem, n if n > 1 else 0, q.shape[1]) + body


def knn_queries_answer(payload: bytes, n: int) -> list:
    """The answer to a request of `n` queries: one (ids, distances) per query, in order."""
    if n == 1:
        return [knn_answer(payload)]
    (count,) = struct.unpack_from("<I", payload)
    if count != n:
        raise ValueError(f"a knn answer of {count} queries to a request of {n}")
    out, at = [], 4
    for _ in range(n):
        (c,) = struct.unpack_from("<I", payload, at)
        out.append(knn_answer(payload[at : at + 4 + 8 * c]))
        at += 4 + 8 * c
    if at != len(payload):
        raise ValueError("a knn answer longer than its queries' answers")
    return out


def knn_queries_per_request(dim: int, k: int, u8: bool = False) -> int:
    """The most queries of `dim` elements one request may carry so that it and its answer of
    k neighbours a query fit a frame."""
    by_request = (_MAX_PAYLOAD - 12) // (dim * (1 if u8 else 4))
    by_answer = (_MAX_PAYLOAD - 4) // (4 + 8 * k)
    return max(1, min(KNN_MAX_QUERIES, by_request, by_answer))


def knn_answer(payload: bytes) -> Tuple[np.ndarray, np.ndarray]:
    """(ids u32, distances f32), nearest first."""
    (count,) = struct.unpack_from("<I", payload)
    if len(payload) != 4 + 8 * count:
        raise ValueError("a knn answer whose length does not match its count")
    n = np.frombuffer(payload, dtype=_NEIGHBOUR, count=count, offset=4)
    return n["id"].copy(), n["distance"].copy()


def lenet_images(images: np.ndarray) -> np.ndarray:
    """[N, 28, 28], [N, 1, 28, 28] or [N, 784] (or one image) as N rows of 784 u8 pixels;
    float images must already be in 0..=255."""
    a = np.asarray(images)
    if (a.ndim <= 2 and a.shape[-1:] == (LENET_PIXELS,)) or a.shape[-2:] == (28, 28):
        a = a.reshape(-1, LENET_PIXELS)
    else:
        raise ValueError(f"a LeNet image is 28x28 (or 784 pixels), got shape {a.shape}")
    if a.dtype != np.uint8:
        if a.size and (a.min() < 0 or a.max() > 255):
            raise ValueError("pixels must be in 0..=255")
        a = a.astype(np.uint8)
    return a


def lenet_answer(payload: bytes) -> Tuple[int, np.ndarray]:
    """(digit, the ten scores)."""
    if len(payload) != 41:
        raise ValueError(f"a lenet answer is 41 bytes, got {len(payload)}")
    return payload[0], np.frombuffer(payload, dtype="<f4", count=10, offset=1).copy()


def knn_join(answers: Sequence[Union[bytes, Exception]], k: int) -> Tuple[np.ndarray, np.ndarray]:
    """The rows' answers as ids int64 [N, k] (-1 where the probed lists held fewer than k)
    and distances float32 [N, k] (inf there); the first error answer is raised."""
    ids = np.full((len(answers), k), -1, dtype=np.int64)
    dist = np.full((len(answers), k), np.inf, dtype=np.float32)
    for i, a in enumerate(answers):
        if isinstance(a, Exception):
            raise a
        got_ids, got_d = knn_answer(a)
        ids[i, : len(got_ids)], dist[i, : len(got_d)] = got_ids, got_d
    return ids, dist


def knn_queries_join(chunks: Sequence[Union[bytes, Exception]], sizes: Sequence[int], k: int) -> Tuple[np.ndarray, np.ndarray]:
    """`knn_join` for requests of several queries: chunk i answers `sizes[i]` queries."""
    rows = [r for a, n in zip(chunks, sizes) for r in _raise_or(a, n)]
    ids = np.full((len(rows), k), -1, dtype=np.int64)
    dist = np.full((len(rows), k), np.inf, dtype=np.float32)
    for i, (got_ids, got_d) in enumerate(rows):
        ids[i, : len(got_ids)], dist[i, : len(got_d)] = got_ids, got_d
    return ids, dist


def _raise_or(a: Union[bytes, Exception], n: int) -> list:
    if isinstance(a, Exception):
        raise a
    return knn_queries_answer(a, n)


def lenet_join(answers: Sequence[Union[bytes, Exception]]) -> Tuple[np.ndarray, np.ndarray]:
    """The rows' answers as digits int64 [N] and scores float32 [N, 10]; the first error
    answer is raised."""
    digits = np.empty(len(answers), dtype=np.int64)
    scores = np.empty((len(answers), 10), dtype=np.float32)
    for i, a in enumerate(answers):
        if isinstance(a, Exception):
            raise a
        digits[i], scores[i] = lenet_answer(a)
    return digits, scores


def _collection_head(op: int, name: str) -> bytes:
    n = name.encode()
    if not 1 <= len(n) <= 64:
        raise ValueError(f"collection name of {len(n)} bytes (1..=64)")
    return struct.pack("<BxH", op, len(n)) + n


def collection_search_request(name: str, queries: np.ndarray, k: int = 10, nprobe: int = 0,
                              filter: Optional[dict] = None) -> bytes:
    """A collections search frame (service 7, op 1; docs/protocol.md): [N, D] or [D] f32
    queries, the filter as JSON text."""
    q = np.asarray(queries)
    q = q[None] if q.ndim == 1 else q
    if q.ndim != 2 or not 1 <= q.shape[0] <= KNN_MAX_QUERIES:
        raise ValueError(f"queries are [N, D] with 1 <= N <= {KNN_MAX_QUERIES}, got shape {q.shape}")
    f = b"" if filter is None else json.dumps(filter, separators=(",", ":")).encode()
    return (_collection_head(1, name)
            + struct.pack("<HHHxxII", k, nprobe, q.shape[0], q.shape[1], len(f)) + f
            + np.ascontiguousarray(q, dtype="<f4").tobytes())


def collection_upsert_request(name: str, ids: Sequence[int], vectors: np.ndarray,
                              attributes: Optional[Sequence[Optional[dict]]] = None) -> bytes:
    """A collections upsert frame (service 7, op 2): point `ids[i]` is `vectors[i]` with
    `attributes[i]` (a dict, sent as JSON text; None: no attributes)."""
    v = np.asarray(vectors)
    v = v[None] if v.ndim == 1 else v
    if len(v) != len(ids) or (attributes is not None and len(attributes) != len(ids)):
        raise ValueError("ids, vectors and attributes differ in length")
    v = np.ascontiguousarray(v, dtype="<f4")
    parts = [_collection_head(2, name), struct.pack("<II", len(ids), v.shape[1])]
    for i, pid in enumerate(ids):
        a = attributes[i] if attributes is not None else None
        t = b"" if not a else json.dumps(a, separators=(",", ":")).encode()
        parts += [struct.pack("<Q", int(pid)), v[i].tobytes(), struct.pack("<I", len(t)), t]
    return b"".join(parts)


def collection_ids_request(op: int, name: str, ids: Sequence[int]) -> bytes:
    """A collections delete (op 3) or get (op 4) frame: `count u32 | count x id u64`."""
    if len(ids) > 10_000:
        raise ValueError(f"{len(ids)} ids, over the limit of 10000")
    return (_collection_head(op, name) + struct.pack("<I", len(ids))
            + np.asarray([int(i) for i in ids], dtype="<u8").tobytes())


def collection_delete_request(name: str, ids: Sequence[int]) -> bytes:
    return collection_ids_request(3, name, ids)


def collection_get_request(name: str, ids: Sequence[int]) -> bytes:
    return collection_ids_request(4, name, ids)


def collection_delete_answer(payload: bytes) -> int:
    if len(payload) != 4:
        raise ValueError(f"a delete answer of {len(payload)} bytes")
    return struct.unpack("<I", payload)[0]


def collection_get_answer(payload: bytes) -> List[dict]:
    """The points found, {"id", "vector", "attributes"} each (what HttpClient.get_points
    gives; attributes {} when the point has none)."""
    count, dim = struct.unpack_from("<II", payload)
    out, at = [], 8
    for _ in range(count):
        (pid,) = struct.unpack_from("<Q", payload, at)
        at += 8
        v = np.frombuffer(payload, dtype="<f4", count=dim, offset=at)
        at += 4 * dim
        (n,) = struct.unpack_from("<I", payload, at)
        at += 4
        attrs = json.loads(payload[at:at + n]) if n else {}
        at += n
        out.append({"id": int(pid), "vector": [float(x) for x in v], "attributes": attrs})
    if at != len(payload):
        raise ValueError(f"{len(payload) - at} bytes after a collections get answer")
    return out


def collection_search_answer(payload: bytes) -> List[List[dict]]:
    """Per query a list of {"id", "distance"}, nearest first (what HttpClient.search gives)."""
    (n,) = struct.unpack_from("<I", payload)
    out, at = [], 4
    for _ in range(n):
        (count,) = struct.unpack_from("<I", payload, at)
        at += 4
        hits = np.frombuffer(payload, dtype=_HIT, count=count, offset=at)
        at += count * _HIT.itemsize
        out.append([{"id": int(h["id"]), "distance": float(h["distance"])} for h in hits])
    if at != len(payload):
        raise ValueError(f"{len(payload) - at} bytes after a collections search answer")
    return out


def collection_upsert_answer(payload: bytes) -> int:
    if len(payload) != 4:
        raise ValueError(f"an upsert answer of {len(payload)} bytes")
    return struct.unpack("<I", payload)[0]
