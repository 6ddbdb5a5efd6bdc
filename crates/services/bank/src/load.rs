//! The load generator's bank workload: sessions of the Table 2 mix (login, pages, logout)
//! replayed by browsers over HTTP/1.1 keep-alive connections, every page compared byte for
//! byte with the one the backend records give (`client`).

use super::client::{self, Step};
use super::kinds::{Kind, Method};
use super::parse::Cookie;
use cohort_service_api::workload::{PageAnswer, PageBrowser, PageRequest, PageSessions, Workload};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;

pub struct BankWorkload {
    /// Users of the server's backend (its `users` setting).
    pub users: u32,
}

impl Workload for BankWorkload {
    fn service(&self) -> u16 {
        super::ID
    }
    fn service_name(&self) -> &'static str {
        "bank"
    }
    // The bank is driven by sessions (`pages`), never by sequence numbers: the load generator
    // refuses every other transport for it before anything is sent.
    fn payload(&self, _: u64, _: &mut Vec<u8>) {
        unreachable!("bank requests come from sessions")
    }
    fn json(&self, _: u64) -> Value {
        unreachable!("bank requests come from sessions")
    }
    fn check(&self, _: u64, _: &[u8]) -> bool {
        false
    }
    fn check_json(&self, _: u64, _: &Value) -> bool {
        false
    }
    fn pages(&self) -> Option<&dyn PageSessions> {
        Some(self)
    }
}

impl PageSessions for BankWorkload {
    fn browser(&self, connection: usize, connections: usize, seed: u64) -> Box<dyn PageBrowser> {
        Box::new(Browser::new(self.users, connection, connections, seed))
    }
}

/// One connection's browsing: its users are `first, first + stride, ...` (no two connections
/// share a user, so no login ends another connection's session).
struct Browser {
    rng: SmallRng,
    users: u32,
    first: u32,
    stride: u32,
    session: Option<(u32, Cookie)>,
    /// The request in flight and what checks its answer.
    last: Option<Visit>,
}

struct Visit {
    step: Step,
    user: u32,
}

impl Browser {
    fn new(users: u32, connection: usize, connections: usize, seed: u64) -> Browser {
        let stride = connections.min(users as usize).max(1) as u32;
        Browser {
            rng: SmallRng::seed_from_u64(seed ^ (connection as u64).wrapping_mul(0x9e37_79b9)),
            users,
            first: 1 + (connection as u32 % stride),
            stride,
            session: None,
            last: None,
        }
    }

    /// Records the answer's effect on the session: a login's cookie, a logout, or a lost
    /// session (any refusal: log in again).
    fn after(&mut self, v: &Visit, ok: bool, set: Option<Cookie>) {
        self.session = match (v.step.kind, ok, set) {
            (Kind::Login, true, Some(c)) => Some((v.user, c)),
            (Kind::Logout, _, _) | (_, false, _) => None,
            _ => self.session,
        };
    }
}

impl PageBrowser for Browser {
    /// A request drawn from the mix (a page needing a session starts with a login; a login
    /// while logged in abandons the session, as a SPECweb user does).
    fn next(&mut self) -> PageRequest {
        let mut kind = client::draw(&mut self.rng);
        if kind != Kind::Login && self.session.is_none() {
            kind = Kind::Login;
        }
        let (user, cookie) = match (kind, self.session) {
            (Kind::Login, _) | (_, None) => {
                let span = (self.users - self.first) / self.stride + 1;
                (self.first + self.stride * self.rng.gen_range(0..span), None)
            }
            (_, Some((u, c))) => (u, Some(c)),
        };
        let step = client::step(kind, user, &mut self.rng);
        let req = PageRequest {
            kind: kind.name(),
            post: kind.info().method == Method::Post,
            target: step.target().to_string(),
            cookie: cookie.map(|c| format!("SID={}", super::page::cookie_value(c))),
            body: step.body().as_bytes().to_vec(),
        };
        self.last = Some(Visit { step, user });
        req
    }

    /// 200 and exactly the expected body (a login's cookie read from its header).
    fn answered(&mut self, answer: Option<&PageAnswer<'_>>) -> Result<(), String> {
        let v = self.last.take().expect("answered follows next");
        let Some(p) = answer else {
            self.after(&v, false, None);
            return Err("no_answer".into());
        };
        if p.status != 200 {
            self.after(&v, false, None);
            return Err(format!("http_{}", p.status));
        }
        let set = p
            .set_cookie
            .and_then(|s| client::set_cookie(format!("X\r\nSet-Cookie: {s}\r\n\r\n").as_bytes()));
        let want = v.step.expected(v.user, set);
        let body_at = want
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("rendered pages have a header")
            + 4;
        let ok = p.body[..] == want[body_at..];
        self.after(&v, ok, set);
        if ok {
            Ok(())
        } else {
            Err("wrong_answer".into())
        }
    }
}
