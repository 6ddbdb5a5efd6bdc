//! cohort-lab's integration tests, one binary for all of them: each module was a test binary
//! of its own, and each linked the lab and its dependency tree (on CI's 2 cores those links
//! were most of the tests' build). Tests keep their file's name as their module:
//! `cargo test -p cohort-lab --test it suite::` runs what `--test suite` ran.

// What the lab's bench tests share (two cores or a printed skip).
#[path = "../common/mod.rs"]
mod common;
// The product's tests/common (servers started, frames read).
#[path = "../../../../crates/cli/tests/common/mod.rs"]
mod product;

mod bank_bench;
mod bench_batcher;
mod bench_engine;
mod bench_overload;
mod bench_served;
mod centaur_model;
mod facever_model;
mod help;
mod lenet_model;
mod sim_numa;
mod suite;
