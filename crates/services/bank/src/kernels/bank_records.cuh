// The bank's backend records (bank_serve.cu's unit, after bank_parse.cu): Besim's records
// computed from the user id, or read from memcached's bytes. CPU twin: `Besim`
// (bank/besim.rs).

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
