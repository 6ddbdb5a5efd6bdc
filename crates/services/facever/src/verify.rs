//! Verification on the faces: the distances of genuine pairs (a probe against its own
//! person's reference) and impostor pairs (against another's), the threshold chosen on the
//! training probes, and the accuracy on the held-out ones.

use super::lbp::{self, Histogram};
use super::orl::{Faces, HELD_OUT, TRAIN_PROBES};
use rayon::prelude::*;
use std::ops::Range;

/// Distances of every (probe, claimed person) pair over `probes` of every person: (genuine,
/// impostor).
pub fn pair_distances(faces: &Faces, probes: Range<usize>) -> (Vec<f32>, Vec<f32>) {
    let table = lbp::uniform_table();
    let refs: Vec<Histogram> = (1..=faces.people)
        .into_par_iter()
        .map(|p| faces.reference(p, &table))
        .collect();
    let (mut genuine, mut impostor) = (Vec::new(), Vec::new());
    for p in 1..=faces.people {
        for i in probes.clone() {
            let h = lbp::histogram(faces.image(p, i), &table);
            for (q, r) in (1..=faces.people).zip(&refs) {
                let d = lbp::chi_square(&h, r);
                if q == p {
                    genuine.push(d);
                } else {
                    impostor.push(d);
                }
            }
        }
    }
    (genuine, impostor)
}

/// How well a threshold separates pairs: the share of genuine pairs accepted (distance <=
/// threshold), of impostors rejected, and their mean (balanced accuracy: there are many more
/// impostor pairs than genuine ones).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Accuracy {
    pub threshold: f32,
    pub genuine_accepted: f64,
    pub impostors_rejected: f64,
    pub balanced: f64,
    pub genuine_pairs: usize,
    pub impostor_pairs: usize,
}

pub fn accuracy(genuine: &[f32], impostor: &[f32], threshold: f32) -> Accuracy {
    let ga = genuine.iter().filter(|&&d| d <= threshold).count() as f64 / genuine.len() as f64;
    let ir = impostor.iter().filter(|&&d| d > threshold).count() as f64 / impostor.len() as f64;
    Accuracy {
        threshold,
        genuine_accepted: ga,
        impostors_rejected: ir,
        balanced: (ga + ir) / 2.0,
        genuine_pairs: genuine.len(),
        impostor_pairs: impostor.len(),
    }
}

/// The threshold with the best balanced accuracy on the pairs: tried halfway between every
/// two neighbouring distances.
pub fn choose_threshold(genuine: &[f32], impostor: &[f32]) -> f32 {
    let mut all: Vec<f32> = genuine.iter().chain(impostor).copied().collect();
    all.sort_by(f32::total_cmp);
    all.windows(2)
        .map(|w| (w[0] + w[1]) / 2.0)
        .max_by(|&a, &b| {
            accuracy(genuine, impostor, a)
                .balanced
                .total_cmp(&accuracy(genuine, impostor, b).balanced)
                // Among equals the smaller threshold (fewer false accepts).
                .then(b.total_cmp(&a))
        })
        .unwrap_or(1.0)
}

/// The threshold chosen on the training probes and the accuracy it gives on the held-out
/// ones: (training accuracy, held-out accuracy).
pub fn evaluate(faces: &Faces) -> (Accuracy, Accuracy) {
    let (g, i) = pair_distances(faces, TRAIN_PROBES);
    let t = choose_threshold(&g, &i);
    let (hg, hi) = pair_distances(faces, HELD_OUT);
    (accuracy(&g, &i, t), accuracy(&hg, &hi, t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_threshold_separates_what_can_be_separated() {
        let t = choose_threshold(&[1.0, 2.0, 3.0], &[5.0, 6.0, 9.0]);
        assert!(t > 3.0 && t < 5.0, "{t}");
        let a = accuracy(&[1.0, 2.0, 3.0], &[5.0, 6.0, 9.0], t);
        assert_eq!(a.balanced, 1.0);
    }

    /// LBP tells the built-in ten people apart well above chance on held-out images.
    #[test]
    fn verification_works_on_the_built_in_faces() {
        let (train, held) = evaluate(&super::super::orl::embedded());
        assert!(train.balanced > 0.85, "{train:?}");
        assert!(held.balanced > 0.8, "{held:?}");
    }
}
