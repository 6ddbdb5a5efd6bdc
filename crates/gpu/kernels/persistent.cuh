// The persistent engine's device runtime (Centaur / Lynx on the GPU): kernels that never end,
// polling mqueues in mapped host memory, moving work between stages through gpipes in device
// memory, and answering into a TX ring in mapped host memory. Host side:
// crates/gpu/src/persistent/. Compiled after cohort_mqueue.h (the ring layout shared with
// Rust) and before a service's stage file; persistent_ingress.cuh follows the service file.
//
// Rules the hardware imposes (H200: hostNativeAtomicSupported = 0): no read-modify-write on
// mapped host memory. Every index in host memory has one writer (the host publishes RX seq and
// TX tail, the GPU publishes RX tail and TX seq); the several GPU producers of the TX ring
// reserve positions with an atomic on a counter in device memory and each writes its own slot.
// Ordering across the bus: system-scope release stores and acquire loads, payloads read with
// system-scope relaxed loads after an acquire fence (a stale L1 line must never be served for
// host memory).
//
// A request lives in a *slot* (device memory) from the moment the ingress warp takes it off
// its RX ring until its answer is committed to TX: the slot is reserved before the request is
// read, so every stage downstream has a place to write (the reducer's partial results
// included) and no gpipe can fill: each gpipe holds at least as many tasks as the slots can
// create. Kernels stop at a task boundary when the host raises the stop flag.

// P_MAX_RX (RX rings per runtime) and P_MAX_BATCH (tasks a worker block pops at once) come
// from crates/gpu/src/persistent/rt.rs with the other P_* constants.

// Every field is 64 bits, so the host mirror (`RtArgs` in crates/gpu/src/persistent/rt.rs)
// has the same layout with no padding rules to get wrong.
struct PPipe {
    unsigned long long ctr;    // unsigned int[64]: [0] producers' head, [32] consumers' tail
    unsigned long long seq;    // unsigned int[cap]: the ticket each element waits for
    unsigned long long items;  // uint4[cap]
    unsigned long long cap;    // power of two
    unsigned long long sys;    // 1: producers or consumers on other physical GPUs (peer memory):
                               // its atomics and orders at system scope, not GPU scope
};

struct PRt {
    unsigned long long stop;       // mapped host u32: nonzero = every kernel returns
    unsigned long long dev_stop;   // device u32: the ingress warp's copy, which workers poll
    unsigned long long rx;         // device array of nrx mapped ring base addresses
    unsigned long long nrx;
    unsigned long long rx_slots;
    unsigned long long rx_stride;
    unsigned long long rx_copy;    // bytes of a slot the ingress copies (header + payload)
    unsigned long long tx;         // device array of ntx mapped TX ring bases (one egress thread each)
    unsigned long long ntx;        // TX rings: an answer for RX ring r goes to TX ring r % ntx
    unsigned long long tx_slots;   // per TX ring
    unsigned long long tx_stride;
    unsigned long long tx_head;    // device u32[ntx * P_TX_HEAD_WORDS]: per TX ring, [0] the next
                                   // position to reserve, [2] the host's tail as last seen
    unsigned long long slots;      // device PSlot[nslots]
    unsigned long long nslots;
    unsigned long long payloads;   // device bytes[nslots * payload_cap]: request payloads
    unsigned long long payload_cap;
    unsigned long long stats;      // device u64[P_STATS]
    unsigned long long batch;      // tasks a worker takes from its gpipe at once
    unsigned long long prof;       // device u64[nslots * P_PROF_STAMPS]: stamps of slots in use
    unsigned long long prof_log;   // device u64[prof_cap * P_PROF_REC]: answered requests' stamps
    unsigned long long prof_cap;   // 0: the profile is off (no clock reads on the hot path)
    unsigned long long bar;        // device u32[64 * P_BAR_GROUPS]: per group [0] arrivals, [32] generation
    unsigned long long sys;        // 1: some stage runs on another physical GPU (counters, stop flag
                                   // and its gpipes at system scope)
    PPipe free_slots;              // slot indices ready for a request
    PPipe pipes[P_PIPES];          // between stages; the service decides what flows where
};

// Counter indices (P_STAT_*, P_STATS) and profile stamps (P_PROF_*) are defined once, in
// crates/gpu/src/persistent/rt.rs, and prepended to this file as #defines.

struct PSlot {
    cohort_mq_slot_header h;  // the request's header (seq unused, route = origin RX ring)
    unsigned int pending;     // tasks still running for this request (fan-out stages)
    unsigned int a, b, c;     // service-defined (k-NN: k, nprobe)
};

// ---- memory-order primitives -------------------------------------------------------------

__device__ __forceinline__ unsigned int ld_acquire_sys(const unsigned int* p) {
    unsigned int v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
// Polls of host memory: relaxed (an acquire load per lane per poll is a system-scope fence each
// time); a poll that finds something is followed by one fence_acquire_sys.
__device__ __forceinline__ unsigned int ld_relaxed_sys(const unsigned int* p) {
    unsigned int v;
    asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ unsigned long long ld_relaxed_sys64(const unsigned long long* p) {
    unsigned long long v;
    asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
// One 16-byte load of host memory, coherent at system scope (never a stale L1 line). Measured:
// four volatile 32-bit loads per chunk (the first version) kept too few reads in flight - the
// ingress copied at one chunk per bus round trip (lab/scripts/persistent-profile.sh). No "memory"
// clobber: a run's loads may all issue before the first returns (asm volatile keeps them after
// the acquire fence that precedes them).
__device__ __forceinline__ uint4 ld_relaxed_sys_v4(const void* p) {
    uint4 v;
    asm volatile("ld.relaxed.sys.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}
__device__ __forceinline__ void fence_acquire_sys() { asm volatile("fence.acq_rel.sys;" ::: "memory"); }
__device__ __forceinline__ void st_relaxed_sys(unsigned int* p, unsigned int v) {
    asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void st_release_sys(unsigned int* p, unsigned int v) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned int ld_acquire_gpu(const unsigned int* p) {
    unsigned int v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void st_release_gpu(unsigned int* p, unsigned int v) {
    asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void st_relaxed_gpu(unsigned int* p, unsigned int v) {
    asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned int ld_relaxed_gpu(const unsigned int* p) {
    unsigned int v;
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// Only the ingress warp reads the host's flag (over the bus) and passes it on in device memory:
// hundreds of worker blocks polling host memory would slow every bus access of the ingress.
__device__ __forceinline__ bool p_host_stopping(const PRt& rt) {
    return ld_acquire_sys((const unsigned int*)rt.stop) != 0;
}
__device__ __forceinline__ bool p_stopping(const PRt& rt) {
    const unsigned int* f = (const unsigned int*)rt.dev_stop;
    return (rt.sys ? ld_acquire_sys(f) : ld_acquire_gpu(f)) != 0;
}

// A stage's writes that the lane's other stages read, wherever they run: a system-scope
// fence where some stage is on another physical GPU (rt.sys), else a GPU-scope one.
__device__ __forceinline__ void p_fence(const PRt& rt) {
    if (rt.sys) __threadfence_system(); else __threadfence();
}
// A count in the lane's memory that stages on several GPUs decrement.
__device__ __forceinline__ unsigned int p_atomic_sub(const PRt& rt, unsigned int* c, unsigned int v) {
    return rt.sys ? atomicSub_system(c, v) : atomicSub(c, v);
}

// Counters: blocks on another physical GPU add to them too (system-scope atomics there: a
// GPU-scope atomic is atomic only among one GPU's threads).
__device__ __forceinline__ void p_count(const PRt& rt, int which, unsigned long long n) {
    unsigned long long* c = (unsigned long long*)rt.stats + which;
    if (rt.sys) atomicAdd_system(c, n); else atomicAdd(c, n);
}

// First thing every persistent kernel does, once per block: the host counts started blocks
// after a launch and refuses to run with fewer than it launched (a block that never becomes
// resident would leave its stage, and the requests routed to it, waiting forever).
__device__ __forceinline__ void p_block_started(const PRt& rt) {
    if (threadIdx.x == 0) p_count(rt, P_STAT_STARTED, 1);
}

__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// ---- profile (rt.prof_cap > 0) ------------------------------------------------------------
// Stamps are plain stores by whichever thread passes the point: a request is in one place at
// a time, except the fan-out pops of k-NN's search tasks, where the last writer wins.
__device__ __forceinline__ void p_stamp(const PRt& rt, unsigned int slot, int which) {
    if (rt.prof_cap) ((unsigned long long*)rt.prof)[(unsigned long long)slot * P_PROF_STAMPS + which] = global_ns();
}

// Idle back-off: doubling sleeps up to `cap` ns (workers 512 ns: hundreds of blocks polling
// device memory; the one ingress warp 256 ns: each of its sleeps is added to a request's
// round trip), reset whenever work shows up.
struct Backoff {
    unsigned int ns, cap;
    __device__ Backoff(unsigned int cap_ns = 512) : ns(0), cap(cap_ns) {}
    __device__ void reset() { ns = 0; }
    __device__ void idle() {
        ns = ns == 0 ? 32 : min(ns * 2, cap);
        __nanosleep(ns);
    }
};

// ---- gpipes: bounded rings of uint4 tasks in device memory --------------------------------
// Producers reserve an element with an atomic on the head, write it in place, then commit by
// releasing its ticket; consumers claim a run of committed-or-reserved elements with a CAS on
// the tail and wait for each ticket. Capacity is sized by the host so a producer never waits
// (see the file comment), which keeps stop-at-task-boundary deadlock free.

// A gpipe whose ends are on two physical GPUs (p.sys) orders and reserves at system scope;
// otherwise at GPU scope (virtual GPUs of one device share its L2: GPU scope covers them).
__device__ __forceinline__ unsigned int pipe_ld_acquire(const PPipe& p, const unsigned int* a) {
    return p.sys ? ld_acquire_sys(a) : ld_acquire_gpu(a);
}
__device__ __forceinline__ unsigned int pipe_ld_relaxed(const PPipe& p, const unsigned int* a) {
    return p.sys ? ld_relaxed_sys(a) : ld_relaxed_gpu(a);
}
__device__ __forceinline__ void pipe_st_release(const PPipe& p, unsigned int* a, unsigned int v) {
    if (p.sys) st_release_sys(a, v); else st_release_gpu(a, v);
}
__device__ __forceinline__ unsigned int pipe_add(const PPipe& p, unsigned int* a, unsigned int v) {
    return p.sys ? atomicAdd_system(a, v) : atomicAdd(a, v);
}
__device__ __forceinline__ unsigned int pipe_cas(const PPipe& p, unsigned int* a, unsigned int cmp, unsigned int v) {
    return p.sys ? atomicCAS_system(a, cmp, v) : atomicCAS(a, cmp, v);
}

__device__ __forceinline__ unsigned int* pipe_head(const PPipe& p) { return (unsigned int*)p.ctr; }
__device__ __forceinline__ unsigned int* pipe_tail(const PPipe& p) { return (unsigned int*)p.ctr + 32; }

// One thread pushes one task.
__device__ void pipe_push(const PPipe& p, uint4 task) {
    unsigned int cap = (unsigned int)p.cap;
    unsigned int t = pipe_add(p, pipe_head(p), 1u);
    unsigned int* seq = (unsigned int*)p.seq + (t & (cap - 1));
    // Free when its ticket is t (consumers release it as t + cap after reading).
    while (pipe_ld_acquire(p, seq) != t) __nanosleep(64);
    ((uint4*)p.items)[t & (cap - 1)] = task;
    pipe_st_release(p, seq, t + 1);
}

// The whole block pushes slots[0..n) (n <= blockDim.x) as tasks {slot}: one head reservation
// for the run, the elements committed in parallel. Every thread's earlier writes (the slots'
// contents) are fenced first.
__device__ void pipe_push_run(const PPipe& p, const unsigned int* slots, unsigned int n) {
    __shared__ unsigned int s_t;
    if (p.sys) __threadfence_system(); else __threadfence();
    __syncthreads();
    if (threadIdx.x == 0 && n > 0) s_t = pipe_add(p, pipe_head(p), n);
    __syncthreads();
    if (threadIdx.x < n) {
        unsigned int cap = (unsigned int)p.cap, e = s_t + threadIdx.x;
        unsigned int* seq = (unsigned int*)p.seq + (e & (cap - 1));
        while (pipe_ld_acquire(p, seq) != e) __nanosleep(64);
        ((uint4*)p.items)[e & (cap - 1)] = make_uint4(slots[threadIdx.x], 0, 0, 0);
        pipe_st_release(p, seq, e + 1);
    }
    __syncthreads();
}

// The whole warp (the ingress) claims up to `max` (<= 32) tasks and reads their .x into
// `out`: one CAS for the run, then each lane waits for, reads and releases one element, so the
// run costs one chain of L2 round trips instead of one per element.
__device__ unsigned int pipe_pop_warp(const PPipe& p, unsigned int* out, unsigned int max) {
    unsigned int lane = threadIdx.x & 31, cap = (unsigned int)p.cap;
    unsigned int t = 0, n = 0;
    if (lane == 0) {
        while (true) {
            t = pipe_ld_relaxed(p, pipe_tail(p));
            unsigned int h = pipe_ld_relaxed(p, pipe_head(p));
            if ((int)(h - t) <= 0) { n = 0; break; }
            n = min(h - t, max);
            if (pipe_cas(p, pipe_tail(p), t, t + n) == t) break;
        }
    }
    t = __shfl_sync(0xffffffffu, t, 0);
    n = __shfl_sync(0xffffffffu, n, 0);
    if (lane < n) {
        unsigned int* seq = (unsigned int*)p.seq + ((t + lane) & (cap - 1));
        while (pipe_ld_acquire(p, seq) != t + lane + 1) __nanosleep(32);
        out[lane] = ((volatile uint4*)p.items + ((t + lane) & (cap - 1)))->x;
        pipe_st_release(p, seq, t + lane + cap);
    }
    __syncwarp();
    return n;
}

// One thread claims up to `max` tasks into `out`; returns how many (0: none waiting).
__device__ unsigned int pipe_pop(const PPipe& p, uint4* out, unsigned int max) {
    unsigned int cap = (unsigned int)p.cap;
    unsigned int t, n;
    while (true) {
        t = pipe_ld_relaxed(p, pipe_tail(p));
        unsigned int h = pipe_ld_relaxed(p, pipe_head(p));
        n = min(h - t, max);
        if ((int)(h - t) <= 0) return 0;
        if (pipe_cas(p, pipe_tail(p), t, t + n) == t) break;
    }
    for (unsigned int i = 0; i < n; ++i) {
        unsigned int* seq = (unsigned int*)p.seq + ((t + i) & (cap - 1));
        while (pipe_ld_acquire(p, seq) != t + i + 1) __nanosleep(32);
        volatile uint4* it = (volatile uint4*)p.items + ((t + i) & (cap - 1));
        out[i] = make_uint4(it->x, it->y, it->z, it->w);
        pipe_st_release(p, seq, t + i + cap);
    }
    return n;
}

// The whole block claims up to `max` tasks and writes their .x to out[0..n) (any memory):
// one CAS for the run, then the threads wait for, read and release the elements in parallel.
// Returns n, the same in every thread (0: none waiting).
__device__ unsigned int pipe_pop_block(const PPipe& p, unsigned int* out, unsigned int max) {
    __shared__ unsigned int s_t, s_n;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned int t, n;
        while (true) {
            t = pipe_ld_relaxed(p, pipe_tail(p));
            unsigned int h = pipe_ld_relaxed(p, pipe_head(p));
            if ((int)(h - t) <= 0) { n = 0; break; }
            n = min(h - t, max);
            if (pipe_cas(p, pipe_tail(p), t, t + n) == t) break;
        }
        s_t = t;
        s_n = n;
    }
    __syncthreads();
    const unsigned int t = s_t, n = s_n, cap = (unsigned int)p.cap;
    for (unsigned int i = threadIdx.x; i < n; i += blockDim.x) {
        unsigned int* seq = (unsigned int*)p.seq + ((t + i) & (cap - 1));
        while (pipe_ld_acquire(p, seq) != t + i + 1) __nanosleep(32);
        out[i] = ((volatile uint4*)p.items + ((t + i) & (cap - 1)))->x;
        pipe_st_release(p, seq, t + i + cap);
    }
    __syncthreads();
    return n;
}

// ---- group barrier: `nblocks` blocks of one persistent kernel (a stage whose blocks work in
// phases on a shared cohort; `group` < P_BAR_GROUPS tells apart groups working independently).
// All its blocks are resident (checked at launch), so waiting for each other cannot deadlock.
// The arrival counters are zeroed by p_reset before every launch. Returns false when the
// engine is stopping: the caller leaves at once (the host has drained what it waits for, or
// restarts and answers what the GPU held INTERNAL).
// `cap_ns` caps the waiters' back-off: long for a wait that may last until the next request,
// short where every block arrives within a phase of the same work.
__device__ bool p_barrier(const PRt& rt, unsigned int group, unsigned int nblocks,
                          unsigned int cap_ns = 1024) {
    __shared__ int s_go;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned int* arrived = (unsigned int*)rt.bar + 64 * group;
        unsigned int* gen = arrived + 32;
        const unsigned int g = ld_acquire_gpu(gen);  // cannot advance before this block arrives
        __threadfence();                              // the block's writes (barrier + cumulativity)
        int go = 1;
        if (atomicAdd(arrived, 1u) == nblocks - 1) {
            st_relaxed_gpu(arrived, 0u);  // ordered before the release: the next phase's arrivals count from 0
            st_release_gpu(gen, g + 1);
        } else {
            // Phases are short (their waits end within the first sleeps); an idle engine's
            // blocks wait here for the next cohort and should not flood L2 with polls.
            Backoff b(cap_ns);
            unsigned int spins = 0;
            while (ld_acquire_gpu(gen) == g) {
                if ((++spins & 63) == 0 && p_stopping(rt)) { go = 0; break; }
                b.idle();
            }
        }
        __threadfence();
        s_go = go;
    }
    __syncthreads();
    return s_go != 0;
}

// Every block of the kernel.
__device__ __forceinline__ bool p_grid_barrier(const PRt& rt) { return p_barrier(rt, 0, gridDim.x); }

// ---- slots ---------------------------------------------------------------------------------

__device__ __forceinline__ PSlot* p_slot(const PRt& rt, unsigned int s) { return (PSlot*)rt.slots + s; }
__device__ __forceinline__ unsigned char* p_payload(const PRt& rt, unsigned int s) {
    return (unsigned char*)rt.payloads + (unsigned long long)s * rt.payload_cap;
}
__device__ __forceinline__ void p_free_slot(const PRt& rt, unsigned int s) {
    pipe_push(rt.free_slots, make_uint4(s, 0, 0, 0));
}

// ---- TX: answers into the mapped rings the host egress threads drain ---------------------
// Block-cooperative: every thread of the block calls both halves. An answer goes to the TX
// ring of its request's RX ring (r % ntx): each host egress thread drains one TX ring into
// the answer rings of its own ingresses, so no two threads write one answer ring.

// Where an answer is being written: its TX ring and position there.
struct TxPos {
    unsigned int ring;
    unsigned int pos;
};

__device__ __forceinline__ unsigned char* tx_ring(const PRt& rt, unsigned int ring) {
    return (unsigned char*)((const unsigned long long*)rt.tx)[ring];
}

__device__ __forceinline__ unsigned int* tx_seq(const PRt& rt, TxPos at) {
    return (unsigned int*)(tx_ring(rt, at.ring) + COHORT_MQ_CONTROL_BYTES +
                           (unsigned long long)(at.pos & (rt.tx_slots - 1)) * rt.tx_stride);
}

// Reserves the next position of the TX ring that answers request header `h` and waits until
// the host has freed it; returns the payload area of the slot to write. `at` is the same in
// every thread.
__shared__ unsigned long long p_tx_begun;  // profile: when the block's TX slot was reserved

__device__ unsigned char* tx_begin(const PRt& rt, const cohort_mq_slot_header* h, TxPos* at) {
    __shared__ TxPos s_at;
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned int ring = h->route % (unsigned int)rt.ntx;
        unsigned int* head = (unsigned int*)rt.tx_head + ring * P_TX_HEAD_WORDS;
        unsigned int p = atomicAdd(head, 1u);
        // The host's tail is read over the bus only when the copy in device memory (a value
        // read from it earlier, so never ahead of it) does not already show the slot free:
        // one bus round trip per answer saved while the host keeps up.
        unsigned int* seen = head + 2;
        if (p - ld_relaxed_gpu(seen) >= (unsigned int)rt.tx_slots) {
            const unsigned int* tail = (const unsigned int*)(tx_ring(rt, ring) + COHORT_MQ_TAIL_OFFSET);
            Backoff b;
            unsigned int t;
            // The egress threads keep draining, also while kernels stop: this always ends.
            // (The slot is written only after this load returned: no fence needed.)
            while (p - (t = ld_relaxed_sys(tail)) >= (unsigned int)rt.tx_slots) b.idle();
            // Racing blocks may store an older tail: that only costs a later bus read.
            st_relaxed_gpu(seen, t);
        }
        s_at.ring = ring;
        s_at.pos = p;
        if (rt.prof_cap) p_tx_begun = global_ns();
    }
    __syncthreads();
    *at = s_at;
    return (unsigned char*)tx_seq(rt, s_at) + COHORT_MQ_SLOT_HEADER_BYTES;
}

// Copies the answered request's stamps into the profile log and clears them for the slot's
// next request (thread 0, after its answer's seq was stored).
__device__ void p_log(const PRt& rt, const cohort_mq_slot_header* h) {
    unsigned long long now = global_ns();
    unsigned long long s = (unsigned long long)((const PSlot*)h - (const PSlot*)rt.slots);
    unsigned long long* st = (unsigned long long*)rt.prof + s * P_PROF_STAMPS;
    unsigned long long i = atomicAdd((unsigned long long*)rt.stats + P_STAT_PROF_N, 1ull);
    if (i < rt.prof_cap) {
        unsigned long long* r = (unsigned long long*)rt.prof_log + i * P_PROF_REC;
        r[0] = h->request_id;
        r[1] = h->route;
        for (int k = 0; k < 5; ++k) r[2 + k] = st[k];
        r[7] = p_tx_begun;
        r[8] = now;
        r[9] = 0;
    }
    for (int k = 0; k < 5; ++k) st[k] = 0;
}

// Commits the answer of request header `h` (from slot memory) with `status` and `len` payload
// bytes already written by the block.
__device__ void tx_commit(const PRt& rt, TxPos at, const cohort_mq_slot_header* h,
                          unsigned short status, unsigned int len) {
    // The block's payload writes happen before thread 0's fence (barrier), and the fence is
    // cumulative: one system fence per answer orders payload and header before the seq.
    __syncthreads();
    if (threadIdx.x == 0) {
        cohort_mq_slot_header* o = (cohort_mq_slot_header*)tx_seq(rt, at);
        o->len = len;
        o->token = h->token;
        o->service = h->service;
        o->status = status;
        o->request_id = h->request_id;
        o->deadline = h->deadline;
        o->arrived = h->arrived;
        o->route = h->route;
        __threadfence_system();
        st_relaxed_sys(&o->seq, at.pos + 1);
        p_count(rt, P_STAT_ANSWERED, 1);
        if (rt.prof_cap) p_log(rt, h);
    }
    __syncthreads();
}

// Answers slot `s` with an error (`code` from the shared error table, a short message) and
// frees the slot. Block-cooperative.
__device__ void tx_error(const PRt& rt, unsigned int s, unsigned short code, const char* msg) {
    TxPos at;
    unsigned char* out = tx_begin(rt, &p_slot(rt, s)->h, &at);
    unsigned int len = 0;
    while (msg[len] != 0 && len < 200) ++len;
    for (unsigned int i = threadIdx.x; i < len; i += blockDim.x) out[i] = (unsigned char)msg[i];
    tx_commit(rt, at, &p_slot(rt, s)->h, code, len);
    if (threadIdx.x == 0) p_free_slot(rt, s);
    __syncthreads();
}

// Answers slot `s` with `len` bytes of `src` (device memory) and status 0, then frees it.
__device__ void tx_reply(const PRt& rt, unsigned int s, const unsigned char* src, unsigned int len) {
    TxPos at;
    unsigned char* out = tx_begin(rt, &p_slot(rt, s)->h, &at);
    for (unsigned int i = threadIdx.x; i < len; i += blockDim.x) out[i] = src[i];
    tx_commit(rt, at, &p_slot(rt, s)->h, 0, len);
    if (threadIdx.x == 0) p_free_slot(rt, s);
    __syncthreads();
}

// ---- the worker loop ------------------------------------------------------------------------
// Pops up to `max` (<= P_MAX_BATCH) tasks from `pipe` into shared memory for the whole
// block; returns the count (0 when stopping). Idles with back-off while the pipe is empty.
__device__ unsigned int worker_next_max(const PRt& rt, const PPipe& pipe, uint4* tasks, Backoff& b,
                                        unsigned int max) {
    __shared__ unsigned int s_n;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned int n = 0;
        unsigned int spins = 0;
        while (true) {
            n = pipe_pop(pipe, tasks, max);
            if (n > 0) { b.reset(); break; }
            if ((++spins & 15) == 0 && p_stopping(rt)) break;
            b.idle();
        }
        if (n > 0) { p_count(rt, P_STAT_TASKS, n); p_count(rt, P_STAT_POPS, 1); }
        if (rt.prof_cap) {
            // Every service's tasks carry their request's slot in .x.
            for (unsigned int i = 0; i < n; ++i) {
                unsigned long long* st = (unsigned long long*)rt.prof + (unsigned long long)tasks[i].x * P_PROF_STAMPS;
                unsigned long long now = global_ns();
                if (st[P_PROF_FIRST_POP] == 0) st[P_PROF_FIRST_POP] = now;
                st[P_PROF_LAST_POP] = now;
            }
        }
        s_n = n;
    }
    __syncthreads();
    return s_n;
}

// As worker_next_max, up to the engine's batch (rt.batch) at once.
__device__ unsigned int worker_next(const PRt& rt, const PPipe& pipe, uint4* tasks, Backoff& b) {
    return worker_next_max(rt, pipe, tasks, b, (unsigned int)min(rt.batch, (unsigned long long)P_MAX_BATCH));
}

// Set-up before launch (and after a restart): every slot free, every gpipe empty.
extern "C" __global__ void p_reset(PRt rt) {
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int stride = gridDim.x * blockDim.x;
    for (int q = -1; q < P_PIPES; ++q) {
        const PPipe& p = q < 0 ? rt.free_slots : rt.pipes[q];
        if (p.cap == 0) continue;
        for (unsigned int e = i; e < p.cap; e += stride) ((unsigned int*)p.seq)[e] = e;
        if (i < 64) ((unsigned int*)p.ctr)[i] = 0;
    }
    if (rt.prof_cap)
        for (unsigned long long e = i; e < rt.nslots * P_PROF_STAMPS; e += stride) ((unsigned long long*)rt.prof)[e] = 0;
    // The free list starts full: tickets 0..nslots already committed.
    for (unsigned int s = i; s < rt.nslots; s += stride) {
        ((uint4*)rt.free_slots.items)[s] = make_uint4(s, 0, 0, 0);
        ((unsigned int*)rt.free_slots.seq)[s] = s + 1;
    }
    if (i < 64 * P_BAR_GROUPS) ((unsigned int*)rt.bar)[i] = 0;
    if (i == 0) {
        ((unsigned int*)rt.free_slots.ctr)[0] = (unsigned int)rt.nslots;
        *(unsigned int*)rt.dev_stop = 0;
    }
}

// The layout the host mirrors (RtArgs, SLOT_BYTES, PipeArgs), read back by a GPU test.
struct PLayoutOut {
    unsigned long long* out;
};
extern "C" __global__ void p_layout(PLayoutOut o) {
    unsigned long long* out = o.out;
    out[0] = sizeof(PRt);
    out[1] = sizeof(PSlot);
    PRt r;
    out[2] = (unsigned long long)((char*)&r.free_slots - (char*)&r);
    out[3] = (unsigned long long)((char*)&r.pipes - (char*)&r);
    out[4] = sizeof(cohort_mq_slot_header);
    out[5] = sizeof(PPipe);
}
