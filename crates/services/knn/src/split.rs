//! The index split over cluster nodes (`knn.shard = "I/N"`): each node holds every centroid
//! and the lists of part I of the index's placement over N, and answers a query with the
//! nearest of its own lists (it runs the whole query - filter, scan, reduce - on its part, so
//! every engine serves a part unchanged); the front end sends the query to one node of every
//! shard and merges their answers: Centaur's reducer, one level up.
//!
//! Every shard gets every query. With the probes known at the front end it could skip shards
//! holding none of a query's lists, but finding them is the filter stage (nlist x dim
//! multiply-adds, as much as the scan on a 10M index), which the nodes' GPUs do far faster
//! than the front end's cores; and with nprobe 32 over 4 shards a shard holds none of a
//! query's lists with probability (3/4)^32 ~ 1e-4.

use super::config::KnnSettings;
use cohort_engine::split::{ShardOf, ShardSpec};
use cohort_ivf::IvfIndex;
use cohort_proto::{ErrorCode, ErrorPayload};
use cohort_service_api::config::{typed, Settings};
use std::path::Path;

/// Part `shard` of the index at `path`: placed as the file records for that many parts, else
/// by bytes (the same everywhere: every node of the layout places alike).
pub fn load_part(path: &Path, shard: ShardSpec) -> Result<IvfIndex, String> {
    let whole = IvfIndex::load(path).map_err(|e| format!("loading {}: {e:#}", path.display()))?;
    let p = whole.placement_for(shard.shards as usize);
    let part = whole.part(&p, shard.shard as usize);
    tracing::info!(
        shard = %shard,
        lists = p.lists_of(shard.shard as usize).len(),
        rows = part.ids().len(),
        of_rows = whole.n,
        "knn: this node's shard of the index"
    );
    Ok(part)
}

/// The shard a node's settings serve, tagged with the layout's fingerprint.
pub fn shard_of(s: &Settings) -> Result<Option<ShardOf>, String> {
    let c: KnnSettings = typed("knn", s)?;
    let (Some(shard), Some(path)) = (c.shard, &c.index) else {
        return Ok(None);
    };
    let whole = IvfIndex::load(path).map_err(|e| format!("loading {}: {e:#}", path.display()))?;
    let layout = whole.layout_fingerprint(&whole.placement_for(shard.shards as usize));
    ShardOf::new(shard.shard, shard.shards, layout).map(Some)
}

/// One answer from every shard's: the k nearest of all, ties to the smaller id (as the whole
/// index answers).
pub fn merge(request: &[u8], answers: &[&[u8]], out: &mut Vec<u8>) -> Result<(), ErrorPayload> {
    let internal = |why: String| ErrorPayload::new(ErrorCode::Internal, &why);
    let k = request
        .get(..2)
        .map(|b| u16::from_le_bytes([b[0], b[1]]) as usize)
        .filter(|&k| k > 0)
        .ok_or_else(|| internal("merging shards' answers of a request with no k".into()))?;
    let partials = answers
        .iter()
        .map(|a| super::decode_response(a))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| internal(format!("a shard's answer: {e}")))?;
    if let Some(p) = partials.iter().find(|p| p.len() > k) {
        return Err(internal(format!(
            "a shard answered {} neighbours for k = {k}",
            p.len()
        )));
    }
    super::encode_response_into(&cohort_ivf::ivf::stages::reduce(&partials, k), out);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cohort_ivf::Neighbor;

    fn answer(n: &[(u32, f32)]) -> Vec<u8> {
        let v: Vec<Neighbor> = n
            .iter()
            .map(|&(id, distance)| Neighbor { id, distance })
            .collect();
        super::super::encode_response(&v)
    }

    #[test]
    fn merge_keeps_the_k_nearest_ties_to_the_smaller_id() {
        let mut req = Vec::new();
        super::super::encode_request(3, 0, super::super::Elems::F32(&[0.0; 4]), &mut req);
        let a = answer(&[(7, 1.0), (9, 2.0), (2, 5.0)]);
        let b = answer(&[(4, 1.5), (3, 2.0)]);
        let mut out = Vec::new();
        merge(&req, &[&a, &b], &mut out).unwrap();
        let got = super::super::decode_response(&out).unwrap();
        let ids: Vec<u32> = got.iter().map(|n| n.id).collect();
        assert_eq!(ids, [7, 4, 3]);
        // Empty shards (no probed list held) merge to what the others found.
        let none = answer(&[]);
        out.clear();
        merge(&req, &[&none, &b], &mut out).unwrap();
        assert_eq!(super::super::decode_response(&out).unwrap().len(), 2);
    }

    #[test]
    fn answers_that_do_not_fit_are_an_internal_error() {
        let mut req = Vec::new();
        super::super::encode_request(1, 0, super::super::Elems::F32(&[0.0; 4]), &mut req);
        let two = answer(&[(1, 1.0), (2, 2.0)]);
        let mut out = Vec::new();
        let e = merge(&req, &[&two], &mut out).unwrap_err();
        assert_eq!(e.code, ErrorCode::Internal);
        assert!(merge(&req, &[b"xx"], &mut out).is_err());
        assert!(merge(&[], &[], &mut out).is_err());
    }
}
