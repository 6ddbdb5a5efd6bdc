// The tiled plan's distance loops (knn_tiled.cu's unit, which this file precedes): the
// tiled product through shared memory, the thread-per-row path for groups of a few
// queries, the tensor-core u8 product (block and warp versions) and the one-query u8 rows.

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
