//! Which socket's memory holds an address (the page placement policies) and which socket
//! runs a CTA (the CTA scheduling policies).

use crate::config::{CtaSchedule, Placement};

const UNTOUCHED: u8 = u8::MAX;

/// The home socket of every address of a workload's footprint.
pub struct PageMap {
    policy: Placement,
    sockets: u64,
    page_shift: u32,
    interleave_shift: u32,
    footprint: u64,
    /// First-touch: the owner of each page (UNTOUCHED until touched).
    owner: Vec<u8>,
}

impl PageMap {
    pub fn new(
        policy: Placement,
        sockets: usize,
        page_bytes: u64,
        interleave_bytes: u64,
        footprint: u64,
    ) -> PageMap {
        assert!(sockets >= 1 && sockets < UNTOUCHED as usize);
        let pages = footprint.div_ceil(page_bytes) as usize;
        PageMap {
            policy,
            sockets: sockets as u64,
            page_shift: page_bytes.trailing_zeros(),
            interleave_shift: interleave_bytes.trailing_zeros(),
            footprint: footprint.max(1),
            owner: if policy == Placement::FirstTouch {
                vec![UNTOUCHED; pages]
            } else {
                Vec::new()
            },
        }
    }

    /// The socket whose memory holds `addr`, for an access from socket `from` (first touch
    /// assigns the page to it when nobody has).
    #[inline]
    pub fn home(&mut self, addr: u64, from: usize) -> usize {
        if self.sockets == 1 {
            return 0;
        }
        match self.policy {
            Placement::Interleave => ((addr >> self.interleave_shift) % self.sockets) as usize,
            Placement::RoundRobinPages => ((addr >> self.page_shift) % self.sockets) as usize,
            Placement::Blocked => {
                (((addr.min(self.footprint - 1)) as u128 * self.sockets as u128)
                    / self.footprint as u128) as usize
            }
            Placement::FirstTouch => {
                let p = (addr >> self.page_shift) as usize;
                // Addresses past the declared footprint are placed as if touched first here.
                let Some(o) = self.owner.get_mut(p) else {
                    return from;
                };
                if *o == UNTOUCHED {
                    *o = from as u8;
                }
                *o as usize
            }
        }
    }

    /// Pages placed so far per socket (first touch), for reports.
    pub fn touched(&self) -> Vec<u64> {
        let mut v = vec![0; self.sockets as usize];
        for &o in &self.owner {
            if o != UNTOUCHED {
                v[o as usize] += 1;
            }
        }
        v
    }
}

/// The socket that runs CTA `cta` of `n`.
pub fn cta_socket(policy: CtaSchedule, cta: usize, n: usize, sockets: usize) -> usize {
    debug_assert!(cta < n);
    match policy {
        CtaSchedule::RoundRobin => cta % sockets,
        CtaSchedule::Contiguous => cta * sockets / n,
        CtaSchedule::ContiguousReversed => sockets - 1 - cta * sockets / n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleave_and_round_robin_cycle_through_sockets() {
        let mut m = PageMap::new(Placement::Interleave, 4, 4096, 256, 1 << 20);
        let homes: Vec<usize> = (0..6).map(|i| m.home(i * 256, 3)).collect();
        assert_eq!(homes, [0, 1, 2, 3, 0, 1]);
        assert_eq!(m.home(255, 3), 0);
        let mut m = PageMap::new(Placement::RoundRobinPages, 4, 4096, 256, 1 << 20);
        assert_eq!(
            (m.home(4095, 2), m.home(4096, 2), m.home(3 * 4096 + 7, 2)),
            (0, 1, 3)
        );
    }

    #[test]
    fn first_touch_keeps_the_first_socket() {
        let mut m = PageMap::new(Placement::FirstTouch, 4, 4096, 256, 1 << 20);
        assert_eq!(m.home(5000, 2), 2);
        assert_eq!(m.home(4096, 0), 2); // same page, touched by 2 first
        assert_eq!(m.home(0, 1), 1);
        assert_eq!(m.touched(), vec![0, 1, 1, 0]);
        assert_eq!(m.home(u64::MAX / 2, 3), 3); // beyond the footprint: local
    }

    #[test]
    fn blocked_cuts_the_footprint_in_socket_blocks() {
        let mut m = PageMap::new(Placement::Blocked, 2, 4096, 256, 1000);
        assert_eq!(
            (
                m.home(0, 1),
                m.home(499, 1),
                m.home(500, 0),
                m.home(5000, 0)
            ),
            (0, 0, 1, 1)
        );
    }

    #[test]
    fn one_socket_is_always_home() {
        for p in [
            Placement::Interleave,
            Placement::RoundRobinPages,
            Placement::FirstTouch,
            Placement::Blocked,
        ] {
            let mut m = PageMap::new(p, 1, 4096, 256, 1 << 20);
            assert!((0..100u64).all(|i| m.home(i * 777, 0) == 0));
        }
    }

    #[test]
    fn cta_policies() {
        let rr: Vec<usize> = (0..8)
            .map(|c| cta_socket(CtaSchedule::RoundRobin, c, 8, 4))
            .collect();
        assert_eq!(rr, [0, 1, 2, 3, 0, 1, 2, 3]);
        let co: Vec<usize> = (0..8)
            .map(|c| cta_socket(CtaSchedule::Contiguous, c, 8, 4))
            .collect();
        assert_eq!(co, [0, 0, 1, 1, 2, 2, 3, 3]);
        let rv: Vec<usize> = (0..8)
            .map(|c| cta_socket(CtaSchedule::ContiguousReversed, c, 8, 4))
            .collect();
        assert_eq!(rv, [3, 3, 2, 2, 1, 1, 0, 0]);
    }
}
