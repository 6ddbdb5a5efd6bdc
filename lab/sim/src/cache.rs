//! A set-associative cache with LRU replacement whose ways are split between local and remote
//! data (`local_ways` of them local, the rest remote). A lookup finds a line in any way (a
//! line stays where it was put when the split moves); a fill evicts within its own side.

/// Which side of the split a line belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Local,
    Remote,
}

const EMPTY: u64 = u64::MAX;

pub struct Cache {
    sets: usize,
    ways: usize,
    /// Ways [0, local_ways) hold local lines, the rest remote ones.
    local_ways: usize,
    /// Whether the split applies (false: any line may take any way).
    split: bool,
    /// Set after set, `ways` each: a lookup touches one contiguous run (one host cache line
    /// for a 4-way L1); separate tag/stamp/flag arrays cost a host cache miss each.
    slots: Vec<Way>,
    clock: u32,
}

#[derive(Debug, Clone, Copy)]
struct Way {
    tag: u64,
    stamp: u32,
    dirty: bool,
    /// A remote line (for the kernel-boundary flush).
    remote: bool,
}

const EMPTY_WAY: Way = Way {
    tag: EMPTY,
    stamp: 0,
    dirty: false,
    remote: false,
};

/// What a fill pushed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Evicted {
    pub line: u64,
    pub dirty: bool,
}

impl Cache {
    /// `lines` lines in `ways`-way sets; no split (every way takes any line).
    pub fn new(lines: usize, ways: usize) -> Cache {
        assert!(ways > 0 && lines >= ways, "a cache holds at least one set");
        let sets = lines / ways;
        Cache {
            sets,
            ways,
            local_ways: ways,
            split: false,
            slots: vec![EMPTY_WAY; sets * ways],
            clock: 0,
        }
    }

    pub fn ways(&self) -> usize {
        self.ways
    }

    pub fn lines(&self) -> usize {
        self.sets * self.ways
    }

    /// Splits the ways: `local` for local lines, the rest for remote ones (each side keeps
    /// at least one way).
    pub fn set_split(&mut self, local: usize) {
        assert!(local >= 1 && local < self.ways, "each side keeps a way");
        self.split = true;
        self.local_ways = local;
    }

    pub fn clear_split(&mut self) {
        self.split = false;
        self.local_ways = self.ways;
    }

    /// Ways given to local lines (all of them when not split).
    pub fn local_ways(&self) -> usize {
        self.local_ways
    }

    #[inline]
    fn set_of(&self, line: u64) -> usize {
        // Lines of a page spread over sets; the multiply breaks power-of-two strides.
        ((line ^ (line >> 13).wrapping_mul(0x9e37_79b9)) as usize) % self.sets
    }

    /// Looks `line` up; on a hit refreshes it (and marks it dirty for a write).
    #[inline]
    pub fn access(&mut self, line: u64, write: bool) -> bool {
        let base = self.set_of(line) * self.ways;
        self.clock = self.clock.wrapping_add(1);
        let clock = self.clock;
        for w in &mut self.slots[base..base + self.ways] {
            if w.tag == line {
                w.stamp = clock;
                w.dirty |= write;
                return true;
            }
        }
        false
    }

    /// Puts `line` in (after a miss), evicting the least recently used line of its side.
    #[inline]
    pub fn fill(&mut self, line: u64, side: Side, dirty: bool) -> Option<Evicted> {
        let base = self.set_of(line) * self.ways;
        let (lo, hi) = match (self.split, side) {
            (false, _) => (0, self.ways),
            (true, Side::Local) => (0, self.local_ways),
            (true, Side::Remote) => (self.local_ways, self.ways),
        };
        let ways = &mut self.slots[base + lo..base + hi];
        let mut victim = 0;
        for (i, w) in ways.iter().enumerate() {
            if w.tag == EMPTY {
                victim = i;
                break;
            }
            if older(w.stamp, ways[victim].stamp, self.clock) {
                victim = i;
            }
        }
        let v = &mut ways[victim];
        let out = (v.tag != EMPTY).then_some(Evicted {
            line: v.tag,
            dirty: v.dirty,
        });
        self.clock = self.clock.wrapping_add(1);
        *v = Way {
            tag: line,
            stamp: self.clock,
            dirty,
            remote: side == Side::Remote,
        };
        out
    }

    /// Drops every remote line (software coherence at a kernel boundary); returns how many.
    pub fn invalidate_remote(&mut self) -> usize {
        let mut n = 0;
        for w in &mut self.slots {
            if w.remote && w.tag != EMPTY {
                *w = EMPTY_WAY;
                n += 1;
            }
        }
        n
    }

    /// Drops everything (an L1 at a kernel boundary); dirty lines are not written anywhere:
    /// L1s are write-through.
    pub fn invalidate_all(&mut self) {
        self.slots.fill(EMPTY_WAY);
    }
}

/// Whether stamp `a` is older than `b` at `now` (stamps wrap).
#[inline]
fn older(a: u32, b: u32, now: u32) -> bool {
    now.wrapping_sub(a) > now.wrapping_sub(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_evicts_the_oldest_line_of_a_set() {
        let mut c = Cache::new(4, 4); // one set
        for l in 0..4 {
            assert!(!c.access(l, false));
            assert_eq!(c.fill(l, Side::Local, false), None);
        }
        assert!(c.access(0, false)); // 1 is now the oldest
        assert_eq!(c.fill(9, Side::Local, false).unwrap().line, 1);
        assert!(c.access(0, false) && c.access(9, false) && !c.access(1, false));
    }

    #[test]
    fn a_split_keeps_each_side_in_its_ways() {
        let mut c = Cache::new(4, 4);
        c.set_split(1);
        // Remote lines share 3 ways; a fourth evicts the oldest remote, never the local one.
        assert_eq!(c.fill(100, Side::Local, false), None);
        for l in 0..3 {
            assert_eq!(c.fill(l, Side::Remote, false), None);
        }
        assert_eq!(c.fill(7, Side::Remote, false).unwrap().line, 0);
        assert!(c.access(100, false));
        // The local side holds one line.
        assert_eq!(c.fill(101, Side::Local, false).unwrap().line, 100);
    }

    #[test]
    fn dirty_lines_report_on_eviction_and_remote_lines_flush() {
        let mut c = Cache::new(2, 2);
        c.fill(1, Side::Local, false);
        assert!(c.access(1, true));
        c.fill(2, Side::Remote, false);
        let e = c.fill(3, Side::Local, false).unwrap();
        assert_eq!(
            e,
            Evicted {
                line: 1,
                dirty: true
            }
        );
        assert_eq!(c.invalidate_remote(), 1);
        assert!(!c.access(2, false) && c.access(3, false));
    }
}
