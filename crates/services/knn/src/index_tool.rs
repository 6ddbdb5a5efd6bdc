//! `cohort index build|info|eval|place`: the k-NN index's own command, offered through its
//! listing's tools (`Tools::commands`).

use crate::gpu_kmeans::{assigner_for, BuildDevice};
use anyhow::{Context, Result};
use clap::{Args, Command, FromArgMatches, Subcommand};
use cohort_ivf::atomic_file::write_whole;
use cohort_ivf::kmeans::{Init, KMeansConfig};
use cohort_ivf::{exact, vecfile, IvfIndex, Metric, SearchParams};
use cohort_service_api::tools::ServiceCommand;
use rayon::prelude::*;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Subcommand, Debug)]
pub enum IndexCmd {
    /// Train the coarse quantizer and write an IVF-Flat index.
    ///
    /// The index is written into OUT's folder as `STEM.tmp.PID` (STEM: OUT without its
    /// extension, PID: this process's id) and renamed over OUT once whole and synced, so OUT
    /// is never half-written. A build that fails or is stopped with ^C or SIGTERM removes that
    /// temporary; one killed outright (SIGKILL, a crash) leaves it there until the next write
    /// into that folder removes it. A streamed build (--stream) also keeps its rows' lists in
    /// `STEM-assignments.tmp.PID` there while it runs, removed the same way.
    Build(BuildArgs),
    /// Print an index file's header and list statistics.
    Info { path: PathBuf },
    /// Measure recall@k and queries/s against ground truth.
    Eval(EvalArgs),
    /// Show how the lists split over N devices when the index is sharded
    /// (`knn.placement=shard`), and with --write record that placement in the file, so every
    /// server start places the lists the same way.
    Place(PlaceArgs),
}

#[derive(Args, Debug)]
pub struct PlaceArgs {
    pub index: PathBuf,
    /// Serving devices the lists are split over.
    #[arg(long)]
    pub devices: usize,
    /// Record the placement in the index file (rewritten atomically).
    #[arg(long)]
    pub write: bool,
}

#[derive(Args, Debug)]
pub struct BuildArgs {
    /// Base vectors (.fvecs, .bvecs or .npy).
    #[arg(long)]
    pub base: PathBuf,
    #[arg(long)]
    pub nlist: usize,
    #[arg(long)]
    pub out: PathBuf,
    #[arg(long, default_value = "l2")]
    pub metric: Metric,
    /// k-means iterations (FAISS's default).
    #[arg(long, default_value_t = cohort_ivf::kmeans::DEFAULT_ITERS)]
    pub iters: usize,
    /// Training sample size (default 256 x nlist).
    #[arg(long)]
    pub sample: Option<usize>,
    /// random or kmeans++.
    #[arg(long, default_value = "random")]
    pub init: Init,
    /// nprobe served when a request asks for 0 (default nlist/64, at least 8).
    #[arg(long)]
    pub default_nprobe: Option<usize>,
    #[arg(long, default_value_t = 1234)]
    pub seed: u64,
    /// Where the nearest-centroid steps run: auto (the first GPU, else the CPU), cpu, gpu or
    /// gpu:N.
    #[arg(long, default_value = "auto")]
    pub device: BuildDevice,
    /// GPU builds: CUDA streams the base is streamed over.
    #[arg(long, default_value_t = crate::gpu_kmeans::DEFAULT_STREAMS)]
    pub build_streams: usize,
    /// GPU builds: rows per streamed chunk.
    #[arg(long, default_value_t = crate::gpu_kmeans::DEFAULT_CHUNK_ROWS)]
    pub chunk_rows: usize,
    /// Build from the base file a chunk of rows at a time (.fvecs or .bvecs), in host memory
    /// bounded by the training sample and two chunks, not by the base: for a base larger than
    /// memory. Chosen without the flag when the base file is over half of this machine's
    /// memory. The assignments go to a temporary beside OUT (4 bytes a row) while it runs.
    #[arg(long)]
    pub stream: bool,
    /// Streamed builds: rows read per chunk.
    #[arg(long, default_value_t = 1 << 20)]
    pub stream_rows: usize,
}

#[derive(Args, Debug)]
pub struct EvalArgs {
    #[arg(long)]
    pub index: PathBuf,
    #[arg(long)]
    pub queries: PathBuf,
    #[arg(long)]
    pub gt: PathBuf,
    /// One or more nprobe values (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "16")]
    pub nprobe: Vec<usize>,
    #[arg(long, default_value_t = 10)]
    pub k: usize,
    /// Threads for the throughput measurement (0 = all cores).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Search the memory-mapped file instead of a resident (huge-page) copy.
    #[arg(long)]
    pub mapped: bool,
}

/// Whether the base is streamed: asked for, or its file over half of physical memory.
fn streams(a: &BuildArgs) -> Result<bool> {
    if a.stream {
        return Ok(true);
    }
    let len = std::fs::metadata(&a.base)
        .with_context(|| format!("reading {}", a.base.display()))?
        .len();
    // SAFETY: sysconf has no preconditions.
    let mem = unsafe {
        libc::sysconf(libc::_SC_PHYS_PAGES) as u64 * libc::sysconf(libc::_SC_PAGESIZE) as u64
    };
    Ok(mem > 0 && len > mem / 2)
}

fn km_config(a: &BuildArgs) -> KMeansConfig {
    KMeansConfig {
        iters: a.iters,
        max_sample: a.sample.unwrap_or(256 * a.nlist),
        init: a.init,
        seed: a.seed,
        progress: true,
        ..KMeansConfig::new(a.nlist)
    }
}

/// `index build --stream` (module `cohort_ivf::ivf::streamed`).
fn build_streamed(a: &BuildArgs) -> Result<()> {
    let t = Instant::now();
    let base = cohort_ivf::rowfile::RowReader::open(&a.base)?;
    eprintln!(
        "streaming {} x {} from {} in chunks of {} rows; training {} centroids",
        base.n,
        base.dim,
        a.base.display(),
        a.stream_rows,
        a.nlist
    );
    let mut assigner = assigner_for(a.device, a.build_streams, a.chunk_rows)?;
    eprintln!("nearest-centroid steps on {}", assigner.describe());
    let bar = indicatif::ProgressBar::new(base.n as u64 * 2);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg} {bar:30} {pos}/{len} rows ({elapsed})")
            .expect("static template"),
    );
    let plan = cohort_ivf::ivf::streamed::StreamPlan {
        nlist: a.nlist,
        metric: a.metric,
        km: km_config(a),
        default_nprobe: a.default_nprobe,
        chunk_rows: a.stream_rows,
    };
    let done = cohort_ivf::ivf::streamed::build_streamed(
        &base,
        &plan,
        assigner.as_mut(),
        &a.out,
        &|what, rows, n| {
            bar.set_message(what.to_string());
            bar.set_position((rows + if what == "written" { n } else { 0 }) as u64);
        },
    )?;
    bar.finish_and_clear();
    eprintln!(
        "built and wrote {} ({:.1} GB) in {:.1?}: train {:.1} s, assign {:.1} s, write {:.1} s, checksum {:.1} s; rows held at most {:.0} MB",
        a.out.display(),
        done.file_bytes as f64 / 1e9,
        t.elapsed(),
        done.train_s,
        done.assign_s,
        done.write_s,
        done.checksum_s,
        done.peak_row_bytes as f64 / 1e6
    );
    Ok(())
}

pub fn build(a: &BuildArgs) -> Result<Option<IvfIndex>> {
    if streams(a)? {
        build_streamed(a)?;
        return Ok(None);
    }
    let t = Instant::now();
    let base = vecfile::read_vectors(&a.base)?;
    anyhow::ensure!(
        a.nlist >= 1 && a.nlist <= base.n,
        "--nlist must be between 1 and {} (the base size)",
        base.n
    );
    eprintln!(
        "read {} x {} in {:.1?}; training {} centroids",
        base.n,
        base.dim,
        t.elapsed(),
        a.nlist
    );
    let km = km_config(a);
    let mut assigner = assigner_for(a.device, a.build_streams, a.chunk_rows)?;
    eprintln!("nearest-centroid steps on {}", assigner.describe());
    let mut ix = IvfIndex::build_with(&base, a.nlist, a.metric, &km, assigner.as_mut())?;
    if let Some(p) = a.default_nprobe {
        anyhow::ensure!(
            p >= 1 && p <= a.nlist,
            "--default-nprobe must be in 1..=nlist"
        );
        ix.default_nprobe = p;
    }
    ix.save(&a.out)?;
    eprintln!("built and wrote {} in {:.1?}", a.out.display(), t.elapsed());
    Ok(Some(ix))
}

pub fn info(path: &std::path::Path) -> Result<()> {
    let ix = IvfIndex::load(path)?;
    let sizes = ix.cell_sizes();
    let (min, max) = (
        sizes.iter().min().copied().unwrap_or(0),
        sizes.iter().max().copied().unwrap_or(0),
    );
    let empty = sizes.iter().filter(|&&s| s == 0).count();
    let bytes = std::fs::metadata(path)?.len();
    println!("index {}", path.display());
    println!(
        "  format     v{} ({} bytes)",
        cohort_ivf::ivf::FORMAT_VERSION,
        bytes
    );
    println!(
        "  vectors    {} x {} f32, metric {}",
        ix.n,
        ix.dim,
        ix.metric.name()
    );
    println!(
        "  nlist      {} (default nprobe {})",
        ix.nlist, ix.default_nprobe
    );
    println!(
        "  list sizes min {min}, mean {:.1}, max {max}, empty {empty}",
        ix.n as f64 / ix.nlist as f64
    );
    match &ix.placement {
        Some(p) => println!("  placement  recorded for {} devices", p.devices),
        None => println!("  placement  none recorded (sharding places by bytes)"),
    }
    Ok(())
}

pub fn place(a: &PlaceArgs) -> Result<()> {
    anyhow::ensure!(
        (1..=u16::MAX as usize + 1).contains(&a.devices),
        "--devices must be in 1..=65536"
    );
    let mut ix = if a.write {
        IvfIndex::load_resident(&a.index)?
    } else {
        IvfIndex::load(&a.index)?
    };
    let recorded = ix
        .placement
        .as_ref()
        .is_some_and(|p| p.devices == a.devices);
    let p = ix.placement_for(a.devices);
    let bytes = cohort_ivf::ivf::placement::list_bytes(&ix.cell_sizes(), ix.dim);
    let per = p.bytes_per_device(&bytes);
    let total: u64 = bytes.iter().sum();
    let centroids = (ix.nlist * ix.dim * 4) as u64;
    println!(
        "{} over {} devices ({}):",
        a.index.display(),
        a.devices,
        if recorded { "as recorded" } else { "by bytes" }
    );
    for (d, b) in per.iter().enumerate() {
        println!(
            "  device {d}: {} lists, {b} list bytes ({:.2}% of {total}) + {centroids} centroid bytes",
            p.lists_of(d).len(),
            100.0 * *b as f64 / total.max(1) as f64
        );
    }
    let mean = total as f64 / a.devices as f64;
    let max = per.iter().copied().max().unwrap_or(0);
    println!(
        "  largest device holds {:.4} x the mean ({:.4} of the lists)",
        max as f64 / mean.max(1.0),
        max as f64 / total.max(1) as f64
    );
    if a.write {
        ix.placement = Some(p);
        ix.save(&a.index)
            .with_context(|| format!("writing {}", a.index.display()))?;
        println!("  recorded in {}", a.index.display());
    }
    Ok(())
}

#[derive(serde::Serialize)]
struct EvalPoint {
    nprobe: usize,
    k: usize,
    recall_at_k: f64,
    /// Single-thread: queries/s and mean latency.
    qps_single_thread: f64,
    latency_us_mean: f64,
    /// All threads, one query per task.
    qps: f64,
    threads: usize,
    /// Vectors compared per query (the scan's work).
    vectors_scanned_mean: f64,
}

/// The header of `index eval`'s table: one name over each of its six columns.
fn eval_header() -> String {
    format!(
        "{:>7} {:>10} {:>12} {:>12} {:>10} {:>10}",
        "nprobe", "recall@k", "qps(1 thr)", "lat_us(1)", "qps(all)", "scanned"
    )
}

pub fn eval(a: &EvalArgs) -> Result<()> {
    let ix = if a.mapped {
        IvfIndex::load(&a.index)?
    } else {
        IvfIndex::load_resident(&a.index)?
    };
    let q = vecfile::read_vectors(&a.queries)?;
    let (gn, gdim, gt) = vecfile::read_ivecs(&a.gt)?;
    anyhow::ensure!(
        q.dim == ix.dim,
        "queries have dimension {}, the index {}",
        q.dim,
        ix.dim
    );
    anyhow::ensure!(gn >= q.n, "ground truth has {gn} rows for {} queries", q.n);
    anyhow::ensure!(
        a.k >= 1 && a.k <= gdim,
        "--k must be in 1..={gdim} (ground-truth depth)"
    );
    let threads = if a.threads == 0 {
        rayon::current_num_threads()
    } else {
        a.threads
    };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .context("thread pool")?;
    let mut points = Vec::new();
    println!("{}", eval_header());
    for &nprobe in &a.nprobe {
        anyhow::ensure!(
            nprobe >= 1 && nprobe <= ix.nlist,
            "nprobe {nprobe} out of 1..={}",
            ix.nlist
        );
        let p = SearchParams { k: a.k, nprobe };
        let t = Instant::now();
        let found: Vec<Vec<u32>> = (0..q.n)
            .map(|i| ix.query(q.row(i), p).into_iter().map(|n| n.id).collect())
            .collect();
        let single = t.elapsed().as_secs_f64();
        let t = Instant::now();
        pool.install(|| {
            (0..q.n)
                .into_par_iter()
                .for_each(|i| drop(ix.query(q.row(i), p)))
        });
        let multi = t.elapsed().as_secs_f64();
        let recall = exact::recall_at_k(&found, &gt[..q.n * gdim], gdim, a.k);
        let sizes = ix.cell_sizes();
        let scanned: usize = (0..q.n)
            .map(|i| {
                let probes = cohort_ivf::ivf::stages::filter(
                    ix.centroids(),
                    ix.dim,
                    ix.metric,
                    q.row(i),
                    nprobe,
                );
                probes.iter().map(|&c| sizes[c as usize]).sum::<usize>()
            })
            .sum();
        let pt = EvalPoint {
            nprobe,
            k: a.k,
            recall_at_k: recall,
            qps_single_thread: q.n as f64 / single,
            latency_us_mean: single * 1e6 / q.n as f64,
            qps: q.n as f64 / multi,
            threads,
            vectors_scanned_mean: scanned as f64 / q.n as f64,
        };
        println!(
            "{:>7} {:>10.4} {:>12.0} {:>12.1} {:>10.0} {:>10.0}",
            nprobe,
            pt.recall_at_k,
            pt.qps_single_thread,
            pt.latency_us_mean,
            pt.qps,
            pt.vectors_scanned_mean
        );
        points.push(pt);
    }
    if let Some(path) = &a.json {
        let v = if points.len() == 1 {
            serde_json::to_value(&points[0])?
        } else {
            serde_json::json!({ "points": points })
        };
        write_whole(path, serde_json::to_string_pretty(&v)?.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// `cohort index ...`, the command k-NN brings.
pub const COMMANDS: &[ServiceCommand] = &[ServiceCommand {
    name: "index",
    command: || {
        IndexCmd::augment_subcommands(
            Command::new("index")
                .about("IVF-Flat indexes for the knn service: build, inspect, evaluate, place"),
        )
        .subcommand_required(true)
        .arg_required_else_help(true)
    },
    run: |m, _record| {
        let cmd = IndexCmd::from_arg_matches(m).map_err(|e| e.to_string())?;
        run(cmd).map_err(|e| format!("{e:#}"))
    },
}];

pub fn run(cmd: IndexCmd) -> Result<()> {
    // A build or placement stopped with ^C or SIGTERM removes the file it was writing.
    cohort_ivf::atomic_file::remove_temps_on_signals()?;
    match cmd {
        IndexCmd::Build(a) => build(&a).map(|_| ()),
        IndexCmd::Info { path } => info(&path),
        IndexCmd::Eval(a) => eval(&a),
        IndexCmd::Place(a) => place(&a),
    }
}

#[cfg(test)]
mod tests {
    use super::BuildDevice;

    #[test]
    fn every_column_of_the_eval_table_has_a_header() {
        let row = format!(
            "{:>7} {:>10.4} {:>12.0} {:>12.1} {:>10.0} {:>10.0}",
            16, 0.9, 1000.0, 90.0, 2000.0, 3900.0
        );
        let head = super::eval_header();
        // Each name right-aligned in its column's width: the same length, the last over the last.
        assert_eq!(head.len(), row.len(), "{head}\n{row}");
        assert!(
            head.ends_with("    scanned") && row.ends_with("       3900"),
            "{head}\n{row}"
        );
    }

    #[test]
    fn build_devices_parse_and_garbage_is_named() {
        assert_eq!("auto".parse(), Ok(BuildDevice::Auto));
        assert_eq!("cpu".parse(), Ok(BuildDevice::Cpu));
        assert_eq!("gpu".parse(), Ok(BuildDevice::Gpu(0)));
        assert_eq!("gpu:3".parse(), Ok(BuildDevice::Gpu(3)));
        for bad in ["", "tpu", "gpu:", "gpu:-1", "gpu:x", "GPU"] {
            let e = bad.parse::<BuildDevice>().unwrap_err();
            assert!(
                e.contains(&format!("{bad:?}")) && e.contains("auto, cpu, gpu"),
                "{e}"
            );
        }
    }
}
