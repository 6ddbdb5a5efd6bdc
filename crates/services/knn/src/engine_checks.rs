//! k-NN through the GPU engines on a fresh random index (the selftest runs it, `slice.rs`
//! names it): every batched engine and both persistent plans (the cohort plan with two block
//! groups too) answer as the CPU search does, and a stage ratio that cannot be resident
//! together is refused rather than hung.

use super::gpu::KnnGpu;
use super::gpu_ivf::{GpuIvf, Precision};
use super::persistent::{KnnPersistent, PersistentPlan};
use super::selftest::same_neighbors;
use super::{decode_response, encode_request, Elems, Knn};
use cohort_engine::wiring::DEFAULT_STRIDE;
use cohort_engine::Service;
use cohort_gpu::engine::GpuBackend;
use cohort_gpu::persistent::{stage_capacity, Ask, PersistentBackend, PersistentConfig};
use cohort_gpu::DeviceInfo;
use cohort_ivf::kmeans::KMeansConfig;
use cohort_ivf::synth::{Model, SynthConfig};
use cohort_ivf::{IvfIndex, Metric};
use cohort_service_api::harness::{all_engines, check, persistent_engine, serve, Engine};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Answers agree when they hold the same neighbours (ties may come in either order).
fn neighbours(g: &[u8], c: &[u8]) -> Result<(), String> {
    same_neighbors(&decode_response(g)?, &decode_response(c)?)
}

/// k-NN on a fresh random index through every engine (`with_persistent`: and both
/// persistent plans), on device `dev`.
pub fn run(dev: &DeviceInfo, seed: u64, with_persistent: bool) -> Result<Vec<String>, String> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut lines = Vec::new();
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
    let payloads = payloads(&mut rng, &model, dim, nlist);
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
        usize::MAX,
    )?);
    if with_persistent {
        // Both persistent plans answer as the CPU does (the cohort plan ran above).
        lines.extend(check(
            "knn (persistent per-pair plan)",
            &|| Ok(vec![persistent_engine(per_pair()?)]),
            &service,
            &payloads,
            neighbours,
            usize::MAX,
        )?);
        lines.extend(check(
            "knn (persistent cohort plan, 2 block groups)",
            &|| Ok(vec![persistent_engine(two_groups()?)]),
            &service,
            &payloads,
            neighbours,
            usize::MAX,
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

fn payloads(rng: &mut SmallRng, model: &Model, dim: usize, nlist: usize) -> Vec<Vec<u8>> {
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
        .prepare(Ask {
            slots: 64,
            rx_stride: DEFAULT_STRIDE,
            blocks: None,
        })
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
