// Czarnul's multi-stream benchmark kernel: a packet is two input chunks (a, b) and one output
// element per thread. Each thread, `inner` times, picks two neighbouring elements of each input
// (positions spread by a hash of its id), averages each pair, and adds the distance of the two
// averages to its output. `inner` sets the compute per byte copied.
// CPU twin: cohort_experiments::streams::packet_cpu (same positions, same order of operations).

__device__ __forceinline__ unsigned stream_start(unsigned t, unsigned n) {
    return (t * 2654435761u) % n;
}

// Launch arguments (declared again in Rust, streams.rs; the kernel check compares the layouts).
struct StreamPacketArgs {
    const float* a;
    const float* b;
    float* out;
    unsigned n_in;
    int inner;
};

extern "C" __global__ void stream_packet(const StreamPacketArgs p) {
    const float* __restrict__ a = p.a;
    const float* __restrict__ b = p.b;
    float* __restrict__ out = p.out;
    const unsigned n_in = p.n_in;
    const int inner = p.inner;

    const unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned j = stream_start(t, n_in);
    float acc = 0.f;
    for (int i = 0; i < inner; i++) {
        const unsigned j2 = j + 1 == n_in ? 0 : j + 1;
        // _rn intrinsics: no contraction into FMAs, so the CPU twin rounds identically.
        const float avg_a = __fmul_rn(0.5f, __fadd_rn(a[j], a[j2]));
        const float avg_b = __fmul_rn(0.5f, __fadd_rn(b[j], b[j2]));
        acc = __fadd_rn(acc, fabsf(__fsub_rn(avg_a, avg_b)));
        j += 97;
        if (j >= n_in) j -= n_in;
    }
    out[t] = acc;
}
