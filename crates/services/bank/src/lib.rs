//! `bank`: a dynamic web-banking service (SPECweb2009 Banking's shapes, as Rhythm serves it).
//! A request is the raw HTTP/1.1 request; the answer is the raw HTTP/1.1 response - a page
//! of real HTML from the user's records, or a 4xx/5xx page. The path through it is the one
//! the GPU backend runs per cohort: [`parse`] (one request) -> [`session`] (login creates,
//! logout removes, the rest must match) -> [`besim`] (the backend records) -> [`page`].

#[cfg(feature = "backends")]
pub mod backend;
#[cfg(feature = "backends")]
pub mod bench;
#[cfg(feature = "backends")]
pub mod config;
#[cfg(feature = "backends")]
pub mod cuda;
#[cfg(feature = "backends")]
pub mod gpu;
#[cfg(feature = "backends")]
pub mod gpu_checks;
#[cfg(feature = "backends")]
pub mod gpu_records;
#[cfg(feature = "backends")]
pub mod kernels;
pub mod load;
#[cfg(feature = "backends")]
pub mod slice;
#[cfg(feature = "backends")]
pub mod store;
#[cfg(test)]
mod tests;

/// The banking library's parts, under the service's name (its backends and kernels' twins).
pub use cohort_bank::{besim, client, kinds, page, parse, record, session};

use besim::Besim;
use cohort_engine::Service;
use cohort_proto::ErrorPayload;
use kinds::Kind;
use page::SessionChange;
use parse::{Parsed, Refusal};
use record::Records;
use session::Sessions;

/// Its wire id (in every frame header).
pub const ID: u16 = 4;

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

/// Where the cpu path reads a user's records (the GPU path's placements are its backend's).
pub enum Backend {
    /// Computed from the user id per call.
    Computed,
    /// One memcached get per request that reads records (a login's password check and its
    /// page share one).
    #[cfg(feature = "backends")]
    Memcached(store::Memcached),
}

pub struct Bank {
    pub besim: Besim,
    pub sessions: Sessions,
    pub backend: Backend,
}

impl Bank {
    pub fn new(cfg: &BankConfig) -> Bank {
        Bank::with_backend(cfg, Backend::Computed)
    }

    pub fn with_backend(cfg: &BankConfig, backend: Backend) -> Bank {
        Bank {
            besim: Besim::new(cfg.users),
            sessions: Sessions::new(cfg.users, cfg.max_sessions, cfg.secret),
            backend,
        }
    }

    /// The records of `user` (a stored one into `blob`); Unavailable when the backend
    /// cannot give them.
    #[cfg_attr(not(feature = "backends"), allow(unused_variables, clippy::ptr_arg))]
    fn records<'a>(&self, user: u32, blob: &'a mut Vec<u8>) -> Result<Records<'a>, Refusal> {
        match &self.backend {
            Backend::Computed => Ok(Records::Computed(user)),
            #[cfg(feature = "backends")]
            Backend::Memcached(m) => match m.get(user) {
                Ok(v) => {
                    *blob = v;
                    Ok(Records::Stored(blob))
                }
                Err(e) => {
                    tracing::debug!("bank backend: {e}");
                    Err(Refusal::Unavailable)
                }
            },
        }
    }

    /// The session change a parsed request makes and the records its page reads. The
    /// order of the checks is the GPU's: a login's user range, its records, its password,
    /// then the session; any other request's session, then its records (only for the
    /// types that make backend calls).
    fn resolve<'a>(
        &self,
        req: &Parsed,
        blob: &'a mut Vec<u8>,
    ) -> Result<(SessionChange, Records<'a>), Refusal> {
        match req.kind {
            Kind::Login => {
                let user = u32::try_from(req.nums[0]).unwrap_or(0);
                if !self.besim.exists(user) {
                    return Err(Refusal::BadLogin);
                }
                let recs = self.records(user, blob)?;
                if recs.password() != req.nums[1] {
                    return Err(Refusal::BadLogin);
                }
                let cookie = self.sessions.login(user)?;
                Ok((SessionChange::Opened(cookie), recs))
            }
            Kind::Logout => {
                let user = self.sessions.logout(req.cookie)?;
                Ok((SessionChange::Closed, Records::Computed(user)))
            }
            kind => {
                let user = self.sessions.check(req.cookie)?;
                let recs = if kind.info().backend_calls > 0 {
                    self.records(user, blob)?
                } else {
                    Records::Computed(user)
                };
                Ok((SessionChange::None, recs))
            }
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
        let mut blob = Vec::new();
        let done = self.resolve(&parsed, &mut blob);
        match done {
            Ok((change, recs)) => {
                page::render(&parsed, recs, change, out);
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
        ID
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
            _ => Err(cohort_service_api::bad_request(
                "bank takes {\"http\": \"<raw HTTP/1.1 request>\"} (or GET/POST /bank/PAGE)",
            )),
        }
    }
    /// The bank's pages are served at `/bank/...` (its requests are raw HTTP).
    fn serves_http_pages(&self) -> bool {
        true
    }
    fn payload_to_json(&self, payload: &[u8]) -> serde_json::Value {
        serde_json::json!({ "http": String::from_utf8_lossy(payload) })
    }
}
