//! cohort-engine's integration tests, one binary for all of them: each module was a test
//! binary of its own (on CI's 2 cores their builds and links added up). Tests keep their
//! file's name as their module: `cargo test -p cohort-engine --test it batch::`. The tests
//! that measure batch timings take turns with every other engine test (`common::serial`).

mod common;

mod batch;
mod engine;
mod grafana_dashboard;
mod hybrid;
mod restart;
mod rows;
