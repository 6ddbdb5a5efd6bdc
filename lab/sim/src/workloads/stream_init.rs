//! A full-width initialisation kernel: writes every line of [base, base + lines lines) once, 32 per CTA (the
//! loader a real application runs first; with first-touch it spreads pages as the CTAs are
//! spread).

use super::{cta_lines, ctas_for, Access, Kernel, LINE};

pub struct Fill {
    pub base: u64,
    pub lines: u64,
}

impl Kernel for Fill {
    fn ctas(&self) -> usize {
        ctas_for(self.lines)
    }
    fn accesses(&self, cta: usize, out: &mut Vec<Access>) {
        for l in cta_lines(cta, self.lines) {
            out.push(Access::write(self.base + l * LINE));
        }
    }
}
