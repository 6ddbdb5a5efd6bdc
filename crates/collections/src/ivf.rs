//! A collection's IVF lists (`Data` keeps them with its points, `search` trains and probes
//! them): the centroids and, per list, the slots assigned to it.

use crate::schema::Metric;
use cohort_ivf::metric::{dot, l2_sq};
use cohort_ivf::TopK;

/// The IVF lists: centroids and, per list, the slots assigned to it (dead ones included until
/// compaction; the search skips them).
pub struct Ivf {
    pub nlist: usize,
    pub(crate) dim: usize,
    pub(crate) centroids: Vec<f32>,
    pub(crate) lists: Vec<Vec<u32>>,
    /// Live points when it was trained.
    pub trained_at: usize,
    /// The coarse distance: inner product for `ip`, squared L2 otherwise (cosine vectors are
    /// normalised first).
    pub(crate) ip: bool,
}

/// The vector the IVF clusters: normalised for cosine, as stored otherwise.
pub(crate) fn index_vector(metric: Metric, v: &[f32]) -> Vec<f32> {
    let mut v = v.to_vec();
    if metric == Metric::Cosine {
        let n = dot(&v, &v).sqrt();
        if n > 0.0 {
            v.iter_mut().for_each(|x| *x /= n);
        }
    }
    v
}

impl Ivf {
    /// Lists around given centroids (`nlist x dim`, list-major; an imported index's), still
    /// empty: `assign` fills them. `trained_at` is the live points they count as trained on.
    pub(crate) fn seeded(
        metric: Metric,
        dim: usize,
        centroids: Vec<f32>,
        trained_at: usize,
    ) -> Ivf {
        let nlist = centroids.len() / dim.max(1);
        Ivf {
            nlist,
            dim,
            centroids,
            lists: vec![Vec::new(); nlist],
            trained_at,
            ip: metric == Metric::Ip,
        }
    }

    /// The centroids, list-major (`dim` floats a list).
    pub fn centroids(&self) -> &[f32] {
        &self.centroids
    }

    /// The slots of each list (tombstoned ones included until compaction).
    pub fn lists(&self) -> &[Vec<u32>] {
        &self.lists
    }

    /// Whether the coarse distance is the inner product (`ip`); squared L2 otherwise.
    pub fn coarse_ip(&self) -> bool {
        self.ip
    }

    fn coarse(&self, q: &[f32], c: usize) -> f32 {
        let row = &self.centroids[c * self.dim..(c + 1) * self.dim];
        if self.ip {
            -dot(q, row)
        } else {
            l2_sq(q, row)
        }
    }

    pub(crate) fn nearest(&self, v: &[f32]) -> usize {
        (0..self.nlist)
            .map(|c| (c, self.coarse(v, c)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map_or(0, |(c, _)| c)
    }

    /// Appends `slot` to list `list` (its nearest, found by the caller).
    pub(crate) fn add_to(&mut self, slot: u32, list: usize) {
        self.lists[list].push(slot);
    }

    pub(crate) fn renumber(&mut self, new_of: &[u32]) {
        for l in &mut self.lists {
            l.retain_mut(|s| {
                *s = new_of[*s as usize];
                *s != u32::MAX
            });
        }
    }

    pub(crate) fn probe(&self, q: &[f32], nprobe: usize) -> Vec<usize> {
        let mut t = TopK::new(nprobe);
        for c in 0..self.nlist {
            t.push(c as u32, self.coarse(q, c));
        }
        t.into_sorted().into_iter().map(|n| n.id as usize).collect()
    }
}
