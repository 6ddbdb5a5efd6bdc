// Face verification's GPU half (crates/services/src/facever/lbp.rs is the CPU twin and states
// the descriptor). Two steps, so the GPU can start on a cohort before its references arrive:
//   facever_lbp  - one block per image: the LBP code of every interior pixel, counted into
//                  the image's grid of uniform-pattern histograms in shared memory;
//   facever_chi2 - one block per row: the chi-square distance between the probe's histogram
//                  and the reference the host copied in beside it.

struct FaceverLbpArgs {
    const unsigned char* images;  // rows x FACEVER_IMAGE_BYTES
    const unsigned char* table;   // 256: LBP code -> bin within a cell (lbp::uniform_table)
    float* hists;                 // rows x FACEVER_BINS
    unsigned int rows;
};

struct FaceverChi2Args {
    const float* probes;  // rows x FACEVER_BINS
    const float* refs;    // rows x FACEVER_BINS
    float* distances;     // rows
    unsigned int rows;
};

__constant__ int facever_neighbours[16] = FACEVER_NEIGHBOURS;

extern "C" __global__ void __launch_bounds__(FACEVER_THREADS)
facever_lbp(FaceverLbpArgs a) {
    __shared__ unsigned int hist[FACEVER_BINS];
    __shared__ unsigned char img[FACEVER_IMAGE_BYTES];
    __shared__ unsigned char table[256];
    const unsigned int row = blockIdx.x;
    if (row >= a.rows) return;
    const unsigned char* src = a.images + (size_t)row * FACEVER_IMAGE_BYTES;
    for (unsigned int i = threadIdx.x; i < FACEVER_BINS; i += blockDim.x) hist[i] = 0;
    for (unsigned int i = threadIdx.x; i < FACEVER_IMAGE_BYTES; i += blockDim.x) img[i] = src[i];
    for (unsigned int i = threadIdx.x; i < 256; i += blockDim.x) table[i] = a.table[i];
    __syncthreads();
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
    __syncthreads();
    float* dst = a.hists + (size_t)row * FACEVER_BINS;
    for (unsigned int i = threadIdx.x; i < FACEVER_BINS; i += blockDim.x) dst[i] = (float)hist[i];
}

extern "C" __global__ void __launch_bounds__(FACEVER_THREADS)
facever_chi2(FaceverChi2Args a) {
    __shared__ float partial[FACEVER_THREADS / 32];
    const unsigned int row = blockIdx.x;
    if (row >= a.rows) return;
    const float* p = a.probes + (size_t)row * FACEVER_BINS;
    const float* r = a.refs + (size_t)row * FACEVER_BINS;
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
        if (threadIdx.x == 0) a.distances[row] = s;
    }
}
