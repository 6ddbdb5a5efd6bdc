//! `lenet`: handwritten digit recognition (Lynx's LeNet service). One request is one 28x28
//! 8-bit grayscale image (MNIST's layout); the answer is the digit and the network's ten
//! scores. The network, its weights file and its CPU forward pass are in [`model`]; the
//! payloads, limits and errors in docs/lenet.md.
//!
//! Wire request: exactly 784 bytes, row-major, 0 = background. Wire answer: 41 bytes, the
//! digit (one byte, 0..=9) then the ten logits as little-endian f32. HTTP: `POST /v1/lenet`
//! with the raw 784 bytes as the body, or JSON: an array of 784 numbers 0..=255 (or
//! `{"image": [...], "timeout_us": N}`); answered `{"digit": 7, "scores": [...]}`.

#[cfg(feature = "backends")]
pub mod bench;
#[cfg(feature = "backends")]
pub mod config;
#[cfg(feature = "backends")]
pub mod gpu;
#[cfg(feature = "backends")]
pub mod kernels;
pub mod load;
pub mod mnist;
pub mod model;
#[cfg(feature = "backends")]
pub mod persistent;
#[cfg(feature = "backends")]
pub mod slice;
pub mod tensors;
#[cfg(feature = "train")]
pub mod train;

use cohort_engine::{JsonRequest, Service};
use cohort_proto::{ErrorCode, ErrorPayload};
use model::{Scratch, Weights, CLASSES, IMAGE_BYTES};
use std::sync::Arc;

pub const ID: u16 = 5;

/// Bytes of an answer: the digit, then ten f32 logits.
pub const ANSWER_BYTES: usize = 1 + 4 * CLASSES;

pub struct Lenet {
    pub weights: Arc<Weights>,
}

/// The payload checked: BAD_REQUEST unless it is one image.
pub fn decode(payload: &[u8]) -> Result<&[u8], ErrorPayload> {
    if payload.len() != IMAGE_BYTES {
        return Err(ErrorPayload::new(
            ErrorCode::BadRequest,
            format!(
                "lenet takes one 28x28 8-bit image: {IMAGE_BYTES} bytes, got {}",
                payload.len()
            ),
        ));
    }
    Ok(payload)
}

/// Writes an answer: the digit the logits name, then the logits.
pub fn encode_answer(logits: &[f32; CLASSES], out: &mut Vec<u8>) {
    out.push(model::argmax(logits));
    for l in logits {
        out.extend_from_slice(&l.to_le_bytes());
    }
}

/// An answer read back: the digit and the logits; None if it is not one.
pub fn decode_answer(payload: &[u8]) -> Option<(u8, [f32; CLASSES])> {
    if payload.len() != ANSWER_BYTES || payload[0] > 9 {
        return None;
    }
    let mut logits = [0f32; CLASSES];
    for (i, l) in logits.iter_mut().enumerate() {
        let b = &payload[1 + 4 * i..5 + 4 * i];
        *l = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
    Some((payload[0], logits))
}

thread_local! {
    /// A worker's scratch space: one forward pass allocates nothing.
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}

impl Service for Lenet {
    fn id(&self) -> u16 {
        ID
    }

    fn name(&self) -> &'static str {
        "lenet"
    }
    fn tensor_model(&self) -> Option<&dyn cohort_engine::tensor::TensorModel> {
        Some(self)
    }
    fn http_doc(&self) -> Option<cohort_engine::HttpDoc> {
        let pixels = serde_json::json!({
            "type": "array", "minItems": IMAGE_BYTES, "maxItems": IMAGE_BYTES,
            "items": { "type": "integer", "minimum": 0, "maximum": 255 },
            "description": "a 28x28 image, row-major, 8-bit grey levels"
        });
        Some(cohort_engine::HttpDoc {
            summary: "The digit LeNet-5 reads in a 28x28 image",
            request: serde_json::json!({ "type": "object", "properties": { "image": pixels }, "required": ["image"] }),
            response: serde_json::json!({
                "type": "object",
                "properties": {
                    "digit": { "type": "integer", "minimum": 0, "maximum": 9 },
                    "scores": { "type": "array", "minItems": CLASSES, "maxItems": CLASSES, "items": { "type": "number" }, "description": "the logits, one per digit" }
                },
                "required": ["digit", "scores"]
            }),
            example: serde_json::json!({ "image": vec![0u8; IMAGE_BYTES] }),
        })
    }

    fn execute_cpu(&self, payload: &[u8], out: &mut Vec<u8>) -> Result<(), ErrorPayload> {
        let image = decode(payload)?;
        let logits = SCRATCH.with(|s| model::forward(&self.weights, image, &mut s.borrow_mut()));
        encode_answer(&logits, out);
        Ok(())
    }

    /// A body of exactly 784 bytes is the raw image (a JSON image is always longer); any
    /// other body is JSON.
    fn json_request<'a>(&self, body: &'a [u8]) -> Result<JsonRequest<'a>, ErrorPayload> {
        if body.len() == IMAGE_BYTES {
            return Ok(JsonRequest {
                payload: body.into(),
                timeout_us: None,
            });
        }
        cohort_engine::json_request_by_value(self, body)
    }

    fn json_to_payload(&self, body: &serde_json::Value) -> Result<Vec<u8>, ErrorPayload> {
        let pixels = match body {
            serde_json::Value::Array(a) => a,
            serde_json::Value::Object(o) => match o.get("image") {
                Some(serde_json::Value::Array(a)) => a,
                _ => {
                    return Err(cohort_service_api::bad_request(
                        "expected {\"image\": [784 numbers]}",
                    ))
                }
            },
            _ => {
                return Err(cohort_service_api::bad_request(
                    "expected an array of 784 numbers",
                ))
            }
        };
        if pixels.len() != IMAGE_BYTES {
            return Err(cohort_service_api::bad_request(format!(
                "an image is {IMAGE_BYTES} pixels, got {}",
                pixels.len()
            )));
        }
        pixels
            .iter()
            .map(|p| {
                p.as_u64()
                    .filter(|&v| v <= 255)
                    .map(|v| v as u8)
                    .ok_or_else(|| {
                        cohort_service_api::bad_request(format!("pixel {p} is not in 0..=255"))
                    })
            })
            .collect()
    }

    fn payload_to_json(&self, payload: &[u8]) -> serde_json::Value {
        match decode_answer(payload) {
            Some((digit, logits)) => serde_json::json!({ "digit": digit, "scores": logits }),
            None => serde_json::json!({ "error": "malformed lenet answer" }),
        }
    }
}

/// The repository's 1000 MNIST test digits (tests, the demo's default load).
#[cfg(test)]
pub(crate) fn testdata_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/testdata")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn service() -> Lenet {
        Lenet {
            weights: Arc::new(Weights::load(None).unwrap()),
        }
    }

    proptest! {
        /// Any bytes: an answer of 41 bytes whose digit is its largest score, or BAD_REQUEST;
        /// never a panic.
        #[test]
        fn any_payload_is_answered_or_refused(
            p in proptest::collection::vec(any::<u8>(), 780..790)
        ) {
            match service().call_cpu(&p) {
                Ok(out) => {
                    prop_assert_eq!(p.len(), IMAGE_BYTES);
                    let (d, l) = decode_answer(&out).expect("an answer");
                    prop_assert_eq!(d, model::argmax(&l));
                }
                Err(e) => {
                    prop_assert!(p.len() != IMAGE_BYTES);
                    prop_assert_eq!(e.code, ErrorCode::BadRequest);
                }
            }
        }
    }

    #[test]
    fn json_and_raw_bodies_map_to_the_same_payload() {
        let s = service();
        let img: Vec<u8> = (0..IMAGE_BYTES).map(|i| (i % 256) as u8).collect();
        let raw = s.json_request(&img).unwrap();
        let arr = serde_json::to_vec(&img).unwrap();
        let obj = serde_json::to_vec(&serde_json::json!({"image": img, "timeout_us": 5})).unwrap();
        let from_arr = s.json_request(&arr).unwrap();
        let from_obj = s.json_request(&obj).unwrap();
        assert_eq!(raw.payload, img.as_slice());
        assert_eq!(from_arr.payload, img.as_slice());
        assert_eq!(
            (from_obj.payload.as_ref(), from_obj.timeout_us),
            (img.as_slice(), Some(5))
        );
        for bad in [
            serde_json::json!([1, 2, 3]),
            serde_json::json!({"image": "x"}),
            serde_json::json!(7),
            serde_json::json!((0..IMAGE_BYTES).map(|_| 256).collect::<Vec<_>>()),
            serde_json::json!((0..IMAGE_BYTES).map(|_| -1).collect::<Vec<_>>()),
        ] {
            let e = s
                .json_request(&serde_json::to_vec(&bad).unwrap())
                .unwrap_err();
            assert_eq!(e.code, ErrorCode::BadRequest, "{bad}");
        }
    }

    /// The shipped model reads the repository's test digits as well as its docs say.
    #[test]
    fn the_shipped_model_recognises_the_test_subset() {
        let set = mnist::read_split(&testdata_dir(), mnist::Split::Test).unwrap();
        let s = service();
        let right = (0..set.len())
            .filter(|&i| {
                let out = s.call_cpu(set.image(i)).unwrap();
                decode_answer(&out).unwrap().0 == set.labels[i]
            })
            .count();
        assert!(right >= 980, "{right} of 1000 right");
    }
}
