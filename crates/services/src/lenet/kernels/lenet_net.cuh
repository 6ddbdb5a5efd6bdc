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
__device__ void lenet_conv1_pool(const unsigned char* in, const float* w1, const float* b1,
                                 LenetConvSmem& sm) {
    for (int i = threadIdx.x; i < LENET_PIXELS; i += blockDim.x) sm.x[i] = in[i] * (1.0f / 255.0f);
    for (int i = threadIdx.x; i < LENET_C1 * LENET_KK; i += blockDim.x) sm.w1[i] = w1[i];
    __syncthreads();

    // One pooled output (four sums) per step.
    for (int o = threadIdx.x; o < LENET_C1 * LENET_P1_PLANE; o += blockDim.x) {
        const int c = o / LENET_P1_PLANE;
        const int y = 2 * ((o / LENET_P1_SIDE) % LENET_P1_SIDE);
        const int xx = 2 * (o % LENET_P1_SIDE);
        const float b = b1[c];
        float s00 = b, s01 = b, s10 = b, s11 = b;
        const float* k = sm.w1 + c * LENET_KK;
        for (int ky = 0; ky < LENET_KERNEL; ++ky) {
            for (int kx = 0; kx < LENET_KERNEL; ++kx) {
                const float w = k[ky * LENET_KERNEL + kx];
                const float* src = sm.x + (y + ky) * LENET_SIDE + xx + kx;
                s00 += w * src[0];
                s01 += w * src[1];
                s10 += w * src[LENET_SIDE];
                s11 += w * src[LENET_SIDE + 1];
            }
        }
        sm.p1[o] = tanhf(fmaxf(fmaxf(s00, s01), fmaxf(s10, s11)));
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
__device__ void lenet_conv2_tc(const float* w2, const float* b2, LenetTcSmem& sm, float* out) {
    for (int k = threadIdx.x; k < LENET_C2_KP; k += blockDim.x) {
        const int ci = k / LENET_KK, r = k % LENET_KK;
        sm.koff[k] = k < LENET_C2_K
                         ? ci * LENET_P1_PLANE + (r / LENET_KERNEL) * LENET_P1_SIDE + r % LENET_KERNEL
                         : 0;
    }
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int mt = warp % 4, n_first = warp / 4, n_step = warps / 4;
    const int m_a = 16 * mt + g, m_b = m_a + 8;
    const int off_a = (m_a / LENET_C2_SIDE) * LENET_P1_SIDE + m_a % LENET_C2_SIDE;
    const int off_b = (m_b / LENET_C2_SIDE) * LENET_P1_SIDE + m_b % LENET_C2_SIDE;
    const float* p1 = sm.conv.p1;
    float acc[LENET_C2_NT][4];
#pragma unroll
    for (int j = 0; j < LENET_C2_NT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;

#pragma unroll 3
    for (int k0 = 0; k0 < LENET_C2_KP; k0 += 8) {
        const int ka = k0 + t, kb = ka + 4;
        const int oa = sm.koff[ka], ob = sm.koff[kb];
        unsigned ab[4], as[4];
        tf32_split(p1[off_a + oa], ab[0], as[0]);
        tf32_split(p1[off_b + oa], ab[1], as[1]);
        tf32_split(p1[off_a + ob], ab[2], as[2]);
        tf32_split(p1[off_b + ob], ab[3], as[3]);
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
