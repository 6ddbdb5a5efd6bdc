# What a cohort asks of the search, from the index alone (CPU; numpy): per cohort size, the
# (query, probe) pairs, the distinct cells they probe, how many pairs share a cell and the rows
# the search reads. Usage: python3 cells.py DIR (DIR from `cohort data synth --n 1000000
# --dim 128 --queries 1000 --out DIR` and `cohort index build --device cpu --base
# DIR/base.fvecs --nlist 4096 --out DIR/ivf4096.index`); nprobe 16, the cohorts the queries'
# consecutive runs of 64, 128 and 1 000.
import struct
import sys

import numpy as np

root = sys.argv[1]
f = open(f"{root}/ivf4096.index", "rb").read()
dim, nlist = struct.unpack_from("<II", f, 16)
(n,) = struct.unpack_from("<Q", f, 24)


def aligned(x):
    return (x + 63) // 64 * 64


# Sections after the 64-byte header (crates/knn/src/ivf/format.rs): centroids, offsets, ...
o = 64
cent = np.frombuffer(f, dtype="<f4", count=nlist * dim, offset=o).reshape(nlist, dim)
o = aligned(o + nlist * dim * 4)
lens = np.diff(np.frombuffer(f, dtype="<u8", count=nlist + 1, offset=o)).astype(np.int64)
q = np.fromfile(f"{root}/query.fvecs", dtype="<f4").reshape(-1, dim + 1)[:, 1:]
print(f"n {n}, nlist {nlist}: cell rows mean {lens.mean():.0f}, median {np.median(lens):.0f}, "
      f"p99 {np.percentile(lens, 99):.0f}, max {lens.max()}")
d = (q**2).sum(1)[:, None] - 2 * q @ cent.T + (cent**2).sum(1)[None, :]
probes = np.argsort(d, axis=1)[:, :16]
for m in (64, 128, 1000):
    rows = []
    for s in range(0, len(q) - m + 1, m):
        p = probes[s:s + m].ravel()
        _, cnt = np.unique(p, return_counts=True)
        rows.append((len(p), len(cnt), cnt.max(), (cnt > 1).sum(), lens[p].sum(), lens[p].max()))
    a = np.array(rows, dtype=float).mean(0)
    print(f"cohort {m}: {a[0]:.0f} pairs on {a[1]:.0f} cells ({a[0] / a[1]:.2f} a cell; at most "
          f"{a[2]:.1f} on one; {a[3]:.0f} cells shared), {a[4]:.0f} rows read ({a[4] * dim / 1e6:.1f} MB "
          f"as u8), the longest probed cell {a[5]:.0f} rows")
