// The tiled plan's filter on the tensor cores: the same probes as knn_filter_tiled +
// knn_select_filter (and so as the CPU twin stages::filter), in three steps.
//
// 1. knn_filter_tc: every query x centroid score as a matrix product on the tensor cores
//    (mma.sync m16n8k8, TF32 inputs, f32 accumulators). TF32 keeps 10 mantissa bits, so each
//    operand is split into a TF32 head and a TF32 tail (x = hi + lo) and the product taken as
//    hi.hi + hi.lo + lo.hi ("3xTF32"): within a few f32 ulps of the f32 dot product, at
//    three tensor-core issues per step instead of 64 FMAs per thread. The score is the
//    distance less a per-query constant: L2 |c|^2 - 2 q.c (|q|^2 dropped), inner product -q.c.
// 2. Each query's `width` best scores, nprobe plus a margin, so that a cell the rounding moved
//    a few places still makes the list; then 3. the exact distances of those cells, summed in
//    the order knn_filter_tiled sums them (the same bits), and the nprobe nearest, sorted, ties
//    to the smaller id - the probes of the exact filter. Two ways, by cohort:
//    - knn_select_rerank_filter_wide (cohorts too few to fill the SMs): both steps in one
//      block of WIDE_BLOCK threads a query, the cells kept in shared memory;
//    - knn_select_filter (knn_tiled.cu) into global memory, then knn_rerank_filter, a warp a
//      query. Fused there, the re-rank (a few threads summing while the rest wait) was added to
//      every one of the many resident blocks: 143-145 us against 114-116 at cohort 8 192.

// TC_QTILE x TC_CTILE (queries x centroids per block tile) and TC_THREADS come from the
// host's kernels.rs. Each warp takes TC_WQ queries x TC_WC centroids of the tile: 2 x 4 mma
// tiles, so a query fragment split into head and tail serves 4 products and a centroid
// fragment 2 (a warp of 16 x 64, the first version, split every centroid fragment for one
// product and issued more conversions than products). Splitting ahead instead - centroids
// at upload, queries as they are staged, 16-dimension stages in four shared arrays, 3 blocks
// an SM - was measured slower on an H100 (filter 0.25-0.27 ms at cohort 8 192 against
// 0.22-0.25 for this; lab/results/knn-filter-tc-h100/): twice the fragment loads and
// stages cost more than the conversions they saved.
#define TC_DK 32  // dimensions per shared-memory stage
#define TC_WQ 32  // queries per warp
#define TC_WC 32  // centroids per warp
#define TC_MT (TC_WQ / 16)  // 16-row mma tiles per warp
#define TC_NT (TC_WC / 8)   // 8-column mma tiles per warp
static_assert(TC_THREADS == 32 * (TC_QTILE / TC_WQ) * (TC_CTILE / TC_WC), "warps tile the block");
static_assert((TC_QTILE + TC_CTILE) * (TC_DK / 4) % TC_THREADS == 0, "whole float4s a thread");
static_assert(TC_THREADS % (TC_DK / 4) == 0, "a thread's centroid slots keep their rows");

// x rounded to TF32 (round to nearest, ties away), as the bits mma.sync takes.
__device__ __forceinline__ unsigned to_tf32(float x) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

// c += a (16x8, row-major, TF32) x b (8x8, column-major, TF32). Lane l = 4g + t holds
// a: (g, t), (g+8, t), (g, t+4), (g+8, t+4); b: (t, g), (t+4, g);
// c: (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1).
__device__ __forceinline__ void mma_tf32(float c[4], const unsigned a[4], const unsigned b[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Head and tail of x, both TF32.
__device__ __forceinline__ void split_tf32(float x, unsigned& hi, unsigned& lo) {
    hi = to_tf32(x);
    lo = to_tf32(x - __uint_as_float(hi));
}

// Dimensions d..d+3 of row r (rows x dim, row-major), zeros past either end: one 16-byte load
// where the rows allow it (`vec4`: dim a multiple of 4 and the base 16-byte aligned).
__device__ __forceinline__ float4 stage_load(const float* __restrict__ base, int rows, int dim,
                                             int r, int d, bool vec4) {
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (r >= rows || d >= dim) return v;
    const float* p = base + (size_t)r * dim + d;
    if (vec4) return *reinterpret_cast<const float4*>(p);
    v.x = p[0];
    if (d + 1 < dim) v.y = p[1];
    if (d + 2 < dim) v.z = p[2];
    if (d + 3 < dim) v.w = p[3];
    return v;
}

struct KnnFilterTcArgs {
    const float* queries;    // nq x dim
    int nq;
    const float* centroids;  // nlist x dim
    int nlist, dim, metric;
    float* scratch;          // nq x nlist scores (step 1)
};

// Grid (ceil(nq / TC_QTILE), ceil(nlist / TC_CTILE)). Rows and dimensions past the ends are
// staged as zeros (they add nothing and are not written). Bounded to 3 blocks an SM: unbounded,
// ptxas gave 84 registers (2 blocks, 25% occupancy, no eligible warp in 41% of cycles); at 80
// (no spills) 3 fit and the filter at cohort 8 192 went from 208-216 to 197 us on an H100.
extern "C" __global__ void __launch_bounds__(TC_THREADS, 3) knn_filter_tc(const KnnFilterTcArgs a) {
    // +4: a warp's fragment loads (8 rows x 4 columns) fall in 32 distinct banks, and a row
    // stays 16-byte aligned for the float4 stores.
    __shared__ __align__(16) float qs[TC_QTILE][TC_DK + 4];
    __shared__ __align__(16) float cs[TC_CTILE][TC_DK + 4];
    __shared__ float cnorm[TC_CTILE];
    const int q0 = blockIdx.x * TC_QTILE, c0 = blockIdx.y * TC_CTILE;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int wq = (warp % (TC_QTILE / TC_WQ)) * TC_WQ;  // the warp's first query row
    const int wc = (warp / (TC_QTILE / TC_WQ)) * TC_WC;  // and first centroid column
    const bool vec4 = a.dim % 4 == 0 &&
                      ((reinterpret_cast<size_t>(a.queries) | reinterpret_cast<size_t>(a.centroids)) & 15) == 0;
    float acc[TC_MT][TC_NT][4];
#pragma unroll
    for (int m = 0; m < TC_MT; ++m)
#pragma unroll
        for (int n = 0; n < TC_NT; ++n)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[m][n][i] = 0.f;
    // |c|^2 in parts: this thread's four columns of each centroid row it stages (the rows stay
    // the thread's at every stage); summed across the row's threads at the end. Its order is
    // not the exact filter's, which does not matter: the re-rank recomputes the kept cells.
    constexpr int CSLOTS = TC_CTILE * (TC_DK / 4) / TC_THREADS;
    float norm[CSLOTS];
#pragma unroll
    for (int j = 0; j < CSLOTS; ++j) norm[j] = 0.f;
    for (int d0 = 0; d0 < a.dim; d0 += TC_DK) {
#pragma unroll
        for (int j = 0; j < TC_QTILE * (TC_DK / 4) / TC_THREADS; ++j) {
            const int e = threadIdx.x + j * TC_THREADS, r = e / (TC_DK / 4), d = 4 * (e % (TC_DK / 4));
            *reinterpret_cast<float4*>(&qs[r][d]) = stage_load(a.queries, a.nq, a.dim, q0 + r, d0 + d, vec4);
        }
#pragma unroll
        for (int j = 0; j < CSLOTS; ++j) {
            const int e = threadIdx.x + j * TC_THREADS, r = e / (TC_DK / 4), d = 4 * (e % (TC_DK / 4));
            const float4 v = stage_load(a.centroids, a.nlist, a.dim, c0 + r, d0 + d, vec4);
            norm[j] = fmaf(v.x, v.x, fmaf(v.y, v.y, fmaf(v.z, v.z, fmaf(v.w, v.w, norm[j]))));
            *reinterpret_cast<float4*>(&cs[r][d]) = v;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TC_DK; k += 8) {
            unsigned ahi[TC_MT][4], alo[TC_MT][4];
            unsigned any_lo = 0;
#pragma unroll
            for (int m = 0; m < TC_MT; ++m) {
                const int r = wq + 16 * m + g;
                split_tf32(qs[r][k + t], ahi[m][0], alo[m][0]);
                split_tf32(qs[r + 8][k + t], ahi[m][1], alo[m][1]);
                split_tf32(qs[r][k + t + 4], ahi[m][2], alo[m][2]);
                split_tf32(qs[r + 8][k + t + 4], ahi[m][3], alo[m][3]);
                any_lo |= alo[m][0] | alo[m][1] | alo[m][2] | alo[m][3];
            }
            // Queries TF32 holds exactly (integers below 2^11: SIFT's, u8 data) have no tail:
            // their tail product adds zeros, so the warp skips it.
            const bool tails = __any_sync(0xffffffffu, any_lo != 0);
#pragma unroll
            for (int n = 0; n < TC_NT; ++n) {
                unsigned bhi[2], blo[2];
                split_tf32(cs[wc + 8 * n + g][k + t], bhi[0], blo[0]);
                split_tf32(cs[wc + 8 * n + g][k + t + 4], bhi[1], blo[1]);
#pragma unroll
                for (int m = 0; m < TC_MT; ++m) {
                    // The small terms first, so they are not lost under the large one.
                    if (tails) mma_tf32(acc[m][n], alo[m], bhi);
                    mma_tf32(acc[m][n], ahi[m], blo);
                    mma_tf32(acc[m][n], ahi[m], bhi);
                }
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int j = 0; j < CSLOTS; ++j) {
        // The TC_DK / 4 threads of a row are adjacent lanes.
#pragma unroll
        for (int o = 1; o < TC_DK / 4; o *= 2) norm[j] += __shfl_xor_sync(0xffffffffu, norm[j], o);
        const int e = threadIdx.x + j * TC_THREADS;
        if (e % (TC_DK / 4) == 0) cnorm[e / (TC_DK / 4)] = norm[j];
    }
    __syncthreads();
    // A lane's two adjacent columns go out as one 8-byte store where the row allows it.
    const bool pairs = a.nlist % 2 == 0 && (reinterpret_cast<size_t>(a.scratch) & 7) == 0;
#pragma unroll
    for (int m = 0; m < TC_MT; ++m)
#pragma unroll
        for (int n = 0; n < TC_NT; ++n)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int q = q0 + wq + 16 * m + g + 8 * h, cl = wc + 8 * n + 2 * t, c = c0 + cl;
                if (q >= a.nq || c >= a.nlist) continue;
                const float x = acc[m][n][2 * h], y = acc[m][n][2 * h + 1];
                const float sx = a.metric == 0 ? cnorm[cl] - 2.f * x : -x;
                const float sy = a.metric == 0 ? cnorm[cl + 1] - 2.f * y : -y;
                float* out = a.scratch + (size_t)q * a.nlist + c;
                if (pairs && c + 1 < a.nlist) {
                    *reinterpret_cast<float2*>(out) = make_float2(sx, sy);
                } else {
                    out[0] = sx;
                    if (c + 1 < a.nlist) out[1] = sy;
                }
            }
}

struct KnnSelectRerankFilterArgs {
    const float* scratch;    // nq x nlist scores (step 1)
    const float* queries;    // nq x dim
    const float* centroids;  // nlist x dim
    int nlist, dim, metric;
    int width, nprobe;       // nprobe <= width <= min(SEL_MAX, nlist)
    unsigned* probes;        // nq x nprobe
};

// Floats of centroid rows the re-rank stages at a time (8 KiB): each candidate cell's next
// dimensions, so that a thread's sum waits on shared memory, not on one global load after
// another (the re-rank's own kernel, a lane per cell with its loads in a chain, took 11 us at
// cohort 1 024 on an H100: a92110f).
#define RERANK_STAGE 2048
// The most dimensions staged a turn (the query's, beside the rows).
#define RERANK_MAX_DC 256
static_assert(SEL_MAX <= BLOCK, "a thread per candidate cell");

// Thread j < width: the exact distance of the query to cells[j], summed in dimension order as
// knn_filter_tiled sums it (the same bits). The whole block stages, into rows (RERANK_STAGE)
// and qs (RERANK_MAX_DC), shared memory declared once by the caller for both metrics.
template <int NT, int METRIC>
__device__ float rerank_distance(const float* __restrict__ qv, const float* __restrict__ centroids, int dim,
                                 const unsigned* cells, int width, float* rows, float* qs) {
    // Dimensions a turn: odd, so thread j's row (j * dc apart) starts in its own bank.
    const int dc = min(RERANK_MAX_DC, ((RERANK_STAGE / width) - 1) | 1);
    float acc = 0.f;
    for (int d0 = 0; d0 < dim; d0 += dc) {
        const int n = min(dc, dim - d0);
        for (int i = threadIdx.x; i < width * n; i += NT) {
            const int j = i / n, d = i % n;
            rows[j * dc + d] = centroids[(size_t)cells[j] * dim + d0 + d];
        }
        for (int d = threadIdx.x; d < n; d += NT) qs[d] = qv[d0 + d];
        __syncthreads();
        if (threadIdx.x < width)
            for (int d = 0; d < n; ++d) acc = accumulate<METRIC>(acc, qs[d], rows[threadIdx.x * dc + d]);
        __syncthreads();
    }
    return finish<METRIC>(acc);
}

// Steps 2 and 3, a block of NT threads per query: the `width` best cells by score into shared
// memory, their exact distances, and each cell's rank among them is where it goes.
template <int NT>
__device__ void select_rerank_filter(const KnnSelectRerankFilterArgs& a) {
    __shared__ unsigned cells[SEL_MAX];
    __shared__ float dist[SEL_MAX];
    __shared__ float rows[RERANK_STAGE];
    __shared__ float qs[RERANK_MAX_DC];
    const size_t q = blockIdx.x;
    block_select<NT>(CellIds{a.scratch + q * a.nlist, a.nlist}, a.width, cells, (float*)0);
    __syncthreads();
    const float* qv = a.queries + q * a.dim;
    const float d = a.metric == 0 ? rerank_distance<NT, 0>(qv, a.centroids, a.dim, cells, a.width, rows, qs)
                                  : rerank_distance<NT, 1>(qv, a.centroids, a.dim, cells, a.width, rows, qs);
    if ((int)threadIdx.x < a.width) dist[threadIdx.x] = d;
    __syncthreads();
    for (int j = threadIdx.x; j < a.width; j += NT) {
        int rank = 0;
        for (int i = 0; i < a.width; ++i) rank += before(dist[i], cells[i], dist[j], cells[j]);
        if (rank < a.nprobe) a.probes[q * a.nprobe + rank] = cells[j];
    }
}
// For cohorts too few to fill the SMs with BLOCK-thread blocks (as knn_select_filter_wide).
extern "C" __global__ void __launch_bounds__(WIDE_BLOCK) knn_select_rerank_filter_wide(const KnnSelectRerankFilterArgs a) {
    select_rerank_filter<WIDE_BLOCK>(a);
}

struct KnnRerankFilterArgs {
    const float* queries;    // nq x dim
    int nq;
    const float* centroids;  // nlist x dim
    int nlist, dim, metric;
    const unsigned* approx;  // nq x width: each query's best cells by step 1's scores
    int width, nprobe;       // nprobe <= width <= SEL_MAX
    unsigned* probes;        // nq x nprobe
};

#define RERANK_QUERIES (BLOCK / 32)  // queries per knn_rerank_filter block, a warp each

// Summed in dimension order, as knn_filter_tiled sums (the same bits); four dimensions a load
// where the rows allow it (a lane per cell reads rows 4*dim bytes apart: a quarter of the loads).
template <int METRIC>
__device__ float exact_distance(const float* __restrict__ q, const float* __restrict__ c, int dim) {
    float acc = 0.f;
    int d = 0;
    if (dim % 4 == 0 && ((reinterpret_cast<size_t>(q) | reinterpret_cast<size_t>(c)) & 15) == 0)
        for (; d < dim; d += 4) {
            const float4 qv = *reinterpret_cast<const float4*>(q + d);
            const float4 cv = *reinterpret_cast<const float4*>(c + d);
            acc = accumulate<METRIC>(acc, qv.x, cv.x);
            acc = accumulate<METRIC>(acc, qv.y, cv.y);
            acc = accumulate<METRIC>(acc, qv.z, cv.z);
            acc = accumulate<METRIC>(acc, qv.w, cv.w);
        }
    for (; d < dim; ++d) acc = accumulate<METRIC>(acc, q[d], c[d]);
    return finish<METRIC>(acc);
}

// Step 3 for the cohorts whose step 2 ran as knn_select_filter: a warp per query
// (RERANK_QUERIES of them per block), a lane per candidate cell computes its exact distance;
// each cell's rank among the query's candidates is where it goes.
extern "C" __global__ void knn_rerank_filter(const KnnRerankFilterArgs a) {
    __shared__ float sd[RERANK_QUERIES][SEL_MAX];
    __shared__ unsigned si[RERANK_QUERIES][SEL_MAX];
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    const size_t q = (size_t)blockIdx.x * RERANK_QUERIES + w;
    if (q >= (size_t)a.nq) return;  // whole warps leave; no block-wide barrier follows
    const float* qv = a.queries + q * a.dim;
    for (int j = lane; j < a.width; j += 32) {
        const unsigned c = a.approx[q * a.width + j];
        const float* cv = a.centroids + (size_t)c * a.dim;
        sd[w][j] = a.metric == 0 ? exact_distance<0>(qv, cv, a.dim) : exact_distance<1>(qv, cv, a.dim);
        si[w][j] = c;
    }
    __syncwarp();
    for (int j = lane; j < a.width; j += 32) {
        int rank = 0;
        for (int i = 0; i < a.width; ++i) rank += before(sd[w][i], si[w][i], sd[w][j], si[w][j]);
        if (rank < a.nprobe) a.probes[q * a.nprobe + rank] = si[w][j];
    }
}
