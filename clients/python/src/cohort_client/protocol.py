"""Cohort wire protocol v1 (docs/protocol.md): the 24-byte frame header, error and GOAWAY
payloads, and signed frames. Everything little-endian."""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
import time
from dataclasses import dataclass
from typing import List, Optional

MAGIC = 0x4843  # the bytes "C", "H"
VERSION = 1
HEADER = struct.Struct("<HBBHHQII")
HEADER_LEN = HEADER.size  # 24
MAX_PAYLOAD = 65_483

REQUEST, RESPONSE, ERROR, GOAWAY = 1, 2, 3, 4
FLAG_AUTH = 0x0001
KEY_ID_LEN, TAG_LEN = 16, 16
AUTH_TRAILER_LEN = KEY_ID_LEN + 8 + 8 + TAG_LEN

ERROR_NAMES = {
    1: "BAD_REQUEST",
    2: "UNKNOWN_SERVICE",
    3: "TOO_LARGE",
    4: "OVERLOADED",
    5: "TIMEOUT",
    6: "UNAVAILABLE",
    7: "INTERNAL",
    8: "TRUNCATED",
    9: "UNAUTHORIZED",
    10: "FORBIDDEN",
    11: "NOT_FOUND",
}


class ProtocolError(Exception):
    """Bytes that are not a Cohort v1 frame."""


class CohortError(Exception):
    """An error answer: `code` (protocol number, 0 for an HTTP-only error), `name` (e.g.
    "OVERLOADED") and the server's message. `retryable` is true when the request was not
    executed and may be sent again (OVERLOADED, UNAVAILABLE, or never read after GOAWAY)."""

    def __init__(self, code: int, name: str, message: str, retryable: bool = False):
        super().__init__(f"{name}: {message}")
        self.code, self.name, self.message, self.retryable = code, name, message, retryable

    @classmethod
    def from_payload(cls, payload: bytes) -> "CohortError":
        if len(payload) < 4:
            raise ProtocolError("an error payload shorter than 4 bytes")
        code, n = struct.unpack_from("<HH", payload)
        message = payload[4 : 4 + n].decode("utf-8", "replace")
        name = ERROR_NAMES.get(code, f"ERROR_{code}")
        return cls(code, name, message, retryable=name in ("OVERLOADED", "UNAVAILABLE"))


class NotSent(CohortError):
    """The server sent GOAWAY without listing this request: it never read it, so it was not
    executed (safe to send to another server)."""

    def __init__(self, request_id: int):
        super().__init__(0, "NOT_SENT", f"request {request_id} was not read before GOAWAY", True)


@dataclass(frozen=True)
class Header:
    kind: int
    service: int
    request_id: int
    payload_len: int
    timeout_us: int = 0
    flags: int = 0

    def encode(self) -> bytes:
        return HEADER.pack(
            MAGIC, VERSION, self.kind, self.service, self.flags, self.request_id,
            self.payload_len, self.timeout_us,
        )

    @classmethod
    def decode(cls, b: bytes) -> "Header":
        if len(b) < HEADER_LEN:
            raise ProtocolError(f"a header is {HEADER_LEN} bytes, got {len(b)}")
        magic, version, kind, service, flags, rid, plen, timeout = HEADER.unpack_from(b)
        if magic != MAGIC or version != VERSION:
            raise ProtocolError("not a Cohort v1 frame")
        if kind not in (REQUEST, RESPONSE, ERROR, GOAWAY):
            raise ProtocolError(f"unknown frame kind {kind}")
        if plen > MAX_PAYLOAD:
            raise ProtocolError(f"payload length {plen} over {MAX_PAYLOAD}")
        return cls(kind, service, rid, plen, timeout, flags)


@dataclass(frozen=True)
class Key:
    """An API key (`cohort serve --auth-keys`): frames are signed with it, the secret never
    travels (HTTP sends it as the bearer token: use TLS or loopback there)."""

    id: str
    secret: bytes

    def __post_init__(self) -> None:
        if not (1 <= len(self.id) <= KEY_ID_LEN) or not all(33 <= ord(c) <= 126 for c in self.id):
            raise ValueError("a key id is 1 to 16 printable ASCII characters")
        if len(self.secret) < 16:
            raise ValueError("a secret is at least 16 bytes")


class Nonces:
    """A nonce per request: a counter from a random start (the server refuses a repeat)."""

    def __init__(self) -> None:
        self.next = int.from_bytes(os.urandom(8), "little") >> 1

    def take(self) -> int:
        self.next = (self.next + 1) % (1 << 64)
        return self.next


def encode_request(
    service: int,
    request_id: int,
    payload: bytes,
    timeout_us: int = 0,
    key: Optional[Key] = None,
    nonce: int = 0,
) -> bytes:
    """A request frame; signed (flag 0x0001 and the 48-byte trailer) when `key` is given."""
    if key is None:
        if len(payload) > MAX_PAYLOAD:
            raise ValueError(f"payload of {len(payload)} bytes over {MAX_PAYLOAD}")
        return Header(REQUEST, service, request_id, len(payload), timeout_us).encode() + payload
    if len(payload) + AUTH_TRAILER_LEN > MAX_PAYLOAD:
        raise ValueError(f"payload of {len(payload)} bytes and its signature over {MAX_PAYLOAD}")
    head = Header(
        REQUEST, service, request_id, len(payload) + AUTH_TRAILER_LEN, timeout_us, FLAG_AUTH
    ).encode()
    body = (
        payload
        + key.id.encode("ascii").ljust(KEY_ID_LEN, b"\0")
        + struct.pack("<QQ", int(time.time() * 1000), nonce)
    )
    tag = hmac.new(key.secret, head + body, hashlib.sha256).digest()[:TAG_LEN]
    return head + body + tag


def goaway_ids(payload: bytes) -> List[int]:
    """The request ids a GOAWAY says the server will still answer."""
    (n,) = struct.unpack_from("<I", payload)
    if len(payload) != 4 + 8 * n:
        raise ProtocolError("a GOAWAY whose length does not match its count")
    return list(struct.unpack_from(f"<{n}Q", payload, 4))
