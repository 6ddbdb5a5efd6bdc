// The bank's pages in parts (bank_serve.cu's unit, after bank_writer.cuh): each part of a
// page written by itself from the page's inputs. CPU twin: `page::render` (bank/page.rs).

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
