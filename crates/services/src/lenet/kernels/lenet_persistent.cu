// LeNet on the persistent engine (Lynx's persistent LeNet): the ingress warp checks the
// request's size and queues its slot on pipes[0]; each worker block takes one image at a
// time and runs the whole network on it (lenet_net.cuh: the convolutions in shared memory,
// conv2 on the CUDA cores in lenet_p_worker or the tensor cores in lenet_p_worker_tc, then
// the dense layers a warp per output), then writes the 41-byte answer into TX. No launch
// per request. CPU twin: model::forward (crates/services/src/lenet/model.rs).

struct SvcArgs {
    unsigned long long w1;   // conv1.weight [C1][1][K][K]
    unsigned long long b1;   // conv1.bias
    unsigned long long w2;   // conv2.weight [C2][C1][K][K]
    unsigned long long b2;   // conv2.bias
    unsigned long long f1w;  // fc1.weight [HIDDEN][FLAT]
    unsigned long long f1b;  // fc1.bias
    unsigned long long f2w;  // fc2.weight [CLASSES][HIDDEN]
    unsigned long long f2b;  // fc2.bias
};

__device__ bool service_accept(const PRt& rt, const SvcArgs& a, unsigned int s) {
    if (p_slot(rt, s)->h.len != LENET_PIXELS) {
        tx_error(rt, s, P_ERR_BAD_REQUEST, "lenet takes one 28x28 8-bit image: 784 bytes");
        return false;
    }
    return true;
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
    __shared__ unsigned char answer[1 + 4 * LENET_CLASSES];
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
            if (threadIdx.x == 0) {
                // The digit: the largest logit, the smaller digit on a tie (model::argmax).
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
            tx_reply(rt, s, answer, 1 + 4 * LENET_CLASSES);
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
