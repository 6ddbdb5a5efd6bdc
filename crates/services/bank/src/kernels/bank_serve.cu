// The bank after parsing: sessions (one thread per request of a cohort), then pages (a group
// of threads per page: see bank_pages) - Rhythm's process and response stages. CPU twins:
// `Sessions` (bank/session.rs), `Besim` (bank/besim.rs) and `page::render` / `page::refusal`
// (bank/page.rs): the same records, the same fixed-width fields, the same bytes. Tables and
// sizes come from the generated prelude.

// ---- backend records (Besim) ----

__device__ __forceinline__ unsigned long long mix64(unsigned long long x) {
    unsigned long long z = x + 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

__device__ __forceinline__ unsigned long long word(unsigned int user, unsigned long long salt,
                                                   unsigned long long i) {
    return mix64(mix64(((unsigned long long)user << 16) ^ salt) ^ i);
}

struct Name {
    unsigned char b[BANK_NAME];
    int len;
};

__device__ void name_init(Name& n) {
    for (int i = 0; i < BANK_NAME; i++) n.b[i] = ' ';
    n.len = 0;
}
__device__ void name_push(Name& n, unsigned char c) {
    if (n.len < BANK_NAME) n.b[n.len] = c;
    n.len++;
}
__device__ void name_entry(Name& n, const unsigned char* bytes, const unsigned short* off, int e) {
    for (int i = off[e]; i < off[e + 1]; i++) name_push(n, bytes[i]);
}
__device__ void name_num(Name& n, unsigned long long v) {
    unsigned char d[20];
    int k = 0;
    do {
        d[k++] = '0' + (unsigned char)(v % 10);
        v /= 10;
    } while (v);
    while (k) name_push(n, d[--k]);
}
__device__ void name_lit(Name& n, const char* s) {
    while (*s) name_push(n, (unsigned char)*s++);
}

__device__ unsigned int date_of(unsigned long long day) {
    unsigned long long d = day % 336;
    return 20260000u + (unsigned int)((d / 28 + 1) * 100 + d % 28 + 1);
}

// ---- where a request's records come from: computed from the user id (rec null), or read
// from a stored record (bank/record.rs's layout: the GPU's table, or staged from memcached) --

struct Src {
    unsigned int user;
    const unsigned char* rec;
};

__device__ __forceinline__ unsigned long long ld64(const unsigned char* p, int at) {
    return *(const unsigned long long*)(p + at);
}
__device__ __forceinline__ unsigned int ld32(const unsigned char* p, int at) {
    return *(const unsigned int*)(p + at);
}
__device__ __forceinline__ unsigned int ld16(const unsigned char* p, int at) {
    return *(const unsigned short*)(p + at);
}

__device__ unsigned long long password_of(unsigned int user) {
    return word(user, 1, 0) % 100000000ull;
}

__device__ int n_accounts(const Src& d) {
    if (d.rec) return (int)ld32(d.rec, BANK_REC_N_ACCOUNTS);
    return 1 + (int)(word(d.user, 3, 0) % BANK_MAX_ACCOUNTS);
}

struct Account {
    unsigned long long number;
    int kind;
    long long balance;
};

__device__ Account account(const Src& d, int i) {
    Account a;
    if (d.rec) {
        const unsigned char* p = d.rec + BANK_REC_ACCOUNTS + i * BANK_REC_ACCOUNT;
        a.number = ld64(p, BANK_REC_ACCOUNT_NUMBER);
        a.balance = (long long)ld64(p, BANK_REC_ACCOUNT_BALANCE);
        a.kind = (int)ld32(p, BANK_REC_ACCOUNT_KIND);
        return a;
    }
    unsigned long long w0 = word(d.user, 4 + i, 0), w1 = word(d.user, 4 + i, 1);
    a.kind = (int)(w0 % 4);
    unsigned long long magnitude = w1 % 5000000ull;
    a.number = 100000000000ull + (unsigned long long)d.user * 10 + i;
    // Account kind 3 is the credit card (BANK_ACCOUNT_KINDS).
    a.balance = a.kind == 3 ? -(long long)(magnitude / 10) : (long long)magnitude;
    return a;
}

__device__ int n_payees(const Src& d) {
    if (d.rec) return (int)ld32(d.rec, BANK_REC_N_PAYEES);
    return (int)(word(d.user, 20, 0) % (BANK_MAX_PAYEES + 1));
}

struct Payee {
    int merchant;
    unsigned long long account;
};

__device__ Payee payee(const Src& d, int i) {
    Payee p;
    if (d.rec) {
        const unsigned char* q = d.rec + BANK_REC_PAYEES + i * BANK_REC_PAYEE;
        p.merchant = (int)ld32(q, BANK_REC_PAYEE_MERCHANT);
        p.account = ld64(q, BANK_REC_PAYEE_ACCOUNT);
        return p;
    }
    p.merchant = (int)(word(d.user, 21 + i, 0) % 16);
    p.account = 1000000000ull + word(d.user, 21 + i, 1) % 9000000000ull;
    return p;
}

struct Txn {
    unsigned int date;
    int merchant;
    long long amount;
    unsigned int check;
};

__device__ Txn txn(const Src& d, int account, int j) {
    Txn t;
    if (d.rec) {
        const unsigned char* p = d.rec + BANK_REC_TXNS + (account * BANK_TXNS + j) * BANK_REC_TXN;
        t.amount = (long long)ld64(p, BANK_REC_TXN_AMOUNT);
        t.date = ld32(p, BANK_REC_TXN_DATE);
        t.check = ld16(p, BANK_REC_TXN_CHECK);
        t.merchant = (int)ld16(p, BANK_REC_TXN_MERCHANT);
        return t;
    }
    unsigned long long s = 40 + account;
    unsigned long long w0 = word(d.user, s, j * 4 + 0), w1 = word(d.user, s, j * 4 + 1),
                       w2 = word(d.user, s, j * 4 + 2), w3 = word(d.user, s, j * 4 + 3);
    t.date = date_of(335 - ((unsigned long long)j * 9 + w1 % 9));
    t.merchant = (int)(w2 % 16);
    t.amount = -((long long)(w3 % 40000) + 100);
    t.check = (w0 % 4 == 0) ? 1000u + (unsigned int)(account * BANK_TXNS + j) : 0u;
    return t;
}

struct Payment {
    unsigned int date;
    int payee;
    long long amount;
};

// Scheduled payment i; `np` is the user's payee count (the computed payee is drawn from it).
__device__ Payment payment(const Src& d, int i, int np) {
    Payment p;
    if (d.rec) {
        const unsigned char* q = d.rec + BANK_REC_PAYMENTS + i * BANK_REC_PAYMENT;
        p.amount = (long long)ld64(q, BANK_REC_PAYMENT_AMOUNT);
        p.date = ld32(q, BANK_REC_PAYMENT_DATE);
        p.payee = (int)ld32(q, BANK_REC_PAYMENT_PAYEE);
        return p;
    }
    unsigned long long payees = np < 1 ? 1 : np;
    unsigned long long w0 = word(d.user, 60, i * 3 + 0), w1 = word(d.user, 60, i * 3 + 1),
                       w2 = word(d.user, 60, i * 3 + 2);
    p.date = date_of((unsigned long long)i * 10 + w0 % 10);
    p.payee = 1 + (int)(w1 % payees);
    p.amount = (long long)(w2 % 100000) + 500;
    return p;
}

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

// ---- a page in parts: each part is written by itself from the page's inputs, so the parts
// of one page can be written by different threads (see bank_pages) ----

// What a page is written from: the request's parse and session outputs, its records.
struct Page {
    // 0 for a 200 page, else the refusal code.
    int status;
    int kind;
    int change;
    unsigned int user;
    unsigned long long token;
    Src d;
    unsigned long long n0, n1, n2;
    // The request's texts (transposed: byte j of text t at (t * BANK_NAME + j) * n + r).
    const unsigned char* texts;
    unsigned int r, n;
    // The user's accounts and payees (the kinds that list them read these often).
    int na, np;
};

// Part p of a sequence falls in the next segment of `count` parts when p < count (p is then
// its index in the segment); else p moves on past the segment.
__device__ __forceinline__ bool in_segment(int& p, int count) {
    if (p < count) return true;
    p -= count;
    return false;
}

// A list's parts are numbered by the most it can hold, rows past the user's count left empty,
// so that part p is the same code for every page of a type: the pages of a warp (one thread
// a page) run their parts in step. Numbered by each user's count, the parts of users with
// fewer accounts ran one row kind behind and a warp ran them one after another.
#define ACCOUNT_PARTS (BANK_MAX_ACCOUNTS + 2)
#define PAYEE_PARTS (BANK_MAX_PAYEES + 2)

// The accounts table: head, a row per account, end.
__device__ void accounts_part(Out& o, const Page& g, int i) {
    if (i == 0) {
        lit(o, "<table class=\"accounts\"><tr><th>Account</th><th>Type</th><th>Balance</th></tr>\n");
    } else if (i <= BANK_MAX_ACCOUNTS) {
        if (i > g.na) return;
        Account a = account(g.d, i - 1);
        lit(o, "<tr><td>");
        num(o, a.number, 12);
        td(o);
        name_of(o, BANK_ACCOUNT_KINDS_BYTES, BANK_ACCOUNT_KINDS_OFF, a.kind);
        td(o);
        money(o, a.balance);
        lit(o, "</td></tr>\n");
    } else {
        lit(o, "</table>\n");
    }
}

// A select of the user's accounts: head, an option per account, end.
__device__ void account_select_part(Out& o, const Page& g, const char* field, int i) {
    if (i == 0) {
        lit(o, "<select name=\"");
        lit_str(o, field);
        lit(o, "\">");
    } else if (i <= BANK_MAX_ACCOUNTS) {
        if (i > g.na) return;
        lit(o, "<option value=\"");
        num(o, i - 1, 1);
        lit(o, "\">");
        num(o, account(g.d, i - 1).number, 12);
        lit(o, "</option>");
    } else {
        lit(o, "</select>\n");
    }
}

// The payees table: head, a row per payee, end.
__device__ void payees_part(Out& o, const Page& g, int i) {
    if (i == 0) {
        lit(o, "<table class=\"payees\"><tr><th>Payee</th><th>Name</th><th>Account</th></tr>\n");
    } else if (i <= BANK_MAX_PAYEES) {
        if (i > g.np) return;
        Payee p = payee(g.d, i - 1);
        lit(o, "<tr><td>");
        num(o, i, 3);
        td(o);
        name_of(o, BANK_MERCHANTS_BYTES, BANK_MERCHANTS_OFF, p.merchant);
        td(o);
        num(o, p.account, 10);
        lit(o, "</td></tr>\n");
    } else {
        lit(o, "</table>\n");
    }
}

// A text field of the profile (record offset `at`: the name - on the login page too -,
// street, city, email): the record's bytes, or computed into `n`.
__device__ const unsigned char* profile_field(Name& n, const Src& d, int at) {
    if (d.rec) return d.rec + at;
    unsigned int user = d.user;
    name_init(n);
    if (at == BANK_REC_PROFILE_NAME) {
        name_entry(n, BANK_FIRST_BYTES, BANK_FIRST_OFF, (int)(word(user, 2, 0) % 16));
        name_push(n, ' ');
        name_entry(n, BANK_LAST_BYTES, BANK_LAST_OFF, (int)(word(user, 2, 1) % 16));
    } else if (at == BANK_REC_STREET) {
        name_num(n, word(user, 2, 2) % 9000 + 100);
        name_push(n, ' ');
        name_entry(n, BANK_STREETS_BYTES, BANK_STREETS_OFF, (int)(word(user, 2, 3) % 8));
    } else if (at == BANK_REC_CITY) {
        name_entry(n, BANK_CITIES_BYTES, BANK_CITIES_OFF, (int)(word(user, 2, 4) % 8));
    } else {
        name_lit(n, "user");
        name_num(n, user);
        name_lit(n, "@bank.example");
    }
    return n.b;
}

__device__ unsigned long long phone_of(const Src& d) {
    if (d.rec) return ld64(d.rec, BANK_REC_PHONE);
    return 2000000000ull + word(d.user, 2, 5) % 8000000000ull;
}

// The profile table: 5 parts, a row each.
__device__ void profile_part(Out& o, const Page& g, int i) {
    Name n;
    switch (i) {
    case 0:
        lit(o, "<table class=\"profile\"><tr><td>Name</td><td>");
        name(o, profile_field(n, g.d, BANK_REC_PROFILE_NAME));
        break;
    case 1:
        lit(o, "</td></tr>\n<tr><td>Street</td><td>");
        name(o, profile_field(n, g.d, BANK_REC_STREET));
        break;
    case 2:
        lit(o, "</td></tr>\n<tr><td>City</td><td>");
        name(o, profile_field(n, g.d, BANK_REC_CITY));
        break;
    case 3:
        lit(o, "</td></tr>\n<tr><td>Phone</td><td>");
        num(o, phone_of(g.d), 10);
        break;
    default:
        lit(o, "</td></tr>\n<tr><td>Email</td><td>");
        name(o, profile_field(n, g.d, BANK_REC_EMAIL));
        lit(o, "</td></tr>\n</table>\n");
    }
}

__device__ void notice(Out& o, bool ok, const char* yes, const char* no) {
    lit(o, "<p class=\"notice\">");
    lit_str(o, ok ? yes : no);
    lit(o, "</p>\n");
}

// One of the request's texts, BANK_NAME bytes.
__device__ void text(Out& o, const Page& g, int t) {
    if (!o.base) {
        o.pos += BANK_NAME;
        return;
    }
    for (int j = 0; j < BANK_NAME; j++) put(o, g.texts[(size_t)(t * BANK_NAME + j) * g.n + g.r]);
}

// The number of parts of a 200 page's content (after head); content_part writes each.
__device__ int content_parts(const Page& g) {
    const int accounts = ACCOUNT_PARTS, payees = PAYEE_PARTS;
    switch (g.kind) {
    case BANK_K_Login: return 1 + accounts;
    case BANK_K_AccountSummary: return accounts + BANK_MAX_ACCOUNTS * (BANK_TXNS + 2);
    case BANK_K_BillPay: return payees + 1 + accounts + 1;
    case BANK_K_BillPayStatus: return 1 + BANK_PAYMENTS + 1;
    case BANK_K_ChangeProfile: return 1 + 5;
    case BANK_K_OrderCheck: return accounts + 1 + accounts + 1;
    case BANK_K_PostPayee: return 1 + payees;
    case BANK_K_Profile: return 5 + 1;
    case BANK_K_Transfer: return accounts + 1 + accounts + 1 + accounts + 1;
    default: return 1;
    }
}

// Part p of a 200 page's content (after head): the page's content in the order the CPU twin
// writes it (page::content). Inlined into write_parts, which holds the writer `o` as a value:
// passed by reference to a function not inlined, `o` lives in local memory and every byte
// put reloads and stores its position and word (the page stores through `o.base` may alias
// it) - measured as most of the page kernel's time when it was one thread a page.
__device__ __forceinline__ void content_part(Out& o, const Page& g, int p) {
    const Src& d = g.d;
    const unsigned long long n0 = g.n0, n1 = g.n1, n2 = g.n2;
    switch (g.kind) {
    case BANK_K_Login:
        if (in_segment(p, 1)) {
            Name nm;
            lit(o, "<p>Welcome, ");
            name(o, profile_field(nm, d, BANK_REC_PROFILE_NAME));
            lit(o, "</p>\n");
        } else {
            accounts_part(o, g, p);
        }
        break;
    case BANK_K_AccountSummary: {
        if (in_segment(p, ACCOUNT_PARTS)) {
            accounts_part(o, g, p);
            break;
        }
        // Account i's transactions: a heading, BANK_TXNS rows, the end.
        int i = p / (BANK_TXNS + 2), j = p % (BANK_TXNS + 2);
        if (i >= g.na) break;
        if (j == 0) {
            lit(o, "<h2>");
            num(o, account(d, i).number, 12);
            lit(o, "</h2>\n<table class=\"txns\"><tr><th>Date</th><th>Description</th><th>Amount</th><th>Check</th></tr>\n");
        } else if (j <= BANK_TXNS) {
            Txn t = txn(d, i, j - 1);
            lit(o, "<tr><td>");
            date(o, t.date);
            td(o);
            name_of(o, BANK_MERCHANTS_BYTES, BANK_MERCHANTS_OFF, t.merchant);
            td(o);
            money(o, t.amount);
            td(o);
            num(o, t.check, 6);
            lit(o, "</td></tr>\n");
        } else {
            lit(o, "</table>\n");
        }
        break;
    }
    case BANK_K_AddPayee:
        lit(o, "<form method=\"post\" action=\"/bank/post_payee\"><label>Name <input name=\"name\" maxlength=\"24\"></label> <label>Account <input name=\"account\" maxlength=\"10\"></label> <button>Add payee</button></form>\n");
        break;
    case BANK_K_BillPay:
        if (in_segment(p, PAYEE_PARTS)) {
            payees_part(o, g, p);
        } else if (in_segment(p, 1)) {
            lit(o, "<form method=\"post\" action=\"/bank/post_transfer\">From ");
        } else if (in_segment(p, ACCOUNT_PARTS)) {
            account_select_part(o, g, "from", p);
        } else {
            lit(o, "<input name=\"amount\"> <button>Pay</button></form>\n");
        }
        break;
    case BANK_K_BillPayStatus:
        if (in_segment(p, 1)) {
            lit(o, "<p>Payments from ");
            date(o, (unsigned int)n0);
            lit(o, " to ");
            date(o, (unsigned int)n1);
            lit(o, "</p>\n<table class=\"payments\"><tr><th>Date</th><th>Payee</th><th>Amount</th></tr>\n");
        } else if (in_segment(p, BANK_PAYMENTS)) {
            // Payment p, if it falls in the dates asked (else an empty part).
            Payment pm = payment(d, p, g.np);
            if (pm.date < n0 || pm.date > n1) break;
            lit(o, "<tr><td>");
            date(o, pm.date);
            td(o);
            if (pm.payee - 1 < g.np) {
                name_of(o, BANK_MERCHANTS_BYTES, BANK_MERCHANTS_OFF, payee(d, pm.payee - 1).merchant);
            } else {
                spaces(o, BANK_NAME);
            }
            td(o);
            money(o, pm.amount);
            lit(o, "</td></tr>\n");
        } else {
            lit(o, "</table>\n");
        }
        break;
    case BANK_K_ChangeProfile:
        if (in_segment(p, 1)) {
            notice(o, true, "Your profile is updated.", "");
            lit(o, "<table class=\"profile\"><tr><td>Street</td><td>");
            text(o, g, 0);
            lit(o, "</td></tr>\n<tr><td>City</td><td>");
            text(o, g, 1);
            lit(o, "</td></tr>\n<tr><td>Phone</td><td>");
            num(o, n0, 10);
            lit(o, "</td></tr>\n</table>\n<h2>Before</h2>\n");
        } else {
            profile_part(o, g, p);
        }
        break;
    case BANK_K_CheckDetail: {
        unsigned long long c = n0 > 0xffffffffull ? 0xffffffffull : n0;
        bool found = false;
        if (c >= 1000) {
            unsigned long long k = c - 1000;
            int acc = (int)(k / BANK_TXNS), j = (int)(k % BANK_TXNS);
            if (k / BANK_TXNS < (unsigned long long)g.na) {
                Txn t = txn(d, acc, j);
                if (t.check == (unsigned int)c) {
                    found = true;
                    lit(o, "<div class=\"check\"><p>Check ");
                    num(o, t.check, 6);
                    lit(o, " on account ");
                    num(o, account(d, acc).number, 12);
                    lit(o, "</p>\n<p>Date ");
                    date(o, t.date);
                    lit(o, " Pay to ");
                    name_of(o, BANK_MERCHANTS_BYTES, BANK_MERCHANTS_OFF, t.merchant);
                    lit(o, " Amount ");
                    money(o, -t.amount);
                    lit(o, "</p>\n<img src=\"/images/check_front.png\" alt=\"front\"><img src=\"/images/check_back.png\" alt=\"back\"></div>\n");
                }
            }
        }
        if (!found) notice(o, false, "", "No such check on your accounts.");
        break;
    }
    case BANK_K_OrderCheck:
        if (in_segment(p, ACCOUNT_PARTS)) {
            accounts_part(o, g, p);
        } else if (in_segment(p, 1)) {
            lit(o, "<form method=\"post\" action=\"/bank/place_check_order\">Account ");
        } else if (in_segment(p, ACCOUNT_PARTS)) {
            account_select_part(o, g, "account", p);
        } else {
            lit(o, "<select name=\"design\">");
            for (int i = 0; i < 4; i++) {
                lit(o, "<option value=\"");
                num(o, i, 1);
                lit(o, "\">");
                entry(o, BANK_DESIGNS_BYTES, BANK_DESIGNS_OFF, i);
                lit(o, "</option>");
            }
            lit(o, "</select> <input name=\"boxes\"> <button>Order</button></form>\n");
        }
        break;
    case BANK_K_PlaceCheckOrder: {
        bool ok = n0 < (unsigned long long)g.na && n1 < 4 && n2 >= 1 && n2 <= 10;
        notice(o, ok, "Your check order is placed.", "The order is not valid (account, design, 1 to 10 boxes).");
        if (ok) {
            lit(o, "<p>Account ");
            num(o, account(d, (int)n0).number, 12);
            lit(o, " Design ");
            name_of(o, BANK_DESIGNS_BYTES, BANK_DESIGNS_OFF, (int)n1);
            lit(o, " Boxes ");
            num(o, n2, 2);
            lit(o, " Charged ");
            money(o, (long long)n2 * (long long)BANK_CHECK_BOX_CENTS);
            lit(o, "</p>\n");
        }
        break;
    }
    case BANK_K_PostPayee:
        if (in_segment(p, 1)) {
            bool ok = n0 >= 1000000000ull && n0 < 10000000000ull;
            notice(o, ok, "The payee is added.", "A payee account has 10 digits.");
            if (ok) {
                lit(o, "<p>");
                text(o, g, 0);
                put(o, ' ');
                num(o, n0, 10);
                lit(o, "</p>\n");
            }
        } else {
            payees_part(o, g, p);
        }
        break;
    case BANK_K_PostTransfer: {
        int na = g.na;
        bool ok = n0 < (unsigned long long)na && n1 < (unsigned long long)na && n0 != n1 && n2 >= 1 &&
                  (long long)n2 <= account(d, (int)(n0 < (unsigned long long)na ? n0 : 0)).balance;
        notice(o, ok, "The transfer is done.", "The transfer is not possible (accounts, or funds).");
        if (ok) {
            lit(o, "<table class=\"accounts\"><tr><th>Account</th><th>Before</th><th>After</th></tr>\n");
            for (int side = 0; side < 2; side++) {
                Account a = account(d, (int)(side == 0 ? n0 : n1));
                long long delta = side == 0 ? -(long long)n2 : (long long)n2;
                lit(o, "<tr><td>");
                num(o, a.number, 12);
                td(o);
                money(o, a.balance);
                td(o);
                money(o, a.balance + delta);
                lit(o, "</td></tr>\n");
            }
            lit(o, "</table>\n");
        }
        break;
    }
    case BANK_K_Profile:
        if (in_segment(p, 5)) {
            profile_part(o, g, p);
        } else {
            lit(o, "<form method=\"post\" action=\"/bank/change_profile\"><input name=\"street\"> <input name=\"city\"> <input name=\"phone\"> <button>Save</button></form>\n");
        }
        break;
    case BANK_K_Transfer:
        if (in_segment(p, ACCOUNT_PARTS)) {
            accounts_part(o, g, p);
        } else if (in_segment(p, 1)) {
            lit(o, "<form method=\"post\" action=\"/bank/post_transfer\">From ");
        } else if (in_segment(p, ACCOUNT_PARTS)) {
            account_select_part(o, g, "from", p);
        } else if (in_segment(p, 1)) {
            lit(o, " To ");
        } else if (in_segment(p, ACCOUNT_PARTS)) {
            account_select_part(o, g, "to", p);
        } else {
            lit(o, "<input name=\"amount\"> <button>Transfer</button></form>\n");
        }
        break;
    case BANK_K_Logout:
        lit(o, "<p>You are logged out. Thank you for banking with us.</p>\n<p><a href=\"/bank/login\">Log in again</a></p>\n");
        break;
    }
}

// Part p of a page: 0 the status line and headers, 1 the refusal page's body or the 200
// page's head, then the 200 page's content parts. The tail (padding, the end, the length)
// is written after every part (finish).
__device__ __forceinline__ void page_part(Out& o, const Page& g, int p) {
    if (p == 0) {
        if (g.status) {
            int ch = g.status == BANK_REFUSE_NoSession ? 2 : 0;
            header(o, BANK_STATUS[g.status - 1], g.status - 1, ch, 0, 0);
        } else {
            header(o, 200, BANK_REASON_OK, g.change, g.user, g.token);
        }
    } else if (p == 1) {
        if (g.status) {
            int st = g.status;
            lit(o, "<!DOCTYPE html>\n<html><head><title>Cohort Bank - ");
            entry(o, BANK_REASON_BYTES, BANK_REASON_OFF, st - 1);
            lit(o, "</title></head>\n<body><h1>");
            num(o, BANK_STATUS[st - 1], 3);
            put(o, ' ');
            entry(o, BANK_REASON_BYTES, BANK_REASON_OFF, st - 1);
            lit(o, "</h1>\n<p>");
            entry(o, BANK_MESSAGE_BYTES, BANK_MESSAGE_OFF, st - 1);
            lit(o, "</p>\n<p><a href=\"/bank/login\">Log in</a></p>\n");
        } else {
            head(o, g.kind);
        }
    } else {
        content_part(o, g, p - 2);
    }
}

// Parts [from, to) of a page, one after another. Out of line, with the writer passed and
// returned by value (so it stays in registers): one copy of the page code for every caller.
// Inlined into bank_pages' three call sites, NVRTC took 3-6x as long over the unit (2-5
// minutes on two cores). A range, not one part, so one-thread pages make one call each.
__device__ __noinline__ Out write_parts(Out o, const Page g, int from, int to) {
#pragma unroll 1
    for (int p = from; p < to; p++) page_part(o, g, p);
    return o;
}

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

