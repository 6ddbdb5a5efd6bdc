// Echo and spin on the persistent engine (Lynx's micro-benchmarks): the ingress warp checks
// the request and queues its slot on pipes[0]; each worker block (one of Lynx's "queues")
// takes one request at a time, busy-waits the requested time on the GPU clock (spin), and
// echoes the payload into TX. CPU twins: Echo::execute_cpu and Spin::execute_cpu.

struct SvcArgs {
    unsigned long long spin;         // 0 echo, 1 spin
    unsigned long long max_spin_us;  // spin::MAX_SPIN_US
};

__device__ __forceinline__ unsigned int spin_us_of(const unsigned char* p) {
    return p[0] | (p[1] << 8) | (p[2] << 16) | ((unsigned int)p[3] << 24);
}

__device__ bool service_accept(const PRt& rt, const SvcArgs& a, unsigned int s) {
    PSlot* sl = p_slot(rt, s);
    unsigned int len = sl->h.len;
    if (len > rt.payload_cap) { tx_error(rt, s, P_ERR_TOO_LARGE, "request larger than the engine's slots"); return false; }
    if (a.spin) {
        if (len < 4) { tx_error(rt, s, P_ERR_BAD_REQUEST, "spin payload needs a u32 microsecond count"); return false; }
        if (spin_us_of(p_payload(rt, s)) > a.max_spin_us) { tx_error(rt, s, P_ERR_BAD_REQUEST, "spin_us exceeds the limit"); return false; }
    }
    // The ingress queues the slot on pipes[0], with the rest of its run.
    return true;
}

extern "C" __global__ void micro_p_worker(PRt rt, SvcArgs a) {
    p_block_started(rt);
    __shared__ uint4 tasks[P_MAX_BATCH];
    __shared__ int s_stop;
    Backoff b;
    unsigned int got;
    while ((got = worker_next(rt, rt.pipes[0], tasks, b)) > 0) {
        for (unsigned int i = 0; i < got; ++i) {
            unsigned int s = tasks[i].x;
            PSlot* sl = p_slot(rt, s);
            const unsigned char* p = p_payload(rt, s);
            if (threadIdx.x == 0) {
                s_stop = 0;
                if (a.spin) {
                    unsigned long long until = global_ns() + 1000ull * spin_us_of(p);
                    unsigned int n = 0;
                    while (global_ns() < until) {
                        // A stopping engine abandons the request (the host answers it).
                        if ((++n & 255) == 0 && p_stopping(rt)) { s_stop = 1; break; }
                    }
                }
            }
            __syncthreads();
            if (s_stop) return;
            tx_reply(rt, s, p, sl->h.len);
        }
    }
}
