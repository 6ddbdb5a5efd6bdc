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

/// Shard I of N, as written (`I/N`: a node's `--index-shard`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardSpec {
    pub shard: u16,
    pub shards: u16,
}

impl std::str::FromStr for ShardSpec {
    type Err = String;
    fn from_str(t: &str) -> Result<ShardSpec, String> {
        let bad = || format!("shard {t:?}: want I/N with 0 <= I < N (\"0/2\": the first of two)");
        let (i, n) = t.split_once('/').ok_or_else(bad)?;
        let (shard, shards) = (
            i.trim().parse::<u16>().map_err(|_| bad())?,
            n.trim().parse::<u16>().map_err(|_| bad())?,
        );
        if shard >= shards {
            return Err(bad());
        }
        Ok(ShardSpec { shard, shards })
    }
}

impl std::fmt::Display for ShardSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.shard, self.shards)
    }
}

impl Serialize for ShardSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ShardSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ShardSpec, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// The client's answer from every shard's successful answer to the same `request`
/// (`answers[i]` from shard i), written to `out`. An error means the answers do not fit
/// together (a shard answered for another index): the front end answers INTERNAL.
pub type MergeFn =
    fn(request: &[u8], answers: &[&[u8]], out: &mut Vec<u8>) -> Result<(), ErrorPayload>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_is_written_i_of_n() {
        let s: ShardSpec = "1/4".parse().unwrap();
        assert_eq!(
            (s.shard, s.shards, s.to_string()),
            (1, 4, "1/4".to_string())
        );
        for bad in ["4/4", "1", "a/2", "1/0", "-1/2", ""] {
            assert!(bad.parse::<ShardSpec>().is_err(), "{bad}");
        }
        assert!(ShardOf::new(2, 2, 0).is_err() && ShardOf::new(1, 2, 0).is_ok());
    }
}
