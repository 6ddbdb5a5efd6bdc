//! The load generator's reverse workload: payloads derived from the sequence number, answers
//! checked as their reverse.

use cohort_service_api::workload::{text_pattern, Workload};
use serde_json::Value;

pub struct ReverseWorkload {
    /// Bytes per request.
    pub len: usize,
}

impl ReverseWorkload {
    fn text(&self, seq: u64) -> String {
        text_pattern(seq, self.len)
    }
}

impl Workload for ReverseWorkload {
    fn service(&self) -> u16 {
        super::ID
    }
    fn service_name(&self) -> &'static str {
        "reverse"
    }
    fn payload(&self, seq: u64, out: &mut Vec<u8>) {
        out.extend_from_slice(self.text(seq).as_bytes());
    }
    fn json(&self, seq: u64) -> Value {
        serde_json::json!({ "data": self.text(seq) })
    }
    fn check(&self, seq: u64, payload: &[u8]) -> bool {
        payload.iter().rev().eq(self.text(seq).as_bytes())
    }
    fn check_json(&self, seq: u64, v: &Value) -> bool {
        v.get("data").and_then(|d| d.as_str())
            == Some(&self.text(seq).chars().rev().collect::<String>())
    }
}
