// k-NN on the persistent engine: the ingress warp moves a request into its slot, then three
// kinds of worker blocks (the filter first validates it and widens its vector into the slot's
// query row: knn_check) run the same
// stage functions as the per-pair kernels of knn.cu (compiled before this file), so answers
// are those of the CPU twins:
//   pipes[0] filter tasks {slot}        -> filter_one, fans out nprobe search tasks
//   pipes[1] search tasks {slot, probe} -> search_one into the slot's reserved partial rows;
//                                          the last probe of a request queues its reduce
//   pipes[2] reduce tasks {slot}        -> reduce_one, answer written straight into TX
// Sharded index (a.owners set): the lists are split over devices, and each device runs a
// search stage of this lane on its own SMs over its own lists. The filter sends a probe to
// the gpipe of the device owning its cell (pipes[P_DEVICE_PIPE0 + owner]); that device's
// search writes its partial rows into this lane's slot rows and counts the request's pending
// probes down, across devices (system scope where the devices are two physical GPUs: rt.sys).

struct SvcArgs {
    unsigned long long centroids;  // f32 [nlist * dim]
    unsigned long long vectors;    // cell-major rows in the index's device precision
    unsigned long long ids;        // u32 [n]
    unsigned long long offsets;    // u64 [nlist + 1]
    unsigned long long dim;
    unsigned long long nlist;
    unsigned long long n;
    unsigned long long metric;     // 0 L2, 1 inner product
    unsigned long long default_nprobe;
    unsigned long long queries;    // f32 [nslots * dim]
    unsigned long long probes;     // u32 [nslots * max_probe]
    unsigned long long part_ids;   // u32 [nslots * GPU_MAX_CANDIDATES]
    unsigned long long part_dist;  // f32 [nslots * GPU_MAX_CANDIDATES]
    unsigned long long scratch;    // f32 [filter blocks * nlist]
    unsigned long long max_probe;
    unsigned long long max_k;      // the wire limit of k (knn::MAX_K)
    // The cohort plan (knn_persistent_cohort.cu); zero for the per-pair stages. Buffers are
    // indexed by a query's place in the cohort's pass (probes too), not by its slot; each is
    // `groups` times the size given (per group), except top_rows.
    unsigned long long cmax;         // requests in one cohort at most
    unsigned long long cand;         // f32 [cand_floats]: candidate rows, `stride` per query
    unsigned long long cand_floats;
    unsigned long long poff;         // u32 [cmax * max_probe]
    unsigned long long totals;       // u32 [cmax]
    unsigned long long counts;       // u32 [nlist]
    unsigned long long cursor;       // u32 [nlist]
    unsigned long long items;        // u32 [nlist + 1]
    unsigned long long order;        // u32 [cmax * max_probe]
    unsigned long long taken;        // u32 [cmax]: the slots of the cohort, as popped
    unsigned long long ok;           // u32 [cmax]: their checks passed
    unsigned long long cq_slot;      // u32 [cmax]: the slots that passed, in order
    unsigned long long ctl;          // u32 [64]: the cohort's shape (COH_*)
    unsigned long long top_rows;     // u64 [max_probe + 1]: rows in the p largest cells
    unsigned long long groups;       // block groups, each with its own share of the buffers above
    // The per-pair plan over a sharded index (0 where the index is whole).
    unsigned long long owners;       // u32 [nlist]: the device holding each cell's list
    unsigned long long search_pipe;  // the gpipe this search stage pops (1; sharded: its device's)
    // The cohort plan over a sharded index (0 where the index is whole): u64 [nlist], the
    // device address of each list's first row, on whichever device holds it (read over peer
    // access); offsets and ids are then the whole index's, held on this lane's device.
    unsigned long long list_rows;
};

// The ingress warp only moves requests: k-NN's checks and widening run in the filter blocks
// (hundreds of them in parallel) - measured: on the one ingress warp they were the largest part
// of its time per request (lab/scripts/persistent-profile.sh).
__device__ bool service_accept(const PRt&, const SvcArgs&, unsigned int) { return true; }

// The checks of parse_head + vector_into + check_shape (crates/services/src/knn), in their
// order; messages name the rule, the CPU's also give the numbers. Block-cooperative; a bad
// request is answered (and its slot freed) here.
__device__ bool knn_check(const PRt& rt, const SvcArgs& a, unsigned int s) {
    PSlot* sl = p_slot(rt, s);
    const unsigned char* p = p_payload(rt, s);
    unsigned int len = sl->h.len;
    if (len < KNN_HEAD) { tx_error(rt, s, P_ERR_BAD_REQUEST, "knn request needs 12 header bytes"); return false; }
    unsigned int k = p[0] | (p[1] << 8);
    unsigned int nprobe = p[2] | (p[3] << 8);
    unsigned int elem = p[4];
    unsigned int dim = p[8] | (p[9] << 8) | (p[10] << 16) | ((unsigned int)p[11] << 24);
    unsigned int n = (unsigned int)min(a.n, a.max_k);
    if (p[5] | p[6] | p[7]) { tx_error(rt, s, P_ERR_BAD_REQUEST, "reserved bytes must be zero"); return false; }
    if (dim != a.dim) { tx_error(rt, s, P_ERR_BAD_REQUEST, "vector dimension differs from the index's"); return false; }
    if (k == 0 || k > n) { tx_error(rt, s, P_ERR_BAD_REQUEST, "k out of range"); return false; }
    if (nprobe > a.nlist) { tx_error(rt, s, P_ERR_BAD_REQUEST, "nprobe must be at most nlist"); return false; }
    unsigned int body = len - KNN_HEAD;
    if (elem > 1) { tx_error(rt, s, P_ERR_BAD_REQUEST, "unknown element type (0 f32, 1 u8)"); return false; }
    if (body != (elem == 0 ? dim * 4 : dim)) { tx_error(rt, s, P_ERR_BAD_REQUEST, "vector bytes do not match dim"); return false; }
    // Widen into the query row; the warp votes on finiteness and magnitude.
    float* q = (float*)a.queries + (unsigned long long)s * a.dim;
    bool bad_nan = false, bad_big = false;
    for (unsigned int d = threadIdx.x; d < dim; d += blockDim.x) {
        float x;
        if (elem == 0) {
            const unsigned char* e = p + KNN_HEAD + 4 * d;
            x = __int_as_float(e[0] | (e[1] << 8) | (e[2] << 16) | ((unsigned int)e[3] << 24));
        } else {
            x = (float)p[KNN_HEAD + d];
        }
        bad_nan |= !isfinite(x);
        bad_big |= fabsf(x) > KNN_MAX_ABS_ELEMENT;
        q[d] = x;
    }
    if (__syncthreads_or(bad_nan)) { tx_error(rt, s, P_ERR_BAD_REQUEST, "vector holds NaN or infinity"); return false; }
    if (__syncthreads_or(bad_big)) { tx_error(rt, s, P_ERR_BAD_REQUEST, "vector elements too large in magnitude"); return false; }
    if (nprobe == 0) nprobe = (unsigned int)a.default_nprobe;
    if (k > MAX_K) { tx_error(rt, s, P_ERR_BAD_REQUEST, "k above the gpu engines' limit"); return false; }
    if (nprobe == 0 || nprobe > a.max_probe || nprobe * k > GPU_MAX_CANDIDATES) {
        tx_error(rt, s, P_ERR_BAD_REQUEST, "nprobe x k above the gpu engines' limit");
        return false;
    }
    if (threadIdx.x == 0) {
        sl->a = k;
        sl->b = nprobe;
    }
    __syncthreads();  // k and nprobe visible to the whole block
    return true;
}

extern "C" __global__ void knn_p_filter(PRt rt, SvcArgs a) {
    p_block_started(rt);
    __shared__ uint4 tasks[P_MAX_BATCH];
    Backoff b;
    float* scratch = (float*)a.scratch + (unsigned long long)blockIdx.x * a.nlist;
    unsigned int got;
    while ((got = worker_next(rt, rt.pipes[0], tasks, b)) > 0) {
        for (unsigned int i = 0; i < got; ++i) {
            unsigned int s = tasks[i].x;
            if (!knn_check(rt, a, s)) continue;
            PSlot* sl = p_slot(rt, s);
            unsigned int nprobe = sl->b;
            unsigned* probes = (unsigned*)a.probes + (unsigned long long)s * a.max_probe;
            filter_one((const float*)a.queries + (unsigned long long)s * a.dim, (const float*)a.centroids,
                       (int)a.nlist, (int)a.dim, (int)nprobe, (int)a.metric, scratch, probes);
            if (threadIdx.x == 0) sl->pending = nprobe;
            // The query, probes and count are read by search blocks, maybe on another GPU.
            p_fence(rt);
            __syncthreads();
            const unsigned* owners = (const unsigned*)a.owners;
            for (unsigned int j = threadIdx.x; j < nprobe; j += blockDim.x) {
                const PPipe& to = owners ? rt.pipes[P_DEVICE_PIPE0 + owners[probes[j]]] : rt.pipes[1];
                pipe_push(to, make_uint4(s, j, 0, 0));
            }
            __syncthreads();
        }
    }
}

template <typename T>
__device__ void search_worker(const PRt& rt, const SvcArgs& a) {
    p_block_started(rt);
    __shared__ uint4 tasks[P_MAX_BATCH];
    Backoff b;
    unsigned int got;
    const PPipe& from = rt.pipes[a.search_pipe];
    while ((got = worker_next(rt, from, tasks, b)) > 0) {
        for (unsigned int i = 0; i < got; ++i) {
            unsigned int s = tasks[i].x, j = tasks[i].y;
            PSlot* sl = p_slot(rt, s);
            unsigned int k = sl->a;
            unsigned cell = ((const unsigned*)a.probes)[(unsigned long long)s * a.max_probe + j];
            unsigned long long part = (unsigned long long)s * GPU_MAX_CANDIDATES + (unsigned long long)j * k;
            search_one((const float*)a.queries + (unsigned long long)s * a.dim, (const T*)a.vectors,
                       (const unsigned*)a.ids, (const unsigned long long*)a.offsets, cell, (int)a.dim, (int)k,
                       (int)a.metric, (unsigned*)a.part_ids + part, (float*)a.part_dist + part);
            // The partial rows before the count: the reducer may be on another GPU.
            p_fence(rt);
            __syncthreads();
            // The request's last probe hands it to a reducer (on the lane's device).
            if (threadIdx.x == 0) {
                unsigned int left = p_atomic_sub(rt, &sl->pending, 1u);
                if (left == 1u) pipe_push(rt.pipes[2], make_uint4(s, 0, 0, 0));
            }
            __syncthreads();
        }
    }
}

extern "C" __global__ void knn_p_search(PRt rt, SvcArgs a) { search_worker<float>(rt, a); }
extern "C" __global__ void knn_p_search_f16(PRt rt, SvcArgs a) { search_worker<unsigned short>(rt, a); }
extern "C" __global__ void knn_p_search_u8(PRt rt, SvcArgs a) { search_worker<unsigned char>(rt, a); }

// Answers slot `s` with the k nearest (best_i/best_d, shared memory, sorted) and frees the
// slot. Answer: count u32, then (id u32, distance f32) nearest first; padding (NO_ID, fewer
// than k candidates) sorts last and is left out. Block-cooperative.
__device__ void knn_answer(const PRt& rt, unsigned int s, unsigned int k, const unsigned* best_i, const float* best_d) {
    TxPos at;
    unsigned char* out = tx_begin(rt, &p_slot(rt, s)->h, &at);
    unsigned int count = 0;
    for (unsigned int j = 0; j < k; ++j) count += best_i[j] != NO_ID;
    if (threadIdx.x == 0) *(unsigned int*)out = count;
    for (unsigned int j = threadIdx.x; j < count; j += blockDim.x) {
        ((unsigned int*)(out + 4))[2 * j] = best_i[j];
        ((float*)(out + 4))[2 * j + 1] = best_d[j];
    }
    tx_commit(rt, at, &p_slot(rt, s)->h, 0, 4 + 8 * count);
    if (threadIdx.x == 0) p_free_slot(rt, s);
    __syncthreads();
}

// Dynamic shared memory: GPU_MAX_CANDIDATES * 8 bytes.
extern "C" __global__ void knn_p_reduce(PRt rt, SvcArgs a) {
    p_block_started(rt);
    extern __shared__ unsigned char smem[];
    __shared__ uint4 tasks[P_MAX_BATCH];
    __shared__ unsigned best_i[MAX_K];
    __shared__ float best_d[MAX_K];
    Backoff b;
    unsigned int got;
    while ((got = worker_next(rt, rt.pipes[2], tasks, b)) > 0) {
        for (unsigned int i = 0; i < got; ++i) {
            unsigned int s = tasks[i].x;
            PSlot* sl = p_slot(rt, s);
            unsigned int k = sl->a, nprobe = sl->b;
            unsigned long long part = (unsigned long long)s * GPU_MAX_CANDIDATES;
            reduce_one((const unsigned*)a.part_ids + part, (const float*)a.part_dist + part, (int)(nprobe * k),
                       (int)k, best_i, best_d, smem);
            knn_answer(rt, s, k, best_i, best_d);
        }
    }
}
