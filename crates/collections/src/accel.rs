//! The hook through which a device serves a collection's searches (`cohort-collections-gpu`
//! implements it for CUDA GPUs). The collection in memory stays the source of truth: every
//! write is logged, applied to `Data`, then handed to the device copy with `sync` under the
//! collection's write lock and before the write is acknowledged, so a search that starts
//! after an acknowledgement (read lock) finds the device copy current: read-your-writes holds
//! on the device as on the CPU.
//!
//! A device that cannot serve a request (a limit of its kernels, or its copy out of step
//! after a failed sync) answers `Ok(None)` and the CPU answers instead: a request is never
//! refused because of the device, and its answers are the same either way (the kernels are
//! twins of `search.rs`, tested against it).

use crate::data::Data;
use crate::filter::Filter;
use crate::schema::Settings;
use crate::search::Plan;
use cohort_ivf::Neighbor;

/// One search as the collection hands it to a device: checked query vectors (the caller's
/// dimension and values checked), k, the requested nprobe and the parsed filter.
pub struct SearchRequest<'a> {
    pub queries: &'a [Vec<f32>],
    pub k: usize,
    pub nprobe: Option<usize>,
    pub filter: Option<&'a Filter>,
}

/// A search's answers: per query its neighbours, the plan, and where it ran.
pub type Answer = (Vec<Vec<Neighbor>>, Plan, Ran);

/// Where a search ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ran {
    Cpu,
    Device,
}

/// A device copy of one collection.
pub trait Accelerator: Send + Sync {
    /// The device, in words (describe and the startup log show it).
    fn name(&self) -> String;
    /// Brings the copy up to `d`: the slots appended since the last sync, the slots in
    /// `killed` (tombstoned since then), the IVF lists' new entries; everything again when
    /// `d`'s layout or lists were replaced (compaction, a training). Called with the write
    /// lock held. An error leaves the copy marked stale (searches fall back to the CPU)
    /// until a later sync uploads it whole.
    fn sync(&self, d: &Data, killed: &[u32]) -> Result<(), String>;
    /// The search on the device (`d` read-locked, the state the copy mirrors), or `None`
    /// when the device does not take it. The collection combines concurrent requests of the
    /// same k, nprobe and filter into one call (group search, `Collection::search_in`):
    /// `r.queries` then holds their queries side by side (at most
    /// `collection::MAX_PASS_QUERIES`, or one larger request alone), and the answers must
    /// come back one per query, in order.
    #[allow(clippy::type_complexity)]
    fn search(
        &self,
        d: &Data,
        r: &SearchRequest<'_>,
    ) -> Result<Option<(Vec<Vec<Neighbor>>, Plan)>, String>;
}

/// Makes the device copy of each collection a store opens or creates.
pub trait AcceleratorFactory: Send + Sync {
    fn attach(&self, collection: &str, settings: &Settings)
        -> Result<Box<dyn Accelerator>, String>;
}
