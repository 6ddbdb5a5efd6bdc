//! Streaming (STREAM): every line touched once per kernel, perfectly regular; DRAM- or
//! link-bound depending on where the pages live.

use super::{cta_lines, ctas_for, Access, Kernel, Workload, LINE};

struct Triad {
    arrays: Vec<u64>, // base addresses: the first is written
    lines: u64,
}

impl Kernel for Triad {
    fn ctas(&self) -> usize {
        ctas_for(self.lines)
    }
    fn accesses(&self, cta: usize, out: &mut Vec<Access>) {
        for l in cta_lines(cta, self.lines) {
            for &b in &self.arrays[1..] {
                out.push(Access::read(b + l * LINE));
            }
            out.push(Access::write(self.arrays[0] + l * LINE));
        }
    }
}

/// One a = b + s c over three arrays of `lines` lines each at 0, 1, 2 x lines (the
/// calibration kernel on real GPUs).
pub(crate) fn triad_kernel(lines: u64) -> Box<dyn Kernel> {
    let per = lines * LINE;
    Box::new(Triad {
        arrays: vec![0, per, 2 * per],
        lines,
    })
}

/// a = b + s c over three arrays of footprint/3 bytes; two iterations.
pub fn triad(name: &str, footprint: u64) -> Workload {
    let per = footprint / 3 / LINE * LINE;
    let k = || -> Box<dyn Kernel> {
        Box::new(Triad {
            arrays: vec![0, per, 2 * per],
            lines: per / LINE,
        })
    };
    Workload {
        name: name.into(),
        class: "streaming",
        footprint: 3 * per,
        kernels: vec![k(), k()],
    }
}

/// b = s a, then a = s b (two arrays, alternating direction): three iterations.
pub fn copy_scale(name: &str, footprint: u64) -> Workload {
    let per = footprint / 2 / LINE * LINE;
    let lines = per / LINE;
    let kernels: Vec<Box<dyn Kernel>> = (0..3)
        .map(|i| -> Box<dyn Kernel> {
            let (dst, src) = if i % 2 == 0 { (per, 0) } else { (0, per) };
            Box::new(Triad {
                arrays: vec![dst, src],
                lines,
            })
        })
        .collect();
    Workload {
        name: name.into(),
        class: "streaming",
        footprint: 2 * per,
        kernels,
    }
}
