//! `cohort demo`: synthesize a SIFT-like set, build an IVF-Flat index, pick the nprobe that
//! reaches recall@10 >= 0.9, serve it on loopback, sweep load over UDP, print throughput,
//! latency percentiles and recall. Exits non-zero on any wrong answer.

use anyhow::{Context, Result};
use clap::Args;
use cohort_knn::kmeans::KMeansConfig;
use cohort_knn::{exact, vecfile, IvfIndex, Metric, SearchParams};
use cohort_load::{LoadConfig, Mode, Target};
use cohort_server::{self as serve, ServeArgs};
use cohort_services::knn::load::KnnWorkload;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Args, Debug, Clone)]
pub struct DemoArgs {
    /// Base vectors to synthesize.
    #[arg(long, default_value_t = 100_000)]
    pub n: usize,
    #[arg(long, default_value_t = 128)]
    pub dim: usize,
    #[arg(long, default_value_t = 256)]
    pub nlist: usize,
    /// Seconds measured per sweep point.
    #[arg(long, default_value_t = 2.0)]
    pub duration: f64,
    /// Rates to sweep (queries/s).
    #[arg(long, value_delimiter = ',', value_parser = cohort_server::util::parse_rate, default_value = "500,1k,2k")]
    pub sweep: Vec<f64>,
    /// Where the data and index are kept between runs (default: the system temp folder).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

const TARGET_RECALL: f64 = 0.9;

/// Smallest nprobe (of 1, 2, 3, 4, 6, 8, 12, 16, ...) whose recall@10 reaches the target on
/// the demo queries.
fn choose_nprobe(ix: &IvfIndex, q: &cohort_knn::Vectors, gt: &[i32], gdim: usize) -> (usize, f64) {
    let mut nprobe = 1;
    loop {
        let found: Vec<Vec<u32>> = (0..q.n)
            .map(|i| {
                ix.query(q.row(i), SearchParams { k: 10, nprobe })
                    .iter()
                    .map(|n| n.id)
                    .collect()
            })
            .collect();
        let r = exact::recall_at_k(&found, gt, gdim, 10);
        if r >= TARGET_RECALL || nprobe >= ix.nlist {
            return (nprobe, r);
        }
        // Steps of about x1.4: 1, 2, 3, 4, 6, 8, 12, 16, 24, ...
        let next = if nprobe < 4 {
            nprobe + 1
        } else if nprobe.is_power_of_two() {
            nprobe * 3 / 2
        } else {
            nprobe * 4 / 3
        };
        nprobe = next.min(ix.nlist);
    }
}

pub fn run(a: DemoArgs) -> Result<()> {
    anyhow::ensure!(a.nlist >= 1 && a.nlist <= a.n, "--nlist must be in 1..=--n");
    let dir = a.dir.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("cohort-demo-v2-{}x{}-{}", a.n, a.dim, a.nlist))
    });
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let (qpath, gpath, ipath) = (
        dir.join("query.fvecs"),
        dir.join("groundtruth.ivecs"),
        dir.join("index.ivf"),
    );
    let cached = IvfIndex::load(&ipath).is_ok() && vecfile::read_ivecs(&gpath).is_ok();
    if !cached {
        println!(
            "synthesizing {} x {} SIFT-like vectors and 1000 queries in {}",
            a.n,
            a.dim,
            dir.display()
        );
        cohort_knn::synth::write_synth(&dir, a.n, a.dim, 1000, 100, 42, 64, 16, 1.0)?;
        let base = vecfile::read_vectors(&dir.join("base.fvecs"))?;
        println!("building IVF-Flat, nlist {}", a.nlist);
        let km = KMeansConfig {
            progress: true,
            ..KMeansConfig::new(a.nlist)
        };
        let mut ix = IvfIndex::build(&base, a.nlist, Metric::L2, &km);
        let q = vecfile::read_vectors(&qpath)?;
        let (gn, gdim, gt) = vecfile::read_ivecs(&gpath)?;
        anyhow::ensure!(gn == q.n, "ground truth rows differ from queries");
        let (nprobe, r) = choose_nprobe(&ix, &q, &gt, gdim);
        println!("default nprobe {nprobe} (recall@10 {r:.3} in process)");
        ix.default_nprobe = nprobe;
        ix.save(&ipath)?;
    } else {
        println!("reusing data and index in {}", dir.display());
    }
    let mut sa = ServeArgs::loopback("knn");
    sa.set_service("knn", "index", ipath.display().to_string());
    sa.http = None;
    let stack = serve::start(&sa)?;
    println!("{}", stack.server.listening_line());
    let queries = vecfile::read_vectors(&qpath)?;
    let (_, gdim, gt) = vecfile::read_ivecs(&gpath)?;
    let w = Arc::new(KnnWorkload::new(queries, Some((gdim, gt)), 10, 0));
    let cfg = LoadConfig {
        warmup: Duration::from_millis(300),
        ..LoadConfig::new(
            Target::Udp(stack.server.udp_addr.expect("udp enabled")),
            Mode::Open {
                rate: 1.0,
                poisson: true,
            },
            Duration::from_secs_f64(a.duration),
            1,
        )
    };
    println!(
        "knn k=10 over {} (cpu engine), Poisson arrivals",
        cfg.target
    );
    let reports = cohort_load::run_sweep(&cfg, &a.sweep, w);
    stack.shutdown();
    let reports = reports?;
    cohort_load::Report::print_table(&reports);
    let wrong: u64 = reports
        .iter()
        .map(|r| r.errors.get("wrong_answer").copied().unwrap_or(0))
        .sum();
    anyhow::ensure!(wrong == 0, "{wrong} wrong answers");
    println!(
        "data and index kept in {} ({} MB) for the next run; delete it, or give --dir",
        dir.display(),
        dir_bytes(&dir) >> 20
    );
    Ok(())
}

/// Bytes of the files directly in `dir`.
fn dir_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}
