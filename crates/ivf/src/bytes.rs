//! u8 storage of an index's vectors: exact where every value is integral in 0..=255 (SIFT's
//! descriptors), a quarter of f32's bytes. The GPU engines' u8 scan is the twin of
//! [`search_cell_u8`]; `--gpu-precision auto` picks u8 where [`first_not_u8`] finds nothing.

use crate::ivf::IvfIndex;
use crate::metric::Metric;
use crate::topk::{Neighbor, TopK};

/// The first value that u8 storage would not hold exactly (not integral, or outside
/// 0..=255, or not finite); None: every value is a byte.
pub fn first_not_u8(v: &[f32]) -> Option<f32> {
    v.iter()
        .copied()
        .find(|x| !(0.0..=255.0).contains(x) || x.fract() != 0.0)
}

/// The values as bytes, or the first one that is not a byte.
pub fn to_u8(v: &[f32]) -> Result<Vec<u8>, f32> {
    match first_not_u8(v) {
        Some(x) => Err(x),
        None => Ok(v.iter().map(|x| *x as u8).collect()),
    }
}

/// The CPU twin of u8 storage's scan of one cell for an integral query: distances in integer
/// arithmetic over the bytes (`vectors`: the index's vectors as [`to_u8`] gave them), then as
/// f32. Equal to the f32 scan's wherever f32 sums them exactly (L2: dim x 255^2 below 2^24,
/// up to dim 258; inner product: dim x 255^2 likewise).
pub fn search_cell_u8(
    index: &IvfIndex,
    vectors: &[u8],
    q: &[u8],
    cell: u32,
    k: usize,
) -> Vec<Neighbor> {
    let dim = index.dim;
    assert_eq!(q.len(), dim);
    assert_eq!(vectors.len(), index.n * dim);
    let (start, end) = index.cell_range(cell as usize);
    let mut t = TopK::new(k);
    let rows = vectors[start * dim..end * dim].chunks_exact(dim);
    for (row, &id) in rows.zip(&index.ids()[start..end]) {
        let d = match index.metric {
            Metric::L2 => row
                .iter()
                .zip(q)
                .map(|(&a, &b)| (i64::from(a) - i64::from(b)).pow(2))
                .sum::<i64>() as f32,
            Metric::InnerProduct => {
                -(row
                    .iter()
                    .zip(q)
                    .map(|(&a, &b)| i64::from(a) * i64::from(b))
                    .sum::<i64>() as f32)
            }
        };
        if d <= t.threshold() {
            t.push(id, d);
        }
    }
    t.into_sorted()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ivf::stages;
    use crate::kmeans::KMeansConfig;
    use crate::synth::{Model, SynthConfig};

    #[test]
    fn bytes_are_told_from_the_rest() {
        assert_eq!(first_not_u8(&[0.0, 1.0, 255.0]), None);
        assert_eq!(to_u8(&[0.0, 7.0, 255.0]), Ok(vec![0, 7, 255]));
        for bad in [256.0, -1.0, 0.5, f32::NAN, f32::INFINITY] {
            let v = [3.0, bad, 4.0];
            assert!(first_not_u8(&v).is_some(), "{bad}");
            assert!(to_u8(&v).is_err(), "{bad}");
        }
    }

    /// On integral data the u8 scan (integer distances over the bytes) and the f32 scan
    /// find the same neighbours at the same distances, through filter, search and reduce,
    /// for both metrics: u8 storage is exact there (what `--gpu-precision auto` relies on).
    #[test]
    fn u8_and_f32_twins_find_the_same_neighbours_on_integral_data() {
        let dim = 128;
        let model = Model::new(SynthConfig {
            dim,
            clusters: 16,
            latent_dim: 8,
            noise: 0.05,
            seed: 11,
        });
        let base = model.sample(3000, 1);
        let queries = model.sample(40, 2);
        assert_eq!(first_not_u8(&base.data), None, "synth data is integral");
        for metric in [Metric::L2, Metric::InnerProduct] {
            let ix = IvfIndex::build(&base, 16, metric, &KMeansConfig::new(16));
            let bytes = to_u8(ix.vectors()).expect("integral");
            let (k, nprobe) = (10, 4);
            let mut differing_distances = 0;
            for i in 0..queries.n {
                let q = queries.row(i);
                let qb = to_u8(q).expect("integral query");
                let probes = stages::filter(ix.centroids(), dim, metric, q, nprobe);
                let f32s = stages::reduce(&stages::search(&ix, q, &probes, k), k);
                let u8s: Vec<Vec<Neighbor>> = probes
                    .iter()
                    .map(|&c| search_cell_u8(&ix, &bytes, &qb, c, k))
                    .collect();
                let u8s = stages::reduce(&u8s, k);
                assert_eq!(u8s.len(), k);
                assert_eq!(f32s, u8s, "{metric:?} query {i}");
                differing_distances += usize::from(u8s[0].distance != u8s[k - 1].distance);
            }
            assert!(differing_distances > 0, "the neighbours are told apart");
        }
    }
}
