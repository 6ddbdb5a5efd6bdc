//! What requests to send and how to check their answers.

use cohort_proto::service_id;
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
    /// Extra report fields measured over the checked answers (e.g. recall_at_k).
    fn extra(&self) -> serde_json::Map<String, Value> {
        serde_json::Map::new()
    }
    /// Forgets what `extra` measured (between the points of a sweep).
    fn reset(&self) {}
}

/// Payload bytes derived from the sequence number, so every answer can be checked.
fn pattern(seq: u64, len: usize, out: &mut Vec<u8>) {
    let s = seq.to_le_bytes();
    out.extend((0..len).map(|i| s[i % 8] ^ (i / 8) as u8));
}

fn text_pattern(seq: u64, len: usize) -> String {
    let s = format!("{seq:x}-");
    s.chars().cycle().take(len).collect()
}

pub struct EchoWorkload {
    pub payload_bytes: usize,
}

impl Workload for EchoWorkload {
    fn service(&self) -> u16 {
        service_id::ECHO
    }
    fn service_name(&self) -> &'static str {
        "echo"
    }
    fn payload(&self, seq: u64, out: &mut Vec<u8>) {
        pattern(seq, self.payload_bytes, out);
    }
    fn json(&self, seq: u64) -> Value {
        serde_json::json!({ "data": text_pattern(seq, self.payload_bytes) })
    }
    fn check(&self, seq: u64, payload: &[u8]) -> bool {
        let mut want = Vec::with_capacity(self.payload_bytes);
        pattern(seq, self.payload_bytes, &mut want);
        payload == want
    }
    fn check_json(&self, seq: u64, v: &Value) -> bool {
        v.get("data").and_then(|d| d.as_str()) == Some(&text_pattern(seq, self.payload_bytes))
    }
}

pub struct SpinWorkload {
    pub spin_us: u32,
    pub payload_bytes: usize,
}

impl Workload for SpinWorkload {
    fn service(&self) -> u16 {
        service_id::SPIN
    }
    fn service_name(&self) -> &'static str {
        "spin"
    }
    fn payload(&self, seq: u64, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.spin_us.to_le_bytes());
        pattern(seq, self.payload_bytes, out);
    }
    fn json(&self, seq: u64) -> Value {
        serde_json::json!({ "spin_us": self.spin_us, "data": text_pattern(seq, self.payload_bytes) })
    }
    fn check(&self, seq: u64, payload: &[u8]) -> bool {
        let mut want = Vec::new();
        self.payload(seq, &mut want);
        payload == want
    }
    fn check_json(&self, seq: u64, v: &Value) -> bool {
        v.get("data").and_then(|d| d.as_str()) == Some(&text_pattern(seq, self.payload_bytes))
            && v.get("spin_us").and_then(|d| d.as_u64()) == Some(self.spin_us as u64)
    }
}
