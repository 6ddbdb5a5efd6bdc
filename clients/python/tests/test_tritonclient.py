"""NVIDIA's `tritonclient` (HTTP, unchanged) against a real `cohort serve`: the Open
Inference Protocol's health, metadata and config, and inference with binary and JSON
tensors - LeNet's answers equal the native UDP path's on the same server (its cpu engine is
the service's CPU function), k-NN's equal an exact numpy search when every list is probed,
and a malformed request is refused with the server's message."""

import getpass
import shutil
import socket
import subprocess
import tempfile
import time
import unittest
from pathlib import Path

import numpy as np
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

from cohort_client import FACEVER, UdpClient
from test_client import BIN, Server, build_index, read_fvecs


class TritonClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = tempfile.TemporaryDirectory()
        d = Path(cls.tmp.name)
        build_index(d, n=2000, dim=12, queries=16, nlist=8)
        cls.base = read_fvecs(d / "data" / "base.fvecs")
        cls.queries = read_fvecs(d / "data" / "query.fvecs")
        cls.server = Server("--service", "echo,knn:cpu,lenet:cpu", "--index", str(d / "ix.index"),
                            "--workers", "2")
        cls.client = triton.InferenceServerClient(f"127.0.0.1:{cls.server.addr['http']}")

    @classmethod
    def tearDownClass(cls) -> None:
        cls.client.close()
        assert cls.server.stop() == 0
        cls.tmp.cleanup()

    def test_health_metadata_and_config(self) -> None:
        c = self.client
        self.assertTrue(c.is_server_live())
        self.assertTrue(c.is_server_ready())
        self.assertTrue(c.is_model_ready("lenet"))
        self.assertFalse(c.is_model_ready("no-such-model"))
        meta = c.get_model_metadata("knn")
        self.assertEqual([i["name"] for i in meta["inputs"]], ["vector"])
        self.assertEqual(meta["inputs"][0]["shape"], [-1, 12])
        self.assertEqual(c.get_model_config("lenet")["input"][0]["name"], "image")
        self.assertIn("binary_tensor_data", c.get_server_metadata()["extensions"])

    def test_lenet_binary_and_json_tensors_equal_the_native_path(self) -> None:
        rng = np.random.default_rng(3)
        images = rng.integers(0, 256, size=(9, 28, 28), dtype=np.uint8)
        with UdpClient("127.0.0.1", self.server.addr["udp"]) as u:
            want_digits, want_scores = u.lenet(images)
        for binary in (True, False):
            for dtype, kind in ((np.uint8, "UINT8"), (np.float32, "FP32")):
                x = triton.InferInput("image", list(images.shape), kind)
                x.set_data_from_numpy(images.astype(dtype), binary_data=binary)
                outs = [triton.InferRequestedOutput(n, binary_data=binary) for n in ("class", "logits")]
                r = self.client.infer("lenet", [x], outputs=outs)
                np.testing.assert_array_equal(r.as_numpy("class"), want_digits)
                np.testing.assert_array_equal(r.as_numpy("logits"), want_scores)

    def test_knn_equals_exact_search(self) -> None:
        q = self.queries
        x = triton.InferInput("vector", list(q.shape), "FP32")
        x.set_data_from_numpy(q)
        r = self.client.infer("knn", [x], parameters={"k": 5, "nprobe": 8})
        d2 = ((q[:, None, :] - self.base[None, :, :]) ** 2).sum(-1)
        exact = np.argsort(d2, axis=1, kind="stable")[:, :5]
        np.testing.assert_array_equal(r.as_numpy("ids"), exact)
        np.testing.assert_allclose(r.as_numpy("distances"), np.take_along_axis(d2, exact, 1), rtol=1e-4)

    def test_echo_bytes(self) -> None:
        data = np.array([b"first", b"", b"third"], dtype=np.object_)
        x = triton.InferInput("data", [3], "BYTES")
        x.set_data_from_numpy(data)
        r = self.client.infer("echo", [x])
        self.assertEqual(list(r.as_numpy("data")), list(data))

    def test_a_malformed_request_is_refused_with_the_reason(self) -> None:
        x = triton.InferInput("vector", [2, 11], "FP32")
        x.set_data_from_numpy(np.zeros((2, 11), dtype=np.float32))
        with self.assertRaises(InferenceServerException) as e:
            self.client.infer("knn", [x])
        self.assertIn("vector is [N, 12]", str(e.exception))


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
            subprocess.run([BIN, "model", "load-db", "facever", "--memcached", addr],
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
                client = triton.InferenceServerClient(f"127.0.0.1:{server.addr['http']}")
                p = triton.InferInput("person", [4], "INT64")
                p.set_data_from_numpy(persons)
                x = triton.InferInput("image", [4, 56, 46], "UINT8")
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
