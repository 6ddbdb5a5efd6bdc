//! The knn service's catalog listing: how the server builds it from its settings (its
//! entry), its kernels and checks, its index command, benchmarks and model.

use super::config::{KnnSettings, Placement, FLAGS};
use super::gpu_ivf::{GpuIvf, Precision};
use cohort_engine::Service;
use cohort_gpu::engine::GpuBackend;
use cohort_gpu::persistent::PersistentBackend;
use cohort_gpu::DeviceInfo;
use cohort_service_api::checks::{Checks, GpuCheck};
use cohort_service_api::config::{resolved, typed, Settings};
use cohort_service_api::entry::{Choice, Entry};
use cohort_service_api::listing::Listing;
use cohort_service_api::tools::Tools;
use std::sync::Arc;

pub const ENTRY: Entry = Entry {
    flags: FLAGS,
    gpu: Some(gpu),
    gpu_set: Some(gpu_set),
    persistent_set: Some(persistent_set),
    persistent: Some(persistent),
    split: Some(cohort_service_api::entry::Split {
        shard_of: super::split::shard_of,
        merge: super::split::merge,
    }),
    choices: Some(choices),
    ..Entry::cpu(
        "knn",
        super::ID,
        |s| resolved::<KnnSettings>("knn", s),
        service,
        |o| Ok(Arc::new(super::load::KnnWorkload::from_options(o)?)),
    )
};

pub const LISTING: Listing = Listing {
    entry: ENTRY,
    checks: Checks {
        kernels: || super::kernels::sources().to_vec(),
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
                run: super::sharded_checks::check_sharded,
                persistent: false,
            },
            GpuCheck {
                name: "knn sharded index vs the whole index on gpu-persistent",
                run: super::sharded_checks::check_sharded_persistent,
                persistent: true,
            },
        ],
        selftest: None,
    },
    tools: Tools {
        // `cohort index ...`: serving it needs an index.
        commands: super::index_tool::COMMANDS,
        benches: super::bench::BENCHES,
        models: super::centaur::command::COMMANDS,
    },
};

fn config(s: &Settings) -> Result<KnnSettings, String> {
    typed("knn", s)
}

fn load_index(c: &KnnSettings, mapped: bool) -> Result<cohort_ivf::IvfIndex, String> {
    let Some(path) = &c.index else {
        return Err("the knn service needs an index (--index PATH)".into());
    };
    if let Some(shard) = c.shard {
        // A node's part: read from the mapped file, only its own lists copied.
        return super::split::load_part(path, shard);
    }
    let ix = if mapped {
        cohort_ivf::IvfIndex::load(path)
    } else {
        cohort_ivf::IvfIndex::load_resident(path)
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

/// The GPU engines' precision for `index` (`precision.rs`), logged.
fn precision(c: &KnnSettings, index: &cohort_ivf::IvfIndex) -> Result<Precision, String> {
    let path = c.index.as_deref().expect("an index was loaded");
    let chosen = super::precision::choose(c.precision, || {
        super::precision::first_not_u8_of(path, c.shard, index.vectors())
    })?;
    tracing::info!(precision = %chosen.precision, why = %chosen.why, "knn GPU precision");
    Ok(chosen.precision)
}

/// What knn chooses from its index: the GPU engines' precision (nothing on the cpu engine,
/// which scans f32).
fn choices(s: &Settings, on_gpu: bool) -> Result<Vec<Choice>, String> {
    if !on_gpu {
        return Ok(Vec::new());
    }
    let c = config(s)?;
    let index = load_index(&c, true)?;
    let path = c.index.as_deref().expect("an index was loaded");
    let chosen = super::precision::choose(c.precision, || {
        super::precision::first_not_u8_of(path, c.shard, index.vectors())
    })?;
    Ok(vec![Choice {
        setting: "precision",
        value: chosen.precision.to_string(),
        why: chosen.why,
    }])
}

fn gpu(s: &Settings, dev: &DeviceInfo) -> Result<Arc<dyn GpuBackend>, String> {
    let c = config(s)?;
    let index = load_index(&c, true)?;
    let ivf = GpuIvf::upload(dev, &index, precision(&c, &index)?).map_err(|e| e.to_string())?;
    Ok(Arc::new(super::gpu::KnnGpu::new(ivf)))
}

fn persistent(s: &Settings, dev: &DeviceInfo) -> Result<Arc<dyn PersistentBackend>, String> {
    let c = config(s)?;
    if c.placement == Placement::Shard {
        // One device alone cannot hold a shard: the set builds them (persistent_set).
        return Err("knn.placement=shard builds every device's lane at once".into());
    }
    let index = load_index(&c, true)?;
    let ivf = GpuIvf::upload(dev, &index, precision(&c, &index)?).map_err(|e| e.to_string())?;
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
        cohort_ivf::IvfIndex,
        cohort_ivf::ivf::placement::Placement,
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
    let precision = precision(c, &index)?;
    let mut shards = Vec::with_capacity(devs.len());
    for (i, dev) in devs.iter().enumerate() {
        let cut = cohort_ivf::ivf::shard::IvfShard::cut(&index, &placement, i);
        tracing::info!(
            gpu = dev.ordinal,
            lists = placement.lists_of(i).len(),
            list_bytes = cut.list_bytes(),
            "knn shard"
        );
        shards.push(GpuIvf::upload_shard(dev, &index, &cut, precision).map_err(|e| e.to_string())?);
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

#[cfg(test)]
mod tests {
    use super::*;
    use cohort_ivf::kmeans::KMeansConfig;
    use cohort_ivf::synth::{Model, SynthConfig};

    /// `choices` (what --check-config prints, the server logs and exports) reads the index
    /// file: u8 on SIFT-like integral data, f32 once a value is off the integers; a named
    /// precision as asked; u8 on other data refused; nothing on the cpu engine.
    #[test]
    fn the_precision_choice_follows_the_index_file() {
        let dir = std::env::temp_dir().join(format!("cohort-knn-choice-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let base = Model::new(SynthConfig {
            dim: 16,
            clusters: 4,
            latent_dim: 4,
            noise: 0.05,
            seed: 3,
        })
        .sample(400, 1);
        let ix =
            cohort_ivf::IvfIndex::build(&base, 4, cohort_ivf::Metric::L2, &KMeansConfig::new(4));
        let integral = dir.join("integral.ivf");
        ix.save(&integral).unwrap();
        let other = dir.join("other.ivf");
        ix.with_vectors_mapped(|x| x + 0.25).save(&other).unwrap();
        let settings = |path: &std::path::Path, precision: Option<&str>| {
            let mut s = Settings::new();
            s.insert("index".into(), path.display().to_string().into());
            if let Some(p) = precision {
                s.insert("precision".into(), p.into());
            }
            s
        };
        let chosen = |s: &Settings| {
            let c = (ENTRY.choices.unwrap())(s, true).unwrap();
            assert_eq!(c.len(), 1);
            assert_eq!(c[0].setting, "precision");
            c[0].clone()
        };
        let c = chosen(&settings(&integral, None));
        assert_eq!(c.value, "u8", "{}", c.why);
        let c = chosen(&settings(&other, None));
        assert_eq!(c.value, "f32", "{}", c.why);
        assert!(c.why.contains("0.25"), "{}", c.why);
        assert_eq!(chosen(&settings(&integral, Some("f32"))).value, "f32");
        assert_eq!(chosen(&settings(&other, Some("f16"))).value, "f16");
        let e = (ENTRY.choices.unwrap())(&settings(&other, Some("u8")), true).unwrap_err();
        assert!(e.contains("u8 storage needs integral vectors"), "{e}");
        assert!((ENTRY.choices.unwrap())(&settings(&other, None), false)
            .unwrap()
            .is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
