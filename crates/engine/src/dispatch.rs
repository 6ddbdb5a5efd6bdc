//! How an ingress picks one lane of an engine for a request (see `IngressEnds::send`).

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DispatchPolicy {
    /// Lanes in turn; a full lane passes the request to the next one.
    RoundRobin,
    /// The lane whose request ring from this ingress holds the fewest messages; a full lane
    /// passes the request on.
    LeastLoaded,
    /// Lane chosen by request id, so a client can keep related requests together; a full
    /// lane answers OVERLOADED.
    KeyHash,
}

impl std::str::FromStr for DispatchPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "round-robin" | "rr" => Ok(DispatchPolicy::RoundRobin),
            "least-loaded" => Ok(DispatchPolicy::LeastLoaded),
            "key-hash" => Ok(DispatchPolicy::KeyHash),
            _ => Err(format!(
                "unknown dispatch policy {s:?} (round-robin, least-loaded, key-hash)"
            )),
        }
    }
}
