// LeNet's layers as block-cooperative device functions, shared by the batch kernels
// (lenet.cu) and the persistent worker (lenet_persistent.cu). The network and its CPU twin:
// crates/services/src/lenet/model.rs. Sizes (LENET_*) come from the Rust prelude.
//
// A pooled output is tanh(max of its four sums): tanh is increasing, so it equals the CPU's
// max of the four tanh values.
//
// Two ways to compute conv2 (four fifths of the network's multiply-adds), chosen per module
// by `lenet.math`: FP32 on the CUDA cores (lenet_conv2_fp32), or as an implicit GEMM on the
// tensor cores (lenet_conv2_tc) in 3xTF32: each operand is split into a TF32 value and the
// TF32 value of its remainder, and the three products that matter are summed, which keeps
// FP32's accuracy (plain TF32 keeps 10 mantissa bits and would move logits by ~1e-3).

#define LENET_PIXELS (LENET_SIDE * LENET_SIDE)
#define LENET_KK (LENET_KERNEL * LENET_KERNEL)
#define LENET_P1_PLANE (LENET_P1_SIDE * LENET_P1_SIDE)
#define LENET_P2_PLANE (LENET_P2_SIDE * LENET_P2_SIDE)

// Shared memory one image's convolutions use.
struct LenetConvSmem {
    float x[LENET_PIXELS];
    float w1[LENET_C1 * LENET_KK];
    float p1[LENET_C1 * LENET_P1_PLANE];
};

// One image (784 bytes at `in`) -> conv1 -> tanh -> pool into sm.p1, every thread of the
// block calling (CUDA cores: a fifth of the work, K = 25 is too short for the tensor cores).
//
// A step is a quarter of one pooled row of one channel: 3 pooled outputs, i.e. 2 conv rows x
// 6 conv columns = 12 sums, with the channel's 25 weights and one input row's 10 values at a
// time in registers, each read from shared memory once for every sum it feeds. (One pooled
// output per step read 125 values from shared memory for its 100 multiply-adds, and shared
// memory's bandwidth, not the arithmetic, set conv1's time.) Each sum still adds bias, then
// ky, then kx in order, as the CPU twin does.
#define LENET_C1_QUARTERS 4
#define LENET_C1_POOLED (LENET_P1_SIDE / LENET_C1_QUARTERS)  // pooled outputs a step: 3
#define LENET_C1_COLS (2 * LENET_C1_POOLED)                   // conv columns a step: 6
#define LENET_C1_IN (LENET_C1_COLS + LENET_KERNEL - 1)        // input values a row: 10

__device__ void lenet_conv1_pool(const unsigned char* in, const float* w1, const float* b1,
                                 LenetConvSmem& sm) {
    static_assert(LENET_P1_SIDE % LENET_C1_QUARTERS == 0, "a pooled row splits in quarters");
    for (int i = threadIdx.x; i < LENET_PIXELS; i += blockDim.x) sm.x[i] = in[i] * (1.0f / 255.0f);
    for (int i = threadIdx.x; i < LENET_C1 * LENET_KK; i += blockDim.x) sm.w1[i] = w1[i];
    __syncthreads();

    const int steps = LENET_C1 * LENET_P1_SIDE * LENET_C1_QUARTERS;
    for (int it = threadIdx.x; it < steps; it += blockDim.x) {
        const int c = it / (LENET_P1_SIDE * LENET_C1_QUARTERS);
        const int r = it % (LENET_P1_SIDE * LENET_C1_QUARTERS);
        const int py = r / LENET_C1_QUARTERS, q = r % LENET_C1_QUARTERS;
        const int y0 = 2 * py, x0 = LENET_C1_COLS * q;
        float w[LENET_KK];
#pragma unroll
        for (int i = 0; i < LENET_KK; ++i) w[i] = sm.w1[c * LENET_KK + i];
        const float b = b1[c];
        float s[2][LENET_C1_COLS];
#pragma unroll
        for (int dy = 0; dy < 2; ++dy)
#pragma unroll
            for (int cx = 0; cx < LENET_C1_COLS; ++cx) s[dy][cx] = b;
#pragma unroll
        for (int iy = 0; iy < LENET_KERNEL + 1; ++iy) {
            float v[LENET_C1_IN];
            const float* row = sm.x + (y0 + iy) * LENET_SIDE + x0;
#pragma unroll
            for (int j = 0; j < LENET_C1_IN; ++j) v[j] = row[j];
#pragma unroll
            for (int dy = 0; dy < 2; ++dy) {
                const int ky = iy - dy;  // known after unrolling
                if (ky < 0 || ky >= LENET_KERNEL) continue;
#pragma unroll
                for (int kx = 0; kx < LENET_KERNEL; ++kx)
#pragma unroll
                    for (int cx = 0; cx < LENET_C1_COLS; ++cx)
                        s[dy][cx] += w[ky * LENET_KERNEL + kx] * v[cx + kx];
            }
        }
        float* out = sm.p1 + c * LENET_P1_PLANE + py * LENET_P1_SIDE + LENET_C1_POOLED * q;
#pragma unroll
        for (int p = 0; p < LENET_C1_POOLED; ++p)
            out[p] = tanhf(fmaxf(fmaxf(s[0][2 * p], s[0][2 * p + 1]), fmaxf(s[1][2 * p], s[1][2 * p + 1])));
    }
    __syncthreads();
}

// conv2 -> tanh -> pool on the CUDA cores: the 800 features, channel-major
// (c * 16 + y * 4 + x). Threads of a warp share one or two output channels, so a weight load
// is a broadcast.
__device__ void lenet_conv2_fp32(const float* w2, const float* b2, const LenetConvSmem& sm,
                                 float* out) {
    for (int o = threadIdx.x; o < LENET_FLAT; o += blockDim.x) {
        const int c = o / LENET_P2_PLANE;
        const int y = 2 * ((o / LENET_P2_SIDE) % LENET_P2_SIDE);
        const int xx = 2 * (o % LENET_P2_SIDE);
        const float b = b2[c];
        float s00 = b, s01 = b, s10 = b, s11 = b;
        for (int ci = 0; ci < LENET_C1; ++ci) {
            const float* k = w2 + (c * LENET_C1 + ci) * LENET_KK;
            const float* plane = sm.p1 + ci * LENET_P1_PLANE;
            for (int ky = 0; ky < LENET_KERNEL; ++ky) {
                for (int kx = 0; kx < LENET_KERNEL; ++kx) {
                    const float w = __ldg(k + ky * LENET_KERNEL + kx);
                    const float* src = plane + (y + ky) * LENET_P1_SIDE + xx + kx;
                    s00 += w * src[0];
                    s01 += w * src[1];
                    s10 += w * src[LENET_P1_SIDE];
                    s11 += w * src[LENET_P1_SIDE + 1];
                }
            }
        }
        out[o] = tanhf(fmaxf(fmaxf(s00, s01), fmaxf(s10, s11)));
    }
    __syncthreads();
}

// ---- Tensor cores: mma.sync m16n8k8 in TF32 (sm_80 and later) ----
//
// A warp multiplies a 16x8 tile of A (row-major) by an 8x8 tile of B (column-major) into a
// 16x8 tile of C. Lane l holds, with g = l / 4 and t = l % 4 (PTX ISA, "matrix fragments for
// mma.m16n8k8"): A (g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4); B (k t, n g), (k t + 4, n g);
// C (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1).

// x as the nearest TF32 value (its low 13 mantissa bits zero), and the TF32 value of what
// that leaves: big + small carries 21 bits of x's 24.
__device__ __forceinline__ void tf32_split(float x, unsigned& big, unsigned& small) {
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(big) : "f"(x));
    const float rest = x - __uint_as_float(big);
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(small) : "f"(rest));
}

// Not volatile: the product has no side effect, and the compiler may then hoist the next k
// steps' loads above it (they are what a single image waits on).
__device__ __forceinline__ void mma_tf32(float c[4], const unsigned a[4], const unsigned b[2]) {
    asm(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// c += a b in 3xTF32: the small cross terms first, the big product last (the product of the
// two small parts is below FP32's rounding and is left out).
__device__ __forceinline__ void mma_tf32x3(float c[4], const unsigned ab[4],
                                           const unsigned as[4], const unsigned bb[2],
                                           const unsigned bs[2]) {
    mma_tf32(c, as, bb);
    mma_tf32(c, ab, bs);
    mma_tf32(c, ab, bb);
}

// conv2 as an implicit GEMM: C[m][n] = sum_k A[m][k] B[k][n] with m an output position
// (8 x 8 = 64), n an output channel (50, padded to 56), k = (input channel, ky, kx) (500,
// padded to 504). A is never built: A[m][k] = p1[moff(m) + koff[k]], koff tabulated per k.
// B[k][n] = w2[n][k], w2's own layout. A padded k reads p1[moff] (finite) against B = 0.
#define LENET_C2_M (LENET_C2_SIDE * LENET_C2_SIDE)
#define LENET_C2_K (LENET_C1 * LENET_KK)
#define LENET_C2_KP ((LENET_C2_K + 7) / 8 * 8)
#define LENET_C2_NT ((LENET_C2 + 7) / 8)
#define LENET_C2_NP (LENET_C2_NT * 8)

struct LenetTcSmem {
    LenetConvSmem conv;
    int koff[LENET_C2_KP];
    float c2[LENET_C2_M * LENET_C2_NP];  // the sums before bias, tanh and pool: [m][n]
};

// The block's warps (a multiple of 4) split the 4 row tiles x 7 channel tiles: warp w takes
// row tile w % 4 and channel tiles w / 4, w / 4 + warps / 4, ... sharing each A fragment.
// Where A's row m (output position y * 8 + x) starts in the pooled conv1 planes.
__device__ __forceinline__ int lenet_moff(int m) {
    return (m / LENET_C2_SIDE) * LENET_P1_SIDE + m % LENET_C2_SIDE;
}

// A lane's A fragment for one k step: rows at offsets off_a, off_b (g, g + 8) and columns at
// oa, ob (t, t + 4), each element split into its TF32 parts.
__device__ __forceinline__ void lenet_a_fragment(const float* p1, int off_a, int off_b, int oa,
                                                 int ob, unsigned ab[4], unsigned as[4]) {
    tf32_split(p1[off_a + oa], ab[0], as[0]);
    tf32_split(p1[off_b + oa], ab[1], as[1]);
    tf32_split(p1[off_a + ob], ab[2], as[2]);
    tf32_split(p1[off_b + ob], ab[3], as[3]);
}

// koff[k]: where A's column k starts in the pooled conv1 planes (0 for the padding).
__device__ void lenet_koff_table(int* koff) {
    for (int k = threadIdx.x; k < LENET_C2_KP; k += blockDim.x) {
        const int ci = k / LENET_KK, r = k % LENET_KK;
        koff[k] = k < LENET_C2_K
                      ? ci * LENET_P1_PLANE + (r / LENET_KERNEL) * LENET_P1_SIDE + r % LENET_KERNEL
                      : 0;
    }
    __syncthreads();
}

__device__ void lenet_conv2_tc(const float* w2, const float* b2, LenetTcSmem& sm, float* out) {
    lenet_koff_table(sm.koff);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int mt = warp % 4, n_first = warp / 4, n_step = warps / 4;
    const int m_a = 16 * mt + g, m_b = m_a + 8;
    const int off_a = lenet_moff(m_a), off_b = lenet_moff(m_b);
    const float* p1 = sm.conv.p1;
    float acc[LENET_C2_NT][4];
#pragma unroll
    for (int j = 0; j < LENET_C2_NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;

#pragma unroll 3
    for (int k0 = 0; k0 < LENET_C2_KP; k0 += 8) {
        const int ka = k0 + t, kb = ka + 4;
        const int oa = sm.koff[ka], ob = sm.koff[kb];
        unsigned ab[4], as[4];
        lenet_a_fragment(p1, off_a, off_b, oa, ob, ab, as);
#pragma unroll
        for (int j = 0; j < LENET_C2_NT; ++j) {
            const int nt = n_first + j * n_step;
            if (nt < LENET_C2_NT) {
                const int n = nt * 8 + g;
                const float* row = w2 + (size_t)n * LENET_C2_K;
                const bool live = n < LENET_C2;
                const float w0 = live && ka < LENET_C2_K ? __ldg(row + ka) : 0.f;
                const float w1 = live && kb < LENET_C2_K ? __ldg(row + kb) : 0.f;
                unsigned bb[2], bs[2];
                tf32_split(w0, bb[0], bs[0]);
                tf32_split(w1, bb[1], bs[1]);
                mma_tf32x3(acc[j], ab, as, bb, bs);
            }
        }
    }
#pragma unroll
    for (int j = 0; j < LENET_C2_NT; ++j) {
        const int nt = n_first + j * n_step;
        if (nt < LENET_C2_NT) {
            const int n = nt * 8 + 2 * t;
            sm.c2[m_a * LENET_C2_NP + n] = acc[j][0];
            sm.c2[m_a * LENET_C2_NP + n + 1] = acc[j][1];
            sm.c2[m_b * LENET_C2_NP + n] = acc[j][2];
            sm.c2[m_b * LENET_C2_NP + n + 1] = acc[j][3];
        }
    }
    __syncthreads();

    // Bias, 2x2 max-pool, tanh: the 800 features, channel-major as the FP32 path writes them.
    for (int o = threadIdx.x; o < LENET_FLAT; o += blockDim.x) {
        const int c = o / LENET_P2_PLANE;
        const int y = 2 * ((o / LENET_P2_SIDE) % LENET_P2_SIDE);
        const int xx = 2 * (o % LENET_P2_SIDE);
        const float* s = sm.c2 + (y * LENET_C2_SIDE + xx) * LENET_C2_NP + c;
        const float top = fmaxf(s[0], s[LENET_C2_NP]);
        const float bottom = fmaxf(s[LENET_C2_SIDE * LENET_C2_NP], s[(LENET_C2_SIDE + 1) * LENET_C2_NP]);
        out[o] = tanhf(fmaxf(top, bottom) + b2[c]);
    }
    __syncthreads();
}

// One image's dense layer: out[n] = bias[n] + sum_k in[k] * w[n][k] (ReLU if `relu`), a warp
// per output at a time (its lanes read a weight row coalesced), every thread calling.
__device__ void lenet_dense_one(const float* in, const float* w, const float* bias, int k,
                                int n, bool relu, float* out) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    for (int j = warp; j < n; j += warps) {
        const float* row = w + (size_t)j * k;
        float s = 0.0f;
        for (int i = lane; i < k; i += 32) s += __ldg(row + i) * in[i];
        for (int d = 16; d > 0; d >>= 1) s += __shfl_xor_sync(0xffffffffu, s, d);
        if (lane == 0) {
            float v = bias[j] + s;
            out[j] = relu ? fmaxf(v, 0.0f) : v;
        }
    }
    __syncthreads();
}

// ---- A team of blocks on one image (the persistent engine's `team` plan) ----------------
// One block per image leaves a single image waiting on one SM's loads in turn; a team of
// LENET_TEAM blocks splits it: member m computes conv2's channel tile m (8 channels; conv1
// is recomputed by every member, cheaper than a barrier), then 1/LENET_TEAM of fc1's rows.
// These functions need 16 warps (LENET_P_THREADS = 512): four row tiles x four k quarters.

#if LENET_TEAM != LENET_C2_NT
#error "a team has one member per conv2 channel tile"
#endif
#if LENET_P_THREADS != 512
#error "the team's conv2 splits 16 warps into 4 row tiles x 4 k quarters"
#endif

// A tile's weights in shared memory, [8 channels][k]: rows 508 floats apart, so the eight
// rows a B fragment reads fall in distinct banks (504 would put rows 0 and 4 in one).
#define LENET_W2_TILE_STRIDE (LENET_C2_KP + 4)
// conv2's sums of one tile before bias and pool, one copy per k quarter: [quarter][m][8].
#define LENET_TILE_PARTS (4 * LENET_C2_M * 8)

// Tile `nt`'s weights (channels past LENET_C2 and k past LENET_C2_K zero), loaded once.
__device__ void lenet_load_w2_tile(const float* w2, int nt, float* ws) {
    for (int i = threadIdx.x; i < 8 * LENET_W2_TILE_STRIDE; i += blockDim.x) {
        const int r = i / LENET_W2_TILE_STRIDE, k = i % LENET_W2_TILE_STRIDE, n = nt * 8 + r;
        ws[i] = n < LENET_C2 && k < LENET_C2_K ? w2[(size_t)n * LENET_C2_K + k] : 0.f;
    }
    __syncthreads();
}

// A tile's sums on the tensor cores (3xTF32, as lenet_conv2_tc): warp w takes row tile w % 4
// over k quarter w / 4 (16 of the 63 k steps, the last 15) into parts[w / 4].
__device__ void lenet_conv2_tile_tc(const float* p1, const int* koff, const float* ws,
                                    float* parts) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int mt = warp % 4, kq = warp / 4;
    const int m_a = 16 * mt + g, m_b = m_a + 8;
    const int off_a = lenet_moff(m_a), off_b = lenet_moff(m_b);
    const int steps = LENET_C2_KP / 8, per = (steps + 3) / 4;
    const int s0 = kq * per, s1 = min(steps, s0 + per);
    const float* wrow = ws + g * LENET_W2_TILE_STRIDE;
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 4
    for (int st = s0; st < s1; ++st) {
        const int ka = 8 * st + t, kb = ka + 4;
        const int oa = koff[ka], ob = koff[kb];
        unsigned ab[4], as[4], bb[2], bs[2];
        lenet_a_fragment(p1, off_a, off_b, oa, ob, ab, as);
        tf32_split(wrow[ka], bb[0], bs[0]);
        tf32_split(wrow[kb], bb[1], bs[1]);
        mma_tf32x3(acc, ab, as, bb, bs);
    }
    float* q = parts + kq * LENET_C2_M * 8;
    q[m_a * 8 + 2 * t] = acc[0];
    q[m_a * 8 + 2 * t + 1] = acc[1];
    q[m_b * 8 + 2 * t] = acc[2];
    q[m_b * 8 + 2 * t + 1] = acc[3];
    __syncthreads();
}

// The same sums on the CUDA cores: thread (quarter, channel, pooled position) sums its 2x2
// window's four outputs over the quarter's 5 input channels.
__device__ void lenet_conv2_tile_fp32(const float* p1, const float* ws, float* parts) {
    const int kq = threadIdx.x >> 7, r = threadIdx.x & 127;
    const int n = r / LENET_P2_PLANE, p = r % LENET_P2_PLANE;
    const int y = 2 * (p / LENET_P2_SIDE), x = 2 * (p % LENET_P2_SIDE);
    constexpr int CI = LENET_C1 / 4;
    static_assert(LENET_C1 % 4 == 0, "conv1's channels split in four quarters");
    float s00 = 0.f, s01 = 0.f, s10 = 0.f, s11 = 0.f;
    for (int ci = kq * CI; ci < (kq + 1) * CI; ++ci) {
        const float* k = ws + n * LENET_W2_TILE_STRIDE + ci * LENET_KK;
        const float* plane = p1 + ci * LENET_P1_PLANE;
#pragma unroll
        for (int ky = 0; ky < LENET_KERNEL; ++ky) {
#pragma unroll
            for (int kx = 0; kx < LENET_KERNEL; ++kx) {
                const float w = k[ky * LENET_KERNEL + kx];
                const float* src = plane + (y + ky) * LENET_P1_SIDE + x + kx;
                s00 += w * src[0];
                s01 += w * src[1];
                s10 += w * src[LENET_P1_SIDE];
                s11 += w * src[LENET_P1_SIDE + 1];
            }
        }
    }
    float* q = parts + kq * LENET_C2_M * 8;
    const int m = y * LENET_C2_SIDE + x;
    q[m * 8 + n] = s00;
    q[(m + 1) * 8 + n] = s01;
    q[(m + LENET_C2_SIDE) * 8 + n] = s10;
    q[(m + LENET_C2_SIDE + 1) * 8 + n] = s11;
    __syncthreads();
}

// Tile nt's features from its partial sums (the quarters added in order, then bias, 2x2
// max-pool, tanh), channel-major as lenet_conv2_* write them; channels past LENET_C2 dropped.
__device__ void lenet_conv2_tile_pool(const float* parts, const float* b2, int nt, float* out) {
    for (int o = threadIdx.x; o < 8 * LENET_P2_PLANE; o += blockDim.x) {
        const int r = o / LENET_P2_PLANE, c = nt * 8 + r, p = o % LENET_P2_PLANE;
        if (c >= LENET_C2) continue;
        const int y = 2 * (p / LENET_P2_SIDE), x = 2 * (p % LENET_P2_SIDE);
        float best = __int_as_float(0xff800000);  // -inf
#pragma unroll
        for (int d = 0; d < 4; ++d) {
            const int m = (y + d / 2) * LENET_C2_SIDE + x + d % 2;
            float s = 0.f;
#pragma unroll
            for (int kq = 0; kq < 4; ++kq) s += parts[kq * LENET_C2_M * 8 + m * 8 + r];
            best = fmaxf(best, s);
        }
        out[c * LENET_P2_PLANE + p] = tanhf(best + b2[c]);
    }
    __syncthreads();
}

// Rows [r0, r1) of a dense layer on one image: out[j] = bias[j] + w[j] . in (ReLU if asked),
// a warp per row. K is known here, so a lane issues all its float4 loads of the row before
// using the first: a row costs one L2 round trip, not one per step.
template <int K>
__device__ void lenet_dense_rows(const float4* in, const float* w, const float* bias, int r0,
                                 int r1, bool relu, float* out) {
    static_assert(K % 4 == 0, "rows are read as float4");
    constexpr int V = K / 4, PER = (V + 31) / 32;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    for (int j = r0 + warp; j < r1; j += warps) {
        const float4* row = (const float4*)(w + (size_t)j * K);
        float4 v[PER];
#pragma unroll
        for (int i = 0; i < PER; ++i) {
            const int e = lane + 32 * i;
            v[i] = e < V ? __ldg(row + e) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
        float s = 0.f;
#pragma unroll
        for (int i = 0; i < PER; ++i) {
            const int e = lane + 32 * i;
            if (e < V) {
                const float4 x = in[e];
                s += v[i].x * x.x + v[i].y * x.y + v[i].z * x.z + v[i].w * x.w;
            }
        }
        for (int d = 16; d > 0; d >>= 1) s += __shfl_xor_sync(0xffffffffu, s, d);
        if (lane == 0) {
            const float o = bias[j] + s;
            out[j] = relu ? fmaxf(o, 0.f) : o;
        }
    }
    __syncthreads();
}
