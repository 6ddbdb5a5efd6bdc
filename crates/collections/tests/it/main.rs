//! cohort-collections' integration tests, one binary for all of them: each module was a
//! test binary of its own (on CI's 2 cores their builds and links added up). Tests keep their
//! file's name as their module: `cargo test -p cohort-collections --test it recall::`.

mod accel_fallback;
mod api;
mod durability;
mod group_search;
mod import;
mod recall;
mod selective_plan;
