#!/usr/bin/env python3
"""Cohort's live collections side by side with milvus-lite and FAISS (issue 82), CPU only.

One seeded SIFT-like data set (N x D vectors of integral values 0..255 held as f32, and an
integer attribute `bucket`, each value 0..999 held by N/1000 points) is loaded into

  cohort   a real `cohort serve --data-dir TMP --http 127.0.0.1:PORT` (collections on the
           CPU), created and filled through the Python client (clients/python) over REST
           JSON; searches over HTTP JSON on keep-alive connections;
  milvus   milvus-lite (pymilvus MilvusClient on a local .db file), IVF_FLAT of nlist lists,
           `bucket` an INT64 scalar field filtered by the expression `bucket < T`;
  faiss    faiss-cpu IndexIVFFlat of nlist lists holding the ids itself (add_with_ids),
           filtered by SearchParametersIVF(sel=IDSelectorBatch(matching ids), nprobe=...).
           IndexIDMap2 over IVF is checked too: its remove_ids leaves the id map out of step
           with the IVF's lists (wrong ids answered afterwards), so it is not the one measured.

Then the same random share of the ids (--delete-share) is deleted from each, and for every
selectivity (100 %, 50 %, 10 %, 1 %, 0.1 %: `bucket < 1000 s`) the same queries are
searched with the same k and nprobe, on --threads client threads each:
  * one query a call (Cohort: one HTTP request a query; milvus-lite: one search call a
    query, over its local gRPC; FAISS: one search call a query in process, one OpenMP
    thread a call), and
  * --batch queries a call (Cohort: --batch vectors in one search request).
Recall@k is scored against the exact k nearest of the matching, non-deleted points (numpy,
float64): a hit counts when its true distance is within the k-th nearest's (ties). Every
answer is checked: ids matching the filter, never a deleted id.

Usage (about 5 minutes on 2 cores at the defaults):
  python3 bench/collections_peers.py --cohort-bin target/release/cohort \
      --out lab/results/DIR/collections-peers.json
Needs: numpy, faiss-cpu, milvus-lite, pymilvus, and clients/python (pip install ./clients/python)
in one virtualenv. --systems picks a subset (cohort,milvus,faiss).
"""
import argparse
import http.client
import importlib.metadata as md
import json
import math
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

SELECTIVITIES = [(1.0, None), (0.5, 500), (0.1, 100), (0.01, 10), (0.001, 1)]
COLL = "peers"


def loadavg():
    return open("/proc/loadavg").read().split()[:3]


def synth(n, nq, dim, seed):
    """SIFT-like: a mixture of 1000 Gaussian clusters, values rounded and clipped to 0..255."""
    rng = np.random.default_rng(seed)
    centers = rng.uniform(0, 160, (1000, dim))
    spread = rng.uniform(8, 30, 1000)

    def draw(m):
        c = rng.integers(0, 1000, m)
        x = centers[c] + rng.normal(0, 1, (m, dim)) * spread[c, None]
        return np.clip(np.rint(x), 0, 255).astype(np.float32)

    xb, xq = draw(n), draw(nq)
    bucket = (rng.permutation(n) % 1000).astype(np.int64)
    return xb, xq, bucket


def ground_truth(xb, xq, mask, k):
    """Exact k nearest among xb[mask] (squared l2, float64): (ids [nq, k], kth distance [nq])."""
    cand = np.nonzero(mask)[0]
    x = xb[cand].astype(np.float64)
    q = xq.astype(np.float64)
    d = (q * q).sum(1)[:, None] - 2 * q @ x.T + (x * x).sum(1)[None, :]
    kk = min(k, len(cand))
    part = np.argpartition(d, kk - 1, axis=1)[:, :kk]
    pd = np.take_along_axis(d, part, 1)
    order = np.argsort(pd, axis=1)
    ids = cand[np.take_along_axis(part, order, 1)]
    return ids, np.take_along_axis(pd, order, 1)[:, -1]


def score(answers, xb, xq, mask, deleted, kth, k):
    """answers: list (per query) of id lists. Recall with ties, violations, deleted answered."""
    hits = total = viol = dead = 0
    for qi, ids in enumerate(answers):
        ids = np.asarray(ids, dtype=np.int64)
        want = min(k, int(mask.sum()))
        total += want
        if len(ids) == 0:
            continue
        viol += int((~mask[ids]).sum() - deleted[ids].sum()) if len(ids) else 0
        dead += int(deleted[ids].sum())
        ok = ids[mask[ids]]
        diff = xb[ok].astype(np.float64) - xq[qi].astype(np.float64)
        dist = (diff * diff).sum(1)
        hits += int(min(want, (dist <= kth[qi] + 1e-6 * max(1.0, kth[qi])).sum()))
    return hits / total, viol, dead


def run_threads(nthreads, nq, batch, fn):
    """Calls fn(tid, lo, hi) for query slices of `batch`, split round-robin over threads;
    returns (answers list, seconds)."""
    answers = [None] * nq
    slices = [(lo, min(nq, lo + batch)) for lo in range(0, nq, batch)]
    err = []

    def worker(tid):
        try:
            for j in range(tid, len(slices), nthreads):
                lo, hi = slices[j]
                answers[lo:hi] = fn(tid, lo, hi)
        except Exception as e:  # noqa: BLE001 - reported, not hidden
            err.append(repr(e))

    ts = [threading.Thread(target=worker, args=(t,)) for t in range(nthreads)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    secs = time.perf_counter() - t0
    if err:
        raise RuntimeError(err[0])
    return answers, secs


# ---------------------------------------------------------------- cohort


class Cohort:
    name = "cohort"

    def __init__(self, a, tmp):
        from cohort_client import HttpClient
        self.a = a
        self.dir = os.path.join(tmp, "cohort-data")
        self.port = a.port or free_port()
        self.log = open(os.path.join(tmp, "cohort-serve.log"), "w")
        self.proc = subprocess.Popen(
            [a.cohort_bin, "serve", "--data-dir", self.dir, "--http", f"127.0.0.1:{self.port}",
             "--collections-on", "cpu"], stdout=self.log, stderr=subprocess.STDOUT)
        self.client = HttpClient(f"http://127.0.0.1:{self.port}", timeout_s=600)
        for _ in range(300):
            try:
                self.client.list_collections()
                break
            except Exception:  # noqa: BLE001 - starting
                if self.proc.poll() is not None:
                    raise RuntimeError("cohort serve exited; see cohort-serve.log")
                time.sleep(0.1)
        self.conns = {}
        self.version = subprocess.check_output([a.cohort_bin, "--version"], text=True).strip()

    def post(self, tid, path, body):
        data = json.dumps(body)
        for attempt in (0, 1):
            c = self.conns.get(tid)
            if c is None:
                c = self.conns[tid] = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
            try:
                c.request("POST", path, data, {"Content-Type": "application/json"})
                r = c.getresponse()
                raw = r.read()
                break
            except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
                # The server closes a keep-alive connection left idle (here while the other
                # systems ran): open a new one; a search is safe to send again.
                c.close()
                del self.conns[tid]
                if attempt:
                    raise
        if r.status != 200:
            raise RuntimeError(f"cohort {path}: HTTP {r.status} {raw[:300]!r}")
        if r.getheader("Connection", "").lower() == "close":
            c.close()
            del self.conns[tid]
        return json.loads(raw)

    def load(self, xb, bucket):
        self.client.create_collection(COLL, dim=xb.shape[1], metric="l2", element="f32",
                                      attributes={"bucket": "integer"})
        b = self.a.upsert_batch
        t0 = time.perf_counter()
        for lo in range(0, len(xb), b):
            hi = min(len(xb), lo + b)
            n = self.client.upsert(COLL, range(lo, hi), xb[lo:hi],
                                   [{"bucket": int(v)} for v in bucket[lo:hi]])
            assert n == hi - lo
        secs = time.perf_counter() - t0
        # Wait for the background IVF training the last upserts started (nlist ~ sqrt(n)).
        t1 = time.perf_counter()
        desc = self.wait_trained(len(xb))
        return {"ingest_seconds": secs, "vectors_per_s": len(xb) / secs,
                "upsert_batch": b, "client_threads": 1,
                "ack": "after fdatasync of the collection's log (every acknowledged upsert durable)",
                "wait_for_ivf_seconds": time.perf_counter() - t1, "describe": desc}

    def wait_trained(self, n):
        # The last upserts may have started an IVF training (at 4096 points, then at each
        # fourfold growth since the last): wait until no new one has been logged for 3 s.
        seen, quiet = self.trainings(), time.time()
        while time.time() - quiet < 3:
            time.sleep(0.2)
            if self.trainings() != seen:
                seen, quiet = self.trainings(), time.time()
        return self.client.describe_collection(COLL)

    def trainings(self):
        self.log.flush()
        return sum(1 for line in open(self.log.name, errors="replace") if "IVF trained" in line)

    def nlist(self):
        """The lists of the IVF trained last: describe does not say, the server's log does
        ("IVF trained" with nlist=N)."""
        n = find_key(self.client.describe_collection(COLL), "nlist")
        if n is None:
            self.log.flush()
            for line in open(self.log.name, errors="replace"):
                if "IVF trained" in line and "nlist=" in line:
                    n = int(line.split("nlist=")[1].split()[0].strip(","))
        return n

    def delete(self, ids):
        t0 = time.perf_counter()
        n = 0
        for lo in range(0, len(ids), 1000):
            n += self.client.delete(COLL, ids=ids[lo:lo + 1000])
        secs = time.perf_counter() - t0
        left = self.client.get_points(COLL, ids[:1000])
        count = self.client.describe_collection(COLL)["count"]
        return {"deleted_answered": n, "seconds": secs, "get_of_deleted_found": len(left),
                "count_after": count}

    def search(self, xq, k, nprobe, thresh, nthreads, batch):
        body = {"k": k, "nprobe": nprobe}
        if thresh is not None:
            body["filter"] = {"range": ["bucket", {"lt": thresh}]}

        def fn(tid, lo, hi):
            b = dict(body, vectors=xq[lo:hi].tolist())
            res = self.post(tid, f"/v1/collections/{COLL}/search", b)["results"]
            return [[h["id"] for h in r] for r in res]
        return run_threads(nthreads, len(xq), batch, fn)

    def close(self):
        for c in self.conns.values():
            c.close()
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def find_key(obj, key):
    if isinstance(obj, dict):
        if key in obj and isinstance(obj[key], int):
            return obj[key]
        for v in obj.values():
            r = find_key(v, key)
            if r is not None:
                return r
    return None


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


# ---------------------------------------------------------------- milvus-lite


class Milvus:
    name = "milvus-lite"

    def __init__(self, a, tmp, nlist):
        from pymilvus import MilvusClient
        self.a = a
        self.nlist = nlist
        self.client = MilvusClient(os.path.join(tmp, "milvus.db"))
        self.version = f"milvus-lite {md.version('milvus-lite')}, pymilvus {md.version('pymilvus')}"

    def load(self, xb, bucket):
        from pymilvus import DataType
        c = self.client
        s = c.create_schema(auto_id=False, enable_dynamic_field=False)
        s.add_field("id", DataType.INT64, is_primary=True)
        s.add_field("vec", DataType.FLOAT_VECTOR, dim=xb.shape[1])
        s.add_field("bucket", DataType.INT64)
        ip = c.prepare_index_params()
        ip.add_index(field_name="vec", index_type="IVF_FLAT", metric_type="L2",
                     params={"nlist": self.nlist})
        c.create_collection(COLL, schema=s, index_params=ip)
        b = self.a.upsert_batch
        t0 = time.perf_counter()
        for lo in range(0, len(xb), b):
            hi = min(len(xb), lo + b)
            rows = [{"id": i, "vec": xb[i].tolist(), "bucket": int(bucket[i])} for i in range(lo, hi)]
            r = c.insert(COLL, rows)
            assert r["insert_count"] == hi - lo
        secs = time.perf_counter() - t0
        t1 = time.perf_counter()
        c.flush(COLL)
        flush_s = time.perf_counter() - t1
        t2 = time.perf_counter()
        desc = None
        while time.perf_counter() - t2 < 600:
            desc = c.describe_index(COLL, "vec")
            if desc.get("indexed_rows", 0) >= len(xb) and desc.get("pending_index_rows", 0) == 0:
                break
            time.sleep(0.5)
        idx_s = time.perf_counter() - t2
        return {"ingest_seconds": secs, "vectors_per_s": len(xb) / secs, "upsert_batch": b,
                "client_threads": 1, "call": "insert",
                "ack": "insert returns once milvus-lite took the rows; flush() seals them into "
                       "the local .db file (timed apart); fsync before the answer is not documented",
                "flush_seconds": flush_s, "index_wait_seconds": idx_s,
                "vectors_per_s_through_flush": len(xb) / (secs + flush_s),
                "describe_index": {k: v for k, v in (desc or {}).items() if isinstance(v, (int, str))}}

    def delete(self, ids):
        t0 = time.perf_counter()
        n = 0
        for lo in range(0, len(ids), 1000):
            r = self.client.delete(COLL, ids=[int(i) for i in ids[lo:lo + 1000]])
            n += len(r) if isinstance(r, list) else int(r.get("delete_count", 0))
        secs = time.perf_counter() - t0
        left = self.client.get(COLL, ids=[int(i) for i in ids[:1000]])
        count = self.client.query(COLL, filter="", output_fields=["count(*)"])[0]["count(*)"]
        return {"deleted_answered": n, "seconds": secs, "get_of_deleted_found": len(left),
                "count_after": count}

    def search(self, xq, k, nprobe, thresh, nthreads, batch):
        kw = {"limit": k, "search_params": {"metric_type": "L2", "params": {"nprobe": nprobe}},
              "anns_field": "vec"}
        if thresh is not None:
            kw["filter"] = f"bucket < {thresh}"

        def fn(tid, lo, hi):
            res = self.client.search(COLL, data=xq[lo:hi].tolist(), **kw)
            return [[h["id"] for h in r] for r in res]
        return run_threads(nthreads, len(xq), batch, fn)

    def close(self):
        self.client.close()


# ---------------------------------------------------------------- FAISS


def faiss_idmap2_check(xb, nlist, seed):
    """IndexIDMap2 over IndexIVFFlat, remove_ids of 5 %, then every kept point searched for
    itself with nprobe = nlist (exact): how many come back under their own id."""
    import faiss
    n = min(len(xb), 20000)
    x = xb[:n]
    ivf = faiss.IndexIVFFlat(faiss.IndexFlatL2(x.shape[1]), x.shape[1], min(nlist, 64))
    idx = faiss.IndexIDMap2(ivf)
    idx.train(x)
    ids = np.arange(n, dtype=np.int64) * 7 + 3
    idx.add_with_ids(x, ids)
    rng = np.random.default_rng(seed)
    gone = ids[rng.choice(n, n // 20, replace=False)]
    removed = idx.remove_ids(faiss.IDSelectorBatch(gone))
    ivf.nprobe = ivf.nlist
    keep = np.setdiff1d(ids, gone)[:500]
    _, got = idx.search(x[(keep - 3) // 7], 1)
    right = int((got[:, 0] == keep).sum())
    return {"index": "IndexIDMap2(IndexIVFFlat)", "points": n, "removed": int(removed),
            "kept_points_searched": len(keep), "answered_under_own_id": right,
            "deleted_answered": int(np.isin(got, gone).sum())}


class Faiss:
    name = "faiss"

    def __init__(self, a, nlist):
        import faiss
        self.faiss = faiss
        self.a = a
        self.nlist = nlist
        self.version = f"faiss-cpu {faiss.__version__}"
        self.sel = None

    def load(self, xb, bucket):
        f = self.faiss
        f.omp_set_num_threads(os.cpu_count())
        t0 = time.perf_counter()
        self.index = f.IndexIVFFlat(f.IndexFlatL2(xb.shape[1]), xb.shape[1], self.nlist)
        self.index.train(xb)
        train_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        b = self.a.upsert_batch
        for lo in range(0, len(xb), b):
            hi = min(len(xb), lo + b)
            self.index.add_with_ids(xb[lo:hi], np.arange(lo, hi, dtype=np.int64))
        secs = time.perf_counter() - t1
        self.bucket = bucket
        return {"ingest_seconds": secs, "vectors_per_s": len(xb) / secs, "upsert_batch": b,
                "train_seconds": train_s, "vectors_per_s_with_training": len(xb) / (secs + train_s),
                "ack": "in memory only (write_index saves the whole index when asked)",
                "index": "IndexIVFFlat, ids held by the IVF (add_with_ids)"}

    def delete(self, ids):
        t0 = time.perf_counter()
        n = self.index.remove_ids(self.faiss.IDSelectorBatch(np.asarray(ids, dtype=np.int64)))
        secs = time.perf_counter() - t0
        return {"deleted_answered": int(n), "seconds": secs, "count_after": int(self.index.ntotal)}

    def search(self, xq, k, nprobe, thresh, nthreads, batch, alive=None):
        f = self.faiss
        sel_s = 0.0
        if thresh is not None:
            t0 = time.perf_counter()
            match = np.nonzero(self.bucket < thresh)[0].astype(np.int64)
            sel = f.IDSelectorBatch(match)
            sel_s = time.perf_counter() - t0
            params = f.SearchParametersIVF(sel=sel, nprobe=nprobe)
        else:
            params = f.SearchParametersIVF(nprobe=nprobe)
        f.omp_set_num_threads(1 if batch == 1 else os.cpu_count())
        threads = nthreads if batch == 1 else 1

        def fn(tid, lo, hi):
            _, ids = self.index.search(xq[lo:hi], k, params=params)
            return [[int(i) for i in r if i >= 0] for r in ids]
        answers, secs = run_threads(threads, len(xq), batch if batch > 1 else 1, fn)
        self.last_selector_seconds = sel_s
        return answers, secs

    def close(self):
        pass


# ---------------------------------------------------------------- main


def git(*args):
    try:
        return subprocess.check_output(["git", *args], text=True).strip()
    except Exception:  # noqa: BLE001
        return "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100000, help="points")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--nlist", type=int, default=0,
                    help="lists for milvus-lite and FAISS (0: the lists Cohort trained)")
    ap.add_argument("--nprobe", type=int, default=0, help="0: Cohort's default, nlist / 8")
    ap.add_argument("--threads", type=int, default=2, help="client threads, every system")
    ap.add_argument("--batch", type=int, default=50, help="queries a call in the batched runs")
    ap.add_argument("--upsert-batch", type=int, default=2000)
    ap.add_argument("--delete-share", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=82)
    ap.add_argument("--systems", default="cohort,milvus,faiss")
    ap.add_argument("--cohort-bin", default="target/release/cohort")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--out", required=True, help="JSON written here; the tables to stdout")
    a = ap.parse_args()
    systems = a.systems.split(",")
    doc = {"machine": {"cpu_model": next((l.split(":")[1].strip() for l in open("/proc/cpuinfo")
                                          if l.startswith("model name")), None),
                       "nproc": int(subprocess.check_output(["nproc"], text=True)),
                       "platform": platform.platform(), "python": platform.python_version()},
           "commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
           "command": " ".join([sys.executable.split("/")[-1]] + sys.argv),
           "loadavg_start": loadavg(), "versions": {}}
    print(f"load average at start: {doc['loadavg_start']}", flush=True)
    xb, xq, bucket = synth(a.n, a.queries, a.dim, a.seed)
    rng = np.random.default_rng(a.seed + 1)
    gone = np.sort(rng.choice(a.n, int(a.n * a.delete_share), replace=False)).astype(np.int64)
    deleted = np.zeros(a.n, bool)
    deleted[gone] = True
    doc["data"] = {"n": a.n, "dim": a.dim, "queries": a.queries, "k": a.k, "seed": a.seed,
                   "values": "integral 0..255 held as f32", "attribute": "bucket: 0..999, n/1000 points each",
                   "deleted": int(len(gone)), "threads": a.threads, "batch": a.batch}
    tmp = tempfile.mkdtemp(prefix="collections-peers-")
    objs = {}
    res = {}
    try:
        nlist = a.nlist
        if "cohort" in systems:
            objs["cohort"] = Cohort(a, tmp)
            print("cohort: loading", flush=True)
            res["cohort"] = {"ingest": objs["cohort"].load(xb, bucket)}
            if not nlist:
                nlist = objs["cohort"].nlist() or int(math.sqrt(a.n))
        nlist = nlist or int(math.sqrt(a.n))
        nprobe = a.nprobe or max(8, nlist // 8)
        doc["data"].update(nlist=nlist, nprobe=nprobe)
        if "milvus" in systems:
            objs["milvus"] = Milvus(a, tmp, nlist)
            print("milvus-lite: loading", flush=True)
            res["milvus"] = {"ingest": objs["milvus"].load(xb, bucket)}
        if "faiss" in systems:
            objs["faiss"] = Faiss(a, nlist)
            print("faiss: loading", flush=True)
            res["faiss"] = {"ingest": objs["faiss"].load(xb, bucket),
                            "idmap2_remove_check": faiss_idmap2_check(xb, nlist, a.seed)}
        for s, o in objs.items():
            doc["versions"][s] = o.version
            res[s]["delete"] = o.delete(gone)
            print(f"{s}: ingest {res[s]['ingest']['vectors_per_s']:.0f} vectors/s, "
                  f"delete {res[s]['delete']}", flush=True)
        for frac, thresh in SELECTIVITIES:
            mask = ~deleted & ((bucket < thresh) if thresh is not None else True)
            _, kth = ground_truth(xb, xq, mask, a.k)
            for s, o in objs.items():
                for batch in (1, a.batch):
                    answers, secs = o.search(xq, a.k, nprobe, thresh, a.threads, batch)
                    rec, viol, dead = score(answers, xb, xq, mask, deleted, kth, a.k)
                    row = {"selectivity": frac, "matching": int(mask.sum()), "batch": batch,
                           "qps": len(xq) / secs, "recall": rec, "filter_violations": viol,
                           "deleted_answered": dead}
                    if s == "faiss" and thresh is not None:
                        row["selector_build_seconds"] = o.last_selector_seconds
                    res[s].setdefault("search", []).append(row)
                    print(f"{s:>7} sel {frac:>6} batch {batch:>3}: {row['qps']:>9.0f} q/s "
                          f"recall {rec:.4f} viol {viol} deleted {dead}", flush=True)
        if "cohort" in objs:
            res["cohort"]["describe_end"] = objs["cohort"].client.describe_collection(COLL)
    finally:
        for o in objs.values():
            o.close()
        shutil.rmtree(tmp, ignore_errors=True)
    doc["results"] = res
    doc["loadavg_end"] = loadavg()
    with open(a.out + ".tmp", "w") as f:
        json.dump(doc, f, indent=2)
    os.replace(a.out + ".tmp", a.out)
    print_tables(doc)


def print_tables(doc):
    res = doc["results"]
    d = doc["data"]
    print(f"\n{d['n']} x {d['dim']}, nlist {d['nlist']}, nprobe {d['nprobe']}, k {d['k']}, "
          f"{d['queries']} queries, {d['threads']} client threads, {d['deleted']} deleted; "
          f"load average {doc['loadavg_start']} -> {doc['loadavg_end']}\n")
    names = [s for s in ("cohort", "milvus", "faiss") if s in res]
    print("| selectivity | " + " | ".join(
        f"{s} q/s (1 a call) | {s} q/s ({d['batch']} a call) | {s} recall@{d['k']}" for s in names) + " |")
    print("| --- " * (1 + 3 * len(names)) + "|")
    for frac, _ in SELECTIVITIES:
        cells = []
        for s in names:
            rows = {r["batch"]: r for r in res[s]["search"] if r["selectivity"] == frac}
            one, many = rows[1], rows[d["batch"]]
            cells += [f"{one['qps']:.0f}", f"{many['qps']:.0f}",
                      f"{one['recall']:.4f}" + (f" / {many['recall']:.4f}" if abs(many['recall'] - one['recall']) > 1e-9 else "")]
        print(f"| {frac * 100:g} % | " + " | ".join(cells) + " |")
    print()
    print("| system | ingest vectors/s | acknowledged as | deleted | found again after delete |")
    print("| --- | --- | --- | --- | --- |")
    for s in names:
        ing, de = res[s]["ingest"], res[s]["delete"]
        bad = sum(r["deleted_answered"] for r in res[s]["search"]) + de.get("get_of_deleted_found", 0)
        print(f"| {s} | {ing['vectors_per_s']:.0f} | {ing['ack']} | {de['deleted_answered']} "
              f"(count after {de['count_after']}) | {bad} |")


if __name__ == "__main__":
    main()
