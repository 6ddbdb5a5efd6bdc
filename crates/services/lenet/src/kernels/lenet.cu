// LeNet for a cohort of images (crates/services/src/lenet/model.rs states the network; its
// `forward` is the CPU twin of these kernels). Two steps, each in two kinds (`lenet.math`):
//   lenet_conv[_tc]  - one block per image: conv1 + bias, tanh, 2x2 max-pool, then conv2 +
//                      bias, tanh, 2x2 max-pool, written channel-major as the image's 800
//                      features (conv2 on the CUDA cores, or `_tc` on the tensor cores);
//   lenet_dense[_tc] - out[r][n] = bias[n] + sum_k in[r][k] * w[n][k] (ReLU if asked) for a
//                      cohort of rows: the dense layers as one GEMM each, so a weight is read
//                      once per tile of images, not per image. FP32: a 16x16 tile of (rows,
//                      outputs) per block; `_tc`: 64x64 per block in 3xTF32 mma.
// The layers themselves are lenet_net.cuh's (shared with the persistent worker).

struct LenetConvArgs {
    const unsigned char* images;  // rows x 784, row-major pixels
    const float* w1;              // [C1][1][K][K]
    const float* b1;              // [C1]
    const float* w2;              // [C2][C1][K][K]
    const float* b2;              // [C2]
    float* features;              // rows x FLAT
    unsigned int rows;
};

struct LenetDenseArgs {
    const float* input;   // rows x k
    const float* weight;  // n x k
    const float* bias;    // n
    float* out;           // rows x n
    unsigned int rows;
    unsigned int k;
    unsigned int n;
    unsigned int relu;
};

extern "C" __global__ void __launch_bounds__(LENET_CONV_THREADS)
lenet_conv(LenetConvArgs a) {
    __shared__ LenetConvSmem sm;
    const unsigned int img = blockIdx.x;
    if (img >= a.rows) return;
    lenet_conv1_pool(a.images + (size_t)img * LENET_PIXELS, a.w1, a.b1, sm);
    lenet_conv2_fp32(a.w2, a.b2, sm, a.features + (size_t)img * LENET_FLAT);
}

extern "C" __global__ void __launch_bounds__(LENET_CONV_THREADS)
lenet_conv_tc(LenetConvArgs a) {
    __shared__ LenetTcSmem sm;
    const unsigned int img = blockIdx.x;
    if (img >= a.rows) return;
    lenet_conv1_pool(a.images + (size_t)img * LENET_PIXELS, a.w1, a.b1, sm.conv);
    lenet_conv2_tc(a.w2, a.b2, sm, a.features + (size_t)img * LENET_FLAT);
}

extern "C" __global__ void __launch_bounds__(LENET_TILE * LENET_TILE)
lenet_dense(LenetDenseArgs a) {
    __shared__ float in_t[LENET_TILE][LENET_TILE + 1];
    __shared__ float w_t[LENET_TILE][LENET_TILE + 1];
    const unsigned int tx = threadIdx.x, ty = threadIdx.y;
    const unsigned int row = blockIdx.y * LENET_TILE + ty;  // image
    const unsigned int col = blockIdx.x * LENET_TILE + tx;  // output
    // Thread (tx, ty) loads in[row][k0 + tx] and w[blockIdx.x * TILE + ty][k0 + tx].
    const unsigned int wrow = blockIdx.x * LENET_TILE + ty;
    float s = 0.0f;
    for (unsigned int k0 = 0; k0 < a.k; k0 += LENET_TILE) {
        const unsigned int k = k0 + tx;
        in_t[ty][tx] = (row < a.rows && k < a.k) ? a.input[(size_t)row * a.k + k] : 0.0f;
        w_t[ty][tx] = (wrow < a.n && k < a.k) ? a.weight[(size_t)wrow * a.k + k] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int j = 0; j < LENET_TILE; ++j) s += in_t[ty][j] * w_t[tx][j];
        __syncthreads();
    }
    if (row < a.rows && col < a.n) {
        float v = a.bias[col] + s;
        if (a.relu) v = fmaxf(v, 0.0f);
        a.out[(size_t)row * a.n + col] = v;
    }
}

// 3xTF32 on the tensor cores: a block of 8 warps computes 64 rows x 64 outputs; warp w takes
// rows 16 (w % 4).. and outputs 32 (w / 4).. as four 16x8 tiles sharing each A fragment.
// Operands come straight from global memory (rows and weight rows are read 32 bytes per
// lane group per k step, which L1 serves across the block's warps).
extern "C" __global__ void __launch_bounds__(LENET_DENSE_TC_THREADS)
lenet_dense_tc(LenetDenseArgs a) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const unsigned int ra = blockIdx.y * LENET_DENSE_TC_TILE + 16 * (warp % 4) + g;
    const unsigned int rb = ra + 8;
    const unsigned int n0 = blockIdx.x * LENET_DENSE_TC_TILE + 32 * (warp / 4);
    const bool live_a = ra < a.rows, live_b = rb < a.rows;
    const float* in_a = a.input + (size_t)ra * a.k;
    const float* in_b = a.input + (size_t)rb * a.k;
    float acc[4][4];
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
#pragma unroll 4
    for (unsigned int k0 = 0; k0 < a.k; k0 += 8) {
        const unsigned int ka = k0 + t, kb = ka + 4;
        unsigned ab[4], as[4];
        tf32_split(live_a && ka < a.k ? in_a[ka] : 0.f, ab[0], as[0]);
        tf32_split(live_b && ka < a.k ? in_b[ka] : 0.f, ab[1], as[1]);
        tf32_split(live_a && kb < a.k ? in_a[kb] : 0.f, ab[2], as[2]);
        tf32_split(live_b && kb < a.k ? in_b[kb] : 0.f, ab[3], as[3]);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const unsigned int n = n0 + 8 * j + g;
            const float* row = a.weight + (size_t)n * a.k;
            const bool live = n < a.n;
            unsigned bb[2], bs[2];
            tf32_split(live && ka < a.k ? __ldg(row + ka) : 0.f, bb[0], bs[0]);
            tf32_split(live && kb < a.k ? __ldg(row + kb) : 0.f, bb[1], bs[1]);
            mma_tf32x3(acc[j], ab, as, bb, bs);
        }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const unsigned int n = n0 + 8 * j + 2 * t;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const unsigned int r = e < 2 ? ra : rb, col = n + (e & 1);
            if (r < a.rows && col < a.n) {
                float v = a.bias[col] + acc[j][e];
                if (a.relu) v = fmaxf(v, 0.0f);
                a.out[(size_t)r * a.n + col] = v;
            }
        }
    }
}
