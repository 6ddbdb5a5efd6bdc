// Echo and spin on the GPU: Lynx's network-bound and compute-bound micro-benchmarks.
// CPU twins: `Echo::execute_cpu` and `Spin::execute_cpu` (crates/services/src/{echo,spin}.rs).
//
// A batch is packed: row r's payload is in[offs[r] .. offs[r] + lens[r]], and its answer goes
// to the same place in out. One block per row.

// Copies one row's bytes (the whole block).
__device__ void copy_row(const unsigned char* in, unsigned char* out, unsigned int off,
                         unsigned int len) {
    for (unsigned int i = threadIdx.x; i < len; i += blockDim.x) {
        out[off + i] = in[off + i];
    }
}

// Launch arguments of both kernels (declared again in Rust, micro/gpu.rs; the kernel check
// compares the two layouts).
struct MicroRowsArgs {
    const unsigned char* input;  // the packed payloads
    const unsigned int* offs;    // rows
    const unsigned int* lens;    // rows
    unsigned char* out;          // as input
    unsigned int rows;
};

extern "C" __global__ void echo_rows(const MicroRowsArgs a) {
    unsigned int r = blockIdx.x;
    if (r >= a.rows) return;
    copy_row(a.input, a.out, a.offs[r], a.lens[r]);
}

__device__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Spin: the row's first 4 bytes (little-endian) are microseconds to busy-wait; then the
// payload is echoed. Thread 0 of the block waits on the GPU's global timer while the rest of
// the block waits at the barrier, so the row occupies its SM slot for the requested time.
extern "C" __global__ void spin_rows(const MicroRowsArgs a) {
    unsigned int r = blockIdx.x;
    if (r >= a.rows) return;
    const unsigned char* in = a.input;
    unsigned int off = a.offs[r], len = a.lens[r];
    if (threadIdx.x == 0 && len >= 4) {
        unsigned int us = (unsigned int)in[off] | (unsigned int)in[off + 1] << 8 |
                          (unsigned int)in[off + 2] << 16 | (unsigned int)in[off + 3] << 24;
        unsigned long long until = global_ns() + (unsigned long long)us * 1000ull;
        while (global_ns() < until) {
        }
    }
    __syncthreads();
    copy_row(in, a.out, off, len);
}
