//! `echo`: returns the payload unchanged (Lynx's network-bound micro-benchmark).

use cohort_engine::{JsonRequest, Service};
use cohort_proto::ErrorPayload;
use std::borrow::Cow;

/// Its wire id (in every frame header).
pub const ID: u16 = 1;

pub struct Echo;

/// The JSON body as echo reads it: `data` borrowed from the body unless it has escapes.
#[derive(serde::Deserialize)]
struct EchoBody<'a> {
    #[serde(borrow, default)]
    data: Option<Cow<'a, str>>,
    #[serde(default)]
    timeout_us: Option<u64>,
}

impl Service for Echo {
    fn id(&self) -> u16 {
        ID
    }
    fn name(&self) -> &'static str {
        "echo"
    }
    fn tensor_model(&self) -> Option<&dyn cohort_engine::tensor::TensorModel> {
        Some(self)
    }
    fn http_doc(&self) -> Option<cohort_engine::HttpDoc> {
        let data = serde_json::json!({ "type": "string", "description": "the bytes (UTF-8; default empty)" });
        Some(cohort_engine::HttpDoc {
            summary: "Answers the request's bytes unchanged",
            request: serde_json::json!({ "type": "object", "properties": { "data": data } }),
            response: serde_json::json!({ "type": "object", "properties": { "data": data }, "required": ["data"] }),
            example: serde_json::json!({ "data": "hello" }),
        })
    }
    fn execute_cpu(&self, payload: &[u8], out: &mut Vec<u8>) -> Result<(), ErrorPayload> {
        out.extend_from_slice(payload);
        Ok(())
    }
    fn json_to_payload(&self, body: &serde_json::Value) -> Result<Vec<u8>, ErrorPayload> {
        cohort_service_api::json_bytes(body, "data")
    }
    fn payload_to_json(&self, payload: &[u8]) -> serde_json::Value {
        serde_json::json!({ "data": String::from_utf8_lossy(payload) })
    }
    /// Echo bodies are large strings: parsed without a `Value` tree. Only an object takes
    /// this path (serde would read an array positionally); anything the typed parse refuses
    /// (a non-string `data`, a negative timeout, a duplicate key) goes the default way, so
    /// the answers and error messages are the default's.
    fn json_request<'a>(&self, body: &'a [u8]) -> Result<JsonRequest<'a>, ErrorPayload> {
        // The common body, `{"data":"plain ASCII"}`, without a parser at all.
        if let Some(data) = cohort_service_api::json_str::plain_data_field(body) {
            return Ok(JsonRequest {
                payload: Cow::Borrowed(data),
                timeout_us: None,
            });
        }
        let object = body
            .iter()
            .find(|&&b| !cohort_service_api::json_str::is_json_whitespace(b))
            == Some(&b'{');
        // serde skips the strings of keys it ignores without checking their UTF-8, which
        // `Value` refuses (found by the gateway_json fuzz target): non-UTF-8 goes that way.
        if object && std::str::from_utf8(body).is_ok() {
            if let Ok(b) = serde_json::from_slice::<EchoBody<'_>>(body) {
                let payload = match b.data {
                    Some(Cow::Borrowed(s)) => Cow::Borrowed(s.as_bytes()),
                    Some(Cow::Owned(s)) => Cow::Owned(s.into_bytes()),
                    None => Cow::Borrowed(&[][..]),
                };
                return Ok(JsonRequest {
                    payload,
                    timeout_us: b.timeout_us,
                });
            }
        }
        cohort_engine::json_request_by_value(self, body)
    }
    /// `{"data":"..."}` written straight from the payload (`json_str`: escapes found 8 bytes
    /// at a time), byte for byte what `payload_to_json` serializes to.
    fn write_json(&self, payload: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(br#"{"data":"#);
        cohort_service_api::json_str::write_lossy(payload, out);
        out.push(b'}');
    }
}

/// Echo over the Open Inference Protocol: input `data` (BYTES [N]), output `data` (BYTES
/// [N]), each element one request to the engine.
impl cohort_engine::tensor::TensorModel for Echo {
    fn inputs(&self) -> Vec<cohort_engine::tensor::TensorSpec> {
        use cohort_engine::tensor::{DataType, TensorSpec};
        vec![TensorSpec {
            name: "data",
            datatypes: &[DataType::Bytes],
            shape: vec![-1],
        }]
    }
    fn outputs(&self) -> Vec<cohort_engine::tensor::TensorSpec> {
        self.inputs()
    }
    fn rows(
        &self,
        inputs: &[cohort_engine::tensor::Tensor],
        _: &cohort_engine::tensor::Parameters,
    ) -> Result<Vec<Vec<u8>>, ErrorPayload> {
        use cohort_engine::tensor::{byte_elements, input, DataType};
        let t = input(inputs, "data")?;
        if t.datatype != DataType::Bytes || t.shape.len() != 1 {
            return Err(cohort_service_api::bad_request("data is BYTES [N]"));
        }
        Ok(byte_elements(t)?.into_iter().map(<[u8]>::to_vec).collect())
    }
    fn join(
        &self,
        answers: &[Vec<u8>],
        _: &cohort_engine::tensor::Parameters,
    ) -> Result<Vec<cohort_engine::tensor::Tensor>, ErrorPayload> {
        use cohort_engine::tensor::{bytes_data, DataType, Tensor};
        Ok(vec![Tensor {
            name: "data".into(),
            datatype: DataType::Bytes,
            shape: vec![answers.len()],
            data: bytes_data(answers.iter().map(Vec::as_slice)),
        }])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The default mapping (through `serde_json::Value`), to hold the fast path against.
    fn by_value(body: &[u8]) -> Result<JsonRequest<'_>, ErrorPayload> {
        cohort_engine::json_request_by_value(&Echo, body)
    }

    #[test]
    fn fast_path_answers_as_the_value_path() {
        for body in [
            &br#"{"data":"hello"}"#[..],
            br#"{"data":"hello"} "#,
            br#"{"data":"hello"}}"#,
            br#"{"data":"hello" , "timeout_us": 5}"#,
            br#"{"data":"a\"b"}"#,
            "{\"data\":\"caf\u{e9}\"}".as_bytes(),
            br#"{"data":""}"#,
            b"{\"daua\":\"\xa2\xa2:\"}",
            b"{\"data\":\"a\",\"x\":\"\xff\"}",
            br#"{"data":"tab\there \"q\" \u00e9"}"#,
            br#" {"timeout_us": 500, "data": "x", "other": [1,2]}"#,
            br#"{}"#,
            br#"{"data": 5}"#,
            br#"{"data":"a","timeout_us":-1}"#,
            br#"{"data":"a","data":"b"}"#,
            br#"["x", 5]"#,
            br#"{"data":"unterminated"#,
            b"",
            b"null",
        ] {
            assert_eq!(
                Echo.json_request(body),
                by_value(body),
                "{:?}",
                String::from_utf8_lossy(body)
            );
        }
    }

    proptest! {
        #[test]
        fn answer_is_the_value_paths_json(payload in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut fast = Vec::new();
            Echo.write_json(&payload, &mut fast);
            let slow = serde_json::to_vec(&Echo.payload_to_json(&payload)).unwrap();
            prop_assert_eq!(fast, slow);
        }

        #[test]
        fn any_string_round_trips(s in ".{0,200}", t in proptest::option::of(any::<u64>())) {
            let mut v = serde_json::json!({ "data": s });
            if let Some(t) = t {
                v["timeout_us"] = t.into();
            }
            let body = serde_json::to_vec(&v).unwrap();
            let got = Echo.json_request(&body).unwrap();
            prop_assert_eq!(&got, &by_value(&body).unwrap());
            prop_assert_eq!(got.payload.into_owned(), s.into_bytes());
            prop_assert_eq!(got.timeout_us, t);
        }
    }
}
