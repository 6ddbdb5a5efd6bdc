//! Overload, not queueing (issue 84): per transport, a server pinned to its cores and a load
//! generator pinned to others. First the capacity (closed loop, `--capacity-concurrency` in
//! flight), then open loop (Poisson) at multiples of it (`--multiples`, default 0.8, 1.5, 2,
//! 4). Per point: offered, goodput (correct answers/s), refusals (the generator's OVERLOADED
//! and TIMEOUT answers, and the server's `cohort_requests_refused_total` by reason over the
//! point), the answered requests' p99, the refusals' p99, requests never answered, and the
//! server's peak RSS. Then the goals: at every multiple over 1, goodput at least 90% of the
//! peak, answered p99 at most 3x the p99 at the first multiple under 1 (80% load), refusals
//! within 1 ms, every request answered. A point whose generator fell behind its schedule
//! describes the generator: it is marked, and its goals are not judged.

use super::served::{wait_listening, Pinned, TempDir};
use anyhow::{bail, Context as _, Result};
use clap::Args;
use cohort_load::Report;
use cohort_server::util::CpuList;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
pub struct OverloadBench {
    /// Transports: grpc, http, udp, tcp.
    #[arg(long, value_delimiter = ',', default_value = "grpc,http,udp")]
    pub transports: Vec<String>,
    /// The service (one the generator drives over every transport named: echo, lenet).
    #[arg(long, default_value = "echo")]
    pub service: String,
    /// The server's engine.
    #[arg(long, default_value = "cpu")]
    pub engine: String,
    /// The server's cores, a list as `taskset` takes (0-7 or 0,2,4) (it runs one io thread
    /// per core unless --serve-arg says otherwise).
    #[arg(long, default_value = "0", value_parser = cohort_server::util::parse_cpu_list)]
    pub server_cpus: CpuList,
    /// The generator's cores, the same way.
    #[arg(long, default_value = "1", value_parser = cohort_server::util::parse_cpu_list)]
    pub load_cpus: CpuList,
    /// Generator connections (sockets) per run; HTTP/1.1 has one request in flight on each,
    /// so HTTP gets at least --capacity-concurrency, and 2 x that x the multiple past it.
    #[arg(long, default_value_t = 4)]
    pub connections: usize,
    /// Requests in flight for the capacity run (closed loop).
    #[arg(long, default_value_t = 64)]
    pub capacity_concurrency: usize,
    /// Offered rates as multiples of the capacity.
    #[arg(long, value_delimiter = ',', default_value = "0.8,1.5,2,4")]
    pub multiples: Vec<f64>,
    /// Seconds measured per point, and the unmeasured warm-up before each.
    #[arg(long, default_value_t = 5.0)]
    pub duration: f64,
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// Deadline each request carries, microseconds (0: the server's default).
    #[arg(long, default_value_t = 0)]
    pub timeout_us: u64,
    /// Another serve flag, e.g. --serve-arg=--max-queue=256 (repeatable).
    #[arg(long, allow_hyphen_values = true)]
    pub serve_arg: Vec<String>,
    /// First port on 127.0.0.1 (the transport's, then the admin listener's).
    #[arg(long, default_value_t = 7400)]
    pub port: u16,
    /// Goals: goodput share of the peak, answered p99 over the 80%-load p99, refusal p99.
    #[arg(long, default_value_t = 0.9)]
    pub goal_goodput: f64,
    #[arg(long, default_value_t = 3.0)]
    pub goal_p99_factor: f64,
    #[arg(long, default_value_t = 1000.0)]
    pub goal_refusal_p99_us: f64,
    #[arg(long, default_value = "lab/results/overload.json")]
    pub out: PathBuf,
}

pub fn run(a: &OverloadBench) -> Result<()> {
    let exe = crate::product_binary()?;
    let tmp = TempDir::new()?;
    let mut results = Vec::new();
    for (i, t) in a.transports.iter().enumerate() {
        results.push(transport(a, &exe, tmp.path(), t, a.port + 2 * i as u16)?);
    }
    super::write_result(&a.out, Value::Array(results))
}

fn transport(a: &OverloadBench, exe: &Path, tmp: &Path, t: &str, port: u16) -> Result<Value> {
    if !matches!(t, "grpc" | "http" | "udp" | "tcp") {
        bail!("unknown transport {t:?} (grpc, http, udp, tcp)");
    }
    let admin = port + 1;
    let mut flags: Vec<String> = vec![
        "serve".into(),
        format!("--{t}"),
        format!("127.0.0.1:{port}"),
        "--admin".into(),
        format!("127.0.0.1:{admin}"),
        "--service".into(),
        format!("{}:{}", a.service, a.engine),
        "--log-level".into(),
        "warn".into(),
    ];
    flags.extend(a.serve_arg.iter().cloned());
    let log = tmp.join(format!("serve-{t}.log"));
    eprintln!("== {t}: {}", flags.join(" "));
    let mut server = Pinned::spawn(exe, &flags, &a.server_cpus.0, &log)?;
    wait_listening(&mut server, &log, Duration::from_secs(120))?;
    let pid = server.0.id();
    let target = format!("{t}://127.0.0.1:{port}");
    let conns = match t {
        "http" => a.connections.max(a.capacity_concurrency),
        _ => a.connections,
    };
    let (capacity, _) = load(a, exe, tmp, &target, conns, Load::Closed, pid)?;
    let cap = capacity.achieved_rate;
    eprintln!("{t}: capacity {cap:.0}/s ({})", capacity.table_row());
    if cap <= 0.0 {
        bail!("{t}: nothing answered in the capacity run");
    }
    let mut points = Vec::new();
    for &m in &a.multiples {
        let before = refused_by_reason(admin);
        // HTTP/1.1 holds one request a connection: past capacity the generator's own pool
        // would queue the excess (flagged gen_sat) and the server never see it. Twice the
        // capacity run's concurrency times the multiple puts the excess on the server.
        let point_conns = match t {
            "http" => conns.max((a.capacity_concurrency as f64 * 2.0 * m).ceil() as usize),
            _ => conns,
        };
        let (r, rss) = load(a, exe, tmp, &target, point_conns, Load::Open(m * cap), pid)?;
        let after = refused_by_reason(admin);
        let server_refused: BTreeMap<String, f64> = after
            .iter()
            .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
            .filter(|(_, v)| *v > 0.0)
            .collect();
        let refused: u64 = r
            .errors
            .iter()
            .filter(|(k, _)| matches!(k.as_str(), "OVERLOADED" | "TIMEOUT"))
            .map(|(_, v)| v)
            .sum();
        eprintln!(
            "{t} x{m}: {}  refused {refused}, refusal p99 {:.0} us, peak RSS {:.1} MiB",
            r.table_row(),
            r.latency_refused_us.as_ref().map_or(0.0, |l| l.p99),
            rss as f64 / 1048576.0
        );
        points.push(json!({
            "multiple": m, "connections": point_conns, "offered": r.offered_rate, "goodput": r.achieved_rate,
            "sent": r.sent, "answered_ok": r.ok, "refused": refused,
            "no_answer": r.errors.get("no_answer").copied().unwrap_or(0),
            "other_errors": r.error_total() - refused - r.errors.get("no_answer").copied().unwrap_or(0),
            "answered_p99_us": r.latency_us.p99,
            "refusal_p99_us": r.latency_refused_us.as_ref().map(|l| l.p99),
            "server_refused_by_reason": server_refused,
            "peak_rss_bytes": rss,
            "generator_saturated": r.generator_saturated,
            "report": r,
        }));
    }
    let hwm = vm_kb(pid, "VmHWM:").map(|k| k * 1024);
    server.stop()?;
    let goals = goals(a, cap, &points);
    eprintln!("{t}: goals {}", serde_json::to_string(&goals)?);
    Ok(json!({
        "transport": t, "service": a.service, "engine": a.engine,
        "server_cpus": a.server_cpus.0, "load_cpus": a.load_cpus.0, "connections": conns,
        "serve": flags, "timeout_us": a.timeout_us,
        "capacity": { "concurrency": a.capacity_concurrency, "rate": cap,
                      "p99_us": capacity.latency_us.p99, "report": capacity },
        "points": points, "server_peak_rss_bytes": hwm, "goals": goals,
    }))
}

/// The goals of issue 84 at each multiple over 1, judged against the peak goodput (the
/// capacity run's or any point's) and the p99 of the highest multiple under 1.
fn goals(a: &OverloadBench, cap: f64, points: &[Value]) -> Value {
    let f = |p: &Value, k: &str| p[k].as_f64().unwrap_or(0.0);
    let peak = points.iter().map(|p| f(p, "goodput")).fold(cap, f64::max);
    let base = points
        .iter()
        .filter(|p| f(p, "multiple") < 1.0)
        .max_by(|x, y| f(x, "multiple").total_cmp(&f(y, "multiple")))
        .map(|p| f(p, "answered_p99_us"));
    let judged: Vec<Value> = points
        .iter()
        .filter(|p| f(p, "multiple") > 1.0)
        .map(|p| {
            let goodput = f(p, "goodput") >= a.goal_goodput * peak;
            let p99 = base.map(|b| f(p, "answered_p99_us") <= a.goal_p99_factor * b);
            let refusals = p["refusal_p99_us"]
                .as_f64()
                .is_none_or(|r| r <= a.goal_refusal_p99_us);
            let answered = p["no_answer"].as_u64() == Some(0);
            let saturated = p["generator_saturated"].as_bool() == Some(true);
            json!({
                "multiple": p["multiple"], "goodput_ok": goodput, "answered_p99_ok": p99,
                "refusals_within_bound": refusals, "every_request_answered": answered,
                "generator_saturated": saturated,
                "met": !saturated && goodput && p99 == Some(true) && refusals && answered,
            })
        })
        .collect();
    json!({
        "peak_goodput": peak, "p99_at_80_percent_us": base,
        "goodput_share": a.goal_goodput, "p99_factor": a.goal_p99_factor,
        "refusal_p99_us": a.goal_refusal_p99_us, "points": judged,
    })
}

enum Load {
    Closed,
    Open(f64),
}

/// One generator run pinned to `--load-cpus`; the server's RSS sampled meanwhile (its peak).
fn load(
    a: &OverloadBench,
    exe: &Path,
    tmp: &Path,
    target: &str,
    conns: usize,
    how: Load,
    server_pid: u32,
) -> Result<(Report, u64)> {
    let json_path = tmp.join("load.json");
    let _ = std::fs::remove_file(&json_path);
    let mut args: Vec<String> = vec![
        "load".into(),
        "--target".into(),
        target.into(),
        "--service".into(),
        a.service.clone(),
        "--log-level".into(),
        "error".into(),
        "--connections".into(),
        conns.to_string(),
        "--duration".into(),
        a.duration.to_string(),
        "--warmup".into(),
        a.warmup.to_string(),
        "--timeout-us".into(),
        a.timeout_us.to_string(),
        "--server-pid".into(),
        server_pid.to_string(),
        "--json".into(),
        json_path.display().to_string(),
    ];
    match how {
        Load::Closed => args.extend(["--concurrency".into(), a.capacity_concurrency.to_string()]),
        Load::Open(rate) => args.extend(["--poisson".into(), "--rate".into(), format!("{rate}")]),
    }
    let log = tmp.join("load.log");
    let mut gen = Pinned::spawn(exe, &args, &a.load_cpus.0, &log)?;
    let mut peak = 0u64;
    let status = loop {
        if let Some(st) = gen.0.try_wait()? {
            break st;
        }
        peak = peak.max(vm_kb(server_pid, "VmRSS:").unwrap_or(0) * 1024);
        std::thread::sleep(Duration::from_millis(50));
    };
    // A point whose every request was refused exits non-zero but wrote its measurement.
    let Ok(text) = std::fs::read_to_string(&json_path) else {
        bail!(
            "the load generator wrote no result ({status}): {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    };
    let mut report: Report = serde_json::from_str(&text).context("the generator's JSON")?;
    for k in ["machine", "commit", "command", "unix_time"] {
        report.extra.remove(k);
    }
    Ok((report, peak))
}

/// A `/proc/PID/status` line's kB.
fn vm_kb(pid: u32, key: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with(key))?;
    line[key.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// `cohort_requests_refused_total` from the admin listener, summed by reason (empty when it
/// cannot be read: the point then has no server-side counts).
fn refused_by_reason(admin: u16) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    let Some(text) = scrape(admin) else {
        return out;
    };
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("cohort_requests_refused_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.split_once("} ") else {
            continue;
        };
        let reason = labels
            .split(',')
            .find_map(|kv| kv.strip_prefix("reason="))
            .map(|r| r.trim_matches('"').to_string());
        if let (Some(r), Ok(v)) = (reason, value.trim().parse::<f64>()) {
            *out.entry(r).or_insert(0.0) += v;
        }
    }
    out
}

fn scrape(admin: u16) -> Option<String> {
    use std::io::{Read, Write};
    let deadline = Instant::now() + Duration::from_secs(5);
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], admin));
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(deadline - Instant::now())).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    Some(body)
}
