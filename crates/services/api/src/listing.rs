//! A service as the catalog lists it: its [`Listing`], the three parts each read by its own
//! reader. The server reads the serving [`Entry`] alone; `cohort selftest gpu` and CI the
//! [`Checks`] (with the entry's builders); the binaries the [`Tools`] (`cohort` a service's
//! commands, `cohort-lab` its benchmarks and model tools). A service's `slice.rs` declares
//! its listing (`LISTING`), and the catalog holds one line per listing.

use crate::checks::Checks;
use crate::entry::Entry;
use crate::tools::Tools;

pub struct Listing {
    /// What serving it needs.
    pub entry: Entry,
    /// Its kernels and self-checks (the product's `cohort selftest gpu`, CI).
    pub checks: Checks,
    /// Its commands (`cohort`), benchmarks and model tools (`cohort-lab`).
    pub tools: Tools,
}
