//! `cohort-lab bench served`: the served matrix - services x engines x server cores - measured the
//! same way every time. The server (this binary's `serve`) is pinned to cores 0..N-1; the load
//! generator (this binary's `load`, one process per offered rate) is pinned to other cores;
//! open loop, Poisson, every answer checked; optionally a CPU-hungry neighbour (`bench hog`) on
//! the cores neither uses, or on the server's own. Each point names its limit from counters
//! measured during it (served_limit.rs). Writes one JSON and one plot per service.

use super::served_limit::Observed;
use anyhow::{bail, Context as _, Result};
use clap::{Args, ValueEnum};
use cohort_load::Report;
use cohort_server::util::{parse_cpu_list, CpuList};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Hog {
    None,
    /// On the cores neither the server nor the generator uses.
    Others,
    /// On the server's own cores.
    Own,
}

#[derive(Args, Debug)]
pub struct ServedBench {
    /// Services to load (echo; knn needs --index, --queries and --gt; a service of raw HTTP
    /// pages is served and loaded over HTTP, every page checked).
    #[arg(long, value_delimiter = ',', default_value = "echo")]
    pub services: Vec<String>,
    /// Engines (cpu, inline, gpu-direct, gpu-cohort, gpu-persistent, hybrid).
    #[arg(long, value_delimiter = ',', default_value = "cpu")]
    pub engines: Vec<String>,
    /// Server core counts: a point with N cores pins the server to cores 0..N-1, with N io
    /// threads (and N workers on the cpu engine).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub cores: Vec<usize>,
    /// Offered rates, e.g. 50k,100k,200k.
    #[arg(long, value_delimiter = ',', value_parser = cohort_server::util::parse_rate,
          default_value = "25k,50k,100k,200k,400k,800k")]
    pub rates: Vec<f64>,
    /// Measured seconds per rate (after the warm-up).
    #[arg(long, default_value_t = 2.0)]
    pub duration: f64,
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// UDP sockets (HTTP connections for a page service) of the generator.
    #[arg(long, default_value_t = 8)]
    pub connections: usize,
    /// The generator's cores (default: every core after the largest server's).
    #[arg(long, value_parser = parse_cpu_list)]
    pub client_cpus: Option<CpuList>,
    /// A CPU-hungry neighbour while each point runs.
    #[arg(long, value_enum, default_value = "none")]
    pub hog: Hog,
    /// The p99 a point must keep to count as served (the table's bound), microseconds.
    #[arg(long, default_value_t = 1000.0)]
    pub p99_us: f64,
    /// knn: the index the server loads.
    #[arg(long)]
    pub index: Option<PathBuf>,
    /// knn: queries (.fvecs) and exact neighbours (.ivecs) for the generator.
    #[arg(long)]
    pub queries: Option<PathBuf>,
    #[arg(long)]
    pub gt: Option<PathBuf>,
    #[arg(long, default_value_t = 10)]
    pub k: usize,
    #[arg(long, default_value_t = 16)]
    pub nprobe: usize,
    /// Another serve flag for every server, e.g. --serve-arg=--io-spin-us=50 (repeatable).
    #[arg(long, allow_hyphen_values = true)]
    pub serve_arg: Vec<String>,
    /// Users of the server's backend, for a service with a `users` setting (the server's
    /// setting and the generator's --users).
    #[arg(long, default_value_t = 100_000)]
    pub users: u32,
    /// UDP (HTTP for a page service) port of the server on 127.0.0.1.
    #[arg(long, default_value_t = 7300)]
    pub port: u16,
    /// io threads of a server of N cores (default: serve's own choice for the N cores it is
    /// pinned to, `crates/server/src/threads.rs`: N with one GPU host thread, N less the GPU
    /// host threads with several; its cpu workers likewise).
    #[arg(long)]
    pub io_threads: Option<usize>,
    /// Seconds a server may take to listen (a GPU engine compiles its kernels first).
    #[arg(long, default_value_t = 300)]
    pub start_timeout_s: u64,
    /// The JSON to write; plots go beside it as STEM-SERVICE.png.
    #[arg(long, default_value = "lab/results/served.json")]
    pub out: PathBuf,
}

pub fn run(a: &ServedBench) -> Result<()> {
    let cores_here = std::thread::available_parallelism().map_or(1, |n| n.get());
    let widest = *a.cores.iter().max().context("--cores is empty")?;
    if a.cores.contains(&0) {
        bail!("--cores: a server needs at least one core");
    }
    let client = match &a.client_cpus {
        Some(c) => c.0.clone(),
        None => (widest..cores_here).collect(),
    };
    if client.is_empty() || client.iter().any(|&c| c < widest) {
        bail!(
            "the generator needs cores of its own after the server's 0..{widest} \
             (this machine has {cores_here}; give --client-cpus)"
        );
    }
    for s in &a.services {
        if s == "knn" && (a.index.is_none() || a.queries.is_none() || a.gt.is_none()) {
            bail!("knn needs --index, --queries and --gt");
        }
    }
    if let Some(dir) = a.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    // Servers and generators are the product's binary (`cohort serve`, `cohort load`); the
    // hog is this one's (`cohort-lab bench hog`).
    let exe = crate::product_binary()?;
    let tmp = TempDir::new()?;
    let nvml = cohort_power::GpuPower::shared().ok();
    let mut points = Vec::new();
    for service in &a.services {
        let mut curves = Vec::new();
        for engine in &a.engines {
            for &n in &a.cores {
                let p = point(
                    a,
                    &exe,
                    tmp.path(),
                    service,
                    engine,
                    n,
                    &client,
                    &a.rates,
                    nvml.as_ref(),
                )?;
                curves.push((format!("{engine} {n} core(s)"), p.1));
                points.push(p.0);
            }
        }
        let png = plot_path(&a.out, service);
        cohort_load::plot_sweep(
            &curves,
            &format!("{service} served over UDP (hog: {:?})", a.hog),
            &png,
        )?;
    }
    super::write_result(
        &a.out,
        json!({ "p99_bound_us": a.p99_us, "hog": format!("{:?}", a.hog).to_lowercase(), "client_cpus": client, "points": points }),
    )
}

/// `OUT`'s stem with `what` and `.log`, beside it.
fn log_path(out: &Path, what: &str) -> PathBuf {
    let stem = out
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "served".into());
    out.with_file_name(format!("{stem}-{what}.log"))
}

fn plot_path(out: &Path, service: &str) -> PathBuf {
    let stem = out
        .file_stem()
        .map_or("served".into(), |s| s.to_string_lossy().into_owned());
    out.with_file_name(format!("{stem}-{service}.png"))
}

/// A service of raw HTTP pages (its workload browses sessions of pages) is served and loaded
/// over HTTP, the rest over UDP.
fn over_http(service: &str) -> bool {
    // The smallest options a workload accepts; one that needs files (knn) refuses them and is
    // not a page service.
    let options = cohort_services::workload::LoadOptions {
        payload_bytes: 1,
        spin_us: 0,
        queries: None,
        gt: None,
        k: 1,
        nprobe: 1,
        queries_per_request: 1,
        users: 1,
        data: None,
        model: None,
    };
    cohort_services::catalog::entry(service)
        .and_then(|e| (e.workload)(&options).ok())
        .is_some_and(|w| w.pages().is_some())
}

/// Whether the service has a `users` setting (its records are per user).
fn has_users(service: &str) -> bool {
    cohort_services::catalog::entry(service)
        .and_then(|e| (e.resolve)(&Default::default()).ok())
        .is_some_and(|s| s.contains_key("users"))
}

/// One server (service, engine, n cores) and a generator run per rate.
#[allow(clippy::too_many_arguments)]
fn point(
    a: &ServedBench,
    exe: &Path,
    tmp: &Path,
    service: &str,
    engine: &str,
    n: usize,
    client: &[usize],
    rates: &[f64],
    nvml: Option<&cohort_power::GpuPower>,
) -> Result<(Value, Vec<Report>)> {
    let server_cpus: Vec<usize> = (0..n).collect();
    let mut flags: Vec<String> = vec![
        "serve".into(),
        if over_http(service) {
            "--http"
        } else {
            "--udp"
        }
        .into(),
        format!("127.0.0.1:{}", a.port),
        "--service".into(),
        format!("{service}:{engine}"),
        "--log-level".into(),
        "warn".into(),
    ];
    // Threads: serve's rule for the cores it is pinned to, unless named here.
    if let Some(io) = a.io_threads {
        flags.extend(["--io-threads".into(), io.to_string()]);
    }
    if has_users(service) {
        flags.extend([
            "--service-opt".into(),
            format!("{service}.users={}", a.users),
        ]);
    }
    if let Some(ix) = &a.index {
        if service == "knn" {
            flags.extend(["--index".into(), ix.display().to_string()]);
        }
    }
    flags.extend(a.serve_arg.iter().cloned());
    // The server's settings as it reads them (its own parser), kept with the results as
    // data: readers (scaling_plot.rs) need not parse the command line back.
    let settings = cohort_server::ServeArgs::from_flags(&flags[1..])
        .map_err(|e| anyhow::anyhow!("the serve flags {flags:?}: {e}"))?;
    let settings = serde_json::to_value(&settings)?;
    let log = tmp.join(format!("serve-{service}-{engine}-{n}.log"));
    eprintln!(
        "== {service} on {engine}, server cores 0-{}: {}",
        n - 1,
        flags.join(" ")
    );
    let mut server = Pinned::spawn(exe, &flags, &server_cpus, &log)?;
    wait_listening(&mut server, &log, Duration::from_secs(a.start_timeout_s))?;
    let hog_cpus: Vec<usize> = match a.hog {
        Hog::None => vec![],
        Hog::Own => server_cpus.clone(),
        Hog::Others => {
            let here = std::thread::available_parallelism().map_or(1, |c| c.get());
            (0..here)
                .filter(|c| *c >= n && !client.contains(c))
                .collect()
        }
    };
    let mut runs = Vec::new();
    let mut rows = Vec::new();
    for &rate in rates {
        let hog = (!hog_cpus.is_empty())
            .then(|| spawn_hog(tmp, &hog_cpus, a.duration + a.warmup + 2.0))
            .transpose()?;
        let (report, gpu_util) = load(a, exe, tmp, service, rate, client, server.0.id(), nvml)?;
        if let Some(mut h) = hog {
            let _ = h.0.kill();
            let _ = h.0.wait();
        }
        let server_cpu_s = report
            .extra
            .get("cpu")
            .and_then(|c| c.get("server"))
            .and_then(|s| s.get("cpu_s"))
            .and_then(Value::as_f64);
        let o = Observed {
            generator_saturated: report.generator_saturated,
            server_cpu_s,
            window_s: report.duration_s,
            server_cores: n,
            gpu_util,
            persistent_gpu: engine == "gpu-persistent",
            p99_us: report.latency_us.p99,
            errors: report.error_total(),
        };
        let limit = o.limit(a.p99_us);
        eprintln!(
            "{}  limit: {}",
            report.table_row(),
            serde_json::to_string(&limit)?
        );
        rows.push(json!({
            "offered": rate, "achieved": report.achieved_rate, "p50_us": report.latency_us.p50,
            "p99_us": report.latency_us.p99, "errors": report.error_total(),
            "generator_saturated": report.generator_saturated, "server_busy": o.server_busy(),
            "gpu_util_percent": gpu_util, "limit": limit, "report": report,
        }));
        runs.push(report);
    }
    server.stop()?;
    // The server's own log beside the results: a restart or a refusal it logged is the first
    // thing to read at a point that went wrong.
    let kept = log_path(&a.out, &format!("serve-{service}-{engine}-{n}"));
    if let Err(e) = std::fs::copy(&log, &kept) {
        eprintln!("keeping {}: {e}", log.display());
    }
    let best = |bound: f64| {
        runs.iter()
            .filter(|r| r.latency_us.p99 <= bound && r.error_total() == 0 && !r.generator_saturated)
            .map(|r| r.achieved_rate)
            .fold(0.0, f64::max)
    };
    let v = json!({
        "service": service, "engine": engine, "server_cores": n, "server_cpus": server_cpus,
        "serve": flags, "serve_settings": settings, "best_at_p99_bound": best(a.p99_us), "best_at_p99_5ms": best(5000.0),
        "runs": rows,
    });
    Ok((v, runs))
}

/// One generator process at `rate`, pinned to `client`; GPU utilization sampled meanwhile.
#[allow(clippy::too_many_arguments)]
fn load(
    a: &ServedBench,
    exe: &Path,
    tmp: &Path,
    service: &str,
    rate: f64,
    client: &[usize],
    server_pid: u32,
    nvml: Option<&cohort_power::GpuPower>,
) -> Result<(Report, Option<f64>)> {
    let json_path = tmp.join("load.json");
    let _ = std::fs::remove_file(&json_path);
    let mut args: Vec<String> = vec![
        "load".into(),
        "--target".into(),
        if over_http(service) {
            format!("http://127.0.0.1:{}", a.port)
        } else {
            format!("udp://127.0.0.1:{}", a.port)
        },
        "--poisson".into(),
        "--log-level".into(),
        "warn".into(),
        "--service".into(),
        service.into(),
        "--connections".into(),
        a.connections.to_string(),
        "--rate".into(),
        format!("{rate}"),
        "--duration".into(),
        a.duration.to_string(),
        "--warmup".into(),
        a.warmup.to_string(),
        "--server-pid".into(),
        server_pid.to_string(),
        "--json".into(),
        json_path.display().to_string(),
    ];
    if has_users(service) {
        args.extend(["--users".into(), a.users.to_string()]);
    }
    if service == "knn" {
        let p = |x: &Option<PathBuf>| {
            x.as_ref()
                .map_or(String::new(), |p| p.display().to_string())
        };
        args.extend([
            "--queries".into(),
            p(&a.queries),
            "--gt".into(),
            p(&a.gt),
            "--k".into(),
            a.k.to_string(),
            "--nprobe".into(),
            a.nprobe.to_string(),
        ]);
    }
    let log = tmp.join("load.log");
    let mut gen = Pinned::spawn(exe, &args, client, &log)?;
    // Samples after the warm-up only: the measured window's utilization.
    let skip_until = Instant::now() + Duration::from_secs_f64(a.warmup);
    let mut samples = Vec::new();
    let status = loop {
        if let Some(st) = gen.0.try_wait()? {
            break st;
        }
        if let Some(g) = nvml {
            if Instant::now() >= skip_until {
                let u = g.utilization();
                if !u.is_empty() {
                    samples.push(u.iter().map(|&x| x as f64).sum::<f64>() / u.len() as f64);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // A run whose every answer failed exits non-zero but still wrote its measurement: an
    // overloaded point is a result. No JSON is a failure of the generator itself.
    let Ok(text) = std::fs::read_to_string(&json_path) else {
        bail!(
            "the load generator wrote no result ({status}): {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    };
    let mut report: Report = serde_json::from_str(&text).context("the generator's JSON")?;
    // The matrix records machine, commit and command once, not per point.
    for k in ["machine", "commit", "command", "unix_time"] {
        report.extra.remove(k);
    }
    let util = (!samples.is_empty()).then(|| samples.iter().sum::<f64>() / samples.len() as f64);
    Ok((report, util))
}

/// Logs and the generator's JSON while the matrix runs; removed afterwards.
pub(super) struct TempDir(PathBuf);

impl TempDir {
    pub(super) fn new() -> Result<TempDir> {
        let p = std::env::temp_dir().join(format!("cohort-served-{}", std::process::id()));
        std::fs::create_dir_all(&p)?;
        Ok(TempDir(p))
    }
    pub(super) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child process of this binary pinned to a set of cores, its output in a log file.
pub(super) struct Pinned(pub(super) Child);

impl Pinned {
    pub(super) fn spawn(exe: &Path, args: &[String], cpus: &[usize], log: &Path) -> Result<Pinned> {
        use std::os::unix::process::CommandExt;
        let out = std::fs::File::create(log)?;
        // SAFETY: an all-zero cpu_set_t is the empty set; CPU_SET writes inside it.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        for &c in cpus {
            // SAFETY: c < CPU_SETSIZE for any core this machine has.
            unsafe { libc::CPU_SET(c, &mut set) };
        }
        let mut cmd = Command::new(exe);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out);
        // SAFETY: sched_setaffinity is async-signal-safe; `set` was built before the fork.
        unsafe {
            cmd.pre_exec(move || {
                if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Ok(Pinned(
            cmd.spawn()
                .with_context(|| format!("starting {}", exe.display()))?,
        ))
    }

    /// SIGTERM, then the exit status (a server drains and exits 0).
    pub(super) fn stop(mut self) -> Result<()> {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let st = self.0.wait()?;
        if !st.success() {
            bail!("the server exited with {st}");
        }
        Ok(())
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

pub(super) fn wait_listening(server: &mut Pinned, log: &Path, limit: Duration) -> Result<()> {
    let until = Instant::now() + limit;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains("listening") {
            return Ok(());
        }
        if let Some(st) = server.0.try_wait()? {
            bail!("the server exited ({st}) before listening:\n{text}");
        }
        if Instant::now() > until {
            bail!("the server did not listen within {limit:?}:\n{text}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn spawn_hog(tmp: &Path, cpus: &[usize], seconds: f64) -> Result<Pinned> {
    let lab = std::env::current_exe().context("finding this binary")?;
    let list = cpus
        .iter()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let args: Vec<String> = vec![
        "bench".into(),
        "hog".into(),
        "--cpus".into(),
        list,
        "--seconds".into(),
        seconds.to_string(),
        "--out".into(),
        tmp.join("hog.json").display().to_string(),
    ];
    Pinned::spawn(&lab, &args, cpus, &tmp.join("hog.log"))
}
