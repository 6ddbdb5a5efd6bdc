//! Page generation: the HTTP response of one request, from its parsed form, its user's
//! records and the session - the CPU twin of the GPU page kernel (one thread per request).
//! Every field is written at a fixed width and every 200 page of a type is padded with
//! spaces to the type's exact size, so the threads of a cohort store the same byte offsets
//! at the same time; Content-Length is filled in after the body (a fixed-width field in the
//! header), as the GPU does.

use super::besim::{Name, CHECK_BOX_CENTS, CHECK_DESIGNS, NAME};
use super::kinds::Kind;
use super::parse::{Cookie, Parsed, Refusal};
use super::record::Records;

/// Body bytes of every refusal page.
pub const REFUSAL_PAGE_BYTES: usize = 1024;
/// Digits of the Content-Length field (space padded on the left: optional whitespace).
pub const LENGTH_FIELD: usize = 6;
pub const TAIL: &[u8] = b"</body></html>\n";

/// What the page shows besides the request: the session change it made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionChange {
    None,
    /// Login: the cookie to set.
    Opened(Cookie),
    /// Logout: the cookie to clear.
    Closed,
}

/// Writes the 200 page of `req` from its user's records into `out` (cleared first).
pub fn render(req: &Parsed, recs: Records, session: SessionChange, out: &mut Vec<u8>) {
    out.clear();
    let info = req.kind.info();
    let body_at = header(out, 200, "OK", session);
    let w = &mut Writer(out);
    head(w, info.name);
    content(w, req, recs);
    finish(out, body_at, info.page_bytes);
}

/// Writes the refusal page `why` into `out` (cleared first).
pub fn refusal(why: Refusal, out: &mut Vec<u8>) {
    out.clear();
    let clear = if why == Refusal::NoSession {
        SessionChange::Closed
    } else {
        SessionChange::None
    };
    let body_at = header(out, why.status(), why.reason(), clear);
    let w = &mut Writer(out);
    w.s(b"<!DOCTYPE html>\n<html><head><title>Cohort Bank - ");
    w.s(why.reason().as_bytes());
    w.s(b"</title></head>\n<body><h1>");
    w.num(why.status() as u64, 3);
    w.s(b" ");
    w.s(why.reason().as_bytes());
    w.s(b"</h1>\n<p>");
    w.s(why.message().as_bytes());
    w.s(b"</p>\n<p><a href=\"/bank/login\">Log in</a></p>\n");
    finish(out, body_at, REFUSAL_PAGE_BYTES);
}

/// The status line and headers; returns where the body starts.
fn header(out: &mut Vec<u8>, status: u16, reason: &str, session: SessionChange) -> usize {
    let w = &mut Writer(out);
    w.s(b"HTTP/1.1 ");
    w.num(status as u64, 3);
    w.s(b" ");
    w.s(reason.as_bytes());
    w.s(b"\r\nContent-Type: text/html; charset=utf-8\r\nCache-Control: no-store\r\n");
    match session {
        SessionChange::None => {}
        SessionChange::Opened(c) => {
            w.s(b"Set-Cookie: SID=");
            w.s(cookie_value(c).as_bytes());
            w.s(b"; Path=/bank/; HttpOnly\r\n");
        }
        SessionChange::Closed => w.s(b"Set-Cookie: SID=; Path=/bank/; Max-Age=0\r\n"),
    }
    w.s(b"Content-Length: ");
    w.s(&[b' '; LENGTH_FIELD]);
    w.s(b"\r\n\r\n");
    out.len()
}

/// The cookie's value as set and sent back: `<user>-<16 hex>`.
pub fn cookie_value(c: Cookie) -> String {
    format!("{}-{:016x}", c.user, c.token)
}

/// Pads the body to `size` bytes, closes it and fills in Content-Length.
fn finish(out: &mut Vec<u8>, body_at: usize, size: usize) {
    let used = out.len() - body_at + TAIL.len();
    assert!(
        used <= size,
        "page content of {used} bytes over its size {size}"
    );
    out.resize(body_at + size - TAIL.len(), b' ');
    out.extend_from_slice(TAIL);
    let field = body_at - 4 - LENGTH_FIELD;
    let mut n = size;
    for i in (0..LENGTH_FIELD).rev() {
        out[field + i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
}

/// Fixed-width field writers.
struct Writer<'a>(&'a mut Vec<u8>);

impl Writer<'_> {
    fn s(&mut self, b: &[u8]) {
        self.0.extend_from_slice(b);
    }
    /// `n` right-aligned in `width` (wider numbers are written whole).
    fn num(&mut self, n: u64, width: usize) {
        let mut d = [b' '; 20];
        let (mut i, mut n) = (20, n);
        loop {
            i -= 1;
            d[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        let digits = 20 - i;
        self.pad(width.saturating_sub(digits));
        self.s(&d[i..]);
    }
    fn pad(&mut self, n: usize) {
        self.0.resize(self.0.len() + n, b' ');
    }
    /// Cents as `-12345.67` right-aligned in 12.
    fn money(&mut self, cents: i64) {
        let a = cents.unsigned_abs();
        let whole_digits = (a / 100).max(1).ilog10() as usize + 1;
        self.pad(12usize.saturating_sub(whole_digits + 3 + (cents < 0) as usize));
        if cents < 0 {
            self.s(b"-");
        }
        self.num(a / 100, 0);
        self.s(b".");
        self.num(a % 100 / 10, 0);
        self.num(a % 10, 0);
    }
    /// YYYYMMDD as YYYY-MM-DD.
    fn date(&mut self, d: u32) {
        self.num((d / 10000) as u64, 4);
        self.s(b"-");
        self.num((d / 1000 % 10) as u64, 0);
        self.num((d / 100 % 10) as u64, 0);
        self.s(b"-");
        self.num((d / 10 % 10) as u64, 0);
        self.num((d % 10) as u64, 0);
    }
    fn name(&mut self, n: &[u8; NAME]) {
        self.s(n);
    }
    fn td(&mut self) {
        self.s(b"</td><td>");
    }
}

fn head(w: &mut Writer, title: &str) {
    w.s(b"<!DOCTYPE html>\n<html><head><title>Cohort Bank - ");
    w.s(title.as_bytes());
    w.s(b"</title></head>\n<body><div class=\"nav\"><a href=\"/bank/account_summary\">Accounts</a> | <a href=\"/bank/bill_pay\">Bill Pay</a> | <a href=\"/bank/transfer\">Transfer</a> | <a href=\"/bank/order_check\">Checks</a> | <a href=\"/bank/profile\">Profile</a> | <a href=\"/bank/logout\">Log out</a></div>\n<h1>");
    w.s(title.as_bytes());
    w.s(b"</h1>\n");
}

fn accounts_table(w: &mut Writer, recs: Records) {
    let (acc, n) = recs.accounts();
    w.s(b"<table class=\"accounts\"><tr><th>Account</th><th>Type</th><th>Balance</th></tr>\n");
    for a in &acc[..n] {
        w.s(b"<tr><td>");
        w.num(a.number, 12);
        w.td();
        w.name(&Name::new(a.kind).0);
        w.td();
        w.money(a.balance_cents);
        w.s(b"</td></tr>\n");
    }
    w.s(b"</table>\n");
}

fn account_select(w: &mut Writer, recs: Records, field: &str) {
    let (acc, n) = recs.accounts();
    w.s(b"<select name=\"");
    w.s(field.as_bytes());
    w.s(b"\">");
    for (i, a) in acc[..n].iter().enumerate() {
        w.s(b"<option value=\"");
        w.num(i as u64, 1);
        w.s(b"\">");
        w.num(a.number, 12);
        w.s(b"</option>");
    }
    w.s(b"</select>\n");
}

fn payees_table(w: &mut Writer, recs: Records) {
    let (p, n) = recs.payees();
    w.s(b"<table class=\"payees\"><tr><th>Payee</th><th>Name</th><th>Account</th></tr>\n");
    for p in &p[..n] {
        w.s(b"<tr><td>");
        w.num(p.id as u64, 3);
        w.td();
        w.name(&p.name.0);
        w.td();
        w.num(p.account, 10);
        w.s(b"</td></tr>\n");
    }
    w.s(b"</table>\n");
}

fn profile_table(w: &mut Writer, recs: Records) {
    let p = recs.profile();
    w.s(b"<table class=\"profile\"><tr><td>Name</td><td>");
    w.name(&p.name.0);
    w.s(b"</td></tr>\n<tr><td>Street</td><td>");
    w.name(&p.street.0);
    w.s(b"</td></tr>\n<tr><td>City</td><td>");
    w.name(&p.city.0);
    w.s(b"</td></tr>\n<tr><td>Phone</td><td>");
    w.num(p.phone, 10);
    w.s(b"</td></tr>\n<tr><td>Email</td><td>");
    w.name(&p.email.0);
    w.s(b"</td></tr>\n</table>\n");
}

/// The notice a confirmation page opens with.
fn notice(w: &mut Writer, ok: bool, yes: &str, no: &str) {
    w.s(b"<p class=\"notice\">");
    w.s(if ok { yes.as_bytes() } else { no.as_bytes() });
    w.s(b"</p>\n");
}

fn content(w: &mut Writer, req: &Parsed, recs: Records) {
    let n = &req.nums;
    match req.kind {
        Kind::Login => {
            let p = recs.profile();
            w.s(b"<p>Welcome, ");
            w.name(&p.name.0);
            w.s(b"</p>\n");
            accounts_table(w, recs);
        }
        Kind::AccountSummary => {
            let (acc, count) = recs.accounts();
            accounts_table(w, recs);
            for (i, a) in acc[..count].iter().enumerate() {
                w.s(b"<h2>");
                w.num(a.number, 12);
                w.s(b"</h2>\n<table class=\"txns\"><tr><th>Date</th><th>Description</th><th>Amount</th><th>Check</th></tr>\n");
                for t in recs.transactions(i) {
                    w.s(b"<tr><td>");
                    w.date(t.date);
                    w.td();
                    w.name(&t.merchant.0);
                    w.td();
                    w.money(t.amount_cents);
                    w.td();
                    w.num(t.check as u64, 6);
                    w.s(b"</td></tr>\n");
                }
                w.s(b"</table>\n");
            }
        }
        Kind::AddPayee => {
            w.s(b"<form method=\"post\" action=\"/bank/post_payee\"><label>Name <input name=\"name\" maxlength=\"24\"></label> <label>Account <input name=\"account\" maxlength=\"10\"></label> <button>Add payee</button></form>\n");
        }
        Kind::BillPay => {
            payees_table(w, recs);
            w.s(b"<form method=\"post\" action=\"/bank/post_transfer\">From ");
            account_select(w, recs, "from");
            w.s(b"<input name=\"amount\"> <button>Pay</button></form>\n");
        }
        Kind::BillPayStatus => {
            let (start, end) = (n[0], n[1]);
            w.s(b"<p>Payments from ");
            w.date(start as u32);
            w.s(b" to ");
            w.date(end as u32);
            w.s(b"</p>\n<table class=\"payments\"><tr><th>Date</th><th>Payee</th><th>Amount</th></tr>\n");
            let (payees, _) = recs.payees();
            for p in recs.payments() {
                if (start..=end).contains(&(p.date as u64)) {
                    w.s(b"<tr><td>");
                    w.date(p.date);
                    w.td();
                    w.name(&payees[p.payee as usize - 1].name.0);
                    w.td();
                    w.money(p.amount_cents);
                    w.s(b"</td></tr>\n");
                }
            }
            w.s(b"</table>\n");
        }
        Kind::ChangeProfile => {
            notice(w, true, "Your profile is updated.", "");
            w.s(b"<table class=\"profile\"><tr><td>Street</td><td>");
            w.name(&req.texts[0]);
            w.s(b"</td></tr>\n<tr><td>City</td><td>");
            w.name(&req.texts[1]);
            w.s(b"</td></tr>\n<tr><td>Phone</td><td>");
            w.num(n[0], 10);
            w.s(b"</td></tr>\n</table>\n<h2>Before</h2>\n");
            profile_table(w, recs);
        }
        Kind::CheckDetail => match recs.check(n[0].min(u32::MAX as u64) as u32) {
            Some((account, t)) => {
                w.s(b"<div class=\"check\"><p>Check ");
                w.num(t.check as u64, 6);
                w.s(b" on account ");
                w.num(recs.accounts().0[account].number, 12);
                w.s(b"</p>\n<p>Date ");
                w.date(t.date);
                w.s(b" Pay to ");
                w.name(&t.merchant.0);
                w.s(b" Amount ");
                w.money(-t.amount_cents);
                w.s(b"</p>\n<img src=\"/images/check_front.png\" alt=\"front\"><img src=\"/images/check_back.png\" alt=\"back\"></div>\n");
            }
            None => notice(w, false, "", "No such check on your accounts."),
        },
        Kind::OrderCheck => {
            accounts_table(w, recs);
            w.s(b"<form method=\"post\" action=\"/bank/place_check_order\">Account ");
            account_select(w, recs, "account");
            w.s(b"<select name=\"design\">");
            for (i, d) in CHECK_DESIGNS.iter().enumerate() {
                w.s(b"<option value=\"");
                w.num(i as u64, 1);
                w.s(b"\">");
                w.s(d.as_bytes());
                w.s(b"</option>");
            }
            w.s(b"</select> <input name=\"boxes\"> <button>Order</button></form>\n");
        }
        Kind::PlaceCheckOrder => {
            let (acc, count) = recs.accounts();
            let (a, design, boxes) = (n[0], n[1], n[2]);
            let ok = (a as usize) < count
                && (design as usize) < CHECK_DESIGNS.len()
                && (1..=10).contains(&boxes);
            notice(
                w,
                ok,
                "Your check order is placed.",
                "The order is not valid (account, design, 1 to 10 boxes).",
            );
            if ok {
                w.s(b"<p>Account ");
                w.num(acc[a as usize].number, 12);
                w.s(b" Design ");
                w.name(&Name::new(CHECK_DESIGNS[design as usize]).0);
                w.s(b" Boxes ");
                w.num(boxes, 2);
                w.s(b" Charged ");
                w.money(boxes as i64 * CHECK_BOX_CENTS);
                w.s(b"</p>\n");
            }
        }
        Kind::PostPayee => {
            let ok = (1_000_000_000..10_000_000_000).contains(&n[0]);
            notice(
                w,
                ok,
                "The payee is added.",
                "A payee account has 10 digits.",
            );
            if ok {
                w.s(b"<p>");
                w.name(&req.texts[0]);
                w.s(b" ");
                w.num(n[0], 10);
                w.s(b"</p>\n");
            }
            payees_table(w, recs);
        }
        Kind::PostTransfer => {
            let (acc, count) = recs.accounts();
            let (from, to, amount) = (n[0] as usize, n[1] as usize, n[2]);
            let ok = from < count
                && to < count
                && from != to
                && amount >= 1
                && amount as i64 <= acc[from].balance_cents;
            notice(
                w,
                ok,
                "The transfer is done.",
                "The transfer is not possible (accounts, or funds).",
            );
            if ok {
                let amount = amount as i64;
                w.s(b"<table class=\"accounts\"><tr><th>Account</th><th>Before</th><th>After</th></tr>\n");
                for (i, d) in [(from, -amount), (to, amount)] {
                    w.s(b"<tr><td>");
                    w.num(acc[i].number, 12);
                    w.td();
                    w.money(acc[i].balance_cents);
                    w.td();
                    w.money(acc[i].balance_cents + d);
                    w.s(b"</td></tr>\n");
                }
                w.s(b"</table>\n");
            }
        }
        Kind::Profile => {
            profile_table(w, recs);
            w.s(b"<form method=\"post\" action=\"/bank/change_profile\"><input name=\"street\"> <input name=\"city\"> <input name=\"phone\"> <button>Save</button></form>\n");
        }
        Kind::Transfer => {
            accounts_table(w, recs);
            w.s(b"<form method=\"post\" action=\"/bank/post_transfer\">From ");
            account_select(w, recs, "from");
            w.s(b" To ");
            account_select(w, recs, "to");
            w.s(b"<input name=\"amount\"> <button>Transfer</button></form>\n");
        }
        Kind::Logout => {
            w.s(b"<p>You are logged out. Thank you for banking with us.</p>\n<p><a href=\"/bank/login\">Log in again</a></p>\n");
        }
    }
}
