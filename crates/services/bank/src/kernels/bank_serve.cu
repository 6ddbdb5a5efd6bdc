// The bank after parsing: sessions (one thread per request of a cohort), then pages (a group
// of threads per page: see bank_pages) - Rhythm's process and response stages. CPU twins:
// `Sessions` (bank/session.rs), `Besim` (bank/besim.rs) and `page::render` / `page::refusal`
// (bank/page.rs): the same records, the same fixed-width fields, the same bytes. Tables and
// sizes come from the generated prelude.

// The records, the writer and the page's parts come before this file: bank_records.cuh,
// bank_writer.cuh, bank_page.cuh.

// ---- records: which user's records each request reads, and where they are ----

// want[r]: the user whose records request r reads (0: none - refused by the parser, a type
// without backend calls, no cookie, or out of range; a cookie's user is only claimed here,
// bank_sessions checks it). rec_at[r]: that record's index in the GPU's record table (keys /
// vals: open addressing by mix64(user), built by the host), or BANK_REC_NONE; with no table
// (cap 0) the host fills rec_at from memcached.
struct BankFetchArgs {
    unsigned int n;
    const unsigned char* refusal;
    const unsigned char* kind;
    const unsigned char* has_cookie;
    const unsigned int* cookie_user;
    const unsigned long long* nums;
    unsigned int users;
    const unsigned int* table_keys;
    const unsigned int* table_vals;
    unsigned long long table_cap;
    unsigned int* want;
    unsigned int* rec_at;
};

extern "C" __global__ void bank_fetch(const BankFetchArgs a) {
    const unsigned int n = a.n;
    const unsigned char* refusal = a.refusal;
    const unsigned char* kind = a.kind;
    const unsigned char* has_cookie = a.has_cookie;
    const unsigned int* cookie_user = a.cookie_user;
    const unsigned long long* nums = a.nums;
    const unsigned int users = a.users;
    const unsigned int* table_keys = a.table_keys;
    const unsigned int* table_vals = a.table_vals;
    const unsigned long long table_cap = a.table_cap;
    unsigned int* want = a.want;
    unsigned int* rec_at = a.rec_at;

    unsigned int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n) return;
    unsigned int u = 0;
    if (!refusal[r] && BANK_KIND_RECORDS[kind[r]]) {
        if (kind[r] == BANK_K_Login) {
            u = nums[r] <= users ? (unsigned int)nums[r] : 0u;
        } else if (has_cookie[r] && cookie_user[r] <= users) {
            u = cookie_user[r];
        }
    }
    want[r] = u;
    unsigned int at = BANK_REC_NONE;
    if (u && table_cap) {
        unsigned long long h = mix64(u) & (table_cap - 1);
        for (unsigned long long p = 0; p < table_cap; p++) {
            unsigned long long s = (h + p) & (table_cap - 1);
            unsigned int k = table_keys[s];
            if (k == u) {
                at = table_vals[s];
                break;
            }
            if (k == 0) break;
        }
    }
    rec_at[r] = at;
}

// ---- sessions: an open-addressing table keyed by user (0 = empty); a slot, once a user's,
// stays theirs, with token 0 while logged out. live counts tokens != 0. ----

__device__ unsigned long long token_of(unsigned long long secret, unsigned int user, unsigned int n) {
    return mix64(secret ^ mix64(((unsigned long long)user << 32) | n));
}

// The slot of `user` (inserting it when `insert`), or -1.
__device__ long long slot_of(unsigned int* keys, unsigned long long cap, unsigned int user, bool insert) {
    unsigned long long h = mix64(user) & (cap - 1);
    for (unsigned long long p = 0; p < cap; p++) {
        unsigned long long s = (h + p) & (cap - 1);
        unsigned int k = keys[s];
        if (k == user) return (long long)s;
        if (k == 0) {
            if (!insert) return -1;
            unsigned int prev = atomicCAS(keys + s, 0u, user);
            if (prev == 0u || prev == user) return (long long)s;
        }
    }
    return -1;
}

// Resolves each parsed request's session. Outputs per request: status (0 ok or a refusal
// code), user, change (0 none, 1 opened, 2 closed), token (the opened cookie's).
struct BankSessionsArgs {
    unsigned int n;
    const unsigned char* refusal_in;
    const unsigned char* kind;
    const unsigned char* has_cookie;
    const unsigned int* cookie_user;
    const unsigned long long* cookie_token;
    const unsigned long long* nums;
    const unsigned char* recs;
    const unsigned int* rec_at;
    unsigned int users;
    unsigned long long secret;
    unsigned int* keys;
    unsigned long long* tokens;
    unsigned long long cap;
    unsigned int* logins;
    unsigned int* live;
    unsigned int max_live;
    unsigned char* status;
    unsigned int* user_out;
    unsigned char* change;
    unsigned long long* token_out;
};

extern "C" __global__ void bank_sessions(const BankSessionsArgs a) {
    const unsigned int n = a.n;
    const unsigned char* refusal_in = a.refusal_in;
    const unsigned char* kind = a.kind;
    const unsigned char* has_cookie = a.has_cookie;
    const unsigned int* cookie_user = a.cookie_user;
    const unsigned long long* cookie_token = a.cookie_token;
    const unsigned long long* nums = a.nums;
    const unsigned char* recs = a.recs;
    const unsigned int* rec_at = a.rec_at;
    const unsigned int users = a.users;
    const unsigned long long secret = a.secret;
    unsigned int* keys = a.keys;
    unsigned long long* tokens = a.tokens;
    const unsigned long long cap = a.cap;
    unsigned int* logins = a.logins;
    unsigned int* live = a.live;
    const unsigned int max_live = a.max_live;
    unsigned char* status = a.status;
    unsigned int* user_out = a.user_out;
    unsigned char* change = a.change;
    unsigned long long* token_out = a.token_out;

    unsigned int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n) return;
    change[r] = 0;
    user_out[r] = 0;
    token_out[r] = 0;
    if (refusal_in[r]) {
        status[r] = refusal_in[r];
        return;
    }
    int k = kind[r];
    if (k == BANK_K_Login) {
        unsigned long long u = nums[r], pw = nums[(size_t)n + r];
        if (u < 1 || u > users) {
            status[r] = BANK_REFUSE_BadLogin;
            return;
        }
        unsigned long long want_pw = password_of((unsigned int)u);
        if (recs) {
            if (rec_at[r] == BANK_REC_NONE) {
                status[r] = BANK_REFUSE_Unavailable;
                return;
            }
            want_pw = ld64(recs + (size_t)rec_at[r] * BANK_REC_BYTES, BANK_REC_PASSWORD);
        }
        if (want_pw != pw) {
            status[r] = BANK_REFUSE_BadLogin;
            return;
        }
        unsigned int user = (unsigned int)u;
        long long s = slot_of(keys, cap, user, true);
        if (s < 0) {
            status[r] = BANK_REFUSE_Full;
            return;
        }
        if (tokens[s] == 0) {
            // A new session: counted, within the bound.
            unsigned int before = atomicAdd(live, 1u);
            if (before >= max_live) {
                atomicSub(live, 1u);
                status[r] = BANK_REFUSE_Full;
                return;
            }
        }
        unsigned int nth = atomicAdd(logins + (user - 1), 1u) + 1u;
        unsigned long long t = token_of(secret, user, nth);
        tokens[s] = t;
        status[r] = 0;
        user_out[r] = user;
        change[r] = 1;
        token_out[r] = t;
        return;
    }
    if (!has_cookie[r]) {
        status[r] = BANK_REFUSE_NoSession;
        return;
    }
    unsigned int user = cookie_user[r];
    long long s = user == 0 ? -1 : slot_of(keys, cap, user, false);
    if (s < 0 || tokens[s] == 0 || tokens[s] != cookie_token[r]) {
        status[r] = BANK_REFUSE_NoSession;
        return;
    }
    if (k == BANK_K_Logout) {
        tokens[s] = 0;
        atomicSub(live, 1u);
        change[r] = 2;
    } else if (recs && BANK_KIND_RECORDS[k] && rec_at[r] == BANK_REC_NONE) {
        status[r] = BANK_REFUSE_Unavailable;
        return;
    }
    status[r] = 0;
    user_out[r] = user;
}

// Writes each request's response: its page, or its refusal page. lens[r] = its bytes.
// `lanes` threads (a power of two up to 32) write one page. Together, on one shared writer,
// they write the status line, the headers and the head (and all of a page without tables):
// each runs the same code, and the whole words of the literals are split among them. Then,
// for a page with tables, the group writes the content a round of `lanes` parts at a time,
// part i by thread i % lanes: each thread measures its part (the same writer, storing
// nothing; a literal measures by its known length), a scan over the group places the parts
// end to end, and each writes its part at its place. Table rows take the same code path, so
// the threads run them side by side; parts that differ would run one after another (a warp
// runs divergent paths in turn), which is why the header and the pages without tables are
// written on the shared writer instead. Small cohorts take 32 threads a page (a page's
// latency is its longest thread's), large ones fewer (the measuring doubles the table work,
// which only large cohorts notice): page_lanes.
struct BankPagesArgs {
    unsigned int n;
    const unsigned char* status;
    const unsigned char* kind;
    const unsigned int* user;
    const unsigned char* change;
    const unsigned long long* token;
    const unsigned long long* nums;
    const unsigned char* texts;
    const unsigned char* recs;
    const unsigned int* rec_at;
    unsigned char* out;
    unsigned int* lens;
    int transposed;
    unsigned int* pad;
    unsigned int lanes;
};

// An inclusive sum over the group's threads (lane: the thread's index in its group).
__device__ __forceinline__ int group_scan(int v, unsigned int lane, unsigned int lanes, unsigned int mask) {
    for (unsigned int d = 1; d < lanes; d <<= 1) {
        int u = __shfl_up_sync(mask, v, d, lanes);
        if (lane >= d) v += u;
    }
    return v;
}

// The kinds whose content is mostly table rows (their parts written side by side).
__device__ __forceinline__ bool content_in_parallel(int kind) {
    return kind == BANK_K_Login || kind == BANK_K_AccountSummary || kind == BANK_K_BillPay ||
           kind == BANK_K_BillPayStatus || kind == BANK_K_OrderCheck || kind == BANK_K_PostPayee ||
           kind == BANK_K_Transfer;
}

extern "C" __global__ void bank_pages(const BankPagesArgs a) {
    const unsigned int n = a.n, lanes = a.lanes;
    const bool tr = a.transposed != 0;
    unsigned long long t = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    // A group never straddles a warp: lanes divides 32, and blocks are whole warps.
    unsigned int r = (unsigned int)(t / lanes), lane = (unsigned int)(t % lanes);
    if (r >= n) return;
    unsigned int warp_lane = threadIdx.x & 31;
    unsigned int mask = lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1) << (warp_lane & ~(lanes - 1));

    Page g;
    g.status = a.status[r];
    g.kind = a.kind[r];
    g.change = a.change[r];
    g.user = a.user[r];
    g.token = a.token[r];
    g.d.user = g.user;
    // A type that reads no records may have none (never read then).
    g.d.rec = a.recs && a.rec_at[r] != BANK_REC_NONE ? a.recs + (size_t)a.rec_at[r] * BANK_REC_BYTES : 0;
    g.n0 = a.nums[r];
    g.n1 = a.nums[(size_t)n + r];
    g.n2 = a.nums[(size_t)2 * n + r];
    g.texts = a.texts;
    g.r = r;
    g.n = n;
    // Counted for every 200 page, as the CPU twin does (computed where there is no record).
    g.na = g.status ? 0 : n_accounts(g.d);
    g.np = g.status ? 0 : n_payees(g.d);
    const int parts = g.status ? 2 : 2 + content_parts(g);
    // Parts [0, serial) by the first thread, one after another; the rest by the group.
    const bool group = lanes > 1 && !g.status && content_in_parallel(g.kind);
    const int serial = group ? 2 : parts;

    // Parts [0, serial) by the whole group on one shared writer (the same positions in every
    // thread, the literals' words split among them).
    Out o = write_parts(shared_writer(a.out, r, n, tr, 0, (int)lane, (int)lanes), g, 0, 1);
    const int body_at = o.pos;
    o = write_parts(o, g, 1, serial);
    flush(o);
    int at = o.pos;
    if (group) {
#pragma unroll 1
        for (int first = serial; first < parts; first += (int)lanes) {
            const int p = first + (int)lane;
            const int to = p < parts ? p + 1 : p;
            const int len = write_parts(writer(0, r, n, tr, 0), g, p, to).pos;
            const int incl = group_scan(len, lane, lanes, mask);
            Out o = write_parts(writer(a.out, r, n, tr, at + incl - len), g, p, to);
            flush(o);
            at += __shfl_sync(mask, incl, lanes - 1, lanes);
        }
    }
    // Every word is stored before the tail's first word (shared with the last part) and the
    // length's digits (in a header word another thread may have stored).
    __syncwarp(mask);
    o = shared_writer(a.out, r, n, tr, at, (int)lane, (int)lanes);
    const int len = finish(o, body_at, (int)(g.status ? BANK_REFUSAL_PAGE : BANK_KIND_PAGE[g.kind]), a.pad);
    if (lane == 0) a.lens[r] = len;
}

// Spaces in the words [from, to) of every response (pad[r]: from | to << 16), `lanes`
// threads per response: transposed, the threads of a warp are 32 responses at the same word
// index (one 128-byte store); row-major, a warp is one response's 32 consecutive words.
struct BankPadArgs {
    unsigned int n;
    const unsigned int* pad;
    unsigned char* out;
    int transposed;
    unsigned int lanes;
};

extern "C" __global__ void bank_pad(const BankPadArgs a) {
    const unsigned int n = a.n;
    const unsigned int* pad = a.pad;
    unsigned char* out = a.out;
    const int transposed = a.transposed;
    const unsigned int lanes = a.lanes;

    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (unsigned long long)n * lanes) return;
    unsigned int r, lane;
    if (transposed) {
        r = (unsigned int)(i % n);
        lane = (unsigned int)(i / n);
    } else {
        r = (unsigned int)(i / lanes);
        lane = (unsigned int)(i % lanes);
    }
    unsigned int p = pad[r], from = p & 0xffffu, to = p >> 16;
    for (unsigned int w = lane; w < to; w += lanes) {
        if (w < from) continue;
        size_t at = transposed ? ((size_t)w * n + r) * 4 : (size_t)r * BANK_RESP_SLOT + (size_t)w * 4;
        *(unsigned int*)(out + at) = 0x20202020u;
    }
}

