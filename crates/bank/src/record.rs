//! One user's backend records as one fixed-layout blob: what the stored placements hold (a
//! value in memcached, an entry of the GPU's hash table) and what a page reads instead of
//! computing the records from the user id. The layout is defined here once; the GPU kernels
//! read the same offsets from the generated prelude (`BANK_REC_*`).
//!
//! Little-endian, every field at an offset that is a multiple of its size, so a GPU thread
//! reads it with one aligned load. Names of the profile are stored as text (24 bytes, space
//! padded); the account kind and merchant are stored as their index in the backend's word
//! lists (a dictionary-encoded column).

use super::besim::{
    Account, Besim, Name, Payee, Payment, Profile, Txn, ACCOUNT_KINDS, MAX_ACCOUNTS, MAX_PAYEES,
    MERCHANTS, NAME, PAYMENTS, TXNS_PER_ACCOUNT,
};

pub const PASSWORD: usize = 0;
pub const PHONE: usize = 8;
pub const PROFILE_NAME: usize = 16;
pub const STREET: usize = PROFILE_NAME + NAME;
pub const CITY: usize = STREET + NAME;
pub const EMAIL: usize = CITY + NAME;
pub const N_ACCOUNTS: usize = EMAIL + NAME;
pub const N_PAYEES: usize = N_ACCOUNTS + 4;

/// Account i at ACCOUNTS + i * ACCOUNT: number u64, balance i64 (cents), kind u32.
pub const ACCOUNTS: usize = N_PAYEES + 4;
pub const ACCOUNT: usize = 24;
pub const ACCOUNT_NUMBER: usize = 0;
pub const ACCOUNT_BALANCE: usize = 8;
pub const ACCOUNT_KIND: usize = 16;

/// Payee i (id i + 1) at PAYEES + i * PAYEE: account u64, merchant u32.
pub const PAYEES: usize = ACCOUNTS + MAX_ACCOUNTS * ACCOUNT;
pub const PAYEE: usize = 16;
pub const PAYEE_ACCOUNT: usize = 0;
pub const PAYEE_MERCHANT: usize = 8;

/// Transaction j of account a at TXNS + (a * TXNS_PER_ACCOUNT + j) * TXN: amount i64,
/// date u32, check u16, merchant u16.
pub const TXNS: usize = PAYEES + MAX_PAYEES * PAYEE;
pub const TXN: usize = 16;
pub const TXN_AMOUNT: usize = 0;
pub const TXN_DATE: usize = 8;
pub const TXN_CHECK: usize = 12;
pub const TXN_MERCHANT: usize = 14;

/// Scheduled payment i at PAYMENTS_AT + i * PAYMENT: amount i64, date u32, payee u32.
pub const PAYMENTS_AT: usize = TXNS + MAX_ACCOUNTS * TXNS_PER_ACCOUNT * TXN;
pub const PAYMENT: usize = 16;
pub const PAYMENT_AMOUNT: usize = 0;
pub const PAYMENT_DATE: usize = 8;
pub const PAYMENT_PAYEE: usize = 12;

/// Bytes of one record (a multiple of 8, so records side by side keep their alignment).
pub const BYTES: usize = PAYMENTS_AT + PAYMENTS * PAYMENT;
const _: () = assert!(BYTES.is_multiple_of(8) && ACCOUNTS.is_multiple_of(8));
// Check numbers (1000 + 47 at most) fit the u16 field.
const _: () = assert!(1000 + MAX_ACCOUNTS * TXNS_PER_ACCOUNT < 1 << 16);

/// Every offset and stride, for the CUDA prelude (`BANK_REC_<name>`).
pub const FIELDS: [(&str, usize); 25] = [
    ("PASSWORD", PASSWORD),
    ("PHONE", PHONE),
    ("PROFILE_NAME", PROFILE_NAME),
    ("STREET", STREET),
    ("CITY", CITY),
    ("EMAIL", EMAIL),
    ("N_ACCOUNTS", N_ACCOUNTS),
    ("N_PAYEES", N_PAYEES),
    ("ACCOUNTS", ACCOUNTS),
    ("ACCOUNT", ACCOUNT),
    ("ACCOUNT_NUMBER", ACCOUNT_NUMBER),
    ("ACCOUNT_BALANCE", ACCOUNT_BALANCE),
    ("ACCOUNT_KIND", ACCOUNT_KIND),
    ("PAYEES", PAYEES),
    ("PAYEE", PAYEE),
    ("PAYEE_ACCOUNT", PAYEE_ACCOUNT),
    ("PAYEE_MERCHANT", PAYEE_MERCHANT),
    ("TXNS", TXNS),
    ("TXN", TXN),
    ("TXN_AMOUNT", TXN_AMOUNT),
    ("TXN_DATE", TXN_DATE),
    ("TXN_CHECK", TXN_CHECK),
    ("TXN_MERCHANT", TXN_MERCHANT),
    ("PAYMENTS", PAYMENTS_AT),
    ("BYTES", BYTES),
];

/// Payment fields (the table above is split only to keep each list short).
pub const PAYMENT_FIELDS: [(&str, usize); 4] = [
    ("PAYMENT", PAYMENT),
    ("PAYMENT_AMOUNT", PAYMENT_AMOUNT),
    ("PAYMENT_DATE", PAYMENT_DATE),
    ("PAYMENT_PAYEE", PAYMENT_PAYEE),
];

fn position(list: &[&str], s: &str) -> usize {
    list.iter()
        .position(|x| *x == s)
        .expect("a backend word is in its list")
}

fn merchant_index(n: &Name) -> usize {
    MERCHANTS
        .iter()
        .position(|m| Name::new(m) == *n)
        .expect("a merchant name is in the list")
}

/// Writes the records of `user` (as [`Besim`] computes them) into `out` (BYTES long).
pub fn encode(user: u32, out: &mut [u8]) {
    assert_eq!(out.len(), BYTES, "a record is {BYTES} bytes");
    out.fill(0);
    let put = |out: &mut [u8], at: usize, b: &[u8]| out[at..at + b.len()].copy_from_slice(b);
    put(out, PASSWORD, &Besim::password(user).to_le_bytes());
    let p = Besim::profile(user);
    put(out, PHONE, &p.phone.to_le_bytes());
    put(out, PROFILE_NAME, &p.name.0);
    put(out, STREET, &p.street.0);
    put(out, CITY, &p.city.0);
    put(out, EMAIL, &p.email.0);
    let (acc, na) = Besim::accounts(user);
    put(out, N_ACCOUNTS, &(na as u32).to_le_bytes());
    for (i, a) in acc[..na].iter().enumerate() {
        let at = ACCOUNTS + i * ACCOUNT;
        put(out, at + ACCOUNT_NUMBER, &a.number.to_le_bytes());
        put(out, at + ACCOUNT_BALANCE, &a.balance_cents.to_le_bytes());
        let kind = position(&ACCOUNT_KINDS, a.kind) as u32;
        put(out, at + ACCOUNT_KIND, &kind.to_le_bytes());
        for (j, t) in Besim::transactions(user, i).iter().enumerate() {
            let at = TXNS + (i * TXNS_PER_ACCOUNT + j) * TXN;
            put(out, at + TXN_AMOUNT, &t.amount_cents.to_le_bytes());
            put(out, at + TXN_DATE, &t.date.to_le_bytes());
            put(out, at + TXN_CHECK, &(t.check as u16).to_le_bytes());
            let m = merchant_index(&t.merchant) as u16;
            put(out, at + TXN_MERCHANT, &m.to_le_bytes());
        }
    }
    let (payees, np) = Besim::payees(user);
    put(out, N_PAYEES, &(np as u32).to_le_bytes());
    for (i, p) in payees[..np].iter().enumerate() {
        let at = PAYEES + i * PAYEE;
        put(out, at + PAYEE_ACCOUNT, &p.account.to_le_bytes());
        let m = merchant_index(&p.name) as u32;
        put(out, at + PAYEE_MERCHANT, &m.to_le_bytes());
    }
    for (i, p) in Besim::payments(user).iter().enumerate() {
        let at = PAYMENTS_AT + i * PAYMENT;
        put(out, at + PAYMENT_AMOUNT, &p.amount_cents.to_le_bytes());
        put(out, at + PAYMENT_DATE, &p.date.to_le_bytes());
        put(out, at + PAYMENT_PAYEE, &p.payee.to_le_bytes());
    }
}

/// The records of `user` as a new blob.
pub fn of(user: u32) -> Vec<u8> {
    let mut v = vec![0; BYTES];
    encode(user, &mut v);
    v
}

/// Whether `b` is a record a page can be read from: its size, every count and index within
/// its bounds, every number within the width its page field has (the pages have exact sizes)
/// and every name printable text without HTML's special characters. A value from memcached
/// is checked before a page trusts it.
pub fn valid(b: &[u8]) -> bool {
    if b.len() != BYTES {
        return false;
    }
    let r = Stored(b);
    let (na, np) = (r.u32(N_ACCOUNTS) as usize, r.u32(N_PAYEES) as usize);
    if !(1..=MAX_ACCOUNTS).contains(&na) || np > MAX_PAYEES {
        return false;
    }
    // Money fits its 12 columns (and a transfer's after-balance too) below 10^9 cents.
    let money = |c: i64| c.unsigned_abs() < 1_000_000_000;
    let date = |d: u32| {
        let (y, m, day) = (d / 10000, d / 100 % 100, d % 100);
        y == 2026 && (1..=12).contains(&m) && (1..=28).contains(&day)
    };
    let text = |at: usize| {
        r.0[at..at + NAME]
            .iter()
            .all(|&c| (0x20..0x7f).contains(&c) && !b"<>&\"".contains(&c))
    };
    let accounts = (0..na).all(|i| {
        let at = ACCOUNTS + i * ACCOUNT;
        r.u64(at + ACCOUNT_NUMBER) < 1_000_000_000_000
            && money(r.i64(at + ACCOUNT_BALANCE))
            && (r.u32(at + ACCOUNT_KIND) as usize) < ACCOUNT_KINDS.len()
    });
    let payees = (0..np).all(|i| {
        let at = PAYEES + i * PAYEE;
        r.u64(at + PAYEE_ACCOUNT) < 10_000_000_000
            && (r.u32(at + PAYEE_MERCHANT) as usize) < MERCHANTS.len()
    });
    let txns = (0..na * TXNS_PER_ACCOUNT).all(|k| {
        let at = TXNS + k * TXN;
        let check = r.u16(at + TXN_CHECK) as u32;
        date(r.u32(at + TXN_DATE))
            && money(r.i64(at + TXN_AMOUNT))
            && (check == 0 || check == 1000 + k as u32)
            && (r.u16(at + TXN_MERCHANT) as usize) < MERCHANTS.len()
    });
    let payments = (0..PAYMENTS).all(|i| {
        let at = PAYMENTS_AT + i * PAYMENT;
        date(r.u32(at + PAYMENT_DATE))
            && money(r.i64(at + PAYMENT_AMOUNT))
            && (1..=MAX_PAYEES as u32).contains(&r.u32(at + PAYMENT_PAYEE))
    });
    r.u64(PASSWORD) < 100_000_000
        && r.u64(PHONE) < 10_000_000_000
        && [PROFILE_NAME, STREET, CITY, EMAIL].into_iter().all(text)
        && accounts
        && payees
        && txns
        && payments
}

/// Where a page's records come from: computed from the user id (the in-process backend), or
/// read from a stored record (memcached, the GPU's table). Both give the same values.
#[derive(Clone, Copy)]
pub enum Records<'a> {
    Computed(u32),
    Stored(&'a [u8]),
}

struct Stored<'a>(&'a [u8]);

impl Stored<'_> {
    fn u16(&self, at: usize) -> u16 {
        u16::from_le_bytes(self.0[at..at + 2].try_into().unwrap())
    }
    fn u32(&self, at: usize) -> u32 {
        u32::from_le_bytes(self.0[at..at + 4].try_into().unwrap())
    }
    fn u64(&self, at: usize) -> u64 {
        u64::from_le_bytes(self.0[at..at + 8].try_into().unwrap())
    }
    fn i64(&self, at: usize) -> i64 {
        self.u64(at) as i64
    }
    fn name(&self, at: usize) -> Name {
        Name(self.0[at..at + NAME].try_into().unwrap())
    }
}

impl Records<'_> {
    pub fn password(&self) -> u64 {
        match *self {
            Records::Computed(u) => Besim::password(u),
            Records::Stored(b) => Stored(b).u64(PASSWORD),
        }
    }

    pub fn profile(&self) -> Profile {
        match *self {
            Records::Computed(u) => Besim::profile(u),
            Records::Stored(b) => {
                let r = Stored(b);
                Profile {
                    name: r.name(PROFILE_NAME),
                    street: r.name(STREET),
                    city: r.name(CITY),
                    phone: r.u64(PHONE),
                    email: r.name(EMAIL),
                }
            }
        }
    }

    pub fn accounts(&self) -> ([Account; MAX_ACCOUNTS], usize) {
        match *self {
            Records::Computed(u) => Besim::accounts(u),
            Records::Stored(b) => {
                let r = Stored(b);
                let n = r.u32(N_ACCOUNTS) as usize;
                let mut a = [Account::NONE; MAX_ACCOUNTS];
                for (i, acc) in a.iter_mut().enumerate().take(n) {
                    let at = ACCOUNTS + i * ACCOUNT;
                    *acc = Account {
                        number: r.u64(at + ACCOUNT_NUMBER),
                        kind: ACCOUNT_KINDS[r.u32(at + ACCOUNT_KIND) as usize],
                        balance_cents: r.i64(at + ACCOUNT_BALANCE),
                    };
                }
                (a, n)
            }
        }
    }

    pub fn payees(&self) -> ([Payee; MAX_PAYEES], usize) {
        match *self {
            Records::Computed(u) => Besim::payees(u),
            Records::Stored(b) => {
                let r = Stored(b);
                let n = r.u32(N_PAYEES) as usize;
                let mut p = [Payee::NONE; MAX_PAYEES];
                for (i, payee) in p.iter_mut().enumerate().take(n) {
                    let at = PAYEES + i * PAYEE;
                    *payee = Payee {
                        id: i as u32 + 1,
                        name: Name::new(MERCHANTS[r.u32(at + PAYEE_MERCHANT) as usize]),
                        account: r.u64(at + PAYEE_ACCOUNT),
                    };
                }
                (p, n)
            }
        }
    }

    pub fn transactions(&self, account: usize) -> [Txn; TXNS_PER_ACCOUNT] {
        match *self {
            Records::Computed(u) => Besim::transactions(u, account),
            Records::Stored(b) => {
                let r = Stored(b);
                std::array::from_fn(|j| {
                    let at = TXNS + (account * TXNS_PER_ACCOUNT + j) * TXN;
                    Txn {
                        date: r.u32(at + TXN_DATE),
                        merchant: Name::new(MERCHANTS[r.u16(at + TXN_MERCHANT) as usize]),
                        amount_cents: r.i64(at + TXN_AMOUNT),
                        check: r.u16(at + TXN_CHECK) as u32,
                    }
                })
            }
        }
    }

    pub fn payments(&self) -> [Payment; PAYMENTS] {
        match *self {
            Records::Computed(u) => Besim::payments(u),
            Records::Stored(b) => {
                let r = Stored(b);
                std::array::from_fn(|i| {
                    let at = PAYMENTS_AT + i * PAYMENT;
                    Payment {
                        date: r.u32(at + PAYMENT_DATE),
                        payee: r.u32(at + PAYMENT_PAYEE),
                        amount_cents: r.i64(at + PAYMENT_AMOUNT),
                    }
                })
            }
        }
    }

    /// The transaction a check number names, if the user wrote it.
    pub fn check(&self, number: u32) -> Option<(usize, Txn)> {
        let k = number.checked_sub(1000)? as usize;
        let (account, j) = (k / TXNS_PER_ACCOUNT, k % TXNS_PER_ACCOUNT);
        if account >= self.accounts().1 {
            return None;
        }
        let t = self.transactions(account)[j];
        (t.check == number).then_some((account, t))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stored record reads back every value the computed backend gives.
    #[test]
    fn stored_records_read_as_the_computed_ones() {
        for user in (1..2000u32).chain([999_999, 1_000_000, u32::MAX]) {
            let blob = of(user);
            assert!(valid(&blob), "user {user}");
            let (c, s) = (Records::Computed(user), Records::Stored(&blob));
            assert_eq!(c.password(), s.password());
            assert_eq!(c.profile(), s.profile());
            assert_eq!(c.accounts(), s.accounts());
            assert_eq!(c.payees(), s.payees());
            assert_eq!(c.payments(), s.payments());
            // Only the accounts a user has carry transactions.
            for a in 0..c.accounts().1 {
                assert_eq!(
                    c.transactions(a),
                    s.transactions(a),
                    "user {user} account {a}"
                );
            }
            for n in [0, 999, 1000, 1007, 1040, 1047, 1048, 5000] {
                assert_eq!(c.check(n), s.check(n));
            }
        }
    }

    /// A record `valid` accepts renders every page at its exact size, whatever its bytes:
    /// random damage to good records is either refused or harmless.
    #[test]
    fn every_valid_record_renders_every_page() {
        use super::super::kinds::Kind;
        use super::super::page::{self, SessionChange};
        use super::super::{client, parse};
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        let (mut accepted, mut out) = (0, Vec::new());
        for i in 0..3000u32 {
            let mut b = of(1 + i % 500);
            for _ in 0..rng.gen_range(1..4) {
                let at = rng.gen_range(0..BYTES);
                b[at] = if rng.gen_bool(0.5) {
                    rng.gen()
                } else {
                    b[at] ^ 1
                };
            }
            if !valid(&b) {
                continue;
            }
            accepted += 1;
            for kind in Kind::all() {
                let req = client::step(kind, 1, &mut rng).raw(None);
                let parsed = parse::parse(&req).unwrap();
                page::render(&parsed, Records::Stored(&b), SessionChange::None, &mut out);
                let body = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                assert_eq!(out.len() - body, kind.info().page_bytes, "{kind:?}");
            }
        }
        assert!(accepted > 100, "only {accepted} damaged records passed");
    }

    #[test]
    fn damaged_records_are_refused() {
        let good = of(42);
        assert!(!valid(&good[..BYTES - 1]));
        let mut b = good.clone();
        b[N_ACCOUNTS..N_ACCOUNTS + 4].copy_from_slice(&0u32.to_le_bytes());
        assert!(!valid(&b));
        let mut b = good.clone();
        b[N_PAYEES..N_PAYEES + 4].copy_from_slice(&11u32.to_le_bytes());
        assert!(!valid(&b));
        let mut b = good.clone();
        b[TXNS + TXN_MERCHANT..TXNS + TXN_MERCHANT + 2].copy_from_slice(&16u16.to_le_bytes());
        assert!(!valid(&b));
        let mut b = good.clone();
        let at = ACCOUNTS + ACCOUNT_BALANCE;
        b[at..at + 8].copy_from_slice(&i64::MIN.to_le_bytes());
        assert!(!valid(&b), "a balance wider than its field");
        let mut b = good.clone();
        b[PROFILE_NAME] = b'<';
        assert!(!valid(&b), "markup in a name");
        let mut b = good;
        b[TXNS + TXN_DATE] ^= 0x40;
        assert!(!valid(&b), "an impossible date");
    }
}
