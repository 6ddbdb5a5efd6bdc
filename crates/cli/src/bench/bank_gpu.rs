//! The bank's HTTP parser alone on one GPU (Rhythm: 7.4 M requests/s on a GTX Titan): a
//! mixed trace of the client's real requests (the Table 2 mix, with session cookies) parsed
//! one thread per request, row-major vs transposed slots, per cohort size. The first launch
//! of each layout is checked against the CPU twin request by request.

use anyhow::{Context, Result};
use clap::Args;
use cohort_services::bank::gpu_parse::GpuParser;
use cohort_services::bank::{client, parse};
use rand::{Rng, SeedableRng};
use serde_json::json;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Args, Debug)]
pub struct BankParseBench {
    /// Cohort sizes (requests parsed per launch).
    #[arg(long, value_delimiter = ',', default_value = "4096,65536,524288")]
    pub cohorts: Vec<usize>,
    /// Launches timed per point.
    #[arg(long, default_value_t = 50)]
    pub iters: usize,
    #[arg(long, default_value = "bench/results/bank-parse-gpu.json")]
    pub out: PathBuf,
}

pub fn run(a: &BankParseBench) -> Result<()> {
    let devs = cohort_gpu::probe().context("the parser benchmark needs a GPU")?;
    let max = *a.cohorts.iter().max().context("--cohorts is empty")?;
    anyhow::ensure!(
        max >= 1 && a.iters >= 1,
        "cohorts and iters must be positive"
    );
    let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
    let reqs: Vec<Vec<u8>> = (0..max)
        .map(|_| {
            let user = rng.gen_range(1..=1_000_000);
            let kind = client::draw(&mut rng);
            let cookie =
                (kind != cohort_services::bank::kinds::Kind::Login).then(|| parse::Cookie {
                    user,
                    token: rng.gen(),
                });
            client::step(kind, user, &mut rng).raw(cookie)
        })
        .collect();
    let mean_bytes = reqs.iter().map(Vec::len).sum::<usize>() as f64 / max as f64;
    let mut p = GpuParser::new(&devs[0], max)?;
    let mut points = Vec::new();
    for transposed in [false, true] {
        for &n in &a.cohorts {
            p.upload(&reqs[..n], transposed)?;
            p.launch()?;
            p.synchronize()?;
            for (i, (g, r)) in p.results()?.iter().zip(&reqs).enumerate() {
                anyhow::ensure!(
                    *g == parse::parse(r),
                    "request {i}: GPU and CPU twin differ"
                );
            }
            let t = Instant::now();
            for _ in 0..a.iters {
                p.launch()?;
            }
            p.synchronize()?;
            let secs = t.elapsed().as_secs_f64() / a.iters as f64;
            let rate = n as f64 / secs;
            println!(
                "parse on {}: cohort {n:>7}, {}: {:>8.1} us per launch, {:>7.1} M requests/s ({:.0} GB/s of requests)",
                devs[0].name,
                if transposed { "transposed" } else { "row-major " },
                secs * 1e6,
                rate / 1e6,
                rate * mean_bytes / 1e9
            );
            points.push(json!({
                "cohort": n, "transposed": transposed, "us_per_launch": secs * 1e6,
                "requests_per_s": rate, "mean_request_bytes": mean_bytes,
            }));
        }
    }
    super::write_result(
        &a.out,
        json!({ "gpu": devs[0].name, "points": points, "iters": a.iters }),
    )
}
