"""Cohort's gRPC service for collections, `cohort.collections.v1.Collections`
(crates/collections-grpc/proto/collections.proto, docs/collections.md "gRPC"), against
`cohort serve --data-dir DIR --grpc ADDR`. Optional: it needs grpcio and protobuf
(`pip install 'cohort-client[grpc]'`); the rest of the package does not.

The messages are built at run time from the service's descriptor set shipped beside this
file (`collections.desc`, written by gen_collections_desc.sh), so no generated code has to
match the installed protobuf runtime.

    from cohort_client.collections_grpc import GrpcCollections
    c = GrpcCollections("127.0.0.1:8001")
    c.create_collection("items", dim=4, attributes={"color": "keyword"})
    c.upsert("items", ids=[7], vectors=[[1, 0, 0, 0]], attributes=[{"color": "red"}])
    c.search("items", [[1, 0, 0, 0]], k=3, filter={"eq": ["color", "red"]})

Errors are `CohortError`s named by the status message's code name (`BAD_REQUEST`,
`NOT_FOUND`, `CONFLICT`, `TOO_LARGE`, ...); `retryable` for OVERLOADED and UNAVAILABLE.
"""

from importlib import resources
from typing import Any, Dict, List, Optional, Sequence

import grpc
import numpy as np
from google.protobuf import descriptor_pb2, message_factory

from .protocol import CohortError

_PACKAGE = "cohort.collections.v1"
_SERVICE = f"/{_PACKAGE}.Collections/"


def _messages() -> Dict[str, Any]:
    data = resources.files(__package__).joinpath("collections.desc").read_bytes()
    files = descriptor_pb2.FileDescriptorSet.FromString(data).file
    classes = message_factory.GetMessages(list(files))
    return {name[len(_PACKAGE) + 1:]: cls for name, cls in classes.items() if name.startswith(_PACKAGE)}


_M = _messages()
_METRICS = {"l2": 1, "ip": 2, "cosine": 3}
_ELEMENTS = {"f32": 1, "f16": 2, "u8": 3}
_TYPES = {"integer": 1, "float": 2, "keyword": 3}
_NAMES = {v: k for k, v in {**_METRICS}.items()}


def _value(v: Any, into: Any) -> None:
    """A Python value into an AttributeValue message: int, float or str."""
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise TypeError(f"an attribute value is an int, a float or a str, not {v!r}")
    if isinstance(v, int):
        into.int_value = v
    elif isinstance(v, float):
        into.double_value = v
    else:
        into.string_value = v


def _unvalue(m: Any) -> Any:
    kind = m.WhichOneof("kind")
    return None if kind is None else getattr(m, kind)


def _filter(f: Dict[str, Any], into: Any) -> None:
    """The JSON filter grammar (docs/collections.md, "Filters") as a Filter message."""
    if not isinstance(f, dict) or len(f) != 1:
        raise ValueError("a filter is a dict with one key: eq, in, range, all, any or not")
    (op, arg), = f.items()
    if op == "eq":
        into.eq.field = arg[0]
        _value(arg[1], into.eq.value)
    elif op == "in":
        into.SetInParent()
        getattr(into, "in").field = arg[0]
        for v in arg[1]:
            _value(v, getattr(into, "in").values.add())
    elif op == "range":
        into.range.field = arg[0]
        for bound, v in arg[1].items():
            if bound not in ("gt", "gte", "lt", "lte"):
                raise ValueError(f"range bound {bound!r}: gt, gte, lt or lte")
            _value(v, getattr(into.range, bound))
    elif op in ("all", "any"):
        lst = getattr(into, op)
        lst.SetInParent()
        for sub in arg:
            _filter(sub, lst.filters.add())
    elif op == "not":
        _filter(arg, getattr(into, "not"))
    else:
        raise ValueError(f"unknown filter operator {op!r}")


def _info(m: Any) -> Dict[str, Any]:
    types = {v: k for k, v in _TYPES.items()}
    elements = {v: k for k, v in _ELEMENTS.items()}
    return {"name": m.name, "dim": m.dim, "metric": _NAMES.get(m.metric, str(m.metric)),
            "element": elements.get(m.element, str(m.element)),
            "attributes": {k: types.get(v, str(v)) for k, v in m.attributes.items()},
            "count": m.count}


def _attrs(m: Any) -> Dict[str, Any]:
    return {k: _unvalue(v) for k, v in m.items()}


class GrpcCollections:
    """A blocking client of one channel. `key`: the bearer secret when the server has
    `--auth-keys`; `timeout`: each call's deadline in seconds (sent as grpc-timeout)."""

    def __init__(self, target: str, key: Optional[str] = None, timeout: Optional[float] = 30.0,
                 max_message: int = 64 << 20):
        opts = [("grpc.max_send_message_length", max_message),
                ("grpc.max_receive_message_length", max_message)]
        self.channel = grpc.insecure_channel(target, options=opts)
        self.metadata = [("authorization", f"Bearer {key}")] if key else None
        self.timeout = timeout

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> "GrpcCollections":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _call(self, method: str, request: Any, answer: str) -> Any:
        rpc = self.channel.unary_unary(_SERVICE + method, request_serializer=lambda m: m.SerializeToString(),
                                       response_deserializer=_M[answer].FromString)
        try:
            return rpc(request, timeout=self.timeout, metadata=self.metadata)
        except grpc.RpcError as e:
            text = e.details() or ""
            name, _, message = text.partition(": ")
            if not name.replace("_", "").isupper():
                name, message = e.code().name, text
            retryable = name in ("OVERLOADED", "UNAVAILABLE")
            raise CohortError(0, name, message, retryable) from None

    def create_collection(self, name: str, dim: int, metric: str = "l2", element: str = "f32",
                          attributes: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
        r = _M["CreateCollectionRequest"](name=name, dim=dim, metric=_METRICS[metric],
                                          element=_ELEMENTS[element])
        for k, t in (attributes or {}).items():
            r.attributes[k] = _TYPES[t]
        return _info(self._call("CreateCollection", r, "CollectionInfo"))

    def list_collections(self) -> List[Dict[str, Any]]:
        a = self._call("ListCollections", _M["ListCollectionsRequest"](), "ListCollectionsResponse")
        return [_info(c) for c in a.collections]

    def describe_collection(self, name: str) -> Dict[str, Any]:
        return _info(self._call("DescribeCollection", _M["DescribeCollectionRequest"](name=name),
                                "CollectionInfo"))

    def drop_collection(self, name: str) -> None:
        self._call("DropCollection", _M["DropCollectionRequest"](name=name), "DropCollectionResponse")

    def upsert(self, name: str, ids: Sequence[int], vectors: Any,
               attributes: Optional[Sequence[Optional[Dict[str, Any]]]] = None) -> int:
        """Points `ids[i]` with `vectors[i]` (and `attributes[i]`); returns once durable."""
        vectors = np.asarray(vectors, dtype=np.float32).reshape(len(ids), -1)
        r = _M["UpsertRequest"](collection=name)
        for i, pid in enumerate(ids):
            p = r.points.add(id=int(pid))
            p.vector.extend(vectors[i].tolist())
            for k, v in ((attributes[i] or {}) if attributes else {}).items():
                _value(v, p.attributes[k])
        return self._call("Upsert", r, "UpsertResponse").upserted

    def delete(self, name: str, ids: Optional[Sequence[int]] = None,
               filter: Optional[Dict[str, Any]] = None) -> int:
        r = _M["DeleteRequest"](collection=name)
        if (ids is None) == (filter is None):
            raise ValueError("delete takes either ids or filter")
        if ids is not None:
            r.ids.SetInParent()
            r.ids.ids.extend(int(i) for i in ids)
        else:
            _filter(filter, r.filter)
        return self._call("Delete", r, "DeleteResponse").deleted

    def get_points(self, name: str, ids: Sequence[int]) -> List[Dict[str, Any]]:
        a = self._call("Get", _M["GetRequest"](collection=name, ids=[int(i) for i in ids]), "GetResponse")
        return [{"id": p.id, "vector": list(p.vector), "attributes": _attrs(p.attributes)} for p in a.points]

    def count(self, name: str) -> int:
        return self._call("Count", _M["CountRequest"](collection=name), "CountResponse").count

    def search(self, name: str, vectors: Any, k: int = 10, nprobe: Optional[int] = None,
               filter: Optional[Dict[str, Any]] = None,
               with_attributes: bool = False) -> List[List[Dict[str, Any]]]:
        """One list of hits per query vector, nearest first."""
        q = np.asarray(vectors, dtype=np.float32)
        q = q.reshape(1, -1) if q.ndim == 1 else q
        r = _M["SearchRequest"](collection=name, k=k, with_attributes=with_attributes)
        if nprobe is not None:
            r.nprobe = nprobe
        for v in q:
            r.vectors.add().values.extend(v.tolist())
        if filter is not None:
            _filter(filter, r.filter)
        a = self._call("Search", r, "SearchResponse")
        out = []
        for hits in a.results:
            row = []
            for h in hits.hits:
                d = {"id": h.id, "distance": h.distance}
                if with_attributes:
                    d["attributes"] = _attrs(h.attributes)
                row.append(d)
            out.append(row)
        return out
