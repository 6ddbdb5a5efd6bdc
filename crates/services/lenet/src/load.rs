//! The load generator's lenet workload: MNIST images (an MNIST folder's test set, or the 1000
//! digits built in), every answer checked against what the served model answers on the CPU
//! (the digit exactly, the scores within a tolerance that covers the GPU's order of sums and
//! tensor-core rounding), and the accuracy against the true labels reported.

use super::mnist::{self, Digits, Split};
use super::model::{self, Weights, CLASSES};
use cohort_engine::tensor::{DataType, Parameters, Tensor};
use cohort_service_api::workload::{AccuracyCount, LoadOptions, Workload};
use rayon::prelude::*;
use serde_json::Value;

pub struct LenetWorkload {
    digits: Digits,
    /// The served model's answer to each image, computed here on the CPU.
    expected: Vec<(u8, [f32; CLASSES])>,
    accuracy: AccuracyCount,
}

/// How far an engine's score may be from the CPU twin's: absolute, plus relative to its size.
pub const SCORE_TOLERANCE: f32 = 2e-2;

impl LenetWorkload {
    pub fn from_options(o: &LoadOptions) -> Result<LenetWorkload, String> {
        let digits = match &o.data {
            Some(dir) => mnist::read_split(dir, Split::Test)?,
            None => mnist::embedded_test_subset(),
        };
        let weights = Weights::load(o.model.as_deref())?;
        Ok(LenetWorkload::new(digits, &weights))
    }

    pub fn new(digits: Digits, weights: &Weights) -> LenetWorkload {
        let expected = (0..digits.len())
            .into_par_iter()
            .map_init(model::Scratch::default, |s, i| {
                let l = model::forward(weights, digits.image(i), s);
                (model::argmax(&l), l)
            })
            .collect();
        LenetWorkload {
            digits,
            expected,
            accuracy: AccuracyCount::default(),
        }
    }

    fn index(&self, seq: u64) -> usize {
        (seq % self.digits.len() as u64) as usize
    }

    fn matches(&self, seq: u64, digit: u8, scores: &[f32; CLASSES]) -> bool {
        let i = self.index(seq);
        let (want, want_scores) = &self.expected[i];
        let close = scores
            .iter()
            .zip(want_scores)
            .all(|(g, w)| (g - w).abs() <= SCORE_TOLERANCE * (1.0 + w.abs()));
        if digit != *want || !close {
            return false;
        }
        self.accuracy.record(digit == self.digits.labels[i]);
        true
    }
}

impl Workload for LenetWorkload {
    fn service(&self) -> u16 {
        super::ID
    }
    fn service_name(&self) -> &'static str {
        "lenet"
    }
    fn payload(&self, seq: u64, out: &mut Vec<u8>) {
        out.extend_from_slice(self.digits.image(self.index(seq)));
    }
    fn json(&self, seq: u64) -> Value {
        serde_json::json!({ "image": self.digits.image(self.index(seq)) })
    }
    fn check(&self, seq: u64, payload: &[u8]) -> bool {
        match super::decode_answer(payload) {
            Some((digit, scores)) => self.matches(seq, digit, &scores),
            None => false,
        }
    }
    fn check_json(&self, seq: u64, v: &Value) -> bool {
        let digit = v.get("digit").and_then(Value::as_u64);
        let scores: Option<Vec<f32>> = v.get("scores").and_then(Value::as_array).map(|a| {
            a.iter()
                .filter_map(|x| x.as_f64().map(|f| f as f32))
                .collect()
        });
        match (digit, scores) {
            (Some(d), Some(s)) if d <= 9 && s.len() == CLASSES => {
                let mut arr = [0f32; CLASSES];
                arr.copy_from_slice(&s);
                self.matches(seq, d as u8, &arr)
            }
            _ => false,
        }
    }
    fn tensors(&self, seq: u64) -> Option<(Vec<Tensor>, Parameters)> {
        let image = Tensor {
            name: "image".into(),
            datatype: DataType::Uint8,
            shape: vec![1, 28, 28],
            data: self.digits.image(self.index(seq)).to_vec(),
        };
        Some((vec![image], Parameters::new()))
    }
    fn check_tensors(&self, seq: u64, outputs: &[Tensor]) -> bool {
        let find = |n: &str| outputs.iter().find(|t| t.name == n);
        let class = find("class").and_then(Tensor::i64s);
        let logits = find("logits").and_then(Tensor::f32s);
        match (class.as_deref(), logits) {
            (Some(&[d]), Some(l)) if (0..=9).contains(&d) && l.len() == CLASSES => {
                let mut scores = [0f32; CLASSES];
                scores.copy_from_slice(&l);
                self.matches(seq, d as u8, &scores)
            }
            _ => false,
        }
    }
    /// The accuracy of the answers checked, against MNIST's labels.
    fn extra(&self) -> serde_json::Map<String, Value> {
        self.accuracy.extra()
    }
    fn reset(&self) {
        self.accuracy.reset()
    }
    fn wrong_answer_hint(&self) -> Option<&'static str> {
        Some(
            "the generator predicts every answer with the model the service ships, or the \
             one given to it by --model: a server on other weights answers otherwise; give \
             `cohort load` the server's --model",
        )
    }
}
