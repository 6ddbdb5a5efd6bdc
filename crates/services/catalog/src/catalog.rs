//! The services a server can host. Each service is one crate (`crates/services/micro` for
//! echo and spin, `knn`, `bank`, ...) whose `slice.rs` declares its [`Listing`]: its serving
//! [`Entry`], its [`Checks`] and its [`Tools`] (the types are `cohort_service_api`'s, which
//! name no service); adding a service is its crate and one line in [`CATALOG`]
//! (docs/adding-a-service.md). Each part has its readers here: the server reads entries
//! alone ([`entry`], [`all`], [`flags`]); `cohort selftest gpu` and CI the checks
//! ([`selftest_cases`], [`gpu_checks`], [`kernel_sources`]); `cohort` the services' commands
//! ([`commands`]) and `cohort-lab` their benchmarks and model tools ([`benches`],
//! [`model_tool`]).

use cohort_gpu::KernelSource;
use cohort_service_api::checks::{Checks, GpuCheck, SelftestCase};
use cohort_service_api::config::ServiceFlag;
use cohort_service_api::entry::Entry;
use cohort_service_api::listing::Listing;
use cohort_service_api::tools::ServiceCommand;

/// What a user can serve.
pub const CATALOG: &[&Listing] = &[
    &cohort_service_micro::slice::ECHO,
    &cohort_service_micro::slice::SPIN,
    &cohort_service_knn::slice::LISTING,
    &cohort_service_bank::slice::LISTING,
    &cohort_service_lenet::slice::LISTING,
    &cohort_service_facever::slice::LISTING,
];

/// Services the tests serve beside [`CATALOG`] (not offered to users).
#[cfg(feature = "test-services")]
const TEST_SERVICES: &[&Listing] = &[&cohort_service_reverse::slice::LISTING];
#[cfg(not(feature = "test-services"))]
const TEST_SERVICES: &[&Listing] = &[];

/// Every service's listing: the catalog's, then the tests' (where built with them).
fn listings() -> impl Iterator<Item = &'static Listing> {
    CATALOG.iter().chain(TEST_SERVICES).copied()
}

// Serving: the entries.

/// Every service's serving entry: the catalog's, then the tests' (where built with them).
pub fn all() -> impl Iterator<Item = &'static Entry> {
    listings().map(|l| &l.entry)
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

// Checks: the product's selftest and CI.

/// Every service's entry with its checks.
pub fn checked() -> impl Iterator<Item = (&'static Entry, &'static Checks)> {
    listings().map(|l| (&l.entry, &l.checks))
}

/// Every service with a selftest case, with its entry.
pub fn selftest_cases() -> impl Iterator<Item = (&'static Entry, &'static SelftestCase)> {
    checked().filter_map(|(e, c)| c.selftest.as_ref().map(|s| (e, s)))
}

/// Every service's GPU checks, with the service's name.
pub fn gpu_checks() -> impl Iterator<Item = (&'static str, &'static GpuCheck)> {
    checked().flat_map(|(e, c)| c.gpu_checks.iter().map(move |g| (e.name, g)))
}

/// Every service's kernel compilation units.
pub fn kernel_sources() -> Vec<&'static KernelSource> {
    checked().flat_map(|(_, c)| (c.kernels)()).collect()
}

// Tools: the services' commands (`cohort`), benchmarks and model tools (`cohort-lab`).

/// Every service's commands of its own (`cohort NAME ...`).
pub fn commands() -> impl Iterator<Item = &'static ServiceCommand> {
    listings().flat_map(|l| l.tools.commands.iter())
}

/// Every service's benchmarks (`cohort-lab bench NAME`).
pub fn benches() -> impl Iterator<Item = &'static ServiceCommand> {
    listings().flat_map(|l| l.tools.benches.iter())
}

/// Service `service`'s model tool `name` (`cohort-lab model NAME SERVICE`).
pub fn model_tool(name: &str, service: &str) -> Option<&'static ServiceCommand> {
    let l = listings().find(|l| l.entry.name == service)?;
    l.tools.models.iter().find(|c| c.name == name)
}

/// Every model tool as `TOOL SERVICE` (what `cohort-lab model` takes), in catalog order.
pub fn model_tools() -> Vec<String> {
    listings()
        .flat_map(|l| {
            l.tools
                .models
                .iter()
                .map(move |c| format!("{} {}", c.name, l.entry.name))
        })
        .collect()
}

/// The services that have a model tool `name`.
pub fn with_model_tool(name: &str) -> Vec<&'static str> {
    listings()
        .filter(|l| l.tools.models.iter().any(|c| c.name == name))
        .map(|l| l.entry.name)
        .collect()
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
        for l in CATALOG {
            let e = &l.entry;
            (e.resolve)(&Settings::new()).unwrap_or_else(|err| panic!("{}: {err}", e.name));
        }
        // A service's commands sit beside the binary's own: one name each.
        let commands: Vec<_> = commands().map(|c| c.name).collect();
        for (i, c) in commands.iter().enumerate() {
            assert!(!commands[i + 1..].contains(c), "command {c} brought twice");
        }
    }
}
