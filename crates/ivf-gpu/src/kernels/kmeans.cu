// k-means assignment: the nearest centroid of every row, as a tiled product.
// CPU twin: cohort_ivf::kmeans::assign (exact distances; the GPU's ||c||^2 - 2 x.c form may
// pick another centroid only where two are tied to within rounding).
//
// A block takes KM_TILE rows and walks all centroids in tiles of KM_TILE, the dimensions in
// steps of KM_STEP staged in shared memory. Its 16 x 16 threads each own a 4 x 4 register tile
// (rows ty + 16 i, centroids tx + 16 j), so every value read from shared memory feeds four
// FMAs. Each thread keeps the best centroid of its 4 rows; the 16 threads sharing a row (one
// half-warp) agree on it by shuffles at the end.
//
// KM_TILE comes from the generated prelude (the host's grid rule uses it).
#define KM_STEP 32
#define KM_SUB (KM_TILE / 16)

// Launch arguments (declared again in Rust, kernels/kmeans.rs; the kernel check compares the
// two layouts).
struct KmeansAssignArgs {
    const float* x;       // n x dim rows
    unsigned long long n;
    const float* c;       // k x dim centroids
    const float* c_norm;  // k squared norms
    int k, dim, metric;
    unsigned* out;        // n nearest centroids
};

// A block per KM_TILE rows.
extern "C" __global__ void kmeans_assign(const KmeansAssignArgs a)
{
    const float* __restrict__ x = a.x;
    const float* __restrict__ c = a.c;
    const float* __restrict__ c_norm = a.c_norm;
    unsigned* __restrict__ out = a.out;
    const unsigned long long n = a.n;
    const int k = a.k, dim = a.dim, metric = a.metric;
    __shared__ float xs[KM_STEP][KM_TILE + 1];
    __shared__ float cs[KM_STEP][KM_TILE + 1];
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const unsigned long long row0 = (unsigned long long)blockIdx.x * KM_TILE;

    float best[KM_SUB];
    unsigned best_id[KM_SUB];
    for (int i = 0; i < KM_SUB; i++) { best[i] = INF; best_id[i] = 0xffffffffu; }

    for (int c0 = 0; c0 < k; c0 += KM_TILE) {
        float acc[KM_SUB][KM_SUB];
        for (int i = 0; i < KM_SUB; i++)
            for (int j = 0; j < KM_SUB; j++) acc[i][j] = 0.f;
        for (int d0 = 0; d0 < dim; d0 += KM_STEP) {
            // Stage KM_TILE x KM_STEP of rows and of centroids, transposed; zeros past the ends.
            for (int e = threadIdx.x; e < KM_TILE * KM_STEP; e += 256) {
                const int r = e / KM_STEP, d = e % KM_STEP;
                const unsigned long long xr = row0 + r;
                const int cr = c0 + r;
                xs[d][r] = (xr < n && d0 + d < dim) ? x[xr * dim + d0 + d] : 0.f;
                cs[d][r] = (cr < k && d0 + d < dim) ? c[(unsigned long long)cr * dim + d0 + d] : 0.f;
            }
            __syncthreads();
            #pragma unroll 8
            for (int d = 0; d < KM_STEP; d++) {
                float a[KM_SUB], b[KM_SUB];
                for (int i = 0; i < KM_SUB; i++) a[i] = xs[d][ty + 16 * i];
                for (int j = 0; j < KM_SUB; j++) b[j] = cs[d][tx + 16 * j];
                for (int i = 0; i < KM_SUB; i++)
                    for (int j = 0; j < KM_SUB; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
            }
            __syncthreads();
        }
        // L2: |x|^2 is the same for every centroid, so |c|^2 - 2 x.c ranks them; inner
        // product: -x.c (smaller is nearer, as the CPU's Metric::distance).
        for (int j = 0; j < KM_SUB; j++) {
            const int cj = c0 + tx + 16 * j;
            if (cj >= k) continue;
            for (int i = 0; i < KM_SUB; i++) {
                const float s = metric == 0 ? c_norm[cj] - 2.f * acc[i][j] : -acc[i][j];
                if (s < best[i]) { best[i] = s; best_id[i] = (unsigned)cj; }
            }
        }
    }
    // The 16 threads of a row are lanes tx = 0..15 of one half-warp: xor offsets below 16
    // stay inside it. Ties go to the smaller centroid id, as the CPU's first-minimum scan.
    for (int i = 0; i < KM_SUB; i++) {
        float b = best[i];
        unsigned id = best_id[i];
        for (int off = 8; off > 0; off >>= 1) {
            const float ob = __shfl_xor_sync(0xffffffffu, b, off);
            const unsigned oid = __shfl_xor_sync(0xffffffffu, id, off);
            if (before(ob, oid, b, id)) { b = ob; id = oid; }
        }
        const unsigned long long r = row0 + ty + 16 * i;
        if (tx == 0 && r < n) out[r] = id;
    }
}
