//! The reducer slot of a sharded index's query (Centaur): each device scanning its lists for a
//! cohort writes its k nearest per query into the row the query's home device reserved for it
//! before the filter ran (`Buffers::part_ids`, row q = devices x k), so no partial ever waits
//! for space; the home then merges each row into the query's k nearest with the per-pair
//! plan's reduce (exact, ties to the smaller id, as the CPU twin's `stages::reduce`).

use super::{Buffers, GpuIvf, ScanIo, GPU_MAX_CANDIDATES};
use cohort_gpu::launch::Dev;
use cohort_gpu::GpuError;
use cudarc::driver::CudaStream;
use std::sync::Arc;

/// Whether a cohort of k nearest per query fits a reducer row of `devices` partials.
pub fn check_devices(devices: usize, k: usize) -> Result<(), String> {
    if devices * k > GPU_MAX_CANDIDATES {
        return Err(format!(
            "a sharded index's reducer merges devices x k <= {GPU_MAX_CANDIDATES} candidates \
             per query ({devices} devices, k {k})"
        ));
    }
    Ok(())
}

impl GpuIvf {
    /// Where device `d` of `devices` scans the cohort in `b` (on the home device): the queries
    /// and probes there, its partials into column d of the reducer rows.
    pub fn reducer_io(
        &self,
        s: &CudaStream,
        b: &mut Buffers,
        d: usize,
        devices: usize,
        k: usize,
    ) -> ScanIo {
        assert!(d < devices, "device {d} of {devices}");
        let col = (d * k * 4) as u64;
        ScanIo {
            queries: Dev::of(&b.q, s),
            probes: Dev::of(&b.probes, s),
            out_ids: Dev::raw(Dev::of_mut(&mut b.part_ids, s).addr() + col),
            out_dist: Dev::raw(Dev::of_mut(&mut b.part_dist, s).addr() + col),
            out_stride: devices * k,
        }
    }

    /// Merges the reducer rows of the first `nq` queries (`devices` partials of k each) into
    /// `b.out_ids` / `b.out_dist` (nq x k). Asynchronous on `s`, after every partial's scan.
    pub fn reduce_into(
        &self,
        s: &Arc<CudaStream>,
        b: &mut Buffers,
        nq: usize,
        devices: usize,
        k: usize,
    ) -> Result<(), GpuError> {
        check_devices(devices, k).map_err(GpuError::Invalid)?;
        if nq > b.cap || b.part_ids.len() < nq * devices * k {
            return Err(GpuError::Invalid(format!(
                "reducer rows for {nq} queries of {devices} x {k} in buffers of {}",
                b.cap
            )));
        }
        let Buffers {
            part_ids,
            part_dist,
            out_ids,
            out_dist,
            ..
        } = b;
        self.run_reduce(s, part_ids, part_dist, out_ids, out_dist, nq, devices, k)
    }
}
