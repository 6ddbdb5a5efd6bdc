// Definitions shared by the k-NN kernel files (prepended to each before NVRTC compiles it).

// BLOCK, MAX_K, MAX_DIM, NO_ID, QB, RT and SEL_MAX come from crates/services/src/knn/kernels.rs (the
// prelude NVRTC compiles before this file); they are never restated here.
#define WARPS (BLOCK / 32)
#define INF __int_as_float(0x7f800000)

// (d, i) strictly before (e, j)? The order of every result: distance, then the smaller id.
__device__ __forceinline__ bool before(float d, unsigned i, float e, unsigned j) {
    return d < e || (d == e && i < j);
}

// Vector elements in any storage type, widened to f32 (all arithmetic is f32).
__device__ __forceinline__ float load_elem(const float* p) { return *p; }
// f16 storage halves the bytes a scan streams.
__device__ __forceinline__ float h2f(unsigned short h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ float load_elem(const unsigned short* p) { return h2f(*p); }
// u8 storage (SIFT-like data is integral in 0..=255): a quarter of the bytes, exact.
__device__ __forceinline__ float load_elem(const unsigned char* p) { return (float)*p; }

// One term of a distance: metric 0 = L2 (squared difference), 1 = inner product.
template <int METRIC>
__device__ __forceinline__ float accumulate(float acc, float q, float x) {
    if (METRIC == 0) { float t = q - x; return fmaf(t, t, acc); }
    return fmaf(q, x, acc);
}
// The stored distance: inner product is a similarity, so its negation (smaller is nearer).
template <int METRIC>
__device__ __forceinline__ float finish(float acc) { return METRIC == 0 ? acc : -acc; }
