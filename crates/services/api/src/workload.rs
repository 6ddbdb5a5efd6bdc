//! What the load generator sends to a service and how it checks the answers: each service's
//! folder implements [`Workload`] (its `load.rs`), and the load generator (`crates/load`) drives
//! any of them. A service served as raw HTTP pages is loaded by browser sessions instead
//! ([`PageSessions`]).

use cohort_engine::tensor::{Parameters, Tensor};
use serde_json::Value;

pub trait Workload: Send + Sync {
    fn service(&self) -> u16;
    fn service_name(&self) -> &'static str;
    /// Appends the wire payload of request `seq` to `out`.
    fn payload(&self, seq: u64, out: &mut Vec<u8>);
    /// The JSON body of request `seq` (HTTP).
    fn json(&self, seq: u64) -> Value;
    /// Whether `payload` is the right answer to request `seq`.
    fn check(&self, seq: u64, payload: &[u8]) -> bool;
    fn check_json(&self, seq: u64, v: &Value) -> bool;
    /// Request `seq` over HTTP on a route of the workload's choosing (a collection's
    /// `/v1/collections/{name}/search` or `/upsert`); None, as for every service: a POST of
    /// `json(seq)` to `/v1/{service_name}`.
    fn http_request(&self, _seq: u64) -> Option<HttpRequest> {
        None
    }
    /// What kind of request `seq` is ("search", "upsert"), for the report's latency per kind
    /// (`per_type`); None: one kind.
    fn request_kind(&self, _seq: u64) -> Option<&'static str> {
        None
    }
    /// Request `seq` as the Open Inference Protocol's tensors and parameters, one row (the
    /// gRPC target); None: the workload has no tensor form.
    fn tensors(&self, _seq: u64) -> Option<(Vec<Tensor>, Parameters)> {
        None
    }
    /// Whether `outputs` are the right answer to request `seq` in tensor form.
    fn check_tensors(&self, _seq: u64, _outputs: &[Tensor]) -> bool {
        false
    }
    /// Whether every request is a unary call of a gRPC service of Cohort's own (the
    /// collections'; `grpc_call`) rather than the Open Inference Protocol's `ModelInfer`.
    fn own_grpc(&self) -> bool {
        false
    }
    /// Request `seq` as that call, noted as sent: the method's path and the encoded message.
    fn grpc_call(&self, _seq: u64) -> Option<(&'static str, Vec<u8>)> {
        None
    }
    /// Whether `answer`, call `seq`'s encoded reply, is right.
    fn check_grpc(&self, _seq: u64, _answer: &[u8]) -> bool {
        false
    }
    /// Extra report fields measured over the checked answers (e.g. recall_at_k).
    fn extra(&self) -> serde_json::Map<String, Value> {
        serde_json::Map::new()
    }
    /// Forgets what `extra` measured (between the points of a sweep).
    fn reset(&self) {}
    /// What a wrong answer may mean for this workload, shown under a load table that has
    /// some (a generator that predicts answers from a model, for instance).
    fn wrong_answer_hint(&self) -> Option<&'static str> {
        None
    }
    /// A service served as raw HTTP pages is loaded by sessions of browsers, over HTTP only
    /// (then `payload`, `json` and the checks above are never called).
    fn pages(&self) -> Option<&dyn PageSessions> {
        None
    }
}

/// An HTTP request a workload sends on a route of its own (`Workload::http_request`).
#[derive(Debug, Clone, PartialEq)]
pub struct HttpRequest {
    /// "POST", "PUT", "GET" or "DELETE".
    pub method: &'static str,
    /// Path and query.
    pub path: String,
    pub body: Value,
}

/// What the load generator's command line gives a service's workload (each service reads what
/// is about it).
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Bytes of payload per request (services that echo bytes).
    pub payload_bytes: usize,
    /// Busy time per request (spin).
    pub spin_us: u32,
    /// Query vectors and ground truth (k-NN), neighbours per query, cells probed.
    pub queries: Option<std::path::PathBuf>,
    pub gt: Option<std::path::PathBuf>,
    pub k: usize,
    pub nprobe: u16,
    /// Query vectors carried by one request (k-NN: 1..=1024; 1 is today's one-query
    /// request). Services whose requests carry one row ignore it.
    pub queries_per_request: usize,
    /// Users of the server's backend (services that keep per-user records; the server's
    /// setting of the same name).
    pub users: u32,
    /// A folder holding the workload's data set (lenet: an MNIST folder; unset: the
    /// workload's built-in sample).
    pub data: Option<std::path::PathBuf>,
    /// The served model's weights, for workloads that check answers by predicting them
    /// (unset: the model the service ships).
    pub model: Option<std::path::PathBuf>,
}

/// A page service's load: one browser per connection.
pub trait PageSessions: Send + Sync {
    /// The browser of connection `connection` of `connections` (seeded by `seed`).
    fn browser(&self, connection: usize, connections: usize, seed: u64) -> Box<dyn PageBrowser>;
}

/// One HTTP request of a browser.
#[derive(Debug, Clone)]
pub struct PageRequest {
    /// What kind of page, for the report's per-kind counts.
    pub kind: &'static str,
    pub post: bool,
    /// Path and query.
    pub target: String,
    /// `Cookie` header, if the session has one.
    pub cookie: Option<String>,
    pub body: Vec<u8>,
}

/// A page as the server answered it.
#[derive(Debug, Clone)]
pub struct PageAnswer<'a> {
    pub status: u16,
    /// The `Set-Cookie` header, if any.
    pub set_cookie: Option<&'a str>,
    pub body: &'a [u8],
}

/// One connection's browsing: the next request, and the answer's check and effect on the
/// session.
pub trait PageBrowser: Send {
    fn next(&mut self) -> PageRequest;
    /// Checks the answer to the request `next` gave last (None: no answer came); an error names
    /// what was wrong ("http_503", "wrong_answer").
    fn answered(&mut self, answer: Option<&PageAnswer<'_>>) -> Result<(), String>;
}

/// Payload bytes derived from the sequence number, so every answer can be checked.
pub fn pattern(seq: u64, len: usize, out: &mut Vec<u8>) {
    let s = seq.to_le_bytes();
    out.extend((0..len).map(|i| s[i % 8] ^ (i / 8) as u8));
}

pub fn text_pattern(seq: u64, len: usize) -> String {
    let s = format!("{seq:x}-");
    s.chars().cycle().take(len).collect()
}

/// A workload's count of checked answers and of those right against the data set's truth
/// (lenet's digits, facever's verdicts), reported as `accuracy`.
#[derive(Debug, Default)]
pub struct AccuracyCount {
    answered: std::sync::atomic::AtomicU64,
    right: std::sync::atomic::AtomicU64,
}

impl AccuracyCount {
    pub fn record(&self, right: bool) {
        use std::sync::atomic::Ordering::Relaxed;
        self.answered.fetch_add(1, Relaxed);
        if right {
            self.right.fetch_add(1, Relaxed);
        }
    }

    /// `{"accuracy": right / answered}`, or nothing before the first answer.
    pub fn extra(&self) -> serde_json::Map<String, Value> {
        use std::sync::atomic::Ordering::Relaxed;
        let n = self.answered.load(Relaxed);
        let mut m = serde_json::Map::new();
        if n > 0 {
            m.insert(
                "accuracy".into(),
                (self.right.load(Relaxed) as f64 / n as f64).into(),
            );
        }
        m
    }

    pub fn reset(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        self.answered.store(0, Relaxed);
        self.right.store(0, Relaxed);
    }
}
