//! `bank`: a dynamic web-banking service (SPECweb2009 Banking's shapes, as Rhythm serves it).
//! A request is the raw HTTP/1.1 request; the answer is the raw HTTP/1.1 response - a page
//! of real HTML from the user's records, or a 4xx/5xx page. The path through it is the one
//! the GPU backend runs per cohort: [`parse`] (one request) -> [`session`] (login creates,
//! logout removes, the rest must match) -> [`besim`] (the backend records) -> [`page`].

pub mod backend;
pub mod besim;
pub mod client;
pub mod cuda;
pub mod gpu;
pub mod kinds;
pub mod page;
pub mod parse;
pub mod session;

use besim::Besim;
use cohort_engine::Service;
use cohort_proto::{service_id, ErrorPayload};
use kinds::Kind;
use page::SessionChange;
use parse::Refusal;
use session::Sessions;

#[derive(Debug, Clone)]
pub struct BankConfig {
    /// Users 1..=users in the backend.
    pub users: u32,
    /// Live sessions at most.
    pub max_sessions: usize,
    /// The key of the session tokens (random per server unless given).
    pub secret: u64,
}

impl Default for BankConfig {
    fn default() -> Self {
        BankConfig {
            users: besim::DEFAULT_USERS,
            max_sessions: 1 << 20,
            secret: rand::random(),
        }
    }
}

pub struct Bank {
    pub besim: Besim,
    pub sessions: Sessions,
}

impl Bank {
    pub fn new(cfg: &BankConfig) -> Bank {
        Bank {
            besim: Besim::new(cfg.users),
            sessions: Sessions::new(cfg.users, cfg.max_sessions, cfg.secret),
        }
    }

    /// Serves one raw request: the response bytes into `out` (cleared first). Returns the
    /// request's type where it was parsed, and the refusal if any.
    pub fn serve(&self, req: &[u8], out: &mut Vec<u8>) -> (Option<Kind>, Option<Refusal>) {
        let parsed = match parse::parse(req) {
            Ok(p) => p,
            Err(r) => {
                page::refusal(r, out);
                return (None, Some(r));
            }
        };
        let done = match parsed.kind {
            Kind::Login => {
                let (user, password) = (parsed.nums[0], parsed.nums[1]);
                let user = u32::try_from(user).unwrap_or(0);
                if !self.besim.exists(user) || Besim::password(user) != password {
                    Err(Refusal::BadLogin)
                } else {
                    self.sessions
                        .login(user)
                        .map(|c| (user, SessionChange::Opened(c)))
                }
            }
            Kind::Logout => self
                .sessions
                .logout(parsed.cookie)
                .map(|u| (u, SessionChange::Closed)),
            _ => self
                .sessions
                .check(parsed.cookie)
                .map(|u| (u, SessionChange::None)),
        };
        match done {
            Ok((user, change)) => {
                page::render(&parsed, user, change, out);
                (Some(parsed.kind), None)
            }
            Err(r) => {
                page::refusal(r, out);
                (Some(parsed.kind), Some(r))
            }
        }
    }
}

impl Service for Bank {
    fn id(&self) -> u16 {
        service_id::BANK
    }
    fn name(&self) -> &'static str {
        "bank"
    }
    fn execute_cpu(&self, payload: &[u8], out: &mut Vec<u8>) -> Result<(), ErrorPayload> {
        self.serve(payload, out);
        Ok(())
    }
    /// Over the JSON gateway a request is `{"http": "<the raw request>"}` (the pages
    /// themselves are served under /bank/ on the HTTP port).
    fn json_to_payload(&self, body: &serde_json::Value) -> Result<Vec<u8>, ErrorPayload> {
        match body.get("http") {
            Some(serde_json::Value::String(s)) => Ok(s.as_bytes().to_vec()),
            _ => Err(crate::bad_request(
                "bank takes {\"http\": \"<raw HTTP/1.1 request>\"} (or GET/POST /bank/PAGE)",
            )),
        }
    }
    fn payload_to_json(&self, payload: &[u8]) -> serde_json::Value {
        serde_json::json!({ "http": String::from_utf8_lossy(payload) })
    }
}
