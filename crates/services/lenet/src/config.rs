//! The lenet service's settings (`[services.lenet]`, `--service-opt lenet.KEY=VALUE`, and its
//! serve flag).

use cohort_service_api::config::named_enum;
use cohort_service_api::config::{text, ServiceConfig, ServiceFlag};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LenetSettings {
    /// Weights file (safetensors, `cohort-lab model train lenet`); unset: the model the service
    /// ships.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<PathBuf>,
    /// How the GPU kernels compute conv2 and the batch dense layers.
    #[serde(with = "text")]
    pub math: Math,
    /// How the persistent engine's blocks share the images.
    #[serde(with = "text")]
    pub persistent: Plan,
}

named_enum! {
    /// `lenet.persistent`: the persistent engine's plan.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub enum Plan ("lenet persistent plan") {
        /// Each worker block runs the whole network on one image at a time: the most images
        /// at once.
        #[default]
        Image = "image",
        /// A team of blocks (one per conv2 channel tile) runs one image together, meeting
        /// between layers: one image's answer sooner.
        Team = "team",
    }
}

named_enum! {
    /// `lenet.math`: the GPU's arithmetic for the network's products (the CPU twin is FP32).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub enum Math ("lenet math") {
        /// Tensor cores, 3xTF32 (FP32's accuracy): conv2 as an implicit GEMM and, on the batch
        /// engines, the dense layers. Needs compute capability 8.0 or later.
        #[default]
        Tf32x3 = "tf32x3",
        /// CUDA cores, FP32 throughout.
        Fp32 = "fp32",
    }
}

impl Math {
    /// Refuses tensor-core math on a device without TF32 mma.
    pub fn check_device(self, dev: &cohort_gpu::DeviceInfo) -> Result<(), String> {
        if self == Math::Tf32x3 && dev.compute_capability < (8, 0) {
            return Err(format!(
                "lenet.math=tf32x3 needs tensor cores with TF32 (compute capability 8.0+); GPU {} is {}.{}: serve with lenet.math=fp32",
                dev.ordinal, dev.compute_capability.0, dev.compute_capability.1
            ));
        }
        Ok(())
    }
}

impl ServiceConfig for LenetSettings {
    fn check(&self) -> Result<(), String> {
        Ok(())
    }
}

pub const FLAGS: &[ServiceFlag] = &[ServiceFlag {
    long: "lenet-model",
    key: "model",
    help: "lenet: weights file (safetensors, from `cohort-lab model train lenet`) [default: the shipped model]",
    switch: false,
    example: "lenet.safetensors",
}];

#[cfg(test)]
mod tests {
    use super::*;
    use cohort_service_api::config::{typed, value_of, Settings};

    fn with_math(v: &str) -> Result<LenetSettings, String> {
        let mut s = Settings::new();
        s.insert("math".into(), value_of(v));
        typed("lenet", &s)
    }

    #[test]
    fn math_defaults_to_tensor_cores_and_reads_either_name() {
        assert_eq!(LenetSettings::default().math, Math::Tf32x3);
        assert_eq!(with_math("fp32").unwrap().math, Math::Fp32);
        assert_eq!(with_math("tf32x3").unwrap().math, Math::Tf32x3);
        let e = with_math("tf16").unwrap_err();
        assert!(e.contains("math") && e.contains("tf32x3, fp32"), "{e}");
    }

    #[test]
    fn the_persistent_plan_defaults_to_a_block_per_image() {
        assert_eq!(LenetSettings::default().persistent, Plan::Image);
        let mut s = Settings::new();
        s.insert("persistent".into(), value_of("team"));
        assert_eq!(
            typed::<LenetSettings>("lenet", &s).unwrap().persistent,
            Plan::Team
        );
        s.insert("persistent".into(), value_of("teams"));
        let e = typed::<LenetSettings>("lenet", &s).unwrap_err();
        assert!(e.contains("image, team"), "{e}");
    }

    #[test]
    fn tensor_math_is_refused_before_ampere() {
        let mut dev = cohort_gpu::DeviceInfo {
            ordinal: 0,
            physical: 0,
            sm_group: None,
            name: "a Turing GPU".into(),
            compute_capability: (7, 5),
            sms: 40,
            total_mem: 16 << 30,
            pci_bus_id: "0000:01:00.0".into(),
            numa_node: None,
        };
        let e = Math::Tf32x3.check_device(&dev).unwrap_err();
        assert!(e.contains("lenet.math=fp32"), "{e}");
        assert!(Math::Fp32.check_device(&dev).is_ok());
        dev.compute_capability = (9, 0);
        assert!(Math::Tf32x3.check_device(&dev).is_ok());
    }
}
