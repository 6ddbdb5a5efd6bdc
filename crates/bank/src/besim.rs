//! The backend (Rhythm's Besim, SPECweb's BeSim): every user's profile, accounts, payees,
//! transactions, checks and scheduled payments, a pure function of the user id and nothing
//! else. Nothing is stored, so a million users cost no memory and the load generator computes
//! the very records the server shows - a wrong balance on a page is caught. Updates (transfers,
//! new payees, profile changes) are confirmed on their pages but not kept, as BeSim's are not.
//!
//! Every field has a fixed width (names padded with spaces, amounts in cents), so a GPU thread
//! renders them with the same stores as its neighbours.

/// Users are 1..=users.
pub const DEFAULT_USERS: u32 = 1_000_000;
pub const MAX_ACCOUNTS: usize = 6;
pub const MAX_PAYEES: usize = 10;
/// Transactions listed per account on the summary.
pub const TXNS_PER_ACCOUNT: usize = 8;
/// Scheduled payments per user (bill-pay status lists those in the asked date range).
pub const PAYMENTS: usize = 32;
/// Width of every name-like field (bytes, space padded).
pub const NAME: usize = 24;

/// SplitMix64: the one generator of every field (the GPU twin uses the same).
pub fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The `i`th random word of record `salt` of `user`.
fn word(user: u32, salt: u64, i: u64) -> u64 {
    mix(mix((user as u64) << 16 ^ salt) ^ i)
}

pub const FIRST: [&str; 16] = [
    "Ada", "Alan", "Barbara", "Claude", "Donald", "Edsger", "Frances", "Grace", "John", "Ken",
    "Leslie", "Margaret", "Niklaus", "Radia", "Shafi", "Tony",
];
pub const LAST: [&str; 16] = [
    "Allen", "Backus", "Codd", "Dijkstra", "Floyd", "Hamming", "Hoare", "Hopper", "Kahan", "Knuth",
    "Lamport", "Liskov", "Perlman", "Ritchie", "Turing", "Wirth",
];
pub const STREETS: [&str; 8] = [
    "Oak St",
    "Maple Ave",
    "Pine Rd",
    "Cedar Ln",
    "Elm St",
    "Birch Way",
    "Spruce Ct",
    "Ash Blvd",
];
pub const CITIES: [&str; 8] = [
    "Springfield",
    "Riverton",
    "Fairview",
    "Madison",
    "Georgetown",
    "Clinton",
    "Salem",
    "Franklin",
];
pub const ACCOUNT_KINDS: [&str; 4] = ["Checking", "Savings", "Money Market", "Credit Card"];
pub const MERCHANTS: [&str; 16] = [
    "Grocery Mart",
    "Fuel Stop",
    "City Power",
    "Water Works",
    "Book Nook",
    "Cafe Uno",
    "Metro Transit",
    "Phone Co",
    "Pharmacy",
    "Hardware Hub",
    "Cinema 8",
    "Gym Plus",
    "Insurance Co",
    "Pet Supply",
    "Florist",
    "Tax Office",
];
/// Check designs offered on order_check.
pub const CHECK_DESIGNS: [&str; 4] = ["Classic Blue", "Marble", "Scenic Lakes", "Plain Safety"];
/// Price of a box of checks, in cents.
pub const CHECK_BOX_CENTS: i64 = 1_895;

/// A fixed-width text field: `s` cut or padded with spaces to NAME bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Name(pub [u8; NAME]);

impl Name {
    pub fn new(s: &str) -> Name {
        let mut b = [b' '; NAME];
        let n = s.len().min(NAME);
        b[..n].copy_from_slice(&s.as_bytes()[..n]);
        Name(b)
    }
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(&self.0).trim_end())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Profile {
    pub name: Name,
    pub street: Name,
    pub city: Name,
    /// 10 digits.
    pub phone: u64,
    /// `user<id>@bank.example`, padded.
    pub email: Name,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Account {
    /// 12 digits.
    pub number: u64,
    pub kind: &'static str,
    pub balance_cents: i64,
}

impl Account {
    /// The entries past a user's account count.
    pub const NONE: Account = Account {
        number: 0,
        kind: "",
        balance_cents: 0,
    };
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Payee {
    pub id: u32,
    pub name: Name,
    /// 10 digits.
    pub account: u64,
}

impl Payee {
    /// The entries past a user's payee count (a blank name, as a page shows it).
    pub const NONE: Payee = Payee {
        id: 0,
        name: Name([b' '; NAME]),
        account: 0,
    };
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Txn {
    /// YYYYMMDD.
    pub date: u32,
    pub merchant: Name,
    pub amount_cents: i64,
    /// Nonzero for a check.
    pub check: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Payment {
    pub date: u32,
    pub payee: u32,
    pub amount_cents: i64,
}

/// A date of 2026 from a day number 0..336 (12 months of 28 days: every date is valid).
pub fn date_of(day: u64) -> u32 {
    let d = day % 336;
    20260000 + ((d / 28 + 1) * 100 + d % 28 + 1) as u32
}

/// The backend: users 1..=users.
#[derive(Debug, Clone, Copy)]
pub struct Besim {
    pub users: u32,
}

impl Besim {
    pub fn new(users: u32) -> Besim {
        assert!(users >= 1, "the backend needs at least one user");
        Besim { users }
    }

    pub fn exists(&self, user: u32) -> bool {
        (1..=self.users).contains(&user)
    }

    /// The password a user logs in with (the load generator knows it, as SPECweb's does).
    pub fn password(user: u32) -> u64 {
        word(user, 1, 0) % 100_000_000
    }

    pub fn profile(user: u32) -> Profile {
        let w = |i| word(user, 2, i);
        Profile {
            name: Name::new(&format!(
                "{} {}",
                FIRST[(w(0) % 16) as usize],
                LAST[(w(1) % 16) as usize]
            )),
            street: Name::new(&format!(
                "{} {}",
                w(2) % 9000 + 100,
                STREETS[(w(3) % 8) as usize]
            )),
            city: Name::new(CITIES[(w(4) % 8) as usize]),
            phone: 2_000_000_000 + w(5) % 8_000_000_000,
            email: Name::new(&format!("user{user}@bank.example")),
        }
    }

    pub fn accounts(user: u32) -> ([Account; MAX_ACCOUNTS], usize) {
        let n = 1 + (word(user, 3, 0) % MAX_ACCOUNTS as u64) as usize;
        let mut a = [Account::NONE; MAX_ACCOUNTS];
        for (i, acc) in a.iter_mut().enumerate().take(n) {
            let w = |j| word(user, 4 + i as u64, j);
            let kind = ACCOUNT_KINDS[(w(0) % 4) as usize];
            let magnitude = w(1) % 5_000_000; // up to 50,000.00
            *acc = Account {
                number: 100_000_000_000 + (user as u64) * 10 + i as u64,
                kind,
                balance_cents: if kind == "Credit Card" {
                    -((magnitude / 10) as i64)
                } else {
                    magnitude as i64
                },
            };
        }
        (a, n)
    }

    pub fn payees(user: u32) -> ([Payee; MAX_PAYEES], usize) {
        let n = (word(user, 20, 0) % (MAX_PAYEES as u64 + 1)) as usize;
        let mut p = [Payee::NONE; MAX_PAYEES];
        for (i, payee) in p.iter_mut().enumerate().take(n) {
            let w = |j| word(user, 21 + i as u64, j);
            *payee = Payee {
                id: i as u32 + 1,
                name: Name::new(MERCHANTS[(w(0) % 16) as usize]),
                account: 1_000_000_000 + w(1) % 9_000_000_000,
            };
        }
        (p, n)
    }

    /// The recent transactions of account `i` (newest first).
    pub fn transactions(user: u32, account: usize) -> [Txn; TXNS_PER_ACCOUNT] {
        let mut t = [Txn {
            date: 0,
            merchant: Name::new(""),
            amount_cents: 0,
            check: 0,
        }; TXNS_PER_ACCOUNT];
        for (j, txn) in t.iter_mut().enumerate() {
            let w = |k| word(user, 40 + account as u64, j as u64 * 4 + k);
            let is_check = w(0) % 4 == 0;
            *txn = Txn {
                date: date_of(335 - (j as u64 * 9 + w(1) % 9)),
                merchant: Name::new(MERCHANTS[(w(2) % 16) as usize]),
                amount_cents: -((w(3) % 40_000) as i64 + 100),
                check: if is_check {
                    Self::check_number(account, j)
                } else {
                    0
                },
            };
        }
        t
    }

    /// The number of the check that is transaction `j` of account `i`.
    pub fn check_number(account: usize, j: usize) -> u32 {
        1000 + (account * TXNS_PER_ACCOUNT + j) as u32
    }

    /// Scheduled bill payments of the year (in date order).
    pub fn payments(user: u32) -> [Payment; PAYMENTS] {
        let payees = Self::payees(user).1.max(1) as u64;
        let mut p = [Payment {
            date: 0,
            payee: 0,
            amount_cents: 0,
        }; PAYMENTS];
        for (i, pay) in p.iter_mut().enumerate() {
            let w = |k| word(user, 60, i as u64 * 3 + k);
            *pay = Payment {
                date: date_of(i as u64 * 10 + w(0) % 10),
                payee: 1 + (w(1) % payees) as u32,
                amount_cents: (w(2) % 100_000) as i64 + 500,
            };
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::super::record::Records;
    use super::*;

    #[test]
    fn records_are_deterministic_and_bounded() {
        for user in [1u32, 2, 77, 999_999, 1_000_000] {
            assert_eq!(Besim::profile(user), Besim::profile(user));
            let (acc, n) = Besim::accounts(user);
            assert!((1..=MAX_ACCOUNTS).contains(&n));
            for a in &acc[..n] {
                assert!(a.balance_cents.abs() <= 5_000_000);
            }
            assert!(Besim::payees(user).1 <= MAX_PAYEES);
            let pays = Besim::payments(user);
            assert!(pays.windows(2).all(|w| w[0].date <= w[1].date));
            for (i, _) in acc[..n].iter().enumerate() {
                for (j, t) in Besim::transactions(user, i).iter().enumerate() {
                    if t.check != 0 {
                        assert_eq!(Records::Computed(user).check(t.check), Some((i, *t)));
                        assert_eq!(t.check, Besim::check_number(i, j));
                    }
                }
            }
        }
        assert_ne!(Besim::profile(1), Besim::profile(2));
        assert_eq!(Records::Computed(1).check(999), None);
    }

    #[test]
    fn dates_are_valid() {
        for d in 0..336 {
            let x = date_of(d);
            let (m, day) = (x / 100 % 100, x % 100);
            assert!((1..=12).contains(&m) && (1..=28).contains(&day), "{x}");
        }
    }
}
