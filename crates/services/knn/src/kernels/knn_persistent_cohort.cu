// k-NN on the persistent engine, cohort plan: batching inside the GPU (Centaur's stages batch
// the same way). One kernel of G identical blocks, all resident, in `groups` groups (block b in
// group b % groups) that each run cohorts on their own buffers - so one group's cohort
// computes while another takes the requests that queued meanwhile. Every loop of a group:
//   take    its leader pops every request the ingress warps queued (up to cmax) - the cohort;
//   check   a block per request: knn_check (bad requests answered here, as on the per-pair
//           plan);
//   compact the leader lists the good ones and sizes the passes (candidate rows must fit `cand`);
// then per pass, the phases of knn_tiled.cu's plan with the group's blocks striding over each
// phase's work items (a barrier of the group between phases):
//   filter (query x centroid tiles) -> select the probes -> plan the candidate rows ->
//   scan the cells' work items -> group the pairs by cell -> search (cell x query-group
//   tiles) -> per query: select the k nearest and answer into TX.
// The cohort is whatever waited when the last one finished: one request when idle (latency of
// one), thousands under load (the tiled plan's reuse of each cell across its queries). Answers
// are those of the CPU twins: the same stage functions as gpu-cohort's tiled plan, generalised
// to a (k, nprobe) per query. Compiled after knn_persistent.cu (SvcArgs, knn_check,
// knn_answer) and knn_tiled.cu (the stage functions).

// Cohort shape words (SvcArgs::ctl), written by the group's leader, read by every block of the
// group after a barrier.
#define COH_TAKEN 0      // requests popped (COH_STOP: the engine is stopping)
#define COH_VALID 1      // requests that passed their checks
#define COH_STRIDE 2     // candidate floats per query (the longest row any of them can make)
#define COH_PER_PASS 3   // queries per pass (their rows fit `cand`)
#define COH_SCHUNK 4     // the pass's search rows per work item
#define COH_STOP 0xffffffffu

// Rows per work item: enough to amortise staging the queries, few enough that every block
// gets work. The same rule as chunk_rows in crates/services/src/knn/gpu_ivf/tiled.rs.
__device__ __forceinline__ int coh_chunk(unsigned long long rows, unsigned long long groups, unsigned blocks) {
    unsigned long long want = rows * groups / max(blocks, 1u) / RT * RT;
    return (int)min(max(want, (unsigned long long)RT), (unsigned long long)(16 * RT));
}

// This block's place in its group.
struct Grp {
    unsigned id, rank, size;  // group, block's rank in it (0: the leader), blocks in it
    __device__ unsigned thread() const { return rank * blockDim.x + threadIdx.x; }
    __device__ unsigned threads() const { return size * blockDim.x; }
    __device__ bool leader() const { return rank == 0; }
};

__device__ Grp coh_group(unsigned groups) {
    Grp g;
    g.id = blockIdx.x % groups;
    g.rank = blockIdx.x / groups;
    g.size = gridDim.x / groups + (g.id < gridDim.x % groups ? 1u : 0u);
    return g;
}

__device__ __forceinline__ bool coh_barrier(const PRt& rt, const Grp& g) { return p_barrier(rt, g.id, g.size); }

// Group g's share of the cohort buffers (the host allocates `groups` of each, back to back).
__device__ SvcArgs coh_group_args(const SvcArgs& a, unsigned g) {
    SvcArgs b = a;
    const unsigned long long cm = a.cmax, mp = a.max_probe, nl = a.nlist;
    b.probes += 4 * g * cm * mp;
    b.scratch += 4 * g * cm * nl;
    b.cand += 4 * g * a.cand_floats;
    b.poff += 4 * g * cm * mp;
    b.totals += 4 * g * cm;
    b.counts += 4 * g * nl;
    b.cursor += 4 * g * nl;
    b.items += 4 * g * (nl + 1);
    b.order += 4 * g * cm * mp;
    b.taken += 4 * g * cm;
    b.ok += 4 * g * cm;
    b.cq_slot += 4 * g * cm;
    b.ctl += 4 * g * 64;
    return b;
}

// The leader: pops the waiting requests into `taken`, idling with back-off while none wait.
__device__ void cohort_take(const PRt& rt, const SvcArgs& a) {
    __shared__ int s_stop;
    unsigned* ctl = (unsigned*)a.ctl;
    unsigned* taken = (unsigned*)a.taken;
    Backoff b(256);
    unsigned spins = 0, n;
    while (true) {
        n = pipe_pop_block(rt.pipes[0], taken, (unsigned)a.cmax);
        if (n > 0) break;
        if (threadIdx.x == 0) s_stop = (++spins & 15) == 0 && p_stopping(rt);
        __syncthreads();
        if (s_stop) { n = COH_STOP; break; }
        b.idle();
    }
    if (threadIdx.x == 0) {
        ctl[COH_TAKEN] = n;
        if (n != COH_STOP) { p_count(rt, P_STAT_TASKS, n); p_count(rt, P_STAT_POPS, 1); }
    }
    if (rt.prof_cap && n != COH_STOP)
        for (unsigned i = threadIdx.x; i < n; i += blockDim.x) {
            unsigned long long* st = (unsigned long long*)rt.prof + (unsigned long long)taken[i] * P_PROF_STAMPS;
            st[P_PROF_FIRST_POP] = global_ns();
        }
}

// The leader: the slots that passed their checks, in order, into cq_slot; the candidate stride
// (the longest row any of them can make: its nprobe largest cells) and the pass size.
__device__ void cohort_compact(const PRt& rt, const SvcArgs& a, unsigned n) {
    __shared__ unsigned warp_tot[WARPS];
    __shared__ unsigned long long s_stride;
    const unsigned* taken = (const unsigned*)a.taken;
    const unsigned* ok = (const unsigned*)a.ok;
    unsigned* cq = (unsigned*)a.cq_slot;
    const unsigned long long* top = (const unsigned long long*)a.top_rows;
    const unsigned per = (n + BLOCK - 1) / BLOCK;
    const unsigned lo = min(n, threadIdx.x * per), hi = min(n, lo + per);
    unsigned mine = 0;
    unsigned long long widest = 0;
    for (unsigned i = lo; i < hi; ++i)
        if (ok[i]) {
            ++mine;
            widest = max(widest, top[p_slot(rt, taken[i])->b]);
        }
    if (threadIdx.x == 0) s_stride = 1;
    unsigned at = block_inclusive_scan(mine, warp_tot) - mine;  // (its barriers publish s_stride)
    for (unsigned i = lo; i < hi; ++i)
        if (ok[i]) cq[at++] = taken[i];
    atomicMax(&s_stride, widest);
    __syncthreads();
    if (threadIdx.x == BLOCK - 1) {
        unsigned* ctl = (unsigned*)a.ctl;
        ctl[COH_VALID] = at;  // the last thread's end is the count
        ctl[COH_STRIDE] = (unsigned)s_stride;
        ctl[COH_PER_PASS] = (unsigned)max(1ull, min(a.cmax, a.cand_floats / s_stride));
    }
}

// The leader: the pass's search chunk from its pair count, then the cells' pair starts and
// work items (scan_items).
__device__ void cohort_scan(const SvcArgs& a, unsigned blocks) {
    __shared__ unsigned warp_tot[WARPS];
    __shared__ unsigned s_pairs;
    const unsigned* counts = (const unsigned*)a.counts;
    unsigned mine = 0;
    for (unsigned c = threadIdx.x; c < a.nlist; c += BLOCK) mine += counts[c];
    unsigned incl = block_inclusive_scan(mine, warp_tot);
    if (threadIdx.x == BLOCK - 1) s_pairs = incl;
    __syncthreads();
    const unsigned long long pairs = s_pairs, nlist = a.nlist;
    const unsigned long long avg_rows = max(1ull, (a.n + nlist - 1) / nlist);
    const unsigned long long groups = max(pairs / QB, min(pairs, nlist));
    const int schunk = coh_chunk(avg_rows, groups, blocks);
    scan_items<BLOCK>(counts, (int)nlist, (const unsigned long long*)a.offsets, schunk, (unsigned*)a.cursor, (unsigned*)a.items);
    if (threadIdx.x == 0) ((unsigned*)a.ctl)[COH_SCHUNK] = (unsigned)schunk;
}

// One pass: queries qs[0..m) (slots). Every block of the group runs every phase; false when
// stopping.
template <typename T, int METRIC>
__device__ bool cohort_pass(const PRt& rt, const Grp& gr, const SvcArgs& a, const unsigned* qs, unsigned m,
                            DistSmem& sm, unsigned* best_i, float* best_d) {
    const unsigned G = gr.size, mp = (unsigned)a.max_probe, nlist = (unsigned)a.nlist, dim = (unsigned)a.dim;
    const float* queries = (const float*)a.queries;
    float* scratch = (float*)a.scratch;
    unsigned* probes = (unsigned*)a.probes;
    unsigned* poff = (unsigned*)a.poff;
    unsigned* totals = (unsigned*)a.totals;
    unsigned* counts = (unsigned*)a.counts;
    const unsigned long long* offsets = (const unsigned long long*)a.offsets;
    const unsigned stride = ((const volatile unsigned*)a.ctl)[COH_STRIDE];

    // Query x centroid distances; the cell counters zeroed for the plan.
    const unsigned groups = (m + QB - 1) / QB;
    const int fchunk = coh_chunk(nlist, groups, G);
    const unsigned ny = (nlist + fchunk - 1) / fchunk;
    for (unsigned vb = gr.rank; vb < groups * ny; vb += G)
        filter_tiled<METRIC>(queries, (int)m, qs, (const float*)a.centroids, (int)nlist, (int)dim, fchunk, scratch,
                             (int)(vb % groups), (int)(vb / groups), sm);
    for (unsigned c = gr.thread(); c < nlist; c += gr.threads()) counts[c] = 0;
    if (!coh_barrier(rt, gr)) return false;

    // Each query's nprobe nearest cells.
    for (unsigned q = gr.rank; q < m; q += G) {
        CellIds src{scratch + (size_t)q * nlist, (int)nlist};
        block_select<BLOCK>(src, (int)p_slot(rt, qs[q])->b, probes + (size_t)q * mp, (float*)0);
        __syncthreads();
    }
    if (!coh_barrier(rt, gr)) return false;

    // Candidate row layout per query; queries per cell.
    for (unsigned q = gr.thread(); q < m; q += gr.threads())
        totals[q] = plan_query(probes + (size_t)q * mp, (int)p_slot(rt, qs[q])->b, offsets, poff + (size_t)q * mp, counts);
    if (!coh_barrier(rt, gr)) return false;

    if (gr.leader()) cohort_scan(a, G);
    if (!coh_barrier(rt, gr)) return false;

    // Pairs grouped by cell (a pair is q * mp + probe).
    unsigned* cursor = (unsigned*)a.cursor;
    for (unsigned b = gr.thread(); b < m * mp; b += gr.threads())
        if (b % mp < p_slot(rt, qs[b / mp])->b) ((unsigned*)a.order)[atomicAdd(&cursor[probes[b]], 1u)] = b;
    if (!coh_barrier(rt, gr)) return false;

    // Cell x query-group distances into the candidate rows.
    const int schunk = (int)((const volatile unsigned*)a.ctl)[COH_SCHUNK];
    search_tiled<T, METRIC>(queries, qs, (const T*)a.vectors, offsets, (const unsigned long long*)a.list_rows,
                            (int)nlist, (int)mp, (int)dim, schunk, counts,
                            cursor, (const unsigned*)a.items, (const unsigned*)a.order, poff, (float*)a.cand, stride,
                            gr.rank, G, nullptr, sm);
    if (!coh_barrier(rt, gr)) return false;

    // The k nearest of each row, answered.
    for (unsigned q = gr.rank; q < m; q += G) {
        const unsigned s = qs[q];
        PSlot* sl = p_slot(rt, s);
        if (rt.prof_cap && threadIdx.x == 0)
            ((unsigned long long*)rt.prof)[(unsigned long long)s * P_PROF_STAMPS + P_PROF_LAST_POP] = global_ns();
        const unsigned k = sl->a, np = sl->b;
        select_query<BLOCK>((const float*)a.cand + (size_t)q * stride, totals[q], poff + (size_t)q * mp,
                            probes + (size_t)q * mp, (int)np, offsets, (const unsigned*)a.ids, (int)k, best_i, best_d);
        knn_answer(rt, s, k, best_i, best_d);
    }
    return true;
}

template <typename T, int METRIC>
__device__ void cohort_loop(const PRt& rt, const SvcArgs& all, DistSmem& sm, unsigned* best_i, float* best_d) {
    const Grp gr = coh_group((unsigned)all.groups);
    const SvcArgs a = coh_group_args(all, gr.id);
    const volatile unsigned* ctl = (const volatile unsigned*)a.ctl;
    while (true) {
        if (gr.leader()) cohort_take(rt, a);
        if (!coh_barrier(rt, gr)) return;
        const unsigned n = ctl[COH_TAKEN];
        if (n == COH_STOP) return;
        for (unsigned i = gr.rank; i < n; i += gr.size) {
            const bool good = knn_check(rt, a, ((const unsigned*)a.taken)[i]);
            if (threadIdx.x == 0) ((unsigned*)a.ok)[i] = good;
        }
        if (!coh_barrier(rt, gr)) return;
        if (gr.leader()) cohort_compact(rt, a, n);
        if (!coh_barrier(rt, gr)) return;
        const unsigned valid = ctl[COH_VALID], per = ctl[COH_PER_PASS];
        for (unsigned q0 = 0; q0 < valid; q0 += per) {
            // The previous pass's answers read what this one overwrites.
            if (q0 > 0 && !coh_barrier(rt, gr)) return;
            if (!cohort_pass<T, METRIC>(rt, gr, a, (const unsigned*)a.cq_slot + q0, min(per, valid - q0), sm, best_i, best_d))
                return;
        }
    }
}

// Shared memory is declared here, once: each metric's instance declaring its own would add up
// past the 48 KiB a block may hold statically.
template <typename T>
__device__ void cohort_worker(const PRt& rt, const SvcArgs& a) {
    __shared__ DistSmem sm;
    __shared__ unsigned best_i[MAX_K];
    __shared__ float best_d[MAX_K];
    p_block_started(rt);
    if (a.metric == 0) cohort_loop<T, 0>(rt, a, sm, best_i, best_d);
    else cohort_loop<T, 1>(rt, a, sm, best_i, best_d);
}

// Blocks per SM the compiler must leave room for (at most 64 registers a thread). Measured
// without the bound: one 256-thread block per SM (its registers took the whole SM), and the
// distance tiles - written for gpu-cohort's 8 blocks per SM - ran far from the GPU's rate.
#define COH_MIN_BLOCKS 4

extern "C" __global__ void __launch_bounds__(BLOCK, COH_MIN_BLOCKS) knn_p_cohort(PRt rt, SvcArgs a) {
    cohort_worker<float>(rt, a);
}
extern "C" __global__ void __launch_bounds__(BLOCK, COH_MIN_BLOCKS) knn_p_cohort_f16(PRt rt, SvcArgs a) {
    cohort_worker<unsigned short>(rt, a);
}
extern "C" __global__ void __launch_bounds__(BLOCK, COH_MIN_BLOCKS) knn_p_cohort_u8(PRt rt, SvcArgs a) {
    cohort_worker<unsigned char>(rt, a);
}
