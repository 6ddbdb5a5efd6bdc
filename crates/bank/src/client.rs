//! The client's side of the workload: the Table 2 mix, a request of each type with valid
//! parameters for its user, its raw bytes, and the page the server must answer with. The load
//! generator and the benchmarks build their traffic here; the expected page comes from the
//! backend records (a wrong balance, another user's page or a lost session do not match).

use super::besim::{Besim, CHECK_DESIGNS};
use super::kinds::{Kind, Method, KINDS};
use super::page::{self, SessionChange};
use super::parse::{self, Cookie};
use super::record::Records;
use rand::Rng;

/// One request to send: its type and its form (query for GET, body for POST), URL-encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub kind: Kind,
    pub form: String,
}

/// A request type drawn from the Table 2 mix.
pub fn draw(rng: &mut impl Rng) -> Kind {
    let total: u32 = KINDS.iter().map(|k| k.mix_bp).sum();
    let mut x = rng.gen_range(0..total);
    for k in &KINDS {
        if x < k.mix_bp {
            return k.kind;
        }
        x -= k.mix_bp;
    }
    unreachable!("x < total")
}

/// A request of `kind` for `user` with parameters a user would send (some of them refused
/// by the page, as an overdrawn transfer is).
pub fn step(kind: Kind, user: u32, rng: &mut impl Rng) -> Step {
    let accounts = Besim::accounts(user).1 as u64;
    let form = match kind {
        Kind::Login => format!("userid={user}&password={}", Besim::password(user)),
        Kind::BillPayStatus => {
            let a = rng.gen_range(0..300u64);
            format!(
                "start={}&end={}",
                super::besim::date_of(a),
                super::besim::date_of(a + rng.gen_range(0..36u64))
            )
        }
        Kind::ChangeProfile => format!(
            "street={}+Main+St&city=Town{}&phone={}&save=Save",
            rng.gen_range(1..999),
            rng.gen_range(1..99),
            rng.gen_range(2_000_000_000u64..9_999_999_999)
        ),
        Kind::CheckDetail => {
            // Usually a check the user wrote; sometimes not.
            let a = rng.gen_range(0..accounts) as usize;
            let j = rng.gen_range(0..super::besim::TXNS_PER_ACCOUNT);
            format!("check={}", Besim::check_number(a, j))
        }
        Kind::PlaceCheckOrder => format!(
            "account={}&design={}&boxes={}",
            rng.gen_range(0..accounts),
            rng.gen_range(0..CHECK_DESIGNS.len()),
            rng.gen_range(1..=4)
        ),
        Kind::PostPayee => format!(
            "name=Payee%20{}&account={}",
            rng.gen_range(1..9999),
            rng.gen_range(1_000_000_000u64..9_999_999_999)
        ),
        Kind::PostTransfer => format!(
            "from={}&to={}&amount={}",
            rng.gen_range(0..accounts),
            rng.gen_range(0..accounts),
            rng.gen_range(1..200_000)
        ),
        _ => String::new(),
    };
    Step { kind, form }
}

impl Step {
    /// The request target (path and, for GET, the query).
    pub fn target(&self) -> String {
        let path = format!("{}{}", super::kinds::PREFIX, self.kind.name());
        match (self.kind.info().method, self.form.is_empty()) {
            (Method::Get, false) => format!("{path}?{}", self.form),
            _ => path,
        }
    }
    /// The POST body (empty for GET).
    pub fn body(&self) -> &str {
        match self.kind.info().method {
            Method::Post => &self.form,
            Method::Get => "",
        }
    }
    /// The whole request as a client sends it.
    pub fn raw(&self, cookie: Option<Cookie>) -> Vec<u8> {
        let method = match self.kind.info().method {
            Method::Get => "GET",
            Method::Post => "POST",
        };
        let mut r = format!("{method} {} HTTP/1.1\r\nHost: bank\r\n", self.target());
        if let Some(c) = cookie {
            r += &format!("Cookie: SID={}\r\n", page::cookie_value(c));
        }
        if method == "POST" {
            r += &format!(
                "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n",
                self.body().len()
            );
        }
        r += "\r\n";
        r += self.body();
        r.into_bytes()
    }
    /// The response the server must send to this step of `user`'s session (`opened`: the
    /// cookie a login answer sets, read from that answer).
    pub fn expected(&self, user: u32, opened: Option<Cookie>) -> Vec<u8> {
        let parsed = parse::parse(&self.raw(None)).expect("the client's own requests parse");
        let change = match (self.kind, opened) {
            (Kind::Login, Some(c)) => SessionChange::Opened(c),
            (Kind::Logout, _) => SessionChange::Closed,
            _ => SessionChange::None,
        };
        let mut out = Vec::new();
        page::render(&parsed, Records::Computed(user), change, &mut out);
        out
    }
}

/// The cookie a response sets (`Set-Cookie: SID=<user>-<token>`), if any.
pub fn set_cookie(resp: &[u8]) -> Option<Cookie> {
    let head_end = resp.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&resp[..head_end]).ok()?;
    let v = head
        .lines()
        .find_map(|l| l.strip_prefix("Set-Cookie: SID="))?;
    let v = v.split(';').next()?;
    let (u, t) = v.split_once('-')?;
    Some(Cookie {
        user: u.parse().ok()?,
        token: u64::from_str_radix(t, 16).ok()?,
    })
}
