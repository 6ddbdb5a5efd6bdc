// The bank's cohort I/O on the GPU: requests arrive packed end to end (only the bytes the
// clients sent cross the bus) and are spread into their slots, row-major or transposed by
// words (`bank_unpack`); responses leave their slots, transposed back to one contiguous row
// per response of `words` words (`bank_gather`), so the copy to the host is one run and each
// answer one memcpy. CPU twins: `bank::gpu::pack` (the slot layout) and the un-transposing
// read of `GpuParser::responses`.

// One thread per (request, word of its slot): word w of request r from packed[offs[r] ..],
// the request's first min(lens[r], BANK_MAX_REQUEST) bytes (an over-long request keeps its
// true length: the parser refuses it unread). Bytes past the end of a request in its last
// word are zero.
struct BankUnpackArgs {
    unsigned int n;
    const unsigned char* packed;
    const unsigned int* offs;
    const unsigned int* lens;
    int transposed;
    unsigned char* reqs;
};

extern "C" __global__ void bank_unpack(const BankUnpackArgs a) {
    const unsigned int n = a.n;
    const unsigned char* packed = a.packed;
    const unsigned int* offs = a.offs;
    const unsigned int* lens = a.lens;
    const int transposed = a.transposed;
    unsigned char* reqs = a.reqs;

    unsigned int r = blockIdx.y;
    unsigned int w = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n || w >= BANK_MAX_REQUEST / 4) return;
    unsigned int len = lens[r] < BANK_MAX_REQUEST ? lens[r] : BANK_MAX_REQUEST;
    if (w * 4 >= len) return;
    const unsigned char* src = packed + offs[r];
    unsigned int v = 0;
    for (unsigned int b = 0; b < 4; b++) {
        unsigned int i = w * 4 + b;
        if (i < len) v |= (unsigned int)src[i] << (8 * b);
    }
    size_t at = transposed ? ((size_t)w * n + r) * 4 : (size_t)r * BANK_MAX_REQUEST + (size_t)w * 4;
    *(unsigned int*)(reqs + at) = v;
}

// Responses out of their slots into rows of `words` words: packed[r * words + w]. A block
// moves a tile of 32 responses x 32 words through shared memory, so that both the transposed
// reads (32 responses' word w side by side) and the row writes (one response's 32 words)
// are whole 128-byte runs. Block (32, 8).
struct BankGatherArgs {
    unsigned int n;
    const unsigned int* out;
    int transposed;
    unsigned int words;
    unsigned int* packed;
};

extern "C" __global__ void bank_gather(const BankGatherArgs a) {
    const unsigned int n = a.n;
    const unsigned int* out = a.out;
    const int transposed = a.transposed;
    const unsigned int words = a.words;
    unsigned int* packed = a.packed;

    __shared__ unsigned int tile[32][33];
    unsigned int w0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
    for (unsigned int j = threadIdx.y; j < 32; j += 8) {
        if (transposed) {
            // threadIdx.x runs over responses: consecutive in a transposed word row.
            unsigned int w = w0 + j, r = r0 + threadIdx.x;
            if (w < words && r < n) tile[j][threadIdx.x] = out[(size_t)w * n + r];
        } else {
            // threadIdx.x runs over words: consecutive in a row-major slot.
            unsigned int r = r0 + j, w = w0 + threadIdx.x;
            if (w < words && r < n) tile[threadIdx.x][j] = out[(size_t)r * (BANK_RESP_SLOT / 4) + w];
        }
    }
    __syncthreads();
    for (unsigned int j = threadIdx.y; j < 32; j += 8) {
        unsigned int r = r0 + j, w = w0 + threadIdx.x;
        if (w < words && r < n) packed[(size_t)r * words + w] = tile[threadIdx.x][j];
    }
}
