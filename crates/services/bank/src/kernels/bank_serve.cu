// The bank after parsing: sessions, then pages - one thread per request of a cohort (Rhythm's
// process and response stages). CPU twins: `Sessions` (bank/session.rs), `Besim`
// (bank/besim.rs) and `page::render` / `page::refusal` (bank/page.rs): the same records, the
// same fixed-width fields, the same bytes. Tables and sizes come from the generated prelude.

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

struct Out {
    unsigned char* base;
    unsigned int r, n;
    bool tr;
    int pos;
    // The word being written (bytes not yet put are spaces): stored whole when full, so a
    // warp's threads store whole words side by side instead of single bytes.
    unsigned int acc;
};

__device__ __forceinline__ size_t out_at(const Out& o, int i) {
    if (o.tr) return ((size_t)(i >> 2) * o.n + o.r) * 4 + (i & 3);
    return (size_t)o.r * BANK_RESP_SLOT + i;
}
__device__ __forceinline__ void flush(Out& o) {
    if (o.pos & 3) {
        *(unsigned int*)(o.base + out_at(o, o.pos & ~3)) = o.acc;
        o.acc = 0x20202020u;
    }
}
__device__ __forceinline__ void put(Out& o, unsigned char c) {
    int sh = (o.pos & 3) * 8;
    o.acc = (o.acc & ~(0xffu << sh)) | ((unsigned int)c << sh);
    if ((o.pos & 3) == 3) {
        *(unsigned int*)(o.base + out_at(o, o.pos & ~3)) = o.acc;
        o.acc = 0x20202020u;
    }
    o.pos++;
}
// Kept a loop over the literal's bytes: unrolled, every literal of every page type becomes
// straight-line code (about 40% more PTX) and the sustained mix ran 13% slower on the H200
// (52.8 vs 46.0 M requests/s, 325 vs 301 W: fewer instruction-cache misses outweigh the loads).
__device__ void lit(Out& o, const char* s) {
#pragma unroll 1
    while (*s) put(o, (unsigned char)*s++);
}
__device__ void entry(Out& o, const unsigned char* bytes, const unsigned short* off, int e) {
    for (int i = off[e]; i < off[e + 1]; i++) put(o, bytes[i]);
}
__device__ void spaces(Out& o, int k) {
    for (int i = 0; i < k; i++) put(o, ' ');
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
    int from_word = (o.pos + 3) >> 2;
    flush(o);
    o.pos = to;
    int to_word = to >> 2;
    pad[o.r] = (unsigned int)from_word | ((unsigned int)(to_word > from_word ? to_word : from_word) << 16);
}
// The digits of v, right-aligned in `width`. The digits are kept as two stacks of nibbles in
// registers (the least significant 16 in `lo`, the rest in `hi`) rather than an array, which
// would live in local memory.
__device__ void num(Out& o, unsigned long long v, int width) {
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
__device__ void name(Out& o, const unsigned char* b) {
    for (int i = 0; i < BANK_NAME; i++) put(o, b[i]);
}
// Entry e of a table as a BANK_NAME-wide field: cut to the width, padded with spaces (as
// name_entry into a Name, without the buffer in local memory).
__device__ void name_of(Out& o, const unsigned char* bytes, const unsigned short* off, int e) {
    int from = off[e], len = off[e + 1] - from;
    if (len > BANK_NAME) len = BANK_NAME;
    for (int i = 0; i < len; i++) put(o, bytes[from + i]);
    spaces(o, BANK_NAME - len);
}
__device__ void td(Out& o) { lit(o, "</td><td>"); }

// The status line and headers; returns where the body starts. change: 0 none, 1 opened
// (cookie user-token), 2 closed.
__device__ int header(Out& o, int status, int reason, int change, unsigned int user,
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
    return o.pos;
}

// Pads the body to `size` (through `bank_pad`), closes it, fills Content-Length; returns
// the response length.
__device__ int finish(Out& o, int body_at, int size, unsigned int* pad) {
    int tail = BANK_TAIL_OFF[1];
    skip_to(o, body_at + size - tail, pad);
    entry(o, BANK_TAIL_BYTES, BANK_TAIL_OFF, 0);
    flush(o);
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

__device__ void accounts_table(Out& o, const Src& d) {
    int n = n_accounts(d);
    lit(o, "<table class=\"accounts\"><tr><th>Account</th><th>Type</th><th>Balance</th></tr>\n");
    for (int i = 0; i < n; i++) {
        Account a = account(d, i);
        lit(o, "<tr><td>");
        num(o, a.number, 12);
        td(o);
        name_of(o, BANK_ACCOUNT_KINDS_BYTES, BANK_ACCOUNT_KINDS_OFF, a.kind);
        td(o);
        money(o, a.balance);
        lit(o, "</td></tr>\n");
    }
    lit(o, "</table>\n");
}

__device__ void account_select(Out& o, const Src& d, const char* field) {
    int n = n_accounts(d);
    lit(o, "<select name=\"");
    lit(o, field);
    lit(o, "\">");
    for (int i = 0; i < n; i++) {
        lit(o, "<option value=\"");
        num(o, i, 1);
        lit(o, "\">");
        num(o, account(d, i).number, 12);
        lit(o, "</option>");
    }
    lit(o, "</select>\n");
}

__device__ void payees_table(Out& o, const Src& d) {
    int n = n_payees(d);
    lit(o, "<table class=\"payees\"><tr><th>Payee</th><th>Name</th><th>Account</th></tr>\n");
    for (int i = 0; i < n; i++) {
        Payee p = payee(d, i);
        lit(o, "<tr><td>");
        num(o, i + 1, 3);
        td(o);
        name_of(o, BANK_MERCHANTS_BYTES, BANK_MERCHANTS_OFF, p.merchant);
        td(o);
        num(o, p.account, 10);
        lit(o, "</td></tr>\n");
    }
    lit(o, "</table>\n");
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

__device__ void profile_table(Out& o, const Src& d) {
    Name n;
    lit(o, "<table class=\"profile\"><tr><td>Name</td><td>");
    name(o, profile_field(n, d, BANK_REC_PROFILE_NAME));
    lit(o, "</td></tr>\n<tr><td>Street</td><td>");
    name(o, profile_field(n, d, BANK_REC_STREET));
    lit(o, "</td></tr>\n<tr><td>City</td><td>");
    name(o, profile_field(n, d, BANK_REC_CITY));
    lit(o, "</td></tr>\n<tr><td>Phone</td><td>");
    num(o, phone_of(d), 10);
    lit(o, "</td></tr>\n<tr><td>Email</td><td>");
    name(o, profile_field(n, d, BANK_REC_EMAIL));
    lit(o, "</td></tr>\n</table>\n");
}

__device__ void notice(Out& o, bool ok, const char* yes, const char* no) {
    lit(o, "<p class=\"notice\">");
    lit(o, ok ? yes : no);
    lit(o, "</p>\n");
}

// The 200 page's content (after head); nums/texts are request r's parameters. Inlined into
// bank_pages so that the writer `o` stays in registers: passed to a called function, `o`
// lives in local memory and every byte put reloads and stores its position and word (the
// page stores through `o.base` may alias it) - measured as most of bank_pages' time.
__device__ __forceinline__ void content(Out& o, int kind, const Src& d, const unsigned long long* nums,
                        const unsigned char* texts, unsigned int r, unsigned int n) {
    unsigned long long n0 = nums[r], n1 = nums[(size_t)n + r], n2 = nums[(size_t)2 * n + r];
    switch (kind) {
    case BANK_K_Login: {
        Name nm;
        lit(o, "<p>Welcome, ");
        name(o, profile_field(nm, d, BANK_REC_PROFILE_NAME));
        lit(o, "</p>\n");
        accounts_table(o, d);
        break;
    }
    case BANK_K_AccountSummary: {
        int na = n_accounts(d);
        accounts_table(o, d);
        for (int i = 0; i < na; i++) {
            lit(o, "<h2>");
            num(o, account(d, i).number, 12);
            lit(o, "</h2>\n<table class=\"txns\"><tr><th>Date</th><th>Description</th><th>Amount</th><th>Check</th></tr>\n");
            for (int j = 0; j < BANK_TXNS; j++) {
                Txn t = txn(d, i, j);
                lit(o, "<tr><td>");
                date(o, t.date);
                td(o);
                name_of(o, BANK_MERCHANTS_BYTES, BANK_MERCHANTS_OFF, t.merchant);
                td(o);
                money(o, t.amount);
                td(o);
                num(o, t.check, 6);
                lit(o, "</td></tr>\n");
            }
            lit(o, "</table>\n");
        }
        break;
    }
    case BANK_K_AddPayee:
        lit(o, "<form method=\"post\" action=\"/bank/post_payee\"><label>Name <input name=\"name\" maxlength=\"24\"></label> <label>Account <input name=\"account\" maxlength=\"10\"></label> <button>Add payee</button></form>\n");
        break;
    case BANK_K_BillPay:
        payees_table(o, d);
        lit(o, "<form method=\"post\" action=\"/bank/post_transfer\">From ");
        account_select(o, d, "from");
        lit(o, "<input name=\"amount\"> <button>Pay</button></form>\n");
        break;
    case BANK_K_BillPayStatus: {
        lit(o, "<p>Payments from ");
        date(o, (unsigned int)n0);
        lit(o, " to ");
        date(o, (unsigned int)n1);
        lit(o, "</p>\n<table class=\"payments\"><tr><th>Date</th><th>Payee</th><th>Amount</th></tr>\n");
        int np = n_payees(d);
        for (int i = 0; i < BANK_PAYMENTS; i++) {
            Payment p = payment(d, i, np);
            if (p.date < n0 || p.date > n1) continue;
            lit(o, "<tr><td>");
            date(o, p.date);
            td(o);
            if (p.payee - 1 < np) {
                name_of(o, BANK_MERCHANTS_BYTES, BANK_MERCHANTS_OFF, payee(d, p.payee - 1).merchant);
            } else {
                spaces(o, BANK_NAME);
            }
            td(o);
            money(o, p.amount);
            lit(o, "</td></tr>\n");
        }
        lit(o, "</table>\n");
        break;
    }
    case BANK_K_ChangeProfile: {
        notice(o, true, "Your profile is updated.", "");
        lit(o, "<table class=\"profile\"><tr><td>Street</td><td>");
        for (int j = 0; j < BANK_NAME; j++) put(o, texts[(size_t)j * n + r]);
        lit(o, "</td></tr>\n<tr><td>City</td><td>");
        for (int j = 0; j < BANK_NAME; j++) put(o, texts[(size_t)(BANK_NAME + j) * n + r]);
        lit(o, "</td></tr>\n<tr><td>Phone</td><td>");
        num(o, n0, 10);
        lit(o, "</td></tr>\n</table>\n<h2>Before</h2>\n");
        profile_table(o, d);
        break;
    }
    case BANK_K_CheckDetail: {
        unsigned long long c = n0 > 0xffffffffull ? 0xffffffffull : n0;
        bool found = false;
        if (c >= 1000) {
            unsigned long long k = c - 1000;
            int acc = (int)(k / BANK_TXNS), j = (int)(k % BANK_TXNS);
            if (k / BANK_TXNS < (unsigned long long)n_accounts(d)) {
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
        accounts_table(o, d);
        lit(o, "<form method=\"post\" action=\"/bank/place_check_order\">Account ");
        account_select(o, d, "account");
        lit(o, "<select name=\"design\">");
        for (int i = 0; i < 4; i++) {
            lit(o, "<option value=\"");
            num(o, i, 1);
            lit(o, "\">");
            entry(o, BANK_DESIGNS_BYTES, BANK_DESIGNS_OFF, i);
            lit(o, "</option>");
        }
        lit(o, "</select> <input name=\"boxes\"> <button>Order</button></form>\n");
        break;
    case BANK_K_PlaceCheckOrder: {
        int na = n_accounts(d);
        bool ok = n0 < (unsigned long long)na && n1 < 4 && n2 >= 1 && n2 <= 10;
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
    case BANK_K_PostPayee: {
        bool ok = n0 >= 1000000000ull && n0 < 10000000000ull;
        notice(o, ok, "The payee is added.", "A payee account has 10 digits.");
        if (ok) {
            lit(o, "<p>");
            for (int j = 0; j < BANK_NAME; j++) put(o, texts[(size_t)j * n + r]);
            put(o, ' ');
            num(o, n0, 10);
            lit(o, "</p>\n");
        }
        payees_table(o, d);
        break;
    }
    case BANK_K_PostTransfer: {
        int na = n_accounts(d);
        bool ok = n0 < (unsigned long long)na && n1 < (unsigned long long)na && n0 != n1 && n2 >= 1 &&
                  (long long)n2 <= account(d, (int)(n0 < (unsigned long long)na ? n0 : 0)).balance;
        notice(o, ok, "The transfer is done.", "The transfer is not possible (accounts, or funds).");
        if (ok) {
            lit(o, "<table class=\"accounts\"><tr><th>Account</th><th>Before</th><th>After</th></tr>\n");
            for (int side = 0; side < 2; side++) {
                Account a = account(d, (int)(side == 0 ? n0 : n1));
                long long d = side == 0 ? -(long long)n2 : (long long)n2;
                lit(o, "<tr><td>");
                num(o, a.number, 12);
                td(o);
                money(o, a.balance);
                td(o);
                money(o, a.balance + d);
                lit(o, "</td></tr>\n");
            }
            lit(o, "</table>\n");
        }
        break;
    }
    case BANK_K_Profile:
        profile_table(o, d);
        lit(o, "<form method=\"post\" action=\"/bank/change_profile\"><input name=\"street\"> <input name=\"city\"> <input name=\"phone\"> <button>Save</button></form>\n");
        break;
    case BANK_K_Transfer:
        accounts_table(o, d);
        lit(o, "<form method=\"post\" action=\"/bank/post_transfer\">From ");
        account_select(o, d, "from");
        lit(o, " To ");
        account_select(o, d, "to");
        lit(o, "<input name=\"amount\"> <button>Transfer</button></form>\n");
        break;
    case BANK_K_Logout:
        lit(o, "<p>You are logged out. Thank you for banking with us.</p>\n<p><a href=\"/bank/login\">Log in again</a></p>\n");
        break;
    }
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
};

extern "C" __global__ void bank_pages(const BankPagesArgs a) {
    const unsigned int n = a.n;
    const unsigned char* status = a.status;
    const unsigned char* kind = a.kind;
    const unsigned int* user = a.user;
    const unsigned char* change = a.change;
    const unsigned long long* token = a.token;
    const unsigned long long* nums = a.nums;
    const unsigned char* texts = a.texts;
    const unsigned char* recs = a.recs;
    const unsigned int* rec_at = a.rec_at;
    unsigned char* out = a.out;
    unsigned int* lens = a.lens;
    const int transposed = a.transposed;
    unsigned int* pad = a.pad;

    unsigned int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n) return;
    Out o;
    o.base = out;
    o.r = r;
    o.n = n;
    o.tr = transposed != 0;
    o.pos = 0;
    o.acc = 0x20202020u;
    int st = status[r];
    if (st) {
        int ch = st == BANK_REFUSE_NoSession ? 2 : 0;
        int body = header(o, BANK_STATUS[st - 1], st - 1, ch, 0, 0);
        lit(o, "<!DOCTYPE html>\n<html><head><title>Cohort Bank - ");
        entry(o, BANK_REASON_BYTES, BANK_REASON_OFF, st - 1);
        lit(o, "</title></head>\n<body><h1>");
        num(o, BANK_STATUS[st - 1], 3);
        put(o, ' ');
        entry(o, BANK_REASON_BYTES, BANK_REASON_OFF, st - 1);
        lit(o, "</h1>\n<p>");
        entry(o, BANK_MESSAGE_BYTES, BANK_MESSAGE_OFF, st - 1);
        lit(o, "</p>\n<p><a href=\"/bank/login\">Log in</a></p>\n");
        lens[r] = finish(o, body, (int)BANK_REFUSAL_PAGE, pad);
        return;
    }
    int k = kind[r];
    // Entry 7 of the reasons is "OK".
    int body = header(o, 200, BANK_REASON_OK, change[r], user[r], token[r]);
    head(o, k);
    Src d;
    d.user = user[r];
    // A type that reads no records may have none (never read then).
    d.rec = recs && rec_at[r] != BANK_REC_NONE ? recs + (size_t)rec_at[r] * BANK_REC_BYTES : 0;
    content(o, k, d, nums, texts, r, n);
    lens[r] = finish(o, body, (int)BANK_KIND_PAGE[k], pad);
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
