//! The Open Inference Protocol (KServe v2) over gRPC: the messages and the
//! `inference.GRPCInferenceService` server and client that `proto/inference.proto` defines
//! (the subset Cohort serves; see that file), and their conversions to Cohort's tensors
//! (`tensors`). `cohort-net` serves it, `cohort-load` drives it.

#![allow(clippy::large_enum_variant, clippy::doc_lazy_continuation)]

tonic::include_proto!("inference");

pub mod tensors;

/// A datatype's name in the protocol (`"FP32"`) as the model configuration's enum.
pub fn config_type(name: &str) -> DataType {
    DataType::from_str_name(&format!("TYPE_{name}")).unwrap_or(DataType::TypeInvalid)
}
