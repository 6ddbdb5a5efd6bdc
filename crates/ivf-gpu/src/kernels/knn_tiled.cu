// k-NN for cohorts: the same answers as knn.cu's filter -> search -> reduce (and so as the CPU
// twins stages::filter / search_cell / reduce), computed the way a batch allows.
//
// 1. knn_filter_tiled: query x centroid distances as a tiled product (a block takes QB
//    queries x a chunk of centroids, both staged through shared memory), into `scratch`.
// 2. knn_select_filter: per query, the nprobe nearest cells (threshold or radix select, sorted).
// 3. knn_plan: per query, where each probed cell's candidates start in its candidate row,
//    and how many queries probe each cell.
// 4. knn_scan_items: per cell, where its pairs start and how many work items it makes.
// 5. knn_scatter: the (query, probe) pairs grouped by cell. (Passes of a few queries take
//    stages 3-5 in one launch: knn_plan_one_block.)
// 6. knn_search_tiled: a work item is (cell, up to QB queries probing it, a chunk of its
//    rows): the cell is read once per QB queries instead of once per query, and the
//    distances are a tiled product again (or, for groups of a few queries, a thread per row
//    with the queries in shared memory). Every distance goes to the query's candidate row.
// 7. knn_select_search: per query, the k nearest of its candidates (threshold or radix select, sorted).
//
// Selecting over all candidates at the end, instead of keeping a top-k per block, keeps the
// distance loops free of data-dependent work; the candidate rows cost a write and a read of
// 4 bytes per scanned vector, small beside the vector itself.
//
// The unit's distance loops are in knn_tiled_distances.cuh and its selects in
// knn_tiled_select.cuh, both compiled before this file (kernels.rs, TILED).

// Stage 1 for query group gx (QB queries) x centroid chunk gy. scratch: nq x nlist. Query j
// is row j of `queries`, or row qslot[j] when qslot is given (the persistent engine's queries
// stay in their slots' rows).
template <int METRIC>
__device__ void filter_tiled(const float* __restrict__ queries, int nq, const unsigned* __restrict__ qslot,
                             const float* __restrict__ centroids, int nlist, int dim, int chunk,
                             float* __restrict__ scratch, int gx, int gy, DistSmem& sm) {
    size_t* qrow = sm.qrow;
    size_t* obase = sm.obase;
    const int q0 = gx * QB, c0 = gy * chunk;
    const int nqg = min(QB, nq - q0), nc = min(chunk, nlist - c0);
    if ((int)threadIdx.x < QB) {
        const int q = q0 + threadIdx.x;
        qrow[threadIdx.x] = (size_t)(qslot && q < nq ? qslot[q] : q) * dim;
        obase[threadIdx.x] = (size_t)q * nlist + c0;
    }
    __syncthreads();
    if (nqg > 0 && nc > 0) tile_distances<float, METRIC>(queries, qrow, nqg, centroids, c0, nc, dim, scratch, obase, sm);
    __syncthreads();
}

// Launch arguments, one struct per kernel (declared again in Rust, kernels/tiled.rs; the
// kernel check compares the two layouts).
struct KnnFilterTiledArgs {
    const float* queries;    // nq x dim
    int nq;
    const float* centroids;  // nlist x dim
    int nlist, dim, metric, chunk;
    float* scratch;          // nq x nlist
};

// Grid (ceil(nq / QB), ceil(nlist / chunk)). No launch bound: capped to 48 registers (five
// blocks an SM) it ran ~20% slower at 8192 queries on the H200 than at its own 56 (four).
extern "C" __global__ void knn_filter_tiled(const KnnFilterTiledArgs a) {
    __shared__ DistSmem sm;
    if (a.metric == 0)
        filter_tiled<0>(a.queries, a.nq, nullptr, a.centroids, a.nlist, a.dim, a.chunk, a.scratch, blockIdx.x, blockIdx.y, sm);
    else
        filter_tiled<1>(a.queries, a.nq, nullptr, a.centroids, a.nlist, a.dim, a.chunk, a.scratch, blockIdx.x, blockIdx.y, sm);
}

struct KnnSelectFilterArgs {
    const float* scratch;  // nq x nlist
    int nlist, nprobe;
    unsigned* probes;      // nq x nprobe
};

// Stage 2. Block of NT threads per query: probes (nq x nprobe), nearest cell first.
template <int NT>
__device__ void select_filter(const KnnSelectFilterArgs& a) {
    const size_t q = blockIdx.x;
    CellIds src{a.scratch + q * a.nlist, a.nlist};
    block_select<NT>(src, a.nprobe, a.probes + q * a.nprobe, (float*)0);
}
extern "C" __global__ void knn_select_filter(const KnnSelectFilterArgs a) { select_filter<BLOCK>(a); }
// For cohorts too few to fill the SMs with BLOCK-thread blocks (as knn_select_search_wide).
extern "C" __global__ void __launch_bounds__(WIDE_BLOCK) knn_select_filter_wide(const KnnSelectFilterArgs a) {
    select_filter<WIDE_BLOCK>(a);
}

// Stage 3 for one query (one thread): poff[p] = where probe p's candidates start in the
// query's candidate row (`probes`, `poff`: the query's rows of nprobe entries); returns the
// row's length; counts[cell] += 1 (counts zeroed).
__device__ unsigned plan_query(const unsigned* __restrict__ probes, int nprobe,
                               const unsigned long long* __restrict__ offsets, unsigned* __restrict__ poff,
                               unsigned* __restrict__ counts) {
    unsigned run = 0;
    for (int p = 0; p < nprobe; ++p) {
        const unsigned c = probes[p];
        poff[p] = run;
        run += (unsigned)(offsets[c + 1] - offsets[c]);
        atomicAdd(&counts[c], 1u);
    }
    return run;
}

// The queries the u8 warp search reads, made by the plan where the host gives q8 (else null):
// query q's row as bytes in q8 (row q, dim bytes; dim a multiple of 32 up to TC_MAX_DIM) and
// its squared norm in q8norm[q], or -1 where an element is not an integer in 0..=255 (that
// query's groups are summed in f32). The whole warp. Made once a cohort: the warp search staged
// each query from f32 again for each of its work items (~70 a query at a cohort of 64), and the
// staging's loads, conversions and shared-memory stores were most of an item's instructions.
__device__ void query_bytes_warp(const float* __restrict__ queries, int dim, unsigned char* __restrict__ q8,
                                 int* __restrict__ q8norm, int q) {
    if (!q8) return;
    const int lane = threadIdx.x % 32;
    const float* src = queries + (size_t)q * dim;
    unsigned norm = 0;
    int bad = 0;
    for (int d = 4 * lane; d < dim; d += 128) {
        const unsigned w = pack_u8x4(make_float4(src[d], src[d + 1], src[d + 2], src[d + 3]), bad);
        *reinterpret_cast<unsigned*>(q8 + (size_t)q * dim + d) = w;
        norm = __dp4a(w, w, norm);
    }
    norm = warp_sum(norm);
    if (__any_sync(FULL, bad)) norm = ~0u;
    if (lane == 0) q8norm[q] = (int)norm;
}

struct KnnPlanArgs {
    const unsigned* probes;             // nq x nprobe
    int nq, nprobe;
    const unsigned long long* offsets;  // nlist + 1
    unsigned* poff;                     // nq x nprobe
    unsigned* totals;                   // nq
    unsigned* counts;                   // nlist, zeroed
    const float* queries;               // nq x dim: query_bytes_warp's, where q8 is given
    int dim;
    unsigned char* q8;
    int* q8norm;
};

// plan_query by a warp: the lanes take 32 probes a turn, so a query waits for one chain of
// loads (probe, then its cell's offsets) a turn instead of one a probe; a warp prefix sum places
// them. Returns the row's length to every lane. counts may be null (the pair scan counts no
// cells); pfirst, where given (the pair scan), gets each probe's cell's first row (row ids are
// 32-bit).
__device__ unsigned plan_query_warp(const unsigned* __restrict__ probes, int nprobe,
                                    const unsigned long long* __restrict__ offsets, unsigned* __restrict__ poff,
                                    unsigned* __restrict__ counts, unsigned* __restrict__ pfirst = nullptr) {
    const int lane = threadIdx.x % 32;
    unsigned run = 0;
    for (int p0 = 0; p0 < nprobe; p0 += 32) {
        const int p = p0 + lane;
        unsigned len = 0, c = 0;
        if (p < nprobe) {
            c = probes[p];
            len = (unsigned)(offsets[c + 1] - offsets[c]);
            if (counts) atomicAdd(&counts[c], 1u);
            if (pfirst) pfirst[p] = (unsigned)offsets[c];
        }
        const unsigned incl = warp_inclusive_scan(len);
        if (p < nprobe) poff[p] = run + incl - len;
        run += __shfl_sync(FULL, incl, 31);
    }
    return run;
}

// Warp per query: totals[q] = the query's candidate row length. At cohorts of 64 the thread
// per query (plan_query) took 10-20 us, one dependent load chain per probe after another.
extern "C" __global__ void knn_plan(const KnnPlanArgs a) {
    const int q = blockIdx.x * (BLOCK / 32) + threadIdx.x / 32;
    if (q >= a.nq) return;  // the whole warp: q is the same on its lanes
    const size_t b = (size_t)q * a.nprobe;
    const unsigned total = plan_query_warp(a.probes + b, a.nprobe, a.offsets, a.poff + b, a.counts);
    if (threadIdx.x % 32 == 0) a.totals[q] = total;
    query_bytes_warp(a.queries, a.dim, a.q8, a.q8norm, q);
}

// Row chunks and work items (query groups x row chunks) of a cell. In 32 bits (a cell's rows
// are row ids, which are 32-bit): a 64-bit division is a long software routine, and scan_items
// divides once a cell.
__device__ __forceinline__ unsigned cell_chunks(unsigned long long len, int chunk) {
    return ((unsigned)len + (unsigned)chunk - 1) / (unsigned)chunk;
}
__device__ __forceinline__ unsigned cell_items(unsigned pairs, unsigned long long len, int chunk) {
    return ((pairs + QB - 1) / QB) * cell_chunks(len, chunk);
}

// Stage 4 (the whole block of NT threads): cursor = exclusive prefix of counts (where each
// cell's pairs start); items = exclusive prefix of work items per cell, items[nlist] = the
// total. Each warp takes a contiguous run of cells 32 at a time, its lanes on neighbouring cells
// so every load is coalesced: it sums its run, the warps' sums are scanned, and it walks its run
// again placing each cell. With a run of cells a thread (uncoalesced, one load chain after
// another, a 64-bit division a cell) this took 16 us at 4 096 cells and 71 us at 16 384; with
// 8 warps of runs, 9-11 us and 28 us (a92110f, H100), the runs' load steps one after another.
template <int NT>
__device__ void scan_items(const unsigned* __restrict__ counts, int nlist,
                           const unsigned long long* __restrict__ offsets, int chunk,
                           unsigned* __restrict__ cursor, unsigned* __restrict__ items) {
    constexpr int NW = NT / 32;
    __shared__ unsigned warp_tot[NW];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int per = ((nlist + 31) / 32 + NW - 1) / NW * 32;  // cells a warp, whole steps
    const int lo = min(nlist, warp * per), hi = min(nlist, lo + per);
    unsigned pairs = 0, work = 0;
#pragma unroll 4
    for (int c = lo + lane; c < hi; c += 32) {
        const unsigned n = counts[c];
        pairs += n;
        work += cell_items(n, offsets[c + 1] - offsets[c], chunk);
    }
    pairs = warp_sum(pairs);
    work = warp_sum(work);
    // The warps before this one: lane 0 alone carries its warp's sum into the block's scan.
    const unsigned mine_p = lane == 0 ? pairs : 0, mine_w = lane == 0 ? work : 0;
    unsigned run_p = __shfl_sync(FULL, block_inclusive_scan(mine_p, warp_tot) - mine_p, 0);
    unsigned run_w = __shfl_sync(FULL, block_inclusive_scan(mine_w, warp_tot) - mine_w, 0);
#pragma unroll 4
    for (int c0 = lo; c0 < hi; c0 += 32) {
        const int c = c0 + lane;
        unsigned n = 0, w = 0;
        if (c < hi) {
            n = counts[c];
            w = cell_items(n, offsets[c + 1] - offsets[c], chunk);
        }
        const unsigned ip = warp_inclusive_scan(n), iw = warp_inclusive_scan(w);
        if (c < hi) {
            cursor[c] = run_p + ip - n;
            items[c] = run_w + iw - w;
        }
        run_p += __shfl_sync(FULL, ip, 31);
        run_w += __shfl_sync(FULL, iw, 31);
    }
    // Every lane of the last warp holds the total (its run, maybe empty, ends at nlist).
    if (threadIdx.x == NT - 1) items[nlist] = run_w;
    __syncthreads();
}

struct KnnScanItemsArgs {
    const unsigned* counts;             // nlist
    int nlist;
    const unsigned long long* offsets;  // nlist + 1
    int chunk;
    unsigned* cursor;                   // nlist
    unsigned* items;                    // nlist + 1
    unsigned* next_item;                // 1: knn_search_tiled's work counter, zeroed here
};

// One block of WIDE_BLOCK threads (32 warps), so at 4 096 cells each warp's run is one
// unrolled step of loads a pass (a step of 4 with 8 warps).
extern "C" __global__ void __launch_bounds__(WIDE_BLOCK) knn_scan_items(const KnnScanItemsArgs a) {
    if (threadIdx.x == 0) *a.next_item = 0;
    scan_items<WIDE_BLOCK>(a.counts, a.nlist, a.offsets, a.chunk, a.cursor, a.items);
}

struct KnnScatterArgs {
    const unsigned* probes;  // pairs
    int pairs;
    unsigned* cursor;        // nlist
    unsigned* order;         // pairs
};

// Stage 5. order: the pair indices (query * nprobe + probe) cell by cell; cursor[c] ends at
// the end of cell c's range.
extern "C" __global__ void knn_scatter(const KnnScatterArgs a) {
    for (int b = blockIdx.x * blockDim.x + threadIdx.x; b < a.pairs; b += gridDim.x * blockDim.x) {
        const unsigned pos = atomicAdd(&a.cursor[a.probes[b]], 1u);
        a.order[pos] = (unsigned)b;
    }
}

struct KnnPlanOneBlockArgs {
    const unsigned* probes;             // nq x nprobe
    int nq, nprobe, nlist, chunk;
    const unsigned long long* offsets;  // nlist + 1
    unsigned* poff;                     // nq x nprobe
    unsigned* totals;                   // nq
    unsigned* counts;                   // nlist, zeroed here
    unsigned* cursor;                   // nlist
    unsigned* items;                    // nlist + 1
    unsigned* next_item;                // 1: the search's work counter, zeroed here
    unsigned* order;                    // nq x nprobe
    const float* queries;               // nq x dim: query_bytes_warp's, where q8 is given
    int dim;
    unsigned char* q8;
    int* q8norm;
};

// Stages 3-5 (and the zeroed counts) in one block of WIDE_BLOCK threads, for passes of a few
// queries (the host's PLAN_ONE_BLOCK_MAX_QUERIES): at cohort 64 the four launches each did a
// microsecond or two of work and the stages took 26 us with the gaps between them (a92110f,
// H100). A warp plans a query at a time; the block's barriers order the stages, as the
// launches did (the counts and cursors are read only after the barrier that follows their
// last atomic).
extern "C" __global__ void __launch_bounds__(WIDE_BLOCK) knn_plan_one_block(const KnnPlanOneBlockArgs a) {
    for (int c = threadIdx.x; c < a.nlist; c += WIDE_BLOCK) a.counts[c] = 0;
    if (threadIdx.x == 0) *a.next_item = 0;
    __syncthreads();
    for (int q = threadIdx.x / 32; q < a.nq; q += WIDE_BLOCK / 32) {
        const size_t b = (size_t)q * a.nprobe;
        const unsigned total = plan_query_warp(a.probes + b, a.nprobe, a.offsets, a.poff + b, a.counts);
        if (threadIdx.x % 32 == 0) a.totals[q] = total;
        query_bytes_warp(a.queries, a.dim, a.q8, a.q8norm, q);
    }
    __syncthreads();
    scan_items<WIDE_BLOCK>(a.counts, a.nlist, a.offsets, a.chunk, a.cursor, a.items);  // ends in a barrier
    for (int b = threadIdx.x; b < a.nq * a.nprobe; b += WIDE_BLOCK) {
        const unsigned pos = atomicAdd(&a.cursor[a.probes[b]], 1u);
        a.order[pos] = (unsigned)b;
    }
}

// The cell of work item `it`: the last c with items[c] <= it (a cell with no items has
// items[c] == items[c + 1] and is skipped). Each warp finds it alone, 32 probes a round, so
// 3 dependent loads find it among up to 32 768 cells where a binary search made 12 to 15 (at
// cohorts of ~1 000 a work item is a few microseconds of rows, and the lookup was a chain of
// cached loads in front of each). Ends for any `items`, sorted or not.
__device__ __forceinline__ int item_cell(const unsigned* __restrict__ items, int nlist, unsigned it) {
    const unsigned lane = threadIdx.x % 32;
    int lo = 0, hi = nlist - 1;  // items[lo] <= it (items[0] is 0)
    while (lo < hi) {
        const unsigned span = (unsigned)(hi - lo + 1);
        const int p = lo + (int)(lane * span / 32);  // lane 0 probes lo itself
        const unsigned le = __ballot_sync(FULL, lane == 0 || items[p] <= it);
        const int last = 31 - __clz(le);  // the last lane whose probe is <= it
        const int from = __shfl_sync(FULL, p, last), next = __shfl_sync(FULL, p, min(last + 1, 31));
        hi = last == 31 ? hi : next - 1;
        lo = from;
    }
    return lo;
}

// Stage 6. Work items come from a counter in `next_item` (the batch kernels: a block takes the
// next item when it finishes one, so cells of unequal length even out across the blocks), or,
// where it is null, blocks stride over them: items vb0, vb0 + vstep, ... (the persistent
// kernel's groups). A pair b is probe b % pstride of query b / pstride (pstride:
// the probes row length, nprobe or the persistent engine's max_probe); the query's vector is
// row q of `queries`, or row qslot[q] when given. cand: query q's candidate row starts at
// q * stride; probe p's rows at poff[q * pstride + p]. Cell c's rows are rows offsets[c].. of
// `vectors`, or, where `list_rows` is given (an index sharded over devices, read in place), the
// rows at address list_rows[c] (another device's memory, read over peer access); offsets then
// give only the cells' lengths and the candidate layout.
template <typename T, int METRIC>
__device__ void search_tiled(const float* __restrict__ queries, const unsigned* __restrict__ qslot,
                             const T* __restrict__ vectors, const unsigned long long* __restrict__ offsets,
                             const unsigned long long* __restrict__ list_rows, int nlist,
                             int pstride, int dim, int chunk, const unsigned* __restrict__ counts,
                             const unsigned* __restrict__ cursor, const unsigned* __restrict__ items,
                             const unsigned* __restrict__ order, const unsigned* __restrict__ poff,
                             float* __restrict__ cand, size_t stride, unsigned vb0, unsigned vstep,
                             unsigned* next_item, DistSmem& sm) {
    size_t* qrow = sm.qrow;
    size_t* obase = sm.obase;
    float* qsm = sm.qsm;
    const unsigned total = items[nlist];
    if (next_item) {
        if (threadIdx.x == 0) sm.next_item = atomicAdd(next_item, 1u);
        __syncthreads();
    }
    for (unsigned it = next_item ? sm.next_item : vb0; it < total; it = next_item ? sm.next_item : it + vstep) {
        const int c = item_cell(items, nlist, it);
        const unsigned long long start = offsets[c], len = offsets[c + 1] - start;
        const unsigned chunks = cell_chunks(len, chunk);
        const unsigned local = it - items[c], g = local / chunks, h = local % chunks;
        const unsigned first = cursor[c] - counts[c] + g * QB;
        const int nqg = min(QB, (int)(counts[c] - g * QB));
        if ((int)threadIdx.x < nqg) {
            const unsigned b = order[first + threadIdx.x];
            const size_t q = b / pstride;
            qrow[threadIdx.x] = (size_t)(qslot ? qslot[q] : q) * dim;
            obase[threadIdx.x] = q * stride + poff[b] + (size_t)h * chunk;
        }
        __syncthreads();
        // Every thread has read this item from sm.next_item: the next one is taken now, its
        // atomic's latency behind this item's rows, and stored before the item's last barrier.
        const unsigned next = next_item && threadIdx.x == 0 ? atomicAdd(next_item, 1u) : 0u;
        const int nr = (int)min((unsigned long long)chunk, len - (unsigned long long)h * chunk);
        const T* rows = list_rows ? (const T*)list_rows[c] : vectors;
        const size_t r0 = (list_rows ? 0 : start) + (size_t)h * chunk;
        bool done = false;
#if __CUDA_ARCH__ >= 800
        if constexpr (IsU8<T>::value) {
            // Integral queries on u8 rows: the exact integer tensor-core product, whatever the
            // group's size (the staging buffer is the row path's, unused on this item).
            unsigned char* qs8 = reinterpret_cast<unsigned char*>(qsm);
            int* q2 = reinterpret_cast<int*>(qs8 + QB * (TC_MAX_DIM + TC_MAX_PAD));
            if (dim % 32 == 0 && dim <= TC_MAX_DIM && (reinterpret_cast<size_t>(queries) & 15) == 0 &&
                stage_u8_queries(queries, qrow, nqg, dim, qs8, q2)) {
                tc_distances_u8<METRIC>(reinterpret_cast<const unsigned char*>(rows), r0, nr, dim, nqg, qs8, q2,
                                        cand, obase);
                done = true;
            }
        }
#endif
        // Few queries on this cell: a thread per row; else the 32-query tile.
        const bool rows_path = nqg <= ROW_PATH_MAX && dim <= ROW_PATH_DIM;
        if (done) {
        } else if (!rows_path) {
            tile_distances<T, METRIC>(queries, qrow, nqg, rows, r0, nr, dim, cand, obase, sm);
        } else if (nqg == 1) {
            row_distances<T, METRIC, 1>(queries, qrow, nqg, rows, r0, nr, dim, cand, obase, qsm);
        } else if (nqg == 2) {
            row_distances<T, METRIC, 2>(queries, qrow, nqg, rows, r0, nr, dim, cand, obase, qsm);
        } else if (nqg <= 4) {
            row_distances<T, METRIC, 4>(queries, qrow, nqg, rows, r0, nr, dim, cand, obase, qsm);
        } else {
            row_distances<T, METRIC, ROW_PATH_MAX>(queries, qrow, nqg, rows, r0, nr, dim, cand, obase, qsm);
        }
        if (next_item && threadIdx.x == 0) sm.next_item = next;
        __syncthreads();
    }
}

struct KnnSearchTiledArgs {
    const float* queries;               // nq x dim
    const void* vectors;                // the index's rows, of the kernel's element type
    const unsigned long long* offsets;  // nlist + 1
    int nlist, nprobe, dim, chunk, metric;
    const unsigned* counts;
    const unsigned* cursor;
    const unsigned* items;
    const unsigned* order;
    const unsigned* poff;
    float* cand;                        // nq x stride
    unsigned long long stride;
    unsigned* next_item;                // the work counter knn_scan_items zeroed
    const unsigned char* q8;            // query_bytes_warp's bytes and norms (the u8 warp search)
    const int* q8norm;
};

// At most 128 registers, so two 256-thread blocks fit an SM (the grid-stride search depends on
// that occupancy: at 132 registers one block fits and the scan runs ~1.5x slower on the H200).
#define SEARCH_TILED(NAME, T, MIN_BLOCKS)                                                                             \
    extern "C" __global__ void __launch_bounds__(BLOCK, MIN_BLOCKS) NAME(const KnnSearchTiledArgs a) {                \
        __shared__ DistSmem sm;                                                                                       \
        const T* vectors = (const T*)a.vectors;                                                                       \
        if (a.metric == 0)                                                                                            \
            search_tiled<T, 0>(a.queries, nullptr, vectors, a.offsets, nullptr, a.nlist, a.nprobe, a.dim, a.chunk,    \
                               a.counts, a.cursor, a.items, a.order, a.poff, a.cand, a.stride, blockIdx.x, gridDim.x, \
                               a.next_item, sm);                                                              \
        else                                                                                                          \
            search_tiled<T, 1>(a.queries, nullptr, vectors, a.offsets, nullptr, a.nlist, a.nprobe, a.dim, a.chunk,    \
                               a.counts, a.cursor, a.items, a.order, a.poff, a.cand, a.stride, blockIdx.x, gridDim.x, \
                               a.next_item, sm);                                                              \
    }
SEARCH_TILED(knn_search_tiled, float, 2)
SEARCH_TILED(knn_search_tiled_f16, unsigned short, 2)
SEARCH_TILED(knn_search_tiled_u8, unsigned char, U8_MIN_BLOCKS)

// ---- Stage 6 for u8 storage a warp per work item (knn_search_warp_u8) ----
//
// At cohorts of ~1 000 a work item is one cell's ~250 rows for a few queries, and a block of
// 8 warps working one item at a time waits on each item's chain of dependent loads (its
// cell, its starts, the pair order, the query rows, then the rows) with barriers between
// (Nsight Compute at cohort 1 024: no eligible warp in 61% of cycles, DRAM at 42%). Here each
// warp takes its own items and has no barrier: an SM's 32 warps each wait on their own chain,
// so many more loads are in flight. The distances are the block kernel's, bit for bit: the
// integer product (queries all integers in 0..=255), or else a lane per row summing in
// dimension order as row_distances does.
//
// The queries come as bytes with their norms (query_bytes_warp, once a cohort, in the plan), and
// a warp reads its A fragments straight from them (a cohort's query bytes stay in L1/L2): at
// a cohort of 64 the per-item staging of each query from f32 was most of an item's
// instructions. A warp's first item is its index in the grid (U8_MIN_BLOCKS blocks an SM, all
// resident), the rest come from the work counter, so the counter sees no burst of thousands of
// atomics at the start, and none at all when the items are no more than the warps.
#define WQ 16  // queries a warp multiplies at a time (one 16-row m-tile)

// A warp's scratch for the f32 path: the group's query rows and candidate bases.
struct WarpRowsF32 {
    unsigned rowq[QB];
    unsigned long long rowo[QB];
};

// A warp's work items (the batch plan's search with u8 rows, dim a multiple of 32 up to
// TC_MAX_DIM: the host picks it only then): item w of the grid's W warps first, then
// W + the work counter (zeroed by the plan) while items remain.
template <int METRIC, int RG>
__device__ void search_warp_u8(const KnnSearchTiledArgs& a, WarpRowsF32& f32) {
    const int lane = threadIdx.x % 32, g = lane >> 2;
    const unsigned total = a.items[a.nlist];
    const unsigned warps = gridDim.x * WARPS;
    const unsigned char* vectors = (const unsigned char*)a.vectors;
    unsigned it = blockIdx.x * WARPS + threadIdx.x / 32;
    while (it < total) {
        const int c = item_cell(a.items, a.nlist, it);
        // The next item is taken now (where the counter has any); its atomic's latency hides
        // behind this item.
        const unsigned next = lane == 0 && total > warps ? warps + atomicAdd(a.next_item, 1u) : total;
        const unsigned long long start = a.offsets[c], len = a.offsets[c + 1] - start;
        const unsigned chunks = cell_chunks(len, a.chunk);
        const unsigned local = it - a.items[c], grp = local / chunks, h = local % chunks;
        const unsigned first = a.cursor[c] - a.counts[c] + grp * QB;
        const int nqg = min(QB, (int)(a.counts[c] - grp * QB));
        unsigned qidx = 0;
        unsigned long long ob = 0;
        int qn = 0;
        if (lane < nqg) {
            const unsigned b = a.order[first + lane];
            qidx = b / (unsigned)a.nprobe;
            ob = (unsigned long long)qidx * a.stride + a.poff[b] + (unsigned long long)h * a.chunk;
            qn = a.q8norm[qidx];
        }
        const int nr = (int)min((unsigned long long)a.chunk, len - (unsigned long long)h * a.chunk);
        const size_t r0 = start + (size_t)h * a.chunk;
        if (!__any_sync(FULL, qn < 0)) {
            for (int j0 = 0; j0 < nqg; j0 += WQ) {
                int qo[2], q2[2];
                unsigned long long ob2[2];
#pragma unroll
                for (int hh = 0; hh < 2; ++hh) {
                    const int j = j0 + g + 8 * hh;  // < QB = 32, so a lane of this warp
                    const unsigned qj = __shfl_sync(FULL, qidx, j & 31);
                    q2[hh] = __shfl_sync(FULL, qn, j & 31);
                    ob2[hh] = __shfl_sync(FULL, ob, j & 31);
                    qo[hh] = j < nqg ? (int)qj * a.dim : -1;  // < cap x dim bytes, below 2^31
                }
                warp_rows_u8<METRIC, RG>(vectors, r0, nr, a.dim, a.q8, qo, q2, a.cand, ob2);
            }
        } else {
            // Queries off the byte integers: the group's rows and bases into the scratch.
            __syncwarp();
            if (lane < nqg) {
                f32.rowq[lane] = qidx;
                f32.rowo[lane] = ob;
            }
            __syncwarp();
            warp_rows_f32<METRIC>(a.queries, vectors, r0, nr, a.dim, nqg, f32.rowq, f32.rowo, a.cand);
            __syncwarp();
        }
        it = __shfl_sync(FULL, next, 0);
    }
}

// Bounded like the block kernel's u8 instance (U8_MIN_BLOCKS blocks of 8 warps an SM).
#define SEARCH_WARP_U8(NAME, RG)                                                                          \
    extern "C" __global__ void __launch_bounds__(BLOCK, U8_MIN_BLOCKS) NAME(const KnnSearchTiledArgs a) { \
        __shared__ WarpRowsF32 f32[WARPS];                                                                \
        if (a.metric == 0) search_warp_u8<0, RG>(a, f32[threadIdx.x / 32]);                               \
        else search_warp_u8<1, RG>(a, f32[threadIdx.x / 32]);                                             \
    }
SEARCH_WARP_U8(knn_search_warp_u8, 1)
SEARCH_WARP_U8(knn_search_warp_u8_x2, 2)

// ---- Stages 2-6 for small cohorts, pair by pair (knn_select_filter_plan_wide, knn_search_pairs_u8) ----
//
// At a cohort of 64 the (query, probe) pairs hardly share a cell (1 024 pairs on ~908 cells,
// lab/results/knn-filter-rows/), so grouping them by cell saves ~11% of the rows and costs
// the one-block plan (count, scan, scatter: ~12 us on one SM) and a chain of ~6 dependent
// loads in front of each work item's first row. Here the filter's select also lays out each
// query's candidate row (its block already holds the query's probes) and makes its bytes, and
// the search gives each warp a run of one query's candidate row: no plan kernel, and three
// rounds of loads (the row lengths, the query's row layout with its cells' first rows, then
// rows) before the first row. The distances are search_warp_u8's, bit for bit.

struct KnnSelectFilterPlanArgs {
    const float* scratch;               // nq x nlist
    int nlist, nprobe;
    unsigned* probes;                   // nq x nprobe
    const unsigned long long* offsets;  // nlist + 1
    unsigned* poff;                     // nq x nprobe
    unsigned* pfirst;                   // nq x nprobe: each probe's cell's first row
    unsigned* totals;                   // nq
    const float* queries;               // nq x dim
    int dim;
    unsigned char* q8;                  // nq x dim: query_bytes_warp's
    int* q8norm;                        // nq
};

// Block per query: the nprobe nearest cells (as knn_select_filter_wide), then, after the
// barrier that makes them visible to the block, warp 0 lays out the candidate row
// (plan_query_warp, no cell counts) and warp 1 makes the query's bytes.
extern "C" __global__ void __launch_bounds__(WIDE_BLOCK) knn_select_filter_plan_wide(const KnnSelectFilterPlanArgs a) {
    const size_t q = blockIdx.x;
    unsigned* probes = a.probes + q * a.nprobe;
    CellIds src{a.scratch + q * a.nlist, a.nlist};
    block_select<WIDE_BLOCK>(src, a.nprobe, probes, (float*)0);
    __syncthreads();
    const int warp = threadIdx.x / 32;
    if (warp == 0) {
        const unsigned total =
            plan_query_warp(probes, a.nprobe, a.offsets, a.poff + q * a.nprobe, nullptr, a.pfirst + q * a.nprobe);
        if (threadIdx.x == 0) a.totals[q] = total;
    } else if (warp == 1) {
        query_bytes_warp(a.queries, a.dim, a.q8, a.q8norm, (int)q);
    }
}

struct KnnSearchPairsArgs {
    const float* queries;               // nq x dim (the f32 sums of queries off the byte integers)
    const void* vectors;                // u8 rows
    int nq, nprobe, dim, metric;        // nq <= PAIR_MAX_QUERIES
    const unsigned* poff;               // nq x nprobe
    const unsigned* pfirst;             // nq x nprobe
    const unsigned* totals;             // nq
    float* cand;                        // nq x stride
    unsigned long long stride;
    const unsigned char* q8;            // nq x dim
    const int* q8norm;                  // nq
};

// Rows [r0, r0 + nr) against query q (qn: its norm, or -1 when it is not all byte integers),
// distances into out[ob + r]: by one_query_rows_u8 where the dimension allows, else the mma
// path with the query in m-tile row 0, and in f32 (row_distances' order) for qn < 0.
template <int METRIC, int RG>
__device__ void pair_rows_u8(const KnnSearchPairsArgs& a, const unsigned char* __restrict__ vectors, size_t r0,
                             int nr, unsigned q, int qn, unsigned long long ob) {
    const int lane = threadIdx.x % 32;
    if (qn < 0) {
        const unsigned rowq[1] = {q};
        const unsigned long long rowo[1] = {ob};
        warp_rows_f32<METRIC>(a.queries, vectors, r0, nr, a.dim, 1, rowq, rowo, a.cand);
    } else if (one_query_rows(a.dim)) {
        const uint4 qw = __ldg(reinterpret_cast<const uint4*>(a.q8 + (size_t)q * a.dim + 16 * (lane & (a.dim / 16 - 1))));
        switch (a.dim) {
        case 32: one_query_rows_u8<METRIC, 2, 4 * RG>(vectors, r0, nr, qw, qn, a.cand, ob); break;
        case 64: one_query_rows_u8<METRIC, 4, 4 * RG>(vectors, r0, nr, qw, qn, a.cand, ob); break;
        case 128: one_query_rows_u8<METRIC, 8, 4 * RG>(vectors, r0, nr, qw, qn, a.cand, ob); break;
        default: one_query_rows_u8<METRIC, 16, 4 * RG>(vectors, r0, nr, qw, qn, a.cand, ob); break;
        }
    } else {
        const int qo[2] = {lane < 4 ? (int)q * a.dim : -1, -1};
        const int q2[2] = {qn, 0};
        const unsigned long long ob2[2] = {ob, 0};
        warp_rows_u8<METRIC, RG>(vectors, r0, nr, a.dim, a.q8, qo, q2, a.cand, ob2);
    }
}

// A warp's copy of the pass's row lengths and the inclusive prefix of their runs (in shared
// memory: in registers they pushed the row loop past the 64 registers of the launch bound).
struct PairRuns {
    unsigned len[PAIR_MAX_QUERIES];
    unsigned incl[PAIR_MAX_QUERIES];
};

// The pass's candidate rows cut into runs of `run` positions, a warp a run. Every warp first
// reads the queries' row lengths (PAIR_MAX_QUERIES / 32 a lane) and derives the same run and
// the same prefix of runs per query: run = the rows over (warps - nq), rounded up to 16, so
// the runs (at most rows / run + nq) are no more than the warps and none waits for a second.
// A run may cross probes: lane p holds probe p's span of the query's row and its cell's first
// row (laid out by the select: no load of the cell's offsets here), and the warp walks the
// probes the run overlaps.
template <int METRIC, int RG>
__device__ void search_pairs_u8(const KnnSearchPairsArgs& a, PairRuns& sm) {
    constexpr int PQ = PAIR_MAX_QUERIES / 32;
    const int lane = threadIdx.x % 32;
    const unsigned char* vectors = (const unsigned char*)a.vectors;
    const unsigned warps = gridDim.x * WARPS;
    unsigned rows = 0;
#pragma unroll
    for (int i = 0; i < PQ; ++i) {
        const int q = 32 * i + lane;
        sm.len[q] = q < a.nq ? a.totals[q] : 0u;
        rows += sm.len[q];
    }
    rows = warp_sum(rows);
    const unsigned spare = warps > (unsigned)a.nq ? warps - (unsigned)a.nq : 1u;
    const unsigned run = max(16u, ((rows + spare - 1) / spare + 15) / 16 * 16);
    unsigned carry = 0;
#pragma unroll
    for (int i = 0; i < PQ; ++i) {
        const int q = 32 * i + lane;
        sm.incl[q] = carry + warp_inclusive_scan((sm.len[q] + run - 1) / run);
        carry = __shfl_sync(FULL, sm.incl[q], 31);
    }
    __syncwarp();
    for (unsigned v = blockIdx.x * WARPS + threadIdx.x / 32; v < carry; v += warps) {
        // The query holding run v: the first whose inclusive prefix passes v.
        unsigned q = 0;
#pragma unroll
        for (int i = PQ - 1; i >= 0; --i) {
            const unsigned hit = __ballot_sync(FULL, sm.incl[32 * i + lane] > v);
            if (hit) q = 32 * i + __ffs(hit) - 1;
        }
        const unsigned total = sm.len[q], before = sm.incl[q] - (total + run - 1) / run;
        const unsigned pos0 = (v - before) * run, pos1 = min(pos0 + run, total);
        const int qn = a.q8norm[q];
        const size_t row = (size_t)q * a.nprobe;
        for (int p0 = 0; p0 < a.nprobe; p0 += 32) {
            const int p = p0 + lane;
            unsigned lo = ~0u, hi = ~0u, first = 0;  // probe p's span of the row, its cell's first row
            if (p < a.nprobe) {
                lo = a.poff[row + p];
                first = a.pfirst[row + p];
                if (p + 1 < a.nprobe) hi = a.poff[row + p + 1];
            }
            if (hi == ~0u) hi = total;
            const bool overlaps = lo < pos1 && hi > pos0 && lo < hi;
            for (unsigned m = __ballot_sync(FULL, overlaps); m; m &= m - 1) {
                const int src = __ffs(m) - 1;
                const unsigned s_lo = __shfl_sync(FULL, lo, src), s_hi = __shfl_sync(FULL, hi, src);
                const unsigned s_first = __shfl_sync(FULL, first, src);
                const unsigned from = max(pos0, s_lo), to = min(pos1, s_hi);
                pair_rows_u8<METRIC, RG>(a, vectors, s_first + (from - s_lo), (int)(to - from), q, qn,
                                         (unsigned long long)q * a.stride + from);
            }
        }
    }
}

// Bounded as the warp search (U8_MIN_BLOCKS blocks of 8 warps an SM; the grid is at most those).
#define SEARCH_PAIRS_U8(NAME, RG)                                                                         \
    extern "C" __global__ void __launch_bounds__(BLOCK, U8_MIN_BLOCKS) NAME(const KnnSearchPairsArgs a) { \
        __shared__ PairRuns sm[WARPS];                                                                    \
        if (a.metric == 0) search_pairs_u8<0, RG>(a, sm[threadIdx.x / 32]);                               \
        else search_pairs_u8<1, RG>(a, sm[threadIdx.x / 32]);                                             \
    }
SEARCH_PAIRS_U8(knn_search_pairs_u8, 1)
SEARCH_PAIRS_U8(knn_search_pairs_u8_x2, 2)

// Stage 7 for one query (the whole block): the k nearest of its candidate row `cand`
// (`total` long; probe p's rows start at poff[p], of cell probes[p]), sorted.
template <int NT>
__device__ void select_query(const float* __restrict__ cand, unsigned total, const unsigned* __restrict__ poff,
                             const unsigned* __restrict__ probes, int nprobe,
                             const unsigned long long* __restrict__ offsets, const unsigned* __restrict__ row_ids,
                             int k, unsigned* __restrict__ out_ids, float* __restrict__ out_dist) {
    __shared__ unsigned s_poff[SEL_MAX];
    for (int p = threadIdx.x; p < nprobe; p += NT) s_poff[p] = poff[p];
    __syncthreads();
    RowIds src{cand, (int)total, s_poff, probes, nprobe, offsets, row_ids};
    block_select<NT>(src, k, out_ids, out_dist);
    __syncthreads();
}

// Block per query.
template <int NT>
__device__ void select_search(const float* __restrict__ cand, unsigned long long stride,
                              const unsigned* __restrict__ totals, const unsigned* __restrict__ poff,
                              const unsigned* __restrict__ probes, int nprobe,
                              const unsigned long long* __restrict__ offsets, const unsigned* __restrict__ row_ids,
                              int k, unsigned* __restrict__ out_ids, float* __restrict__ out_dist,
                              int out_stride) {
    const size_t q = blockIdx.x;
    select_query<NT>(cand + q * stride, totals[q], poff + q * nprobe, probes + q * nprobe, nprobe, offsets, row_ids,
                     k, out_ids + q * out_stride, out_dist + q * out_stride);
}

struct KnnSelectSearchArgs {
    const float* cand;                  // nq x stride
    unsigned long long stride;
    const unsigned* totals;             // nq
    const unsigned* poff;               // nq x nprobe
    const unsigned* probes;             // nq x nprobe
    int nprobe;
    const unsigned long long* offsets;  // nlist + 1
    const unsigned* row_ids;
    int k;
    unsigned* out_ids;                  // nq rows of out_stride, k written per row
    float* out_dist;
    int out_stride;                     // k; a shard's partials: devices x k (the reducer's row)
};

// Block per query, NT threads.
#define SELECT_SEARCH(NAME, NT)                                                                                 \
    extern "C" __global__ void NAME(const KnnSelectSearchArgs a) {                                              \
        select_search<NT>(a.cand, a.stride, a.totals, a.poff, a.probes, a.nprobe, a.offsets, a.row_ids, a.k,    \
                          a.out_ids, a.out_dist, a.out_stride);                                                 \
    }
SELECT_SEARCH(knn_select_search, 256)
SELECT_SEARCH(knn_select_search_wide, WIDE_BLOCK)
