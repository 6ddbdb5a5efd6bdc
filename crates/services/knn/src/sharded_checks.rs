//! The sharded index against the whole one, on gpu-cohort's and gpu-persistent's sharded
//! backends (the GPU checks `slice.rs` lists; `selftest.rs` checks the kernels).

use super::gpu_ivf::{GpuIvf, Precision};
use super::selftest::same_neighbors;
use super::{decode_response, encode_request, Elems};
use cohort_gpu::GpuError;
use cohort_ivf::kmeans::KMeansConfig;
use cohort_ivf::synth::{Model, SynthConfig};
use cohort_ivf::{IvfIndex, Metric, Neighbor, SearchParams};

/// The sharded index against the whole one (on gpu-cohort's backend; on gpu-persistent,
/// `check_sharded_persistent`): a fresh index split over 2 and 3 devices (groups
/// of 8 SMs of the first device where green contexts are available, else that device several
/// times, which runs the same routing and reducer) and over every device in `devs` where there
/// are several. On gpu-cohort's backend (`gpu_sharded`), every home serves a cohort through
/// the engine's backend calls (stage, enqueue, answer), both exchanges; on gpu-persistent
/// (`persistent_sharded`), every home's lane runs, requests spread over them by the engine.
/// Answers must equal the whole index's on the GPU bit for bit (each distance is computed by
/// the same kernel on the same rows; the reducers break ties as the select does) and the
/// CPU's within tolerance.
pub fn check_sharded(devs: &[cohort_gpu::DeviceInfo], seed: u64) -> Result<Vec<String>, String> {
    sharded(devs, seed, false)
}

/// `check_sharded` on gpu-persistent's lanes (a check of its own: `selftest gpu
/// --no-persistent`, the compute-sanitizer's run, leaves it out).
pub fn check_sharded_persistent(
    devs: &[cohort_gpu::DeviceInfo],
    seed: u64,
) -> Result<Vec<String>, String> {
    sharded(devs, seed, true)
}

fn sharded(
    devs: &[cohort_gpu::DeviceInfo],
    seed: u64,
    persistent: bool,
) -> Result<Vec<String>, String> {
    use cohort_ivf::ivf::shard::IvfShard;
    let dev = &devs[0];
    let e = |e: GpuError| e.to_string();
    let (n, dim, nlist, nq) = (8000, 40, 96, 257);
    let model = Model::new(SynthConfig {
        clusters: 24,
        ..SynthConfig::sift_like(dim, seed ^ 0x5a4d)
    });
    let ix = std::sync::Arc::new(IvfIndex::build(
        &model.sample(n, 1),
        nlist,
        Metric::L2,
        &KMeansConfig {
            iters: 6,
            ..KMeansConfig::new(nlist)
        },
    ));
    let queries = model.sample(nq, 2);
    let service: std::sync::Arc<dyn cohort_engine::Service> =
        std::sync::Arc::new(super::Knn { index: ix.clone() });
    let whole = GpuIvf::upload(dev, &ix, Precision::F32).map_err(e)?;
    let s = whole.ctx.new_stream().map_err(|x| x.to_string())?;
    // The device sets: virtual GPUs of the first device, then the devices given.
    let mut sets = Vec::new();
    for devices in [2, 3] {
        let split = cohort_gpu::green::VirtualSplit {
            device: dev.physical,
            groups: devices,
            sms: 8,
        };
        sets.push(
            match cohort_gpu::probe_physical().and_then(|p| cohort_gpu::virtual_devices(&p, split))
            {
                Ok(v) => (v, format!("virtual GPUs {split}")),
                Err(x) => (
                    vec![dev.clone(); devices],
                    format!("{devices} x the whole device (no green contexts: {x})"),
                ),
            },
        );
    }
    if devs.len() > 1 {
        let which: Vec<String> = devs.iter().map(|d| d.ordinal.to_string()).collect();
        sets.push((devs.to_vec(), format!("GPUs {}", which.join(","))));
    }
    let mut lines = Vec::new();
    for (k, nprobe) in [(10, 8), (1, 1), (37, 24)] {
        let want = whole.search(&s, &queries.data, k, nprobe).map_err(e)?;
        for (i, w) in want.iter().enumerate() {
            let cpu = ix.query(queries.row(i), SearchParams { k, nprobe });
            same_neighbors(w, &cpu).map_err(|m| format!("whole index, query {i}: {m}"))?;
        }
        // The requests every home and engine serves.
        let payloads: Vec<Vec<u8>> = (0..nq)
            .map(|i| {
                let mut p = Vec::new();
                encode_request(k as u16, nprobe as u16, Elems::F32(queries.row(i)), &mut p);
                p
            })
            .collect();
        let same = |got: &[Neighbor], want: &[Neighbor]| {
            got.len() == want.len()
                && got
                    .iter()
                    .zip(want)
                    .all(|(g, w)| g.id == w.id && g.distance.to_bits() == w.distance.to_bits())
        };
        for (devs, how) in &sets {
            let devices = devs.len();
            let placement = ix.placement_for(devices);
            let upload = || {
                (0..devices)
                    .map(|d| {
                        GpuIvf::upload_shard(
                            &devs[d],
                            &ix,
                            &IvfShard::cut(&ix, &placement, d),
                            Precision::F32,
                        )
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(e)
            };
            if !persistent {
                lines.extend(sharded_batch_backends(
                    devs, &upload, &placement, &payloads, k, nprobe, &want, how, &same,
                )?);
                if k == 10 {
                    lines.push(sharded_on_one_control_thread(
                        devs,
                        upload()?,
                        &placement,
                        &service,
                        &payloads,
                        &want,
                        how,
                        &same,
                    )?);
                }
                continue;
            }
            use super::persistent::PersistentPlan;
            for plan in [PersistentPlan::Cohort, PersistentPlan::PerPair] {
                let set = super::persistent_sharded::shards(
                    devs,
                    &ix,
                    upload()?,
                    placement.clone(),
                    plan,
                    1,
                );
                let set = match set {
                    Ok(set) => set,
                    // Physical GPUs without the peer access the plan needs: gpu-persistent
                    // refuses them.
                    Err(x) if devs.iter().any(|d| d.physical != devs[0].physical) => {
                        lines.push(format!(
                            "SKIPPED gpu-persistent sharded over {how}, {plan} plan: {x}"
                        ));
                        continue;
                    }
                    Err(x) => return Err(x.to_string()),
                };
                let backends = (0..devices)
                    .map(|h| {
                        std::sync::Arc::new(set.backend(h))
                            as std::sync::Arc<dyn cohort_gpu::persistent::PersistentBackend>
                    })
                    .collect();
                // The first shape on one egress thread for every home (Centaur's one core),
                // the others on a thread per home.
                let per_thread = if k == 10 { devices } else { 1 };
                let got = cohort_service_api::harness::serve_persistent_lanes(
                    backends, per_thread, &service, &payloads,
                )?;
                let what = format!(
                    "knn sharded over {devices} devices ({how}) on gpu-persistent, {plan} plan, \
                     lanes of every home, {per_thread} per egress thread, k {k} nprobe {nprobe}"
                );
                lines.push(compare_answers(&what, &got, &want, &same)?);
            }
        }
    }
    Ok(lines)
}

/// Every answer of `got` decoded and equal (by `same`) to the whole index's in `want`: the
/// line that says so, or an error naming `what` and the first query that differs.
fn compare_answers(
    what: &str,
    got: &[Result<Vec<u8>, cohort_proto::ErrorPayload>],
    want: &[Vec<Neighbor>],
    same: &dyn Fn(&[Neighbor], &[Neighbor]) -> bool,
) -> Result<String, String> {
    assert_eq!(got.len(), want.len(), "an answer per query");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let g = match g {
            Ok(p) => decode_response(p)?,
            Err(x) => return Err(format!("{what}, query {i}: {x:?}")),
        };
        if !same(&g, w) {
            return Err(format!(
                "{what}, query {i}: {g:?} vs the whole index's {w:?}"
            ));
        }
    }
    Ok(format!(
        "{what}: {} answers identical to the whole index",
        got.len()
    ))
}

/// gpu-cohort's sharded backend over `devs` through the engine, every home's lane on one
/// control thread (`--gpus-per-control-thread`): the thread switches between the devices'
/// contexts; requests spread over the homes; answers compared with `want` by `same`.
#[allow(clippy::too_many_arguments)]
fn sharded_on_one_control_thread(
    devs: &[cohort_gpu::DeviceInfo],
    ivfs: Vec<GpuIvf>,
    placement: &cohort_ivf::ivf::placement::Placement,
    service: &std::sync::Arc<dyn cohort_engine::Service>,
    payloads: &[Vec<u8>],
    want: &[Vec<Neighbor>],
    how: &str,
    same: &dyn Fn(&[Neighbor], &[Neighbor]) -> bool,
) -> Result<String, String> {
    use super::config::Exchange;
    use super::gpu_sharded::ShardSet;
    use cohort_gpu::engine::{GpuBackend, Mode};
    use cohort_service_api::harness::{serve, Engine};
    let devices = devs.len();
    let set = std::sync::Arc::new(
        ShardSet::new(devs, ivfs, placement.clone(), Exchange::Auto).map_err(|e| e.to_string())?,
    );
    let backends: Vec<std::sync::Arc<dyn GpuBackend>> = (0..devices)
        .map(|h| std::sync::Arc::new(set.backend(h)) as std::sync::Arc<dyn GpuBackend>)
        .collect();
    let got = serve(Engine::Shared(backends, Mode::Cohort), service, payloads)?.answers;
    let what = format!(
        "knn sharded over {devices} devices ({how}) on gpu-cohort, every home's lane on one \
         control thread"
    );
    compare_answers(&what, &got, want, same)
}

/// gpu-cohort's sharded backend (`gpu_sharded`) over `devs`, both exchanges: every home
/// serves `payloads` (requests of k, nprobe) as one cohort; answers compared with `want` by
/// `same`.
#[allow(clippy::too_many_arguments)]
fn sharded_batch_backends(
    devs: &[cohort_gpu::DeviceInfo],
    upload: &dyn Fn() -> Result<Vec<GpuIvf>, String>,
    placement: &cohort_ivf::ivf::placement::Placement,
    payloads: &[Vec<u8>],
    k: usize,
    nprobe: usize,
    want: &[Vec<Neighbor>],
    how: &str,
    same: &dyn Fn(&[Neighbor], &[Neighbor]) -> bool,
) -> Result<Vec<String>, String> {
    use super::config::Exchange;
    use super::gpu_sharded::ShardSet;
    use cohort_gpu::engine::GpuBackend;
    let e = |e: GpuError| e.to_string();
    let devices = devs.len();
    let nq = want.len();
    let mut lines = Vec::new();
    for exchange in [Exchange::Auto, Exchange::Host] {
        let ivfs = upload()?;
        let set =
            std::sync::Arc::new(ShardSet::new(devs, ivfs, placement.clone(), exchange).map_err(e)?);
        let route = set.route;
        for home in 0..devices {
            let b = set.backend(home);
            let hs = b.context().new_stream().map_err(|x| x.to_string())?;
            let mut bufs = b.stream_buffers(&hs, nq).map_err(e)?;
            let mut key = None;
            for (i, p) in payloads.iter().enumerate() {
                let kk =
                    cohort_engine::BatchBackend::batch_key(&b, p).map_err(|x| x.message.clone())?;
                key = Some(kk);
                bufs.stage(kk, i, p).map_err(|x| x.message.clone())?;
            }
            let key = key.expect("queries");
            bufs.enqueue(&hs, key, nq).map_err(e)?;
            hs.synchronize().map_err(|x| x.to_string())?;
            for (i, want) in want.iter().enumerate() {
                let mut out = Vec::new();
                bufs.answer(key, i, &mut out)
                    .map_err(|x| x.message.clone())?;
                let got = decode_response(&out)?;
                if !same(&got, want) {
                    return Err(format!(
                        "sharded over {devices} ({how}, {route:?} exchange), home {home}, \
                         k {k}, nprobe {nprobe}, query {i}: {got:?} vs the whole index's \
                         {want:?}"
                    ));
                }
            }
        }
        lines.push(format!(
            "knn sharded over {devices} devices ({how}, {route:?} exchange), every home, k \
             {k} nprobe {nprobe}: {nq} answers identical to the whole index"
        ));
    }
    Ok(lines)
}
