"""The Python client against a real `cohort serve` on loopback (COHORT_BIN names the binary;
scripts/test.sh passes the one it built): every transport gives the same answers, k-NN
answers equal an exact numpy search when every list is probed, bad input gets its error,
signed frames and TLS work and unsigned ones are refused, and a server stopped mid-load
answers every request exactly once or says it never read it."""

import asyncio
import os
import signal
import struct
import subprocess
import tempfile
import threading
import unittest
from pathlib import Path

import numpy as np

from cohort_client import (AsyncTcpClient, AsyncUdpClient, CohortError, HttpClient, Key, NotSent,
                           TcpClient, UdpClient, services)

ROOT = Path(__file__).resolve().parents[3]
BIN = os.environ.get("COHORT_BIN", str(ROOT / "target" / "release" / "cohort"))
TLS = ROOT / "crates" / "cli" / "tests" / "data" / "tls"
SECRET = b"a secret of the python tests"


def cohort(*args: str) -> None:
    subprocess.run([BIN, *args, "--log-level", "warn"], check=True, stdout=subprocess.DEVNULL)


def build_index(d: Path, n: int, dim: int, queries: int, nlist: int) -> None:
    """Synthetic data under d/data and its IVF index at d/ix.index."""
    cohort("data", "synth", "--n", str(n), "--dim", str(dim), "--queries", str(queries),
           "--gt-k", "5", "--out", str(d / "data"))
    cohort("index", "build", "--base", str(d / "data" / "base.fvecs"), "--nlist", str(nlist),
           "--out", str(d / "ix.index"))


def read_fvecs(path: Path) -> np.ndarray:
    raw = np.fromfile(path, dtype="<i4")
    dim = raw[0]
    return raw.reshape(-1, dim + 1)[:, 1:].view("<f4")


class Server:
    """`cohort serve` on loopback ports; its addresses from its first line."""

    def __init__(self, *args: str):
        self.p = subprocess.Popen(
            [BIN, "serve", "--udp", "127.0.0.1:0", "--tcp", "127.0.0.1:0", "--http", "127.0.0.1:0",
             "--log-level", "warn", *args],
            stdout=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()
        assert line.startswith("listening "), line
        self.addr = {k: int(v.rsplit(":", 1)[1]) for k, v in (p.split("=") for p in line.split()[1:])}

    def stop(self) -> int:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        code = self.p.wait(timeout=30)
        self.p.stdout.close()
        return code


class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = tempfile.TemporaryDirectory()
        d = Path(cls.tmp.name)
        build_index(d, n=3000, dim=16, queries=25, nlist=16)
        cls.base = read_fvecs(d / "data" / "base.fvecs")
        cls.queries = read_fvecs(d / "data" / "query.fvecs")
        cls.server = Server("--service", "echo,spin,knn:cpu,lenet", "--index", str(d / "ix.index"),
                            "--workers", "2")
        a = cls.server.addr
        cls.udp = UdpClient("127.0.0.1", a["udp"])
        cls.tcp = TcpClient("127.0.0.1", a["tcp"])
        cls.http = HttpClient(f"http://127.0.0.1:{a['http']}")

    @classmethod
    def tearDownClass(cls) -> None:
        cls.udp.close()
        cls.tcp.close()
        assert cls.server.stop() == 0
        cls.tmp.cleanup()

    def test_echo_and_spin_on_every_transport(self) -> None:
        for c in (self.udp, self.tcp, self.http):
            self.assertEqual(c.echo(b"hello"), b"hello")
            self.assertEqual(c.spin(5, b"after"), b"after")

    def test_knn_equals_exact_search_when_every_list_is_probed(self) -> None:
        q = self.queries[:20]
        ids, dist = self.udp.knn(q, k=5, nprobe=16)
        d2 = ((q[:, None, :] - self.base[None, :, :]) ** 2).sum(-1)
        exact = np.argsort(d2, axis=1, kind="stable")[:, :5]
        np.testing.assert_array_equal(ids, exact)
        np.testing.assert_allclose(dist, np.take_along_axis(d2, exact, 1), rtol=1e-4)
        for c in (self.tcp, self.http):
            other_ids, other_dist = c.knn(q, k=5, nprobe=16)
            np.testing.assert_array_equal(other_ids, ids)
            np.testing.assert_allclose(other_dist, dist, rtol=1e-6)
        u8_ids, _ = self.tcp.knn(np.clip(q, 0, 255).astype(np.uint8), k=3)
        self.assertEqual(u8_ids.shape, (20, 3))

    def test_search_many_answers_as_one_query_a_request(self) -> None:
        q = self.queries[:50]
        ids, dist = self.udp.knn(q, k=5, nprobe=16)
        for c in (self.udp, self.tcp, self.http):
            for per in (0, 1, 7, 50):
                got_ids, got_dist = c.search_many(q, k=5, nprobe=16, per_request=per)
                np.testing.assert_array_equal(got_ids, ids)
                np.testing.assert_allclose(got_dist, dist, rtol=1e-6)
        # One frame of several queries, of which one is bad: the request's one error.
        bad = np.concatenate([q[:3], np.full((1, q.shape[1]), np.nan, dtype=np.float32)])
        with self.assertRaises(CohortError) as e:
            self.tcp.search_many(bad, k=5)
        self.assertEqual(e.exception.name, "BAD_REQUEST")
        with self.assertRaises(ValueError):
            services.knn_queries_request(np.zeros((1025, 4), dtype=np.float32))

    def test_lenet_takes_every_image_shape_and_transports_agree(self) -> None:
        rng = np.random.default_rng(7)
        images = rng.integers(0, 256, size=(6, 28, 28), dtype=np.uint8)
        digits, scores = self.udp.lenet(images)
        self.assertEqual(scores.shape, (6, 10))
        np.testing.assert_array_equal(digits, scores.argmax(1))
        for shaped in (images.reshape(6, 1, 28, 28), images.reshape(6, 784)):
            np.testing.assert_array_equal(self.tcp.lenet(shaped)[0], digits)
        np.testing.assert_array_equal(self.http.lenet(images)[0], digits)
        with self.assertRaises(ValueError):
            self.udp.lenet(np.zeros((2, 27, 28), dtype=np.uint8))

    def test_bad_input_gets_bad_request(self) -> None:
        wrong_dim = np.zeros((1, 15), dtype=np.float32)
        for c in (self.udp, self.tcp):
            with self.assertRaises(CohortError) as e:
                c.knn(wrong_dim)
            self.assertEqual((e.exception.code, e.exception.name), (1, "BAD_REQUEST"))
        with self.assertRaises(CohortError) as e:
            self.http.knn(wrong_dim)
        self.assertEqual(e.exception.name, "BAD_REQUEST")
        with self.assertRaises(CohortError) as e:
            self.tcp.call(services.SPIN, b"\x01")  # shorter than spin's 4-byte count
        self.assertEqual(e.exception.name, "BAD_REQUEST")

    def test_pipelined_answers_are_matched_to_their_requests(self) -> None:
        payloads = [f"request {i}".encode() for i in range(3000)]
        self.assertEqual(self.tcp.call_many(services.ECHO, payloads), payloads)
        self.assertEqual(self.udp.call_many(services.ECHO, payloads[:500]), payloads[:500])

    def test_asyncio_clients(self) -> None:
        a = self.server.addr

        async def run() -> None:
            t = await AsyncTcpClient.connect("127.0.0.1", a["tcp"])
            u = await AsyncUdpClient.connect("127.0.0.1", a["udp"])
            payloads = [bytes([i % 256]) * (i % 50 + 1) for i in range(1000)]
            self.assertEqual(await t.call_many(services.ECHO, payloads), payloads)
            self.assertEqual(await u.echo(b"x"), b"x")
            ids, _ = await t.knn(self.queries[:4], k=4, nprobe=16)
            np.testing.assert_array_equal(ids, self.udp.knn(self.queries[:4], k=4, nprobe=16)[0])
            many, _ = await u.search_many(self.queries[:9], k=4, nprobe=16, per_request=4)
            np.testing.assert_array_equal(many, self.udp.knn(self.queries[:9], k=4, nprobe=16)[0])
            await t.close()
            await u.close()

        asyncio.run(run())


class CollectionsTest(unittest.TestCase):
    """The collection methods against `cohort serve --data-dir` (docs/collections.md)."""

    def test_create_upsert_search_delete_and_errors(self) -> None:
        with tempfile.TemporaryDirectory() as d:
            server = Server("--service", "echo", "--data-dir", d)
            try:
                c = HttpClient(f"http://127.0.0.1:{server.addr['http']}")
                c.create_collection("items", dim=4, attributes={"color": "keyword", "price": "float"})
                self.assertEqual(
                    c.upsert("items", ids=[7, 8, 9], vectors=np.eye(4)[:3],
                             attributes=[{"color": "red", "price": 9.5}, {"color": "blue"}, None]), 3)
                hits = c.search("items", np.eye(4)[0], k=10, with_attributes=True,
                                filter={"all": [{"eq": ["color", "red"]}, {"range": ["price", {"lt": 10}]}]})
                self.assertEqual(hits, [[{"id": 7, "distance": 0.0, "attributes": {"color": "red", "price": 9.5}}]])
                self.assertEqual([h["id"] for h in c.search("items", np.eye(4)[:2], k=1)[1]], [8])
                self.assertEqual(c.delete("items", filter={"eq": ["color", "blue"]}), 1)
                self.assertEqual(c.delete("items", ids=[9, 100]), 1)
                self.assertEqual(c.describe_collection("items")["count"], 1)
                self.assertEqual(c.get_points("items", [7, 8])[0]["vector"], [1.0, 0.0, 0.0, 0.0])
                self.assertEqual([x["name"] for x in c.list_collections()], ["items"])
                for call, name in [
                    (lambda: c.create_collection("items", dim=4), "CONFLICT"),
                    (lambda: c.upsert("items", ids=[1], vectors=np.ones((1, 3))), "BAD_REQUEST"),
                    (lambda: c.search("items", np.ones(4), filter={"eq": ["size", 1]}), "BAD_REQUEST"),
                    (lambda: c.search("nope", np.ones(4)), "NOT_FOUND"),
                ]:
                    with self.assertRaises(CohortError) as e:
                        call()
                    self.assertEqual(e.exception.name, name, e.exception)
                # The same calls over native frames on TCP (service 7), seen by REST and back.
                with TcpClient("127.0.0.1", server.addr["tcp"]) as t:
                    self.assertEqual(t.upsert("items", ids=[20, 21], vectors=np.eye(4)[2:4] * 2,
                                              attributes=[{"color": "red", "price": 1.0}, None]), 2)
                    self.assertEqual(c.get_points("items", [20])[0]["attributes"], {"color": "red", "price": 1.0})
                    hits = t.search("items", np.eye(4)[2:4] * 2, k=1)
                    self.assertEqual(hits, [[{"id": 20, "distance": 0.0}], [{"id": 21, "distance": 0.0}]])
                    self.assertEqual(t.search("items", np.eye(4)[2] * 2, k=3, filter={"eq": ["color", "red"]}),
                                     [[{"id": h["id"], "distance": h["distance"]} for h in
                                       c.search("items", np.eye(4)[2] * 2, k=3, filter={"eq": ["color", "red"]})[0]]])
                    for call, name in [
                        (lambda: t.upsert("items", ids=[1], vectors=np.ones((1, 3))), "BAD_REQUEST"),
                        (lambda: t.search("items", np.ones(4), filter={"eq": ["size", 1]}), "BAD_REQUEST"),
                        (lambda: t.search("nope", np.ones(4)), "NOT_FOUND"),
                    ]:
                        with self.assertRaises(CohortError) as e:
                            call()
                        self.assertEqual(e.exception.name, name, e.exception)
                    self.assertEqual(c.describe_collection("items")["count"], 3)
                    # Get and delete frames (ops 3, 4): REST and frames see each other's writes.
                    self.assertEqual(t.get_points("items", [21, 999, 20]),
                                     [{"id": 21, "vector": [0.0, 0.0, 0.0, 2.0], "attributes": {}},
                                      {"id": 20, "vector": [0.0, 0.0, 2.0, 0.0],
                                       "attributes": {"color": "red", "price": 1.0}}])
                    self.assertEqual(t.get_points("items", [7]), c.get_points("items", [7]))
                    self.assertEqual(t.delete("items", [20, 999]), 1)
                    self.assertEqual(c.get_points("items", [20]), [])
                    self.assertEqual(t.get_points("items", [20]), [])
                    self.assertEqual(c.delete("items", ids=[21]), 1)
                    self.assertEqual(t.get_points("items", [21]), [])
                    self.assertEqual(c.describe_collection("items")["count"], 1)
                    # Bad input gets an error frame with a code, never a hang.
                    good = services.collection_delete_request("items", [7, 8])
                    for bad in [b"\x09" + good[1:], good[:-3], good[:6],
                                good[:9] + struct.pack("<I", 3) + good[13:]]:
                        with self.assertRaises(CohortError) as e:
                            t.call(services.COLLECTIONS, bad)
                        self.assertEqual(e.exception.name, "BAD_REQUEST", e.exception)
                    with self.assertRaises(CohortError) as e:
                        t.delete("nope", [1])
                    self.assertEqual(e.exception.name, "NOT_FOUND", e.exception)
                    self.assertEqual(c.describe_collection("items")["count"], 1)
                c.drop_collection("items")
                self.assertEqual(c.list_collections(), [])
            finally:
                self.assertEqual(server.stop(), 0)


class SecuredTest(unittest.TestCase):
    def test_signed_frames_and_tls(self) -> None:
        with tempfile.TemporaryDirectory() as d:
            keys = Path(d) / "keys.toml"
            keys.write_text(f'[[key]]\nid = "py"\nsecret = "{SECRET.decode()}"\n')
            s = Server("--service", "echo", "--auth-keys", str(keys), "--tls-cert",
                       str(TLS / "cert.pem"), "--tls-key", str(TLS / "key.pem"))
            try:
                key = Key("py", SECRET)
                ca = str(TLS / "ca.pem")
                with TcpClient("127.0.0.1", s.addr["tcp"], key=key, tls_ca=ca) as c:
                    self.assertEqual(c.echo(b"signed"), b"signed")
                with UdpClient("127.0.0.1", s.addr["udp"], key=key) as c:
                    self.assertEqual(c.call_many(services.ECHO, [b"a", b"b"]), [b"a", b"b"])
                with UdpClient("127.0.0.1", s.addr["udp"]) as c, self.assertRaises(CohortError) as e:
                    c.echo(b"unsigned")
                self.assertEqual(e.exception.name, "UNAUTHORIZED")
                with UdpClient("127.0.0.1", s.addr["udp"], key=Key("py", b"not the secret....")) as c:
                    with self.assertRaises(CohortError) as e:
                        c.echo(b"forged")
                self.assertEqual(e.exception.name, "UNAUTHORIZED")
                https = HttpClient(f"https://localhost:{s.addr['http']}", key=key, tls_ca=ca)
                self.assertEqual(https.echo(b"over https"), b"over https")
            finally:
                self.assertEqual(s.stop(), 0)


class ShutdownTest(unittest.TestCase):
    def test_every_request_is_answered_once_or_marked_not_sent(self) -> None:
        s = Server("--service", "spin", "--workers", "2")
        try:
            c = TcpClient("127.0.0.1", s.addr["tcp"], window=400)
            threading.Timer(0.2, lambda: s.p.send_signal(signal.SIGTERM)).start()
            answers = c.call_many(services.SPIN, [services.spin_request(1000)] * 4000)
            self.assertNotIn(None, answers)
            done = sum(isinstance(a, bytes) for a in answers)
            unavailable = sum(isinstance(a, CohortError) and a.name == "UNAVAILABLE" for a in answers)
            not_sent = sum(isinstance(a, NotSent) for a in answers)
            self.assertEqual(done + unavailable + not_sent, 4000, answers[:3])
            self.assertGreater(done, 0)
            self.assertGreater(not_sent, 0, "the stop came after every request was read")
            self.assertIsNotNone(c.goaway, "no GOAWAY before the close")
            c.close()
        finally:
            self.assertEqual(s.stop(), 0)


if __name__ == "__main__":
    unittest.main()
