// Two-GPU calibration of the NUMA simulator (cohort-lab sim numa calibrate): a streaming kernel
// (STREAM triad) and a 5-point stencil over arrays split in two halves, half h in GPU h's
// memory (the other reached through peer access over NVLink). Which GPU does which CTA's
// chunk is the caller's: `first + blockIdx.x * step` is the chunk (contiguous blocks: step 1
// from the GPU's first chunk; interleaved: step 2 from its ordinal). Twins: numa_calib.rs.
//
// Geometry (CALIB_* from consts.rs) matches the simulator's workloads: a CTA covers
// CALIB_CHUNK_FLOATS floats (32 lines of 128 B) of each array; a stencil CTA a tile of
// CALIB_TILE_ROWS rows x CALIB_CHUNK_FLOATS columns of a CALIB_ROW_FLOATS-wide grid.

// Element i of an array split at `half`: in lo (GPU 0) or hi (GPU 1).
__device__ __forceinline__ size_t calib_off(size_t i, size_t half) {
    return i < half ? i : i - half;
}

// Launch arguments (declared again in Rust, numa_calib.rs; the kernel check compares the
// layouts).
struct CalibTriadArgs {
    float* a0;
    float* a1;
    const float* b0;
    const float* b1;
    const float* c0;
    const float* c1;
    unsigned long long half;
    unsigned long long first;
    unsigned long long step;
    float scale;
};

extern "C" __global__ void calib_triad(const CalibTriadArgs a) {
    float* a0 = a.a0;
    float* a1 = a.a1;
    const float* b0 = a.b0;
    const float* b1 = a.b1;
    const float* c0 = a.c0;
    const float* c1 = a.c1;
    const unsigned long long half = a.half;
    const unsigned long long first = a.first;
    const unsigned long long step = a.step;
    const float scale = a.scale;

    const size_t chunk = first + (size_t)blockIdx.x * step;
    const size_t n = 2 * (size_t)half;
    const int per_thread = CALIB_CHUNK_FLOATS / CALIB_THREADS;
    for (int k = 0; k < per_thread; k++) {
        // Consecutive threads take consecutive floats: each load is a coalesced 128 B line.
        size_t i = chunk * CALIB_CHUNK_FLOATS + (size_t)k * CALIB_THREADS + threadIdx.x;
        if (i >= n) return;
        bool hi = i >= half;
        size_t j = calib_off(i, half);
        (hi ? a1 : a0)[j] = (hi ? b1 : b0)[j] + scale * (hi ? c1 : c0)[j];
    }
}

// out = 0.2 (centre + four neighbours) over a rows x CALIB_ROW_FLOATS grid whose rows
// [0, rows/2) live on GPU 0; edges keep their value (copied). `rows` is even.
struct CalibStencilArgs {
    float* out0;
    float* out1;
    const float* in0;
    const float* in1;
    unsigned long long rows;
    unsigned long long first;
    unsigned long long step;
};

extern "C" __global__ void calib_stencil(const CalibStencilArgs a) {
    float* out0 = a.out0;
    float* out1 = a.out1;
    const float* in0 = a.in0;
    const float* in1 = a.in1;
    const unsigned long long rows = a.rows;
    const unsigned long long first = a.first;
    const unsigned long long step = a.step;

    const size_t tile = first + (size_t)blockIdx.x * step;
    const size_t across = CALIB_ROW_FLOATS / CALIB_CHUNK_FLOATS;
    const size_t r0 = tile / across * CALIB_TILE_ROWS;
    const size_t c0 = tile % across * CALIB_CHUNK_FLOATS;
    const size_t half_rows = rows / 2;
    const int per_thread = CALIB_CHUNK_FLOATS / CALIB_THREADS;
    for (size_t r = r0; r < r0 + CALIB_TILE_ROWS && r < rows; r++) {
        const float* row = (r < half_rows ? in0 : in1) + calib_off(r, half_rows) * CALIB_ROW_FLOATS;
        float* dst = (r < half_rows ? out0 : out1) + calib_off(r, half_rows) * CALIB_ROW_FLOATS;
        const float* up = r > 0 ? (r - 1 < half_rows ? in0 : in1) +
                                      calib_off(r - 1, half_rows) * CALIB_ROW_FLOATS
                                : row;
        const float* down = r + 1 < rows ? (r + 1 < half_rows ? in0 : in1) +
                                               calib_off(r + 1, half_rows) * CALIB_ROW_FLOATS
                                         : row;
        for (int k = 0; k < per_thread; k++) {
            size_t c = c0 + (size_t)k * CALIB_THREADS + threadIdx.x;
            float v = row[c];
            if (r == 0 || r + 1 == rows || c == 0 || c + 1 == CALIB_ROW_FLOATS) {
                dst[c] = v;
            } else {
                dst[c] = 0.2f * (v + up[c] + down[c] + row[c - 1] + row[c + 1]);
            }
        }
    }
}
