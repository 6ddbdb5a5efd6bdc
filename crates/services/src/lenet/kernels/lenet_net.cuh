// LeNet's layers as block-cooperative device functions, shared by the batch kernels
// (lenet.cu) and the persistent worker (lenet_persistent.cu). The network and its CPU twin:
// crates/services/src/lenet/model.rs. Sizes (LENET_*) come from the Rust prelude.
//
// A pooled output is tanh(max of its four sums): tanh is increasing, so it equals the CPU's
// max of the four tanh values.

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

// One image (784 bytes at `in`) -> its 800 features at `out` (any memory the block can
// write), every thread of the block calling.
__device__ void lenet_features(const unsigned char* in, const float* w1, const float* b1,
                               const float* w2, const float* b2, LenetConvSmem& sm,
                               float* out) {
    for (int i = threadIdx.x; i < LENET_PIXELS; i += blockDim.x) sm.x[i] = in[i] * (1.0f / 255.0f);
    for (int i = threadIdx.x; i < LENET_C1 * LENET_KK; i += blockDim.x) sm.w1[i] = w1[i];
    __syncthreads();

    // conv1 -> tanh -> pool: one pooled output (four sums) per step.
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

    // conv2 -> tanh -> pool: the 800 features, channel-major (c * 16 + y * 4 + x). Threads
    // of a warp share one or two output channels, so a weight load is a broadcast.
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
