//! The bank workload: sessions of the Table 2 mix (login, pages, logout) replayed over
//! HTTP/1.1 keep-alive connections, every page compared byte for byte with the one the
//! backend records give (`cohort_services::bank::client`).

use crate::workload::Workload;
use cohort_services::bank::client::{self, Step};
use cohort_services::bank::kinds::Kind;
use cohort_services::bank::parse::Cookie;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;

pub struct BankWorkload {
    /// Users of the server's backend (its --bank-users).
    pub users: u32,
}

impl Workload for BankWorkload {
    fn service(&self) -> u16 {
        cohort_services::bank::ID
    }
    fn service_name(&self) -> &'static str {
        "bank"
    }
    // The bank is driven by sessions (`transport::pages`), never by sequence numbers: run()
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
    fn as_bank(&self) -> Option<&BankWorkload> {
        Some(self)
    }
}

/// One connection's browsing: its users are `first, first + stride, ...` (no two connections
/// share a user, so no login ends another connection's session).
pub(crate) struct Browser {
    rng: SmallRng,
    users: u32,
    first: u32,
    stride: u32,
    session: Option<(u32, Cookie)>,
}

/// The next request of a browser, and what checks its answer.
pub(crate) struct Visit {
    pub step: Step,
    pub user: u32,
    pub cookie: Option<Cookie>,
}

impl Browser {
    pub fn new(users: u32, connection: usize, connections: usize, seed: u64) -> Browser {
        let stride = connections.min(users as usize).max(1) as u32;
        Browser {
            rng: SmallRng::seed_from_u64(seed ^ (connection as u64).wrapping_mul(0x9e37_79b9)),
            users,
            first: 1 + (connection as u32 % stride),
            stride,
            session: None,
        }
    }

    /// A request drawn from the mix (a page needing a session starts with a login; a login
    /// while logged in abandons the session, as a SPECweb user does).
    pub fn next(&mut self) -> Visit {
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
        Visit {
            step: client::step(kind, user, &mut self.rng),
            user,
            cookie,
        }
    }

    /// Records the answer's effect on the session: a login's cookie, a logout, or a lost
    /// session (any refusal: log in again).
    pub fn answered(&mut self, v: &Visit, ok: bool, set: Option<Cookie>) {
        self.session = match (v.step.kind, ok, set) {
            (Kind::Login, true, Some(c)) => Some((v.user, c)),
            (Kind::Logout, _, _) | (_, false, _) => None,
            _ => self.session,
        };
    }
}
