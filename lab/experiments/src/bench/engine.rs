//! Engines without sockets: each driver thread is an ingress of its own (as Centaur emulated
//! its network): it writes request messages into the engine's rings and reads the answer
//! messages back, keeping `window` requests outstanding, so an engine is measured past what
//! the kernel's UDP path could deliver, through the same boundary a server uses.

use anyhow::{Context as _, Result};
use clap::Args;
use cohort_engine::{Bell, Ingress, IngressEnds};
use cohort_server::{self as serve, ServeArgs};
use serde_json::json;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct EngineBench {
    /// cpu, gpu-direct, gpu-cohort, gpu-persistent (comma-separated: each in turn).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "cpu,gpu-direct,gpu-cohort"
    )]
    pub engines: Vec<String>,
    /// The service driven: knn (queries from --data), echo (empty requests: the engine's
    /// round trip alone), spin (--spin-us of work per request), or any other service's
    /// load-workload requests (lenet: MNIST digits, from --data if given).
    #[arg(long, default_value = "knn")]
    pub service: String,
    /// spin: microseconds of work per request.
    #[arg(long, default_value_t = 0)]
    pub spin_us: u32,
    /// Per-service settings NAME.KEY=VALUE as for `cohort serve` (e.g. knn.stages=132:264:33,
    /// spin.stages=8 for 8 persistent worker blocks).
    #[arg(long)]
    pub service_opt: Vec<String>,
    /// knn: folder with query.fvecs and ivf{nlist}.index.
    #[arg(long)]
    pub data: Option<PathBuf>,
    #[arg(long, default_value_t = 1024)]
    pub nlist: usize,
    #[arg(long, default_value_t = 16)]
    pub nprobe: u16,
    #[arg(long, default_value_t = 10)]
    pub k: u16,
    /// Requests kept outstanding by the driver.
    #[arg(long, value_delimiter = ',', default_value = "64,1024,8192")]
    pub window: Vec<usize>,
    #[arg(long, default_value_t = 3.0)]
    pub duration: f64,
    /// The GPU batching engines' settings, as `cohort serve` takes them (the same defaults).
    #[command(flatten)]
    pub gpu: cohort_server::GpuEngineArgs,
    /// knn on the GPU engines: element type of the vectors there (f32, f16, u8), as
    /// `cohort serve --gpu-precision`.
    #[arg(long, default_value = "f32")]
    pub gpu_precision: String,
    /// Runs of each window; the row holds the fastest (its figures), and every run's rate in
    /// `queries_per_s_runs`: one 2-second run of gpu-cohort varied by +-15% on the H200, more
    /// than a regression bound of 15% can hold.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub repeat: u32,
    /// Driver threads sharing the window (encoding and submitting requests is their work;
    /// the gpu engines decode in the submitting thread, so one driver can be the limit).
    #[arg(long, default_value_t = 4)]
    pub drivers: usize,
    #[arg(long, default_value = "lab/results/engine.json")]
    pub out: PathBuf,
}

/// The most requests the drivers cycle through (a query file of up to this many rows is sent
/// whole).
const PAYLOADS: u64 = 1 << 16;

/// The requests the service's load workload makes (knn: the queries of --data's
/// query.fvecs; echo: empty ones, the engine's round trip alone; spin: --spin-us of work;
/// lenet: MNIST digits from --data, else the ones built in).
fn payloads(a: &EngineBench) -> Result<Vec<Vec<u8>>> {
    let entry = cohort_services::catalog::entry(&a.service).with_context(|| {
        format!(
            "unknown service {:?} (available: {})",
            a.service,
            cohort_services::catalog::names().join(", ")
        )
    })?;
    let options = cohort_services::workload::LoadOptions {
        payload_bytes: 0,
        spin_us: a.spin_us,
        queries: a.data.as_ref().map(|d| d.join("query.fvecs")),
        gt: None,
        k: a.k as usize,
        nprobe: a.nprobe,
        queries_per_request: 1,
        users: 1,
        data: a.data.clone(),
        model: None,
    };
    let w = (entry.workload)(&options)
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("{}'s requests (--data)", a.service))?;
    anyhow::ensure!(
        w.pages().is_none(),
        "{} is served as HTTP pages: bench engine drives request services",
        a.service
    );
    // One request per distinct one the workload makes: it repeats from the first (k-NN: one
    // per query, as many as the file holds; echo and spin: one), so the drivers copy from as
    // little memory as the requests need.
    let mut out: Vec<Vec<u8>> = Vec::new();
    for seq in 0..PAYLOADS {
        let mut p = Vec::new();
        w.payload(seq, &mut p);
        if seq > 0 && p == out[0] {
            break;
        }
        out.push(p);
    }
    Ok(out)
}

pub fn run(a: &EngineBench) -> Result<()> {
    let payloads = payloads(a)?;
    let mut results = Vec::new();
    for engine in &a.engines {
        let mut sa = ServeArgs::loopback(&a.service);
        // Each engine in turn gets the knobs it reads (a persistent stage ratio is no cpu knob).
        let kind: cohort_server::plan::EngineKind = engine.parse().map_err(anyhow::Error::msg)?;
        sa.service_opt = cohort_server::plan::opts_for(kind, &a.service_opt);
        if let Some(data) = &a.data {
            let index = data.join(format!("ivf{}.index", a.nlist));
            sa.set_service("knn", "index", index.display().to_string());
            sa.set_service("knn", "precision", a.gpu_precision.clone());
        }
        sa.engine = engine.clone();
        sa.gpu = a.gpu.clone();
        sa.admission.max_queue = 1 << 20;
        sa.default_timeout_us = 60_000_000;
        let drivers_max = a
            .window
            .iter()
            .map(|&w| a.drivers.clamp(1, w))
            .max()
            .unwrap_or(1);
        // Resolved once; an engine this machine cannot run is skipped, as one that fails to start.
        let started = serve::ServerConfig::resolve(&sa)
            .and_then(|c| Ok((serve::start_engines(&c, drivers_max)?, c)));
        let (mut side, resolved) = match started {
            Ok(s) => s,
            Err(e) => {
                eprintln!("{engine}: skipped: {e:#}");
                results.push(json!({"engine": engine, "skipped": format!("{e:#}")}));
                continue;
            }
        };
        // The control threads the engine runs (0, auto, resolved from this process's cores).
        let control_threads = resolved
            .serve
            .plans
            .first()
            .map_or(a.gpu.control_threads, |p| p.cfg.gpu.control_threads);
        let mut ends: Vec<Option<IngressEnds>> = std::mem::take(&mut side.ingresses)
            .into_iter()
            .map(Some)
            .collect();
        let metrics = side.metrics.clone();
        let mut ingresses: Vec<(Ingress<Instant>, std::sync::Arc<Bell>)> = ends
            .iter_mut()
            .map(|e| {
                let ends = e.take().expect("fresh");
                let bell = Bell::new();
                ends.set_wake(bell.clone());
                let ing = Ingress::new(ends, 1 << 20, metrics.clone(), Duration::from_secs(60))
                    .with_inline(side.inline.clone());
                (ing, bell)
            })
            .collect();
        for &window in &a.window {
            let mut runs: Vec<serde_json::Value> = Vec::new();
            for _ in 0..a.repeat {
                let drivers = a.drivers.clamp(1, window);
                let meter = cohort_power::Meter::start();
                let start = Instant::now();
                let end = start + Duration::from_secs_f64(a.duration);
                let per_driver: Vec<Result<(u64, u64, hdrhistogram::Histogram<u64>)>> =
                    std::thread::scope(|sc| {
                        let handles: Vec<_> = ingresses
                            .iter_mut()
                            .take(drivers)
                            .enumerate()
                            .map(|(d, (ing, bell))| {
                                let payloads = &payloads;
                                let share = window / drivers + usize::from(d < window % drivers);
                                let service = a.service.as_str();
                                sc.spawn(move || {
                                    drive(ing, bell, payloads, share, d as u64, end, service)
                                })
                            })
                            .collect();
                        handles
                            .into_iter()
                            .map(|h| h.join().expect("driver thread"))
                            .collect()
                    });
                let secs = start.elapsed().as_secs_f64();
                let energy = meter.finish();
                let mut hist = hdrhistogram::Histogram::<u64>::new(3)?;
                let (mut done, mut errors) = (0u64, 0u64);
                for r in per_driver {
                    let (d, e, h) = r?;
                    done += d;
                    errors += e;
                    hist.add(h)?;
                }
                let us = |q: f64| hist.value_at_quantile(q) as f64 / 1e3;
                let r = json!({"engine": engine, "service": a.service, "spin_us": a.spin_us, "service_opt": a.service_opt, "window": window, "drivers": drivers, "queries_per_s": done as f64 / secs, "errors": errors,
                "latency_us": {"p50": us(0.5), "p99": us(0.99), "p999": us(0.999)}, "nprobe": a.nprobe, "k": a.k, "nlist": a.nlist,
                "precision": a.gpu_precision, "gpus": a.gpu.gpus, "max_cohort": a.gpu.max_cohort, "cohort_timeout_us": a.gpu.cohort_timeout_us, "cohort_graphs": a.gpu.cohort_graphs, "cohort_keep_busy": a.gpu.cohort_keep_busy, "streams": a.gpu.streams, "control_threads": control_threads, "control_threads_given": a.gpu.control_threads, "gpus_per_control_thread": a.gpu.gpus_per_control_thread,
                "energy": energy.to_json(done as f64)});
                eprintln!("{r}");
                runs.push(r);
            }
            results.push(fastest(runs));
        }
        drop(ingresses);
        let profiles = side.shutdown();
        if !profiles.is_empty() {
            // One profile per GPU over the engine's whole run (every window above).
            let p = serde_json::to_value(&profiles)?;
            eprintln!("{engine} profile: {p}");
            results.push(json!({"engine": engine, "service": a.service, "service_opt": a.service_opt, "windows": a.window, "profile": p}));
        }
    }
    super::write_result(&a.out, serde_json::Value::Array(results))
}

/// The fastest of a window's runs, with every run's rate beside it.
fn fastest(runs: Vec<serde_json::Value>) -> serde_json::Value {
    let qps = |r: &serde_json::Value| r["queries_per_s"].as_f64().unwrap_or(0.0);
    let rates: Vec<f64> = runs.iter().map(qps).collect();
    let errors: Vec<u64> = runs
        .iter()
        .map(|r| r["errors"].as_u64().unwrap_or(0))
        .collect();
    let mut best = runs
        .into_iter()
        .max_by(|x, y| qps(x).total_cmp(&qps(y)))
        .expect("at least one run");
    best["queries_per_s_runs"] = json!(rates);
    // A slower run's errors are not hidden behind the fastest one's figures.
    best["errors_runs"] = json!(errors);
    best
}

/// One driver thread: keeps `window` requests outstanding until `end`, then drains them.
fn drive(
    ing: &mut Ingress<Instant>,
    bell: &Bell,
    payloads: &[Vec<u8>],
    window: usize,
    driver: u64,
    end: Instant,
    service: &str,
) -> Result<(u64, u64, hdrhistogram::Histogram<u64>)> {
    bell.bind_current();
    let mut hist = hdrhistogram::Histogram::<u64>::new(3)?;
    let (mut next, mut done, mut errors) = (0u64, 0u64, 0u64);
    let service = cohort_services::catalog::entry(service)
        .with_context(|| format!("unknown service {service:?}"))?
        .id;
    // An inline service is answered inside `admit`: counted there, never in flight.
    let refill = |ing: &mut Ingress<Instant>,
                  next: &mut u64,
                  errors: &mut u64,
                  done: &mut u64,
                  hist: &mut hdrhistogram::Histogram<u64>| {
        while ing.in_flight() < window && Instant::now() < end {
            let p = &payloads[(*next as usize + driver as usize * 7919) % payloads.len()];
            let mut now = |sent: Instant, _: &cohort_engine::Meta, a: cohort_engine::Answer| {
                let _ = hist.record(sent.elapsed().as_nanos() as u64);
                *done += 1;
                *errors += u64::from(a.is_err());
            };
            if ing
                .admit(
                    Instant::now(),
                    service,
                    driver << 48 | *next,
                    0,
                    p,
                    &mut now,
                )
                .is_err()
            {
                *errors += 1;
                break;
            }
            *next += 1;
        }
    };
    refill(ing, &mut next, &mut errors, &mut done, &mut hist);
    let quiet_until = Instant::now() + Duration::from_secs(10);
    while ing.in_flight() > 0 && Instant::now() < quiet_until.max(end + Duration::from_secs(10)) {
        let mut got = 0;
        ing.drain(usize::MAX, |sent, _, answer| {
            let _ = hist.record(sent.elapsed().as_nanos() as u64);
            got += 1;
            errors += u64::from(answer.is_err());
        });
        if Instant::now() < end {
            done += got;
        }
        refill(ing, &mut next, &mut errors, &mut done, &mut hist);
        if got == 0 {
            bell.sleep(Duration::from_millis(1), || ing.ends.answers_waiting());
        }
    }
    Ok((done, errors, hist))
}
