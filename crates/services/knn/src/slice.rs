//! The knn service's catalog entry: how the server builds it from its settings.

use super::config::{KnnSettings, Placement, FLAGS};
use super::gpu_ivf::GpuIvf;
use cohort_engine::Service;
use cohort_gpu::engine::GpuBackend;
use cohort_gpu::persistent::PersistentBackend;
use cohort_gpu::DeviceInfo;
use cohort_service_api::config::{resolved, typed, Settings};
use cohort_service_api::entry::{Entry, GpuCheck};
use std::sync::Arc;

pub const ENTRY: Entry = Entry {
    flags: FLAGS,
    gpu: Some(gpu),
    gpu_set: Some(gpu_set),
    persistent_set: Some(persistent_set),
    persistent: Some(persistent),
    kernels: || super::kernels::sources().to_vec(),
    benches: super::bench::BENCHES,
    models: super::centaur::command::COMMANDS,
    commands: super::index_tool::COMMANDS,
    // The engines' selftest: no case of payloads (it needs an index), its own run on a
    // fresh random one.
    engine_checks: Some(super::engine_checks::run),
    // Both plans' kernels and k-means against their CPU twins (the engines' selftest runs
    // the backends).
    gpu_checks: &[
        GpuCheck {
            name: "knn kernels vs cpu twins",
            run: |_, seed| super::selftest::run(seed).map_err(|e| e.to_string()),
            persistent: false,
        },
        GpuCheck {
            name: "knn sharded index vs the whole index",
            run: super::selftest::check_sharded,
            persistent: false,
        },
        GpuCheck {
            name: "knn sharded index vs the whole index on gpu-persistent",
            run: super::selftest::check_sharded_persistent,
            persistent: true,
        },
    ],
    split: Some(cohort_service_api::entry::Split {
        shard_of: super::split::shard_of,
        merge: super::split::merge,
    }),
    ..Entry::cpu(
        "knn",
        super::ID,
        |s| resolved::<KnnSettings>("knn", s),
        service,
        |o| Ok(Arc::new(super::load::KnnWorkload::from_options(o)?)),
    )
};

fn config(s: &Settings) -> Result<KnnSettings, String> {
    typed("knn", s)
}

fn load_index(c: &KnnSettings, mapped: bool) -> Result<cohort_knn::IvfIndex, String> {
    let Some(path) = &c.index else {
        return Err("the knn service needs an index (--index PATH)".into());
    };
    if let Some(shard) = c.shard {
        // A node's part: read from the mapped file, only its own lists copied.
        return super::split::load_part(path, shard);
    }
    let ix = if mapped {
        cohort_knn::IvfIndex::load(path)
    } else {
        cohort_knn::IvfIndex::load_resident(path)
    };
    ix.map_err(|e| format!("loading {}: {e:#}", path.display()))
}

fn service(s: &Settings, on_gpu: bool) -> Result<Arc<dyn Service>, String> {
    let c = config(s)?;
    // A GPU engine validates requests itself and uploads its own copy: a mapped index here
    // costs only the pages actually read (header, centroids).
    let index = load_index(&c, c.index_mapped || on_gpu)?;
    tracing::info!(
        n = index.n,
        dim = index.dim,
        nlist = index.nlist,
        default_nprobe = index.default_nprobe,
        "index loaded"
    );
    Ok(Arc::new(super::Knn {
        index: Arc::new(index),
    }))
}

fn gpu(s: &Settings, dev: &DeviceInfo) -> Result<Arc<dyn GpuBackend>, String> {
    let c = config(s)?;
    let index = load_index(&c, true)?;
    let ivf = GpuIvf::upload(dev, &index, c.precision).map_err(|e| e.to_string())?;
    Ok(Arc::new(super::gpu::KnnGpu::new(ivf)))
}

fn persistent(s: &Settings, dev: &DeviceInfo) -> Result<Arc<dyn PersistentBackend>, String> {
    let c = config(s)?;
    if c.placement == Placement::Shard {
        // One device alone cannot hold a shard: the set builds them (persistent_set).
        return Err("knn.placement=shard builds every device's lane at once".into());
    }
    let index = load_index(&c, true)?;
    let ivf = GpuIvf::upload(dev, &index, c.precision).map_err(|e| e.to_string())?;
    Ok(Arc::new(
        super::persistent::KnnPersistent::new(ivf, dev, c.persistent_plan)
            .and_then(|k| k.with_groups(c.persistent_groups))
            .map_err(|e| e.to_string())?,
    ))
}

/// Every serving device's persistent lane: a copy of the index each, or one shard each with
/// its search stages on every device (`persistent_sharded`).
fn persistent_set(
    s: &Settings,
    devs: &[DeviceInfo],
) -> Result<Vec<Arc<dyn PersistentBackend>>, String> {
    let c = config(s)?;
    if c.placement == Placement::Replicate {
        return devs.iter().map(|d| persistent(s, d)).collect();
    }
    let (index, placement, shards) = upload_shards(&c, devs)?;
    let set = super::persistent_sharded::shards(
        devs,
        &index,
        shards,
        placement,
        c.persistent_plan,
        c.persistent_groups,
    )
    .map_err(|e| e.to_string())?;
    Ok((0..devs.len())
        .map(|home| Arc::new(set.backend(home)) as Arc<dyn PersistentBackend>)
        .collect())
}

/// The index (mapped: its lists are read once, for the shards), its placement over `devs`
/// (the one it records where it is for as many devices) and each device's shard, uploaded.
fn upload_shards(
    c: &KnnSettings,
    devs: &[DeviceInfo],
) -> Result<
    (
        cohort_knn::IvfIndex,
        cohort_knn::ivf::placement::Placement,
        Vec<GpuIvf>,
    ),
    String,
> {
    let index = load_index(c, true)?;
    let placement = index.placement_for(devs.len());
    if index
        .placement
        .as_ref()
        .is_some_and(|p| p.devices != devs.len())
    {
        tracing::warn!(
            recorded = index.placement.as_ref().map(|p| p.devices),
            serving = devs.len(),
            "the index records a placement for another device count: placing by bytes"
        );
    }
    let mut shards = Vec::with_capacity(devs.len());
    for (i, dev) in devs.iter().enumerate() {
        let cut = cohort_knn::ivf::shard::IvfShard::cut(&index, &placement, i);
        tracing::info!(
            gpu = dev.ordinal,
            lists = placement.lists_of(i).len(),
            list_bytes = cut.list_bytes(),
            "knn shard"
        );
        shards
            .push(GpuIvf::upload_shard(dev, &index, &cut, c.precision).map_err(|e| e.to_string())?);
    }
    Ok((index, placement, shards))
}

/// Every serving device's backend: a copy of the index each, or one shard each.
fn gpu_set(s: &Settings, devs: &[DeviceInfo]) -> Result<Vec<Arc<dyn GpuBackend>>, String> {
    let c = config(s)?;
    if c.placement == Placement::Replicate {
        return devs.iter().map(|d| gpu(s, d)).collect();
    }
    let (_, placement, shards) = upload_shards(&c, devs)?;
    let set = Arc::new(
        super::gpu_sharded::ShardSet::new(devs, shards, placement, c.shard_exchange)
            .map_err(|e| e.to_string())?,
    );
    Ok((0..devs.len())
        .map(|home| Arc::new(set.backend(home)) as Arc<dyn GpuBackend>)
        .collect())
}
