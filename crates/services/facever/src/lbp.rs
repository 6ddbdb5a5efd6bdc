//! Local binary patterns (Ojala et al.): the face's descriptor the service compares. The CPU
//! twin of `kernels/facever.cu`, and the one definition of every size the kernels use.
//!
//! An image is [`WIDTH`] x [`HEIGHT`] 8-bit pixels (ORL's 92x112 faces halved). Each interior
//! pixel gets an 8-bit code, one bit per neighbour at least as bright as it (clockwise from the
//! top-left); codes with at most two 0/1 transitions around the circle (the 58 "uniform"
//! patterns) keep their own bin, all others share the 59th. The interior is cut into a
//! [`GRID_X`] x [`GRID_Y`] grid of cells, each with its own 59-bin histogram: [`BINS`] counts
//! in all. Two faces are compared by the chi-square distance of their histograms.

/// Served image size (ORL's 92x112 halved by 2x2 means: Lynx serves small images).
pub const WIDTH: usize = 46;
pub const HEIGHT: usize = 56;
pub const IMAGE_BYTES: usize = WIDTH * HEIGHT;
/// Cells of the histogram grid, across and down.
pub const GRID_X: usize = 4;
pub const GRID_Y: usize = 4;
/// Uniform patterns (58) plus the bin all others share.
pub const LABELS: usize = 59;
pub const BINS: usize = GRID_X * GRID_Y * LABELS;

/// Neighbour offsets (dx, dy), clockwise from the top-left; neighbour i is bit 7 - i.
pub const NEIGHBOURS: [(i32, i32); 8] = [
    (-1, -1),
    (0, -1),
    (1, -1),
    (1, 0),
    (1, 1),
    (0, 1),
    (-1, 1),
    (-1, 0),
];

/// A face's descriptor: [`BINS`] counts (as f32: references are means of several faces).
pub type Histogram = Vec<f32>;

/// Code -> bin: the uniform codes in increasing order get 0..58, the rest 58. The kernels get
/// this table from here (uploaded once), so there is one definition of the mapping.
pub fn uniform_table() -> [u8; 256] {
    let mut t = [0u8; 256];
    let mut next = 0u8;
    for code in 0..256u32 {
        // Transitions around the circle: bits that differ from their rotated neighbour.
        let rot = ((code >> 1) | ((code & 1) << 7)) & 0xff;
        if (code ^ rot).count_ones() <= 2 {
            t[code as usize] = next;
            next += 1;
        } else {
            t[code as usize] = (LABELS - 1) as u8;
        }
    }
    debug_assert_eq!(next as usize, LABELS - 1);
    t
}

/// The cell of interior pixel (x, y) (1 <= x < WIDTH - 1, 1 <= y < HEIGHT - 1).
pub fn cell(x: usize, y: usize) -> usize {
    let cx = (x - 1) * GRID_X / (WIDTH - 2);
    let cy = (y - 1) * GRID_Y / (HEIGHT - 2);
    cy * GRID_X + cx
}

/// The LBP code of interior pixel (x, y).
pub fn code(image: &[u8], x: usize, y: usize) -> u8 {
    let c = image[y * WIDTH + x];
    let mut code = 0u8;
    for (i, (dx, dy)) in NEIGHBOURS.iter().enumerate() {
        let n = image[(y as i32 + dy) as usize * WIDTH + (x as i32 + dx) as usize];
        if n >= c {
            code |= 1 << (7 - i);
        }
    }
    code
}

/// The histogram of one image ([`IMAGE_BYTES`] pixels).
pub fn histogram(image: &[u8], table: &[u8; 256]) -> Histogram {
    assert_eq!(image.len(), IMAGE_BYTES, "one face image");
    let mut h = vec![0f32; BINS];
    for y in 1..HEIGHT - 1 {
        for x in 1..WIDTH - 1 {
            h[cell(x, y) * LABELS + table[code(image, x, y) as usize] as usize] += 1.0;
        }
    }
    h
}

/// The mean of several histograms (a person's reference from their enrolment images).
pub fn mean(hists: &[Histogram]) -> Histogram {
    assert!(!hists.is_empty(), "a reference needs at least one face");
    let mut m = vec![0f32; BINS];
    for h in hists {
        for (a, b) in m.iter_mut().zip(h) {
            *a += b;
        }
    }
    let n = hists.len() as f32;
    m.iter_mut().for_each(|v| *v /= n);
    m
}

/// Chi-square distance: sum over bins with p + r > 0 of (p - r)^2 / (p + r).
pub fn chi_square(p: &[f32], r: &[f32]) -> f32 {
    p.iter()
        .zip(r)
        .filter(|(a, b)| *a + *b > 0.0)
        .map(|(a, b)| (a - b) * (a - b) / (a + b))
        .sum()
}

/// Halves a `w` x `h` image by 2x2 means (rounded down) to [`WIDTH`] x [`HEIGHT`].
pub fn halve(pixels: &[u8], w: usize, h: usize) -> Result<Vec<u8>, String> {
    if w != 2 * WIDTH || h != 2 * HEIGHT || pixels.len() != w * h {
        return Err(format!(
            "a face image is {}x{} (ORL's size), got {w}x{h}",
            2 * WIDTH,
            2 * HEIGHT
        ));
    }
    let mut out = vec![0u8; IMAGE_BYTES];
    for y in 0..HEIGHT {
        for x in 0..WIDTH {
            let at = |dx: usize, dy: usize| pixels[(2 * y + dy) * w + 2 * x + dx] as u32;
            out[y * WIDTH + x] = ((at(0, 0) + at(1, 0) + at(0, 1) + at(1, 1)) / 4) as u8;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_uniform_table_has_58_patterns_and_a_shared_bin() {
        let t = uniform_table();
        let mut seen = [0usize; LABELS];
        for &b in &t {
            seen[b as usize] += 1;
        }
        assert!(seen[..LABELS - 1].iter().all(|&n| n == 1), "{seen:?}");
        assert_eq!(seen[LABELS - 1], 256 - 58);
        // All-dark and all-bright neighbourhoods are uniform; 0b01010101 is not.
        assert_eq!(t[0], 0);
        assert_eq!(t[0b0101_0101], (LABELS - 1) as u8);
        assert!((t[0b0001_1100] as usize) < LABELS - 1);
    }

    #[test]
    fn every_interior_pixel_lands_in_one_cell_of_the_grid() {
        let mut per = [0usize; GRID_X * GRID_Y];
        for y in 1..HEIGHT - 1 {
            for x in 1..WIDTH - 1 {
                per[cell(x, y)] += 1;
            }
        }
        assert!(per.iter().all(|&n| n > 100), "{per:?}");
    }

    proptest! {
        /// A histogram counts every interior pixel once; an image is at distance 0 from
        /// itself; the distance is symmetric and never negative.
        #[test]
        fn histograms_and_distances(a in proptest::collection::vec(any::<u8>(), IMAGE_BYTES),
                                    b in proptest::collection::vec(any::<u8>(), IMAGE_BYTES)) {
            let t = uniform_table();
            let (ha, hb) = (histogram(&a, &t), histogram(&b, &t));
            let total: f32 = ha.iter().sum();
            prop_assert_eq!(total as usize, (WIDTH - 2) * (HEIGHT - 2));
            prop_assert_eq!(chi_square(&ha, &ha), 0.0);
            let (d1, d2) = (chi_square(&ha, &hb), chi_square(&hb, &ha));
            prop_assert!(d1 >= 0.0 && (d1 - d2).abs() <= 1e-3 * d1.max(1.0));
        }
    }

    #[test]
    fn a_constant_image_has_one_pattern() {
        let t = uniform_table();
        let h = histogram(&vec![9u8; IMAGE_BYTES], &t);
        // Every neighbour equals the centre: code 0xff, a uniform pattern.
        let bin = t[0xff] as usize;
        for c in 0..GRID_X * GRID_Y {
            let n: f32 = h[c * LABELS..(c + 1) * LABELS].iter().sum();
            assert_eq!(h[c * LABELS + bin], n);
        }
        assert_eq!(
            halve(&vec![1u8; 92 * 112], 92, 112).unwrap(),
            vec![1u8; IMAGE_BYTES]
        );
        assert!(halve(&[0u8; 10], 2, 5).is_err());
    }
}
