//! A full-width initialisation kernel: writes every line of [base, base + lines lines) once, 32 per CTA (the
//! loader a real application runs first; with first-touch it spreads pages as the CTAs are
//! spread).

use super::{Access, Kernel};

const LINE: u64 = 128;
const LINES_PER_CTA: u64 = 32;

pub struct Fill {
    pub base: u64,
    pub lines: u64,
}

impl Kernel for Fill {
    fn ctas(&self) -> usize {
        self.lines.div_ceil(LINES_PER_CTA) as usize
    }
    fn accesses(&self, cta: usize, out: &mut Vec<Access>) {
        let first = cta as u64 * LINES_PER_CTA;
        for l in first..(first + LINES_PER_CTA).min(self.lines) {
            out.push(Access::write(self.base + l * LINE));
        }
    }
}
