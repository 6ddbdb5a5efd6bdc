//! A bandwidth resource (a DRAM, an L2 port, one direction of a link) as a calendar of
//! 32-cycle buckets, each holding bandwidth x 32 bytes. A transfer arriving at t takes room
//! from t's bucket on (the first with room), and completes when its bytes fit. Requests reach
//! a server slightly out of time order (an SM's request books the link and the remote DRAM
//! ahead of requests other SMs issue a moment later); a single "next free" time would leave
//! idle gaps at every such inversion and lose most of the bandwidth, the calendar backfills
//! them.

use std::collections::VecDeque;

const BUCKET: f64 = 32.0;

/// `jump` of a bucket with room.
const OPEN: u64 = u64::MAX;

#[derive(Debug, Clone)]
pub struct Server {
    bytes_per_cycle: f64,
    /// Bytes booked per bucket, from bucket `base` on.
    fill: VecDeque<f64>,
    /// Per bucket: OPEN while it has room, else a later bucket to look at next (a
    /// "next free slot" forest with path compression: a saturated server's requests arrive
    /// far behind its booked frontier, and walking every full bucket in between made the
    /// search linear in the queue's length).
    jump: VecDeque<u64>,
    base: u64,
    /// Service time of transfers that arrived in the current sample window (utilisation).
    busy: f64,
    /// Bytes moved since the kernel started.
    pub bytes: u64,
}

impl Server {
    pub fn new(bytes_per_cycle: f64) -> Server {
        assert!(bytes_per_cycle > 0.0);
        Server {
            bytes_per_cycle,
            fill: VecDeque::new(),
            jump: VecDeque::new(),
            base: 0,
            busy: 0.0,
            bytes: 0,
        }
    }

    fn cap(&self) -> f64 {
        self.bytes_per_cycle * BUCKET
    }

    #[inline]
    fn index(&mut self, b: u64) -> usize {
        let i = (b - self.base) as usize;
        if i >= self.fill.len() {
            self.fill.resize(i + 1, 0.0);
            self.jump.resize(i + 1, OPEN);
        }
        i
    }

    /// The first bucket at or after `b` with room.
    #[inline]
    fn open_from(&mut self, b: u64) -> u64 {
        let mut r = b.max(self.base);
        loop {
            let i = self.index(r);
            match self.jump[i] {
                OPEN => break,
                next => r = next,
            }
        }
        // Path compression: everything walked over now points at `r`.
        let mut x = b.max(self.base);
        while x != r {
            let i = (x - self.base) as usize;
            let next = self.jump[i];
            self.jump[i] = r;
            x = next;
        }
        r
    }

    /// Moves `bytes` arriving at `t`; returns when the last byte has left.
    #[inline]
    pub fn serve(&mut self, t: f64, bytes: u64) -> f64 {
        let hold = bytes as f64 / self.bytes_per_cycle;
        self.busy += hold;
        self.bytes += bytes;
        let cap = self.cap();
        let mut left = bytes as f64;
        let mut b = self.open_from((t / BUCKET) as u64);
        loop {
            let i = self.index(b);
            let room = cap - self.fill[i];
            // Less than a byte of room (rounding) counts as none.
            if room >= 1.0 {
                if room > left {
                    self.fill[i] += left;
                    let end = b as f64 * BUCKET + self.fill[i] / cap * BUCKET;
                    return end.max(t + hold);
                }
                left -= room;
                self.fill[i] = cap;
            }
            self.jump[i] = b + 1;
            if left < 1e-9 {
                return ((b + 1) as f64 * BUCKET).max(t + hold);
            }
            b = self.open_from(b + 1);
        }
    }

    pub fn bytes_per_cycle(&self) -> f64 {
        self.bytes_per_cycle
    }

    pub fn set_bandwidth(&mut self, bytes_per_cycle: f64) {
        assert!(bytes_per_cycle > 0.0);
        self.bytes_per_cycle = bytes_per_cycle;
    }

    /// Holds the server idle for `cycles` from `t` (a lane turning around).
    pub fn pause(&mut self, t: f64, cycles: f64) {
        let cap = self.cap();
        let (b0, b1) = ((t / BUCKET) as u64, ((t + cycles) / BUCKET).ceil() as u64);
        for b in b0.max(self.base)..b1 {
            let i = self.index(b);
            self.fill[i] = cap;
            if self.jump[i] == OPEN {
                self.jump[i] = b + 1;
            }
        }
    }

    /// Forgets buckets before `t` (no request arrives before the simulation's present).
    pub fn advance(&mut self, t: f64) {
        let b = (t / BUCKET) as u64;
        while self.base < b && !self.fill.is_empty() {
            self.fill.pop_front();
            self.jump.pop_front();
            self.base += 1;
        }
        if self.fill.is_empty() {
            self.base = self.base.max(b);
        }
    }

    /// Utilisation over a window of `cycles`, and a fresh window.
    pub fn take_utilisation(&mut self, cycles: f64) -> f64 {
        let u = self.busy / cycles;
        self.busy = 0.0;
        u
    }

    /// A new kernel at `t`: nothing booked, counters from zero.
    pub fn reset(&mut self, t: f64) {
        self.fill.clear();
        self.jump.clear();
        self.base = (t / BUCKET) as u64;
        self.busy = 0.0;
        self.bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transfers_share_the_bandwidth_and_backfill_gaps() {
        let mut s = Server::new(2.0); // 64 bytes a bucket
        assert_eq!(s.serve(0.0, 8), 4.0);
        assert_eq!(s.serve(1.0, 8), 8.0); // behind the first
                                          // A transfer booked far ahead leaves the time before it usable.
        assert_eq!(s.serve(640.0, 64), 672.0);
        assert_eq!(s.serve(100.0, 8), 104.0);
        // A full bucket pushes the next arrival on.
        s.serve(2000.0, 64);
        // (bucket 62 full: the next 8 bytes go to bucket 63, 2016..2048)
        assert_eq!(s.serve(2000.0, 8), 2020.0);
        assert_eq!(
            s.take_utilisation(100.0),
            (4.0 + 4.0 + 32.0 + 4.0 + 32.0 + 4.0) / 100.0
        );
        s.pause(3000.0, 100.0);
        assert!(s.serve(3000.0, 2) >= 3100.0);
        s.advance(5000.0);
        assert_eq!(s.serve(5000.0, 2), 5001.0);
    }
}
