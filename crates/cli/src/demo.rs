//! `cohort demo`: synthesize a SIFT-like set, build an IVF-Flat index, pick the nprobe that
//! reaches recall@10 >= 0.9, serve it on loopback, sweep load over UDP, print throughput,
//! latency percentiles and recall. Exits non-zero on any wrong answer.
//!
//! On a machine with a GPU it serves on gpu-cohort and ramps the load (x2 a step) until the
//! server no longer keeps up, so the table ends at the machine's capacity; it also draws the
//! sweep (`demo-sweep.png` beside the data). Without one it serves on the cpu engine at a
//! few rates, as a laptop can.

use anyhow::{Context, Result};
use clap::Args;
use cohort_ivf::kmeans::KMeansConfig;
use cohort_ivf::{exact, vecfile, IvfIndex, Metric, SearchParams};
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
    /// Rates to sweep (queries/s); default: 500,1k,2k on the cpu engine, on a GPU engine a
    /// ramp from 10k doubling until the server stops keeping up.
    #[arg(long, value_delimiter = ',', value_parser = cohort_server::util::parse_rate)]
    pub sweep: Option<Vec<f64>>,
    /// The engine: auto (gpu-cohort where a GPU is found, else cpu), or any `cohort serve
    /// --engine`.
    #[arg(long, default_value = "auto")]
    pub engine: String,
    /// Where the data and index are kept between runs (default: the system temp folder).
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

const TARGET_RECALL: f64 = 0.9;
/// The cpu engine's sweep (a laptop's few cores).
const CPU_SWEEP: [f64; 3] = [500.0, 1_000.0, 2_000.0];
/// A GPU engine's ramp: from this rate, doubling, at most `RAMP_STEPS` points.
const RAMP_FROM: f64 = 10_000.0;
const RAMP_STEPS: usize = 10;
/// A ramp point past capacity ends the ramp: p99 over this, or answers short of the offered
/// rate, or any error.
const RAMP_P99_US: f64 = 2_000.0;
const RAMP_KEPT_UP: f64 = 0.95;

/// The engine `auto` means here: gpu-cohort (the throughput engine) where a GPU is found.
fn pick_engine(asked: &str) -> String {
    if asked != "auto" {
        return asked.to_string();
    }
    match cohort_gpu::probe() {
        Ok(d) if !d.is_empty() => "gpu-cohort".into(),
        Ok(_) => "cpu".into(),
        Err(e) => {
            println!("no GPU ({e}): the cpu engine serves");
            "cpu".into()
        }
    }
}

/// Whether a ramp point shows a server that kept up with what was offered.
fn kept_up(r: &cohort_load::Report) -> bool {
    let offered = r.offered_rate.unwrap_or(0.0);
    r.error_total() == 0
        && !r.generator_saturated
        && r.latency_us.p99 <= RAMP_P99_US
        && r.achieved_rate >= RAMP_KEPT_UP * offered
}

/// Smallest nprobe (of 1, 2, 3, 4, 6, 8, 12, 16, ...) whose recall@10 reaches the target on
/// the demo queries.
fn choose_nprobe(ix: &IvfIndex, q: &cohort_ivf::Vectors, gt: &[i32], gdim: usize) -> (usize, f64) {
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
        cohort_ivf::synth::write_synth(&dir, a.n, a.dim, 1000, 100, 42, 64, 16, 1.0)?;
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
    let engine = pick_engine(&a.engine);
    let on_gpu = engine != "cpu";
    let mut sa = ServeArgs::loopback("knn");
    sa.set_service("knn", "index", ipath.display().to_string());
    sa.http = None;
    sa.engine = engine.clone();
    let stack = serve::start(&serve::ServerConfig::resolve(&sa)?)?;
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
            // A GPU's rates need several sockets (and generator threads) to offer.
            if on_gpu { 8 } else { 1 },
        )
    };
    println!(
        "knn k=10 over {} ({engine} engine), Poisson arrivals",
        cfg.target
    );
    let reports = match (&a.sweep, on_gpu) {
        (Some(rates), _) => cohort_load::run_sweep(&cfg, rates, w),
        (None, false) => cohort_load::run_sweep(&cfg, &CPU_SWEEP, w),
        (None, true) => ramp(&cfg, w),
    };
    stack.shutdown();
    let reports = reports?;
    cohort_load::Report::print_table(&reports);
    if on_gpu {
        let png = dir.join("demo-sweep.png");
        let series = vec![(engine.clone(), reports.clone())];
        let title = format!("cohort demo: k-NN served on {engine}, loopback UDP");
        match cohort_load::plot_sweep(&series, &title, &png) {
            Ok(()) => println!("sweep drawn in {}", png.display()),
            Err(e) => println!("the sweep could not be drawn: {e:#}"),
        }
    }
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

/// From `RAMP_FROM`, doubling, until a point shows the server no longer keeping up (that
/// point included: the table shows where the capacity lies).
fn ramp(cfg: &LoadConfig, w: Arc<dyn cohort_load::Workload>) -> Result<Vec<cohort_load::Report>> {
    let mut out = Vec::new();
    let mut rate = RAMP_FROM;
    for _ in 0..RAMP_STEPS {
        let r = cohort_load::run_sweep(cfg, &[rate], w.clone())?
            .pop()
            .expect("one rate, one report");
        let more = kept_up(&r);
        println!(
            "  {:>9.0} q/s offered: {:>9.0} answered, p99 {:.0} us{}",
            rate,
            r.achieved_rate,
            r.latency_us.p99,
            if more { "" } else { " (past capacity)" }
        );
        out.push(r);
        if !more {
            break;
        }
        rate *= 2.0;
    }
    Ok(out)
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
