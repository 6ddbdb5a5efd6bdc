//! Cohort's services, listed: each is a crate of its own under `crates/services/` (codec, CPU
//! function, JSON mapping, backends and kernels, load workload, checks, commands), built on
//! `cohort-service-api`. This crate is what the server, the CLI and the load generator reach
//! them through: the [`catalog`] of listings (serving entries, checks, tools) and the [`selftest`] that runs each through every
//! GPU engine; the re-exports below are the services themselves, under their names.

pub use cohort_service_api::workload;
#[cfg(feature = "backends")]
pub use cohort_service_api::{checks, config, entry, listing, memcached, tools};

pub use cohort_service_bank as bank;
pub use cohort_service_facever as facever;
pub use cohort_service_knn as knn;
pub use cohort_service_lenet as lenet;
pub use cohort_service_micro as micro;
pub use cohort_service_micro::{echo, spin};
#[cfg(feature = "test-services")]
pub use cohort_service_reverse as reverse;

#[cfg(feature = "backends")]
pub mod catalog;
#[cfg(feature = "backends")]
pub mod selftest;
