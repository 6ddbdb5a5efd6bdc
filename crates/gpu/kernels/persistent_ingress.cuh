// The ingress warp of the persistent engine (compiled after the service's stage file, which
// defines `SvcArgs` and `service_accept`). One block of 32 threads per GPU polls every RX ring
// in mapped host memory - each lane looks at one position of one ring, so one bus round trip
// checks every ring several messages deep -
// takes a run of ready requests into free slots (reserved first: a request is never read
// without a place to put it), publishes the ring's tail and hands each slot to the service.
// Only this warp touches host memory per request on the way in: 132 blocks polling the bus
// would slow every poll (274 us ping-pong vs 5.4 us measured on the H200).

#define P_TAKE 16  // requests taken from one ring per visit: copies of a run overlap on the bus

__device__ __forceinline__ unsigned char* rx_slot(unsigned long long base, const PRt& rt, unsigned int pos) {
    return (unsigned char*)base + COHORT_MQ_CONTROL_BYTES +
           (unsigned long long)(pos & (rt.rx_slots - 1)) * rt.rx_stride;
}

// Copies a run of `n` messages starting at position p0 of ring `base` into slots `sl`.
// Loads are issued four at a time per lane so that several bus reads are in flight.
__device__ void rx_copy_run(const PRt& rt, unsigned long long base, unsigned int p0, unsigned int n,
                            const unsigned int* sl) {
    unsigned int per = (unsigned int)rt.rx_copy / 16;  // 16-byte chunks per message
    unsigned int hdr = COHORT_MQ_SLOT_HEADER_BYTES / 16;
    unsigned int total = n * per;
    for (unsigned int c0 = threadIdx.x; c0 < total; c0 += 4 * 32) {
        uint4 v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            unsigned int c = c0 + u * 32;
            if (c < total) {
                const volatile uint4* src = (const volatile uint4*)rx_slot(base, rt, p0 + c / per) + c % per;
                v[u] = make_uint4(src->x, src->y, src->z, src->w);
            }
        }
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            unsigned int c = c0 + u * 32;
            if (c < total) {
                unsigned int m = c / per, j = c % per;
                uint4* dst = j < hdr ? (uint4*)&p_slot(rt, sl[m])->h + j
                                     : (uint4*)p_payload(rt, sl[m]) + (j - hdr);
                *dst = v[u];
            }
        }
    }
}

// The ingress warp's phase clock (profile only): lane 0 charges the cycles since the last mark
// to a phase; the totals go to the device counters every 64 loops (single writer: plain
// stores).
struct PhaseClock {
    bool on;
    long long last, start;
    unsigned long long start_ns;
    unsigned long long cyc[P_STATS];
    __device__ PhaseClock(const PRt& rt) : on(rt.prof_cap != 0 && threadIdx.x == 0) {
        for (int i = 0; i < P_STATS; ++i) cyc[i] = 0;
        last = start = clock64();
        start_ns = global_ns();
    }
    __device__ __forceinline__ void mark(int phase) {
        if (!on) return;
        long long now = clock64();
        cyc[phase] += (unsigned long long)(now - last);
        last = now;
    }
    __device__ void flush(const PRt& rt) {
        if (!on) return;
        unsigned long long* st = (unsigned long long*)rt.stats;
        for (int i = P_STAT_CYC_IDLE; i <= P_STAT_VISITS; ++i) st[i] = cyc[i];
        st[P_STAT_CLK_CYC] = (unsigned long long)(clock64() - start);
        st[P_STAT_CLK_NS] = global_ns() - start_ns;
    }
};

extern "C" __global__ void cohort_ingress(PRt rt, SvcArgs svc) {
    __shared__ unsigned int pos[P_MAX_RX];
    __shared__ unsigned int run[P_MAX_RX];
    __shared__ unsigned int taken[P_TAKE];
    __shared__ unsigned int accepted[P_TAKE];
    __shared__ unsigned int s_got;
    const unsigned long long* rx = (const unsigned long long*)rt.rx;
    unsigned int nrx = (unsigned int)rt.nrx;
    unsigned int lane = threadIdx.x;
    // Resume where the last run stopped: the tails this warp published.
    for (unsigned int r = lane; r < nrx; r += 32)
        pos[r] = ld_acquire_sys((const unsigned int*)(rx[r] + COHORT_MQ_TAIL_OFFSET));
    __syncthreads();
    // One bus round trip looks at several positions of every ring: lane = ring + nrx * offset
    // (up to 32 rings; more are visited 32 at a time, one position each).
    unsigned int group = nrx < 32 ? nrx : 32;
    unsigned int depth = min(32u / group, (unsigned int)P_TAKE);
    Backoff b;
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
        for (unsigned int r0 = 0; r0 < nrx; r0 += group) {
            clk.mark(P_STAT_CYC_IDLE);  // what ran since the last mark found nothing
            unsigned int r = r0 + lane % group, off = lane / group;
            bool ready = off < depth && r < nrx &&
                         ld_relaxed_sys((const unsigned int*)rx_slot(rx[r], rt, pos[r] + off)) == pos[r] + off + 1;
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
                if (lane == 0) {
                    uint4 t[P_TAKE];
                    unsigned int got = pipe_pop(rt.free_slots, t, want);
                    for (unsigned int i = 0; i < got; ++i) taken[i] = t[i].x;
                    if (got == 0) p_count(rt, P_STAT_NO_SLOT, 1);
                    s_got = got;
                }
                __syncthreads();
                clk.mark(P_STAT_CYC_SLOTS);
                unsigned int got = s_got;
                if (got == 0) continue;
                any = true;
                rx_copy_run(rt, base, p0, got, taken);
                __syncthreads();
                clk.mark(P_STAT_CYC_COPY);
                if (lane == 0) {
                    pos[rr] = p0 + got;
                    // Relaxed: the copies it releases are complete (their values were stored
                    // before the barrier); a release store would wait on every earlier write.
                    st_relaxed_sys((unsigned int*)(base + COHORT_MQ_TAIL_OFFSET), p0 + got);
                    for (unsigned int i = 0; i < got; ++i) p_slot(rt, taken[i])->h.route = rr;
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
                if (clk.on) clk.cyc[P_STAT_VISITS] += 1;
            }
        }
        if (any) b.reset(); else b.idle();
    }
    clk.flush(rt);
}
