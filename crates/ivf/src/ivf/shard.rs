//! One device's part of a sharded index: the quantizer (every centroid, replicated) and only
//! the inverted lists its [`Placement`] gives it, copied out of the whole index - so a device
//! holds 1/N of the list bytes, and a search of its lists finds exactly what the whole index
//! finds there (the same rows, the same scan, ties to the smaller id).

use super::placement::Placement;
use super::stages::scan_rows;
use super::IvfIndex;
use crate::metric::Metric;
use crate::topk::{Neighbor, TopK};

pub struct IvfShard {
    pub device: usize,
    pub dim: usize,
    pub metric: Metric,
    /// For every list of the index: its rows in this shard's arrays, or None when another
    /// device holds it.
    local: Vec<Option<(usize, usize)>>,
    ids: Vec<u32>,
    vectors: Vec<f32>,
}

impl IvfShard {
    /// Device `device`'s lists of `ix` under `p`.
    pub fn cut(ix: &IvfIndex, p: &Placement, device: usize) -> IvfShard {
        assert_eq!(p.owner.len(), ix.nlist, "a placement of another index");
        let mut local = vec![None; ix.nlist];
        let (mut ids, mut vectors) = (Vec::new(), Vec::new());
        for l in p.lists_of(device) {
            let (s, e) = ix.cell_range(l as usize);
            let at = ids.len();
            ids.extend_from_slice(&ix.ids()[s..e]);
            vectors.extend_from_slice(&ix.vectors()[s * ix.dim..e * ix.dim]);
            local[l as usize] = Some((at, at + (e - s)));
        }
        IvfShard {
            device,
            dim: ix.dim,
            metric: ix.metric,
            local,
            ids,
            vectors,
        }
    }

    /// Whether this shard holds list `l`.
    pub fn holds(&self, l: u32) -> bool {
        self.local.get(l as usize).is_some_and(Option::is_some)
    }

    /// The shard as an IVF offsets array over every list of the index (nlist + 1 entries):
    /// list l's rows are `offsets[l]..offsets[l + 1]` of `ids()` / `vectors()`, empty where
    /// another device holds l. A device searching these with the whole index's kernels finds
    /// exactly its own lists' part of every query's answer.
    pub fn offsets(&self) -> Vec<u64> {
        let mut out = Vec::with_capacity(self.local.len() + 1);
        let mut at = 0u64;
        for l in &self.local {
            out.push(at);
            if let Some((s, e)) = l {
                debug_assert_eq!(*s as u64, at, "lists are cut in list order");
                at = *e as u64;
            }
        }
        out.push(at);
        out
    }

    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    pub fn vectors(&self) -> &[f32] {
        &self.vectors
    }

    /// Bytes of list data held (vectors and ids).
    pub fn list_bytes(&self) -> usize {
        self.vectors.len() * 4 + self.ids.len() * 4
    }

    /// The k nearest to `q` among lists `probes` (each must be held here): one partial
    /// result for the query's reducer.
    pub fn search(&self, q: &[f32], probes: &[u32], k: usize) -> Vec<Neighbor> {
        assert_eq!(q.len(), self.dim);
        let mut t = TopK::new(k);
        for &l in probes {
            let (s, e) = self.local[l as usize].unwrap_or_else(|| {
                panic!(
                    "list {l} routed to device {}, which does not hold it",
                    self.device
                )
            });
            scan_rows(
                self.metric,
                q,
                &self.vectors[s * self.dim..e * self.dim],
                &self.ids[s..e],
                &mut t,
            );
        }
        t.into_sorted()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ivf::placement::list_bytes;
    use crate::ivf::{stages, SearchParams};
    use crate::kmeans::KMeansConfig;
    use crate::synth::{Model, SynthConfig};

    /// Filter anywhere, each probed list searched on its owner, the partials merged: the
    /// same neighbours as the whole index, for every query and every device count.
    #[test]
    fn sharded_search_answers_as_the_whole_index() {
        let (dim, nlist) = (24, 48);
        let model = Model::new(SynthConfig {
            clusters: 12,
            ..SynthConfig::sift_like(dim, 7)
        });
        let ix = IvfIndex::build(
            &model.sample(4000, 1),
            nlist,
            Metric::L2,
            &KMeansConfig {
                iters: 6,
                ..KMeansConfig::new(nlist)
            },
        );
        let queries = model.sample(60, 2);
        let bytes = list_bytes(&ix.cell_sizes(), dim);
        for devices in [1, 2, 3, 5, 8] {
            let p = Placement::balanced(&bytes, devices);
            let shards: Vec<IvfShard> = (0..devices).map(|d| IvfShard::cut(&ix, &p, d)).collect();
            assert_eq!(
                shards.iter().map(IvfShard::list_bytes).sum::<usize>(),
                bytes.iter().sum::<u64>() as usize
            );
            for sh in &shards {
                let off = sh.offsets();
                assert_eq!(off.len(), nlist + 1);
                assert_eq!(*off.last().unwrap() as usize, sh.ids().len());
                for l in 0..nlist {
                    let len = (off[l + 1] - off[l]) as usize;
                    let want = if sh.holds(l as u32) {
                        ix.cell_sizes()[l]
                    } else {
                        0
                    };
                    assert_eq!(len, want, "list {l} on device {}", sh.device);
                }
            }
            for i in 0..queries.n {
                let q = queries.row(i);
                let want = ix.query(q, SearchParams { k: 10, nprobe: 8 });
                let probes = stages::filter(ix.centroids(), dim, ix.metric, q, 8);
                let partials: Vec<Vec<Neighbor>> = shards
                    .iter()
                    .map(|s| {
                        let mine: Vec<u32> =
                            probes.iter().copied().filter(|&l| s.holds(l)).collect();
                        s.search(q, &mine, 10)
                    })
                    .collect();
                assert_eq!(
                    stages::reduce(&partials, 10),
                    want,
                    "query {i} on {devices} devices"
                );
            }
        }
    }

    /// A node's part of the index (every centroid, its lists only, the whole index's n): each
    /// part queried whole (filter, search, reduce) and the parts' answers reduced give the
    /// whole index's answer; another placement of the same index has another fingerprint.
    #[test]
    fn parts_queried_alone_reduce_to_the_whole_index() {
        let (dim, nlist) = (16, 32);
        let model = Model::new(SynthConfig {
            clusters: 8,
            ..SynthConfig::sift_like(dim, 11)
        });
        let ix = IvfIndex::build(
            &model.sample(3000, 1),
            nlist,
            Metric::L2,
            &KMeansConfig {
                iters: 5,
                ..KMeansConfig::new(nlist)
            },
        );
        let queries = model.sample(40, 3);
        for parts in [1, 2, 3] {
            let p = ix.placement_for(parts);
            let cut: Vec<IvfIndex> = (0..parts).map(|d| ix.part(&p, d)).collect();
            assert_eq!(cut.iter().map(|c| c.ids().len()).sum::<usize>(), ix.n);
            for c in &cut {
                assert_eq!((c.n, c.nlist, c.centroids()), (ix.n, nlist, ix.centroids()));
            }
            let print = ix.layout_fingerprint(&p);
            if parts > 1 {
                assert_ne!(print, ix.layout_fingerprint(&ix.placement_for(parts - 1)));
            }
            for i in 0..queries.n {
                let sp = SearchParams { k: 10, nprobe: 6 };
                let partials: Vec<Vec<Neighbor>> =
                    cut.iter().map(|c| c.query(queries.row(i), sp)).collect();
                assert_eq!(
                    stages::reduce(&partials, 10),
                    ix.query(queries.row(i), sp),
                    "query {i} over {parts} parts"
                );
            }
        }
    }
}
