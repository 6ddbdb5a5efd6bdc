//! Every service's GPU backend against its CPU twin, through the real GPU engines (gpu-direct,
//! gpu-cohort, gpu-cohort with graphs) and the real rings, on fresh random requests (bad ones
//! included). Run by `cohort selftest gpu` (the GPU machine has no cargo) and the test suite.

use crate::catalog::{self, ServiceOptions};
use crate::knn::gpu::KnnGpu;
use crate::knn::{decode_response, encode_request, Elems, Knn};
use crate::micro_gpu::MAX_ROW_BYTES;
use cohort_engine::{
    wire, Bell, DispatchPolicy, EngineSpec, Ingress, Metrics, Service, ServiceLabel,
};
use cohort_gpu::engine::{GpuBackend, GpuEngine, GpuEngineConfig, Mode};
use cohort_gpu::knn::{GpuIvf, Precision};
use cohort_gpu::selftest::same_neighbors;
use cohort_gpu::{probe, DeviceInfo};
use cohort_knn::kmeans::KMeansConfig;
use cohort_knn::synth::{Model, SynthConfig};
use cohort_knn::{IvfIndex, Metric};
use cohort_proto::ErrorCode;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use std::time::{Duration, Instant};

type Compare = fn(&[u8], &[u8]) -> Result<(), String>;

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

/// Sends every payload through a GPU engine of `mode` and returns the answers in order, and
/// the time from the first request to the last answer.
fn serve(
    backend: Arc<dyn GpuBackend>,
    service: &Arc<dyn Service>,
    mode: Mode,
    graphs: bool,
    payloads: &[Vec<u8>],
) -> Result<(Answers, Duration), String> {
    let label = ServiceLabel {
        name: service.name().into(),
        engine: mode.engine_name().into(),
    };
    let metrics = Arc::new(Metrics::new([(service.id(), label)].into()));
    let spec = EngineSpec {
        name: mode.engine_name().into(),
        lanes: 1,
        policy: DispatchPolicy::RoundRobin,
        services: vec![service.id()],
        slots: 256,
    };
    let mut w = wire(1, &[spec]);
    let cfg = GpuEngineConfig {
        mode,
        max_cohort: 64,
        cohort_timeout: Duration::from_micros(300),
        streams: 3,
        graphs,
    };
    let lane = w.engines[0].pop().expect("one lane");
    let eng = GpuEngine::start(backend, lane, &cfg, metrics.clone()).map_err(|e| e.to_string())?;
    let ends = w.ingresses.pop().expect("one ingress");
    let bell = Bell::new();
    bell.bind_current();
    ends.set_wake(bell.clone());
    let mut ing: Ingress<usize> = Ingress::new(ends, 1 << 16, metrics, Duration::from_secs(30));
    let mut got: Vec<Option<Result<Vec<u8>, cohort_proto::ErrorPayload>>> =
        vec![None; payloads.len()];
    let started = Instant::now();
    let until = started + Duration::from_secs(60);
    let mut next = 0;
    while (next < payloads.len() || ing.in_flight() > 0) && Instant::now() < until {
        while next < payloads.len() {
            match ing.submit(next, service.id(), next as u64, 0, &payloads[next]) {
                Ok(()) => next += 1,
                Err((_, e)) if e.code == ErrorCode::Overloaded => break,
                Err((i, e)) => {
                    got[i] = Some(Err(e));
                    next += 1;
                }
            }
        }
        let n = ing.drain(usize::MAX, |i, _, a| got[i] = Some(a.map(|p| p.to_vec())))
            + ing.reap_dead_lanes(|i, _, a| got[i] = Some(a.map(|p| p.to_vec())));
        if n == 0 {
            bell.sleep(Duration::from_millis(1), || ing.ends.answers_waiting());
        }
    }
    let took = started.elapsed();
    drop(ing);
    eng.shutdown();
    let answers = got
        .into_iter()
        .enumerate()
        .map(|(i, a)| a.ok_or_else(|| format!("request {i} never answered")))
        .collect::<Result<_, _>>()?;
    Ok((answers, took))
}

/// Compares the engine's answers with the CPU twin's, request by request.
fn check(
    what: &str,
    make: &dyn Fn() -> Result<Arc<dyn GpuBackend>, String>,
    service: &Arc<dyn Service>,
    payloads: &[Vec<u8>],
    compare: Compare,
) -> Result<Vec<String>, String> {
    let mut lines = Vec::new();
    for (mode, graphs) in MODES {
        let backend = make()?;
        // gpu-direct always replays graphs where the backend allows them.
        let graphs_used = (graphs || mode == Mode::Direct) && backend.graphable();
        let (got, took) = serve(backend, service, mode, graphs, payloads)?;
        let mut errors = 0;
        for (i, (p, g)) in payloads.iter().zip(&got).enumerate() {
            let c = service.call_cpu(p);
            let fail = |m: String| {
                format!(
                    "{what} on {} (graphs {graphs_used}), request {i}: {m}",
                    mode.engine_name()
                )
            };
            match (g, &c) {
                (Ok(g), Ok(c)) => compare(g, c).map_err(fail)?,
                (Err(g), Err(c)) if g.code == c.code => errors += 1,
                (Err(g), Ok(_)) if g.code == ErrorCode::TooLarge && p.len() > MAX_ROW_BYTES => {
                    errors += 1
                }
                (g, c) => return Err(fail(format!("gpu {g:?}, cpu {c:?}"))),
            }
        }
        lines.push(format!(
            "{what} on {} (graphs {graphs_used}): {} requests ({errors} refused alike) match the CPU twin, served in {took:.1?}",
            mode.engine_name(),
            payloads.len(),
        ));
    }
    Ok(lines)
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

/// Every GPU backend against its CPU twin on device 0.
pub fn run(seed: u64) -> Result<Vec<String>, String> {
    let devs = probe().map_err(|e| e.to_string())?;
    let dev: &DeviceInfo = &devs[0];
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut lines = Vec::new();
    let opts = ServiceOptions::default();
    for name in ["echo", "spin"] {
        let e = catalog::entry(name).expect("in the catalog");
        let service = (e.build)(&opts, true)?;
        let gpu = e.gpu.expect("has a GPU backend");
        let payloads = micro_payloads(&mut rng, name == "spin");
        lines.extend(check(
            name,
            &|| gpu(&opts, dev),
            &service,
            &payloads,
            exact,
        )?);
    }
    // Spin really holds the GPU: a 3 ms spin is answered after at least 3 ms.
    let e = catalog::entry("spin").expect("in the catalog");
    let service = (e.build)(&opts, true)?;
    let backend = (e.gpu.expect("gpu"))(&opts, dev)?;
    let (got, took) = serve(
        backend,
        &service,
        Mode::Direct,
        false,
        &[crate::spin::encode(3000, b"x")],
    )?;
    if got[0].is_err() || took < Duration::from_millis(3) {
        return Err(format!(
            "spin 3000 us on the GPU answered {:?} after {took:?}",
            got[0]
        ));
    }
    lines.push(format!(
        "spin: 3000 us on the GPU answered after {took:.1?}"
    ));
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
    let make = || -> Result<Arc<dyn GpuBackend>, String> {
        let ivf = GpuIvf::upload(dev, &ix, Precision::F32).map_err(|e| e.to_string())?;
        Ok(Arc::new(KnnGpu::new(ivf)))
    };
    lines.extend(check("knn", &make, &service, &payloads, neighbours)?);
    Ok(lines)
}
