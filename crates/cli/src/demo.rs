//! `cohort demo`: a server on loopback, a short sweep, a table. Exits 0 when every answer was
//! correct.

use crate::load_cmd::print_table;
use crate::serve::{self, ServeArgs};
use anyhow::Result;
use clap::Args;
use cohort_load::{EchoWorkload, LoadConfig, Mode, Target};
use std::sync::Arc;
use std::time::Duration;

#[derive(Args, Debug, Clone)]
pub struct DemoArgs {
    /// Seconds measured per sweep point.
    #[arg(long, default_value_t = 2.0)]
    pub duration: f64,
    /// Rates to sweep (requests/s).
    #[arg(long, value_delimiter = ',', value_parser = crate::util::parse_rate, default_value = "5k,20k,50k")]
    pub sweep: Vec<f64>,
}

pub fn run(a: DemoArgs) -> Result<()> {
    let mut sa = ServeArgs::loopback("echo");
    sa.http = None;
    let stack = serve::start(&sa)?;
    println!("{}", stack.server.listening_line());
    let udp = stack.server.udp_addr.expect("udp enabled");
    let cfg = LoadConfig {
        target: Target::Udp(udp),
        mode: Mode::Open {
            rate: 1.0,
            poisson: false,
        },
        duration: Duration::from_secs_f64(a.duration),
        warmup: Duration::from_millis(300),
        connections: 1,
        answer_timeout: Duration::from_secs(2),
        request_timeout_us: 0,
        seed: 1,
    };
    println!("echo over {} (cpu engine), 64-byte payloads", cfg.target);
    let reports =
        cohort_load::run_sweep(&cfg, &a.sweep, Arc::new(EchoWorkload { payload_bytes: 64 }));
    stack.shutdown();
    let reports = reports?;
    print_table(&reports);
    let wrong: u64 = reports
        .iter()
        .map(|r| r.errors.get("wrong_answer").copied().unwrap_or(0))
        .sum();
    anyhow::ensure!(wrong == 0, "{wrong} wrong answers");
    Ok(())
}
