"""The Python client of Cohort's gRPC service for collections (cohort_client.collections_grpc)
against a real `cohort serve --data-dir DIR --grpc ADDR`: create, upsert, get, filtered
search, delete by filter and by ids, count, errors by their code names, drop. Skipped where
grpcio is not installed (it is an optional dependency)."""

import tempfile
import unittest
from pathlib import Path

import numpy as np

from cohort_client import CohortError
from test_client import Server

try:
    from cohort_client.collections_grpc import GrpcCollections
except ImportError as e:  # grpcio or protobuf missing: the optional part is not installed
    GrpcCollections = None
    MISSING = str(e)


@unittest.skipIf(GrpcCollections is None, "grpcio/protobuf not installed")
class CollectionsGrpcTest(unittest.TestCase):
    def test_the_operations_and_errors(self) -> None:
        with tempfile.TemporaryDirectory() as d:
            server = Server("--service", "echo", "--data-dir", str(Path(d) / "data"),
                            "--grpc", "127.0.0.1:0")
            try:
                with GrpcCollections(f"127.0.0.1:{server.addr['grpc']}") as c:
                    info = c.create_collection("items", dim=4, attributes={"color": "keyword", "n": "integer"})
                    self.assertEqual((info["name"], info["dim"], info["count"]), ("items", 4, 0))
                    ids = list(range(30))
                    vectors = np.random.default_rng(1).random((30, 4), dtype=np.float32)
                    attrs = [{"color": ["red", "blue", "green"][i % 3], "n": i} for i in ids]
                    self.assertEqual(c.upsert("items", ids, vectors, attrs), 30)
                    got = c.get_points("items", [4, 1000])
                    self.assertEqual([p["id"] for p in got], [4])
                    self.assertEqual(got[0]["attributes"], {"color": "blue", "n": 4})
                    np.testing.assert_array_equal(np.float32(got[0]["vector"]), vectors[4])
                    hits = c.search("items", vectors[[3, 6]], k=3, with_attributes=True,
                                    filter={"all": [{"eq": ["color", "red"]}, {"range": ["n", {"lt": 20}]}]})
                    self.assertEqual([h[0]["id"] for h in hits], [3, 6])
                    for h in hits[0] + hits[1]:
                        self.assertEqual(h["attributes"]["color"], "red")
                        self.assertLess(h["attributes"]["n"], 20)
                    self.assertEqual(c.delete("items", filter={"in": ["color", ["green"]]}), 10)
                    self.assertEqual(c.delete("items", ids=[0, 2, 999]), 1)
                    self.assertEqual(c.count("items"), 19)
                    self.assertEqual([i["name"] for i in c.list_collections()], ["items"])
                    with self.assertRaises(CohortError) as e:
                        c.search("items", [1.0, 2.0], k=3)
                    self.assertEqual(e.exception.name, "BAD_REQUEST")
                    with self.assertRaises(CohortError) as e:
                        c.count("nope")
                    self.assertEqual(e.exception.name, "NOT_FOUND")
                    with self.assertRaises(CohortError) as e:
                        c.create_collection("items", dim=4)
                    self.assertEqual(e.exception.name, "CONFLICT")
                    with self.assertRaises(CohortError) as e:
                        c.search("items", vectors[0], filter={"eq": ["size", 1]})
                    self.assertEqual(e.exception.name, "BAD_REQUEST")
                    c.drop_collection("items")
                    self.assertEqual(c.list_collections(), [])
            finally:
                self.assertEqual(server.stop(), 0)


if __name__ == "__main__":
    unittest.main()
