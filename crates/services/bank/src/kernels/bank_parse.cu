// The bank's HTTP/1.1 parser: a group of `lanes` threads per request of a cohort (Rhythm's
// parse stage; one thread a request in large cohorts, a warp in small ones, where a request's
// latency is the cohort's). The group walks the request together - every thread takes the
// same branches - and the scans (for a byte, a line's end, a literal) test `lanes` bytes a
// step with a ballot; the first thread stores the results.
// CPU twin: `bank::parse::parse` (crates/services/src/bank/parse.rs), step for step: the same
// checks in the same order give the same refusal. The constants and the tables of paths and
// parameter names come from the generated prelude (bank/cuda.rs).
//
// Requests: request r has lens[r] bytes in its slot of BANK_MAX_REQUEST bytes, either
// row-major (byte i at r * BANK_MAX_REQUEST + i) or transposed by 4-byte words (word w of
// every request side by side: byte i at ((i / 4) * n + r) * 4 + i % 4), so that the threads
// of a warp reading their i-th words read one contiguous run.
// Outputs (structure of arrays, entry r of each): refusal (0 = parsed), kind, has_cookie,
// cookie_user, cookie_token, nums[i * n + r], texts[(t * BANK_NAME + j) * n + r].

struct Req {
    const unsigned char* base;
    unsigned int r, n;
    int len;
    bool tr;
    // This thread's place in the request's group, the group's threads in the warp (mask) and
    // its first lane there (shift).
    int lane, lanes;
    unsigned int mask, shift;
};

// The group's threads whose `pred` holds, as bits from the group's first thread.
__device__ __forceinline__ unsigned int group_ballot(const Req& q, bool pred) {
    unsigned int b = __ballot_sync(q.mask, pred) >> q.shift;
    return q.lanes == 32 ? b : b & ((1u << q.lanes) - 1);
}

__device__ __forceinline__ unsigned char at(const Req& q, int i) {
    if (q.tr) return q.base[((size_t)(i >> 2) * q.n + q.r) * 4 + (i & 3)];
    return q.base[(size_t)q.r * BANK_MAX_REQUEST + i];
}

// First i in [from, to) where hit(i), or -1: `lanes` positions a step, one a thread.
template <class Hit>
__device__ __forceinline__ int find_first(const Req& q, int from, int to, Hit hit) {
#pragma unroll 1
    for (int i0 = from; i0 < to; i0 += q.lanes) {
        const int i = i0 + q.lane;
        const unsigned int b = group_ballot(q, i < to && hit(i));
        if (b) return i0 + __ffs(b) - 1;
    }
    return -1;
}

// First c in [from, to), or -1.
__device__ int find_c(const Req& q, int from, int to, unsigned char c) {
    return find_first(q, from, to, [&](int i) { return at(q, i) == c; });
}

// First "\r\n" starting in [from, len - 1), or -1.
__device__ int find_crlf(const Req& q, int from) {
    return find_first(q, from, q.len - 1, [&](int i) { return at(q, i) == '\r' && at(q, i + 1) == '\n'; });
}

// [a, b) without leading and trailing spaces and tabs.
__device__ void trim(const Req& q, int* a, int* b) {
    while (*a < *b && (at(q, *a) == ' ' || at(q, *a) == '\t')) (*a)++;
    while (*b > *a && (at(q, *b - 1) == ' ' || at(q, *b - 1) == '\t')) (*b)--;
}

// A decimal of 1..18 digits in [a, b).
__device__ bool digits(const Req& q, int a, int b, unsigned long long* out) {
    if (b <= a || b - a > 18) return false;
    unsigned long long v = 0;
    for (int i = a; i < b; i++) {
        unsigned char c = at(q, i);
        if (c < '0' || c > '9') return false;
        v = v * 10 + (c - '0');
    }
    *out = v;
    return true;
}

__device__ int hexval(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// [a, b) equals the l bytes at s (case-insensitively when fold: s is lower case).
__device__ bool equals_bytes(const Req& q, int a, int b, const unsigned char* s, int l, bool fold) {
    if (b - a != l) return false;
    return find_first(q, 0, l, [&](int i) {
               unsigned char c = at(q, a + i);
               if (fold && c >= 'A' && c <= 'Z') c += 32;
               return c != s[i];
           }) < 0;
}

// [a, b) equals table entry e (case-insensitively when fold).
__device__ bool equals(const Req& q, int a, int b, const unsigned char* bytes,
                       const unsigned short* off, int e, bool fold) {
    return equals_bytes(q, a, b, bytes + off[e], off[e + 1] - off[e], fold);
}

// [a, b) equals the literal s (case-insensitively: s is lower case).
template <int N>
__device__ __forceinline__ bool is_lit(const Req& q, int a, int b, const char (&s)[N], bool fold) {
    return equals_bytes(q, a, b, (const unsigned char*)s, N - 1, fold);
}

// A form value: '+' is a space, %XX a byte; printable ASCII without <>&", 1..NAME bytes.
__device__ bool decode_text(const Req& q, int a, int b, unsigned char* out /* NAME, strided */,
                            unsigned int stride) {
    // The first thread of the group stores; every thread walks the same bytes.
    const bool store = q.lane == 0;
    int n = 0;
    if (store)
        for (int j = 0; j < BANK_NAME; j++) out[(size_t)j * stride] = ' ';
    int i = a;
    while (i < b) {
        unsigned char c = at(q, i);
        if (c == '+') {
            c = ' ';
        } else if (c == '%') {
            if (i + 2 >= b) return false;
            int h = hexval(at(q, i + 1)), l = hexval(at(q, i + 2));
            if (h < 0 || l < 0) return false;
            c = (unsigned char)(h << 4 | l);
            i += 2;
        }
        i++;
        if (c < ' ' || c > '~' || c == '<' || c == '>' || c == '&' || c == '"' || n == BANK_NAME)
            return false;
        if (store) out[(size_t)n * stride] = c;
        n++;
    }
    return n > 0;
}

// SID=<user>-<16 hex> among the cookie pairs in [a, b): 1 found, 0 none (or malformed).
__device__ int session_cookie(const Req& q, int a, int b, unsigned int* user,
                              unsigned long long* token) {
    int p = a;
    while (p <= b) {
        int e = find_c(q, p, b, ';');
        if (e < 0) e = b;
        int s = p, t = e;
        trim(q, &s, &t);
        if (t - s >= 4 && at(q, s) == 'S' && at(q, s + 1) == 'I' && at(q, s + 2) == 'D' &&
            at(q, s + 3) == '=') {
            int v = s + 4;
            int dash = find_c(q, v, t, '-');
            if (dash < 0) return 0;
            unsigned long long u;
            if (!digits(q, v, dash, &u) || u > 0xffffffffull) return 0;
            if (t - (dash + 1) != 16) return 0;
            unsigned long long tok = 0;
            for (int i = dash + 1; i < t; i++) {
                int h = hexval(at(q, i));
                if (h < 0) return 0;
                tok = tok << 4 | (unsigned long long)h;
            }
            *user = (unsigned int)u;
            *token = tok;
            return 1;
        }
        p = e + 1;
    }
    return 0;
}

// Parses request r; returns 0 or the refusal code. Fills the outputs on success.
__device__ int parse_one(const Req& q, unsigned char* kind_out, unsigned char* has_cookie,
                         unsigned int* cookie_user, unsigned long long* cookie_token,
                         unsigned long long* nums, unsigned char* texts) {
    const unsigned int r = q.r, n = q.n;
    if (q.len > BANK_MAX_REQUEST) return BANK_REFUSE_TooLarge;
    int le = find_crlf(q, 0);
    if (le < 0) return BANK_REFUSE_Malformed;
    int sp1 = find_c(q, 0, le, ' ');
    if (sp1 < 0) return BANK_REFUSE_Malformed;
    int sp2 = find_c(q, sp1 + 1, le, ' ');
    if (sp2 < 0) return BANK_REFUSE_Malformed;
    if (!is_lit(q, sp2 + 1, le, "HTTP/1.1", false) && !is_lit(q, sp2 + 1, le, "HTTP/1.0", false))
        return BANK_REFUSE_Malformed;
    int post;
    if (is_lit(q, 0, sp1, "GET", false)) {
        post = 0;
    } else if (is_lit(q, 0, sp1, "POST", false)) {
        post = 1;
    } else {
        if (sp1 == 0) return BANK_REFUSE_Malformed;
        for (int i = 0; i < sp1; i++) {
            unsigned char c = at(q, i);
            if (c < 'A' || c > 'Z') return BANK_REFUSE_Malformed;
        }
        return BANK_REFUSE_WrongMethod;
    }
    int qm = find_c(q, sp1 + 1, sp2, '?');
    int path_end = qm < 0 ? sp2 : qm;
    int query_a = qm < 0 ? sp2 : qm + 1, query_b = sp2;
    if (path_end <= sp1 + 1 || at(q, sp1 + 1) != '/') return BANK_REFUSE_Malformed;
    // The path: the prefix, then a kind's name.
    int pa = sp1 + 1;
    int plen = BANK_PREFIX_OFF[1];
    int kind = -1;
    if (path_end - pa >= plen && equals(q, pa, pa + plen, BANK_PREFIX_BYTES, BANK_PREFIX_OFF, 0, false)) {
        for (int k = 0; k < BANK_KINDS && kind < 0; k++)
            if (equals(q, pa + plen, path_end, BANK_KIND_NAME_BYTES, BANK_KIND_NAME_OFF, k, false))
                kind = k;
    }
    if (kind < 0) return BANK_REFUSE_NotFound;
    if (BANK_KIND_POST[kind] != post) return BANK_REFUSE_WrongMethod;
    // Headers.
    int pos = le + 2;
    long long content_length = -1;
    int cookie = 0;
    unsigned int cu = 0;
    unsigned long long ct = 0;
    for (;;) {
        int he = find_crlf(q, pos);
        if (he < 0) return BANK_REFUSE_Malformed;
        if (he == pos) {
            pos += 2;
            break;
        }
        int colon = find_c(q, pos, he, ':');
        if (colon < 0) return BANK_REFUSE_Malformed;
        if (colon == pos) return BANK_REFUSE_Malformed;
        if (find_first(q, pos, colon, [&](int i) { return at(q, i) == ' ' || at(q, i) == '\t'; }) >= 0)
            return BANK_REFUSE_Malformed;
        int va = colon + 1, vb = he;
        trim(q, &va, &vb);
        if (is_lit(q, pos, colon, "content-length", true)) {
            if (content_length >= 0) return BANK_REFUSE_Malformed;
            unsigned long long v;
            if (!digits(q, va, vb, &v)) return BANK_REFUSE_Malformed;
            if (v > BANK_MAX_BODY) return BANK_REFUSE_TooLarge;
            content_length = (long long)v;
        } else if (is_lit(q, pos, colon, "transfer-encoding", true)) {
            return BANK_REFUSE_Malformed;
        } else if (is_lit(q, pos, colon, "cookie", true)) {
            if (!cookie) cookie = session_cookie(q, va, vb, &cu, &ct);
        }
        pos = he + 2;
    }
    if (q.len - pos != (content_length < 0 ? 0 : content_length)) return BANK_REFUSE_Malformed;
    int fa = post ? pos : query_a, fb = post ? q.len : query_b;
    // Parameters (the group's first thread stores them).
    const bool store = q.lane == 0;
    if (store) {
        for (int i = 0; i < BANK_NUMS; i++) nums[(size_t)i * n + r] = 0;
        for (int j = 0; j < BANK_TEXTS * BANK_NAME; j++) texts[(size_t)j * n + r] = ' ';
    }
    unsigned int seen = 0;
    int p = fa;
    while (p < fb) {
        int e = find_c(q, p, fb, '&');
        if (e < 0) e = fb;
        if (e > p) {
            int eq = find_c(q, p, e, '=');
            if (eq < 0) return BANK_REFUSE_Malformed;
            int matched = 0;
            for (int i = 0; i < BANK_NUMS && !matched; i++) {
                int ent = kind * BANK_NUMS + i;
                if (BANK_NUM_PARAM_OFF[ent + 1] == BANK_NUM_PARAM_OFF[ent]) continue;
                if (equals(q, p, eq, BANK_NUM_PARAM_BYTES, BANK_NUM_PARAM_OFF, ent, false)) {
                    unsigned long long v;
                    if (!digits(q, eq + 1, e, &v)) return BANK_REFUSE_Malformed;
                    if (store) nums[(size_t)i * n + r] = v;
                    seen |= 1u << i;
                    matched = 1;
                }
            }
            for (int i = 0; i < BANK_TEXTS && !matched; i++) {
                int ent = kind * BANK_TEXTS + i;
                if (BANK_TEXT_PARAM_OFF[ent + 1] == BANK_TEXT_PARAM_OFF[ent]) continue;
                if (equals(q, p, eq, BANK_TEXT_PARAM_BYTES, BANK_TEXT_PARAM_OFF, ent, false)) {
                    if (!decode_text(q, eq + 1, e, texts + (size_t)i * BANK_NAME * n + r, n))
                        return BANK_REFUSE_Malformed;
                    seen |= 1u << (BANK_NUMS + i);
                    matched = 1;
                }
            }
        }
        p = e + 1;
    }
    unsigned int want = 0;
    for (int i = 0; i < BANK_NUMS; i++) {
        int ent = kind * BANK_NUMS + i;
        if (BANK_NUM_PARAM_OFF[ent + 1] != BANK_NUM_PARAM_OFF[ent]) want |= 1u << i;
    }
    for (int i = 0; i < BANK_TEXTS; i++) {
        int ent = kind * BANK_TEXTS + i;
        if (BANK_TEXT_PARAM_OFF[ent + 1] != BANK_TEXT_PARAM_OFF[ent]) want |= 1u << (BANK_NUMS + i);
    }
    if (seen != want) return BANK_REFUSE_Malformed;
    if (store) {
        *kind_out = (unsigned char)kind;
        *has_cookie = (unsigned char)cookie;
        *cookie_user = cu;
        *cookie_token = ct;
    }
    return 0;
}

struct BankParseArgs {
    const unsigned char* reqs;
    const unsigned int* lens;
    unsigned int n;
    int transposed;
    unsigned char* refusal;
    unsigned char* kind;
    unsigned char* has_cookie;
    unsigned int* cookie_user;
    unsigned long long* cookie_token;
    unsigned long long* nums;
    unsigned char* texts;
    unsigned int lanes;
};

extern "C" __global__ void bank_parse(const BankParseArgs a) {
    const unsigned char* reqs = a.reqs;
    const unsigned int* lens = a.lens;
    const unsigned int n = a.n;
    const int transposed = a.transposed;
    unsigned char* refusal = a.refusal;
    unsigned char* kind = a.kind;
    unsigned char* has_cookie = a.has_cookie;
    unsigned int* cookie_user = a.cookie_user;
    unsigned long long* cookie_token = a.cookie_token;
    unsigned long long* nums = a.nums;
    unsigned char* texts = a.texts;
    const unsigned int lanes = a.lanes;

    // A group never straddles a warp: lanes divides 32, and blocks are whole warps.
    unsigned long long t = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int r = (unsigned int)(t / lanes);
    if (r >= n) return;
    Req q;
    q.lane = (int)(t % lanes);
    q.lanes = (int)lanes;
    q.shift = (threadIdx.x & 31) & ~(lanes - 1);
    q.mask = lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1) << q.shift;
    q.base = reqs;
    q.r = r;
    q.n = n;
    q.len = (int)lens[r];
    q.tr = transposed != 0;
    // A request over the slot is refused before any byte is read (the slot holds only
    // BANK_MAX_REQUEST of them).
    int code = parse_one(q, kind + r, has_cookie + r, cookie_user + r, cookie_token + r, nums,
                         texts);
    if (q.lane == 0) refusal[r] = (unsigned char)code;
}
