// Live collections on the GPU. Each kernel is the twin of CPU code in crates/collections
// and is tested against it (crates/collections-gpu/tests/gpu.rs):
//   coll_filter  <- Compiled::matches over every live slot (data.rs `matching_bits`), run as
//                   the stack program of program.rs (`Program::matches` is its CPU twin)
//   coll_coarse  <- Ivf::probe (the nprobe nearest centroids of a query)
//   coll_scan    <- the scans of search.rs (a probed list, or a segment of the slots for the
//                   exact plan), keeping the k best (distance, slot) of the slots whose bit is
//                   set in `mask` (the live ones, or those the filter matched)
//   coll_reduce  <- the merge of per-list / per-segment top-k lists (search.rs `merge`)
//   coll_scatter <- the host's incremental updates of the device copy (list entries, words
//                   of the live bitset)
// Order everywhere: (distance, slot) ascending, ties to the smaller slot, as TopK does.
// Limits (COLL_*), opcodes (OP_*) and column kinds (KIND_*) come from the generated
// prelude (crates/collections-gpu/src/kernels.rs); they are never restated here.

#define WARPS (COLL_BLOCK / 32)
#define INF __int_as_float(0x7f800000)

__device__ __forceinline__ bool before(float d, unsigned i, float e, unsigned j) {
    return d < e || (d == e && i < j);
}

// ---------------------------------------------------------------------------------------
// Filters: a program of `Instr`s evaluated per slot over the attribute columns, with a
// stack of booleans held as the bits of one register (program.rs bounds its depth).

struct Instr {
    unsigned op, col, flags, n;       // n: values of an OP_IN_* (at `v[0]` in the table)
    unsigned long long v[4];          // OP_RANGE_*: gt, gte, lt, lte (present per `flags`)
};

static_assert(sizeof(Instr) == INSTR_BYTES, "Instr: size differs from Rust's (program.rs)");

struct ColDesc {
    const void* data;                 // KIND_INT: long long, KIND_FLOAT: double (NaN: no
                                      // value), KIND_KEYWORD: unsigned codes (NO_CODE: none)
    const unsigned char* has;         // KIND_INT only: 1 where the slot has a value
    unsigned kind, pad;
};
static_assert(sizeof(ColDesc) == COLDESC_BYTES, "ColDesc: size differs from Rust's (program.rs)");

// Is `x` one of the `n` sorted values at `t`? (Binary search, as the CPU's.)
__device__ bool in_sorted_i64(const long long* t, unsigned n, long long x) {
    unsigned lo = 0, hi = n;
    while (lo < hi) {
        unsigned mid = (lo + hi) / 2;
        if (t[mid] < x) lo = mid + 1; else hi = mid;
    }
    return lo < n && t[lo] == x;
}
__device__ bool in_sorted_u64(const unsigned long long* t, unsigned n, unsigned long long x) {
    unsigned lo = 0, hi = n;
    while (lo < hi) {
        unsigned mid = (lo + hi) / 2;
        if (t[mid] < x) lo = mid + 1; else hi = mid;
    }
    return lo < n && t[lo] == x;
}

// A double's key in IEEE total order (f64::total_cmp): equal keys exactly for equal bits.
__device__ __forceinline__ unsigned long long total_key(double x) {
    unsigned long long b = (unsigned long long)__double_as_longlong(x);
    return (b >> 63) ? ~b : (b | 0x8000000000000000ull);
}

template <typename T>
__device__ __forceinline__ bool in_range(T x, unsigned flags, const unsigned long long* v) {
    T b[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) b[i] = *(const T*)&v[i];
    return (!(flags & 1) || x > b[0]) && (!(flags & 2) || x >= b[1]) &&
           (!(flags & 4) || x < b[2]) && (!(flags & 8) || x <= b[3]);
}

__device__ bool eval_program(const Instr* prog, int len, const ColDesc* cols,
                             const unsigned long long* table, size_t slot) {
    unsigned stack = 0;
    for (int pc = 0; pc < len; ++pc) {
        const Instr in = prog[pc];
        unsigned r;
        switch (in.op) {
            case OP_TRUE: r = 1; break;
            case OP_FALSE: r = 0; break;
            case OP_AND: { unsigned b = stack & 1; stack >>= 1; r = (stack & 1) & b; stack >>= 1; break; }
            case OP_OR: { unsigned b = stack & 1; stack >>= 1; r = (stack & 1) | b; stack >>= 1; break; }
            case OP_NOT: r = (stack & 1) ^ 1; stack >>= 1; break;
            case OP_IN_CODE: {
                unsigned c = ((const unsigned*)cols[in.col].data)[slot];
                r = c != NO_CODE && in_sorted_u64(table + in.v[0], in.n, c);
                break;
            }
            case OP_IN_INT: {
                const ColDesc cd = cols[in.col];
                r = cd.has[slot] && in_sorted_i64((const long long*)(table + in.v[0]), in.n,
                                                  ((const long long*)cd.data)[slot]);
                break;
            }
            case OP_IN_FLOAT: {
                double x = ((const double*)cols[in.col].data)[slot];
                r = !isnan(x) && in_sorted_u64(table + in.v[0], in.n, total_key(x));
                break;
            }
            case OP_RANGE_INT: {
                const ColDesc cd = cols[in.col];
                r = cd.has[slot] && in_range<long long>(((const long long*)cd.data)[slot], in.flags, in.v);
                break;
            }
            case OP_RANGE_FLOAT: {
                double x = ((const double*)cols[in.col].data)[slot];
                r = !isnan(x) && in_range<double>(x, in.flags, in.v);
                break;
            }
            default: r = 0; break;  // program.rs emits no other opcode
        }
        stack = (stack << 1) | r;
    }
    return stack & 1;
}

struct CollFilterArgs {
    const Instr* prog;
    const ColDesc* cols;
    const unsigned long long* table;
    const unsigned* live;             // bit per slot
    unsigned long long slots;
    int len, pad;
    unsigned* mask;                   // out: bit per slot, live and matching
    unsigned* count;                  // out: matches (zeroed by the host)
};

// A warp per 32 slots (one mask word), warps striding over the words.
extern "C" __global__ void coll_filter(const CollFilterArgs a) {
    int lane = threadIdx.x % 32;
    size_t warp = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    size_t warps = ((size_t)gridDim.x * blockDim.x) / 32;
    size_t words = (a.slots + 31) / 32;
    for (size_t w = warp; w < words; w += warps) {
        size_t slot = w * 32 + lane;
        bool m = slot < a.slots && ((a.live[w] >> lane) & 1) &&
                 eval_program(a.prog, a.len, a.cols, a.table, slot);
        unsigned word = __ballot_sync(0xffffffffu, m);
        if (lane == 0) {
            a.mask[w] = word;
            if (word) atomicAdd(a.count, (unsigned)__popc(word));
        }
    }
}

// ---------------------------------------------------------------------------------------
// Distances. metric 0: squared L2; 1: inner product (negated); 2: cosine, 1 - q.v / |v|
// with q normalised by the host and 1/|v| per slot (`inv_norms`), as search.rs computes it.

__device__ __forceinline__ float warp_dot_or_l2(const float* q, const float* row, int dim, bool l2) {
    int lane = threadIdx.x % 32;
    float acc = 0.f;
    for (int d = lane; d < dim; d += 32) {
        float v = row[d];
        if (l2) { float t = q[d] - v; acc = fmaf(t, t, acc); } else acc = fmaf(q[d], v, acc);
    }
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, off);
    return __shfl_sync(0xffffffffu, acc, 0);
}

// Block-wide argmin over (dist[x], id[x]) for x in [0, n): every thread gets the winner's
// index, or -1 when nothing is below +inf.
__device__ int block_argmin(const float* dist, const unsigned* id, int n,
                            float* red_d, unsigned* red_i, int* red_x) {
    float bd = INF;
    unsigned bi = NO_SLOT;
    int bx = -1;
    for (int x = threadIdx.x; x < n; x += COLL_BLOCK)
        if (before(dist[x], id[x], bd, bi)) { bd = dist[x]; bi = id[x]; bx = x; }
    for (int off = 16; off > 0; off >>= 1) {
        float od = __shfl_down_sync(0xffffffffu, bd, off);
        unsigned oi = __shfl_down_sync(0xffffffffu, bi, off);
        int ox = __shfl_down_sync(0xffffffffu, bx, off);
        if (before(od, oi, bd, bi)) { bd = od; bi = oi; bx = ox; }
    }
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) { red_d[warp] = bd; red_i[warp] = bi; red_x[warp] = bx; }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < WARPS; ++w)
            if (before(red_d[w], red_i[w], red_d[0], red_i[0])) {
                red_d[0] = red_d[w]; red_i[0] = red_i[w]; red_x[0] = red_x[w];
            }
    }
    __syncthreads();
    int winner = red_x[0];
    __syncthreads();
    return winner;
}

// ---------------------------------------------------------------------------------------
// Coarse search: the nprobe nearest lists of each query (twin of Ivf::probe). A block per
// query: distances to every centroid, then a bitonic sort of (distance, list) in shared
// memory (nlist <= COLL_MAX_NLIST).

struct CollCoarseArgs {
    const float* queries;             // nq x dim
    const float* centroids;           // nlist x dim
    int nlist, dim, nprobe, ip;       // ip: coarse distance is -q.c, else squared L2
    unsigned* probes;                 // out: nq x nprobe, nearest first
};

extern "C" __global__ void coll_coarse(const CollCoarseArgs a) {
    __shared__ float q[COLL_MAX_DIM];
    __shared__ float dist[COLL_MAX_NLIST];
    __shared__ unsigned list[COLL_MAX_NLIST];
    const float* query = a.queries + (size_t)blockIdx.x * a.dim;
    for (int d = threadIdx.x; d < a.dim; d += COLL_BLOCK) q[d] = query[d];
    int n = 1;
    while (n < a.nlist) n <<= 1;
    for (int x = threadIdx.x; x < n; x += COLL_BLOCK) { dist[x] = INF; list[x] = NO_SLOT; }
    __syncthreads();
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int c = warp; c < a.nlist; c += WARPS) {
        float v = warp_dot_or_l2(q, a.centroids + (size_t)c * a.dim, a.dim, !a.ip);
        if (lane == 0) { dist[c] = a.ip ? -v : v; list[c] = c; }
    }
    __syncthreads();
    for (int size = 2; size <= n; size <<= 1) {
        for (int stride = size / 2; stride > 0; stride >>= 1) {
            for (int x = threadIdx.x; x < n; x += COLL_BLOCK) {
                int y = x ^ stride;
                if (y > x) {
                    bool up = (x & size) == 0;
                    bool swap = up ? before(dist[y], list[y], dist[x], list[x])
                                   : before(dist[x], list[x], dist[y], list[y]);
                    if (swap) {
                        float td = dist[x]; dist[x] = dist[y]; dist[y] = td;
                        unsigned ti = list[x]; list[x] = list[y]; list[y] = ti;
                    }
                }
            }
            __syncthreads();
        }
    }
    for (int j = threadIdx.x; j < a.nprobe; j += COLL_BLOCK)
        a.probes[(size_t)blockIdx.x * a.nprobe + j] = list[j];
}

// ---------------------------------------------------------------------------------------
// Scan: a block per item, the k best (distance, slot) of its slots whose mask bit is set.
// An item is (query, probed list) in the IVF plan (`probes` given: positions index
// `list_slots` from the list's offset) or (query, segment of `seg` slots) in the exact plan.

struct CollScanArgs {
    const float* queries;             // nq x dim
    const float* vectors;             // slot-major
    const float* inv_norms;           // metric 2 only
    const unsigned* mask;             // bit per slot
    const unsigned* list_slots;       // IVF: the lists' slots, list l at list_off[l]
    const unsigned* list_off;
    const unsigned* list_len;
    const unsigned* probes;           // IVF: nq x per_query lists; null: the exact plan
    unsigned long long slots;         // exact plan: slots 0..slots
    int per_query, seg, dim, k, metric, pad;
    unsigned* out_slots;              // items x k, padded with (NO_SLOT, +inf)
    float* out_dist;
};

extern "C" __global__ void coll_scan(const CollScanArgs a) {
    __shared__ float q[COLL_MAX_DIM];
    __shared__ float cand_d[COLL_TILE + COLL_MAX_K];
    __shared__ unsigned cand_i[COLL_TILE + COLL_MAX_K];
    __shared__ float best_d[COLL_MAX_K];
    __shared__ unsigned best_i[COLL_MAX_K];
    __shared__ float red_d[WARPS];
    __shared__ unsigned red_i[WARPS];
    __shared__ int red_x[WARPS];
    __shared__ int improving;
    size_t item = blockIdx.x;
    size_t qi = item / a.per_query;
    const float* query = a.queries + qi * a.dim;
    for (int d = threadIdx.x; d < a.dim; d += COLL_BLOCK) q[d] = query[d];
    for (int j = threadIdx.x; j < a.k; j += COLL_BLOCK) { best_d[j] = INF; best_i[j] = NO_SLOT; }
    size_t begin, end;
    const unsigned* index = nullptr;
    if (a.probes) {
        unsigned l = a.probes[item];
        begin = a.list_off[l];
        end = begin + a.list_len[l];
        index = a.list_slots;
    } else {
        begin = (item % a.per_query) * (size_t)a.seg;
        end = min(a.slots, (unsigned long long)(begin + a.seg));
    }
    __syncthreads();
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    bool l2 = a.metric == 0;
    for (size_t t0 = begin; t0 < end; t0 += COLL_TILE) {
        int n = (int)min((size_t)COLL_TILE, end - t0);
        if (threadIdx.x == 0) improving = 0;
        __syncthreads();
        float worst = best_d[a.k - 1];
        for (int r = warp; r < n; r += WARPS) {
            size_t pos = t0 + r;
            unsigned slot = index ? index[pos] : (unsigned)pos;
            float v = INF;
            if ((a.mask[slot / 32] >> (slot % 32)) & 1) {
                float acc = warp_dot_or_l2(q, a.vectors + (size_t)slot * a.dim, a.dim, l2);
                v = a.metric == 0 ? acc : a.metric == 1 ? -acc : 1.f - acc * a.inv_norms[slot];
            }
            if (lane == 0) {
                cand_d[r] = v;
                cand_i[r] = v < INF ? slot : NO_SLOT;
                if (v <= worst) improving = 1;
            }
        }
        __syncthreads();
        int go = improving;
        __syncthreads();  // every thread has read it before thread 0 clears it again
        // Nothing in this tile reaches the current k-th: the selection would change nothing.
        if (!go) continue;
        for (int j = threadIdx.x; j < a.k; j += COLL_BLOCK) { cand_d[n + j] = best_d[j]; cand_i[n + j] = best_i[j]; }
        __syncthreads();
        for (int j = 0; j < a.k; ++j) {
            int x = block_argmin(cand_d, cand_i, n + a.k, red_d, red_i, red_x);
            if (threadIdx.x == 0) {
                if (x >= 0) { best_d[j] = cand_d[x]; best_i[j] = cand_i[x]; cand_d[x] = INF; cand_i[x] = NO_SLOT; }
                else { best_d[j] = INF; best_i[j] = NO_SLOT; }
            }
            __syncthreads();
        }
    }
    for (int j = threadIdx.x; j < a.k; j += COLL_BLOCK) {
        a.out_slots[item * a.k + j] = best_i[j];
        a.out_dist[item * a.k + j] = best_d[j];
    }
}

// ---------------------------------------------------------------------------------------
// Reduce: a block per (query, group of `group` consecutive items of that query): the k best
// of the group's k-lists. The host repeats it until one list a query remains.

struct CollReduceArgs {
    const unsigned* in_slots;         // nq x per_query x k
    const float* in_dist;
    int per_query, group, k, groups;  // groups = ceil(per_query / group)
    unsigned* out_slots;              // nq x groups x k
    float* out_dist;
};

extern "C" __global__ void coll_reduce(const CollReduceArgs a) {
    __shared__ float cd[COLL_MAX_CAND];
    __shared__ unsigned ci[COLL_MAX_CAND];
    __shared__ float red_d[WARPS];
    __shared__ unsigned red_i[WARPS];
    __shared__ int red_x[WARPS];
    size_t qi = blockIdx.x / a.groups, g = blockIdx.x % a.groups;
    int first = (int)g * a.group;
    int items = min(a.group, a.per_query - first);
    int n = items * a.k;
    size_t base = (qi * a.per_query + first) * a.k;
    for (int x = threadIdx.x; x < n; x += COLL_BLOCK) { cd[x] = a.in_dist[base + x]; ci[x] = a.in_slots[base + x]; }
    __syncthreads();
    size_t out = (qi * a.groups + g) * a.k;
    for (int j = 0; j < a.k; ++j) {
        int x = block_argmin(cd, ci, n, red_d, red_i, red_x);
        if (threadIdx.x == 0) {
            a.out_slots[out + j] = x >= 0 ? ci[x] : NO_SLOT;
            a.out_dist[out + j] = x >= 0 ? cd[x] : INF;
            if (x >= 0) { cd[x] = INF; ci[x] = NO_SLOT; }
        }
        __syncthreads();
    }
}

// ---------------------------------------------------------------------------------------
// Scatter: dst[index[i]] = value[i] (list entries appended, live-bitset words changed).

struct CollScatterArgs {
    unsigned* dst;
    const unsigned* index;
    const unsigned* value;
    unsigned long long n;
};

extern "C" __global__ void coll_scatter(const CollScatterArgs a) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.n; i += (size_t)gridDim.x * blockDim.x)
        a.dst[a.index[i]] = a.value[i];
}
