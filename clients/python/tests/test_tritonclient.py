"""NVIDIA's `tritonclient` (HTTP and gRPC, unchanged) against a real `cohort serve`: the Open
Inference Protocol's health, metadata and config, and inference with binary and JSON
tensors (HTTP) and raw tensors, unary and streamed (gRPC) - LeNet's answers equal the native UDP path's on the same server (its cpu engine is
the service's CPU function), k-NN's equal an exact numpy search when every list is probed,
and a malformed request is refused with the server's message."""

import getpass
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import unittest
from pathlib import Path

import numpy as np
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from tritonclient.utils import InferenceServerException

from cohort_client import FACEVER, UdpClient
from test_client import BIN, TLS, Server, build_index, read_fvecs


class TritonClientTest:
    """The tests both front doors pass; a subclass names the client module and port."""

    triton = triton_http
    port = "http"
    binary_modes = (True, False)  # the HTTP client sends binary or JSON tensors

    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = tempfile.TemporaryDirectory()
        d = Path(cls.tmp.name)
        build_index(d, n=2000, dim=12, queries=16, nlist=8)
        cls.base = read_fvecs(d / "data" / "base.fvecs")
        cls.queries = read_fvecs(d / "data" / "query.fvecs")
        cls.server = Server("--service", "echo,knn:cpu,lenet:cpu", "--index", str(d / "ix.index"),
                            "--workers", "2", "--grpc", "127.0.0.1:0")
        cls.client = cls.triton.InferenceServerClient(f"127.0.0.1:{cls.server.addr[cls.port]}")

    @classmethod
    def tearDownClass(cls) -> None:
        cls.client.close()
        assert cls.server.stop() == 0
        cls.tmp.cleanup()

    def input(self, name: str, array: np.ndarray, kind: str, binary: bool = True):
        x = self.triton.InferInput(name, list(array.shape), kind)
        if self.triton is triton_http:
            x.set_data_from_numpy(array, binary_data=binary)
        else:
            x.set_data_from_numpy(array)
        return x

    def output(self, name: str, binary: bool = True):
        if self.triton is triton_http:
            return self.triton.InferRequestedOutput(name, binary_data=binary)
        return self.triton.InferRequestedOutput(name)

    def metadata(self, model: str) -> dict:
        if self.triton is triton_http:
            return self.client.get_model_metadata(model)
        return self.client.get_model_metadata(model, as_json=True)

    def config(self, model: str) -> dict:
        if self.triton is triton_http:
            return self.client.get_model_config(model)
        return self.client.get_model_config(model, as_json=True)["config"]

    def test_health_metadata_and_config(self) -> None:
        c = self.client
        self.assertTrue(c.is_server_live())
        self.assertTrue(c.is_server_ready())
        self.assertTrue(c.is_model_ready("lenet"))
        self.assertFalse(c.is_model_ready("no-such-model"))
        meta = self.metadata("knn")
        self.assertEqual([i["name"] for i in meta["inputs"]], ["vector"])
        self.assertEqual([int(d) for d in meta["inputs"][0]["shape"]], [-1, 12])
        config = self.config("lenet")
        self.assertEqual(config["input"][0]["name"], "image")
        self.assertEqual(config["output"][1]["data_type"], "TYPE_FP32")

    def test_lenet_tensors_equal_the_native_path(self) -> None:
        rng = np.random.default_rng(3)
        images = rng.integers(0, 256, size=(9, 28, 28), dtype=np.uint8)
        with UdpClient("127.0.0.1", self.server.addr["udp"]) as u:
            want_digits, want_scores = u.lenet(images)
        for binary in self.binary_modes:
            for dtype, kind in ((np.uint8, "UINT8"), (np.float32, "FP32")):
                x = self.input("image", images.astype(dtype), kind, binary)
                outs = [self.output(n, binary) for n in ("class", "logits")]
                r = self.client.infer("lenet", [x], outputs=outs)
                np.testing.assert_array_equal(r.as_numpy("class"), want_digits)
                np.testing.assert_array_equal(r.as_numpy("logits"), want_scores)

    def test_knn_equals_exact_search(self) -> None:
        q = self.queries
        r = self.client.infer("knn", [self.input("vector", q, "FP32")],
                              parameters={"k": 5, "nprobe": 8})
        d2 = ((q[:, None, :] - self.base[None, :, :]) ** 2).sum(-1)
        exact = np.argsort(d2, axis=1, kind="stable")[:, :5]
        np.testing.assert_array_equal(r.as_numpy("ids"), exact)
        np.testing.assert_allclose(r.as_numpy("distances"), np.take_along_axis(d2, exact, 1), rtol=1e-4)

    def test_echo_bytes(self) -> None:
        data = np.array([b"first", b"", b"third"], dtype=np.object_)
        r = self.client.infer("echo", [self.input("data", data, "BYTES")])
        self.assertEqual(list(r.as_numpy("data")), list(data))

    def test_a_malformed_request_is_refused_with_the_reason(self) -> None:
        x = self.input("vector", np.zeros((2, 11), dtype=np.float32), "FP32")
        with self.assertRaises(InferenceServerException) as e:
            self.client.infer("knn", [x])
        self.assertIn("vector is [N, 12]", str(e.exception))


class TritonHttpTest(TritonClientTest, unittest.TestCase):
    pass


class TritonGrpcTest(TritonClientTest, unittest.TestCase):
    triton = triton_grpc
    port = "grpc"
    binary_modes = (True,)  # gRPC tensors travel as raw bytes

    def test_stream_answers_every_request_with_its_id(self) -> None:
        """The streaming RPC: every request answered once, errors included, matched by id."""
        answers: dict = {}
        done = threading.Event()

        def on_answer(result, error) -> None:
            if error is not None:
                answers[str(error)] = error
            else:
                answers[result.get_response().id] = result
            if len(answers) == 9:
                done.set()

        rng = np.random.default_rng(8)
        images = rng.integers(0, 256, size=(8, 28, 28), dtype=np.uint8)
        with UdpClient("127.0.0.1", self.server.addr["udp"]) as u:
            want, _ = u.lenet(images)
        self.client.start_stream(callback=on_answer)
        try:
            for i, img in enumerate(images):
                self.client.async_stream_infer("lenet", [self.input("image", img[None], "UINT8")],
                                               request_id=str(i))
            bad = self.input("image", np.zeros((1, 27, 28), np.uint8), "UINT8")
            self.client.async_stream_infer("lenet", [bad], request_id="bad")
            self.assertTrue(done.wait(10), f"{len(answers)} of 9 answers")
        finally:
            self.client.stop_stream()
        for i in range(8):
            self.assertEqual(answers[str(i)].as_numpy("class")[0], want[i])
        self.assertTrue(any("BAD_REQUEST" in k for k in answers), list(answers))

    def test_keys_are_checked_on_grpc_too(self) -> None:
        """With API keys on, a request without a key is UNAUTHENTICATED, one with a key
        that does not allow the model PERMISSION_DENIED, one with a good key answered."""
        keys = Path(self.tmp.name) / "keys.toml"
        keys.write_text('[[key]]\nid = "alice"\nsecret = "alice-secret-0123"\nservices = ["echo"]\n'
                        '[[key]]\nid = "bob"\nsecret = "bob-secret-0123456"\nservices = ["lenet"]\n')
        server = Server("--service", "echo,lenet:cpu", "--auth-keys", str(keys), "--grpc", "127.0.0.1:0")
        try:
            c = self.triton.InferenceServerClient(f"127.0.0.1:{server.addr['grpc']}")
            x = self.input("data", np.array([b"hi"], dtype=np.object_), "BYTES")
            with self.assertRaises(InferenceServerException) as e:
                c.infer("echo", [x])
            self.assertEqual(e.exception.status(), "StatusCode.UNAUTHENTICATED")
            with self.assertRaises(InferenceServerException) as e:
                c.infer("echo", [x], headers={"authorization": "Bearer bob-secret-0123456"})
            self.assertEqual(e.exception.status(), "StatusCode.PERMISSION_DENIED")
            r = c.infer("echo", [x], headers={"authorization": "Bearer alice-secret-0123"})
            self.assertEqual(list(r.as_numpy("data")), [b"hi"])
            # A model's metadata and config need a key that allows it too.
            for describe in (c.get_model_metadata, c.get_model_config):
                with self.assertRaises(InferenceServerException) as e:
                    describe("echo")
                self.assertEqual(e.exception.status(), "StatusCode.UNAUTHENTICATED")
                with self.assertRaises(InferenceServerException) as e:
                    describe("echo", headers={"authorization": "Bearer bob-secret-0123456"})
                self.assertEqual(e.exception.status(), "StatusCode.PERMISSION_DENIED")
                describe("echo", headers={"authorization": "Bearer alice-secret-0123"})
            c.close()
        finally:
            self.assertEqual(server.stop(), 0)

    def test_an_idle_connection_is_closed_but_an_open_stream_is_not(self) -> None:
        """A connection with no call in progress for the idle timeout gets GOAWAY and is
        closed; a stream left open past it, quiet between requests, keeps its connection."""
        server = Server("--service", "echo", "--grpc", "127.0.0.1:0", "--idle-timeout-ms", "300",
                        "--read-timeout-ms", "10000")
        try:
            port = server.addr["grpc"]
            with socket.create_connection(("127.0.0.1", port)) as raw:
                # A quiet HTTP/2 client: the preface and SETTINGS, then only acknowledgements
                # (of the server's SETTINGS and keep-alive PINGs), never a call.
                raw.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]))
                raw.settimeout(5)
                t0, buf, types = time.monotonic(), b"", []
                while chunk := raw.recv(4096):
                    buf += chunk
                    while len(buf) >= 9 and len(buf) >= 9 + int.from_bytes(buf[:3], "big"):
                        n, kind, flags = int.from_bytes(buf[:3], "big"), buf[3], buf[4]
                        payload, buf = buf[9:9 + n], buf[9 + n:]
                        types.append(kind)
                        if kind == 4 and not flags & 1:  # SETTINGS: ack it
                            raw.sendall(bytes([0, 0, 0, 4, 1, 0, 0, 0, 0]))
                        if kind == 6 and not flags & 1:  # PING: ack it
                            raw.sendall(bytes([0, 0, 8, 6, 1, 0, 0, 0, 0]) + payload)
                self.assertLess(time.monotonic() - t0, 3, "closed at the idle timeout")
                self.assertIn(7, types, f"a GOAWAY before the close (frames {types})")
            answers: list = []
            c = self.triton.InferenceServerClient(f"127.0.0.1:{port}")
            c.start_stream(callback=lambda result, error: answers.append(error or result))
            try:
                x = self.input("data", np.array([b"one"], dtype=np.object_), "BYTES")
                c.async_stream_infer("echo", [x], request_id="1")
                time.sleep(1.0)  # more than three idle timeouts with the stream open
                c.async_stream_infer("echo", [x], request_id="2")
                for _ in range(100):
                    if len(answers) == 2:
                        break
                    time.sleep(0.05)
            finally:
                c.stop_stream()
                c.close()
            self.assertEqual([a.get_response().id for a in answers], ["1", "2"], answers)
        finally:
            self.assertEqual(server.stop(), 0)

    def test_tls(self) -> None:
        """With TLS on, gRPC speaks it too (ALPN h2), and a plain-text client is refused."""
        server = Server("--service", "echo", "--grpc", "127.0.0.1:0",
                        "--tls-cert", str(TLS / "cert.pem"), "--tls-key", str(TLS / "key.pem"))
        try:
            x = self.input("data", np.array([b"over tls"], dtype=np.object_), "BYTES")
            c = self.triton.InferenceServerClient(f"localhost:{server.addr['grpc']}", ssl=True,
                                                  root_certificates=str(TLS / "ca.pem"))
            self.assertEqual(list(c.infer("echo", [x]).as_numpy("data")), [b"over tls"])
            c.close()
            plain = self.triton.InferenceServerClient(f"localhost:{server.addr['grpc']}")
            with self.assertRaises(InferenceServerException):
                plain.infer("echo", [x], client_timeout=5)
            plain.close()
        finally:
            self.assertEqual(server.stop(), 0)


class FaceverTest(unittest.TestCase):
    """facever's tensors: the v2 verdicts equal the native UDP path's for the same
    (person, face) pairs, against a real memcached holding the gallery."""

    def test_verdicts_equal_the_native_path(self) -> None:
        if shutil.which("memcached") is None:
            raise unittest.SkipTest("SKIPPED: no memcached (scripts/test.sh installs it)")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        mc = subprocess.Popen(["memcached", "-l", "127.0.0.1", "-U", "0", "-p", str(port), "-m", "64",
                               "-u", getpass.getuser()])
        try:
            addr = f"127.0.0.1:{port}"
            for _ in range(50):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError:
                    time.sleep(0.05)
            # Filling the face database is the product's: `cohort facever load-db`.
            subprocess.run([BIN, "facever", "load-db", "--memcached", addr],
                           check=True, stdout=subprocess.DEVNULL)
            server = Server("--service", "facever:cpu", "--facever-memcached", addr)
            try:
                rng = np.random.default_rng(5)
                faces = rng.integers(0, 256, size=(4, 56, 46), dtype=np.uint8)
                persons = np.array([1, 2, 3, 4], dtype=np.int64)
                with UdpClient("127.0.0.1", server.addr["udp"]) as u:
                    native = [u.call(FACEVER, int(p).to_bytes(4, "little") + f.tobytes())
                              for p, f in zip(persons, faces)]
                want_match = np.array([a[0] == 1 for a in native])
                want_dist = np.array([np.frombuffer(a, "<f4", 1, 1)[0] for a in native])
                client = triton_http.InferenceServerClient(f"127.0.0.1:{server.addr['http']}")
                p = triton_http.InferInput("person", [4], "INT64")
                p.set_data_from_numpy(persons)
                x = triton_http.InferInput("image", [4, 56, 46], "UINT8")
                x.set_data_from_numpy(faces)
                r = client.infer("facever", [p, x])
                np.testing.assert_array_equal(r.as_numpy("match"), want_match)
                np.testing.assert_array_equal(r.as_numpy("distance"), want_dist)
                client.close()
            finally:
                self.assertEqual(server.stop(), 0)
        finally:
            mc.terminate()
            mc.wait()


if __name__ == "__main__":
    unittest.main()
