#!/usr/bin/env python3
"""FAISS-CPU IndexIVFFlat on the same data as `cohort-lab bench knn-cpu`, for comparison.

Usage: python3 bench/faiss_ivf.py --data DIR --nlist 1024 --nprobe 8,16,32,64 --out FILE
Needs: pip install faiss-cpu numpy. Reads DIR/base.fvecs, query.fvecs, groundtruth.ivecs.
Single-query latency is measured one query per call with one OpenMP thread, as Cohort's
`single_thread_*` numbers are; `all_threads_qps` is one batch call over all queries.
"""
import argparse, json, os, platform, subprocess, sys, time

import numpy as np
import faiss


def read_vecs(path, dtype):
    raw = np.fromfile(path, dtype=np.int32)
    dim = raw[0]
    rows = raw.reshape(-1, dim + 1)
    assert (rows[:, 0] == dim).all(), f"{path}: inconsistent dimensions"
    return rows[:, 1:].copy().view(dtype) if dtype != np.int32 else rows[:, 1:].copy()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--nlist", type=int, default=1024)
    ap.add_argument("--nprobe", default="8,16,32,64")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--niter", type=int, default=None,
                    help="k-means iterations of the quantizer's training (FAISS's default: 10)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    xb = read_vecs(os.path.join(a.data, "base.fvecs"), np.float32)
    xq = read_vecs(os.path.join(a.data, "query.fvecs"), np.float32)
    gt = read_vecs(os.path.join(a.data, "groundtruth.ivecs"), np.int32)
    d = xb.shape[1]
    t = time.time()
    quant = faiss.IndexFlatL2(d)
    index = faiss.IndexIVFFlat(quant, d, a.nlist, faiss.METRIC_L2)
    if a.niter is not None:
        index.cp.niter = a.niter
    index.train(xb)
    index.add(xb)
    build_s = time.time() - t
    points = []
    print(f"{'nprobe':>7} {'recall':>9} {'lat_us(1t)':>12} {'qps(all)':>12}")
    for nprobe in [int(x) for x in a.nprobe.split(",")]:
        index.nprobe = nprobe
        faiss.omp_set_num_threads(1)
        lat = []
        found = np.empty((xq.shape[0], a.k), dtype=np.int64)
        for i in range(xq.shape[0]):
            t0 = time.perf_counter()
            _, ids = index.search(xq[i : i + 1], a.k)
            lat.append(time.perf_counter() - t0)
            found[i] = ids[0]
        faiss.omp_set_num_threads(os.cpu_count())
        t0 = time.perf_counter()
        index.search(xq, a.k)
        qps_all = xq.shape[0] / (time.perf_counter() - t0)
        hits = sum(len(set(found[i]) & set(gt[i, : a.k])) for i in range(xq.shape[0]))
        recall = hits / (xq.shape[0] * a.k)
        lat = np.array(lat) * 1e6
        print(f"{nprobe:>7} {recall:>9.4f} {lat.mean():>12.1f} {qps_all:>12.0f}")
        points.append({"nprobe": nprobe, "k": a.k, "recall_at_k": recall,
                       "single_thread_latency_us_mean": float(lat.mean()),
                       "single_thread_latency_us_p99": float(np.percentile(lat, 99)),
                       "single_thread_qps": float(1e6 / lat.mean()), "all_threads_qps": qps_all})
    try:
        commit = subprocess.check_output(["git", "describe", "--always", "--dirty"], text=True).strip()
    except Exception:
        commit = "unknown"
    doc = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                       "cpu_model": next((l.split(":")[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), None)},
           "commit": commit, "command": " ".join(sys.argv),
           "results": {"library": f"faiss-cpu {faiss.__version__}", "n": xb.shape[0], "dim": d, "nlist": a.nlist,
                       "niter": index.cp.niter, "build_seconds": build_s, "per_nprobe": points}}
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=2)
    os.replace(tmp, a.out)


if __name__ == "__main__":
    main()
