// One face's descriptor and distance, block-cooperative; used by the batch kernels
// (facever.cu) and the persistent worker (facever_persistent.cu). CPU twin: lbp.rs.

__constant__ int facever_neighbours[16] = FACEVER_NEIGHBOURS;

// Counts the LBP code of every interior pixel of `img` (FACEVER_IMAGE_BYTES) into `hist`
// (FACEVER_BINS counters, zeroed and visible to the block before the call) through `table`
// (256: code -> bin within a cell). The caller synchronises before reading `hist`.
__device__ __forceinline__ void facever_count(const unsigned char* img, const unsigned char* table,
                                              unsigned int* hist) {
    const unsigned int iw = FACEVER_WIDTH - 2, ih = FACEVER_HEIGHT - 2;
    for (unsigned int i = threadIdx.x; i < iw * ih; i += blockDim.x) {
        const int x = 1 + (int)(i % iw), y = 1 + (int)(i / iw);
        const unsigned char c = img[y * FACEVER_WIDTH + x];
        unsigned int code = 0;
#pragma unroll
        for (int n = 0; n < 8; ++n) {
            const int nx = x + facever_neighbours[2 * n], ny = y + facever_neighbours[2 * n + 1];
            code |= (unsigned int)(img[ny * FACEVER_WIDTH + nx] >= c) << (7 - n);
        }
        const unsigned int cx = (unsigned int)(x - 1) * FACEVER_GRID_X / iw;
        const unsigned int cy = (unsigned int)(y - 1) * FACEVER_GRID_Y / ih;
        atomicAdd(&hist[(cy * FACEVER_GRID_X + cx) * FACEVER_LABELS + table[code]], 1u);
    }
}

// chi-square(p, r) over the FACEVER_BINS bins, in a block of FACEVER_THREADS threads; the sum
// is returned to thread 0 (the other threads' value is meaningless). `partial` is shared
// scratch of FACEVER_THREADS / 32 floats.
__device__ __forceinline__ float facever_chi2_sum(const float* p, const float* r, float* partial) {
    float s = 0.0f;
    for (unsigned int i = threadIdx.x; i < FACEVER_BINS; i += blockDim.x) {
        const float sum = p[i] + r[i];
        if (sum > 0.0f) {
            const float d = p[i] - r[i];
            s += d * d / sum;
        }
    }
    for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffffu, s, off);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x / 32] = s;
    __syncthreads();
    if (threadIdx.x < 32) {
        s = threadIdx.x < FACEVER_THREADS / 32 ? partial[threadIdx.x] : 0.0f;
        for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffffu, s, off);
    }
    __syncthreads();
    return s;
}
