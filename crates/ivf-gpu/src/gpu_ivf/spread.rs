//! A sharded index read as one whole index from one device of its set: that device holds the
//! whole index's list offsets and ids (4 bytes a row) beside its own shard, and the address of
//! every list's rows on whichever device holds them. A kernel on the device then scans any
//! list in place - its own from local memory, the others' over peer access (NVLink) - so the
//! index's vectors are stored once across the set while every device computes whole answers
//! for the requests it takes. No list is copied and no partial result crosses devices.

use super::{top_rows, GpuIvf};
use cohort_gpu::GpuError;
use cohort_ivf::ivf::placement::Placement;
use cohort_ivf::IvfIndex;
use cudarc::driver::{CudaSlice, CudaStream};
use std::sync::Arc;

/// The whole index's layout on one device of a sharded set (see the module's text).
pub struct SpreadLists {
    /// u64 [nlist + 1]: the whole index's list offsets (lengths and candidate layout).
    pub offsets: CudaSlice<u64>,
    /// u32 [n]: the whole index's ids, cell-major as `offsets` delimits them.
    pub ids: CudaSlice<u32>,
    /// u64 [nlist]: the device address of each list's first row, on its owner.
    pub list_rows: CudaSlice<u64>,
    top_rows: Vec<usize>,
}

impl SpreadLists {
    /// The layout of `ix` on every device of a sharded set, `result[d]` on shard d's device,
    /// where `shards[d]` holds `placement`'s lists of device d (`GpuIvf::upload_shard` of
    /// `IvfShard::cut`). Each shard's list addresses are read back once, and every home gets
    /// the same table. The caller gives each device peer access to every other physical
    /// device of the set.
    pub fn for_set(
        ix: &IvfIndex,
        shards: &[&GpuIvf],
        placement: &Placement,
    ) -> Result<Vec<SpreadLists>, GpuError> {
        let list_rows = whole_list_rows(ix, shards, placement)?;
        let (whole, top) = (ix.offsets(), top_rows(ix.offsets()));
        shards
            .iter()
            .map(|home| {
                let s = home.ctx.new_stream()?;
                let spread = SpreadLists {
                    offsets: s.clone_htod(whole)?,
                    ids: s.clone_htod(ix.ids())?,
                    list_rows: s.clone_htod(&list_rows)?,
                    top_rows: top.clone(),
                };
                s.synchronize()?;
                Ok(spread)
            })
            .collect()
    }

    /// The longest candidate row a query probing `nprobe` lists makes (the whole index's).
    pub fn max_candidate_row(&self, nprobe: usize) -> usize {
        self.top_rows[nprobe.min(self.top_rows.len() - 1)]
    }

    /// Bytes it holds on the home device beyond the home's shard.
    pub fn device_bytes(&self) -> usize {
        8 * (self.offsets.len() + self.list_rows.len()) + 4 * self.ids.len()
    }

    /// The stream-free addresses a persistent kernel takes: (offsets, ids, list_rows).
    pub fn addrs(&self, s: &Arc<CudaStream>) -> (u64, u64, u64) {
        use cohort_gpu::persistent::rt::addr;
        (
            addr(&self.offsets, s),
            addr(&self.ids, s),
            addr(&self.list_rows, s),
        )
    }
}

/// The device address of every list's first row, on the device that holds it.
fn whole_list_rows(
    ix: &IvfIndex,
    shards: &[&GpuIvf],
    placement: &Placement,
) -> Result<Vec<u64>, GpuError> {
    let owner: Vec<usize> = placement.owner.iter().map(|&d| d as usize).collect();
    assert_eq!(owner.len(), ix.nlist, "an owner per list");
    assert_eq!(placement.devices, shards.len(), "a shard per device");
    assert!(owner.iter().all(|&d| d < shards.len()), "owners are shards");
    let whole = ix.offsets();
    let mut rows = Vec::with_capacity(shards.len());
    for shard in shards {
        assert_eq!(shard.nlist, ix.nlist, "shards of this index");
        assert_eq!(shard.dim, ix.dim, "shards of this index");
        assert_eq!(
            shard.precision, shards[0].precision,
            "one precision over the set"
        );
        rows.push(shard.list_rows(&shard.ctx.new_stream()?)?);
    }
    // A shard holds its own lists whole, in the index's order, and the others empty (the
    // layout `IvfShard::cut` makes): list c's rows end where list c + 1's start.
    for (d, (r, shard)) in rows.iter().zip(shards).enumerate() {
        let row_bytes = (ix.dim * shard.vectors.bytes_per_elem()) as u64;
        for c in 0..ix.nlist - 1 {
            let held = if owner[c] == d {
                whole[c + 1] - whole[c]
            } else {
                0
            };
            assert_eq!(
                r[c + 1] - r[c],
                held * row_bytes,
                "shard {d}'s list {c}: the rows of the placement given"
            );
        }
    }
    Ok(owner.iter().enumerate().map(|(c, &d)| rows[d][c]).collect())
}
