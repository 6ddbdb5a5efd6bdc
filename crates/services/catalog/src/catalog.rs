//! The services a server can host. Each service is one crate (`crates/services/micro` for
//! echo and spin, `knn`, `bank`, ...) whose `slice.rs` declares its [`Entry`] (the types are
//! `cohort_service_api::entry`'s, which name no service); adding a service is its crate and
//! one line in [`CATALOG`] (docs/adding-a-service.md).

use cohort_gpu::KernelSource;
use cohort_service_api::config::ServiceFlag;
use cohort_service_api::entry::{Entry, GpuCheck, SelftestCase, ServiceCommand};

/// Every service with a selftest case, with its entry.
pub fn selftest_cases() -> impl Iterator<Item = (&'static Entry, &'static SelftestCase)> {
    all().filter_map(|e| e.selftest.as_ref().map(|c| (e, c)))
}

/// Every service's GPU checks, with the service's name.
pub fn gpu_checks() -> impl Iterator<Item = (&'static str, &'static GpuCheck)> {
    all().flat_map(|e| e.gpu_checks.iter().map(move |c| (e.name, c)))
}

/// Every service's benchmarks.
pub fn benches() -> impl Iterator<Item = &'static ServiceCommand> {
    all().flat_map(|e| e.benches.iter())
}

/// Every service's commands of its own (`cohort NAME ...`).
pub fn commands() -> impl Iterator<Item = &'static ServiceCommand> {
    all().flat_map(|e| e.commands.iter())
}

/// Service `service`'s model tool `name` (`cohort-lab model NAME SERVICE`).
pub fn model_tool(name: &str, service: &str) -> Option<&'static ServiceCommand> {
    entry(service)?.models.iter().find(|c| c.name == name)
}

/// Every model tool as `TOOL SERVICE` (what `cohort-lab model` takes), in catalog order.
pub fn model_tools() -> Vec<String> {
    all()
        .flat_map(|e| {
            e.models
                .iter()
                .map(move |c| format!("{} {}", c.name, e.name))
        })
        .collect()
}

/// The services that have a model tool `name`.
pub fn with_model_tool(name: &str) -> Vec<&'static str> {
    all()
        .filter(|e| e.models.iter().any(|c| c.name == name))
        .map(|e| e.name)
        .collect()
}

/// What a user can serve.
pub const CATALOG: &[&Entry] = &[
    &cohort_service_micro::slice::ECHO,
    &cohort_service_micro::slice::SPIN,
    &cohort_service_knn::slice::ENTRY,
    &cohort_service_bank::slice::ENTRY,
    &cohort_service_lenet::slice::ENTRY,
    &cohort_service_facever::slice::ENTRY,
];

/// Services the tests serve beside [`CATALOG`] (not offered to users).
#[cfg(feature = "test-services")]
const TEST_SERVICES: &[&Entry] = &[&cohort_service_reverse::slice::ENTRY];
#[cfg(not(feature = "test-services"))]
const TEST_SERVICES: &[&Entry] = &[];

/// Every service: the catalog's, then the tests' (where built with them).
pub fn all() -> impl Iterator<Item = &'static Entry> {
    CATALOG.iter().chain(TEST_SERVICES).copied()
}

/// Every service's kernel compilation units.
pub fn kernel_sources() -> Vec<&'static KernelSource> {
    all().flat_map(|e| (e.kernels)()).collect()
}

pub fn entry(name: &str) -> Option<&'static Entry> {
    all().find(|e| e.name == name)
}

pub fn names() -> Vec<&'static str> {
    all().map(|e| e.name).collect()
}

/// The service that owns serve flag `--long`, and the key it sets.
pub fn flag_owner(long: &str) -> Option<(&'static Entry, &'static ServiceFlag)> {
    all().find_map(|e| e.flags.iter().find(|f| f.long == long).map(|f| (e, f)))
}

/// Every service's serve flags.
pub fn flags() -> impl Iterator<Item = (&'static Entry, &'static ServiceFlag)> {
    all().flat_map(|e| e.flags.iter().map(move |f| (e, f)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cohort_service_api::config::Settings;

    #[test]
    fn every_selftest_variant_is_a_valid_setting() {
        for (e, case) in selftest_cases() {
            for variant in case.persistent_variants {
                (e.resolve)(&cohort_service_api::config::settings(variant))
                    .unwrap_or_else(|err| panic!("{}: {variant:?}: {err}", e.name));
            }
        }
    }

    #[test]
    fn names_and_flags_are_unique() {
        let names = names();
        for (i, n) in names.iter().enumerate() {
            assert!(!names[i + 1..].contains(n), "service {n} listed twice");
        }
        let ids: Vec<u16> = all().map(|e| e.id).collect();
        for (i, id) in ids.iter().enumerate() {
            assert!(!ids[i + 1..].contains(id), "wire id {id} used twice");
        }
        let longs: Vec<_> = flags().map(|(_, f)| f.long).collect();
        for (i, l) in longs.iter().enumerate() {
            assert!(!longs[i + 1..].contains(l), "flag --{l} owned twice");
        }
        for e in CATALOG {
            (e.resolve)(&Settings::new()).unwrap_or_else(|err| panic!("{}: {err}", e.name));
        }
    }
}
