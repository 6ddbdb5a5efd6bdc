//! `cohort load`: drive a server, print a table, write JSON and a plot.

use anyhow::{bail, Result};
use clap::Args;
use cohort_load::collections::{CollectionLoad, CollectionWorkload};
use cohort_load::{LoadConfig, Mode, Report, Target, Workload};
use cohort_server::util::{parse_rate, write_atomic};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Args, Debug, Clone)]
pub struct LoadArgs {
    /// udp://HOST:PORT, tcp://HOST:PORT, http://HOST:PORT or grpc://HOST:PORT (the Open
    /// Inference Protocol over gRPC: lenet and echo).
    #[arg(long)]
    pub target: Target,
    /// The service to load (one the server offers; a service served as web pages is loaded by
    /// browser sessions over http://).
    #[arg(long, default_value = "echo")]
    pub service: String,
    /// Services that keep per-user records: users in the server's backend (the server's
    /// setting of the same name).
    #[arg(long, default_value_t = 1_000_000)]
    pub users: u32,
    /// Open loop at this many requests per second (e.g. 20000, 20k, 1.5M).
    #[arg(long, conflicts_with_all = ["concurrency", "sweep"], value_parser = parse_rate)]
    pub rate: Option<f64>,
    /// Closed loop with this many requests outstanding.
    #[arg(long, conflicts_with = "sweep")]
    pub concurrency: Option<usize>,
    /// Open-loop sweep over these rates (e.g. 10k,50k,100k): a throughput-latency curve.
    #[arg(long, value_delimiter = ',', value_parser = parse_rate)]
    pub sweep: Option<Vec<f64>>,
    /// Poisson arrivals instead of a constant rate.
    #[arg(long)]
    pub poisson: bool,
    /// Seconds measured (per sweep point).
    #[arg(long, default_value_t = 5.0)]
    pub duration: f64,
    /// Seconds of unmeasured load before measuring.
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// Sockets / connections to spread the load over.
    #[arg(long, default_value_t = 1)]
    pub connections: usize,
    /// echo and spin: bytes of each request's payload (at most 60 000).
    #[arg(long, default_value_t = 64)]
    pub payload_bytes: usize,
    /// spin service: busy time per request.
    #[arg(long, default_value_t = 10)]
    pub spin_us: u32,
    /// Milliseconds to wait for an answer before counting no_answer.
    #[arg(long, default_value_t = 2000)]
    pub answer_timeout_ms: u64,
    /// Deadline carried in each request (0 = the server's default).
    #[arg(long, default_value_t = 0)]
    pub timeout_us: u32,
    /// Seed of the arrival times and of the requests drawn (the same seed, the same load).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The server's process id (same host): its CPU time over each measured window goes in
    /// the JSON (`cpu.server`, seconds and microseconds per answer) beside the generator's.
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Leave GPU board power unsampled (no NVML reads from the generator during the run; the
    /// JSON's energy then says so). For checking whether the sampling moves a GPU server's
    /// latency on the same host.
    #[arg(long)]
    pub no_gpu_energy: bool,
    /// API key ID:SECRET (a server run with --auth-keys): UDP/TCP frames are signed with it,
    /// HTTP sends SECRET as the bearer token.
    #[arg(long)]
    pub key: Option<cohort_load::ClientKey>,
    /// TLS to a TCP or HTTP target (a server run with --tls-cert), trusting the
    /// certificates in this PEM file. TCP frames over TLS are driven in closed loop.
    #[arg(long)]
    pub tls_ca: Option<PathBuf>,
    /// knn: query vectors (.fvecs, .bvecs, .npy).
    #[arg(long)]
    pub queries: Option<PathBuf>,
    /// The workload's data set folder (lenet: an MNIST folder whose test images are sent,
    /// default the 1000 test digits built in; facever: an ORL faces folder, default the ten
    /// people built in - load the database from the same folder).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// The served model's weights file, which the workload runs to know each right answer
    /// (lenet; default: the model the service ships).
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// knn: ground truth (.ivecs) to report recall_at_k.
    #[arg(long)]
    pub gt: Option<PathBuf>,
    /// knn and --collection: neighbours per query.
    #[arg(long, default_value_t = 10)]
    pub k: usize,
    /// knn: cells probed (0 = the server's default).
    #[arg(long, default_value_t = 0)]
    pub nprobe: u16,
    /// knn over UDP/TCP, and --collection: query vectors in each search request (1..=1024;
    /// 1: one query a request). Each query's answer is checked (and scored for recall) alone;
    /// rates in the report count requests, so queries/s = requests/s x this. knn over
    /// HTTP/gRPC sends one query a request.
    #[arg(long, default_value_t = 1)]
    pub queries_per_request: usize,
    /// Load a live collection of `cohort serve --data-dir` (http:// targets) instead of a
    /// service: searches of --queries-per-request SIFT-like query vectors (--k neighbours,
    /// filtered with --filter-selectivity) and a share of writes
    /// (--write-share): upserts of --write-batch points and, one write in 8, deletes of
    /// --write-batch ids, every id drawn from 0..--collection-points. Each answer's shape is
    /// checked; the JSON's per_type has the searches' and the writes' latency apart.
    #[arg(long, conflicts_with = "service")]
    pub collection: Option<String>,
    /// --collection: before the run, create it if absent (dim --collection-dim, metric l2, an
    /// integer attribute "tag") and upsert the points 0..--collection-points. Without it the
    /// collection must exist with those settings and hold only ids the load writes.
    #[arg(long, requires = "collection")]
    pub create: bool,
    /// --collection: its points' ids are 0..this (the ids --create fills, writes draw from).
    #[arg(long, default_value_t = 100_000)]
    pub collection_points: u64,
    /// --collection: the vectors' dimension.
    #[arg(long, default_value_t = 128)]
    pub collection_dim: usize,
    /// --collection: share of requests that are writes (0..=1; decided from each request's
    /// sequence number and --seed, so the same seed sends the same requests).
    #[arg(long, default_value_t = 0.05)]
    pub write_share: f64,
    /// --collection: points an upsert carries, ids a delete carries.
    #[arg(long, default_value_t = 10)]
    pub write_batch: usize,
    /// --collection: searches carry a filter matching about this share of the points
    /// (0.0005..=1, rounded to thousandths): {"range":["tag",{"lt":T}]}, with tag = id % 1000.
    /// Every hit must match it. Without it searches are unfiltered.
    #[arg(long, requires = "collection")]
    pub filter_selectivity: Option<f64>,
    /// --collection with a tcp:// target (searches, upserts and deletes as the collections'
    /// native frames, service 7) or a grpc:// one (as calls of its gRPC service): the server's
    /// HTTP address, http://HOST:PORT, where the collection is made, filled and counted.
    #[arg(long, requires = "collection")]
    pub collection_http: Option<Target>,
    /// Write the report(s) as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write a throughput-latency PNG here (sweeps).
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// knn with --gt: exit non-zero when a run's recall@k is below this.
    #[arg(long)]
    pub min_recall: Option<f64>,
    /// Free text recorded in the JSON as `label` (e.g. the server's command line).
    #[arg(long)]
    pub label: Option<String>,
}

/// The collection load `--collection` asks for, if it does.
pub fn collection_load(a: &LoadArgs) -> Option<CollectionLoad> {
    Some(CollectionLoad {
        name: a.collection.clone()?,
        dim: a.collection_dim,
        points: a.collection_points,
        write_share: a.write_share,
        write_batch: a.write_batch,
        k: a.k,
        seed: a.seed,
        queries_per_request: a.queries_per_request,
        filter_selectivity: a.filter_selectivity,
    })
}

pub fn workload(a: &LoadArgs) -> Result<Arc<dyn Workload>> {
    if let Some(c) = collection_load(a) {
        return Ok(Arc::new(CollectionWorkload::new(c)?));
    }
    anyhow::ensure!(
        a.payload_bytes <= 60_000,
        "--payload-bytes must be at most 60000"
    );
    let Some(entry) = cohort_services::catalog::entry(&a.service) else {
        bail!(
            "unknown service {:?} for load (available: {})",
            a.service,
            cohort_services::catalog::names().join(", ")
        );
    };
    let o = cohort_services::workload::LoadOptions {
        payload_bytes: a.payload_bytes,
        spin_us: a.spin_us,
        queries: a.queries.clone(),
        gt: a.gt.clone(),
        k: a.k,
        nprobe: a.nprobe,
        queries_per_request: a.queries_per_request,
        users: a.users,
        data: a.data.clone(),
        model: a.model.clone(),
    };
    (entry.workload)(&o).map_err(anyhow::Error::msg)
}

pub fn config(a: &LoadArgs) -> Result<LoadConfig> {
    anyhow::ensure!(
        a.duration > 0.0 && a.duration.is_finite(),
        "--duration must be positive"
    );
    anyhow::ensure!(
        a.warmup >= 0.0 && a.warmup.is_finite(),
        "--warmup must be >= 0"
    );
    let mode = match (a.rate, a.concurrency, &a.sweep) {
        (Some(r), None, None) => Mode::Open {
            rate: r,
            poisson: a.poisson,
        },
        (None, Some(c), None) => Mode::Closed { concurrency: c },
        (None, None, Some(s)) => Mode::Open {
            rate: s[0],
            poisson: a.poisson,
        },
        _ => bail!("give exactly one of --rate, --concurrency, --sweep"),
    };
    Ok(LoadConfig {
        target: a.target,
        mode,
        duration: Duration::from_secs_f64(a.duration),
        warmup: Duration::from_secs_f64(a.warmup),
        connections: a.connections,
        answer_timeout: Duration::from_millis(a.answer_timeout_ms.max(1)),
        request_timeout_us: a.timeout_us,
        seed: a.seed,
        server_pid: a.server_pid,
        gpu_energy: !a.no_gpu_energy,
        key: a.key.clone(),
        tls: a
            .tls_ca
            .as_deref()
            .map(cohort_load::tls_client)
            .transpose()?,
    })
}

pub fn run(a: LoadArgs) -> Result<()> {
    let cfg = config(&a)?;
    let (w, service): (Arc<dyn Workload>, String) = match collection_load(&a) {
        Some(c) => {
            let cw = CollectionWorkload::new(c.clone())?;
            let cw = Arc::new(match a.target {
                Target::Tcp(_) => cw.over_frames(),
                Target::Grpc(_) => cw.over_grpc(),
                _ => cw,
            });
            let count = prepare_collection(&a, &cfg, &c)?;
            // The client knows the collection's points exactly only after a fresh fill and
            // with no writes in the run: then searches are scored against exact answers.
            if a.create && count == c.points && c.write_share == 0.0 {
                let t0 = std::time::Instant::now();
                cw.enable_recall();
                eprintln!(
                    "collection {}: exact answers of {} queries in {:.1} s (recall@{} scored)",
                    c.name,
                    cohort_load::collections::GT_QUERIES,
                    t0.elapsed().as_secs_f64(),
                    c.k
                );
            } else {
                eprintln!(
                    "collection {}: recall not scored (needs --create, --write-share 0 and \
                     exactly the filled points)",
                    c.name
                );
            }
            (cw, format!("collection {}", c.name))
        }
        None => (workload(&a)?, a.service.clone()),
    };
    let reports = match &a.sweep {
        Some(rates) => cohort_load::run_sweep(&cfg, rates, w)?,
        None => vec![cohort_load::run(&cfg, w)?],
    };
    Report::print_table(&reports);
    if a.collection.is_some() {
        print_kinds(&reports);
    }
    if reports.iter().any(|r| r.generator_saturated) {
        eprintln!("warning: the generator could not keep the offered rate (generator_saturated)");
    }
    if let Some(p) = &a.json {
        let mut v = if a.sweep.is_some() {
            serde_json::json!({ "runs": reports })
        } else {
            serde_json::to_value(&reports[0])?
        };
        // Machine, commit and command beside the numbers, as every benchmark result has.
        if let serde_json::Value::Object(m) = &mut v {
            m.extend(cohort_provenance::provenance());
            if let Some(l) = &a.label {
                m.insert("label".into(), l.clone().into());
            }
        }
        write_atomic(p, serde_json::to_string_pretty(&v)?.as_bytes())?;
    }
    if let Some(p) = &a.plot {
        let title = format!("{service} over {}", a.target);
        cohort_load::plot_sweep(&[(service, reports.clone())], &title, p)?;
    }
    verdict(&reports, a.min_recall)
}

/// `--collection` (over http://, or tcp:// or grpc:// with `--collection-http`): with `--create`, make
/// and fill the collection over REST; then check its settings fit the load.
fn prepare_collection(a: &LoadArgs, cfg: &LoadConfig, c: &CollectionLoad) -> Result<u64> {
    let addr = match (a.target, a.collection_http) {
        (Target::Http(addr), None) => addr,
        (Target::Tcp(_) | Target::Grpc(_), Some(Target::Http(addr))) => addr,
        (Target::Tcp(_) | Target::Grpc(_), _) => bail!(
            "--collection over tcp:// (native frames) or grpc:// (the collections' gRPC \
             service) needs --collection-http http://HOST:PORT: the collection is made, filled \
             and counted over REST"
        ),
        (Target::Http(_), Some(_)) => {
            bail!("--collection-http is for tcp:// and grpc:// targets (http:// serves everything)")
        }
        _ => bail!(
            "--collection is served over HTTP, and its searches and writes over tcp:// or \
             grpc:// too: give an http://, tcp:// or grpc:// target"
        ),
    };
    let t0 = std::time::Instant::now();
    let mut shown = 0;
    let count = cohort_load::collections::prepare(
        addr,
        cfg.tls.clone(),
        cfg.key.as_ref(),
        c,
        a.create,
        |n| {
            if n / 100_000 > shown && n < c.points {
                shown = n / 100_000;
                eprintln!("filled {n} of {} points", c.points);
            }
        },
    )?;
    if a.create {
        eprintln!(
            "collection {}: filled {} points in {:.1} s",
            c.name,
            c.points,
            t0.elapsed().as_secs_f64()
        );
    }
    eprintln!("collection {}: {count} live points", c.name);
    Ok(count)
}

/// Latency per request kind (searches, upserts, deletes), measured window only.
fn print_kinds(reports: &[Report]) {
    for r in reports {
        let rate = r
            .offered_rate
            .map_or("closed loop".into(), |x| format!("{x:.0}/s"));
        for (kind, t) in &r.per_type {
            let l = &t.latency_us;
            println!(
                "  {rate} {kind:>7}: {:>8} answers {:>5} errors  p50 {:>8.1} us  p99 {:>8.1} us  p99.9 {:>8.1} us",
                t.answers, t.errors, l.p50, l.p99, l.p999
            );
        }
    }
}

/// A run whose every answer is an error (or missing) failed, whatever it measured; so did one
/// below the recall asked for.
pub fn verdict(reports: &[Report], min_recall: Option<f64>) -> Result<()> {
    for r in reports {
        let rate = r
            .offered_rate
            .map_or("closed loop".into(), |x| format!("{x:.0}/s"));
        if r.sent > 0 && r.ok == 0 {
            bail!("every request of the run at {rate} failed: {:?}", r.errors);
        }
        if r.sent == 0 {
            bail!("the run at {rate} sent no request");
        }
        if let Some(min) = min_recall {
            match r.extra.get("recall_at_k").and_then(|v| v.as_f64()) {
                Some(x) if x >= min => {}
                Some(x) => bail!("recall@k {x:.4} at {rate} is below --min-recall {min}"),
                None => bail!("--min-recall needs a knn run with --gt"),
            }
        }
    }
    Ok(())
}
