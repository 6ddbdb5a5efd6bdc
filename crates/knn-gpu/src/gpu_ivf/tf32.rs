//! The tensor-core filter's centroids as it multiplies them (`kernels/knn_filter_tc.cu`): each
//! element split into a TF32 head and a TF32 tail once, at upload, with every |c|^2, so no
//! warp converts a centroid where it multiplies it.

/// `x` rounded to TF32 (10 mantissa bits; to nearest, ties away from zero): the host twin of
/// the kernel's `cvt.rna.tf32.f32`. Adding half of the dropped bits' range to the magnitude
/// and clearing them rounds ties away, as the sign bit is apart from the magnitude.
pub fn round(x: f32) -> f32 {
    if !x.is_finite() {
        return x;
    }
    f32::from_bits((x.to_bits() + 0x1000) & !0x1fff)
}

/// Head and tail of `x`, both TF32: `hi = round(x)`, `lo = round(x - hi)`.
pub fn split(x: f32) -> (f32, f32) {
    let hi = round(x);
    (hi, round(x - hi))
}

/// `[heads (nlist x dim), tails (nlist x dim), |c|^2 (nlist)]` of row-major `centroids`.
pub fn split_centroids(centroids: &[f32], dim: usize) -> Vec<f32> {
    assert!(
        dim > 0 && centroids.len().is_multiple_of(dim),
        "centroids not whole rows"
    );
    let n = centroids.len();
    let mut out = vec![0f32; 2 * n + n / dim];
    let (heads, rest) = out.split_at_mut(n);
    let (tails, norms) = rest.split_at_mut(n);
    for (i, &x) in centroids.iter().enumerate() {
        (heads[i], tails[i]) = split(x);
    }
    for (norm, row) in norms.iter_mut().zip(centroids.chunks_exact(dim)) {
        *norm = row.iter().map(|x| x * x).sum();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rounds_to_ten_mantissa_bits_ties_away() {
        assert_eq!(round(1.0), 1.0);
        // 1 + 2^-11 lies halfway between 1 and 1 + 2^-10: away from zero.
        assert_eq!(round(1.0 + 2f32.powi(-11)), 1.0 + 2f32.powi(-10));
        assert_eq!(round(-(1.0 + 2f32.powi(-11))), -(1.0 + 2f32.powi(-10)));
        // Just below halfway: down.
        assert_eq!(round(1.0 + 2f32.powi(-11) - 2f32.powi(-23)), 1.0);
        // Integers below 2^11 are exact (SIFT's and u8 data have no tail).
        for i in 0..2048 {
            assert_eq!(split(i as f32), (i as f32, 0.0));
        }
        assert!(round(f32::NAN).is_nan());
        assert_eq!(round(f32::INFINITY), f32::INFINITY);
    }

    #[test]
    fn split_centroids_lays_out_heads_tails_and_norms() {
        let c = [1.5f32, -2.0, 0.1, 3.0, 4.0, 0.0];
        let s = split_centroids(&c, 3);
        assert_eq!(s.len(), 6 + 6 + 2);
        for i in 0..6 {
            assert_eq!((s[i], s[6 + i]), split(c[i]));
        }
        assert_eq!(s[12], 1.5 * 1.5 + 4.0 + 0.1 * 0.1);
        assert_eq!(s[13], 25.0);
    }

    proptest! {
        #[test]
        fn head_and_tail_are_tf32_and_sum_to_within_2_pow_minus_21(x in -1e30f32..1e30) {
            let (hi, lo) = split(x);
            prop_assert_eq!(hi.to_bits() & 0x1fff, 0);
            prop_assert_eq!(lo.to_bits() & 0x1fff, 0);
            // The head is within half a TF32 ulp of x, the tail within half of its own.
            prop_assert!((x - hi).abs() <= x.abs() * 2f32.powi(-11));
            prop_assert!((x - hi - lo).abs() <= x.abs() * 2f32.powi(-21) + f32::MIN_POSITIVE);
        }
    }
}
