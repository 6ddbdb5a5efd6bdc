//! The simulated machine, every value a TOML key. Defaults are the paper's Table 1 (4 sockets
//! x 64 SMs at 1 GHz, L1 128 KB 4-way, L2 4 MB 16-way per socket, 128 GB/s links of 16
//! reversible 8 GB/s lanes, 768 GB/s DRAM per socket); `configs/sim/*.toml` hold presets.

use serde::{Deserialize, Serialize};

/// Where a page of memory lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    /// Consecutive `interleave_bytes` chunks on consecutive sockets (the paper's baseline).
    Interleave,
    /// Consecutive pages on consecutive sockets.
    RoundRobinPages,
    /// A page lives on the socket that touched it first.
    FirstTouch,
    /// The footprint cut into one contiguous block per socket (data placed for contiguous
    /// CTA blocks ahead of time; used to calibrate against two real GPUs).
    Blocked,
}

/// Which socket runs a CTA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CtaSchedule {
    /// CTA i on socket i mod S (a single GPU's scheduler spread over sockets).
    RoundRobin,
    /// One sub-kernel per socket: CTAs [i n/S, (i+1) n/S) on socket i.
    Contiguous,
    /// Contiguous, socket order reversed: every socket works on the block another socket
    /// holds (with `Blocked` placement: all data on the peer).
    ContiguousReversed,
}

/// How each socket's link splits its lanes between directions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LinkPolicy {
    Static,
    /// Turn a lane toward a saturated direction every `sample_cycles` (the paper's
    /// lane-reversible links).
    Dynamic,
}

/// What a socket's L1s and L2 may cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CacheOrg {
    /// L2 memory-side: caches only the socket's own memory; remote data only in L1.
    MemSideLocal,
    /// Half the L2 ways for local, half for remote data.
    Static5050,
    /// L1 and L2 cache local and remote data in any way; remote lines flushed at kernel
    /// boundaries (software coherence).
    SharedCoherent,
    /// Ways of L1 and L2 split local/remote, moved one way per sample toward the side that
    /// needs it (the paper's NUMA-aware partitioning); flushed like `SharedCoherent`.
    NumaAware,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SimConfig {
    pub sockets: usize,
    pub sms_per_socket: usize,
    pub clock_ghz: f64,
    /// Warps an SM holds at once (its memory-level parallelism: one outstanding line each).
    pub warps_per_sm: usize,
    /// Line requests an SM can issue per cycle.
    pub issue_per_cycle: f64,
    pub line_bytes: u64,
    pub l1_kb: usize,
    pub l1_ways: usize,
    pub l1_latency_cycles: f64,
    pub l2_mb_per_socket: f64,
    pub l2_ways: usize,
    pub l2_latency_cycles: f64,
    pub l2_gbps_per_socket: f64,
    pub link_lanes: u32,
    pub lane_gbps: f64,
    pub link_latency_cycles: f64,
    pub dram_gbps_per_socket: f64,
    pub dram_latency_ns: f64,
    /// Bytes of a request or write acknowledgement without data (link packet header).
    pub header_bytes: u64,
    pub page_bytes: u64,
    pub interleave_bytes: u64,
    pub placement: Placement,
    pub cta_schedule: CtaSchedule,
    pub link_policy: LinkPolicy,
    pub cache_org: CacheOrg,
    /// Controllers' sampling period (links and cache partitioning), cycles.
    pub sample_cycles: u64,
    /// Cycles a link is quiet while a lane turns around.
    pub switch_cycles: f64,
    /// Utilisation at which a link direction or DRAM counts as saturated.
    pub saturation: f64,
    /// L2 lines a socket invalidates per cycle in the kernel-boundary flush of remote data.
    pub flush_lines_per_cycle: f64,
    /// Link energy, pJ per bit moved.
    pub link_pj_per_bit: f64,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            sockets: 4,
            sms_per_socket: 64,
            clock_ghz: 1.0,
            warps_per_sm: 64,
            issue_per_cycle: 1.0,
            line_bytes: 128,
            l1_kb: 128,
            l1_ways: 4,
            l1_latency_cycles: 30.0,
            l2_mb_per_socket: 4.0,
            l2_ways: 16,
            l2_latency_cycles: 120.0,
            l2_gbps_per_socket: 1536.0,
            link_lanes: 16,
            lane_gbps: 8.0,
            link_latency_cycles: 128.0,
            dram_gbps_per_socket: 768.0,
            dram_latency_ns: 100.0,
            header_bytes: 16,
            page_bytes: 4096,
            interleave_bytes: 256,
            placement: Placement::Interleave,
            cta_schedule: CtaSchedule::RoundRobin,
            link_policy: LinkPolicy::Static,
            cache_org: CacheOrg::MemSideLocal,
            sample_cycles: 5000,
            switch_cycles: 100.0,
            saturation: 0.99,
            flush_lines_per_cycle: 64.0,
            link_pj_per_bit: 10.0,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading {0}: {1}")]
    Read(String, std::io::Error),
    #[error("{0}: {1}")]
    Parse(String, toml::de::Error),
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

impl SimConfig {
    pub fn from_toml(text: &str, name: &str) -> Result<SimConfig, ConfigError> {
        let c: SimConfig = toml::from_str(text).map_err(|e| ConfigError::Parse(name.into(), e))?;
        c.validate()?;
        Ok(c)
    }

    pub fn load(path: &std::path::Path) -> Result<SimConfig, ConfigError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read(name.clone(), e))?;
        Self::from_toml(&text, &name)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: &str| Err(ConfigError::Invalid(m.into()));
        let pow2 = |v: u64| v > 0 && v.is_power_of_two();
        if !(1..=64).contains(&self.sockets) {
            return bad("sockets must be 1..=64");
        }
        if self.sms_per_socket == 0 || self.warps_per_sm == 0 {
            return bad("sms_per_socket and warps_per_sm must be positive");
        }
        if !pow2(self.line_bytes) || !pow2(self.page_bytes) || !pow2(self.interleave_bytes) {
            return bad("line_bytes, page_bytes and interleave_bytes must be powers of two");
        }
        if self.interleave_bytes < self.line_bytes || self.page_bytes < self.line_bytes {
            return bad("interleave_bytes and page_bytes must hold at least one line");
        }
        if self.l1_ways == 0 || self.l2_ways < 2 || self.l1_ways > 64 || self.l2_ways > 64 {
            return bad("l1_ways 1..=64, l2_ways 2..=64");
        }
        if self.link_lanes < 2 {
            return bad("link_lanes must be at least 2 (one each way)");
        }
        for (n, v) in [
            ("clock_ghz", self.clock_ghz),
            ("issue_per_cycle", self.issue_per_cycle),
            ("l2_gbps_per_socket", self.l2_gbps_per_socket),
            ("lane_gbps", self.lane_gbps),
            ("dram_gbps_per_socket", self.dram_gbps_per_socket),
            ("flush_lines_per_cycle", self.flush_lines_per_cycle),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(ConfigError::Invalid(format!("{n} must be positive")));
            }
        }
        if !(self.saturation > 0.0 && self.saturation <= 1.0) {
            return bad("saturation must be in (0, 1]");
        }
        if self.sample_cycles == 0 {
            return bad("sample_cycles must be positive");
        }
        if self.l1_lines() < self.l1_ways || self.l2_lines() < self.l2_ways {
            return bad("caches must hold at least one set");
        }
        Ok(())
    }

    /// Bytes per cycle of `gbps` GB/s at the configured clock.
    pub fn per_cycle(&self, gbps: f64) -> f64 {
        gbps / self.clock_ghz
    }

    pub fn l1_lines(&self) -> usize {
        self.l1_kb * 1024 / self.line_bytes as usize
    }

    pub fn l2_lines(&self) -> usize {
        (self.l2_mb_per_socket * 1024.0 * 1024.0) as usize / self.line_bytes as usize
    }

    /// The same total machine as one socket (no links): the paper's "ideal larger GPU".
    pub fn ideal_single(&self) -> SimConfig {
        let s = self.sockets as f64;
        SimConfig {
            sockets: 1,
            sms_per_socket: self.sms_per_socket * self.sockets,
            l2_mb_per_socket: self.l2_mb_per_socket * s,
            l2_gbps_per_socket: self.l2_gbps_per_socket * s,
            dram_gbps_per_socket: self.dram_gbps_per_socket * s,
            ..self.clone()
        }
    }

    /// This machine with `n` sockets.
    pub fn with_sockets(&self, n: usize) -> SimConfig {
        SimConfig {
            sockets: n,
            ..self.clone()
        }
    }

    /// The paper's locality-optimised software: first-touch pages, contiguous CTA blocks.
    pub fn locality_optimised(&self) -> SimConfig {
        SimConfig {
            placement: Placement::FirstTouch,
            cta_schedule: CtaSchedule::Contiguous,
            ..self.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_papers_table_1() {
        let c = SimConfig::default();
        c.validate().unwrap();
        assert_eq!((c.sockets, c.sms_per_socket), (4, 64));
        assert_eq!(c.l1_lines(), 1024);
        assert_eq!(c.l2_lines(), 32768);
        assert_eq!(c.link_lanes as f64 * c.lane_gbps, 128.0);
    }

    #[test]
    fn toml_overrides_and_rejects_unknown_keys() {
        let c = SimConfig::from_toml("sockets = 2\nsms_per_socket = 132\n", "t").unwrap();
        assert_eq!((c.sockets, c.sms_per_socket, c.l2_ways), (2, 132, 16));
        let e = SimConfig::from_toml("socket = 2\n", "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field"), "{e}");
        let e = SimConfig::from_toml("line_bytes = 100\n", "t")
            .unwrap_err()
            .to_string();
        assert!(e.contains("powers of two"), "{e}");
        let e = SimConfig::from_toml("placement = \"nearest\"\n", "t").unwrap_err();
        assert!(e.to_string().contains("unknown variant"), "{e}");
    }

    #[test]
    fn ideal_single_has_the_same_totals() {
        let c = SimConfig::default();
        let i = c.ideal_single();
        assert_eq!(i.sockets, 1);
        assert_eq!(i.sms_per_socket, 256);
        assert_eq!(i.l2_lines(), 4 * c.l2_lines());
        assert_eq!(i.dram_gbps_per_socket, 4.0 * c.dram_gbps_per_socket);
    }
}
