//! Distances. Each kernel has a scalar reference; the fast path is the same code compiled
//! for AVX2+FMA and chosen at run time where the CPU has it (tests compare the two).

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// Squared Euclidean distance (smaller is nearer).
    L2,
    /// Inner product, reported as its negation so that smaller is nearer for every metric.
    InnerProduct,
}

impl Metric {
    pub fn code(self) -> u8 {
        match self {
            Metric::L2 => 0,
            Metric::InnerProduct => 1,
        }
    }
    pub fn from_code(c: u8) -> Option<Metric> {
        match c {
            0 => Some(Metric::L2),
            1 => Some(Metric::InnerProduct),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Metric::L2 => "l2",
            Metric::InnerProduct => "ip",
        }
    }

    /// The distance between `a` and `b` (equal lengths) under this metric.
    #[inline]
    pub fn distance(self, a: &[f32], b: &[f32]) -> f32 {
        match self {
            Metric::L2 => l2_sq(a, b),
            Metric::InnerProduct => -dot(a, b),
        }
    }
}

impl std::str::FromStr for Metric {
    type Err = String;
    fn from_str(s: &str) -> Result<Metric, String> {
        match s {
            "l2" => Ok(Metric::L2),
            "ip" => Ok(Metric::InnerProduct),
            _ => Err(format!("unknown metric {s:?} (l2, ip)")),
        }
    }
}

/// Reference: plain loops.
pub fn l2_sq_scalar(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

pub fn dot_scalar(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Eight independent accumulators so the compiler can keep one SIMD register per lane group.
#[inline(always)]
pub(crate) fn l2_sq_lanes(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            let d = x[i] - y[i];
            acc[i] += d * d;
        }
    }
    let mut s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (x, y) in ra.iter().zip(rb) {
        s += (x - y) * (x - y);
    }
    s
}

#[inline(always)]
pub(crate) fn dot_lanes(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn l2_sq(a: &[f32], b: &[f32]) -> f32 {
        super::l2_sq_lanes(a, b)
    }
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
        super::dot_lanes(a, b)
    }
}

#[cfg(target_arch = "x86_64")]
fn has_avx2() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
}

/// Squared L2 distance, SIMD where available.
#[inline]
pub fn l2_sq(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU supports avx2 and fma (checked above).
        return unsafe { avx2::l2_sq(a, b) };
    }
    l2_sq_lanes(a, b)
}

/// Inner product, SIMD where available.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU supports avx2 and fma (checked above).
        return unsafe { avx2::dot(a, b) };
    }
    dot_lanes(a, b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn simd_matches_scalar(v in proptest::collection::vec((-100f32..100.0, -100f32..100.0), 0..300)) {
            let (a, b): (Vec<f32>, Vec<f32>) = v.into_iter().unzip();
            let (s, f) = (l2_sq_scalar(&a, &b), l2_sq(&a, &b));
            prop_assert!((s - f).abs() <= 1e-4 * s.abs().max(1.0), "{} vs {}", s, f);
            let (s, f) = (dot_scalar(&a, &b), dot(&a, &b));
            prop_assert!((s - f).abs() <= 1e-3 * a.len() as f32 * 100.0, "{} vs {}", s, f);
        }
    }
}
