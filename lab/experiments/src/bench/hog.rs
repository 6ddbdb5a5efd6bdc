//! The noisy neighbour of Centaur's Fig. 10 and Lynx: a CPU-hungry program, one busy thread per
//! listed core, that also measures itself (work units per second per thread), so both sides
//! of the interference are numbers: the server's tail latency and the neighbour's slowdown.

use anyhow::Result;
use clap::Args;
use serde_json::json;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct HogBench {
    /// Cores to occupy, one busy thread each (e.g. 1-7).
    #[arg(long)]
    pub cpus: String,
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    #[arg(long, default_value = "lab/results/hog.json")]
    pub out: PathBuf,
}

/// One unit of work: 4096 steps of a xorshift generator (pure ALU, no memory traffic).
fn unit(mut x: u64) -> u64 {
    for _ in 0..4096 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    x
}

pub fn run(a: &HogBench) -> Result<()> {
    let cpus = cohort_server::util::parse_cpus(&a.cpus).map_err(anyhow::Error::msg)?;
    let dur = Duration::from_secs_f64(a.seconds);
    let rates: Vec<f64> = std::thread::scope(|s| {
        let hs: Vec<_> = cpus
            .iter()
            .map(|&c| {
                s.spawn(move || {
                    core_affinity::set_for_current(core_affinity::CoreId { id: c });
                    let start = Instant::now();
                    let (mut n, mut x) = (0u64, c as u64 + 1);
                    while start.elapsed() < dur {
                        x = unit(x);
                        n += 1;
                    }
                    std::hint::black_box(x);
                    n as f64 / start.elapsed().as_secs_f64()
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("hog thread"))
            .collect()
    });
    let total: f64 = rates.iter().sum();
    let r = json!({"cpus": cpus, "seconds": a.seconds, "units_per_s_per_thread": rates, "units_per_s": total});
    eprintln!("{r}");
    super::write_result(&a.out, r)
}
