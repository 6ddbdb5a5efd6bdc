//! The facever service as the engines see it: its CPU function (one memcached get, the
//! probe's histogram, the distance) and its JSON mapping.

use super::db::{FaceDb, Miss};
use super::{decode, lbp, Verdict, ID};
use cohort_engine::Service;
use cohort_proto::{ErrorCode, ErrorPayload};
use std::sync::Arc;

pub struct Facever {
    pub db: Arc<FaceDb>,
    pub threshold: f32,
    pub table: [u8; 256],
}

/// The error a request gets when its reference cannot be had.
pub fn miss_error(person: u32, m: &Miss) -> ErrorPayload {
    match m {
        Miss::NotFound => ErrorPayload::new(
            ErrorCode::NotFound,
            format!("no reference for person {person} in the face database"),
        ),
        Miss::Unavailable(e) => ErrorPayload::new(ErrorCode::Unavailable, e.clone()),
    }
}

impl Service for Facever {
    fn id(&self) -> u16 {
        ID
    }

    fn name(&self) -> &'static str {
        "facever"
    }
    fn tensor_model(&self) -> Option<&dyn cohort_engine::tensor::TensorModel> {
        Some(self)
    }
    fn http_doc(&self) -> Option<cohort_engine::HttpDoc> {
        use super::lbp::{HEIGHT, IMAGE_BYTES, WIDTH};
        let pixels = serde_json::json!({
            "type": "array", "minItems": IMAGE_BYTES, "maxItems": IMAGE_BYTES,
            "items": { "type": "integer", "minimum": 0, "maximum": 255 },
            "description": format!("a {WIDTH}x{HEIGHT} face, row-major, 8-bit grey levels")
        });
        Some(cohort_engine::HttpDoc {
            summary:
                "Whether a face is the enrolled person's (LBP histograms, the gallery in memcached)",
            request: serde_json::json!({
                "type": "object",
                "properties": { "person": { "type": "integer", "minimum": 1 }, "image": pixels },
                "required": ["person", "image"]
            }),
            response: serde_json::json!({
                "type": "object",
                "properties": {
                    "match": { "type": "boolean" },
                    "distance": { "type": "number" },
                    "threshold": { "type": "number" }
                },
                "required": ["match", "distance", "threshold"]
            }),
            example: serde_json::json!({ "person": 1, "image": vec![0u8; IMAGE_BYTES] }),
        })
    }

    fn execute_cpu(&self, payload: &[u8], out: &mut Vec<u8>) -> Result<(), ErrorPayload> {
        let (person, image) = decode(payload)?;
        let reference = self.db.get(person).map_err(|m| miss_error(person, &m))?;
        let probe = lbp::histogram(image, &self.table);
        Verdict::of(lbp::chi_square(&probe, &reference), self.threshold).encode(out);
        Ok(())
    }

    fn json_to_payload(&self, body: &serde_json::Value) -> Result<Vec<u8>, ErrorPayload> {
        super::json_to_payload(body)
    }

    fn payload_to_json(&self, payload: &[u8]) -> serde_json::Value {
        super::payload_to_json(payload)
    }
}
