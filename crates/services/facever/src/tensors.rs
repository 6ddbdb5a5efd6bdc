//! Face verification over the Open Inference Protocol: inputs `person` (INT64 or INT32 [N],
//! ids from 1) and `image` (UINT8 [N, 56, 46] or [N, 2576]); outputs `match` (BOOL [N]),
//! `distance` and `threshold` (FP32 [N]). Each (person, face) is one request to the engine.

use super::lbp::{HEIGHT, IMAGE_BYTES, WIDTH};
use super::service::Facever;
use super::Verdict;
use cohort_engine::tensor::{input, DataType, Parameters, Tensor, TensorModel, TensorSpec};
use cohort_proto::ErrorPayload;
use cohort_service_api::bad_request;

impl TensorModel for Facever {
    fn inputs(&self) -> Vec<TensorSpec> {
        vec![
            TensorSpec {
                name: "person",
                datatypes: &[DataType::Int64, DataType::Int32],
                shape: vec![-1],
            },
            TensorSpec {
                name: "image",
                datatypes: &[DataType::Uint8],
                shape: vec![-1, HEIGHT as i64, WIDTH as i64],
            },
        ]
    }

    fn outputs(&self) -> Vec<TensorSpec> {
        let one = |name, d: &'static [DataType]| TensorSpec {
            name,
            datatypes: d,
            shape: vec![-1],
        };
        vec![
            one("match", &[DataType::Bool]),
            one("distance", &[DataType::Fp32]),
            one("threshold", &[DataType::Fp32]),
        ]
    }

    fn rows(&self, inputs: &[Tensor], _: &Parameters) -> Result<Vec<Vec<u8>>, ErrorPayload> {
        let (person, image) = (input(inputs, "person")?, input(inputs, "image")?);
        let n = image.shape.first().copied().unwrap_or(0);
        let per: usize = image.shape.iter().skip(1).product();
        if image.datatype != DataType::Uint8 || image.shape.len() < 2 || per != IMAGE_BYTES {
            return Err(bad_request(format!(
                "image is UINT8 [N, {HEIGHT}, {WIDTH}] or [N, {IMAGE_BYTES}]; got {} {:?}",
                image.datatype.name(),
                image.shape
            )));
        }
        if person.shape != [n] {
            return Err(bad_request(format!(
                "person is [{n}] (one per image); got {:?}",
                person.shape
            )));
        }
        let ids: Vec<i64> = match person.datatype {
            DataType::Int64 => person
                .data
                .chunks_exact(8)
                .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
                .collect(),
            DataType::Int32 => person
                .data
                .chunks_exact(4)
                .map(|b| i64::from(i32::from_le_bytes(b.try_into().unwrap())))
                .collect(),
            d => {
                return Err(bad_request(format!(
                    "person is INT64 or INT32, not {}",
                    d.name()
                )))
            }
        };
        ids.iter()
            .zip(image.data.chunks(IMAGE_BYTES))
            .map(|(&id, face)| {
                let id = u32::try_from(id)
                    .ok()
                    .filter(|&p| p >= 1)
                    .ok_or_else(|| bad_request(format!("person {id} is not an id from 1")))?;
                let mut row = Vec::with_capacity(4 + IMAGE_BYTES);
                row.extend_from_slice(&id.to_le_bytes());
                row.extend_from_slice(face);
                Ok(row)
            })
            .collect()
    }

    fn join(&self, answers: &[Vec<u8>], _: &Parameters) -> Result<Vec<Tensor>, ErrorPayload> {
        let n = answers.len();
        let (mut same, mut dist, mut thr) = (Vec::with_capacity(n), Vec::new(), Vec::new());
        for a in answers {
            let v = Verdict::decode(a).ok_or_else(|| {
                ErrorPayload::new(
                    cohort_proto::ErrorCode::Internal,
                    "a malformed facever answer",
                )
            })?;
            same.push(v.same as u8);
            dist.extend_from_slice(&v.distance.to_le_bytes());
            thr.extend_from_slice(&v.threshold.to_le_bytes());
        }
        let t = |name: &str, datatype, data| Tensor {
            name: name.into(),
            datatype,
            shape: vec![n],
            data,
        };
        Ok(vec![
            t("match", DataType::Bool, same),
            t("distance", DataType::Fp32, dist),
            t("threshold", DataType::Fp32, thr),
        ])
    }
}
