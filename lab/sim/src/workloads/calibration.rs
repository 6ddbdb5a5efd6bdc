//! The real-GPU calibration kernels (cohort-gpu's numa_calib.cu) as workloads: a triad and a
//! 5-point stencil whose arrays are each split in two halves, half h in socket h's memory.
//! The generators lay arrays out one after another; [`HalvesFirst`] moves every array's first
//! half into the first half of the footprint, so `Blocked` placement puts each half where
//! the real run allocates it.

use super::{stencil, stream, Access, Kernel, Workload, LINE};

/// An inner kernel over `arrays` arrays of `bytes` each, addresses remapped so the first half
/// of every array comes first.
struct HalvesFirst {
    inner: Box<dyn Kernel>,
    bytes: u64,
    arrays: u64,
}

impl HalvesFirst {
    fn map(&self, addr: u64) -> u64 {
        let (array, off) = (addr / self.bytes, addr % self.bytes);
        let half = self.bytes / 2;
        let (h, within) = (off / half, off % half);
        h * self.arrays * half + array * half + within
    }
}

impl Kernel for HalvesFirst {
    fn ctas(&self) -> usize {
        self.inner.ctas()
    }
    fn warps_per_cta(&self) -> usize {
        self.inner.warps_per_cta()
    }
    fn compute_per_access(&self) -> f64 {
        self.inner.compute_per_access()
    }
    fn accesses(&self, cta: usize, out: &mut Vec<Access>) {
        let from = out.len();
        self.inner.accesses(cta, out);
        for a in &mut out[from..] {
            *a = a.at(self.map(a.addr()));
        }
    }
}

/// One triad over three arrays of `floats` floats (a multiple of 64 lines).
pub fn triad(floats: u64) -> Workload {
    let lines = floats * 4 / LINE;
    assert!(lines > 0 && lines & 1 == 0, "whole lines in two halves");
    let bytes = lines * LINE;
    Workload {
        name: "calibration-triad".into(),
        class: "streaming",
        footprint: 3 * bytes,
        kernels: vec![Box::new(HalvesFirst {
            inner: stream::triad_kernel(lines),
            bytes,
            arrays: 3,
        })],
    }
}

/// One 5-point sweep over a grid of `floats` floats (rows of stencil::ROW_LINES lines).
pub fn stencil(floats: u64) -> Workload {
    let row_bytes = stencil::ROW_LINES * LINE;
    let rows = floats * 4 / row_bytes;
    assert!(rows > 0 && rows & 1 == 0, "whole rows in two halves");
    Workload {
        name: "calibration-stencil".into(),
        class: "stencil",
        footprint: 2 * rows * row_bytes,
        kernels: vec![Box::new(HalvesFirst {
            inner: stencil::five_point(rows),
            bytes: rows * row_bytes,
            arrays: 2,
        })],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Placement;
    use crate::placement::PageMap;

    #[test]
    fn every_arrays_first_half_lands_on_socket_0() {
        let w = triad(1 << 16);
        let k = &w.kernels[0];
        let mut pages = PageMap::new(Placement::Blocked, 2, 4096, 256, w.footprint);
        let ctas = k.ctas();
        for cta in [0, ctas / 2 - 1, ctas / 2, ctas - 1] {
            let mut v = Vec::new();
            k.accesses(cta, &mut v);
            let want = usize::from(cta >= ctas / 2);
            assert!(
                v.iter().all(|a| pages.home(a.addr(), 0) == want),
                "cta {cta}"
            );
            assert!(v.iter().all(|a| a.addr() < w.footprint));
        }
        let s = stencil(64 * 4096);
        let k = &s.kernels[0];
        let mut pages = PageMap::new(Placement::Blocked, 2, 4096, 256, s.footprint);
        let mut v = Vec::new();
        k.accesses(0, &mut v);
        assert!(v.iter().all(|a| pages.home(a.addr(), 1) == 0));
    }
}
