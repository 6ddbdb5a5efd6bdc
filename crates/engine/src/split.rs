//! A service split over cluster nodes, each holding one shard of its state (knn: a node holds
//! a part of the index's lists, `knn.shard = "I/N"`): the tag a node registers for its shard,
//! and how a front end merges the shards' answers into the one its client gets. The engines
//! never split a request; only a cluster front end does (`cohort_cluster::front`).

use cohort_proto::ErrorPayload;
use serde::{Deserialize, Serialize};

/// Which shard of which layout a node serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ShardOf {
    /// 0..shards.
    pub shard: u16,
    pub shards: u16,
    /// A fingerprint of what was split and how (knn: the index's lists, quantizer and
    /// placement): shards of different layouts are never merged.
    pub layout: u64,
}

impl ShardOf {
    pub fn new(shard: u16, shards: u16, layout: u64) -> Result<ShardOf, String> {
        if shards == 0 || shard >= shards {
            return Err(format!(
                "shard {shard} of {shards}: want 0 <= shard < shards"
            ));
        }
        Ok(ShardOf {
            shard,
            shards,
            layout,
        })
    }
}

/// The client's answer from every shard's successful answer to the same `request`
/// (`answers[i]` from shard i), written to `out`. An error means the answers do not fit
/// together (a shard answered for another index): the front end answers INTERNAL.
pub type MergeFn =
    fn(request: &[u8], answers: &[&[u8]], out: &mut Vec<u8>) -> Result<(), ErrorPayload>;
