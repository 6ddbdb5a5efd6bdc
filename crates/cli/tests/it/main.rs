//! cohort-cli's integration tests, one binary for all of them: each module was a test
//! binary of its own, and each linked the whole CLI and its dependency tree (on CI's 2 cores
//! those links were most of the tests' build). Tests keep their file's name as their
//! module: `cargo test -p cohort-cli --test it tls::` runs what `--test tls` ran.
//! `tests/serve_and_load.rs` stays a binary of its own: its servers run one at a time with
//! nothing else beside them (they measure throughput on 2 cores), which sharing this
//! binary's threads with the other modules' tests would break.

#[path = "../common/mod.rs"]
mod common;

mod auth;
mod bank_served;
mod cluster;
mod collections_frames;
mod collections_grpc;
mod collections_grpc_wire;
mod collections_import;
mod collections_load;
mod collections_served;
mod demo;
mod drain_and_edges;
mod every_flag;
mod facever_served;
mod fairness;
mod fetch;
mod gpu_engines_without_gpu;
mod grpc_hostile;
mod help;
mod knn_batched;
mod knn_served;
mod knn_tools;
mod lenet_served;
mod limits;
mod malformed;
mod openapi;
mod overload_deadline;
mod overload_head;
mod overload_refused;
mod readme_layout;
mod refusal_reasons;
mod test_service;
mod tls;
