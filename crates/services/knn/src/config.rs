//! The knn service's settings (`[services.knn]`, `--service-opt knn.KEY=VALUE`, and the serve
//! flags below).

use super::gpu_ivf::Precision;
use super::persistent::{PersistentPlan, DEFAULT_COHORT_GROUPS};
use cohort_engine::split::ShardSpec;
use cohort_gpu::persistent::rt::BAR_GROUPS;
use cohort_service_api::config::named_enum;
use cohort_service_api::config::{text, ServiceConfig, ServiceFlag};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KnnSettings {
    /// The IVF index file (`cohort index build`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<PathBuf>,
    /// cpu engine: serve from the memory-mapped file instead of a resident (huge-page) copy.
    pub index_mapped: bool,
    /// GPU engines: element type of the vectors on the GPU, or `auto`: u8 where every
    /// vector of the index is integral in 0..=255 (exact there), else f32 (`precision.rs`).
    #[serde(with = "text")]
    pub precision: PrecisionChoice,
    /// GPU engines on several devices: a whole copy of the index on each (`replicate`), or
    /// the lists split over them by bytes (`shard`, Centaur: every device holds the
    /// centroids and 1/N of the lists; placed as the index file records, if it does).
    /// gpu-persistent serves a sharded index on either plan: the cohort plan reads the other
    /// devices' lists in place (physical GPUs need peer access), the per-pair plan routes
    /// search tasks between devices through gpipes (physical GPUs need native peer atomics).
    #[serde(with = "text")]
    pub placement: Placement,
    /// A sharded index's partial results between devices on gpu-direct and gpu-cohort: `peer`
    /// (devices address each other's memory), `host` (through mapped host memory: where peer
    /// access is absent), or `auto` (peer where every pair of devices has it, else host).
    #[serde(with = "text")]
    pub shard_exchange: Exchange,
    /// gpu-persistent: cohorts of the tiled plan, or per-pair stages.
    #[serde(with = "text")]
    pub persistent_plan: PersistentPlan,
    /// gpu-persistent, cohort plan: block groups running cohorts side by side.
    pub persistent_groups: usize,
    /// A cluster node's shard of the index, `I/N`: the node holds every centroid and the
    /// lists the index's placement over N gives part I (`cohort index place --devices N`
    /// records one), and a front end merges the N shards' answers. None: the whole index.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<ShardSpec>,
}

impl Default for KnnSettings {
    fn default() -> Self {
        KnnSettings {
            index: None,
            index_mapped: false,
            precision: PrecisionChoice::Auto,
            placement: Placement::Replicate,
            shard_exchange: Exchange::Auto,
            persistent_plan: PersistentPlan::default(),
            persistent_groups: DEFAULT_COHORT_GROUPS,
            shard: None,
        }
    }
}

impl ServiceConfig for KnnSettings {
    fn check(&self) -> Result<(), String> {
        if !(1..=BAR_GROUPS).contains(&self.persistent_groups) {
            return Err(format!("persistent_groups must be in 1..={BAR_GROUPS}"));
        }
        Ok(())
    }
}

named_enum! {
    /// The GPU engines' element type as the settings give it: one, or `auto`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum PrecisionChoice ("precision") {
        Auto = "auto",
        F32 = "f32",
        F16 = "f16",
        U8 = "u8",
    }
}

impl PrecisionChoice {
    /// The precision asked for by name; None: `auto`.
    pub fn fixed(self) -> Option<Precision> {
        match self {
            PrecisionChoice::Auto => None,
            PrecisionChoice::F32 => Some(Precision::F32),
            PrecisionChoice::F16 => Some(Precision::F16),
            PrecisionChoice::U8 => Some(Precision::U8),
        }
    }
}

named_enum! {
    /// How the index is laid over the serving GPUs.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Placement ("placement") {
        Replicate = "replicate",
        Shard = "shard",
    }
}

named_enum! {
    /// How a sharded index's devices exchange queries, probes and partial results.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Exchange ("shard exchange") {
        Auto = "auto",
        Peer = "peer",
        Host = "host",
    }
}

/// The serve flags that set knn's keys.
pub const FLAGS: &[ServiceFlag] = &[
    ServiceFlag {
        long: "index",
        key: "index",
        help: "knn: IVF index file (`cohort index build`)",
        switch: false,
        example: "/data/sift1m.ivf",
    },
    ServiceFlag {
        long: "index-mapped",
        key: "index_mapped",
        help: "knn: serve the index from its memory-mapped file instead of a resident \
               (huge-page) copy: less memory at start, slower scans",
        switch: true,
        example: "",
    },
    ServiceFlag {
        long: "gpu-precision",
        key: "precision",
        help: "knn on the GPU engines: element type of the vectors there: auto (u8 where every \
               vector of the index is integral in 0..=255, such as SIFT: exact there; else \
               f32), f32, f16, or u8 (refused unless the data is integral in 0..=255) \
               [default: auto]",
        switch: false,
        example: "u8",
    },
    ServiceFlag {
        long: "index-shard",
        key: "shard",
        help: "knn on a cluster node: serve shard I of N of the index (I/N; the lists its \
               placement over N gives part I) for a front end that merges the N shards",
        switch: false,
        example: "0/2",
    },
];
