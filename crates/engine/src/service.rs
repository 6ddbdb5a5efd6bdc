//! The contract every service implements, and the registry the server looks them up in.

use cohort_proto::ErrorPayload;
use std::collections::HashMap;
use std::sync::Arc;

/// A service: a wire schema, a CPU implementation and a JSON mapping for the HTTP gateway.
/// GPU engines add their own kernels per service; the CPU function is their reference twin.
pub trait Service: Send + Sync {
    fn id(&self) -> u16;
    fn name(&self) -> &'static str;
    /// Runs the request on the calling CPU thread. Bad payloads give BAD_REQUEST.
    fn execute_cpu(&self, payload: &[u8]) -> Result<Vec<u8>, ErrorPayload>;
    /// HTTP gateway: JSON request body -> wire payload.
    fn json_to_payload(&self, body: &serde_json::Value) -> Result<Vec<u8>, ErrorPayload>;
    /// HTTP gateway: wire response payload -> JSON.
    fn payload_to_json(&self, payload: &[u8]) -> serde_json::Value;
}

#[derive(Clone, Default)]
pub struct Registry {
    by_id: HashMap<u16, Arc<dyn Service>>,
}

impl Registry {
    pub fn new() -> Registry {
        Registry::default()
    }

    pub fn add(&mut self, s: Arc<dyn Service>) {
        let prev = self.by_id.insert(s.id(), s);
        assert!(prev.is_none(), "two services share an id");
    }

    pub fn get(&self, id: u16) -> Option<&Arc<dyn Service>> {
        self.by_id.get(&id)
    }

    pub fn by_name(&self, name: &str) -> Option<&Arc<dyn Service>> {
        self.by_id.values().find(|s| s.name() == name)
    }

    /// Wire id -> name of every service (metrics labels).
    pub fn names_by_id(&self) -> HashMap<u16, String> {
        self.by_id
            .iter()
            .map(|(id, s)| (*id, s.name().to_string()))
            .collect()
    }

    pub fn names(&self) -> Vec<&'static str> {
        let mut v: Vec<_> = self.by_id.values().map(|s| s.name()).collect();
        v.sort();
        v
    }
}
