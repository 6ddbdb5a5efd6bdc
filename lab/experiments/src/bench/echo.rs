//! Echo over loopback: for each transport and io-thread count, raise the offered rate until
//! p99 passes the limit (or errors appear); report the highest rate that met it.

use anyhow::Result;
use clap::Args;
use cohort_load::{LoadConfig, Mode, Report, Target};
use cohort_server::{self as serve, ServeArgs};
use cohort_services::micro::load::EchoWorkload;
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct EchoBench {
    /// Transports: udp, tcp.
    #[arg(long, value_delimiter = ',', default_value = "udp,tcp")]
    pub transports: Vec<String>,
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    pub io_threads: Vec<usize>,
    /// cpu engine workers (0 = cores left after io threads and the generator).
    #[arg(long, default_value_t = 0)]
    pub workers: usize,
    /// Generator sockets/connections (each a sender and a receiver thread).
    #[arg(long, default_value_t = 4)]
    pub connections: usize,
    #[arg(long, default_value_t = 64)]
    pub payload_bytes: usize,
    #[arg(long, default_value_t = 3.0)]
    pub duration: f64,
    #[arg(long, default_value_t = 1000.0)]
    pub p99_limit_us: f64,
    #[arg(long, value_parser = cohort_server::util::parse_rate, default_value = "50k")]
    pub start_rate: f64,
    #[arg(long, value_parser = cohort_server::util::parse_rate, default_value = "4M")]
    pub max_rate: f64,
    /// Multiplier between successive rates.
    #[arg(long, default_value_t = 1.25)]
    pub step: f64,
    /// Closed-loop runs after the ramp, one per outstanding-request count (0 = none).
    #[arg(long, value_delimiter = ',', default_value = "64,256")]
    pub closed: Vec<usize>,
    #[arg(long, default_value = "lab/results/echo.json")]
    pub out: PathBuf,
}

/// Whether an open-loop point met the p99 limit with no errors, the offered rate and an
/// unsaturated generator (the ramps of every served benchmark stop at the first miss).
pub(super) fn meets(r: &Report, limit: f64) -> bool {
    r.error_total() == 0
        && r.latency_us.p99 <= limit
        && r.offered_rate.is_some_and(|o| r.achieved_rate >= 0.98 * o)
        && !r.generator_saturated
}

pub fn run(a: &EchoBench) -> Result<()> {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2);
    let mut results = Vec::new();
    for t in &a.transports {
        for &io in &a.io_threads {
            let mut sa = ServeArgs::loopback("echo");
            sa.http = None;
            sa.io_threads = io;
            sa.cpu.workers = if a.workers > 0 {
                a.workers
            } else {
                cores.saturating_sub(io + 2 * a.connections).max(1)
            };
            let stack = serve::start(&serve::ServerConfig::resolve(&sa)?)?;
            let target = match t.as_str() {
                "udp" => Target::Udp(stack.server.udp_addr.expect("udp")),
                "tcp" => Target::Tcp(stack.server.tcp_addr.expect("tcp")),
                other => anyhow::bail!("unknown transport {other:?}"),
            };
            let w = Arc::new(EchoWorkload {
                payload_bytes: a.payload_bytes,
            });
            let mut points: Vec<Report> = Vec::new();
            let mut best: Option<f64> = None;
            let mut limited_by = "max_rate";
            let mut rate = a.start_rate;
            while rate <= a.max_rate {
                let cfg = LoadConfig::new(
                    target,
                    Mode::Open {
                        rate,
                        poisson: false,
                    },
                    Duration::from_secs_f64(a.duration),
                    a.connections,
                );
                let r = cohort_load::run(&cfg, w.clone())?;
                eprintln!("{t} io={io} workers={} {}", sa.cpu.workers, r.table_row());
                let ok = meets(&r, a.p99_limit_us);
                let saturated = r.generator_saturated;
                points.push(r);
                if ok {
                    best = Some(rate);
                } else {
                    limited_by = if saturated {
                        "generator"
                    } else {
                        "server (p99, errors or throughput)"
                    };
                    break;
                }
                rate *= a.step;
            }
            let mut closed = Vec::new();
            for &c in a.closed.iter().filter(|c| **c > 0) {
                let cfg = LoadConfig::new(
                    target,
                    Mode::Closed { concurrency: c },
                    Duration::from_secs_f64(a.duration),
                    a.connections,
                );
                let r = cohort_load::run(&cfg, w.clone())?;
                println!("{t:>4} io_threads={io}: closed loop, {c} outstanding: {:.0}/s, p99 {:.0} us, errors {}",
                    r.achieved_rate, r.latency_us.p99, r.error_total());
                closed.push(r);
            }
            stack.shutdown();
            results.push(json!({
                "closed_loop": closed,
                "transport": t, "io_threads": io, "workers": sa.cpu.workers, "connections": a.connections,
                "payload_bytes": a.payload_bytes, "p99_limit_us": a.p99_limit_us,
                "max_rate_meeting_limit": best, "stopped_by": limited_by, "points": points,
            }));
            println!(
                "{t:>4} io_threads={io}: highest rate with p99 <= {} us: {}",
                a.p99_limit_us,
                best.map(|b| format!("{b:.0}/s"))
                    .unwrap_or_else(|| "none".into())
            );
        }
    }
    super::write_result(&a.out, serde_json::Value::Array(results))
}
