//! Reductions with asymmetric traffic. `sum`: every CTA reads its chunk and accumulates into
//! an output array that one small set-up kernel zeroed (so its pages are first-touched by
//! one socket): all sockets write into one socket's memory - its incoming link carries data,
//! its outgoing link only acknowledgements. `hpgmg`: a multigrid V-cycle (smooth, restrict
//! down to a coarse grid a handful of CTAs solve, interpolate back up): the coarse levels
//! live where those few CTAs ran and every socket reads them on the way up.

use super::{cta_lines, ctas_for, Access, Kernel, Workload, LINE, LINES_PER_CTA};

/// Writes `lines` lines at `base` with only `ctas` CTAs (a small set-up kernel).
struct Touch {
    base: u64,
    lines: u64,
    ctas: usize,
}

impl Kernel for Touch {
    fn ctas(&self) -> usize {
        self.ctas
    }
    fn accesses(&self, cta: usize, out: &mut Vec<Access>) {
        let per = self.lines.div_ceil(self.ctas as u64);
        let first = cta as u64 * per;
        for l in first..(first + per).min(self.lines) {
            let a = self.base + l * LINE;
            out.push(Access::write(a));
        }
    }
}

/// Reads 32 input lines per CTA, then writes `out_per_cta` lines of the output array (each
/// CTA its own lines: per-bucket partial sums).
struct Accumulate {
    input: u64,
    lines: u64,
    output: u64,
    out_per_cta: u64,
}

impl Kernel for Accumulate {
    fn ctas(&self) -> usize {
        ctas_for(self.lines)
    }
    fn compute_per_access(&self) -> f64 {
        1.0
    }
    fn accesses(&self, cta: usize, out: &mut Vec<Access>) {
        for l in cta_lines(cta, self.lines) {
            out.push(Access::read(self.input + l * LINE));
        }
        for j in 0..self.out_per_cta {
            out.push(Access::write(
                self.output + (cta as u64 * self.out_per_cta + j) * LINE,
            ));
        }
    }
}

pub fn sum(name: &str, footprint: u64) -> Workload {
    // Input 4/5 of the footprint, the output (partials) 1/5: 8 output lines per 32 read.
    let input_lines = footprint * 4 / 5 / LINE;
    let ctas = input_lines.div_ceil(LINES_PER_CTA);
    let out_per_cta = 8;
    let output = input_lines * LINE;
    let out_lines = ctas * out_per_cta;
    Workload {
        name: name.into(),
        class: "reduction",
        footprint: output + out_lines * LINE,
        kernels: vec![
            // The input is written by a full-width producer (first touch spread over sockets),
            // the output zeroed by a 4-CTA set-up kernel.
            Box::new(super::stream_init::Fill {
                base: 0,
                lines: input_lines,
            }),
            Box::new(Touch {
                base: output,
                lines: out_lines,
                ctas: 4,
            }),
            Box::new(Accumulate {
                input: 0,
                lines: input_lines,
                output,
                out_per_cta,
            }),
            Box::new(Accumulate {
                input: 0,
                lines: input_lines,
                output,
                out_per_cta,
            }),
        ],
    }
}

/// Smooth (read u, f; write u) over a level of `lines` lines at `u`, `f`.
struct Smooth {
    u: u64,
    f: u64,
    lines: u64,
}

impl Kernel for Smooth {
    fn ctas(&self) -> usize {
        ctas_for(self.lines)
    }
    fn compute_per_access(&self) -> f64 {
        2.0
    }
    fn accesses(&self, cta: usize, out: &mut Vec<Access>) {
        for l in cta_lines(cta, self.lines) {
            out.push(Access::read(self.u + l * LINE));
            out.push(Access::read(self.f + l * LINE));
            out.push(Access::write(self.u + l * LINE));
        }
    }
}

/// Between a fine level (`fine_lines` at `fine`) and a coarse one (an eighth, at `coarse`):
/// restriction reads fine and writes coarse; interpolation reads coarse and updates fine.
/// CTAs cover fine lines either way.
struct Transfer {
    fine: u64,
    fine_lines: u64,
    coarse: u64,
    restrict: bool,
}

impl Kernel for Transfer {
    fn ctas(&self) -> usize {
        ctas_for(self.fine_lines)
    }
    fn accesses(&self, cta: usize, out: &mut Vec<Access>) {
        let range = cta_lines(cta, self.fine_lines);
        let last = range.end;
        for l in range {
            let c = self.coarse + (l / 8) * LINE;
            if self.restrict {
                out.push(Access::read(self.fine + l * LINE));
                if l % 8 == 7 || l + 1 == last {
                    out.push(Access::write(c));
                }
            } else {
                out.push(Access::read(c));
                out.push(Access::read(self.fine + l * LINE));
                out.push(Access::write(self.fine + l * LINE));
            }
        }
    }
}

pub fn hpgmg(name: &str, footprint: u64) -> Workload {
    // Level 0 holds u and f; each coarser level an eighth: total ~ 2 * 8/7 of level 0.
    let l0 = footprint * 7 / 16 / LINE;
    let mut levels = Vec::new(); // (u base, f base, lines)
    let mut base = 0;
    let mut lines = l0;
    while lines >= LINES_PER_CTA {
        levels.push((base, base + lines * LINE, lines));
        base += 2 * lines * LINE;
        lines /= 8;
    }
    let mut kernels: Vec<Box<dyn Kernel>> = Vec::new();
    // Initial values: written by full-width kernels, level by level.
    for &(u, f, n) in &levels {
        kernels.push(Box::new(Smooth { u, f, lines: n }));
    }
    // Down: smooth, restrict.
    for w in levels.windows(2) {
        let ((u, f, n), (cu, _, _)) = (w[0], w[1]);
        kernels.push(Box::new(Smooth { u, f, lines: n }));
        kernels.push(Box::new(Transfer {
            fine: u,
            fine_lines: n,
            coarse: cu,
            restrict: true,
        }));
    }
    // Coarsest: several smoothing sweeps by its few CTAs.
    let &(u, f, n) = levels.last().expect("at least one level");
    for _ in 0..4 {
        kernels.push(Box::new(Smooth { u, f, lines: n }));
    }
    // Up: interpolate, smooth.
    for w in levels.windows(2).rev() {
        let ((u, f, n), (cu, _, _)) = (w[0], w[1]);
        kernels.push(Box::new(Transfer {
            fine: u,
            fine_lines: n,
            coarse: cu,
            restrict: false,
        }));
        kernels.push(Box::new(Smooth { u, f, lines: n }));
    }
    Workload {
        name: name.into(),
        class: "reduction",
        footprint: base,
        kernels,
    }
}
