//! The 14 request types of the banking workload (SPECweb2009 Banking's shapes, Rhythm's
//! Table 2): path, method, share of the mix, page size and backend calls. The page sizes are
//! exact: every 200 page of a type has that many body bytes (content, then whitespace), so
//! the threads of a cohort write pages of one length - the padding that keeps a warp's writes
//! aligned on the GPU.

/// A request type (its index in [`KINDS`] is its cohort).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    Login = 0,
    AccountSummary,
    AddPayee,
    BillPay,
    BillPayStatus,
    ChangeProfile,
    CheckDetail,
    OrderCheck,
    PlaceCheckOrder,
    PostPayee,
    PostTransfer,
    Profile,
    Transfer,
    Logout,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
}

pub struct KindInfo {
    pub kind: Kind,
    /// The page's name and path under [`PREFIX`].
    pub name: &'static str,
    pub method: Method,
    /// Share of the mix, in hundredths of a percent (Table 2: login 28.17% -> 2817).
    pub mix_bp: u32,
    /// Body bytes of its 200 page (Table 2's KB x 1024).
    pub page_bytes: usize,
    /// Calls to the backend (Besim) a request makes.
    pub backend_calls: u32,
}

/// Every page lives under this path.
pub const PREFIX: &str = "/bank/";

const KB: usize = 1024;

pub const KINDS: [KindInfo; 14] = [
    info(Kind::Login, "login", Method::Post, 2817, 4, 2),
    info(
        Kind::AccountSummary,
        "account_summary",
        Method::Get,
        1977,
        17,
        1,
    ),
    info(Kind::AddPayee, "add_payee", Method::Get, 147, 18, 0),
    info(Kind::BillPay, "bill_pay", Method::Get, 1818, 15, 1),
    info(
        Kind::BillPayStatus,
        "bill_pay_status_output",
        Method::Get,
        292,
        24,
        1,
    ),
    info(
        Kind::ChangeProfile,
        "change_profile",
        Method::Post,
        160,
        29,
        1,
    ),
    info(
        Kind::CheckDetail,
        "check_detail_html",
        Method::Get,
        1106,
        11,
        1,
    ),
    info(Kind::OrderCheck, "order_check", Method::Get, 160, 21, 1),
    info(
        Kind::PlaceCheckOrder,
        "place_check_order",
        Method::Post,
        115,
        25,
        1,
    ),
    info(Kind::PostPayee, "post_payee", Method::Post, 105, 34, 1),
    info(
        Kind::PostTransfer,
        "post_transfer",
        Method::Post,
        160,
        16,
        1,
    ),
    info(Kind::Profile, "profile", Method::Get, 115, 32, 1),
    info(Kind::Transfer, "transfer", Method::Get, 224, 13, 1),
    info(Kind::Logout, "logout", Method::Get, 806, 46, 0),
];

const fn info(
    kind: Kind,
    name: &'static str,
    method: Method,
    mix_bp: u32,
    kb: usize,
    backend_calls: u32,
) -> KindInfo {
    KindInfo {
        kind,
        name,
        method,
        mix_bp,
        page_bytes: kb * KB,
        backend_calls,
    }
}

/// The largest page (logout's 46 KB): a response slot's body.
pub const MAX_PAGE_BYTES: usize = 46 * KB;

impl Kind {
    pub fn info(self) -> &'static KindInfo {
        &KINDS[self as usize]
    }
    pub fn name(self) -> &'static str {
        self.info().name
    }
    pub fn all() -> impl Iterator<Item = Kind> {
        KINDS.iter().map(|k| k.kind)
    }
    pub fn from_index(i: usize) -> Option<Kind> {
        KINDS.get(i).map(|k| k.kind)
    }
    /// The type a path (without the query) names.
    pub fn from_path(path: &[u8]) -> Option<Kind> {
        let name = path.strip_prefix(PREFIX.as_bytes())?;
        KINDS
            .iter()
            .find(|k| k.name.as_bytes() == name)
            .map(|k| k.kind)
    }
    /// Whether a request of this type needs a logged-in session (all but login).
    pub fn needs_session(self) -> bool {
        self != Kind::Login
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_consistent() {
        for (i, k) in KINDS.iter().enumerate() {
            assert_eq!(k.kind as usize, i, "{} out of place", k.name);
            assert_eq!(
                Kind::from_path(format!("/bank/{}", k.name).as_bytes()),
                Some(k.kind)
            );
            assert!(k.page_bytes <= MAX_PAGE_BYTES);
        }
        // Table 2's mix sums to 100.02% (rounding in the paper).
        let total: u32 = KINDS.iter().map(|k| k.mix_bp).sum();
        assert_eq!(total, 10002);
        assert_eq!(Kind::from_path(b"/bank/nope"), None);
        assert_eq!(Kind::from_path(b"/login"), None);
    }
}
