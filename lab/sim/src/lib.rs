//! `cohort-lab sim numa`: an open simulator of NUMA multi-socket GPUs (after "Beyond the Socket:
//! NUMA-Aware GPUs", MICRO 2017): memory placement, CTA scheduling, lane-reversible links and
//! NUMA-aware cache way partitioning, each a selectable policy, driven by address streams of
//! workload generators (and of Cohort's own k-NN kernels). Not cycle accurate: bandwidth,
//! latency, caching and placement interact as in the paper, fast enough to sweep (docs/numa-sim.md).
//!
//! Where a request goes: [`machine`] (SM issue, L1) -> [`placement`] (home socket) ->
//! [`link`] (across sockets) -> [`cache`] (the home L2) -> DRAM ([`server`]); [`partition`]
//! and [`link`]'s controller adapt every sample.

pub mod cache;
pub mod config;
pub mod experiments;
pub mod link;
pub mod machine;
pub mod partition;
pub mod placement;
pub mod server;
pub mod workloads;

pub use config::SimConfig;
pub use machine::{simulate, Stats};
