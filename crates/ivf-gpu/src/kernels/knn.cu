// k-NN IVF-Flat query stages on the GPU. Each kernel is the twin of a CPU function in
// crates/ivf/src/ivf/stages.rs (filter, search_cell, reduce) and is tested against it.
//
// Ordering everywhere is (distance, id) ascending, ties to the smaller id, as on the CPU.
// Layout: row-major f32 vectors; cells stored contiguously (cell-major) with `offsets`
// (nlist + 1 entries) giving each cell's row range and `ids` the original id of each row.
// These are the per-pair kernels (a block per query or per (query, probe)): the fastest for
// one or a few queries. Cohorts take the tiled kernels of knn_tiled.cu. Shared helpers:
// common.cuh (prepended at compile time).

#define TILE 1024

// Block-wide argmin over (dist[x], id[x]) for x in [0, n). Every thread gets the winner's
// slot index (or -1 when all are +inf with NO_ID). Uses `red_d`, `red_i`, `red_x` (WARPS each).
__device__ int block_argmin(const float* dist, const unsigned* id, int n,
                            float* red_d, unsigned* red_i, int* red_x) {
    float bd = INF;
    unsigned bi = NO_ID;
    int bx = -1;
    for (int x = threadIdx.x; x < n; x += BLOCK) {
        if (before(dist[x], id[x], bd, bi)) { bd = dist[x]; bi = id[x]; bx = x; }
    }
    for (int off = 16; off > 0; off >>= 1) {
        float od = __shfl_down_sync(0xffffffffu, bd, off);
        unsigned oi = __shfl_down_sync(0xffffffffu, bi, off);
        int ox = __shfl_down_sync(0xffffffffu, bx, off);
        if (before(od, oi, bd, bi)) { bd = od; bi = oi; bx = ox; }
    }
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) { red_d[warp] = bd; red_i[warp] = bi; red_x[warp] = bx; }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < WARPS; ++w) {
            if (before(red_d[w], red_i[w], red_d[0], red_i[0])) {
                red_d[0] = red_d[w]; red_i[0] = red_i[w]; red_x[0] = red_x[w];
            }
        }
    }
    __syncthreads();
    int winner = red_x[0];
    __syncthreads();
    return winner;
}

// Warp computes the distance between `q` (shared) and `row` (global): lanes stride the
// dimensions, so a warp reads a row in coalesced pieces.
template <typename T>
__device__ __forceinline__ float warp_distance(const float* q, const T* row, int dim, int metric) {
    int lane = threadIdx.x % 32;
    float acc = 0.f;
    for (int d = lane; d < dim; d += 32) {
        float v = load_elem(row + d);
        acc = metric == 0 ? accumulate<0>(acc, q[d], v) : accumulate<1>(acc, q[d], v);
    }
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, off);
    return metric == 0 ? finish<0>(acc) : finish<1>(acc);
}

// Stage 1 (twin of stages::filter) for one query (the whole block): distances to all
// centroids into `dist` (nlist floats), then nprobe rounds of block argmin into `probes`. Also
// the persistent engine's filter stage (knn_persistent.cu).
__device__ void filter_one(const float* __restrict__ query, const float* __restrict__ centroids,
                           int nlist, int dim, int nprobe, int metric,
                           float* __restrict__ dist, unsigned* __restrict__ probes) {
    __shared__ float q[MAX_DIM];
    __shared__ float red_d[WARPS];
    __shared__ unsigned red_i[WARPS];
    for (int d = threadIdx.x; d < dim; d += BLOCK) q[d] = query[d];
    __syncthreads();
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    // FU centroids per warp at a time: their loads are in flight together (one centroid at a
    // time left a single query latency-bound at ~170 us on the H200). Same per-lane order of
    // terms and the same shuffle tree as warp_distance, so the same distances.
    const int FU = 8;
    for (int c0 = warp * FU; c0 < nlist; c0 += WARPS * FU) {
        float acc[FU];
#pragma unroll
        for (int u = 0; u < FU; ++u) acc[u] = 0.f;
        for (int d = lane; d < dim; d += 32) {
            float qd = q[d];
#pragma unroll
            for (int u = 0; u < FU; ++u) {
                if (c0 + u < nlist) {
                    float v = centroids[(size_t)(c0 + u) * dim + d];
                    acc[u] = metric == 0 ? accumulate<0>(acc[u], qd, v) : accumulate<1>(acc[u], qd, v);
                }
            }
        }
#pragma unroll
        for (int u = 0; u < FU; ++u) {
            float a = acc[u];
            for (int off = 16; off > 0; off >>= 1) a += __shfl_down_sync(0xffffffffu, a, off);
            if (lane == 0 && c0 + u < nlist) dist[c0 + u] = metric == 0 ? finish<0>(a) : finish<1>(a);
        }
    }
    __syncthreads();
    for (int r = 0; r < nprobe; ++r) {
        // The ids are the cell indices themselves.
        float bd = INF; unsigned bi = NO_ID;
        for (int x = threadIdx.x; x < nlist; x += BLOCK) {
            if (before(dist[x], (unsigned)x, bd, bi)) { bd = dist[x]; bi = (unsigned)x; }
        }
        for (int off = 16; off > 0; off >>= 1) {
            float od = __shfl_down_sync(0xffffffffu, bd, off);
            unsigned oi = __shfl_down_sync(0xffffffffu, bi, off);
            if (before(od, oi, bd, bi)) { bd = od; bi = oi; }
        }
        if (lane == 0) { red_d[warp] = bd; red_i[warp] = bi; }
        __syncthreads();
        if (threadIdx.x == 0) {
            for (int w = 1; w < WARPS; ++w)
                if (before(red_d[w], red_i[w], red_d[0], red_i[0])) { red_d[0] = red_d[w]; red_i[0] = red_i[w]; }
            probes[r] = red_i[0];
            if (red_i[0] != NO_ID) dist[red_i[0]] = INF;  // taken
        }
        __syncthreads();
    }
}

// Launch arguments, one struct per kernel (declared again in Rust, kernels/per_pair.rs; the
// kernel check compares the two layouts).
struct KnnFilterArgs {
    const float* queries;    // nq x dim
    const float* centroids;  // nlist x dim
    int nlist, dim, nprobe, metric;
    float* scratch;          // nq x nlist
    unsigned* probes;        // nq x nprobe
};

// Block per query.
extern "C" __global__ void knn_filter(const KnnFilterArgs a) {
    int qi = blockIdx.x;
    filter_one(a.queries + (size_t)qi * a.dim, a.centroids, a.nlist, a.dim, a.nprobe, a.metric,
               a.scratch + (size_t)qi * a.nlist, a.probes + (size_t)qi * a.nprobe);
}

// Stage 2 (twin of stages::search_cell). Block per (query, probe): scans the cell in tiles,
// keeps the k best in shared memory. partial ids/dists: (nq * nprobe) x k, padded with
// (+inf, NO_ID) when the cell holds fewer than k rows.

// One (query, cell) pair (the whole block): scans the cell in tiles, keeps the k best in
// shared memory, writes them (padded with (+inf, NO_ID)) to out_ids/out_dist. Also the
// persistent engine's search stage.
template <typename T>
__device__ void search_one(const float* __restrict__ query, const T* __restrict__ vectors,
                           const unsigned* __restrict__ row_ids, const unsigned long long* __restrict__ offsets,
                           unsigned cell, int dim, int k, int metric,
                           unsigned* __restrict__ out_ids, float* __restrict__ out_dist) {
    __shared__ float q[MAX_DIM];
    __shared__ float cand_d[TILE + MAX_K];
    __shared__ unsigned cand_i[TILE + MAX_K];
    __shared__ float best_d[MAX_K];
    __shared__ unsigned best_i[MAX_K];
    __shared__ float red_d[WARPS];
    __shared__ unsigned red_i[WARPS];
    __shared__ int red_x[WARPS];
    for (int d = threadIdx.x; d < dim; d += BLOCK) q[d] = query[d];
    for (int j = threadIdx.x; j < k; j += BLOCK) { best_d[j] = INF; best_i[j] = NO_ID; }
    __syncthreads();
    if (cell != NO_ID) {
        size_t start = offsets[cell], end = offsets[cell + 1];
        int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
        for (size_t t0 = start; t0 < end; t0 += TILE) {
            int n = (int)min((size_t)TILE, end - t0);
            for (int r = warp; r < n; r += WARPS) {
                float v = warp_distance(q, vectors + (t0 + r) * (size_t)dim, dim, metric);
                if (lane == 0) { cand_d[r] = v; cand_i[r] = row_ids[t0 + r]; }
            }
            // The current best join the tile's candidates; select the k best of both.
            for (int j = threadIdx.x; j < k; j += BLOCK) { cand_d[n + j] = best_d[j]; cand_i[n + j] = best_i[j]; }
            __syncthreads();
            for (int j = 0; j < k; ++j) {
                int x = block_argmin(cand_d, cand_i, n + k, red_d, red_i, red_x);
                if (threadIdx.x == 0) {
                    if (x >= 0) { best_d[j] = cand_d[x]; best_i[j] = cand_i[x]; cand_d[x] = INF; cand_i[x] = NO_ID; }
                    else { best_d[j] = INF; best_i[j] = NO_ID; }
                }
                __syncthreads();
            }
        }
    }
    for (int j = threadIdx.x; j < k; j += BLOCK) {
        out_ids[j] = best_i[j];
        out_dist[j] = best_d[j];
    }
    __syncthreads();
}

// Block per (query, probe); partial ids/dists: (nq * nprobe) x k.
template <typename T>
__device__ void search_impl(const float* __restrict__ queries, const T* __restrict__ vectors,
                            const unsigned* __restrict__ row_ids, const unsigned long long* __restrict__ offsets,
                            const unsigned* __restrict__ probes,
                            int nprobe, int dim, int k, int metric,
                            unsigned* __restrict__ out_ids, float* __restrict__ out_dist) {
    int b = blockIdx.x;
    search_one(queries + (size_t)(b / nprobe) * dim, vectors, row_ids, offsets, probes[b], dim, k, metric,
               out_ids + (size_t)b * k, out_dist + (size_t)b * k);
}

struct KnnSearchArgs {
    const float* queries;                // nq x dim
    const void* vectors;                 // the index's rows, of the kernel's element type
    const unsigned* row_ids;
    const unsigned long long* offsets;   // nlist + 1
    const unsigned* probes;              // nq x nprobe
    int nprobe, dim, k, metric;
    unsigned* out_ids;                   // (nq * nprobe) x k
    float* out_dist;
};

// The scan over f32, f16 and u8 vectors (twins: search_cell over the index, its f16-rounded
// copy, and the index itself, which u8 holds exactly when integral in 0..=255).
#define SEARCH(NAME, T)                                                                                      \
    extern "C" __global__ void NAME(const KnnSearchArgs a) {                                                 \
        search_impl(a.queries, (const T*)a.vectors, a.row_ids, a.offsets, a.probes, a.nprobe, a.dim, a.k,   \
                    a.metric, a.out_ids, a.out_dist);                                                        \
    }
SEARCH(knn_search, float)
SEARCH(knn_search_f16, unsigned short)
SEARCH(knn_search_u8, unsigned char)

// Stage 3 (twin of stages::reduce) for one query (the whole block): the k best of n = nprobe
// * k partial results, staged in `smem` (n * 8 bytes of dynamic shared memory). Also the
// persistent engine's reduce stage.
__device__ void reduce_one(const unsigned* __restrict__ part_ids, const float* __restrict__ part_dist,
                           int n, int k, unsigned* __restrict__ out_ids, float* __restrict__ out_dist,
                           unsigned char* smem) {
    float* cd = (float*)smem;
    unsigned* ci = (unsigned*)(cd + n);
    __shared__ float red_d[WARPS];
    __shared__ unsigned red_i[WARPS];
    __shared__ int red_x[WARPS];
    for (int x = threadIdx.x; x < n; x += BLOCK) {
        cd[x] = part_dist[x];
        ci[x] = part_ids[x];
    }
    __syncthreads();
    for (int j = 0; j < k; ++j) {
        int x = block_argmin(cd, ci, n, red_d, red_i, red_x);
        if (threadIdx.x == 0) {
            out_ids[j] = x >= 0 ? ci[x] : NO_ID;
            out_dist[j] = x >= 0 ? cd[x] : INF;
            if (x >= 0) { cd[x] = INF; ci[x] = NO_ID; }
        }
        __syncthreads();
    }
}

struct KnnReduceArgs {
    const unsigned* part_ids;  // (nq * nprobe) x k
    const float* part_dist;
    int nprobe, k;
    unsigned* out_ids;         // nq x k
    float* out_dist;
};

// Block per query; nprobe * k * 8 bytes of dynamic shared memory.
extern "C" __global__ void knn_reduce(const KnnReduceArgs a) {
    extern __shared__ unsigned char smem[];
    int qi = blockIdx.x;
    int n = a.nprobe * a.k;
    reduce_one(a.part_ids + (size_t)qi * n, a.part_dist + (size_t)qi * n, n, a.k,
               a.out_ids + (size_t)qi * a.k, a.out_dist + (size_t)qi * a.k, smem);
}
