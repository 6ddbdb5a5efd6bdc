//! `facever`: face verification (Lynx sec. 6.4). A request names a person and carries a face
//! image; the server fetches that person's reference from a memcached database, compares the
//! two by their local binary pattern histograms ([`lbp`]: chi-square distance) and answers
//! whether the face is that person's (distance at most the threshold chosen on training
//! pairs), with the distance. Payloads, limits and errors: docs/facever.md.
//!
//! Wire request: the person id (u32 LE, from 1) then one [`lbp::WIDTH`] x [`lbp::HEIGHT`]
//! 8-bit image, row-major ([`REQUEST_BYTES`] in all). Wire answer ([`ANSWER_BYTES`]): the
//! verdict (1 = the same person, 0 = not), the distance and the threshold (f32 LE each).
//! Errors: BAD_REQUEST (size, person 0), NOT_FOUND (no reference for the person),
//! UNAVAILABLE (memcached cannot be reached). HTTP: `POST /v1/facever` with
//! `{"person": 3, "image": [2576 numbers 0..=255]}`, answered
//! `{"match": true, "distance": 812.5, "threshold": 1020.7}`.

#[cfg(feature = "backends")]
pub mod config;
#[cfg(feature = "backends")]
pub mod db;
#[cfg(feature = "backends")]
pub mod gpu;
#[cfg(feature = "backends")]
pub mod kernels;
pub mod lbp;
pub mod load;
pub mod orl;
#[cfg(feature = "backends")]
pub mod persistent;
#[cfg(feature = "backends")]
pub mod selftest;
#[cfg(feature = "backends")]
pub mod service;
#[cfg(feature = "backends")]
pub mod slice;
#[cfg(feature = "backends")]
pub mod tensors;
#[cfg(feature = "backends")]
pub mod tools;
pub mod verify;

use cohort_proto::ErrorPayload;
use lbp::IMAGE_BYTES;

pub const ID: u16 = 6;

pub const REQUEST_BYTES: usize = 4 + IMAGE_BYTES;
pub const ANSWER_BYTES: usize = 9;

/// A request checked: the person and the image; BAD_REQUEST unless it is one.
pub fn decode(payload: &[u8]) -> Result<(u32, &[u8]), ErrorPayload> {
    if payload.len() != REQUEST_BYTES {
        return Err(cohort_service_api::bad_request(format!(
            "facever takes a person id (u32) and one {}x{} 8-bit face: {REQUEST_BYTES} bytes, got {}",
            lbp::WIDTH,
            lbp::HEIGHT,
            payload.len()
        )));
    }
    let person = u32::from_le_bytes([payload[0], payload[1], payload[2], payload[3]]);
    if person == 0 {
        return Err(cohort_service_api::bad_request("person ids start at 1"));
    }
    Ok((person, &payload[4..]))
}

pub fn encode_request(person: u32, image: &[u8], out: &mut Vec<u8>) {
    debug_assert_eq!(image.len(), IMAGE_BYTES);
    out.extend_from_slice(&person.to_le_bytes());
    out.extend_from_slice(image);
}

/// A verification's answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Verdict {
    pub same: bool,
    pub distance: f32,
    pub threshold: f32,
}

impl Verdict {
    pub fn of(distance: f32, threshold: f32) -> Verdict {
        Verdict {
            same: distance <= threshold,
            distance,
            threshold,
        }
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.same as u8);
        out.extend_from_slice(&self.distance.to_le_bytes());
        out.extend_from_slice(&self.threshold.to_le_bytes());
    }

    /// An answer read back; None unless it is one (and its verdict follows from its numbers).
    pub fn decode(p: &[u8]) -> Option<Verdict> {
        if p.len() != ANSWER_BYTES || p[0] > 1 {
            return None;
        }
        let f = |i: usize| f32::from_le_bytes([p[i], p[i + 1], p[i + 2], p[i + 3]]);
        let v = Verdict::of(f(1), f(5));
        (v.distance.is_finite() && v.distance >= 0.0 && v.same == (p[0] == 1)).then_some(v)
    }
}

/// An HTTP body's request: `{"person": N, "image": [...]}`.
pub fn json_to_payload(body: &serde_json::Value) -> Result<Vec<u8>, ErrorPayload> {
    let person = body
        .get("person")
        .and_then(serde_json::Value::as_u64)
        .filter(|&p| (1..=u32::MAX as u64).contains(&p))
        .ok_or_else(|| cohort_service_api::bad_request("expected \"person\": an id from 1"))?;
    let pixels = body
        .get("image")
        .and_then(serde_json::Value::as_array)
        .ok_or_else(|| cohort_service_api::bad_request("expected \"image\": an array of pixels"))?;
    if pixels.len() != IMAGE_BYTES {
        return Err(cohort_service_api::bad_request(format!(
            "a face is {IMAGE_BYTES} pixels ({}x{}), got {}",
            lbp::WIDTH,
            lbp::HEIGHT,
            pixels.len()
        )));
    }
    let mut out = Vec::with_capacity(REQUEST_BYTES);
    out.extend_from_slice(&(person as u32).to_le_bytes());
    for p in pixels {
        let v = p.as_u64().filter(|&v| v <= 255).ok_or_else(|| {
            cohort_service_api::bad_request(format!("pixel {p} is not in 0..=255"))
        })?;
        out.push(v as u8);
    }
    Ok(out)
}

pub fn payload_to_json(payload: &[u8]) -> serde_json::Value {
    match Verdict::decode(payload) {
        Some(v) => serde_json::json!({
            "match": v.same, "distance": v.distance, "threshold": v.threshold
        }),
        None => serde_json::json!({ "error": "malformed facever answer" }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any bytes decode to a request of the right size or BAD_REQUEST, and any bytes
        /// decode to an answer only if it is one; never a panic.
        #[test]
        fn decoders_never_panic(p in proptest::collection::vec(any::<u8>(), 0..3000)) {
            if let Ok((person, image)) = decode(&p) {
                prop_assert!(person >= 1 && image.len() == IMAGE_BYTES);
            }
            if let Some(v) = Verdict::decode(&p) {
                let mut again = Vec::new();
                v.encode(&mut again);
                prop_assert_eq!(again, p);
            }
        }
    }

    #[test]
    fn requests_and_answers_round_trip() {
        let img = vec![5u8; IMAGE_BYTES];
        let mut p = Vec::new();
        encode_request(7, &img, &mut p);
        assert_eq!(decode(&p).unwrap(), (7, &img[..]));
        let json = serde_json::json!({"person": 7, "image": img});
        assert_eq!(json_to_payload(&json).unwrap(), p);
        let mut zero = p.clone();
        zero[..4].copy_from_slice(&0u32.to_le_bytes());
        assert!(decode(&zero).is_err());
        for bad in [
            serde_json::json!({"person": 0, "image": img}),
            serde_json::json!({"image": img}),
            serde_json::json!({"person": 1, "image": [1, 2]}),
            serde_json::json!({"person": 1, "image": vec![300; IMAGE_BYTES]}),
        ] {
            assert!(json_to_payload(&bad).is_err(), "{bad}");
        }
        let mut a = Vec::new();
        Verdict::of(10.0, 20.0).encode(&mut a);
        assert_eq!(Verdict::decode(&a).unwrap(), Verdict::of(10.0, 20.0));
        assert_eq!(payload_to_json(&a)["match"], true);
        a[0] = 0;
        assert!(
            Verdict::decode(&a).is_none(),
            "a verdict its numbers contradict"
        );
    }
}
