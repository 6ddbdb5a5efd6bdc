//! Workloads as address-stream generators: a workload is a sequence of kernels; a kernel is a
//! grid of CTAs, each of which emits the 128-byte line accesses its warps make, in order.
//! Shapes (CTAs, footprint, reuse, read/write mix, compute per access) follow the paper's
//! workload classes; sizes are scaled so every figure runs in minutes on two cores (the
//! footprints stay well above the 16 MB of L2 a 4-socket machine has, except where a class
//! lives from its cache).

pub mod calibration;
mod gather;
mod gemm;
mod knn;
mod reduction;
mod stencil;
mod stream;
mod stream_init;

pub use knn::knn_trace;

/// The stencils' grid and tile (the real-GPU calibration kernels use the same).
pub mod stencil_geometry {
    pub use super::stencil::{ROW_LINES, TILE_LINES, TILE_ROWS};
}

/// One line access of a warp: the address, and the top bit for a write (8 bytes: the
/// simulator streams hundreds of millions of these through host caches).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access(u64);

const WRITE_BIT: u64 = 1 << 63;

impl Access {
    pub fn read(addr: u64) -> Access {
        debug_assert!(addr < WRITE_BIT);
        Access(addr)
    }
    pub fn write(addr: u64) -> Access {
        debug_assert!(addr < WRITE_BIT);
        Access(addr | WRITE_BIT)
    }
    #[inline]
    pub fn addr(self) -> u64 {
        self.0 & !WRITE_BIT
    }
    #[inline]
    pub fn is_write(self) -> bool {
        self.0 & WRITE_BIT != 0
    }
    /// The same access at another address.
    pub fn at(self, addr: u64) -> Access {
        debug_assert!(addr < WRITE_BIT);
        Access(addr | (self.0 & WRITE_BIT))
    }
}

/// One kernel launch.
pub trait Kernel: Send + Sync {
    fn ctas(&self) -> usize;
    /// Warps per CTA (occupancy: an SM holds warps_per_sm / this CTAs at once, at most 32).
    fn warps_per_cta(&self) -> usize {
        8
    }
    /// Cycles of arithmetic an SM spends per line access (on top of issuing it).
    fn compute_per_access(&self) -> f64 {
        0.0
    }
    /// Appends CTA `cta`'s accesses to `out`.
    fn accesses(&self, cta: usize, out: &mut Vec<Access>);
}

/// A named sequence of kernels over a footprint of memory.
pub struct Workload {
    pub name: String,
    /// The paper's class (streaming, stencil, reduction, irregular, gemm, k-NN).
    pub class: &'static str,
    pub footprint: u64,
    pub kernels: Vec<Box<dyn Kernel>>,
}

impl Workload {
    /// Line accesses over all kernels (the work a simulation does).
    pub fn accesses(&self) -> u64 {
        let mut v = Vec::new();
        let mut n = 0;
        for k in &self.kernels {
            for c in 0..k.ctas() {
                v.clear();
                k.accesses(c, &mut v);
                n += v.len() as u64;
            }
        }
        n
    }
}

pub const MB: u64 = 1 << 20;
/// The generators' line (the default `line_bytes`; a configuration with other lines still
/// runs, counting each 128-byte access as one request).
pub(crate) const LINE: u64 = 128;
/// Where a generator's separately allocated arrays start (a page of the default
/// configuration; a real allocator aligns at least this much).
pub(crate) const ALLOC_ALIGN: u64 = 4096;
/// Lines a CTA of the streaming-shaped kernels covers (8 warps x 4 lines).
pub(crate) const LINES_PER_CTA: u64 = 32;

/// CTAs that cover `lines` lines, LINES_PER_CTA each.
pub(crate) fn ctas_for(lines: u64) -> usize {
    lines.div_ceil(LINES_PER_CTA) as usize
}

/// The lines CTA `cta` of such a kernel covers.
pub(crate) fn cta_lines(cta: usize, lines: u64) -> std::ops::Range<u64> {
    let first = cta as u64 * LINES_PER_CTA;
    first..(first + LINES_PER_CTA).min(lines)
}

/// The workload set of the figures: 13 instances over the paper's classes. `scale` shrinks
/// (< 1) or grows every footprint; `seed` drives the irregular ones.
pub fn suite(scale: f64, seed: u64) -> Vec<Workload> {
    let s = |mb: f64| ((mb * scale * MB as f64) as u64).max(MB);
    vec![
        stream::triad("stream-triad-64M", s(64.0)),
        stream::triad("stream-triad-192M", s(192.0)),
        stream::copy_scale("stream-scale-96M", s(96.0)),
        stencil::hotspot("hotspot-2d", s(64.0), 4),
        stencil::srad("srad-2d", s(64.0), 2),
        stencil::seven_point("stencil-3d", s(96.0), 3),
        reduction::hpgmg("hpgmg-vcycle", s(96.0)),
        reduction::sum("reduce-sum", s(128.0)),
        gather::bfs("bfs-graph", s(64.0), seed),
        gather::sssp("sssp-graph", s(64.0), seed + 1),
        gemm::gemm("alexnet-conv2-gemm", 1024, 1024, 1200, scale),
        gemm::gemm("alexnet-fc6-gemm", 256, 4096, 4096, scale),
        knn_trace(scale, seed + 2),
    ]
}

/// The suite's names, for `--workload` checks.
pub fn names(scale: f64) -> Vec<String> {
    suite(scale.min(0.01), 1)
        .into_iter()
        .map(|w| w.name)
        .collect()
}
