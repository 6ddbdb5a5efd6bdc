// The tiled plan's selects (knn_tiled.cu's unit, after knn_tiled_distances.cuh): warp and
// block scans, and the threshold and radix selects of the k smallest candidates.

// ---- Radix select ----

// Float bits -> unsigned with the same order (negative floats reversed); -0 counts as +0.
__device__ __forceinline__ unsigned order_key(float x) {
    unsigned u = __float_as_uint(x + 0.f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Sum over the warp's lanes, on every lane.
__device__ __forceinline__ unsigned warp_sum(unsigned v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(FULL, v, off);
    return v;
}

// Inclusive prefix sum over the warp's lanes.
__device__ __forceinline__ unsigned warp_inclusive_scan(unsigned v) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
        const unsigned o = __shfl_up_sync(FULL, v, off);
        if (lane >= off) v += o;
    }
    return v;
}

// Inclusive prefix sum over the block's threads (warp_tot: one entry per warp).
__device__ unsigned block_inclusive_scan(unsigned v, unsigned* warp_tot) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = warp_inclusive_scan(v);
    if (lane == 31) warp_tot[warp] = v;
    __syncthreads();
    unsigned add = 0;
    for (int w = 0; w < warp; ++w) add += warp_tot[w];
    __syncthreads();
    return v + add;
}

// Candidates of a select: n distances and the id of each position.
struct CellIds {  // filter: the position is the cell
    const float* d;
    int n;
    __device__ unsigned id(int pos) const { return (unsigned)pos; }
};
struct RowIds {  // search: position -> (probe, row) through the probe offsets -> original id
    const float* d;
    int n;
    const unsigned* poff;  // shared memory, nprobe entries, non-decreasing from 0
    const unsigned* cells;
    int nprobe;
    const unsigned long long* offsets;
    const unsigned* row_ids;
    __device__ unsigned id(int pos) const {
        int lo = 0, hi = nprobe - 1;  // the last probe starting at or before pos (skips empty cells)
        while (lo < hi) {
            int mid = (lo + hi + 1) / 2;
            if (poff[mid] <= (unsigned)pos) lo = mid; else hi = mid - 1;
        }
        return row_ids[offsets[cells[lo]] + (pos - poff[lo])];
    }
};

// The k smallest (distance, id) of src (n > k), sorted, into out_i / out_d, in two reads of the
// row instead of the radix select's passes: tau is the k-th smallest of the minima of groups of
// threads, so at least k keys are <= tau and every one of the k smallest is; those few are
// gathered (with their ids) and ranked exactly, ties to the smaller id. False, having written
// nothing, when they are more than SEL_MAX (many ties at tau) or fewer than k (NaNs): the
// radix select then answers.
template <int NT, typename Src>
__device__ bool threshold_select(const Src& src, int k, float* sel_d, unsigned* sel_i, unsigned* __restrict__ out_i,
                                 float* __restrict__ out_d) {
    __shared__ __align__(16) float lmin[NT];  // read as float4
    __shared__ float s_tau;
    __shared__ unsigned s_taken;
    const int n = src.n;
    float m = INF;
    for (int i = threadIdx.x; i < n; i += NT) {
        const float v = src.d[i];
        m = v < m ? v : m;
    }
    // The minima of groups of gs threads, as few groups as still number at least k (gs a power
    // of two up to a warp): ranking them costs their count per thread, not the block's size.
    int gs = 1;
    while (gs < 32 && NT / (2 * gs) >= k) gs *= 2;
    for (int off = 1; off < gs; off <<= 1) {
        const float o = __shfl_xor_sync(FULL, m, off);
        m = o < m ? o : m;
    }
    const int groups = NT / gs, g = threadIdx.x / gs;
    if (threadIdx.x % gs == 0) lmin[g] = m;
    if (threadIdx.x == 0) s_taken = 0;
    __syncthreads();
    if (threadIdx.x % gs == 0) {
        int rank = 0;  // among the minima, ties to the lower group: a permutation of 0..groups-1
        for (int j = 0; j < groups; j += 4) {
            const float4 o = *reinterpret_cast<const float4*>(lmin + j);
            rank += (o.x < m || (o.x == m && j < g)) + (o.y < m || (o.y == m && j + 1 < g)) +
                    (o.z < m || (o.z == m && j + 2 < g)) + (o.w < m || (o.w == m && j + 3 < g));
        }
        if (rank == k - 1) s_tau = m;
    }
    __syncthreads();
    const float tau = s_tau;
    for (int i = threadIdx.x; i < n; i += NT) {
        const float v = src.d[i];
        if (v <= tau) {
            const unsigned slot = atomicAdd(&s_taken, 1u);
            if (slot < SEL_MAX) { sel_d[slot] = v; sel_i[slot] = src.id(i); }
        }
    }
    __syncthreads();
    const int taken = (int)s_taken;
    if (taken < k || taken > SEL_MAX) return false;
    for (int t = threadIdx.x; t < taken; t += NT) {
        int r = 0;
        for (int j = 0; j < taken && r < k; ++j) r += before(sel_d[j], sel_i[j], sel_d[t], sel_i[t]);
        if (r < k) {
            out_i[r] = sel_i[t];
            if (out_d) out_d[r] = sel_d[t];
        }
    }
    __syncthreads();
    return true;
}

// The k smallest (distance, id) of src, sorted, into out_i / out_d (out_d may be null);
// padded with (NO_ID, +inf) when there are fewer than k. Exact, ties to the smaller id, as
// the CPU: an MSD radix select on the 64-bit key (order_key(distance), id), 8 bits per pass,
// stopping as soon as the bucket holding the k-th key is wholly taken. Ids are looked up
// only for keys whose distance equals the boundary one (ties), and for the k winners.
// NT threads (256, or 1024 for long rows when few queries leave SMs idle).
template <int NT, typename Src>
__device__ void block_select(const Src& src, int k, unsigned* __restrict__ out_i, float* __restrict__ out_d) {
    __shared__ unsigned hist[256];
    __shared__ unsigned warp_tot[NT / 32];
    __shared__ unsigned s_bin, s_rem, s_cnt, s_n;
    __shared__ float sel_d[SEL_MAX];
    __shared__ unsigned sel_i[SEL_MAX];
    const int n = src.n;
    const unsigned long long HI = 0xffffffff00000000ull;
    unsigned long long prefix = 0, mask = 0;
    unsigned rem = k;
    const bool take_all = n <= k;
    if (!take_all && threshold_select<NT>(src, k, sel_d, sel_i, out_i, out_d)) return;
    for (int pass = 0; pass < 8 && !take_all; ++pass) {
        const int shift = 56 - 8 * pass;
        for (int b = threadIdx.x; b < 256; b += NT) hist[b] = 0;
        __syncthreads();
        for (int base = 0; base < n; base += NT) {  // uniform trip count: whole warps match
            const int i = base + threadIdx.x;
            unsigned bin = FULL;
            if (i < n) {
                unsigned long long key = (unsigned long long)order_key(src.d[i]) << 32;
                if (pass >= 4 && (key & HI) == (prefix & HI)) key |= src.id(i);
                if ((key & mask) == prefix) bin = (unsigned)(key >> shift) & 255u;
            }
            // One shared-memory atomic per distinct bin per warp: distances crowd few bins.
            const unsigned peers = __match_any_sync(FULL, bin);
            if (bin != FULL && (int)(threadIdx.x % 32) == __ffs(peers) - 1) atomicAdd(&hist[bin], __popc(peers));
        }
        __syncthreads();
        const unsigned h = threadIdx.x < 256 ? hist[threadIdx.x] : 0u;
        const unsigned incl = block_inclusive_scan(h, warp_tot);
        if (incl - h < rem && incl >= rem) { s_bin = threadIdx.x; s_rem = rem - (incl - h); s_cnt = h; }
        __syncthreads();
        prefix |= (unsigned long long)s_bin << shift;
        mask |= 255ull << shift;
        rem = s_rem;
        const unsigned cnt = s_cnt;
        __syncthreads();
        if (cnt == rem) break;  // every key in the boundary bucket is taken
    }
    // Keys whose resolved top bits are at most the prefix: exactly min(n, k) of them.
    if (threadIdx.x == 0) s_n = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += NT) {
        const float dv = src.d[i];
        bool take = take_all;
        if (!take) {
            unsigned long long key = (unsigned long long)order_key(dv) << 32;
            if ((mask & ~HI) && (key & HI) == (prefix & HI)) key |= src.id(i);
            take = (key & mask) <= prefix;
        }
        if (take) {
            unsigned slot = atomicAdd(&s_n, 1u);
            if (slot < SEL_MAX) { sel_d[slot] = dv; sel_i[slot] = src.id(i); }
        }
    }
    __syncthreads();
    const int m = min((int)s_n, k);
    for (int t = threadIdx.x; t < k; t += NT) {
        if (t < m) {
            int rank = 0;
            for (int j = 0; j < m; ++j) rank += before(sel_d[j], sel_i[j], sel_d[t], sel_i[t]);
            out_i[rank] = sel_i[t];
            if (out_d) out_d[rank] = sel_d[t];
        } else {
            out_i[t] = NO_ID;
            if (out_d) out_d[t] = INF;
        }
    }
}
