//! Stencils (Rodinia Hotspot / SRAD-like 2D, a 7-point 3D): regular, each CTA a tile of rows;
//! neighbours' rows come mostly from cache, halo rows of the next tile from its owner.

use super::{Access, Kernel, Workload, LINE};

/// A row is 4096 floats: 128 lines.
pub const ROW_LINES: u64 = 128;
/// A CTA's tile: 8 rows x 32 lines (a quarter of a row's width).
pub const TILE_ROWS: u64 = 8;
pub const TILE_LINES: u64 = 32;

/// One sweep over a `rows` x ROW_LINES grid: for each cell line, reads of `reads` arrays at
/// rows r-1..=r+1 (those in `neighbours`) or r only, writes of `writes` arrays at row r.
struct Sweep2d {
    rows: u64,
    /// (array base, reads its neighbours' rows too).
    reads: Vec<(u64, bool)>,
    writes: Vec<u64>,
    /// Planes (3D: a plane is `rows` rows, its neighbours the planes above and below).
    planes: u64,
    compute: f64,
}

impl Sweep2d {
    fn tiles_per_plane(&self) -> u64 {
        self.rows.div_ceil(TILE_ROWS) * (ROW_LINES / TILE_LINES)
    }
}

impl Kernel for Sweep2d {
    fn ctas(&self) -> usize {
        (self.tiles_per_plane() * self.planes.max(1)) as usize
    }
    fn compute_per_access(&self) -> f64 {
        self.compute
    }
    fn accesses(&self, cta: usize, out: &mut Vec<Access>) {
        let per_plane = self.tiles_per_plane();
        let plane = cta as u64 / per_plane;
        let t = cta as u64 % per_plane;
        let across = ROW_LINES / TILE_LINES;
        let (r0, c0) = ((t / across) * TILE_ROWS, (t % across) * TILE_LINES);
        let plane_lines = self.rows * ROW_LINES;
        let at = |base: u64, p: u64, r: u64, c: u64| {
            base + ((p * plane_lines + r * ROW_LINES + c) * LINE)
        };
        for r in r0..(r0 + TILE_ROWS).min(self.rows) {
            for c in c0..c0 + TILE_LINES {
                for &(b, nb) in &self.reads {
                    out.push(Access::read(at(b, plane, r, c)));
                    if nb {
                        if r > 0 {
                            out.push(Access::read(at(b, plane, r - 1, c)));
                        }
                        if r + 1 < self.rows {
                            out.push(Access::read(at(b, plane, r + 1, c)));
                        }
                        if self.planes > 1 {
                            if plane > 0 {
                                out.push(Access::read(at(b, plane - 1, r, c)));
                            }
                            if plane + 1 < self.planes {
                                out.push(Access::read(at(b, plane + 1, r, c)));
                            }
                        }
                    }
                }
                for &w in &self.writes {
                    out.push(Access::write(at(w, plane, r, c)));
                }
            }
        }
    }
}

/// Hotspot: temperature (5-point) and power in, temperature out, ping-pong for `iters`.
pub fn hotspot(name: &str, footprint: u64, iters: usize) -> Workload {
    let arr = (footprint / 3 / (ROW_LINES * LINE)).max(TILE_ROWS) * (ROW_LINES * LINE);
    let rows = arr / (ROW_LINES * LINE);
    let (t0, t1, power) = (0, arr, 2 * arr);
    let kernels = (0..iters)
        .map(|i| -> Box<dyn Kernel> {
            let (src, dst) = if i % 2 == 0 { (t0, t1) } else { (t1, t0) };
            Box::new(Sweep2d {
                rows,
                reads: vec![(src, true), (power, false)],
                writes: vec![dst],
                planes: 1,
                compute: 2.0,
            })
        })
        .collect();
    Workload {
        name: name.into(),
        class: "stencil",
        footprint: 3 * arr,
        kernels,
    }
}

/// SRAD: kernel 1 reads J (5-point), writes four derivatives and the coefficient c; kernel 2
/// reads c (5-point) and the derivatives, writes J. `iters` iterations.
pub fn srad(name: &str, footprint: u64, iters: usize) -> Workload {
    let arr = (footprint / 6 / (ROW_LINES * LINE)).max(TILE_ROWS) * (ROW_LINES * LINE);
    let rows = arr / (ROW_LINES * LINE);
    let a = |i: u64| i * arr;
    let mut kernels: Vec<Box<dyn Kernel>> = Vec::new();
    for _ in 0..iters {
        kernels.push(Box::new(Sweep2d {
            rows,
            reads: vec![(a(0), true)],
            writes: vec![a(1), a(2), a(3), a(4), a(5)],
            planes: 1,
            compute: 4.0,
        }));
        kernels.push(Box::new(Sweep2d {
            rows,
            reads: vec![
                (a(5), true),
                (a(1), false),
                (a(2), false),
                (a(3), false),
                (a(4), false),
            ],
            writes: vec![a(0)],
            planes: 1,
            compute: 4.0,
        }));
    }
    Workload {
        name: name.into(),
        class: "stencil",
        footprint: 6 * arr,
        kernels,
    }
}

/// A 7-point 3D stencil over 64-row planes, ping-pong for `iters`.
pub fn seven_point(name: &str, footprint: u64, iters: usize) -> Workload {
    const PLANE_ROWS: u64 = 64;
    let plane = PLANE_ROWS * ROW_LINES * LINE;
    let arr = (footprint / 2 / plane).max(1) * plane;
    let planes = (arr / plane).max(1);
    let kernels = (0..iters)
        .map(|i| -> Box<dyn Kernel> {
            let (src, dst) = if i % 2 == 0 { (0, arr) } else { (arr, 0) };
            Box::new(Sweep2d {
                rows: PLANE_ROWS,
                reads: vec![(src, true)],
                writes: vec![dst],
                planes,
                compute: 2.0,
            })
        })
        .collect();
    Workload {
        name: name.into(),
        class: "stencil",
        footprint: 2 * arr,
        kernels,
    }
}

/// One 5-point sweep of a `rows` x ROW_LINES grid: `src` (array 1) in, `dst` (array 0) out
/// (the calibration kernel on real GPUs).
pub(crate) fn five_point(rows: u64) -> Box<dyn Kernel> {
    let arr = rows * ROW_LINES * LINE;
    Box::new(Sweep2d {
        rows,
        reads: vec![(arr, true)],
        writes: vec![0],
        planes: 1,
        compute: 0.0,
    })
}
