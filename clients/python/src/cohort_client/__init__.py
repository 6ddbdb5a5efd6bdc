"""A client for Cohort servers (docs/protocol.md).

    import numpy as np
    from cohort_client import UdpClient
    with UdpClient("127.0.0.1", 7000) as c:
        ids, distances = c.knn(np.random.rand(5, 128).astype(np.float32), k=10)

Blocking: `UdpClient`, `TcpClient` (TLS, GOAWAY), `HttpClient` (the JSON gateway).
asyncio: `AsyncUdpClient`, `AsyncTcpClient`. Errors are `CohortError` (with the protocol's
code and name); `NotSent` marks a request a draining server never read.
"""

from .aio import AsyncTcpClient, AsyncUdpClient
from .protocol import CohortError, Key, NotSent, ProtocolError
from .services import ECHO, FACEVER, IDS, KNN, LENET, SPIN
from .sync import HttpClient, TcpClient, UdpClient

__all__ = [
    "AsyncTcpClient", "AsyncUdpClient", "CohortError", "HttpClient", "Key", "NotSent",
    "ProtocolError", "TcpClient", "UdpClient", "ECHO", "SPIN", "KNN", "LENET", "FACEVER", "IDS",
]
