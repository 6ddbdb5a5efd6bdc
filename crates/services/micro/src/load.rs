//! The load generator's workloads of echo and spin: payloads derived from the sequence
//! number, so every answer is checked byte for byte.

use cohort_engine::tensor::{byte_elements, bytes_data, DataType, Parameters, Tensor};
use cohort_service_api::workload::{pattern, text_pattern, Workload};
use serde_json::Value;

pub struct EchoWorkload {
    pub payload_bytes: usize,
}

impl Workload for EchoWorkload {
    fn service(&self) -> u16 {
        crate::echo::ID
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
    fn tensors(&self, seq: u64) -> Option<(Vec<Tensor>, Parameters)> {
        let mut p = Vec::with_capacity(self.payload_bytes);
        pattern(seq, self.payload_bytes, &mut p);
        let data = Tensor {
            name: "data".into(),
            datatype: DataType::Bytes,
            shape: vec![1],
            data: bytes_data([&p[..]]),
        };
        Some((vec![data], Parameters::new()))
    }
    fn check_tensors(&self, seq: u64, outputs: &[Tensor]) -> bool {
        let [t] = outputs else { return false };
        let elements = byte_elements(t).unwrap_or_default();
        t.name == "data" && matches!(elements.as_slice(), [e] if self.check(seq, e))
    }
}

pub struct SpinWorkload {
    pub spin_us: u32,
    pub payload_bytes: usize,
}

impl Workload for SpinWorkload {
    fn service(&self) -> u16 {
        crate::spin::ID
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
