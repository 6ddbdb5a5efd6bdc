// The tiled plan's filter on the tensor cores: the same probes as knn_filter_tiled +
// knn_select_filter (and so as the CPU twin stages::filter), in three steps.
//
// 1. knn_filter_tc: every query x centroid score as a matrix product on the tensor cores
//    (mma.sync m16n8k8, TF32 inputs, f32 accumulators). TF32 keeps 10 mantissa bits, so each
//    operand is split into a TF32 head and a TF32 tail (x = hi + lo) and the product taken as
//    hi.hi + hi.lo + lo.hi ("3xTF32"): within a few f32 ulps of the f32 dot product, at
//    three tensor-core issues per step instead of 64 FMAs per thread. The score is the
//    distance less a per-query constant: L2 |c|^2 - 2 q.c (|q|^2 dropped), inner product -q.c.
// 2. knn_select_filter (knn_tiled.cu) picks each query's `width` best scores: nprobe plus a
//    margin, so that a cell the rounding moved a few places still makes the list.
// 3. knn_rerank_filter: the exact distances of those cells, summed in the order
//    knn_filter_tiled sums them (the same bits), and the nprobe nearest, sorted, ties to the
//    smaller id - the probes of the exact filter.

// TC_TILE (queries and centroids per block tile) and TC_THREADS (four warps, each 16 queries
// x the tile's TC_TILE centroids) come from the host's kernels.rs.
#define TC_DK 32  // dimensions per shared-memory stage
static_assert(TC_THREADS == 32 * (TC_TILE / 16), "a warp per 16 queries of the tile");
static_assert(TC_TILE % 8 == 0, "whole 8-centroid mma tiles");
#define RERANK_QUERIES (BLOCK / 32)  // queries per knn_rerank_filter block, a warp each

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

struct KnnFilterTcArgs {
    const float* queries;    // nq x dim
    int nq;
    const float* centroids;  // nlist x dim
    int nlist, dim, metric;
    float* scratch;          // nq x nlist scores (step 1)
};

// Grid (ceil(nq / TC_TILE), ceil(nlist / TC_TILE)). Rows and dimensions past the ends are
// staged as zeros (they add nothing and are not written).
extern "C" __global__ void __launch_bounds__(TC_THREADS) knn_filter_tc(const KnnFilterTcArgs a) {
    // +4: a warp's fragment loads (8 rows x 4 columns) fall in 32 distinct banks.
    __shared__ float qs[TC_TILE][TC_DK + 4];
    __shared__ float cs[TC_TILE][TC_DK + 4];
    __shared__ float cnorm[TC_TILE];
    const int q0 = blockIdx.x * TC_TILE, c0 = blockIdx.y * TC_TILE;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int r0 = warp * 16;  // the warp's first query row in the tile
    float acc[TC_TILE / 8][4];
#pragma unroll
    for (int n = 0; n < TC_TILE / 8; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[n][i] = 0.f;
    float norm = 0.f;  // threads < TC_TILE: |centroid c0 + thread|^2, in f32
    for (int d0 = 0; d0 < a.dim; d0 += TC_DK) {
        for (int e = threadIdx.x; e < TC_TILE * TC_DK; e += TC_THREADS) {
            const int r = e / TC_DK, d = e % TC_DK;
            const bool in_d = d0 + d < a.dim;
            qs[r][d] = (q0 + r < a.nq && in_d) ? a.queries[(size_t)(q0 + r) * a.dim + d0 + d] : 0.f;
            cs[r][d] = (c0 + r < a.nlist && in_d) ? a.centroids[(size_t)(c0 + r) * a.dim + d0 + d] : 0.f;
        }
        __syncthreads();
        if (threadIdx.x < TC_TILE)
            for (int d = 0; d < TC_DK; ++d) norm = fmaf(cs[threadIdx.x][d], cs[threadIdx.x][d], norm);
#pragma unroll
        for (int k = 0; k < TC_DK; k += 8) {
            unsigned ahi[4], alo[4];
            split_tf32(qs[r0 + g][k + t], ahi[0], alo[0]);
            split_tf32(qs[r0 + g + 8][k + t], ahi[1], alo[1]);
            split_tf32(qs[r0 + g][k + t + 4], ahi[2], alo[2]);
            split_tf32(qs[r0 + g + 8][k + t + 4], ahi[3], alo[3]);
#pragma unroll
            for (int n = 0; n < TC_TILE / 8; ++n) {
                unsigned bhi[2], blo[2];
                split_tf32(cs[n * 8 + g][k + t], bhi[0], blo[0]);
                split_tf32(cs[n * 8 + g][k + t + 4], bhi[1], blo[1]);
                // The small terms first, so they are not lost under the large one.
                mma_tf32(acc[n], alo, bhi);
                mma_tf32(acc[n], ahi, blo);
                mma_tf32(acc[n], ahi, bhi);
            }
        }
        __syncthreads();
    }
    if (threadIdx.x < TC_TILE) cnorm[threadIdx.x] = norm;
    __syncthreads();
#pragma unroll
    for (int n = 0; n < TC_TILE / 8; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int q = q0 + r0 + g + 8 * (i / 2), cl = n * 8 + 2 * t + i % 2, c = c0 + cl;
            if (q < a.nq && c < a.nlist)
                a.scratch[(size_t)q * a.nlist + c] = a.metric == 0 ? cnorm[cl] - 2.f * acc[n][i] : -acc[n][i];
        }
}

struct KnnRerankFilterArgs {
    const float* queries;    // nq x dim
    int nq;
    const float* centroids;  // nlist x dim
    int nlist, dim, metric;
    const unsigned* approx;  // nq x width: each query's best cells by step 1's scores
    int width, nprobe;       // width <= SEL_MAX
    unsigned* probes;        // nq x nprobe
};

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

// A warp per query (RERANK_QUERIES of them per block): a lane per candidate cell computes its
// exact distance; each cell's rank among the query's candidates is where it goes.
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
