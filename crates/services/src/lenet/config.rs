//! The lenet service's settings (`[services.lenet]`, `--service-opt lenet.KEY=VALUE`, and its
//! serve flag).

use crate::config::{ServiceConfig, ServiceFlag};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LenetSettings {
    /// Weights file (safetensors, `cohort model train lenet`); unset: the model the service
    /// ships.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<PathBuf>,
}

impl ServiceConfig for LenetSettings {
    fn check(&self) -> Result<(), String> {
        Ok(())
    }
}

pub const FLAGS: &[ServiceFlag] = &[ServiceFlag {
    long: "lenet-model",
    key: "model",
    help: "lenet: weights file (safetensors, from `cohort model train lenet`) [default: the shipped model]",
    switch: false,
    example: "lenet.safetensors",
}];
