//! Every service's GPU backend against its CPU twin, through the real GPU engines
//! (gpu-direct, gpu-cohort, gpu-cohort with graphs, gpu-persistent) and the real rings, on
//! fresh random requests (bad ones included): each entry's selftest case through the engine
//! harness (`cohort_service_api::harness`), then the checks it brings of its own (knn's fresh
//! index, spin's watchdog). Run by `cohort selftest gpu` (the GPU machine has no cargo) and
//! the test suite.

use crate::catalog;
use cohort_engine::EngineSpec;
use cohort_gpu::{probe, DeviceInfo};
use cohort_service_api::config::{settings, Settings};
use cohort_service_api::harness::{all_engines, check, persistent_engine_with};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Every service named like `only` (all where None) through every engine it has a backend
/// for: its selftest case, then its persistent variants, then its own engine checks.
pub fn run_cases(
    dev: &DeviceInfo,
    seed: u64,
    with_persistent: bool,
    only: Option<&str>,
) -> Result<Vec<String>, String> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut lines = Vec::new();
    for (e, checks) in catalog::checked() {
        if only.is_some_and(|o| !e.name.contains(o)) {
            continue;
        }
        if let Some(case) = &checks.selftest {
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
            let Some(gpu) = e.gpu else {
                return Err(format!("{}: a selftest case but no GPU backend", e.name));
            };
            let payloads = (case.payloads)(rng.gen());
            let persistent_of = e.persistent.filter(|_| with_persistent);
            let stride = EngineSpec::stride_for(e.persistent_request_bytes);
            lines.extend(check(
                e.name,
                &|| match &persistent_of {
                    Some(p) => all_engines(&|| gpu(&opts, dev), Some((&|| p(&opts, dev), stride))),
                    None => all_engines(&|| gpu(&opts, dev), None),
                },
                &service,
                &payloads,
                case.compare,
                case.gpu_payload_limit,
            )?);
            if let Some(p) = persistent_of {
                for variant in case.persistent_variants {
                    let mut o = opts.clone();
                    o.extend(settings(variant));
                    let what = variant.iter().map(|(k, v)| format!("{k}={v}"));
                    lines.extend(check(
                        &format!("{} ({})", e.name, what.collect::<Vec<_>>().join(", ")),
                        &|| Ok(vec![persistent_engine_with(p(&o, dev)?, stride)]),
                        &service,
                        &payloads,
                        case.compare,
                        case.gpu_payload_limit,
                    )?);
                }
            }
        }
        if let Some(own) = checks.engine_checks {
            lines.extend(own(dev, rng.gen(), with_persistent)?);
        }
    }
    Ok(lines)
}

/// Every service through the engines on device 0 (`persistent`: the persistent engine too,
/// and its watchdog).
pub fn run(seed: u64, with_persistent: bool) -> Result<Vec<String>, String> {
    let devs = probe().map_err(|e| e.to_string())?;
    run_cases(&devs[0], seed, with_persistent, None)
}
