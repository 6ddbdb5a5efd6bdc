//! The reverse service's catalog entry. CPU only: `gpu` and `persistent` are None, so a GPU
//! engine refuses it with a clear error.

use super::config::{ReverseSettings, FLAGS};
use crate::config::{resolved, typed};
use crate::entry::Entry;
use std::sync::Arc;

pub const ENTRY: Entry = Entry {
    name: "reverse",
    id: super::ID,
    flags: FLAGS,
    resolve: |s| resolved::<ReverseSettings>("reverse", s),
    build: |s, _| {
        let c: ReverseSettings = typed("reverse", s)?;
        Ok(Arc::new(super::Reverse { max_len: c.max_len }))
    },
    gpu: None,
    gpu_set: None,
    persistent_set: None,
    persistent: None,
    persistent_request_bytes: 0,
    one_gpu: false,
    kernels: Vec::new,
    selftest: None,
    gpu_checks: &[],
    benches: &[],
    models: &[],
    workload: |o| {
        Ok(Arc::new(super::load::ReverseWorkload {
            len: o.payload_bytes.max(1),
        }))
    },
};
