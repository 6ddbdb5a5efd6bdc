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
    facever_count(img, table, hist);
    __syncthreads();
    float* dst = a.hists + (size_t)row * FACEVER_BINS;
    for (unsigned int i = threadIdx.x; i < FACEVER_BINS; i += blockDim.x) dst[i] = (float)hist[i];
}

extern "C" __global__ void __launch_bounds__(FACEVER_THREADS)
facever_chi2(FaceverChi2Args a) {
    __shared__ float partial[FACEVER_THREADS / 32];
    const unsigned int row = blockIdx.x;
    if (row >= a.rows) return;
    const float s = facever_chi2_sum(a.probes + (size_t)row * FACEVER_BINS,
                                     a.refs + (size_t)row * FACEVER_BINS, partial);
    if (threadIdx.x == 0) a.distances[row] = s;
}
