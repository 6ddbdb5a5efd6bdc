//! The simulation: every SM issues its CTAs' line accesses, at most `warps_per_sm` of them in
//! flight (one per warp), each through L1, then the L2 of the socket whose memory holds the
//! line (across the links when that is another socket) and that socket's DRAM. Caches are
//! real set-associative caches; bandwidth is modelled by FIFO servers; SMs advance in time
//! order (a heap), so requests reach the shared servers nearly in the order they would on
//! the machine. Between kernels: L1s are invalidated, lanes return to half and half, the
//! cache split to half and half, remote L2 lines are flushed (where L2s hold any) at a cost.

use crate::cache::{Cache, Side};
use crate::config::{CacheOrg, LinkPolicy, SimConfig};
use crate::link::Link;
use crate::partition::rebalance;
use crate::placement::{cta_socket, PageMap};
use crate::server::Server;
use crate::workloads::{Access, Kernel, Workload};
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// What a run measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Stats {
    pub workload: String,
    /// Cycles from the first kernel's launch to the last one's end (flushes included).
    pub cycles: f64,
    pub kernel_cycles: Vec<f64>,
    pub accesses: u64,
    pub l1_hits: u64,
    pub l2_hits: u64,
    /// Accesses whose line lives on another socket.
    pub remote: u64,
    /// Remote reads served by a copy in the requester's own L2.
    pub remote_l2_hits: u64,
    pub dram_bytes: u64,
    /// Bytes over link hops (a remote transfer crosses two: out of one socket, into another).
    pub link_bytes: u64,
    pub lane_turns: u64,
    pub flush_cycles: f64,
    /// Local L2 ways at the end of each kernel, socket 0 (NUMA-aware partitioning).
    pub final_local_ways: Vec<usize>,
}

impl Stats {
    /// Link energy in joules at `pj_per_bit`.
    pub fn link_joules(&self, pj_per_bit: f64) -> f64 {
        self.link_bytes as f64 * 8.0 * pj_per_bit * 1e-12
    }
}

struct Socket {
    l2: Cache,
    l2_port: Server,
    dram: Server,
    link: Link,
    /// Remote reads sent this sample window: the NUMA-aware controller's estimate of the
    /// incoming link's load (responses are what come in).
    remote_reads_window: u64,
}

struct CtaRun {
    accesses: Vec<Access>,
    next: usize,
}

struct Sm {
    socket: usize,
    l1: Cache,
    clock: f64,
    /// Completion times of the last `warps_per_sm` accesses (a slot frees when its access is
    /// done).
    window: Vec<f64>,
    slot: usize,
    ctas: Vec<CtaRun>,
    turn: usize,
    last_done: f64,
}

pub struct Machine<'a> {
    cfg: &'a SimConfig,
    sockets: Vec<Socket>,
    sms: Vec<Sm>,
    pages: PageMap,
    stats: Stats,
    line_shift: u32,
    dram_latency: f64,
    caches_remote_in_l2: bool,
    /// Access buffers of finished CTAs, reused (fresh ones each CTA kept the working set
    /// cold in the host's caches).
    spare: Vec<Vec<Access>>,
}

impl<'a> Machine<'a> {
    pub fn new(cfg: &'a SimConfig, footprint: u64) -> Machine<'a> {
        cfg.validate().expect("a valid configuration");
        let lane = cfg.per_cycle(cfg.lane_gbps);
        let sockets = (0..cfg.sockets)
            .map(|_| Socket {
                l2: Cache::new(cfg.l2_lines(), cfg.l2_ways),
                l2_port: Server::new(cfg.per_cycle(cfg.l2_gbps_per_socket)),
                dram: Server::new(cfg.per_cycle(cfg.dram_gbps_per_socket)),
                link: Link::new(cfg.link_lanes, lane),
                remote_reads_window: 0,
            })
            .collect();
        let sms = (0..cfg.sockets * cfg.sms_per_socket)
            .map(|i| Sm {
                socket: i / cfg.sms_per_socket,
                l1: Cache::new(cfg.l1_lines(), cfg.l1_ways),
                clock: 0.0,
                window: vec![0.0; cfg.warps_per_sm],
                slot: 0,
                ctas: Vec::new(),
                turn: 0,
                last_done: 0.0,
            })
            .collect();
        Machine {
            cfg,
            sockets,
            sms,
            pages: PageMap::new(
                cfg.placement,
                cfg.sockets,
                cfg.page_bytes,
                cfg.interleave_bytes,
                footprint,
            ),
            stats: Stats::default(),
            line_shift: cfg.line_bytes.trailing_zeros(),
            dram_latency: cfg.dram_latency_ns * cfg.clock_ghz,
            caches_remote_in_l2: cfg.cache_org != CacheOrg::MemSideLocal,
            spare: Vec::new(),
        }
    }

    /// Runs every kernel of `w` in order.
    pub fn run(mut self, w: &Workload) -> Stats {
        self.stats.workload = w.name.clone();
        let mut t = 0.0;
        for k in &w.kernels {
            t = self.kernel(k.as_ref(), t);
        }
        self.stats.cycles = t;
        self.stats.lane_turns += self
            .sockets
            .iter()
            .map(|s| s.link.turns as u64)
            .sum::<u64>();
        self.stats
    }

    /// Sets every socket up for a kernel launched at `t`; returns when it may start.
    fn launch(&mut self, t: f64) -> f64 {
        let cfg = self.cfg;
        let mut start = t;
        for sm in &mut self.sms {
            sm.l1.invalidate_all();
            match cfg.cache_org {
                CacheOrg::NumaAware if cfg.l1_ways >= 2 => sm.l1.set_split(cfg.l1_ways / 2),
                _ => sm.l1.clear_split(),
            }
        }
        for s in &mut self.sockets {
            // Software coherence: remote lines cached in L2 are dropped at kernel boundaries,
            // the whole L2 scanned at flush_lines_per_cycle.
            if self.caches_remote_in_l2 {
                s.l2.invalidate_remote();
                let flush = s.l2.lines() as f64 / cfg.flush_lines_per_cycle;
                start = start.max(t + flush);
            }
            match cfg.cache_org {
                CacheOrg::Static5050 | CacheOrg::NumaAware => s.l2.set_split(cfg.l2_ways / 2),
                CacheOrg::MemSideLocal | CacheOrg::SharedCoherent => s.l2.clear_split(),
            }
        }
        self.stats.flush_cycles += start - t;
        for s in &mut self.sockets {
            self.stats.lane_turns += s.link.turns as u64;
            s.link.reset(start);
            s.l2_port.reset(start);
            s.dram.reset(start);
            s.remote_reads_window = 0;
        }
        start
    }

    /// Runs one kernel launched at `t`; returns when its last access completed.
    fn kernel(&mut self, k: &dyn Kernel, t: f64) -> f64 {
        let cfg = self.cfg;
        let start = self.launch(t);
        let n = k.ctas();
        let mut queues: Vec<VecDeque<usize>> = vec![VecDeque::new(); cfg.sockets];
        for c in 0..n {
            queues[cta_socket(cfg.cta_schedule, c, n, cfg.sockets)].push_back(c);
        }
        let per_sm = (cfg.warps_per_sm / k.warps_per_cta().max(1)).clamp(1, 32);
        let step = 1.0 / cfg.issue_per_cycle + k.compute_per_access();
        let mut heap = BinaryHeap::with_capacity(self.sms.len());
        // Fill SMs a CTA at a time, round-robin within each socket, as a block scheduler does.
        for round in 0..per_sm {
            for i in 0..self.sms.len() {
                if round == 0 {
                    let sm = &mut self.sms[i];
                    sm.clock = start;
                    sm.window.fill(start);
                    sm.last_done = start;
                    sm.ctas.clear();
                }
                let s = self.sms[i].socket;
                if let Some(c) = queues[s].pop_front() {
                    let mut v = self.spare.pop().unwrap_or_default();
                    k.accesses(c, &mut v);
                    self.sms[i].ctas.push(CtaRun {
                        accesses: v,
                        next: 0,
                    });
                }
            }
        }
        for (i, sm) in self.sms.iter().enumerate() {
            if !sm.ctas.is_empty() {
                heap.push(Reverse((start.to_bits(), i)));
            }
        }
        let window = cfg.sample_cycles as f64;
        let mut next_sample = start + window;
        let mut end = start;
        while let Some(Reverse((tb, i))) = heap.pop() {
            let now = f64::from_bits(tb);
            while now >= next_sample {
                self.sample(next_sample, window);
                next_sample += window;
            }
            // The SM's next access, its CTAs taking turns.
            let access = {
                let sm = &mut self.sms[i];
                let j = sm.turn % sm.ctas.len();
                let cta = &mut sm.ctas[j];
                let a = cta.accesses[cta.next];
                cta.next += 1;
                if cta.next == cta.accesses.len() {
                    let mut done = sm.ctas.swap_remove(j).accesses;
                    done.clear();
                    self.spare.push(done);
                    if let Some(c) = queues[sm.socket].pop_front() {
                        let mut v = self.spare.pop().unwrap_or_default();
                        k.accesses(c, &mut v);
                        if !v.is_empty() {
                            sm.ctas.push(CtaRun {
                                accesses: v,
                                next: 0,
                            });
                        }
                    }
                } else {
                    sm.turn = sm.turn.wrapping_add(1);
                }
                a
            };
            let done = self.access(i, access, now);
            let sm = &mut self.sms[i];
            sm.window[sm.slot] = done;
            sm.slot = (sm.slot + 1) % sm.window.len();
            sm.clock = now + step;
            sm.last_done = sm.last_done.max(done);
            end = end.max(done);
            if !sm.ctas.is_empty() {
                let next = sm.clock.max(sm.window[sm.slot]);
                heap.push(Reverse((next.to_bits(), i)));
            }
        }
        self.stats.kernel_cycles.push(end - start);
        self.stats
            .final_local_ways
            .push(self.sockets[0].l2.local_ways());
        end
    }

    /// The controllers' sample at `t` (window of `window` cycles).
    fn sample(&mut self, t: f64, window: f64) {
        let cfg = self.cfg;
        for (si, s) in self.sockets.iter_mut().enumerate() {
            // No request arrives before the present: buckets behind it are forgotten.
            let past = t - window;
            s.dram.advance(past);
            s.l2_port.advance(past);
            s.link.out.advance(past);
            s.link.inn.advance(past);
            if cfg.link_policy == LinkPolicy::Dynamic {
                s.link.sample(t, window, cfg.saturation, cfg.switch_cycles);
            }
            let dram_u = s.dram.take_utilisation(window);
            if cfg.cache_org == CacheOrg::NumaAware {
                let incoming =
                    s.remote_reads_window as f64 * (cfg.header_bytes + cfg.line_bytes) as f64;
                let link_sat = incoming / window >= cfg.saturation * s.link.inn.bytes_per_cycle();
                let dram_sat = dram_u >= cfg.saturation;
                let l2 = rebalance(cfg.l2_ways, s.l2.local_ways(), link_sat, dram_sat);
                s.l2.set_split(l2);
                if cfg.l1_ways >= 2 {
                    for sm in self.sms.iter_mut().filter(|m| m.socket == si) {
                        let l1 = rebalance(cfg.l1_ways, sm.l1.local_ways(), link_sat, dram_sat);
                        sm.l1.set_split(l1);
                    }
                }
            }
            s.remote_reads_window = 0;
        }
    }

    /// One access from SM `i` issued at `t`; returns when it completes.
    #[inline]
    fn access(&mut self, i: usize, a: Access, t: f64) -> f64 {
        let cfg = self.cfg;
        let line = a.addr() >> self.line_shift;
        let s = self.sms[i].socket;
        let home = self.pages.home(a.addr(), s);
        self.stats.accesses += 1;
        if !a.is_write() && self.sms[i].l1.access(line, false) {
            self.stats.l1_hits += 1;
            return t + cfg.l1_latency_cycles;
        }
        let side = if home == s { Side::Local } else { Side::Remote };
        let done = if home == s {
            self.l2_and_dram(home, line, a.is_write(), t)
        } else {
            self.stats.remote += 1;
            if !a.is_write() && self.caches_remote_in_l2 && self.sockets[s].l2.access(line, false) {
                self.stats.remote_l2_hits += 1;
                self.stats.l2_hits += 1;
                self.sockets[s].l2_port.serve(t, cfg.line_bytes) + cfg.l2_latency_cycles
            } else {
                let (req, resp) = if a.is_write() {
                    (cfg.header_bytes + cfg.line_bytes, cfg.header_bytes)
                } else {
                    (cfg.header_bytes, cfg.header_bytes + cfg.line_bytes)
                };
                let lat = cfg.link_latency_cycles;
                let t1 = self.sockets[s].link.out.serve(t, req);
                let t1 = self.sockets[home].link.inn.serve(t1, req) + lat;
                let t2 = self.l2_and_dram(home, line, a.is_write(), t1);
                let t3 = self.sockets[home].link.out.serve(t2, resp);
                let t3 = self.sockets[s].link.inn.serve(t3, resp) + lat;
                self.stats.link_bytes += 2 * (req + resp);
                if !a.is_write() {
                    self.sockets[s].remote_reads_window += 1;
                    if self.caches_remote_in_l2 {
                        // Remote lines are clean copies: an evicted one is just dropped.
                        let ev = self.sockets[s].l2.fill(line, Side::Remote, false);
                        self.write_back(s, ev, t3);
                    }
                }
                t3
            }
        };
        if !a.is_write() {
            self.sms[i].l1.fill(line, side, false);
        }
        done
    }

    /// A line at its home socket's L2 (and DRAM on a miss) from `t`.
    #[inline]
    fn l2_and_dram(&mut self, home: usize, line: u64, write: bool, t: f64) -> f64 {
        let cfg = self.cfg;
        let sock = &mut self.sockets[home];
        let t = sock.l2_port.serve(t, cfg.line_bytes);
        if sock.l2.access(line, write) {
            self.stats.l2_hits += 1;
            return t + cfg.l2_latency_cycles;
        }
        if write {
            // A full-line write allocates without reading DRAM.
            let ev = sock.l2.fill(line, Side::Local, true);
            self.write_back(home, ev, t);
            return t + cfg.l2_latency_cycles;
        }
        let done = sock.dram.serve(t, cfg.line_bytes) + self.dram_latency + cfg.l2_latency_cycles;
        self.stats.dram_bytes += cfg.line_bytes;
        let ev = self.sockets[home].l2.fill(line, Side::Local, false);
        self.write_back(home, ev, t);
        done
    }

    /// A dirty local line evicted from socket `s`'s L2 goes to its DRAM (off the critical path).
    #[inline]
    fn write_back(&mut self, s: usize, ev: Option<crate::cache::Evicted>, t: f64) {
        if let Some(e) = ev {
            if e.dirty {
                self.sockets[s].dram.serve(t, self.cfg.line_bytes);
                self.stats.dram_bytes += self.cfg.line_bytes;
            }
        }
    }
}

/// Simulates `w` on `cfg`.
pub fn simulate(cfg: &SimConfig, w: &Workload) -> Stats {
    Machine::new(cfg, w.footprint).run(w)
}
