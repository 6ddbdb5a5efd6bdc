// LeNet on the persistent engine (Lynx's persistent LeNet): the ingress warp checks the
// request's size and queues its slot on pipes[0]; no launch per request. Two plans
// (`lenet.persistent`), each with conv2 on the CUDA cores or the tensor cores:
//   image - lenet_p_worker[_tc]: each worker block takes one image at a time and runs the
//           whole network on it (lenet_net.cuh: the convolutions in shared memory, then the
//           dense layers a warp per output), then writes the 41-byte answer into TX;
//   team  - lenet_p_team[_tc]: LENET_TEAM blocks work on one image together, meeting at
//           their team's barrier between layers (less latency per image, more blocks busy).
// CPU twin: model::forward (crates/services/src/lenet/model.rs).

struct SvcArgs {
    unsigned long long w1;   // conv1.weight [C1][1][K][K]
    unsigned long long b1;   // conv1.bias
    unsigned long long w2;   // conv2.weight [C2][C1][K][K]
    unsigned long long b2;   // conv2.bias
    unsigned long long f1w;  // fc1.weight [HIDDEN][FLAT]
    unsigned long long f1b;  // fc1.bias
    unsigned long long f2w;  // fc2.weight [CLASSES][HIDDEN]
    unsigned long long f2b;  // fc2.bias
    unsigned long long team; // team plan: per team LENET_TEAM_STRIDE words of device memory
};

__device__ bool service_accept(const PRt& rt, const SvcArgs& a, unsigned int s) {
    if (p_slot(rt, s)->h.len != LENET_PIXELS) {
        tx_error(rt, s, P_ERR_BAD_REQUEST, "lenet takes one 28x28 8-bit image: 784 bytes");
        return false;
    }
    return true;
}

#define LENET_ANSWER_BYTES (1 + 4 * LENET_CLASSES)

// The answer from the logits: the digit (the largest logit, the smaller digit on a tie, as
// model::argmax), then the ten logits little-endian. Every thread calls.
__device__ void lenet_answer(const float* logits, unsigned char* answer) {
    if (threadIdx.x == 0) {
        int best = 0;
        for (int c = 1; c < LENET_CLASSES; ++c)
            if (logits[c] > logits[best]) best = c;
        answer[0] = (unsigned char)best;
        for (int c = 0; c < LENET_CLASSES; ++c) {
            const unsigned int bits = __float_as_uint(logits[c]);
            for (int k = 0; k < 4; ++k) answer[1 + 4 * c + k] = (bits >> (8 * k)) & 0xff;
        }
    }
    __syncthreads();
}

// One image's 800 features, conv2 on the CUDA cores or the tensor cores.
__device__ void lenet_features(const unsigned char* in, const SvcArgs& a, LenetConvSmem& sm,
                               float* out) {
    lenet_conv1_pool(in, (const float*)a.w1, (const float*)a.b1, sm);
    lenet_conv2_fp32((const float*)a.w2, (const float*)a.b2, sm, out);
}

__device__ void lenet_features(const unsigned char* in, const SvcArgs& a, LenetTcSmem& sm,
                               float* out) {
    lenet_conv1_pool(in, (const float*)a.w1, (const float*)a.b1, sm.conv);
    lenet_conv2_tc((const float*)a.w2, (const float*)a.b2, sm, out);
}

// The worker's loop, for either conv2 (`Smem` says which: LenetConvSmem for the CUDA cores,
// LenetTcSmem for the tensor cores).
template <typename Smem>
__device__ void lenet_worker(const PRt& rt, const SvcArgs& a, Smem& sm) {
    __shared__ uint4 tasks[P_MAX_BATCH];
    __shared__ float features[LENET_FLAT];
    __shared__ float hidden[LENET_HIDDEN];
    __shared__ float logits[LENET_CLASSES];
    __shared__ unsigned char answer[LENET_ANSWER_BYTES];
    Backoff b;
    unsigned int got;
    while ((got = worker_next(rt, rt.pipes[0], tasks, b)) > 0) {
        for (unsigned int i = 0; i < got; ++i) {
            const unsigned int s = tasks[i].x;
            lenet_features(p_payload(rt, s), a, sm, features);
            lenet_dense_one(features, (const float*)a.f1w, (const float*)a.f1b, LENET_FLAT,
                            LENET_HIDDEN, true, hidden);
            lenet_dense_one(hidden, (const float*)a.f2w, (const float*)a.f2b, LENET_HIDDEN,
                            LENET_CLASSES, false, logits);
            lenet_answer(logits, answer);
            tx_reply(rt, s, answer, LENET_ANSWER_BYTES);
        }
    }
}

extern "C" __global__ void __launch_bounds__(LENET_P_THREADS)
lenet_p_worker(PRt rt, SvcArgs a) {
    p_block_started(rt);
    __shared__ LenetConvSmem sm;
    lenet_worker(rt, a, sm);
}

// Two workers per SM (the default): registers held to half the SM's.
extern "C" __global__ void __launch_bounds__(LENET_P_THREADS, 2)
lenet_p_worker_tc(PRt rt, SvcArgs a) {
    p_block_started(rt);
    __shared__ LenetTcSmem sm;
    lenet_worker(rt, a, sm);
}

// ---- the team plan -------------------------------------------------------------------------
// Team t is blocks [t * LENET_TEAM, (t + 1) * LENET_TEAM); its member 0 (the leader) takes
// one image at a time off pipes[0] and posts its slot in the team's mailbox. Per image:
//   all members: conv1 (each its own copy), conv2's channel tile `member` -> the team's
//                features in device memory;                              barrier
//   all members: fc1 rows [member * rows, ...) -> the team's hidden layer; barrier
//   the leader:  fc2, the answer into TX, then the next image (the others wait at the
//                next image's barrier).
// A member reads what others wrote only after a barrier, and through L2 (__ldcg): its L1
// may hold the previous image's lines. Barrier group = team (p_barrier: all blocks resident,
// checked at launch, so the teams' waits cannot deadlock; a stopping engine releases them).
// Team memory: features [LENET_TEAM_FEATURES..), hidden [LENET_TEAM_HIDDEN..), mailbox
// [LENET_TEAM_MAIL] (u32), LENET_TEAM_STRIDE words a team.

// The back-off cap between layers: the members do the same work and arrive close together.
#define LENET_TEAM_WAIT_NS 256

struct LenetTeamSmem {
    LenetConvSmem conv;  // the image, conv1's weights, the pooled conv1 planes
    int koff[LENET_C2_KP];
    float w2[8 * LENET_W2_TILE_STRIDE];  // this member's conv2 channel tile, loaded once
    union {
        float parts[LENET_TILE_PARTS];          // conv2's partial sums
        float4 features[LENET_FLAT / 4];        // the image's features, for fc1
        float4 hidden[(LENET_HIDDEN + 3) / 4];  // the hidden layer, for the leader's fc2
    } u;
};

template <bool TC>
__device__ void lenet_team(const PRt& rt, const SvcArgs& a, LenetTeamSmem& sm) {
    __shared__ uint4 task;
    __shared__ unsigned int s_slot;
    __shared__ float logits[LENET_CLASSES];
    __shared__ unsigned char answer[LENET_ANSWER_BYTES];
    const unsigned int team = blockIdx.x / LENET_TEAM, member = blockIdx.x % LENET_TEAM;
    float* mem = (float*)a.team + (size_t)team * LENET_TEAM_STRIDE;
    unsigned int* mail = (unsigned int*)(mem + LENET_TEAM_MAIL);
    constexpr int ROWS = (LENET_HIDDEN + LENET_TEAM - 1) / LENET_TEAM;
    const int r0 = member * ROWS, r1 = min(LENET_HIDDEN, r0 + ROWS);
    lenet_load_w2_tile((const float*)a.w2, member, sm.w2);
    lenet_koff_table(sm.koff);
    Backoff b;
    while (true) {
        if (member == 0) {
            if (worker_next_max(rt, rt.pipes[0], &task, b, 1) == 0) return;
            if (threadIdx.x == 0) *mail = task.x;  // published by the barrier's fence
        }
        if (!p_barrier(rt, team, LENET_TEAM)) return;
        if (threadIdx.x == 0) s_slot = __ldcg(mail);
        __syncthreads();
        const unsigned int s = s_slot;

        lenet_conv1_pool(p_payload(rt, s), (const float*)a.w1, (const float*)a.b1, sm.conv);
        if (TC)
            lenet_conv2_tile_tc(sm.conv.p1, sm.koff, sm.w2, sm.u.parts);
        else
            lenet_conv2_tile_fp32(sm.conv.p1, sm.w2, sm.u.parts);
        lenet_conv2_tile_pool(sm.u.parts, (const float*)a.b2, member, mem + LENET_TEAM_FEATURES);
        if (!p_barrier(rt, team, LENET_TEAM, LENET_TEAM_WAIT_NS)) return;

        for (int i = threadIdx.x; i < LENET_FLAT / 4; i += blockDim.x)
            sm.u.features[i] = __ldcg((const float4*)(mem + LENET_TEAM_FEATURES) + i);
        __syncthreads();
        lenet_dense_rows<LENET_FLAT>(sm.u.features, (const float*)a.f1w, (const float*)a.f1b, r0, r1,
                                     true, mem + LENET_TEAM_HIDDEN);
        if (!p_barrier(rt, team, LENET_TEAM, LENET_TEAM_WAIT_NS)) return;

        if (member == 0) {
            for (int i = threadIdx.x; i < LENET_HIDDEN; i += blockDim.x)
                ((float*)sm.u.hidden)[i] = __ldcg(mem + LENET_TEAM_HIDDEN + i);
            __syncthreads();
            lenet_dense_rows<LENET_HIDDEN>(sm.u.hidden, (const float*)a.f2w, (const float*)a.f2b, 0,
                                           LENET_CLASSES, false, logits);
            lenet_answer(logits, answer);
            tx_reply(rt, s, answer, LENET_ANSWER_BYTES);
        }
    }
}

// Two blocks per SM, as the image plan's default.
extern "C" __global__ void __launch_bounds__(LENET_P_THREADS, 2)
lenet_p_team(PRt rt, SvcArgs a) {
    p_block_started(rt);
    __shared__ LenetTeamSmem sm;
    lenet_team<false>(rt, a, sm);
}

extern "C" __global__ void __launch_bounds__(LENET_P_THREADS, 2)
lenet_p_team_tc(PRt rt, SvcArgs a) {
    p_block_started(rt);
    __shared__ LenetTeamSmem sm;
    lenet_team<true>(rt, a, sm);
}
