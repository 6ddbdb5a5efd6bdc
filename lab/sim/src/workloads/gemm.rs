//! Tiled GEMM (AlexNet's convolution and fully connected layers as matrix products): a CTA
//! computes a 64 x 64 tile of C, stepping through K 32 at a time and reading a 64 x 32 tile
//! of A and a 32 x 64 tile of B per step. Tiles are shared by a row or column of CTAs: the
//! class that lives from its caches - and, across sockets, from caching remote tiles.

use super::{Access, Kernel, Workload, LINE};

const TILE: u64 = 64;
const KSTEP: u64 = 32;

struct Gemm {
    m: u64,
    n: u64,
    k: u64,
    a: u64,
    b: u64,
    c: u64,
    /// Tiles numbered down the columns of C (a block of CTAs covers whole tile columns and
    /// so one slice of B's columns) - the order when B is the larger operand, so contiguous
    /// CTA blocks split the weights rather than share them.
    column_major: bool,
}

impl Kernel for Gemm {
    fn ctas(&self) -> usize {
        ((self.m / TILE) * (self.n / TILE)) as usize
    }
    fn compute_per_access(&self) -> f64 {
        // 64 x 64 x 32 FMAs per step over 128 line reads, at 1024 FMAs per cycle per SM.
        1.0
    }
    fn accesses(&self, cta: usize, out: &mut Vec<Access>) {
        let (tiles_m, tiles_n) = (self.m / TILE, self.n / TILE);
        let (ti, tj) = if self.column_major {
            (cta as u64 % tiles_m, cta as u64 / tiles_m)
        } else {
            (cta as u64 / tiles_n, cta as u64 % tiles_n)
        };
        // Row-major f32: a row of A is k * 4 bytes, of B and C n * 4 bytes.
        for ks in 0..self.k / KSTEP {
            for r in 0..TILE {
                // 32 floats of A's row: one line.
                out.push(Access::read(
                    self.a + ((ti * TILE + r) * self.k + ks * KSTEP) * 4 / LINE * LINE,
                ));
            }
            for r in 0..KSTEP {
                // 64 floats of B's row: two lines.
                let at = self.b + ((ks * KSTEP + r) * self.n + tj * TILE) * 4;
                out.push(Access::read(at / LINE * LINE));
                out.push(Access::read(at / LINE * LINE + LINE));
            }
        }
        for r in 0..TILE {
            let at = self.c + ((ti * TILE + r) * self.n + tj * TILE) * 4;
            out.push(Access::write(at / LINE * LINE));
            out.push(Access::write(at / LINE * LINE + LINE));
        }
    }
}

/// C (m x n) = A (m x k) B (k x n); `scale` shortens k (the work) and keeps the tile shape.
pub fn gemm(name: &str, m: u64, n: u64, k: u64, scale: f64) -> Workload {
    let k = (((k as f64 * scale) as u64) / KSTEP * KSTEP).max(KSTEP);
    let a = 0;
    let b = (m * k * 4).next_multiple_of(super::ALLOC_ALIGN);
    let c = b + (k * n * 4).next_multiple_of(super::ALLOC_ALIGN);
    let end = c + m * n * 4;
    let init = |base: u64, bytes: u64| -> Box<dyn Kernel> {
        Box::new(super::stream_init::Fill {
            base,
            lines: bytes.div_ceil(LINE),
        })
    };
    let column_major = n > m;
    // A (activations) is the previous layer's output, written across the GPU. B (weights)
    // is written by a loader kernel too, except where the tiles run down the columns: then
    // each socket's CTAs read one slice of B's columns, and B is left to be placed where
    // the GEMM first touches it (a page of a row lies in one slice). C is first written by
    // its CTA.
    let mut kernels = vec![init(a, m * k * 4)];
    if !column_major {
        kernels.push(init(b, k * n * 4));
    }
    kernels.push(Box::new(Gemm {
        m,
        n,
        k,
        a,
        b,
        c,
        column_major,
    }));
    Workload {
        name: name.into(),
        class: "gemm",
        footprint: end,
        kernels,
    }
}
