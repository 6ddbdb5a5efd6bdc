// The bank's response writer (bank_serve.cu's unit, after bank_records.cuh): the bytes of a
// response, row-major or transposed by words, and the page's fixed-width fields. CPU twin:
// `page::render` (bank/page.rs).

// ---- the response writer: byte i of response r, row-major or transposed by words ----

// A page is written in parts (the header, the head, a table row, ...), each by one thread of
// the page's group; a part starts where the parts before it end, so the word holding its
// first byte may be shared with the part before (another thread's). Whole words are stored
// whole; a shared word's bytes one by one, only those the part owns (byte stores to distinct
// bytes of a word do not clobber each other).
//
// A writer is either one thread's (a part of a page, `lanes` 1) or a group's (the parts one
// thread wrote while the others waited: the header, the head, pages without tables): every
// thread of the group runs the same writer with the same positions, and the whole words of a
// literal are split among them (lane, lane + lanes, ...); the rest every thread stores alike
// (the same value to the same address). Literals are most of a page's bytes.
struct Out {
    // Null while measuring a part: positions advance, nothing is stored.
    unsigned char* base;
    unsigned int r, n;
    bool tr;
    int pos;
    // The first byte this writer owns.
    int lo;
    // The word being written (bytes not yet put are spaces): stored whole when full, so a
    // warp's threads store whole words side by side instead of single bytes.
    unsigned int acc;
    // This thread's place in the group that shares the writer (0 of 1: a thread's own).
    int lane, lanes;
};

__device__ __forceinline__ Out writer(unsigned char* base, unsigned int r, unsigned int n, bool tr, int at) {
    Out o;
    o.base = base;
    o.r = r;
    o.n = n;
    o.tr = tr;
    o.pos = at;
    // A measuring writer owns no byte.
    o.lo = base ? at : 0x7fffffff;
    o.acc = 0x20202020u;
    o.lane = 0;
    o.lanes = 1;
    return o;
}

// The writer shared by a group of `lanes` threads (this one is `lane`).
__device__ __forceinline__ Out shared_writer(unsigned char* base, unsigned int r, unsigned int n, bool tr,
                                             int at, int lane, int lanes) {
    Out o = writer(base, r, n, tr, at);
    o.lane = lane;
    o.lanes = lanes;
    return o;
}

__device__ __forceinline__ size_t out_at(const Out& o, int i) {
    if (o.tr) return ((size_t)(i >> 2) * o.n + o.r) * 4 + (i & 3);
    return (size_t)o.r * BANK_RESP_SLOT + i;
}
// Bytes [from, to) of a word (a word's bytes are contiguous in both layouts): a word the
// writer shares with the part before or after it (twice a part at most).
__device__ __forceinline__ void store_bytes(unsigned char* word, unsigned int acc, int from, int to) {
    for (int i = from; i < to; i++) word[i] = (unsigned char)(acc >> (i * 8));
}
// Stores the word at byte w up to byte `end` (exclusive, at most w + 4): whole when the writer
// owns all four bytes, else the bytes it owns. A measuring writer owns nothing (lo past every
// position) and has no base: it stores nothing. The whole-word test comes first and alone:
// a put costs one compare more than when a page was always one thread's.
__device__ __forceinline__ void store_word(Out& o, int w, int end) {
    if (w >= o.lo && end == w + 4) {
        *(unsigned int*)(o.base + out_at(o, w)) = o.acc;
    } else if (o.base) {
        store_bytes(o.base + out_at(o, w), o.acc, (w < o.lo ? o.lo : w) - w, end - w);
    }
}
// The end of a part: its last, partial word's bytes (the next part owns the rest).
__device__ __forceinline__ void flush(Out& o) {
    if (o.pos & 3) {
        store_word(o, o.pos & ~3, o.pos);
        o.acc = 0x20202020u;
    }
}
__device__ __forceinline__ void put(Out& o, unsigned char c) {
    int sh = (o.pos & 3) * 8;
    o.acc = (o.acc & ~(0xffu << sh)) | ((unsigned int)c << sh);
    if ((o.pos & 3) == 3) {
        store_word(o, o.pos - 3, o.pos + 1);
        o.acc = 0x20202020u;
    }
    o.pos++;
}
// `len` bytes: measured by their count; written up to a word boundary byte by byte, then a
// word at a time (the group's threads taking every lanes-th word), the rest byte by byte. A
// whole word at or after the writer's start is its own (see store_word). `bytes` null: spaces.
// Out of line, the writer passed and returned by value (in registers, as write_parts): inlined
// at every literal, it doubled the unit's PTX and NVRTC's time. Kept loops, not unrolled:
// unrolled, every literal of every page type became straight-line code (about 40% more PTX)
// and the sustained mix ran 13% slower on the H200 (52.8 vs 46.0 M requests/s: fewer
// instruction-cache misses outweigh the loads).
__device__ __noinline__ Out put_run(Out o, const unsigned char* bytes, int len) {
    if (!o.base) {
        o.pos += len;
        return o;
    }
    int i = 0;
#pragma unroll 1
    for (; (o.pos & 3) && i < len; i++) put(o, bytes ? bytes[i] : ' ');
    const int words = (len - i) >> 2;
#pragma unroll 1
    for (int w = o.lane; w < words; w += o.lanes) {
        unsigned int v = 0x20202020u;
        if (bytes) {
            const unsigned char* b = bytes + i + 4 * w;
            v = (unsigned int)b[0] | (unsigned int)b[1] << 8 | (unsigned int)b[2] << 16 |
                (unsigned int)b[3] << 24;
        }
        *(unsigned int*)(o.base + out_at(o, o.pos + 4 * w)) = v;
    }
    o.pos += 4 * words;
    i += 4 * words;
#pragma unroll 1
    for (; i < len; i++) put(o, bytes ? bytes[i] : ' ');
    return o;
}
// A string literal: its length is known where it is written (measuring it costs nothing).
template <int N>
__device__ __forceinline__ void lit(Out& o, const char (&s)[N]) {
    if (o.base) {
        o = put_run(o, (const unsigned char*)s, N - 1);
    } else {
        o.pos += N - 1;
    }
}
// A string known only at run time (a parameter): its length counted first.
__device__ __forceinline__ void lit_str(Out& o, const char* s) {
    int len = 0;
    while (s[len]) len++;
    o = put_run(o, (const unsigned char*)s, len);
}
__device__ __forceinline__ void entry(Out& o, const unsigned char* bytes, const unsigned short* off, int e) {
    o = put_run(o, bytes + off[e], off[e + 1] - off[e]);
}
__device__ __forceinline__ void spaces(Out& o, int k) {
    o = put_run(o, 0, k);
}
// Skips to position `to`, leaving the whole words in between to `bank_pad` (the bulk of every
// page, written by every thread of the GPU at once); the partial words at both ends are
// spaces here. Records the words to pad.
__device__ void skip_to(Out& o, int to, unsigned int* pad) {
    if (to - o.pos < 8) {
        // A few bytes: written here (no whole word between the content and the tail).
        while (o.pos < to) put(o, ' ');
        pad[o.r] = 0;
        return;
    }
    // The word in progress ends in spaces (stored as it fills).
    while (o.pos & 3) put(o, ' ');
    int from_word = o.pos >> 2;
    // The word holding `to` is stored whole when it fills: its bytes before `to` stay spaces.
    o.pos = to;
    int to_word = to >> 2;
    pad[o.r] = (unsigned int)from_word | ((unsigned int)(to_word > from_word ? to_word : from_word) << 16);
}
// The digits of v, right-aligned in `width`. The digits are kept as two stacks of nibbles in
// registers (the least significant 16 in `lo`, the rest in `hi`) rather than an array, which
// would live in local memory.
__device__ void num(Out& o, unsigned long long v, int width) {
    if (!o.base) {
        // Measuring: the digits' count only.
        int k = 1;
        for (unsigned long long p = 10; k < 20 && v >= p; p *= 10) k++;
        o.pos += width > k ? width : k;
        return;
    }
    unsigned long long lo = 0, hi = 0;
    int k = 0;
    do {
        unsigned long long digit = v % 10;
        if (k < 16) {
            lo = (lo << 4) | digit;
        } else {
            hi = (hi << 4) | digit;
        }
        k++;
        v /= 10;
    } while (v);
    if (width > k) spaces(o, width - k);
    // Most significant first: the last pushed, hi's before lo's.
    for (int i = k; i > 16; i--) {
        put(o, '0' + (unsigned char)(hi & 15));
        hi >>= 4;
    }
    for (int i = k < 16 ? k : 16; i > 0; i--) {
        put(o, '0' + (unsigned char)(lo & 15));
        lo >>= 4;
    }
}
__device__ void money(Out& o, long long cents) {
    unsigned long long a = cents < 0 ? (unsigned long long)(-cents) : (unsigned long long)cents;
    unsigned long long whole = a / 100;
    int digits = 0;
    unsigned long long w = whole < 1 ? 1 : whole;
    while (w) {
        digits++;
        w /= 10;
    }
    int used = digits + 3 + (cents < 0 ? 1 : 0);
    if (used < 12) spaces(o, 12 - used);
    if (cents < 0) put(o, '-');
    num(o, whole, 0);
    put(o, '.');
    num(o, a % 100 / 10, 0);
    num(o, a % 10, 0);
}
__device__ void date(Out& o, unsigned int d) {
    num(o, d / 10000, 4);
    put(o, '-');
    num(o, d / 1000 % 10, 0);
    num(o, d / 100 % 10, 0);
    put(o, '-');
    num(o, d / 10 % 10, 0);
    num(o, d % 10, 0);
}
__device__ __forceinline__ void name(Out& o, const unsigned char* b) {
    o = put_run(o, b, BANK_NAME);
}
// Entry e of a table as a BANK_NAME-wide field: cut to the width, padded with spaces (as
// name_entry into a Name, without the buffer in local memory).
__device__ __forceinline__ void name_of(Out& o, const unsigned char* bytes, const unsigned short* off, int e) {
    int from = off[e], len = off[e + 1] - from;
    if (len > BANK_NAME) len = BANK_NAME;
    o = put_run(o, bytes + from, len);
    spaces(o, BANK_NAME - len);
}
__device__ void td(Out& o) { lit(o, "</td><td>"); }

// The status line and headers. change: 0 none, 1 opened (cookie user-token), 2 closed.
__device__ void header(Out& o, int status, int reason, int change, unsigned int user,
                       unsigned long long token) {
    lit(o, "HTTP/1.1 ");
    num(o, status, 3);
    put(o, ' ');
    entry(o, BANK_REASON_BYTES, BANK_REASON_OFF, reason);
    lit(o, "\r\nContent-Type: text/html; charset=utf-8\r\nCache-Control: no-store\r\n");
    if (change == 1) {
        lit(o, "Set-Cookie: SID=");
        num(o, user, 0);
        put(o, '-');
        for (int i = 15; i >= 0; i--) put(o, "0123456789abcdef"[(token >> (4 * i)) & 15]);
        lit(o, "; Path=/bank/; HttpOnly\r\n");
    } else if (change == 2) {
        lit(o, "Set-Cookie: SID=; Path=/bank/; Max-Age=0\r\n");
    }
    lit(o, "Content-Length: ");
    spaces(o, BANK_LENGTH_FIELD);
    lit(o, "\r\n\r\n");
}

// Pads the body to `size` (through `bank_pad`), closes it, fills Content-Length; returns
// the response length.
__device__ int finish(Out& o, int body_at, int size, unsigned int* pad) {
    int tail = BANK_TAIL_OFF[1];
    skip_to(o, body_at + size - tail, pad);
    entry(o, BANK_TAIL_BYTES, BANK_TAIL_OFF, 0);
    // The last word whole: spaces after the page, as before the pages were split in parts.
    if (o.pos & 3) store_word(o, o.pos & ~3, (o.pos & ~3) + 4);
    int field = body_at - 4 - BANK_LENGTH_FIELD;
    int v = size;
    for (int i = BANK_LENGTH_FIELD - 1; i >= 0; i--) {
        o.base[out_at(o, field + i)] = '0' + v % 10;
        v /= 10;
        if (v == 0) break;
    }
    return o.pos;
}

__device__ void head(Out& o, int kind) {
    lit(o, "<!DOCTYPE html>\n<html><head><title>Cohort Bank - ");
    entry(o, BANK_KIND_NAME_BYTES, BANK_KIND_NAME_OFF, kind);
    lit(o, "</title></head>\n<body><div class=\"nav\"><a href=\"/bank/account_summary\">Accounts</a> | <a href=\"/bank/bill_pay\">Bill Pay</a> | <a href=\"/bank/transfer\">Transfer</a> | <a href=\"/bank/order_check\">Checks</a> | <a href=\"/bank/profile\">Profile</a> | <a href=\"/bank/logout\">Log out</a></div>\n<h1>");
    entry(o, BANK_KIND_NAME_BYTES, BANK_KIND_NAME_OFF, kind);
    lit(o, "</h1>\n");
}
