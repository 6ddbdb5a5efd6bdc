//! The engine harness a service's GPU checks run through: its requests sent through the real
//! GPU engines (gpu-direct, gpu-cohort, gpu-cohort with graphs, gpu-persistent) and the real
//! rings, one answer collected per request, each compared with the CPU function's. The
//! catalog's selftest runs every service's case through it; a service's own checks (knn's
//! fresh index, spin's watchdog) call it directly. Names no service.

use cohort_engine::wiring::DEFAULT_STRIDE;
use cohort_engine::{
    wire_in, Bell, DispatchPolicy, EngineSpec, Ingress, Metrics, Service, ServiceLabel,
};
use cohort_gpu::engine::{GpuBackend, GpuEngine, GpuEngineConfig, GpuUnit, Mode};
use cohort_gpu::persistent::{MappedMemory, PersistentBackend, PersistentConfig, PersistentEngine};
use cohort_mq::{Layout, RingMemory};
use cohort_proto::ErrorCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Makes a persistent backend (its slot stride beside it where one is asked for).
pub type MakePersistent<'a> = dyn Fn() -> Result<Arc<dyn PersistentBackend>, String> + 'a;

pub type Compare = fn(&[u8], &[u8]) -> Result<(), String>;

/// Answers must be byte-identical.
pub fn exact(g: &[u8], c: &[u8]) -> Result<(), String> {
    if g == c {
        Ok(())
    } else {
        Err(format!(
            "gpu answered {} bytes, cpu {} (or they differ)",
            g.len(),
            c.len()
        ))
    }
}

const MODES: [(Mode, bool); 3] = [
    (Mode::Direct, false),
    (Mode::Cohort, false),
    (Mode::Cohort, true),
];

pub type Answers = Vec<Result<Vec<u8>, cohort_proto::ErrorPayload>>;

/// The engine a check runs through.
#[derive(Clone)]
pub enum Engine {
    Batched(Arc<dyn GpuBackend>, Mode, bool),
    /// Several lanes, one per backend (several GPUs, or one GPU's several backends), all on
    /// one control thread (`--gpus-per-control-thread`).
    Shared(Vec<Arc<dyn GpuBackend>>, Mode),
    /// The backends (a lane each: several for a set whose stages span devices), the
    /// engine's settings and the request rings' slot stride.
    Persistent(Vec<Arc<dyn PersistentBackend>>, PersistentConfig, usize),
}

impl Engine {
    pub fn name(&self) -> &'static str {
        match self {
            Engine::Batched(_, m, _) | Engine::Shared(_, m) => m.engine_name(),
            Engine::Persistent(..) => "gpu-persistent",
        }
    }

    /// The engine as a check's line names it.
    pub fn label(&self) -> String {
        match self {
            Engine::Shared(b, m) => format!(
                "{} ({} lanes, one control thread)",
                m.engine_name(),
                b.len()
            ),
            _ => self.name().to_string(),
        }
    }

    /// Largest payload the engine carries: the batched backend's own limit, the persistent
    /// engine's slot (its rings cannot spill).
    fn row_limit(&self, batched: usize) -> usize {
        match self {
            Engine::Batched(..) | Engine::Shared(..) => batched,
            Engine::Persistent(_, _, stride) => Layout::with_stride(2, *stride).payload_capacity,
        }
    }
}

const RING_SLOTS: usize = 256;

/// What a run through an engine gave: answers in request order, the time from the first
/// request to the last answer, and the persistent engine's restarts.
pub struct Served {
    pub answers: Answers,
    pub took: Duration,
    pub restarts: u64,
}

/// Sends every payload through `engine` and collects one answer per request.
pub fn serve(
    engine: Engine,
    service: &Arc<dyn Service>,
    payloads: &[Vec<u8>],
) -> Result<Served, String> {
    serve_paced(engine, service, payloads, None)
}

/// As `serve`; with `pause` = (n, t), request n and later are sent only from t after the
/// first.
pub fn serve_paced(
    engine: Engine,
    service: &Arc<dyn Service>,
    payloads: &[Vec<u8>],
    pause: Option<(usize, Duration)>,
) -> Result<Served, String> {
    let label = ServiceLabel {
        name: service.name().into(),
        engine: engine.name().into(),
    };
    let metrics = Arc::new(Metrics::new([(service.id(), label)].into()));
    let lanes = match &engine {
        Engine::Persistent(b, ..) => b.len(),
        Engine::Shared(b, _) => b.len(),
        Engine::Batched(..) => 1,
    };
    let spec = EngineSpec {
        name: engine.name().into(),
        lanes,
        policy: DispatchPolicy::RoundRobin,
        services: vec![service.id()],
        slots: RING_SLOTS,
        // Every request must reach the device: the selftest compares each answer.
        admit_by_deadline: false,
        max_queued: None,
        stride: match &engine {
            Engine::Persistent(_, _, stride) => *stride,
            Engine::Batched(..) | Engine::Shared(..) => DEFAULT_STRIDE,
        },
    };
    // One ingress, or one per TX ring of the persistent engine, so that every answer path
    // it has (an egress thread per TX ring, each answering its own ingresses) is checked.
    let ingresses = match &engine {
        Engine::Persistent(_, cfg, _) => cfg.egress_threads.max(1),
        Engine::Batched(..) | Engine::Shared(..) => 1,
    };
    // The persistent engine's request rings are mapped memory its lanes' GPUs poll:
    // mapped[lane][ingress].
    let mut mapped: Vec<Vec<Option<MappedMemory>>> = match &engine {
        Engine::Persistent(backends, _, stride) => backends
            .iter()
            .map(|b| {
                (0..ingresses)
                    .map(|_| {
                        MappedMemory::zeroed(
                            &b.loaded().ctx,
                            Layout::with_stride(RING_SLOTS, *stride).bytes(),
                        )
                        .map(Some)
                        .map_err(|e| e.to_string())
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .collect::<Result<_, _>>()?,
        Engine::Batched(..) | Engine::Shared(..) => Vec::new(),
    };
    let mut w = wire_in(ingresses, &[spec], &mut |_, lane, ingress, _| {
        mapped
            .get_mut(lane)
            .and_then(|m| m.get_mut(ingress))
            .and_then(Option::take)
            .map(|m| Box::new(m) as Box<dyn RingMemory>)
    });
    let mut lane_ends = std::mem::take(&mut w.engines[0]);
    let batched = |mode, graphs| GpuEngineConfig {
        mode,
        max_cohort: 64,
        cohort_timeout: Duration::from_micros(300),
        keep_busy: 1,
        streams: 3,
        graphs,
        device: None,
    };
    let stop: Box<dyn FnOnce() -> Result<u64, String>> = match engine {
        Engine::Batched(backend, mode, graphs) => {
            let lane = lane_ends.pop().expect("one lane");
            let eng = GpuEngine::start(backend, lane, &batched(mode, graphs), metrics.clone())
                .map_err(|e| e.to_string())?;
            Box::new(move || {
                eng.shutdown();
                Ok(0)
            })
        }
        Engine::Shared(backends, mode) => {
            let units = backends
                .into_iter()
                .zip(lane_ends)
                .map(|(backend, lane)| GpuUnit {
                    backend,
                    lane,
                    cfg: batched(mode, false),
                })
                .collect();
            let eng = GpuEngine::start_shared(units, metrics.clone()).map_err(|e| e.to_string())?;
            Box::new(move || {
                eng.shutdown();
                Ok(0)
            })
        }
        Engine::Persistent(backends, cfg, _) => {
            let engines =
                PersistentEngine::start_all(backends.into_iter().zip(lane_ends).collect(), &cfg)
                    .map_err(|e| e.to_string())?;
            let profiled = cfg.profile > 0;
            Box::new(move || {
                let stats: Vec<_> = engines
                    .iter()
                    .flat_map(|e| e.stats.iter().cloned())
                    .collect();
                PersistentEngine::shutdown_all(engines);
                let mut r = 0;
                for st in stats {
                    r += st.restarts.load(std::sync::atomic::Ordering::Relaxed);
                    if profiled {
                        let p = st.profile.lock().expect("profile lock").take();
                        check_profile(p.as_ref())?;
                    }
                }
                Ok(r)
            })
        }
    };
    // Every ingress on this thread, woken by one bell; request i goes to ingress i % n.
    let bell = Bell::new();
    bell.bind_current();
    let mut ings: Vec<Ingress<usize>> = std::mem::take(&mut w.ingresses)
        .into_iter()
        .map(|ends| {
            ends.set_wake(bell.clone());
            Ingress::new(ends, 1 << 16, metrics.clone(), Duration::from_secs(30))
        })
        .collect();
    let mut got: Vec<Option<Result<Vec<u8>, cohort_proto::ErrorPayload>>> =
        vec![None; payloads.len()];
    let mut twice = 0;
    let started = Instant::now();
    let until = started + Duration::from_secs(60);
    let mut next = 0;
    let in_flight = |ings: &[Ingress<usize>]| ings.iter().map(Ingress::in_flight).sum::<usize>();
    while (next < payloads.len() || in_flight(&ings) > 0) && Instant::now() < until {
        while next < payloads.len() {
            if pause.is_some_and(|(at, t)| next == at && started.elapsed() < t) {
                break;
            }
            let ing = &mut ings[next % ingresses];
            match ing.submit(next, service.id(), next as u64, 0, &payloads[next]) {
                Ok(()) => next += 1,
                Err((_, e)) if e.code == ErrorCode::Overloaded => break,
                Err((i, e)) => {
                    got[i] = Some(Err(e));
                    next += 1;
                }
            }
        }
        let mut record = |i: usize, _: &cohort_engine::Meta, a: cohort_engine::Answer<'_>| {
            twice += got[i].is_some() as usize;
            got[i] = Some(a.map(|p| p.to_vec()));
        };
        let mut n = 0;
        for ing in &mut ings {
            n += ing.drain(usize::MAX, &mut record) + ing.reap_dead_lanes(&mut record);
        }
        if n == 0 {
            bell.sleep(Duration::from_millis(1), || {
                ings.iter().any(|i| i.ends.answers_waiting())
            });
        }
    }
    let took = started.elapsed();
    drop(ings);
    let restarts = stop()?;
    if twice > 0 {
        return Err(format!("{twice} requests were answered twice"));
    }
    let answers = got
        .into_iter()
        .enumerate()
        .map(|(i, a)| a.ok_or_else(|| format!("request {i} never answered")))
        .collect::<Result<_, _>>()?;
    Ok(Served {
        answers,
        took,
        restarts,
    })
}

/// Serves `payloads` through gpu-persistent lanes, one per backend (a set whose stages span
/// devices: knn's sharded index), requests spread over them round robin, `lanes_per_thread`
/// lanes on each egress thread; one answer per request, in request order.
pub fn serve_persistent_lanes(
    backends: Vec<Arc<dyn PersistentBackend>>,
    lanes_per_thread: usize,
    service: &Arc<dyn Service>,
    payloads: &[Vec<u8>],
) -> Result<Answers, String> {
    let cfg = PersistentConfig {
        slots: 64,
        lanes_per_thread,
        ..PersistentConfig::default()
    };
    let served = serve(
        Engine::Persistent(backends, cfg, DEFAULT_STRIDE),
        service,
        payloads,
    )?;
    if served.restarts > 0 {
        return Err(format!("{} restarts while serving", served.restarts));
    }
    Ok(served.answers)
}

/// Compares the answers of every engine `engines` makes with the CPU twin's, request by
/// request. A payload over `gpu_payload_limit` (the batched backend's own limit; usize::MAX:
/// none) may be refused TOO_LARGE where the CPU answers it.
pub fn check(
    what: &str,
    engines: &dyn Fn() -> Result<Vec<Engine>, String>,
    service: &Arc<dyn Service>,
    payloads: &[Vec<u8>],
    compare: Compare,
    gpu_payload_limit: usize,
) -> Result<Vec<String>, String> {
    let mut lines = Vec::new();
    for engine in engines()? {
        let graphs_used = match &engine {
            // gpu-direct always replays graphs where the backend allows them.
            Engine::Batched(b, mode, graphs) => (*graphs || *mode == Mode::Direct) && b.graphable(),
            Engine::Shared(..) | Engine::Persistent(..) => false,
        };
        let (name, limit) = (engine.label(), engine.row_limit(gpu_payload_limit));
        let got = serve(engine, service, payloads)?.answers;
        let mut errors = 0;
        for (i, (p, g)) in payloads.iter().zip(&got).enumerate() {
            let c = service.call_cpu(p);
            let fail =
                |m: String| format!("{what} on {name} (graphs {graphs_used}), request {i}: {m}");
            match (g, &c) {
                (Ok(g), Ok(c)) => compare(g, c).map_err(fail)?,
                (Err(g), Err(c)) if g.code == c.code => errors += 1,
                // Too large for the engine's slots, whatever the CPU thinks of its contents.
                (Err(g), _) if g.code == ErrorCode::TooLarge && p.len() > limit => errors += 1,
                (g, c) => return Err(fail(format!("gpu {g:?}, cpu {c:?}"))),
            }
        }
        lines.push(format!(
            "{what} on {name} (graphs {graphs_used}): {} requests ({errors} refused alike) match the CPU twin",
            payloads.len(),
        ));
    }
    Ok(lines)
}

/// The batched engines on fresh backends from `gpu`, then the persistent engine on one from
/// `persistent`.
pub fn all_engines(
    gpu: &dyn Fn() -> Result<Arc<dyn GpuBackend>, String>,
    persistent: Option<(&MakePersistent<'_>, usize)>,
) -> Result<Vec<Engine>, String> {
    let mut v = Vec::new();
    for (mode, graphs) in MODES {
        v.push(Engine::Batched(gpu()?, mode, graphs));
    }
    // Two lanes (two backends of the device) taking turns on one control thread.
    v.push(Engine::Shared(vec![gpu()?, gpu()?], Mode::Cohort));
    if let Some((persistent, stride)) = persistent {
        v.push(persistent_engine_with(persistent()?, stride));
    }
    Ok(v)
}

pub fn persistent_engine(backend: Arc<dyn PersistentBackend>) -> Engine {
    persistent_engine_with(backend, DEFAULT_STRIDE)
}

/// As `persistent_engine`, with request slots of `stride` bytes.
pub fn persistent_engine_with(backend: Arc<dyn PersistentBackend>, stride: usize) -> Engine {
    let cfg = PersistentConfig {
        slots: 64,
        // The correctness run also runs the profile's stamping (answers must not change)
        // and checks what it reports is coherent.
        profile: 256,
        // Three TX rings and egress threads (three ingresses): answers cross every ring
        // and reach ingresses mapped i / 3 on each.
        egress_threads: 3,
        ..PersistentConfig::default()
    };
    Engine::Persistent(vec![backend], cfg, stride)
}

/// A profile of a run that answered good requests: some requests joined, the GPU's share of
/// the round trip within it (the two clocks agree on durations), the SM clock plausible.
fn check_profile(p: Option<&cohort_gpu::persistent::profile::Profile>) -> Result<(), String> {
    let p = p.ok_or("profiled persistent run left no profile")?;
    let get = |n: &str| {
        p.intervals
            .iter()
            .find(|i| i.name == n)
            .map(|i| i.p50_us)
            .unwrap_or(f64::NAN)
    };
    let (rtt, gpu) = (get("ring_to_ring"), get("gpu_resident"));
    let mhz = p.ingress.sm_clock_mhz;
    let ok = p.requests > 0
        && gpu > 0.0
        && rtt >= gpu
        && (300.0..4000.0).contains(&mhz)
        && p.ingress.requests > 0;
    if !ok {
        return Err(format!(
            "incoherent persistent profile: {} requests, ring_to_ring p50 {rtt} us, gpu_resident p50 {gpu} us, SM clock {mhz} MHz",
            p.requests
        ));
    }
    Ok(())
}
