// The ingress warps of the persistent engine (compiled after the service's stage file, which
// defines `SvcArgs` and `service_accept`). Blocks of 32 threads; block b of W owns RX rings
// b, b + W, ... (measured: one warp copying k-NN requests over the bus saturated at ~480K
// requests/s, 71% of its time in the copy). Each polls its rings in mapped host memory - each
// lane looks at one position of one ring, so one bus round trip checks every ring several
// messages deep -
// takes a run of ready requests into free slots (reserved first: a request is never read
// without a place to put it), publishes the ring's tail and hands each slot to the service.
// Only these warps touch host memory per request on the way in: 132 blocks polling the bus
// would slow every poll (274 us ping-pong vs 5.4 us measured on the H200).

#define P_TAKE 16  // requests taken from one ring per visit: copies of a run overlap on the bus

__device__ __forceinline__ unsigned char* rx_slot(unsigned long long base, const PRt& rt, unsigned int pos) {
    return (unsigned char*)base + COHORT_MQ_CONTROL_BYTES +
           (unsigned long long)(pos & (rt.rx_slots - 1)) * rt.rx_stride;
}

#define P_COPY_INFLIGHT 16  // 16-byte loads per lane in flight: a 16-message k-NN run in ~2 bus round trips

// 16-byte chunks of an RX slot to copy for a payload of `len` bytes: the header and the payload
// rounded up, at most the service's rx_copy (longer or spilled requests are refused later
// from the header alone).
__device__ __forceinline__ unsigned int rx_chunks(const PRt& rt, unsigned int len) {
    unsigned int per = (unsigned int)rt.rx_copy / 16;
    unsigned int need = COHORT_MQ_SLOT_HEADER_BYTES / 16 + (min(len, (unsigned int)rt.payload_cap) + 15) / 16;
    return min(need, per);
}

// The message of chunk `c` in a run whose message m holds chunks off[m] .. off[m+1].
__device__ __forceinline__ unsigned int msg_of(const unsigned int* off, unsigned int n, unsigned int c) {
    unsigned int lo = 0, hi = n;
    while (hi - lo > 1) {
        unsigned int mid = (lo + hi) / 2;
        if (off[mid] <= c) lo = mid; else hi = mid;
    }
    return lo;
}

// Copies chunks [off[m], off[m+1]) of each message m < n of the run at position p0 of ring
// `base` into slots `sl` (chunk j of a message is its j-th 16 bytes). Every lane keeps
// P_COPY_INFLIGHT loads in flight: the copy costs bus round trips, not bandwidth.
__device__ void rx_copy_run(const PRt& rt, unsigned long long base, unsigned int p0, unsigned int n,
                            const unsigned int* sl, const unsigned int* off, const unsigned int* first) {
    unsigned int hdr = COHORT_MQ_SLOT_HEADER_BYTES / 16;
    unsigned int total = off[n];
    for (unsigned int c0 = threadIdx.x; c0 < total; c0 += P_COPY_INFLIGHT * 32) {
        uint4 v[P_COPY_INFLIGHT];
        unsigned int mj[P_COPY_INFLIGHT];
#pragma unroll
        for (int u = 0; u < P_COPY_INFLIGHT; ++u) {
            unsigned int c = c0 + u * 32;
            if (c < total) {
                unsigned int m = msg_of(off, n, c), j = first[m] + c - off[m];
                mj[u] = m << 16 | j;
                v[u] = ld_relaxed_sys_v4((const uint4*)rx_slot(base, rt, p0 + m) + j);
            }
        }
#pragma unroll
        for (int u = 0; u < P_COPY_INFLIGHT; ++u) {
            unsigned int c = c0 + u * 32;
            if (c < total) {
                unsigned int m = mj[u] >> 16, j = mj[u] & 0xffffu;
                uint4* dst = j < hdr ? (uint4*)&p_slot(rt, sl[m])->h + j
                                     : (uint4*)p_payload(rt, sl[m]) + (j - hdr);
                *dst = v[u];
            }
        }
    }
}

// Exclusive prefix sum of lane values into off[0..=n] (lanes < n contribute `v`).
__device__ __forceinline__ void run_offsets(unsigned int* off, unsigned int n, unsigned int v) {
    unsigned int lane = threadIdx.x & 31;
    unsigned int x = lane < n ? v : 0;
    for (unsigned int d = 1; d < 32; d <<= 1) {
        unsigned int y = __shfl_up_sync(0xffffffffu, x, d);
        if (lane >= d) x += y;
    }
    if (lane < n) off[lane + 1] = x;
    if (lane == 0) off[0] = 0;
    __syncwarp();
}

// An ingress warp's phase clock (profile only): lane 0 charges the cycles since the last mark
// to a phase; every 64 loops each warp adds what it charged since its last flush to the device
// counters (so they hold the sum over the warps); the lifetime clock is warp 0's.
struct PhaseClock {
    bool on;
    long long last, start;
    unsigned long long start_ns;
    // Indexed by P_STAT_* - P_STAT_CYC_IDLE: the phases, then the visit count.
    unsigned long long cyc[P_STAT_VISITS - P_STAT_CYC_IDLE + 1];
    unsigned long long flushed[P_STAT_VISITS - P_STAT_CYC_IDLE + 1];
    __device__ PhaseClock(const PRt& rt) : on(rt.prof_cap != 0 && threadIdx.x == 0) {
        for (int i = 0; i <= P_STAT_VISITS - P_STAT_CYC_IDLE; ++i) cyc[i] = flushed[i] = 0;
        last = start = clock64();
        start_ns = global_ns();
    }
    __device__ __forceinline__ void mark(int phase) {
        if (!on) return;
        long long now = clock64();
        cyc[phase - P_STAT_CYC_IDLE] += (unsigned long long)(now - last);
        last = now;
    }
    __device__ void flush(const PRt& rt) {
        if (!on) return;
        unsigned long long* st = (unsigned long long*)rt.stats;
        for (int i = P_STAT_CYC_IDLE; i <= P_STAT_VISITS; ++i) {
            const int j = i - P_STAT_CYC_IDLE;
            atomicAdd(st + i, cyc[j] - flushed[j]);
            flushed[j] = cyc[j];
        }
        if (blockIdx.x == 0) {
            st[P_STAT_CLK_CYC] = (unsigned long long)(clock64() - start);
            st[P_STAT_CLK_NS] = global_ns() - start_ns;
        }
    }
};

extern "C" __global__ void cohort_ingress(PRt rt, SvcArgs svc) {
    p_block_started(rt);
    __shared__ unsigned int pos[P_MAX_RX];
    __shared__ unsigned int run[P_MAX_RX];
    __shared__ unsigned int taken[P_TAKE];
    __shared__ unsigned int accepted[P_TAKE];
    __shared__ unsigned int plen[32];          // len each lane's poll saw beside the seq
    __shared__ unsigned int off[P_TAKE + 1];   // chunk offsets of a run's messages
    __shared__ unsigned int first[P_TAKE];     // first chunk to copy of each message
    // Free slots popped ahead (refilled while fewer than a run's worth are cached, so a
    // request arriving at an idle engine does not wait for the free-slot pop).
    __shared__ unsigned int cache[P_TAKE + 32];
    unsigned int ncache = 0;  // the same in every lane
    // This warp's rings: global ring ring0 + i * W for local index i < nrx.
    const unsigned int W = gridDim.x, ring0 = blockIdx.x, all = (unsigned int)rt.nrx;
    const unsigned int nrx = all > ring0 ? (all - ring0 + W - 1) / W : 0;
    __shared__ unsigned long long rx[P_MAX_RX];
    unsigned int lane = threadIdx.x;
    if (nrx == 0) return;  // the host launches at most one warp per ring; never hoard slots
    for (unsigned int r = lane; r < nrx; r += 32) rx[r] = ((const unsigned long long*)rt.rx)[ring0 + r * W];
    __syncwarp();
    // Resume where the last run stopped: the tails this warp published.
    for (unsigned int r = lane; r < nrx; r += 32)
        pos[r] = ld_acquire_sys((const unsigned int*)(rx[r] + COHORT_MQ_TAIL_OFFSET));
    __syncthreads();
    // One bus round trip looks at several positions of every ring: lane = ring + nrx * offset
    // (up to 32 rings; more are visited 32 at a time, one position each).
    unsigned int group = nrx < 32 ? max(nrx, 1u) : 32;
    unsigned int depth = min(32u / group, (unsigned int)P_TAKE);
    Backoff b(256);
    PhaseClock clk(rt);
    unsigned int loops = 0;
    while (true) {
        if ((++loops & 63) == 0) {
            clk.flush(rt);
            if (p_host_stopping(rt)) {
                if (lane == 0) st_release_gpu((unsigned int*)rt.dev_stop, 1u);
                break;
            }
        }
        bool any = false;
        if (ncache < P_TAKE) {
            ncache += pipe_pop_warp(rt.free_slots, cache + ncache, 32);
            clk.mark(P_STAT_CYC_SLOTS);
        }
        for (unsigned int r0 = 0; r0 < nrx; r0 += group) {
            clk.mark(P_STAT_CYC_IDLE);  // what ran since the last mark found nothing
            unsigned int r = r0 + lane % group, at = lane / group;
            // seq and len share one aligned 8-byte word: one load sees both (len is only a
            // hint for how much to copy; the copied header is checked below).
            bool ready = false;
            if (at < depth && r < nrx) {
                unsigned long long w = ld_relaxed_sys64((const unsigned long long*)rx_slot(rx[r], rt, pos[r] + at));
                ready = (unsigned int)w == pos[r] + at + 1;
                plen[lane] = (unsigned int)(w >> 32);
            }
            unsigned int mask = __ballot_sync(0xffffffffu, ready);
            if (mask == 0) continue;
            unsigned long long seen_ns = rt.prof_cap ? global_ns() : 0;
            // What the host wrote before each seq seen is visible to the copies below.
            fence_acquire_sys();
            clk.mark(P_STAT_CYC_HIT);
            if (lane < group) {
                // Consecutive written positions from the ring's tail.
                unsigned int n = 0;
                while (n < depth && (mask >> (lane + n * group) & 1u)) ++n;
                run[lane] = n;
            }
            __syncthreads();
            for (unsigned int g = 0; g < group && r0 + g < nrx; ++g) {
                unsigned int want = run[g];
                if (want == 0) continue;
                unsigned int rr = r0 + g;
                unsigned long long base = rx[rr];
                unsigned int p0 = pos[rr];
                if (ncache < want) {
                    ncache += pipe_pop_warp(rt.free_slots, cache + ncache, 32);
                    clk.mark(P_STAT_CYC_SLOTS);
                }
                unsigned int got = min(want, ncache);
                if (lane < got) taken[lane] = cache[ncache - got + lane];
                ncache -= got;
                __syncwarp();
                if (got == 0) {
                    if (lane == 0) p_count(rt, P_STAT_NO_SLOT, 1);
                    continue;
                }
                any = true;
                // Each message's header and the payload its polled len asks for.
                unsigned int need = lane < got ? rx_chunks(rt, plen[g + lane * group]) : 0;
                if (lane < got) first[lane] = 0;
                run_offsets(off, got, need);
                rx_copy_run(rt, base, p0, got, taken, off, first);
                __syncthreads();
                // The copied header (read after the acquire fence) is the truth: should the
                // polled len have been stale, copy what it left out.
                unsigned int more = 0;
                if (lane < got) {
                    unsigned int real = rx_chunks(rt, p_slot(rt, taken[lane])->h.len);
                    more = real > need ? real - need : 0;
                    first[lane] = need;
                }
                if (__any_sync(0xffffffffu, more > 0)) {
                    run_offsets(off, got, more);
                    rx_copy_run(rt, base, p0, got, taken, off, first);
                    __syncthreads();
                }
                clk.mark(P_STAT_CYC_COPY);
                if (lane == 0) {
                    pos[rr] = p0 + got;
                    // Relaxed: the copies it releases are complete (their values were stored
                    // before the barrier); a release store would wait on every earlier write.
                    st_relaxed_sys((unsigned int*)(base + COHORT_MQ_TAIL_OFFSET), p0 + got);
                    for (unsigned int i = 0; i < got; ++i) p_slot(rt, taken[i])->h.route = ring0 + rr * W;
                    p_count(rt, P_STAT_TAKEN, got);
                    if (rt.prof_cap) {
                        unsigned long long now = global_ns();
                        for (unsigned int i = 0; i < got; ++i) {
                            unsigned long long* st = (unsigned long long*)rt.prof + (unsigned long long)taken[i] * P_PROF_STAMPS;
                            st[P_PROF_SEEN] = seen_ns;
                            st[P_PROF_COPIED] = now;
                        }
                    }
                }
                __syncthreads();
                clk.mark(P_STAT_CYC_PUBLISH);
                unsigned int nacc = 0;
                for (unsigned int i = 0; i < got; ++i) {
                    PSlot* sl = p_slot(rt, taken[i]);
                    // Host-side rings spill; these never do (the host refuses what does not fit).
                    if ((sl->h.len & COHORT_MQ_SPILLED) != 0) {
                        tx_error(rt, taken[i], P_ERR_TOO_LARGE, "request larger than the engine's slots");
                        continue;
                    }
                    // The service checks len against what was copied (rt.payload_cap bytes)
                    // and answers a bad request itself; good ones go to its first stage.
                    if (service_accept(rt, svc, taken[i])) accepted[nacc++] = taken[i];
                }
                __syncthreads();
                clk.mark(P_STAT_CYC_ACCEPT);
                if (lane < nacc) p_stamp(rt, accepted[lane], P_PROF_QUEUED);
                pipe_push_run(rt.pipes[0], accepted, nacc);
                clk.mark(P_STAT_CYC_PUSH);
                if (clk.on) clk.cyc[P_STAT_VISITS - P_STAT_CYC_IDLE] += 1;
            }
        }
        if (any) b.reset(); else b.idle();
    }
    clk.flush(rt);
}
