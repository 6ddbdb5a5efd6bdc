//! The reverse service's settings (`[services.reverse]`, `--service-opt reverse.KEY=VALUE`,
//! and its serve flag).

use cohort_service_api::config::{ServiceConfig, ServiceFlag};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReverseSettings {
    /// Longest payload accepted (longer: TOO_LARGE).
    pub max_len: usize,
}

impl Default for ReverseSettings {
    fn default() -> Self {
        ReverseSettings { max_len: 1024 }
    }
}

impl ServiceConfig for ReverseSettings {
    fn check(&self) -> Result<(), String> {
        if self.max_len == 0 {
            return Err("max_len must be at least 1".into());
        }
        Ok(())
    }
}

pub const FLAGS: &[ServiceFlag] = &[ServiceFlag {
    long: "reverse-max-len",
    key: "max_len",
    help: "reverse (a service of the tests): longest payload it accepts [default: 1024]",
    switch: false,
    example: "64",
}];
