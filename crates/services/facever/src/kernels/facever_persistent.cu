// Face verification on the persistent engine: Lynx's GPU-centric design (sec. 6.4) with no
// launch per request. Host side and the protocol's rules: ../persistent.rs.
//
//   worker blocks (facever_p_worker) - per task: the probe's LBP histogram into the slot's
//       row of `probes`, then the fetch posted into the slot's mailbox in mapped host memory
//       (person, then the fetch number, released); once every task of the batch is posted,
//       each waits in device memory for its reference, computes the distance and answers.
//   the host's client-queue thread - scans the mailboxes, fetches every waiting person in one
//       memcached multiget, writes each reference into its slot's row of `refs` (mapped) and
//       appends {slot, fetch number, status} to the reply ring (mapped, the host its only
//       writer).
//   one relay warp (facever_p_relay) - the only GPU reader of the reply ring (hundreds of
//       workers polling the bus would slow the ingress warps' every read): it hands each
//       reply to its slot in device memory.
//
// A reply carries the fetch number it answers: a reply for a request the engine dropped at a
// restart is never taken for the slot's next request. CPU twin: lbp.rs via service.rs.

struct SvcArgs {
    unsigned long long table;       // 256 bytes (device): LBP code -> bin within a cell
    unsigned long long probes;      // slots x FACEVER_BINS f32 (device): the probes' histograms
    unsigned long long fetches;     // slots u32 (device): each slot's last fetch number
    unsigned long long ready;       // slots u32 (device): the fetch number last replied
    unsigned long long status;      // slots u32 (device): that reply's status (0 or P_ERR_*)
    unsigned long long ask_person;  // slots u32 (mapped): the person a slot's fetch asks for
    unsigned long long ask_fetch;   // slots u32 (mapped): its fetch number (written last)
    unsigned long long refs;        // slots x FACEVER_BINS f32 (mapped): the references
    unsigned long long replies;     // replies_cap x uint4 (mapped): {stamp, slot, fetch, status}
    unsigned long long replies_cap; // a power of two
    unsigned long long relay_tail;  // u32 (device): replies the relay has taken
    unsigned long long relay_seen;  // u32 (mapped): the same, published to the host
    unsigned long long threshold;   // the threshold's f32 bits
};

__device__ __forceinline__ unsigned int facever_person(const unsigned char* p) {
    return (unsigned int)p[0] | ((unsigned int)p[1] << 8) | ((unsigned int)p[2] << 16) |
           ((unsigned int)p[3] << 24);
}

__device__ bool service_accept(const PRt& rt, const SvcArgs& a, unsigned int s) {
    if (p_slot(rt, s)->h.len != FACEVER_REQUEST_BYTES) {
        tx_error(rt, s, P_ERR_BAD_REQUEST, FACEVER_BAD_SIZE);
        return false;
    }
    if (facever_person(p_payload(rt, s)) == 0) {
        tx_error(rt, s, P_ERR_BAD_REQUEST, "person ids start at 1");
        return false;
    }
    return true;
}

extern "C" __global__ void __launch_bounds__(32) facever_p_relay(PRt rt, SvcArgs a) {
    p_block_started(rt);
    unsigned int* tail = (unsigned int*)a.relay_tail;
    const uint4* ring = (const uint4*)a.replies;
    const unsigned int lane = threadIdx.x & 31, mask = (unsigned int)a.replies_cap - 1;
    Backoff b(256);
    unsigned int spins = 0;
    while (true) {
        const unsigned int t = *(volatile unsigned int*)tail;
        // Each lane looks at one position: one bus round trip sees up to 32 replies.
        const unsigned int pos = t + lane;
        const unsigned int stamp = ld_relaxed_sys((const unsigned int*)(ring + (pos & mask)));
        const unsigned int ready_mask = __ballot_sync(0xffffffffu, stamp == pos + 1);
        // Only the run of consecutive replies from the tail.
        const unsigned int n = ready_mask == 0xffffffffu ? 32u : (unsigned int)__ffs(~ready_mask) - 1;
        if (n == 0) {
            if (((++spins) & 63) == 0 && p_stopping(rt)) return;
            b.idle();
            continue;
        }
        b.reset();
        fence_acquire_sys();
        if (lane < n) {
            const uint4* e = ring + (pos & mask);
            const unsigned int slot = ld_relaxed_sys((const unsigned int*)e + 1);
            const unsigned int fetch = ld_relaxed_sys((const unsigned int*)e + 2);
            const unsigned int status = ld_relaxed_sys((const unsigned int*)e + 3);
            st_relaxed_gpu((unsigned int*)a.status + slot, status);
            // Cumulative: the worker that sees the number also sees the host's reference.
            st_release_gpu((unsigned int*)a.ready + slot, fetch);
        }
        __syncwarp();
        if (lane == 0) {
            *(volatile unsigned int*)tail = t + n;
            st_relaxed_sys((unsigned int*)a.relay_seen, t + n);
        }
        __syncwarp();
    }
}

extern "C" __global__ void __launch_bounds__(FACEVER_THREADS)
facever_p_worker(PRt rt, SvcArgs a) {
    p_block_started(rt);
    __shared__ uint4 tasks[P_MAX_BATCH];
    __shared__ unsigned int fetch[P_MAX_BATCH];
    __shared__ unsigned char table[256];
    __shared__ unsigned char img[FACEVER_IMAGE_BYTES];
    __shared__ unsigned int counts[FACEVER_BINS];
    __shared__ float ref[FACEVER_BINS];
    __shared__ float partial[FACEVER_THREADS / 32];
    __shared__ unsigned int s_status;
    __shared__ int s_leave;
    __shared__ unsigned char answer[FACEVER_ANSWER_BYTES];
    for (unsigned int i = threadIdx.x; i < 256; i += blockDim.x)
        table[i] = ((const unsigned char*)a.table)[i];
    Backoff b;
    unsigned int got;
    while ((got = worker_next(rt, rt.pipes[0], tasks, b)) > 0) {
        // Every task's histogram first, each fetch posted as soon as its probe is counted:
        // the host fetches while the block counts the next.
        for (unsigned int i = 0; i < got; ++i) {
            const unsigned int s = tasks[i].x;
            const unsigned char* p = p_payload(rt, s);
            for (unsigned int k = threadIdx.x; k < FACEVER_BINS; k += blockDim.x) counts[k] = 0;
            for (unsigned int k = threadIdx.x; k < FACEVER_IMAGE_BYTES; k += blockDim.x)
                img[k] = p[4 + k];
            __syncthreads();
            facever_count(img, table, counts);
            __syncthreads();
            float* probe = (float*)a.probes + (size_t)s * FACEVER_BINS;
            for (unsigned int k = threadIdx.x; k < FACEVER_BINS; k += blockDim.x)
                probe[k] = (float)counts[k];
            if (threadIdx.x == 0) {
                unsigned int* last = (unsigned int*)a.fetches + s;
                const unsigned int f = *last + 1;
                *last = f;
                fetch[i] = f;
                st_relaxed_sys((unsigned int*)a.ask_person + s, facever_person(p));
                st_release_sys((unsigned int*)a.ask_fetch + s, f);
            }
            __syncthreads();
        }
        for (unsigned int i = 0; i < got; ++i) {
            const unsigned int s = tasks[i].x;
            if (threadIdx.x == 0) {
                Backoff w;
                unsigned int spins = 0;
                int leave = 0;
                while (ld_acquire_gpu((const unsigned int*)a.ready + s) != fetch[i]) {
                    // Stopping: the host answers what the GPU held (INTERNAL) at a restart,
                    // and drains before it stops for good.
                    if (((++spins) & 63) == 0 && p_stopping(rt)) { leave = 1; break; }
                    w.idle();
                }
                s_leave = leave;
                s_status = leave ? 0 : ld_relaxed_gpu((const unsigned int*)a.status + s);
            }
            __syncthreads();
            if (s_leave) return;
            const unsigned int status = s_status;
            if (status == P_ERR_NOT_FOUND) {
                tx_error(rt, s, P_ERR_NOT_FOUND, "no reference for this person in the face database");
                continue;
            }
            if (status != 0) {
                tx_error(rt, s, P_ERR_UNAVAILABLE, "the face database (memcached) cannot be reached");
                continue;
            }
            // The reference, over the bus: 16-byte system-scope loads (never a stale line).
            const uint4* src = (const uint4*)((const float*)a.refs + (size_t)s * FACEVER_BINS);
            for (unsigned int k = threadIdx.x; k < FACEVER_BINS / 4; k += blockDim.x)
                ((uint4*)ref)[k] = ld_relaxed_sys_v4(src + k);
            __syncthreads();
            const float d = facever_chi2_sum((const float*)a.probes + (size_t)s * FACEVER_BINS, ref, partial);
            if (threadIdx.x == 0) {
                const unsigned int tbits = (unsigned int)a.threshold;
                const float t = __uint_as_float(tbits);
                const unsigned int dbits = __float_as_uint(d);
                answer[0] = d <= t ? 1 : 0;
                for (int k = 0; k < 4; ++k) {
                    answer[1 + k] = (dbits >> (8 * k)) & 0xff;
                    answer[5 + k] = (tbits >> (8 * k)) & 0xff;
                }
            }
            __syncthreads();
            tx_reply(rt, s, answer, FACEVER_ANSWER_BYTES);
        }
    }
}
