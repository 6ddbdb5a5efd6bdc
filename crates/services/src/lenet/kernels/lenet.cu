// LeNet for a cohort of images (crates/services/src/lenet/model.rs states the network; its
// `forward` is the CPU twin of these kernels). Two steps:
//   lenet_conv  - one block per image: conv1 + bias, tanh, 2x2 max-pool, then conv2 + bias,
//                 tanh, 2x2 max-pool, written channel-major as the image's 800 features;
//   lenet_dense - out[r][n] = bias[n] + sum_k in[r][k] * w[n][k] (ReLU if asked) for a cohort
//                 of rows, a 16x16 tile of (rows, outputs) per block: the dense layers as one
//                 small GEMM each, so every weight is read once per 16 images, not per image.
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
    lenet_features(a.images + (size_t)img * LENET_PIXELS, a.w1, a.b1, a.w2, a.b2, sm,
                   a.features + (size_t)img * LENET_FLAT);
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
