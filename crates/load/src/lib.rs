//! `cohort load`: the load generator.
//!
//! Open loop (constant or Poisson arrivals; latency measured from each request's *intended*
//! send time, so a slow server cannot hide behind a slow generator) or closed loop (a fixed
//! number of requests outstanding). UDP, TCP and HTTP. Every answer is checked by the
//! workload; requests that never get an answer are counted as `no_answer`.

pub mod collections;
mod config;
pub mod cpu_time;
mod plot;
mod recorder;
mod report;
mod run;
mod schedule;
mod tracker;
mod transport;
mod workload;

pub use cohort_plot::{plot_bars, plot_lines};
pub use config::{tls_client, ClientKey, LoadConfig, Mode, Target};
pub use plot::plot_sweep;
pub use report::Report;
pub use run::{run, run_sweep};
pub use workload::Workload;
