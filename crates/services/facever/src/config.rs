//! The facever service's settings (`[services.facever]`, `--service-opt facever.KEY=VALUE`, and
//! its serve flags).

use cohort_service_api::config::{ServiceConfig, ServiceFlag};
use serde::{Deserialize, Serialize};

/// Where the GPU engines' cohorts get their references (Lynx sec. 6.4's two designs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Design {
    /// The host fetches each request's reference (one get per request), then launches the
    /// whole comparison (LBP and distance) for the cohort.
    Host,
    /// The GPU starts on the cohort at once (the probes' LBP histograms); the slot's client
    /// queue thread fetches every waiting request's reference in one multiget and copies them
    /// in; the GPU then compares and answers.
    #[default]
    Gpu,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FaceverSettings {
    /// The face database's memcached, HOST:PORT (filled by `cohort facever load-db`).
    pub memcached: String,
    /// Verification threshold on the chi-square distance; unset: the one load-db chose on
    /// the training pairs and stored beside the references.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f32>,
    /// The GPU engines' design: host (host-centric) or gpu (GPU-centric).
    pub design: Design,
}

impl Default for FaceverSettings {
    fn default() -> Self {
        FaceverSettings {
            memcached: "127.0.0.1:11211".into(),
            threshold: None,
            design: Design::default(),
        }
    }
}

impl ServiceConfig for FaceverSettings {
    fn check(&self) -> Result<(), String> {
        if !self
            .memcached
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0))
        {
            return Err(format!("memcached: {:?} is not HOST:PORT", self.memcached));
        }
        if let Some(t) = self.threshold {
            if !(t.is_finite() && t > 0.0) {
                return Err(format!("threshold: {t} is not a positive distance"));
            }
        }
        Ok(())
    }
}

pub const FLAGS: &[ServiceFlag] = &[
    ServiceFlag {
        long: "facever-memcached",
        key: "memcached",
        help: "facever: the face database's memcached, HOST:PORT [default: 127.0.0.1:11211]",
        switch: false,
        example: "127.0.0.1:11211",
    },
    ServiceFlag {
        long: "facever-design",
        key: "design",
        help:
            "facever: GPU engines' design, host (host-centric) or gpu (GPU-centric) [default: gpu]",
        switch: false,
        example: "gpu",
    },
];
