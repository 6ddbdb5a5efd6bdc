//! Running one load point (and sweeps of them).

use crate::report::{Latency, Report};
use crate::schedule::Schedule;
use crate::tracker::{Claim, Tracker};
use crate::workload::Workload;
use anyhow::{bail, Context, Result};
use cohort_proto::{ErrorPayload, Kind};
use hdrhistogram::Histogram;
use std::collections::{BTreeMap, HashSet};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Udp(SocketAddr),
    Tcp(SocketAddr),
    Http(SocketAddr),
}

impl std::str::FromStr for Target {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Target> {
        let (scheme, rest) = s
            .split_once("://")
            .context("target must look like udp://HOST:PORT")?;
        let addr = rest
            .trim_end_matches('/')
            .to_socket_addrs()
            .with_context(|| format!("resolving {rest:?}"))?
            .next()
            .with_context(|| format!("{rest:?} resolves to no address"))?;
        match scheme {
            "udp" => Ok(Target::Udp(addr)),
            "tcp" => Ok(Target::Tcp(addr)),
            "http" => Ok(Target::Http(addr)),
            _ => bail!("unknown scheme {scheme:?} (udp, tcp, http)"),
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Udp(a) => write!(f, "udp://{a}"),
            Target::Tcp(a) => write!(f, "tcp://{a}"),
            Target::Http(a) => write!(f, "http://{a}"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Mode {
    Open { rate: f64, poisson: bool },
    Closed { concurrency: usize },
}

#[derive(Debug, Clone)]
pub struct LoadConfig {
    pub target: Target,
    pub mode: Mode,
    pub duration: Duration,
    pub warmup: Duration,
    /// Sockets / connections the load is spread over.
    pub connections: usize,
    /// How long to wait for an answer before counting it as `no_answer`.
    pub answer_timeout: Duration,
    /// Deadline put in each request header (0 = the server's default).
    pub request_timeout_us: u32,
    pub seed: u64,
    /// The server's process id, for its CPU time over the measured window (same host).
    pub server_pid: Option<u32>,
    /// An API key to sign frames with (UDP/TCP) and send as the bearer token (HTTP).
    pub key: Option<ClientKey>,
    /// TLS to the TCP and HTTP targets (`tls_client`).
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

/// A TLS client that trusts the certificates in `ca` (PEM), e.g. a server's self-signed one.
pub fn tls_client(ca: &std::path::Path) -> Result<Arc<rustls::ClientConfig>> {
    let pem = std::fs::read(ca).with_context(|| format!("reading {}", ca.display()))?;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pemfile::certs(&mut &pem[..]) {
        roots.add(c.with_context(|| format!("{}: not PEM", ca.display()))?)?;
    }
    anyhow::ensure!(!roots.is_empty(), "{}: no certificate", ca.display());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// An API key as the client holds it (`cohort load --key ID:SECRET`).
#[derive(Clone)]
pub struct ClientKey {
    pub id: [u8; cohort_proto::KEY_ID_LEN],
    pub secret: String,
}

impl std::fmt::Debug for ClientKey {
    /// The secret is never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let id = String::from_utf8_lossy(&self.id);
        write!(f, "ClientKey({}:***)", id.trim_end_matches('\0'))
    }
}

impl std::str::FromStr for ClientKey {
    type Err = String;
    fn from_str(s: &str) -> Result<ClientKey, String> {
        let (id, secret) = s
            .split_once(':')
            .ok_or_else(|| format!("{s:?}: expected ID:SECRET"))?;
        let id = cohort_proto::key_id_bytes(id)
            .ok_or_else(|| format!("key id {id:?}: 1-16 printable ASCII bytes"))?;
        Ok(ClientKey {
            id,
            secret: secret.to_string(),
        })
    }
}

impl LoadConfig {
    /// The settings the benchmarks and the demo share: 500 ms warm-up, 2 s answer timeout,
    /// the server's default deadline, seed 1.
    pub fn new(target: Target, mode: Mode, duration: Duration, connections: usize) -> LoadConfig {
        LoadConfig {
            target,
            mode,
            duration,
            warmup: Duration::from_millis(500),
            connections,
            answer_timeout: Duration::from_secs(2),
            request_timeout_us: 0,
            seed: 1,
            server_pid: None,
            key: None,
            tls: None,
        }
    }
}

/// State shared by the generator's threads during one run.
pub(crate) struct Shared {
    pub tracker: Tracker,
    pub workload: Arc<dyn Workload>,
    pub start: Instant,
    pub measure_from_ns: u64,
    pub end_ns: u64,
    pub connections: usize,
    pub answer_timeout: Duration,
    pub request_timeout_us: u32,
    pub key: Option<ClientKey>,
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// Added to each request's sequence number to make its signed frame's nonce (a run's
    /// nonces differ from the last run's).
    pub nonce_base: u64,
    /// Requests sent, and requests settled (answered, or given up as unanswered).
    pub sent: AtomicU64,
    pub settled: AtomicU64,
    pub stop: AtomicBool,
    /// Per connection: the ids a GOAWAY promised to answer, once one arrived.
    pub goaway: Vec<Mutex<Option<HashSet<u64>>>>,
    pub goaway_seen: AtomicBool,
}

impl Shared {
    pub fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }
    pub fn measured(&self, intended_ns: u64) -> bool {
        intended_ns >= self.measure_from_ns && intended_ns < self.end_ns
    }
    pub fn conn_has_goaway(&self, c: usize) -> bool {
        self.goaway_seen.load(Ordering::Acquire)
            && self.goaway[c].lock().expect("goaway lock").is_some()
    }
    pub fn record_goaway(&self, c: usize, pending: Vec<u64>) {
        *self.goaway[c].lock().expect("goaway lock") = Some(pending.into_iter().collect());
        self.goaway_seen.store(true, Ordering::Release);
    }
    /// Sleeps or spins until `t_ns`.
    pub fn wait_until(&self, t_ns: u64) {
        loop {
            let now = self.now_ns();
            if now >= t_ns {
                return;
            }
            let left = t_ns - now;
            if left > 200_000 {
                std::thread::sleep(Duration::from_nanos(left - 100_000));
            } else if left > 20_000 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

/// What one thread of the generator counted. Merged at the end.
pub(crate) struct Recorder {
    pub ok_ns: Histogram<u64>,
    pub all_ns: Histogram<u64>,
    pub lag_ns: Histogram<u64>,
    pub sent: u64,
    pub ok: u64,
    pub errors: BTreeMap<String, u64>,
    pub unexpected: u64,
    /// Page services: latency of every answer per request type, and the type's errors.
    pub per_type: BTreeMap<&'static str, (Histogram<u64>, u64)>,
}

pub(crate) enum Answer<'a> {
    Frame(Kind, &'a [u8]),
    /// HTTP: status and parsed JSON body.
    Json(u16, serde_json::Value),
    /// The transport failed for this request (e.g. connection closed).
    Failed(&'static str),
    /// A page service: the request's type and its checked outcome (an error's name).
    Page(&'static str, Result<(), String>),
}

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds")
}

impl Recorder {
    pub fn new() -> Recorder {
        Recorder {
            ok_ns: hist(),
            all_ns: hist(),
            lag_ns: hist(),
            sent: 0,
            ok: 0,
            errors: BTreeMap::new(),
            unexpected: 0,
            per_type: BTreeMap::new(),
        }
    }

    fn error(&mut self, name: &str) {
        *self.errors.entry(name.to_string()).or_insert(0) += 1;
    }

    /// Registers a request about to be sent at `intended_ns` (now = `now_ns`).
    pub fn on_send(&mut self, sh: &Shared, seq: u64, intended_ns: u64, now_ns: u64) {
        if let Some(evicted) = sh.tracker.start(seq, intended_ns) {
            sh.settled.fetch_add(1, Ordering::Relaxed);
            if sh.measured(evicted) {
                self.error("no_answer");
            }
        }
        sh.sent.fetch_add(1, Ordering::Relaxed);
        if sh.measured(intended_ns) {
            self.sent += 1;
            self.lag_ns
                .saturating_record(now_ns.saturating_sub(intended_ns).max(1));
        }
    }

    /// Gives up on an outstanding request (answer timeout); counts it as no_answer.
    pub fn give_up(&mut self, sh: &Shared, seq: u64) {
        if let Claim::Outstanding(intended) = sh.tracker.finish(seq) {
            sh.settled.fetch_add(1, Ordering::Relaxed);
            if sh.measured(intended) {
                self.error("no_answer");
            }
        }
    }

    pub fn on_answer(&mut self, sh: &Shared, seq: u64, answer: Answer<'_>) {
        let intended = match sh.tracker.finish(seq) {
            Claim::Outstanding(t) => t,
            Claim::Unknown => {
                self.unexpected += 1;
                return;
            }
        };
        let now = sh.now_ns();
        sh.settled.fetch_add(1, Ordering::Relaxed);
        let w = &sh.workload;
        let mut page_type = None;
        let outcome: Result<(), String> = match answer {
            Answer::Page(kind, outcome) => {
                page_type = Some(kind);
                outcome
            }
            Answer::Frame(Kind::Response, p) if w.check(seq, p) => Ok(()),
            Answer::Frame(Kind::Response, _) => Err("wrong_answer".into()),
            Answer::Frame(Kind::Error, p) => Err(ErrorPayload::decode(p)
                .map(|e| e.code.name().to_string())
                .unwrap_or_else(|_| "malformed_error".into())),
            Answer::Frame(_, _) => Err("unexpected_frame".into()),
            Answer::Json(200, v) if w.check_json(seq, &v) => Ok(()),
            Answer::Json(200, _) => Err("wrong_answer".into()),
            Answer::Json(status, v) => Err(v
                .get("error")
                .and_then(|e| e.as_str())
                .map(str::to_string)
                .unwrap_or_else(|| format!("http_{status}"))),
            Answer::Failed(why) => Err(why.into()),
        };
        if !sh.measured(intended) {
            return;
        }
        let lat = now.saturating_sub(intended).max(1);
        self.all_ns.saturating_record(lat);
        if let Some(kind) = page_type {
            let (h, errors) = self.per_type.entry(kind).or_insert_with(|| (hist(), 0));
            h.saturating_record(lat);
            *errors += outcome.is_err() as u64;
        }
        match outcome {
            Ok(()) => {
                self.ok += 1;
                self.ok_ns.saturating_record(lat);
            }
            Err(name) => self.error(&name),
        }
    }

    pub fn merge(&mut self, o: Recorder) {
        self.ok_ns.add(&o.ok_ns).expect("same bounds");
        self.all_ns.add(&o.all_ns).expect("same bounds");
        self.lag_ns.add(&o.lag_ns).expect("same bounds");
        self.sent += o.sent;
        self.ok += o.ok;
        self.unexpected += o.unexpected;
        for (k, v) in o.errors {
            *self.errors.entry(k).or_insert(0) += v;
        }
        for (k, (h, e)) in o.per_type {
            let (mine, errors) = self.per_type.entry(k).or_insert_with(|| (hist(), 0));
            mine.add(&h).expect("same bounds");
            *errors += e;
        }
    }
}

/// Sequence numbers of connection `c`: c, c + n, c + 2n, ... so that `seq % n` names the
/// connection a request went out on.
pub(crate) fn seq_of(c: usize, k: u64, connections: usize) -> u64 {
    c as u64 + k * connections as u64
}

/// The open-loop schedule of connection `c`: its share of the rate.
pub(crate) fn schedule_for(cfg: &LoadConfig, c: usize) -> Option<Schedule> {
    match cfg.mode {
        Mode::Open { rate, poisson } => {
            let share = rate / cfg.connections as f64;
            // Stagger connections so constant-rate sends interleave instead of colliding.
            let offset = (1e9 / rate * c as f64) as u64;
            Some(Schedule::new(
                share,
                poisson,
                cfg.seed ^ (c as u64 * 0x9E37),
                offset,
            ))
        }
        Mode::Closed { .. } => None,
    }
}

pub fn run(cfg: &LoadConfig, workload: Arc<dyn Workload>) -> Result<Report> {
    // A closed loop cannot keep fewer requests outstanding than it has connections.
    let mut cfg = cfg.clone();
    if let Mode::Closed { concurrency } = cfg.mode {
        cfg.connections = cfg.connections.min(concurrency.max(1));
    }
    let cfg = &cfg;
    anyhow::ensure!(cfg.connections >= 1, "--connections must be at least 1");
    anyhow::ensure!(!cfg.duration.is_zero(), "--duration must be positive");
    let window = match cfg.mode {
        Mode::Open { rate, .. } => {
            anyhow::ensure!(rate > 0.0 && rate.is_finite(), "--rate must be positive");
            (rate * cfg.answer_timeout.as_secs_f64() * 2.0) as usize
        }
        Mode::Closed { concurrency } => {
            anyhow::ensure!(concurrency >= 1, "--concurrency must be at least 1");
            concurrency * 4
        }
    };
    if workload.pages().is_some() {
        anyhow::ensure!(
            matches!(cfg.target, Target::Http(_)),
            "{} is served as web pages: give an http:// target",
            workload.service_name()
        );
    }
    workload.reset();
    let warm_ns = cfg.warmup.as_nanos() as u64;
    let sh = Arc::new(Shared {
        tracker: Tracker::new(window.clamp(1 << 16, 1 << 23)),
        workload: workload.clone(),
        start: Instant::now() + Duration::from_millis(20),
        measure_from_ns: warm_ns,
        end_ns: warm_ns + cfg.duration.as_nanos() as u64,
        connections: cfg.connections,
        answer_timeout: cfg.answer_timeout,
        request_timeout_us: cfg.request_timeout_us,
        key: cfg.key.clone(),
        tls: cfg.tls.clone(),
        nonce_base: rand::random(),
        sent: AtomicU64::new(0),
        settled: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        goaway: (0..cfg.connections).map(|_| Mutex::new(None)).collect(),
        goaway_seen: AtomicBool::new(false),
    });
    // Energy over exactly the measured window, on a thread of its own (GPU board power
    // through NVML where there is a driver, RAPL where readable; the report says what's absent).
    let gpu_power = cohort_power::GpuPower::shared();
    let (rec, energy) = std::thread::scope(|sc| {
        let meter = sc.spawn(|| {
            sh.wait_until(sh.measure_from_ns);
            let m = cohort_power::Meter::start_with(gpu_power);
            let cpu = crate::cpu_time::Sample::take(cfg.server_pid);
            sh.wait_until(sh.end_ns);
            (
                m.finish(),
                cpu,
                crate::cpu_time::Sample::take(cfg.server_pid),
            )
        });
        let rec = match cfg.target {
            Target::Udp(_) | Target::Tcp(_) => crate::transport::frames::run(cfg, &sh),
            Target::Http(a) => match workload.pages() {
                Some(p) => crate::transport::pages::run(cfg, &sh, a, p),
                None => crate::transport::http::run(cfg, &sh, a),
            },
        };
        (rec, meter.join().expect("energy meter thread"))
    });
    let mut rec = rec?;
    // Whatever is still outstanding never got an answer (or was cut off by GOAWAY).
    for (seq, intended) in sh.tracker.outstanding() {
        if !sh.measured(intended) {
            continue;
        }
        let c = (seq % cfg.connections as u64) as usize;
        let promised = sh.goaway[c]
            .lock()
            .expect("goaway lock")
            .as_ref()
            .map(|p| p.contains(&seq));
        let name = match promised {
            Some(false) => "GOAWAY",
            _ => "no_answer",
        };
        *rec.errors.entry(name.into()).or_insert(0) += 1;
    }
    let (energy, cpu_start, cpu_end) = energy;
    let mut r = report(cfg, &sh, rec, workload.as_ref());
    r.energy = Some(energy.to_json(r.ok as f64));
    r.extra.insert(
        "cpu".into(),
        cpu_end.since(&cpu_start, r.ok as f64, cfg.server_pid),
    );
    Ok(r)
}

fn report(cfg: &LoadConfig, sh: &Shared, rec: Recorder, w: &dyn Workload) -> Report {
    let secs = cfg.duration.as_secs_f64();
    let (mode, offered, conc) = match cfg.mode {
        Mode::Open { rate, poisson } => (
            if poisson {
                "open-poisson"
            } else {
                "open-constant"
            },
            Some(rate),
            None,
        ),
        Mode::Closed { concurrency } => ("closed", None, Some(concurrency)),
    };
    let lag_p99 = rec.lag_ns.value_at_quantile(0.99) as f64 / 1000.0;
    let goaway = sh.goaway_seen.load(Ordering::Acquire);
    // Open loop: the generator is saturated when it sent late (p99 lag over 1 ms) or sent
    // visibly fewer requests than the schedule asked for.
    let generator_saturated = match offered {
        Some(r) => !goaway && (lag_p99 > 1000.0 || (rec.sent as f64) < 0.97 * r * secs),
        None => false,
    };
    // The workload's word on wrong answers, only in a report that has some.
    let wrong_answers = rec.errors.contains_key("wrong_answer");
    Report {
        target: cfg.target.to_string(),
        service: w.service_name().into(),
        mode: mode.into(),
        offered_rate: offered,
        concurrency: conc,
        connections: cfg.connections,
        duration_s: secs,
        warmup_s: cfg.warmup.as_secs_f64(),
        sent: rec.sent,
        ok: rec.ok,
        achieved_rate: rec.ok as f64 / secs,
        latency_us: Latency::from_ns(&rec.ok_ns),
        latency_all_us: Latency::from_ns(&rec.all_ns),
        generator_saturated,
        send_lag_us_p99: lag_p99,
        send_lag_us_max: rec.lag_ns.max() as f64 / 1000.0,
        unexpected_answers: rec.unexpected,
        goaway,
        errors: rec.errors,
        energy: None,
        per_type: rec
            .per_type
            .iter()
            .map(|(k, (h, errors))| {
                (
                    k.to_string(),
                    crate::report::TypeLatency {
                        answers: h.len(),
                        errors: *errors,
                        latency_us: Latency::from_ns(h),
                    },
                )
            })
            .collect(),
        extra: {
            let mut extra = w.extra();
            if let Some(hint) = w.wrong_answer_hint().filter(|_| wrong_answers) {
                extra.insert(crate::report::WRONG_ANSWER_HINT.into(), hint.into());
            }
            extra
        },
    }
}

/// Runs one open-loop point per rate, in order.
pub fn run_sweep(cfg: &LoadConfig, rates: &[f64], w: Arc<dyn Workload>) -> Result<Vec<Report>> {
    let poisson = matches!(cfg.mode, Mode::Open { poisson: true, .. });
    rates
        .iter()
        .map(|&rate| {
            let c = LoadConfig {
                mode: Mode::Open { rate, poisson },
                ..cfg.clone()
            };
            run(&c, w.clone())
        })
        .collect()
}
