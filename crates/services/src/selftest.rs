//! Every service's GPU backend against its CPU twin, through the real GPU engines (gpu-direct,
//! gpu-cohort, gpu-cohort with graphs, gpu-persistent) and the real rings, on fresh random
//! requests (bad ones included); and the persistent engine's watchdog, provoked. Run by
//! `cohort selftest gpu` (the GPU machine has no cargo) and the test suite.

use crate::catalog;
use crate::config::Settings;
use crate::knn::gpu::KnnGpu;
use crate::knn::gpu_ivf::{GpuIvf, Precision};
use crate::knn::persistent::{KnnPersistent, PersistentPlan};
use crate::knn::selftest::same_neighbors;
use crate::knn::{decode_response, encode_request, Elems, Knn};
use crate::micro::gpu::MAX_ROW_BYTES;
use cohort_engine::wiring::DEFAULT_STRIDE;
use cohort_engine::{
    wire_in, Bell, DispatchPolicy, EngineSpec, Ingress, Metrics, Service, ServiceLabel,
};
use cohort_gpu::engine::{GpuBackend, GpuEngine, GpuEngineConfig, Mode};
use cohort_gpu::persistent::{
    stage_capacity, MappedMemory, PersistentBackend, PersistentConfig, PersistentEngine,
};
use cohort_gpu::{probe, DeviceInfo};
use cohort_knn::kmeans::KMeansConfig;
use cohort_knn::synth::{Model, SynthConfig};
use cohort_knn::{IvfIndex, Metric};
use cohort_mq::{Layout, RingMemory};
use cohort_proto::ErrorCode;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Makes a persistent backend (its slot stride beside it where one is asked for).
type MakePersistent<'a> = dyn Fn() -> Result<Arc<dyn PersistentBackend>, String> + 'a;

type Compare = fn(&[u8], &[u8]) -> Result<(), String>;
type PersistentBuild = fn(&Settings, &DeviceInfo) -> Result<Arc<dyn PersistentBackend>, String>;

fn exact(g: &[u8], c: &[u8]) -> Result<(), String> {
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

fn neighbours(g: &[u8], c: &[u8]) -> Result<(), String> {
    same_neighbors(&decode_response(g)?, &decode_response(c)?)
}

const MODES: [(Mode, bool); 3] = [
    (Mode::Direct, false),
    (Mode::Cohort, false),
    (Mode::Cohort, true),
];

type Answers = Vec<Result<Vec<u8>, cohort_proto::ErrorPayload>>;

/// The engine a check runs through.
#[derive(Clone)]
enum Engine {
    Batched(Arc<dyn GpuBackend>, Mode, bool),
    /// The backends (a lane each: several for a set whose stages span devices), the
    /// engine's settings and the request rings' slot stride.
    Persistent(Vec<Arc<dyn PersistentBackend>>, PersistentConfig, usize),
}

impl Engine {
    fn name(&self) -> &'static str {
        match self {
            Engine::Batched(_, m, _) => m.engine_name(),
            Engine::Persistent(..) => "gpu-persistent",
        }
    }

    /// Largest payload the engine carries (the persistent engine's rings cannot spill).
    fn row_limit(&self) -> usize {
        match self {
            Engine::Batched(..) => MAX_ROW_BYTES,
            Engine::Persistent(_, _, stride) => Layout::with_stride(2, *stride).payload_capacity,
        }
    }
}

const RING_SLOTS: usize = 256;

/// What a run through an engine gave: answers in request order, the time from the first
/// request to the last answer, and the persistent engine's restarts.
struct Served {
    answers: Answers,
    took: Duration,
    restarts: u64,
}

/// Sends every payload through `engine` and collects one answer per request.
fn serve(
    engine: Engine,
    service: &Arc<dyn Service>,
    payloads: &[Vec<u8>],
) -> Result<Served, String> {
    serve_paced(engine, service, payloads, None)
}

/// As `serve`; with `pause` = (n, t), request n and later are sent only from t after the
/// first.
fn serve_paced(
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
            Engine::Batched(..) => DEFAULT_STRIDE,
        },
    };
    // The persistent engine's request rings are mapped memory its lanes' GPUs poll.
    let mut mapped: Vec<Option<MappedMemory>> = match &engine {
        Engine::Persistent(backends, _, stride) => backends
            .iter()
            .map(|b| {
                MappedMemory::zeroed(
                    b.context(),
                    Layout::with_stride(RING_SLOTS, *stride).bytes(),
                )
                .map(Some)
                .map_err(|e| e.to_string())
            })
            .collect::<Result<_, _>>()?,
        Engine::Batched(..) => Vec::new(),
    };
    let mut w = wire_in(1, &[spec], &mut |_, lane, _, _| {
        mapped
            .get_mut(lane)
            .and_then(Option::take)
            .map(|m| Box::new(m) as Box<dyn RingMemory>)
    });
    let mut lane_ends = std::mem::take(&mut w.engines[0]);
    let stop: Box<dyn FnOnce() -> Result<u64, String>> = match engine {
        Engine::Batched(backend, mode, graphs) => {
            let lane = lane_ends.pop().expect("one lane");
            let cfg = GpuEngineConfig {
                mode,
                max_cohort: 64,
                cohort_timeout: Duration::from_micros(300),
                keep_busy: 1,
                streams: 3,
                graphs,
                device: None,
            };
            let eng = GpuEngine::start(backend, lane, &cfg, metrics.clone())
                .map_err(|e| e.to_string())?;
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
                let stats: Vec<_> = engines.iter().map(|e| e.stats.clone()).collect();
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
    let ends = w.ingresses.pop().expect("one ingress");
    let bell = Bell::new();
    bell.bind_current();
    ends.set_wake(bell.clone());
    let mut ing: Ingress<usize> = Ingress::new(ends, 1 << 16, metrics, Duration::from_secs(30));
    let mut got: Vec<Option<Result<Vec<u8>, cohort_proto::ErrorPayload>>> =
        vec![None; payloads.len()];
    let mut twice = 0;
    let started = Instant::now();
    let until = started + Duration::from_secs(60);
    let mut next = 0;
    while (next < payloads.len() || ing.in_flight() > 0) && Instant::now() < until {
        while next < payloads.len() {
            if pause.is_some_and(|(at, t)| next == at && started.elapsed() < t) {
                break;
            }
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
        let n = ing.drain(usize::MAX, &mut record) + ing.reap_dead_lanes(&mut record);
        if n == 0 {
            bell.sleep(Duration::from_millis(1), || ing.ends.answers_waiting());
        }
    }
    let took = started.elapsed();
    drop(ing);
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
/// devices: knn's sharded index), requests spread over them round robin; one answer per
/// request, in request order.
pub(crate) fn serve_persistent_lanes(
    backends: Vec<Arc<dyn PersistentBackend>>,
    service: &Arc<dyn Service>,
    payloads: &[Vec<u8>],
) -> Result<Answers, String> {
    let cfg = PersistentConfig {
        slots: 64,
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
/// request.
fn check(
    what: &str,
    engines: &dyn Fn() -> Result<Vec<Engine>, String>,
    service: &Arc<dyn Service>,
    payloads: &[Vec<u8>],
    compare: Compare,
) -> Result<Vec<String>, String> {
    let mut lines = Vec::new();
    for engine in engines()? {
        let graphs_used = match &engine {
            // gpu-direct always replays graphs where the backend allows them.
            Engine::Batched(b, mode, graphs) => (*graphs || *mode == Mode::Direct) && b.graphable(),
            Engine::Persistent(..) => false,
        };
        let (name, limit) = (engine.name(), engine.row_limit());
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
fn all_engines(
    gpu: &dyn Fn() -> Result<Arc<dyn GpuBackend>, String>,
    persistent: Option<(&MakePersistent<'_>, usize)>,
) -> Result<Vec<Engine>, String> {
    let mut v = Vec::new();
    for (mode, graphs) in MODES {
        v.push(Engine::Batched(gpu()?, mode, graphs));
    }
    if let Some((persistent, stride)) = persistent {
        v.push(persistent_engine_with(persistent()?, stride));
    }
    Ok(v)
}

fn persistent_engine(backend: Arc<dyn PersistentBackend>) -> Engine {
    persistent_engine_with(backend, DEFAULT_STRIDE)
}

/// As `persistent_engine`, with request slots of `stride` bytes.
fn persistent_engine_with(backend: Arc<dyn PersistentBackend>, stride: usize) -> Engine {
    let cfg = PersistentConfig {
        slots: 64,
        // The correctness run also runs the profile's stamping (answers must not change)
        // and checks what it reports is coherent.
        profile: 256,
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

fn micro_payloads(rng: &mut SmallRng, spin: bool) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = (0..400)
        .map(|_| {
            let len = rng.gen_range(0..=MAX_ROW_BYTES);
            let mut p: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            if spin {
                let us: u32 = rng.gen_range(0..40);
                p = crate::spin::encode(us, &p[..len.saturating_sub(4)]);
            }
            p
        })
        .collect();
    // Refused alike (or only by the GPU's row limit): oversized, and spin's bad requests.
    v.push(vec![7; MAX_ROW_BYTES + 1]);
    if spin {
        v.push(vec![1, 2]);
        v.push(crate::spin::encode(crate::spin::MAX_SPIN_US + 1, b""));
    }
    v
}

fn knn_payloads(rng: &mut SmallRng, model: &Model, dim: usize, nlist: usize) -> Vec<Vec<u8>> {
    let q = model.sample(300, rng.gen());
    let mut v: Vec<Vec<u8>> = (0..q.n)
        .map(|i| {
            let k = [1u16, 10, 32, 90][i % 4];
            let nprobe = [0u16, 4, nlist as u16][i % 3];
            let mut p = Vec::new();
            encode_request(k, nprobe, Elems::F32(q.row(i)), &mut p);
            p
        })
        .collect();
    let mut bad = Vec::new();
    encode_request(10, 0, Elems::F32(&vec![1.0; dim + 1]), &mut bad);
    v.push(bad);
    let mut huge = Vec::new();
    encode_request(10, 0, Elems::F32(&vec![1e30; dim]), &mut huge);
    v.push(huge);
    v
}

/// Every service that brings its own selftest case (those whose name contains `only`, where
/// given), through every engine it has a backend for, then its persistent variants.
pub fn run_cases(
    dev: &DeviceInfo,
    seed: u64,
    with_persistent: bool,
    only: Option<&str>,
) -> Result<Vec<String>, String> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut lines = Vec::new();
    for (e, case) in catalog::selftest_cases() {
        if only.is_some_and(|o| !e.name.contains(o)) {
            continue;
        }
        // Its own settings where it needs them (facever: a memcached started and filled),
        // held while its engines run.
        let (opts, _held) = match case.setup {
            None => (Settings::new(), None),
            Some(setup) => match setup()? {
                Some((s, held)) => (s, Some(held)),
                None => {
                    lines.push(format!("SKIPPED {}: its setup cannot run here", e.name));
                    continue;
                }
            },
        };
        let service = (e.build)(&opts, true)?;
        let Some(gpu) = e.gpu else { continue };
        let payloads = (case.payloads)(rng.gen());
        let persistent_of = e.persistent.filter(|_| with_persistent);
        let persistent = |p: &PersistentBuild| p(&opts, dev);
        let stride = EngineSpec::stride_for(e.persistent_request_bytes);
        lines.extend(check(
            e.name,
            &|| match &persistent_of {
                Some(p) => all_engines(&|| gpu(&opts, dev), Some((&|| persistent(p), stride))),
                None => all_engines(&|| gpu(&opts, dev), None),
            },
            &service,
            &payloads,
            case.compare,
        )?);
        let Some(p) = persistent_of else { continue };
        for variant in case.persistent_variants {
            let mut o = opts.clone();
            o.extend(crate::config::settings(variant));
            let what = variant.iter().map(|(k, v)| format!("{k}={v}"));
            lines.extend(check(
                &format!("{} ({})", e.name, what.collect::<Vec<_>>().join(", ")),
                &|| Ok(vec![persistent_engine_with(p(&o, dev)?, stride)]),
                &service,
                &payloads,
                case.compare,
            )?);
        }
    }
    Ok(lines)
}

/// Every GPU backend against its CPU twin on device 0 (`persistent`: the persistent engine
/// too, and its watchdog).
pub fn run(seed: u64, with_persistent: bool) -> Result<Vec<String>, String> {
    let devs = probe().map_err(|e| e.to_string())?;
    let dev: &DeviceInfo = &devs[0];
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut lines = Vec::new();
    let opts = Settings::new();
    for name in ["echo", "spin"] {
        let e = catalog::entry(name).expect("in the catalog");
        let service = (e.build)(&opts, true)?;
        let gpu = e.gpu.expect("has a GPU backend");
        let persistent_of = e.persistent.expect("has a persistent backend");
        let persistent = |o: &Settings, d: &DeviceInfo| persistent_of(o, d);
        let payloads = micro_payloads(&mut rng, name == "spin");
        lines.extend(check(
            name,
            &|| {
                all_engines(
                    &|| gpu(&opts, dev),
                    with_persistent.then_some((&|| persistent(&opts, dev), DEFAULT_STRIDE)),
                )
            },
            &service,
            &payloads,
            exact,
        )?);
    }
    // Spin really holds the GPU: a 3 ms spin is answered after at least 3 ms.
    let e = catalog::entry("spin").expect("in the catalog");
    let service = (e.build)(&opts, true)?;
    let backend = (e.gpu.expect("gpu"))(&opts, dev)?;
    let spin3 = [crate::spin::encode(3000, b"x")];
    let s = serve(
        Engine::Batched(backend, Mode::Direct, false),
        &service,
        &spin3,
    )?;
    if s.answers[0].is_err() || s.took < Duration::from_millis(3) {
        return Err(format!(
            "spin 3000 us on the GPU answered {:?} after {:?}",
            s.answers[0], s.took
        ));
    }
    lines.push(format!(
        "spin: 3000 us on the GPU answered after {:.1?}",
        s.took
    ));
    if with_persistent {
        let make = || (e.persistent.expect("persistent"))(&opts, dev);
        lines.push(watchdog_restarts_a_stalled_gpu(&service, &make)?);
    }
    lines.extend(run_cases(dev, rng.gen(), with_persistent, None)?);
    // knn on a fresh random index, f32 and f16.
    let (n, dim, nlist) = (6000, 48, 64);
    let model = Model::new(SynthConfig {
        clusters: 16,
        ..SynthConfig::sift_like(dim, seed)
    });
    let ix = Arc::new(IvfIndex::build(
        &model.sample(n, 1),
        nlist,
        Metric::L2,
        &KMeansConfig {
            iters: 5,
            seed,
            ..KMeansConfig::new(nlist)
        },
    ));
    let payloads = knn_payloads(&mut rng, &model, dim, nlist);
    let service: Arc<dyn Service> = Arc::new(Knn { index: ix.clone() });
    let gpu = || -> Result<Arc<dyn GpuBackend>, String> {
        let ivf = GpuIvf::upload(dev, &ix, Precision::F32).map_err(|e| e.to_string())?;
        Ok(Arc::new(KnnGpu::new(ivf)))
    };
    let persistent = |plan: PersistentPlan| -> Result<Arc<dyn PersistentBackend>, String> {
        let ivf = GpuIvf::upload(dev, &ix, Precision::F32).map_err(|e| e.to_string())?;
        Ok(Arc::new(
            KnnPersistent::new(ivf, dev, plan).map_err(|e| e.to_string())?,
        ))
    };
    let cohort = || persistent(PersistentPlan::Cohort);
    let per_pair = || persistent(PersistentPlan::PerPair);
    let two_groups = || -> Result<Arc<dyn PersistentBackend>, String> {
        let ivf = GpuIvf::upload(dev, &ix, Precision::F32).map_err(|e| e.to_string())?;
        let k = KnnPersistent::new(ivf, dev, PersistentPlan::Cohort)
            .and_then(|k| k.with_groups(2))
            .map_err(|e| e.to_string())?;
        Ok(Arc::new(k))
    };
    lines.extend(check(
        "knn",
        &|| all_engines(&gpu, with_persistent.then_some((&cohort, DEFAULT_STRIDE))),
        &service,
        &payloads,
        neighbours,
    )?);
    if with_persistent {
        // Both persistent plans answer as the CPU does (the cohort plan ran above).
        lines.extend(check(
            "knn (persistent per-pair plan)",
            &|| Ok(vec![persistent_engine(per_pair()?)]),
            &service,
            &payloads,
            neighbours,
        )?);
        lines.extend(check(
            "knn (persistent cohort plan, 2 block groups)",
            &|| Ok(vec![persistent_engine(two_groups()?)]),
            &service,
            &payloads,
            neighbours,
        )?);
        // The first 300 requests are well-formed (every answer must be a result).
        lines.push(unpackable_stage_ratio_serves_or_refuses(
            &service,
            &per_pair,
            &payloads[..60],
        )?);
    }
    Ok(lines)
}

/// A k-NN stage ratio whose blocks pass the occupancy sum (each kernel's share of the GPU
/// adds up to less than all of it) but need not fit together on the SMs: filter half its
/// room, search 40%, reduce a sixteenth - 264:264:33 on an H200, where the filter and search
/// blocks fill every SM's registers and no reducer finds a place. Before the started-block
/// count this launched and hung for good. Now the start must either serve every request or
/// be refused, with the reason, within seconds.
fn unpackable_stage_ratio_serves_or_refuses(
    service: &Arc<dyn Service>,
    make: &dyn Fn() -> Result<Arc<dyn PersistentBackend>, String>,
    payloads: &[Vec<u8>],
) -> Result<String, String> {
    let backend = make()?;
    let stages = backend
        .prepare(64, DEFAULT_STRIDE, None)
        .map_err(|e| e.to_string())?
        .stages;
    let room = stages
        .iter()
        .map(|st| stage_capacity(&*backend, st).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    let [f, s, r] = room[..] else {
        return Err(format!("k-NN has three stages, got {}", room.len()));
    };
    let blocks = vec![(f / 2).max(1), (s * 2 / 5).max(1), (r / 16).max(1)];
    let cfg = PersistentConfig {
        slots: 64,
        blocks: Some(blocks.clone()),
        ..PersistentConfig::default()
    };
    let t = Instant::now();
    let served = serve(
        Engine::Persistent(vec![backend], cfg, DEFAULT_STRIDE),
        service,
        payloads,
    );
    let took = t.elapsed();
    match served {
        Ok(sv) => {
            if let Some((i, e)) = sv
                .answers
                .iter()
                .enumerate()
                .find_map(|(i, a)| a.as_ref().err().map(|e| (i, e)))
            {
                return Err(format!("stages {blocks:?}: request {i} answered {e:?}"));
            }
            Ok(format!("gpu-persistent k-NN stages {blocks:?} (of {room:?}): resident together, served all {}", payloads.len()))
        }
        Err(e) if e.contains("became resident") && took < Duration::from_secs(10) => Ok(format!(
            "gpu-persistent k-NN stages {blocks:?} (of {room:?}): refused in {took:.1?}: {e}"
        )),
        Err(e) => Err(format!(
            "stages {blocks:?}: failed otherwise than expected after {took:?}: {e}"
        )),
    }
}

/// The watchdog, provoked: spin requests of 100 ms on every worker against a 30 ms watchdog
/// look exactly like a GPU that stopped making progress. Every request must get one answer
/// (what the GPU held INTERNAL, the rest their echo), and requests sent 400 ms later, after
/// the restart, are all served.
fn watchdog_restarts_a_stalled_gpu(
    service: &Arc<dyn Service>,
    make: &dyn Fn() -> Result<Arc<dyn PersistentBackend>, String>,
) -> Result<String, String> {
    let cfg = PersistentConfig {
        slots: 64,
        blocks: Some(vec![4]),
        watchdog: Duration::from_millis(30),
        ..PersistentConfig::default()
    };
    let mut payloads: Vec<Vec<u8>> = (0..40u8).map(|i| crate::spin::encode(0, &[i])).collect();
    payloads.extend((0..4u8).map(|i| crate::spin::encode(100_000, &[i])));
    payloads.extend((0..40u8).map(|i| crate::spin::encode(5, &[i])));
    let pause = Some((44, Duration::from_millis(400)));
    let s = serve_paced(
        Engine::Persistent(vec![make()?], cfg, DEFAULT_STRIDE),
        service,
        &payloads,
        pause,
    )?;
    let internal = s
        .answers
        .iter()
        .filter(|a| matches!(a, Err(e) if e.code == ErrorCode::Internal))
        .count();
    for (i, (p, a)) in payloads.iter().zip(&s.answers).enumerate() {
        match a {
            Ok(g) if g == p => {}
            // Only what the stalled GPU held may fail; what came after the restart is served.
            Err(e) if e.code == ErrorCode::Internal && i < 44 => {}
            other => return Err(format!("watchdog run: request {i} answered {other:?}")),
        }
    }
    if s.restarts == 0 || internal < 4 {
        return Err(format!(
            "watchdog run: {} restarts, {internal} INTERNAL answers (expected >= 1 and >= 4)",
            s.restarts
        ));
    }
    Ok(format!(
        "gpu-persistent watchdog: {} restart(s) for 4 stalled spins; {internal} INTERNAL, {} served, none lost or doubled, in {:.1?}",
        s.restarts,
        payloads.len() - internal,
        s.took
    ))
}
