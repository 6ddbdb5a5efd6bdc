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

// QB (queries per work item), RT (rows per shared-memory tile), U8_MIN_BLOCKS (u8 search
// blocks an SM) and SEL_MAX (largest k or nprobe a select returns; also the largest nprobe
// here) come from the host's kernels.rs.
#define DC 32                  // dimensions per chunk staged in shared memory
#define FULL 0xffffffffu
#define ROW_PATH_MAX 8         // groups up to this many queries take the thread-per-row path
#define ROW_PATH_DIM 512       // ... when dim fits its shared query buffer (the tile otherwise)

// Distances between QB (or fewer: nqg) queries and rows [r0, r0 + nr) of `rows`. Query j's
// first element is queries[qrow[j]]; its distance to row r0 + r goes to out[obase[j] + r].
// 256 threads: thread (ty, tx) owns queries {ty, ty + 16} x rows {tx, tx + 16, tx + 32, tx + 48}
// of each 64-row tile, so every value read from shared memory feeds 2 or 4 accumulators.
// Dimensions past `dim` are staged as zeros in both operands and add nothing.
// Shared memory of a block computing distances, declared once per kernel (each template
// instance declaring its own would add up past the 48 KiB a block may hold statically).
struct DistSmem {
    size_t qrow[QB], obase[QB];
    float qs[QB][DC + 1];
    float xs[RT][DC + 1];
    // The row path's queries; also the integer tensor-core path's byte queries and norms.
    alignas(16) float qsm[ROW_PATH_MAX * ROW_PATH_DIM];
    unsigned next_item;  // the block's next work item, taken from the search's work counter
};

// The row elements thread threadIdx.x stages for one tile chunk: rows [t0, t0 + RT) and
// dimensions [d0, d0 + DC) of `rows` (from r0), zero past `nr` rows and `dim` dimensions.
#define TILE_PER_THREAD (RT * DC / BLOCK)
static_assert(RT * DC % BLOCK == 0, "a tile chunk divides evenly among the block's threads");
template <typename T>
__device__ __forceinline__ void fetch_chunk(const T* __restrict__ rows, size_t r0, int t0, int nr, int dim, int d0,
                                            float v[TILE_PER_THREAD]) {
#pragma unroll
    for (int i = 0; i < TILE_PER_THREAD; ++i) {
        const int e = threadIdx.x + i * BLOCK, r = e / DC, d = e % DC;
        v[i] = (t0 + r < nr && d0 + d < dim) ? load_elem(rows + (r0 + t0 + r) * (size_t)dim + d0 + d) : 0.f;
    }
}

template <typename T, int METRIC>
__device__ void tile_distances(const float* __restrict__ queries, const size_t* qrow, int nqg,
                               const T* __restrict__ rows, size_t r0, int nr, int dim,
                               float* __restrict__ out, const size_t* obase, DistSmem& sm) {
    float (*qs)[DC + 1] = sm.qs;
    float (*xs)[DC + 1] = sm.xs;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    // The next chunk's rows are loaded into registers while the products of this one run, so
    // the load latency hides behind the arithmetic. It matters most for a sharded index,
    // whose rows on another GPU come over the link at several times local memory's latency.
    float next[TILE_PER_THREAD];
    fetch_chunk(rows, r0, 0, nr, dim, 0, next);
    for (int t0 = 0; t0 < nr; t0 += RT) {
        const int nt = min(RT, nr - t0);
        float acc[2][4];
#pragma unroll
        for (int a = 0; a < 2; ++a)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[a][i] = 0.f;
        for (int d0 = 0; d0 < dim; d0 += DC) {
            for (int e = threadIdx.x; e < QB * DC; e += BLOCK) {
                int j = e / DC, d = e % DC;
                qs[j][d] = (j < nqg && d0 + d < dim) ? queries[qrow[j] + d0 + d] : 0.f;
            }
#pragma unroll
            for (int i = 0; i < TILE_PER_THREAD; ++i) {
                const int e = threadIdx.x + i * BLOCK;
                xs[e / DC][e % DC] = next[i];
            }
            __syncthreads();
            if (d0 + DC < dim) fetch_chunk(rows, r0, t0, nr, dim, d0 + DC, next);
            else if (t0 + RT < nr) fetch_chunk(rows, r0, t0 + RT, nr, dim, 0, next);
#pragma unroll 8
            for (int d = 0; d < DC; ++d) {
                const float a0 = qs[ty][d], a1 = qs[ty + 16][d];
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const float x = xs[tx + 16 * i][d];
                    acc[0][i] = accumulate<METRIC>(acc[0][i], a0, x);
                    acc[1][i] = accumulate<METRIC>(acc[1][i], a1, x);
                }
            }
            __syncthreads();
        }
#pragma unroll
        for (int a = 0; a < 2; ++a) {
            const int j = ty + 16 * a;
            if (j >= nqg) continue;
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int r = tx + 16 * i;
                if (r < nt) out[obase[j] + t0 + r] = finish<METRIC>(acc[a][i]);
            }
        }
    }
}

// Four consecutive elements widened to f32 (p aligned to 4 elements).
__device__ __forceinline__ void load4(const float* p, float v[4]) {
    float4 t = *reinterpret_cast<const float4*>(p);
    v[0] = t.x; v[1] = t.y; v[2] = t.z; v[3] = t.w;
}
__device__ __forceinline__ void load4(const unsigned short* p, float v[4]) {
    uint2 t = *reinterpret_cast<const uint2*>(p);
    v[0] = h2f((unsigned short)(t.x & 0xffffu)); v[1] = h2f((unsigned short)(t.x >> 16));
    v[2] = h2f((unsigned short)(t.y & 0xffffu)); v[3] = h2f((unsigned short)(t.y >> 16));
}
__device__ __forceinline__ void load4(const unsigned char* p, float v[4]) {
    unsigned t = *reinterpret_cast<const unsigned*>(p);
    v[0] = (float)(t & 255u); v[1] = (float)((t >> 8) & 255u);
    v[2] = (float)((t >> 16) & 255u); v[3] = (float)(t >> 24);
}

// The same distances for a group of at most NQ queries (few queries probe the cell, so a
// 32-query tile would idle): a thread per row, the queries in shared memory (`qsm`, NQ x dim),
// each row streamed once from global memory and used by every query of the group.
template <typename T, int METRIC, int NQ>
__device__ void row_distances(const float* __restrict__ queries, const size_t* qrow, int nqg,
                              const T* __restrict__ rows, size_t r0, int nr, int dim,
                              float* __restrict__ out, const size_t* obase, float* qsm) {
    for (int e = threadIdx.x; e < NQ * dim; e += BLOCK) {
        int j = e / dim, d = e % dim;
        qsm[e] = j < nqg ? queries[qrow[j] + d] : 0.f;
    }
    __syncthreads();
    for (int r = threadIdx.x; r < nr; r += BLOCK) {
        const T* x = rows + (r0 + r) * (size_t)dim;
        float acc[NQ];
#pragma unroll
        for (int j = 0; j < NQ; ++j) acc[j] = 0.f;
        int d = 0;
        if (dim % 4 == 0) {
            // Unrolled so several rows' loads are in flight at once (latency, not bandwidth,
            // bounds a thread per row; more so for rows read from another GPU).
#pragma unroll 4
            for (; d < dim; d += 4) {
                float v[4];
                load4(x + d, v);
#pragma unroll
                for (int u = 0; u < 4; ++u)
#pragma unroll
                    for (int j = 0; j < NQ; ++j) acc[j] = accumulate<METRIC>(acc[j], qsm[j * dim + d + u], v[u]);
            }
        }
        for (; d < dim; ++d) {
            const float v = load_elem(x + d);
#pragma unroll
            for (int j = 0; j < NQ; ++j) acc[j] = accumulate<METRIC>(acc[j], qsm[j * dim + d], v);
        }
#pragma unroll
        for (int j = 0; j < NQ; ++j)
            if (j < nqg) out[obase[j] + r] = finish<METRIC>(acc[j]);
    }
    __syncthreads();
}

// u8 rows and queries that are integers in 0..=255 (SIFT-like data) on the integer tensor
// cores: mma m16n8k32 u8 x u8 -> s32 gives each query x row dot product exactly, and
// ||q - x||^2 = ||q||^2 + ||x||^2 - 2 q.x stays an exact integer below 2^24 for dim <= TC_MAX_DIM,
// so the f32 it becomes is bit for bit the sum the f32 paths (and the CPU twin) compute: no
// re-rank is needed. Items whose queries are not all such integers take the f32 paths.
#define TC_MAX_DIM 256         // 256 x 255^2 < 2^24: every integer distance is exact in f32
#define TC_MAX_PAD 96          // most bytes past a staged query row (tc_stride)

static_assert(QB * (TC_MAX_DIM + TC_MAX_PAD) + QB * sizeof(int) <= sizeof(DistSmem::qsm),
              "the tensor-core path's staged queries fit the row path's buffer");

template <typename T> struct IsU8 { static constexpr bool value = false; };
template <> struct IsU8<unsigned char> { static constexpr bool value = true; };

// c += a . b for a 16 x 32 (row-major) by 32 x 8 (column-major) tile of u8, s32 accumulators.
// Fragments (lane = 4 g + t): a0 row g, a1 row g + 8, k 4t..4t+3 (a2, a3: k + 16); b0 column g,
// k 4t..4t+3 (b1: k + 16); c0, c1 row g, columns 2t, 2t+1 (c2, c3: row g + 8). A dot product
// does not care which k is which dimension, so the callers give lane t dimensions 8t..8t+7 of
// each 32 in both operands (one 8-byte load each): a warp's row loads are 8 whole sectors.
__device__ __forceinline__ void mma_u8(int c[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                       unsigned b1) {
#if __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.u8.u8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
    // Integer mma needs sm_80; a caller outside an sm_80 guard fails loudly, not silently.
    __trap();
#endif
}

// Bytes per staged query row: dim (a multiple of 32) padded to 8 words (mod 32), so that the
// 8-byte fragment loads of each half-warp (4 rows x 4 lanes) fall in 32 different banks.
__device__ __forceinline__ int tc_stride(int dim) { return dim + 4 * ((8 - dim / 4) & 31); }

// Four elements as bytes (element i in byte i), each one that is not an integer in 0..=255
// (NaN is not) packed as 0 and counted in `bad`: how both u8 searches stage their queries.
__device__ __forceinline__ unsigned pack_u8x4(float4 v, int& bad) {
    const float x[4] = {v.x, v.y, v.z, v.w};
    unsigned w = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const bool ok = x[i] >= 0.f && x[i] <= 255.f && x[i] == rintf(x[i]);
        bad |= !ok;
        w |= (ok ? (unsigned)x[i] : 0u) << (8 * i);
    }
    return w;
}

// Stages the group's queries as bytes and their squared norms: the rows tc_distances_u8 reads
// (16, or QB past 16 queries; zero past nqg) of tc_stride(dim) bytes. False, agreed by the whole
// block, when any element is not an integer in 0..=255. Four dimensions a thread a turn (one
// 16-byte load, one 4-byte store): at cohorts of ~1 000 most cells hold a few queries, and
// staging QB rows an element at a time (a division each) cost as much as their product.
__device__ bool stage_u8_queries(const float* __restrict__ queries, const size_t* qrow, int nqg, int dim,
                                 unsigned char* qs8, int* q2) {
    const int stride = tc_stride(dim), rows = nqg > 16 ? QB : 16, d4 = dim / 4;
    int bad = 0;
    for (int e = threadIdx.x; e < rows * d4; e += BLOCK) {
        const int j = e / d4, d = 4 * (e % d4);
        // dim is a multiple of 32 here, so each query row is 16-byte aligned where its base is.
        const float4 v = j < nqg ? *reinterpret_cast<const float4*>(queries + qrow[j] + d)
                                 : make_float4(0.f, 0.f, 0.f, 0.f);
        *reinterpret_cast<unsigned*>(qs8 + j * stride + d) = pack_u8x4(v, bad);
    }
    if (__syncthreads_or(bad)) return false;
    if ((int)threadIdx.x < rows) {
        unsigned n = 0;
        for (int d = 0; d < dim; d += 4) {
            const unsigned w = *reinterpret_cast<const unsigned*>(qs8 + threadIdx.x * stride + d);
            n = __dp4a(w, w, n);
        }
        q2[threadIdx.x] = (int)n;
    }
    __syncthreads();
    return true;
}

// k-steps of 32 dimensions whose row fragments a warp loads before it multiplies any: the
// loads of a step do not wait on the step before (4 loads in flight a lane, not 2).
#define TC_KSTEPS 2

// The distances of the staged queries to rows [r0, r0 + nr) of u8 `rows` (dim a multiple of 32):
// each warp takes 16 rows at a time (two n-tiles) against the group's 16 or 32 queries (one or
// two m-tiles), reading each row's bytes straight from global memory into its B fragments,
// TC_KSTEPS steps of 32 dimensions a batch.
template <int METRIC>
__device__ void tc_distances_u8(const unsigned char* __restrict__ rows, size_t r0, int nr, int dim, int nqg,
                                const unsigned char* qs8, const int* q2, float* __restrict__ out,
                                const size_t* obase) {
    const int lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
    const int stride = tc_stride(dim), mtiles = nqg > 16 ? 2 : 1;
    for (int base = (threadIdx.x / 32) * 16; base < nr; base += WARPS * 16) {
        int acc[2][2][4] = {};
        unsigned x2[2] = {0u, 0u};  // partial ||x||^2 of row base + 8n + g
        for (int d0 = 0; d0 < dim; d0 += 32 * TC_KSTEPS) {
            unsigned b[TC_KSTEPS][2][2];
#pragma unroll
            for (int k = 0; k < TC_KSTEPS; ++k) {
#pragma unroll
                for (int n = 0; n < 2; ++n) {
                    const int r = base + 8 * n + g, d = d0 + 32 * k;
                    b[k][n][0] = b[k][n][1] = 0u;
                    if (r < nr && d < dim) {
                        const uint2 w = *reinterpret_cast<const uint2*>(rows + (r0 + r) * (size_t)dim + d + 8 * t);
                        b[k][n][0] = w.x;
                        b[k][n][1] = w.y;
                    }
                }
            }
#pragma unroll
            for (int k = 0; k < TC_KSTEPS; ++k) {
                const int d = d0 + 32 * k;
                if (d >= dim) break;
#pragma unroll
                for (int n = 0; n < 2; ++n)
                    if (METRIC == 0) x2[n] = __dp4a(b[k][n][1], b[k][n][1], __dp4a(b[k][n][0], b[k][n][0], x2[n]));
#pragma unroll
                for (int m = 0; m < 2; ++m) {
                    if (m >= mtiles) break;
                    const unsigned char* qa = qs8 + (16 * m + g) * stride + d + 8 * t;
                    const uint2 lo = *reinterpret_cast<const uint2*>(qa);               // query g
                    const uint2 hi = *reinterpret_cast<const uint2*>(qa + 8 * stride);  // query g + 8
#pragma unroll
                    for (int n = 0; n < 2; ++n) mma_u8(acc[m][n], lo.x, hi.x, lo.y, hi.y, b[k][n][0], b[k][n][1]);
                }
            }
        }
#pragma unroll
        for (int n = 0; n < 2; ++n) {
            x2[n] += __shfl_xor_sync(FULL, x2[n], 1);
            x2[n] += __shfl_xor_sync(FULL, x2[n], 2);
            // This lane's accumulators are rows 2t and 2t + 1 of the n-tile, whose norms lanes
            // 8t and 8t + 4 hold.
            const int xn[2] = {(int)__shfl_sync(FULL, x2[n], 8 * t), (int)__shfl_sync(FULL, x2[n], 8 * t + 4)};
#pragma unroll
            for (int m = 0; m < 2; ++m) {
                if (m >= mtiles) break;
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int j = 16 * m + g + 8 * h;
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int r = base + 8 * n + 2 * t + e, dot = acc[m][n][2 * h + e];
                        if (j < nqg && r < nr)
                            out[obase[j] + r] = METRIC == 0 ? (float)(q2[j] + xn[e] - 2 * dot) : -(float)dot;
                    }
                }
            }
        }
    }
}

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

// ---- Radix select ----

// Float bits -> unsigned with the same order (negative floats reversed); -0 counts as +0.
__device__ __forceinline__ unsigned order_key(float x) {
    unsigned u = __float_as_uint(x + 0.f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Sum over the warp's lanes, on every lane.
__device__ __forceinline__ unsigned warp_sum(unsigned v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(FULL, v, off);
    return v;
}

// Inclusive prefix sum over the warp's lanes.
__device__ __forceinline__ unsigned warp_inclusive_scan(unsigned v) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
        const unsigned o = __shfl_up_sync(FULL, v, off);
        if (lane >= off) v += o;
    }
    return v;
}

// Inclusive prefix sum over the block's threads (warp_tot: one entry per warp).
__device__ unsigned block_inclusive_scan(unsigned v, unsigned* warp_tot) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = warp_inclusive_scan(v);
    if (lane == 31) warp_tot[warp] = v;
    __syncthreads();
    unsigned add = 0;
    for (int w = 0; w < warp; ++w) add += warp_tot[w];
    __syncthreads();
    return v + add;
}

// Candidates of a select: n distances and the id of each position.
struct CellIds {  // filter: the position is the cell
    const float* d;
    int n;
    __device__ unsigned id(int pos) const { return (unsigned)pos; }
};
struct RowIds {  // search: position -> (probe, row) through the probe offsets -> original id
    const float* d;
    int n;
    const unsigned* poff;  // shared memory, nprobe entries, non-decreasing from 0
    const unsigned* cells;
    int nprobe;
    const unsigned long long* offsets;
    const unsigned* row_ids;
    __device__ unsigned id(int pos) const {
        int lo = 0, hi = nprobe - 1;  // the last probe starting at or before pos (skips empty cells)
        while (lo < hi) {
            int mid = (lo + hi + 1) / 2;
            if (poff[mid] <= (unsigned)pos) lo = mid; else hi = mid - 1;
        }
        return row_ids[offsets[cells[lo]] + (pos - poff[lo])];
    }
};

// The k smallest (distance, id) of src (n > k), sorted, into out_i / out_d, in two reads of the
// row instead of the radix select's passes: tau is the k-th smallest of the minima of groups of
// threads, so at least k keys are <= tau and every one of the k smallest is; those few are
// gathered (with their ids) and ranked exactly, ties to the smaller id. False, having written
// nothing, when they are more than SEL_MAX (many ties at tau) or fewer than k (NaNs): the
// radix select then answers.
template <int NT, typename Src>
__device__ bool threshold_select(const Src& src, int k, float* sel_d, unsigned* sel_i, unsigned* __restrict__ out_i,
                                 float* __restrict__ out_d) {
    __shared__ __align__(16) float lmin[NT];  // read as float4
    __shared__ float s_tau;
    __shared__ unsigned s_taken;
    const int n = src.n;
    float m = INF;
    for (int i = threadIdx.x; i < n; i += NT) {
        const float v = src.d[i];
        m = v < m ? v : m;
    }
    // The minima of groups of gs threads, as few groups as still number at least k (gs a power
    // of two up to a warp): ranking them costs their count per thread, not the block's size.
    int gs = 1;
    while (gs < 32 && NT / (2 * gs) >= k) gs *= 2;
    for (int off = 1; off < gs; off <<= 1) {
        const float o = __shfl_xor_sync(FULL, m, off);
        m = o < m ? o : m;
    }
    const int groups = NT / gs, g = threadIdx.x / gs;
    if (threadIdx.x % gs == 0) lmin[g] = m;
    if (threadIdx.x == 0) s_taken = 0;
    __syncthreads();
    if (threadIdx.x % gs == 0) {
        int rank = 0;  // among the minima, ties to the lower group: a permutation of 0..groups-1
        for (int j = 0; j < groups; j += 4) {
            const float4 o = *reinterpret_cast<const float4*>(lmin + j);
            rank += (o.x < m || (o.x == m && j < g)) + (o.y < m || (o.y == m && j + 1 < g)) +
                    (o.z < m || (o.z == m && j + 2 < g)) + (o.w < m || (o.w == m && j + 3 < g));
        }
        if (rank == k - 1) s_tau = m;
    }
    __syncthreads();
    const float tau = s_tau;
    for (int i = threadIdx.x; i < n; i += NT) {
        const float v = src.d[i];
        if (v <= tau) {
            const unsigned slot = atomicAdd(&s_taken, 1u);
            if (slot < SEL_MAX) { sel_d[slot] = v; sel_i[slot] = src.id(i); }
        }
    }
    __syncthreads();
    const int taken = (int)s_taken;
    if (taken < k || taken > SEL_MAX) return false;
    for (int t = threadIdx.x; t < taken; t += NT) {
        int r = 0;
        for (int j = 0; j < taken && r < k; ++j) r += before(sel_d[j], sel_i[j], sel_d[t], sel_i[t]);
        if (r < k) {
            out_i[r] = sel_i[t];
            if (out_d) out_d[r] = sel_d[t];
        }
    }
    __syncthreads();
    return true;
}

// The k smallest (distance, id) of src, sorted, into out_i / out_d (out_d may be null);
// padded with (NO_ID, +inf) when there are fewer than k. Exact, ties to the smaller id, as
// the CPU: an MSD radix select on the 64-bit key (order_key(distance), id), 8 bits per pass,
// stopping as soon as the bucket holding the k-th key is wholly taken. Ids are looked up
// only for keys whose distance equals the boundary one (ties), and for the k winners.
// NT threads (256, or 1024 for long rows when few queries leave SMs idle).
template <int NT, typename Src>
__device__ void block_select(const Src& src, int k, unsigned* __restrict__ out_i, float* __restrict__ out_d) {
    __shared__ unsigned hist[256];
    __shared__ unsigned warp_tot[NT / 32];
    __shared__ unsigned s_bin, s_rem, s_cnt, s_n;
    __shared__ float sel_d[SEL_MAX];
    __shared__ unsigned sel_i[SEL_MAX];
    const int n = src.n;
    const unsigned long long HI = 0xffffffff00000000ull;
    unsigned long long prefix = 0, mask = 0;
    unsigned rem = k;
    const bool take_all = n <= k;
    if (!take_all && threshold_select<NT>(src, k, sel_d, sel_i, out_i, out_d)) return;
    for (int pass = 0; pass < 8 && !take_all; ++pass) {
        const int shift = 56 - 8 * pass;
        for (int b = threadIdx.x; b < 256; b += NT) hist[b] = 0;
        __syncthreads();
        for (int base = 0; base < n; base += NT) {  // uniform trip count: whole warps match
            const int i = base + threadIdx.x;
            unsigned bin = FULL;
            if (i < n) {
                unsigned long long key = (unsigned long long)order_key(src.d[i]) << 32;
                if (pass >= 4 && (key & HI) == (prefix & HI)) key |= src.id(i);
                if ((key & mask) == prefix) bin = (unsigned)(key >> shift) & 255u;
            }
            // One shared-memory atomic per distinct bin per warp: distances crowd few bins.
            const unsigned peers = __match_any_sync(FULL, bin);
            if (bin != FULL && (int)(threadIdx.x % 32) == __ffs(peers) - 1) atomicAdd(&hist[bin], __popc(peers));
        }
        __syncthreads();
        const unsigned h = threadIdx.x < 256 ? hist[threadIdx.x] : 0u;
        const unsigned incl = block_inclusive_scan(h, warp_tot);
        if (incl - h < rem && incl >= rem) { s_bin = threadIdx.x; s_rem = rem - (incl - h); s_cnt = h; }
        __syncthreads();
        prefix |= (unsigned long long)s_bin << shift;
        mask |= 255ull << shift;
        rem = s_rem;
        const unsigned cnt = s_cnt;
        __syncthreads();
        if (cnt == rem) break;  // every key in the boundary bucket is taken
    }
    // Keys whose resolved top bits are at most the prefix: exactly min(n, k) of them.
    if (threadIdx.x == 0) s_n = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += NT) {
        const float dv = src.d[i];
        bool take = take_all;
        if (!take) {
            unsigned long long key = (unsigned long long)order_key(dv) << 32;
            if ((mask & ~HI) && (key & HI) == (prefix & HI)) key |= src.id(i);
            take = (key & mask) <= prefix;
        }
        if (take) {
            unsigned slot = atomicAdd(&s_n, 1u);
            if (slot < SEL_MAX) { sel_d[slot] = dv; sel_i[slot] = src.id(i); }
        }
    }
    __syncthreads();
    const int m = min((int)s_n, k);
    for (int t = threadIdx.x; t < k; t += NT) {
        if (t < m) {
            int rank = 0;
            for (int j = 0; j < m; ++j) rank += before(sel_d[j], sel_i[j], sel_d[t], sel_i[t]);
            out_i[rank] = sel_i[t];
            if (out_d) out_d[rank] = sel_d[t];
        } else {
            out_i[t] = NO_ID;
            if (out_d) out_d[t] = INF;
        }
    }
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

// Rows [r0, r0 + nr) of u8 `rows` against queries j0.. of the group (dim a multiple of 32):
// lane 4g+t reads the query rows at q8 + qo[0] (group row j0 + g) and q8 + qo[1] (j0 + g + 8),
// -1 past the group, and writes their distances from candidate row bases ob[0], ob[1]; q2:
// their norms. (Offsets, not pointers: two registers fewer where the kernel spills.)
// RG 16-row groups at a time (their loads in flight together), TC_KSTEPS k-steps a batch.
template <int METRIC, int RG>
__device__ void warp_rows_u8(const unsigned char* __restrict__ rows, size_t r0, int nr, int dim,
                             const unsigned char* __restrict__ q8, const int qo[2], const int q2[2],
                             float* __restrict__ out,
                             const unsigned long long ob[2]) {
    const int lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
    for (int base = 0; base < nr; base += 16 * RG) {
        int acc[RG][2][4] = {};
        unsigned x2[RG][2] = {};
        for (int d0 = 0; d0 < dim; d0 += 32 * TC_KSTEPS) {
            unsigned b[RG][TC_KSTEPS][2][2];
#pragma unroll
            for (int rg = 0; rg < RG; ++rg)
#pragma unroll
                for (int k = 0; k < TC_KSTEPS; ++k)
#pragma unroll
                    for (int n = 0; n < 2; ++n) {
                        const int r = base + 16 * rg + 8 * n + g, d = d0 + 32 * k;
                        b[rg][k][n][0] = b[rg][k][n][1] = 0u;
                        if (r < nr && d < dim) {
                            const uint2 w =
                                *reinterpret_cast<const uint2*>(rows + (r0 + r) * (size_t)dim + d + 8 * t);
                            b[rg][k][n][0] = w.x;
                            b[rg][k][n][1] = w.y;
                        }
                    }
#pragma unroll
            for (int k = 0; k < TC_KSTEPS; ++k) {
                const int d = d0 + 32 * k;
                if (d >= dim) break;
                const uint2 zero = make_uint2(0u, 0u);
                const uint2 lo = qo[0] >= 0 ? __ldg(reinterpret_cast<const uint2*>(q8 + qo[0] + d + 8 * t)) : zero;
                const uint2 hi = qo[1] >= 0 ? __ldg(reinterpret_cast<const uint2*>(q8 + qo[1] + d + 8 * t)) : zero;
#pragma unroll
                for (int rg = 0; rg < RG; ++rg)
#pragma unroll
                    for (int n = 0; n < 2; ++n) {
                        if (METRIC == 0)
                            x2[rg][n] = __dp4a(b[rg][k][n][1], b[rg][k][n][1],
                                               __dp4a(b[rg][k][n][0], b[rg][k][n][0], x2[rg][n]));
                        mma_u8(acc[rg][n], lo.x, hi.x, lo.y, hi.y, b[rg][k][n][0], b[rg][k][n][1]);
                    }
            }
        }
#pragma unroll
        for (int rg = 0; rg < RG; ++rg)
#pragma unroll
            for (int n = 0; n < 2; ++n) {
                x2[rg][n] += __shfl_xor_sync(FULL, x2[rg][n], 1);
                x2[rg][n] += __shfl_xor_sync(FULL, x2[rg][n], 2);
                // Rows 2t and 2t + 1 of the n-tile: their norms are on lanes 8t and 8t + 4.
                const int xn[2] = {(int)__shfl_sync(FULL, x2[rg][n], 8 * t),
                                   (int)__shfl_sync(FULL, x2[rg][n], 8 * t + 4)};
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    if (qo[h] < 0) continue;
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int r = base + 16 * rg + 8 * n + 2 * t + e, dot = acc[rg][n][2 * h + e];
                        if (r < nr) out[ob[h] + r] = METRIC == 0 ? (float)(q2[h] + xn[e] - 2 * dot) : -(float)dot;
                    }
                }
            }
    }
}

// The f32 sums of a group whose queries are not all byte integers: a lane per row, each query
// summed in dimension order (row_distances' order, so the same bits). qidx and obase of group
// row j are in the warp's scratch (`rowq`, `rowo`).
template <int METRIC>
__device__ void warp_rows_f32(const float* __restrict__ queries, const unsigned char* __restrict__ rows, size_t r0,
                              int nr, int dim, int nqg, const unsigned* rowq, const unsigned long long* rowo,
                              float* __restrict__ out) {
    for (int r = threadIdx.x % 32; r < nr; r += 32) {
        const unsigned char* x = rows + (r0 + r) * (size_t)dim;
        for (int j = 0; j < nqg; ++j) {
            const float* q = queries + (size_t)rowq[j] * dim;
            float acc = 0.f;
            for (int d = 0; d < dim; ++d) acc = accumulate<METRIC>(acc, q[d], load_elem(x + d));
            out[rowo[j] + r] = finish<METRIC>(acc);
        }
    }
}

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

// Rows of one query at a time, 16 bytes a lane (dim = 16 L, L a power of two up to 16: 32, 64,
// 128 or 256 dimensions): lane l reads bytes 16 (l % L).. of rows l / L + u 32 / L for each of
// LOADS loads u in flight (4 a lane, 8 in the _x2 kernel). One query leaves 15 of an mma's 16
// query rows empty; here every lane's load and dp4a is the query's, and a warp has 2 KB of rows
// in flight at dim 128 (4 with 8 loads, which spill a little under the 64-register bound).
__device__ __forceinline__ bool one_query_rows(int dim) {
    const int l = dim / 16;
    return dim % 16 == 0 && l <= 16 && (l & (l - 1)) == 0;
}

// Distances of the query whose 16-byte column this lane holds (qw; q2 its squared norm) to rows
// [r0, r0 + nr) of u8 `rows` (dim 16 L), into out[ob + r]: the same integers as warp_rows_u8
// (x.x - 2 q.x + q.q, or q.x), so the same floats. A row's L lanes add their LOADS partial
// sums transposed: at each xor step a lane keeps half of its sums and adds its partner's half,
// so 4 loads at L = 8 take 4 shuffles (2 + 1 + 1) where summing each load's row took 12, in
// chains of 2 instead of 3.
template <int METRIC, int L, int LOADS>
__device__ void one_query_rows_u8(const unsigned char* __restrict__ rows, size_t r0, int nr, uint4 qw, int q2,
                                  float* __restrict__ out, unsigned long long ob) {
    constexpr int PER = 32 / L, DIM = 16 * L;  // rows a warp load covers
    // After the halving steps a lane holds KEEP sums: loads ub.. of its row slot.
    constexpr int KEEP = LOADS > L ? LOADS / L : 1;
    const int lane = threadIdx.x % 32, col = lane & (L - 1), rl = lane / L;
    for (int base = 0; base < nr; base += LOADS * PER) {
        uint4 x[LOADS];
#pragma unroll
        for (int u = 0; u < LOADS; ++u) {
            const int r = base + u * PER + rl;
            x[u] = r < nr ? *reinterpret_cast<const uint4*>(rows + (r0 + r) * (size_t)DIM + 16 * col)
                          : make_uint4(0u, 0u, 0u, 0u);
        }
        int v[LOADS];
#pragma unroll
        for (int u = 0; u < LOADS; ++u) {
            const unsigned qx = __dp4a(x[u].w, qw.w, __dp4a(x[u].z, qw.z, __dp4a(x[u].y, qw.y, __dp4a(x[u].x, qw.x, 0u))));
            v[u] = (int)qx;
            if (METRIC == 0) {
                const unsigned xx =
                    __dp4a(x[u].w, x[u].w, __dp4a(x[u].z, x[u].z, __dp4a(x[u].y, x[u].y, __dp4a(x[u].x, x[u].x, 0u))));
                v[u] = (int)xx - 2 * (int)qx;
            }
        }
        int ub = 0;  // the first load whose sum this lane keeps
#pragma unroll
        for (int o = L / 2, c = LOADS; o > 0; o /= 2) {
            const bool up = lane & o;
            if (c > 1) {
#pragma unroll
                for (int j = 0; j < c / 2; ++j) {
                    const int keep = up ? v[j + c / 2] : v[j], give = up ? v[j] : v[j + c / 2];
                    v[j] = keep + __shfl_xor_sync(FULL, give, o);
                }
                ub += up ? c / 2 : 0;
                c /= 2;
            } else {
                v[0] += __shfl_xor_sync(FULL, v[0], o);
            }
        }
        // Lanes that differ only in the bits of the plain (c == 1) steps hold the same sums.
        if ((col & (L / (LOADS / KEEP) - 1)) != 0) continue;
#pragma unroll
        for (int j = 0; j < KEEP; ++j) {
            const int r = base + (ub + j) * PER + rl;
            if (r < nr) out[ob + r] = METRIC == 0 ? (float)(q2 + v[j]) : -(float)v[j];
        }
    }
}

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
