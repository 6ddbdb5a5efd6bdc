#!/usr/bin/env python3
"""A roofline of the k-NN tiled plan from a `cohort-lab bench gpu-kernels` JSON (1M x 128, nlist 4096,
as lab/results/issue49-filter-tc-h100/ ran it): per precision, cohort and stage, the time,
its share, FLOP/s against the FP32 CUDA-core, TF32 or INT8 tensor-core peak (H100 SXM data
sheet: 67, 495 and 1979 T(FL)OP/s dense; not measured here) and the least bytes/s the stage must move
against the copy rate the same run measured. Markdown on stdout.

FLOPs: 3 per element (subtract, multiply, add; L2); the tensor-core filter issues TC_PRODUCTS
products of 2 FLOPs (environment, default 2: head x head and head x tail, as it issues them from
41954f4 on for integral queries - `data synth`'s, in every precision - whose TF32 tail is zero;
3 for commits before, which always took the tail product too); the u8 search (integer tensor cores at 28d9a4c on) 2 ops per element
(the multiply-add of q.x; its norms are a small extra). Bytes, the least a stage moves: the filter writes the scores and reads
queries and centroids; a select reads its rows once; the search reads every list that some
query of the cohort probes once, and writes the candidates (the pair scan, `search_pairs`,
reads each pair's rows: every query's own); the re-rank reads its candidate centroids.

usage: scripts/roofline.py GPU_KERNELS_JSON LABEL [N DIM NLIST]"""
import json, sys

if len(sys.argv) < 3:
    sys.exit(__doc__)
d = json.load(open(sys.argv[1])); label = sys.argv[2]
r=d['results']; bw=r['copy_bandwidth_gb_s']
N, DIM, NLIST = (int(x) for x in (sys.argv[3:6] if len(sys.argv) >= 6 else (1_000_000, 128, 4096)))
FP32_PEAK=67e12; TF32_PEAK=495e12; INT8_PEAK=1979e12
import os
TC_PRODUCTS=int(os.environ.get('TC_PRODUCTS', '2'))
elem={'F32':4,'F16':2,'U8':1}
print(f"### {label}: {r['device']}, commit {d['commit'][:7]}, copy {bw:.0f} GB/s")
print("| precision | cohort | stage | ms | share | GFLOP/s (of peak) | GB/s min (of copy) |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for p in r['points']:
    nq=p['cohort']; rows=p['mean_candidate_row']; st=p['tiled_stage_ms']; tot=sum(st.values())
    e=elem[p['precision']]
    probed=1-(1-p['nprobe']/NLIST)**nq
    # The tensor-core filter's select: re-rank a stage of its own up to 55af72b, one launch after.
    tc='rerank_filter' in st or 'select_rerank_filter' in st
    for k,ms in st.items():
        s=ms/1e3
        fl=None; by=None; peak=FP32_PEAK
        if k=='filter':
            if tc: fl=2*TC_PRODUCTS*nq*NLIST*DIM; peak=TF32_PEAK
            else: fl=3*nq*NLIST*DIM
            by=4*(nq*NLIST+NLIST*DIM+nq*DIM)
        elif k in ('select_filter', 'select_filter_plan'): by=4*nq*NLIST
        elif k=='search_pairs':
            # The pair scan reads each (query, probe) pair's rows on its own (no sharing of a
            # cell between queries) and writes the candidates; its dp4a path is on the CUDA
            # cores, so bytes only.
            by=nq*rows*DIM*e+4*nq*rows
        elif k=='select_rerank_filter': by=4*nq*NLIST+4*nq*(p['nprobe']+8)*DIM
        elif k=='search':
            by=N*DIM*e*probed+4*nq*rows
            if p['precision']=='U8': fl=2*nq*rows*DIM; peak=INT8_PEAK
            else: fl=3*nq*rows*DIM
        elif k=='select_search': by=4*nq*rows
        elif k=='rerank_filter': fl=3*nq*(p['nprobe']+8)*DIM; by=4*nq*(p['nprobe']+8)*DIM
        f = '-' if fl is None else f"{fl/s/1e9:,.0f} ({100*fl/s/peak:.0f}%{' TF32' if peak==TF32_PEAK else (' INT8' if peak==INT8_PEAK else '')})"
        b = '-' if by is None else f"{by/s/1e9:,.0f} ({100*by/s/1e9/bw:.0f}%)"
        print(f"| {p['precision']} | {nq} | {k} | {ms:.3f} | {100*ms/tot:.0f}% | {f} | {b} |")
