//! Running one load point (and sweeps of them).

use crate::config::{LoadConfig, Mode, Target};
use crate::recorder::{Recorder, Shared};
use crate::report::{Latency, Report};
use crate::tracker::Tracker;
use crate::workload::Workload;
use anyhow::Result;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
    let gpu_power = if cfg.gpu_energy {
        cohort_power::GpuPower::shared()
    } else {
        Err("not sampled (the load ran with --no-gpu-energy)".to_string())
    };
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
            Target::Grpc(a) => crate::transport::grpc::run(cfg, &sh, a),
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
    let read = (!rec.read_ns.is_empty()).then(|| {
        (
            rec.read_ns.value_at_quantile(0.99) as f64 / 1000.0,
            rec.read_ns.max() as f64 / 1000.0,
        )
    });
    let goaway = sh.goaway_seen.load(Ordering::Acquire);
    // Open loop: the generator is saturated when it sent late (p99 lag over 1 ms), read its
    // answers late (p99 over 1 ms after the kernel had them: its threads were held off their
    // cores, and the latencies are partly its own), or sent visibly fewer requests than the
    // schedule asked for.
    let read_late = read.is_some_and(|(p99, _)| p99 > crate::report::READ_LAG_BOUND_US);
    let generator_saturated = match offered {
        Some(r) => {
            !goaway
                && (lag_p99 > crate::report::SEND_LAG_BOUND_US
                    || read_late
                    || (rec.sent as f64) < 0.97 * r * secs)
        }
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
        latency_refused_us: (!rec.refused_ns.is_empty()).then(|| Latency::from_ns(&rec.refused_ns)),
        generator_saturated,
        send_lag_us_p99: lag_p99,
        send_lag_us_max: rec.lag_ns.max() as f64 / 1000.0,
        read_lag_us_p99: read.map(|r| r.0),
        read_lag_us_max: read.map(|r| r.1),
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
