//! LeNet over the Open Inference Protocol: input `image` (UINT8, or FP32 holding 0..=255),
//! shaped [N, 28, 28], [N, 1, 28, 28] or [N, 784]; outputs `class` (INT64 [N]) and `logits`
//! (FP32 [N, 10]). Each image is one request to the engine.

use super::{decode_answer, Lenet, CLASSES, IMAGE_BYTES};
use cohort_engine::tensor::{input, DataType, Parameters, Tensor, TensorModel, TensorSpec};
use cohort_proto::ErrorPayload;
use cohort_service_api::bad_request;

impl TensorModel for Lenet {
    fn inputs(&self) -> Vec<TensorSpec> {
        vec![TensorSpec {
            name: "image",
            datatypes: &[DataType::Uint8, DataType::Fp32],
            shape: vec![-1, 28, 28],
        }]
    }

    fn outputs(&self) -> Vec<TensorSpec> {
        vec![
            TensorSpec {
                name: "class",
                datatypes: &[DataType::Int64],
                shape: vec![-1],
            },
            TensorSpec {
                name: "logits",
                datatypes: &[DataType::Fp32],
                shape: vec![-1, CLASSES as i64],
            },
        ]
    }

    fn rows(&self, inputs: &[Tensor], _: &Parameters) -> Result<Vec<Vec<u8>>, ErrorPayload> {
        let t = input(inputs, "image")?;
        let s = &t.shape;
        let per_image: usize = s.iter().skip(1).product();
        let shaped = matches!(s.as_slice(), [_, 28, 28] | [_, 1, 28, 28] | [_, 784]);
        if !shaped || per_image != IMAGE_BYTES {
            return Err(bad_request(format!(
                "image is [N, 28, 28], [N, 1, 28, 28] or [N, 784]; got {s:?}"
            )));
        }
        let pixels: Vec<u8> = match t.datatype {
            DataType::Uint8 => t.data.clone(),
            DataType::Fp32 => t
                .data
                .chunks_exact(4)
                .map(|b| {
                    let v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                    if (0.0..=255.0).contains(&v) {
                        Ok(v.round() as u8)
                    } else {
                        Err(bad_request(format!("pixel {v} is not in 0..=255")))
                    }
                })
                .collect::<Result<_, _>>()?,
            d => {
                return Err(bad_request(format!(
                    "image is UINT8 or FP32, not {}",
                    d.name()
                )))
            }
        };
        Ok(pixels.chunks(IMAGE_BYTES).map(<[u8]>::to_vec).collect())
    }

    fn join(&self, answers: &[Vec<u8>], _: &Parameters) -> Result<Vec<Tensor>, ErrorPayload> {
        let n = answers.len();
        let mut class = Vec::with_capacity(8 * n);
        let mut logits = Vec::with_capacity(4 * CLASSES * n);
        for a in answers {
            let (digit, l) = decode_answer(a).ok_or_else(|| {
                ErrorPayload::new(
                    cohort_proto::ErrorCode::Internal,
                    "a malformed lenet answer",
                )
            })?;
            class.extend_from_slice(&i64::from(digit).to_le_bytes());
            l.iter()
                .for_each(|x| logits.extend_from_slice(&x.to_le_bytes()));
        }
        Ok(vec![
            Tensor {
                name: "class".into(),
                datatype: DataType::Int64,
                shape: vec![n],
                data: class,
            },
            Tensor {
                name: "logits".into(),
                datatype: DataType::Fp32,
                shape: vec![n, CLASSES],
                data: logits,
            },
        ])
    }
}
