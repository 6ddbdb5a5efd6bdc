//! The reverse service's catalog entry. CPU only: `gpu` and `persistent` are None, so a GPU
//! engine refuses it with a clear error.

use super::config::{ReverseSettings, FLAGS};
use cohort_service_api::config::{resolved, typed};
use cohort_service_api::entry::Entry;
use std::sync::Arc;

pub const ENTRY: Entry = Entry {
    flags: FLAGS,
    ..Entry::cpu(
        "reverse",
        super::ID,
        |s| resolved::<ReverseSettings>("reverse", s),
        |s, _| {
            let c: ReverseSettings = typed("reverse", s)?;
            Ok(Arc::new(super::Reverse { max_len: c.max_len }))
        },
        |o| {
            Ok(Arc::new(super::load::ReverseWorkload {
                len: o.payload_bytes.max(1),
            }))
        },
    )
};
