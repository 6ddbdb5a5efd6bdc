//! The reverse service's catalog listing: its entry, and no checks or tools. CPU only: `gpu` and `persistent` are None, so a GPU
//! engine refuses it with a clear error.

use super::config::{ReverseSettings, FLAGS};
use cohort_service_api::checks::Checks;
use cohort_service_api::config::{resolved, typed};
use cohort_service_api::entry::Entry;
use cohort_service_api::listing::Listing;
use cohort_service_api::tools::Tools;
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

pub const LISTING: Listing = Listing {
    entry: ENTRY,
    checks: Checks::NONE,
    tools: Tools::NONE,
};
