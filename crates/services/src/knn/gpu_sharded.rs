//! k-NN on an index sharded over the serving devices (Centaur), on gpu-direct and gpu-cohort.
//!
//! Every device holds every centroid and only its own lists (`ivf::placement`); each device's
//! engine forms its own cohorts, as for a replicated index. A cohort's home device runs the
//! filter, then every device scans its lists of the cohort's probes on its own stream, reading
//! the queries and probes from the home and writing its k nearest per query into the reducer
//! row the home reserved for that query (`gpu_ivf::reducer`); the home waits for every device's
//! event, merges the rows and copies the answers out. No host round trip: one host thread per
//! device drives all of it. The devices address one another's memory directly: the virtual
//! GPUs of one device always can, physical GPUs need peer access (refused at start without it).

use super::gpu::{key, unkey, write_answer};
use super::gpu_ivf::reducer::check_devices;
use super::gpu_ivf::{check_shape, Buffers, GpuIvf};
use super::{parse_head, vector_into};
use cohort_engine::BatchBackend;
use cohort_gpu::engine::{GpuBackend, Pinned, StreamBuffers};
use cohort_gpu::{DeviceInfo, GpuError};
use cohort_knn::ivf::placement::Placement;
use cohort_proto::{ErrorCode, ErrorPayload};
use cudarc::driver::{sys, CudaContext, CudaEvent, CudaStream};
use std::sync::Arc;

/// Candidate distances one home's slot keeps over all the other devices of its set (each
/// holds its share); a cohort whose rows need more scans in passes. Every device keeps a set
/// for every home's slots, so N devices hold N x (N - 1) x slots of them: split by N, the
/// total grows as N, not N squared (15 virtual GPUs at a fixed 64 MiB each ran out of memory).
pub const SCAN_CANDIDATE_FLOATS: usize = 1 << 24;

/// The devices of one sharded index, in serving order.
pub struct ShardSet {
    pub devices: Vec<Arc<GpuIvf>>,
    pub placement: Placement,
}

impl ShardSet {
    /// The shards, uploaded (one per device of `devs`, device i holding `placement`'s lists
    /// of i), after making sure each device can address every other's memory.
    pub fn new(
        devs: &[DeviceInfo],
        shards: Vec<GpuIvf>,
        placement: Placement,
    ) -> Result<ShardSet, GpuError> {
        assert_eq!(devs.len(), shards.len(), "one shard per device");
        assert_eq!(
            placement.devices,
            devs.len(),
            "a placement for these devices"
        );
        let devices: Vec<Arc<GpuIvf>> = shards.into_iter().map(Arc::new).collect();
        for (a, da) in devs.iter().enumerate() {
            for (b, db) in devs.iter().enumerate() {
                if da.physical != db.physical {
                    enable_peer_access(&devices[a].ctx, &devices[b].ctx, da, db)?;
                }
            }
        }
        Ok(ShardSet { devices, placement })
    }

    /// The backend of the engine of device `home`.
    pub fn backend(self: &Arc<Self>, home: usize) -> KnnShardedGpu {
        assert!(home < self.devices.len());
        KnnShardedGpu {
            home,
            set: self.clone(),
        }
    }
}

/// Lets kernels of `from` read and write memory of `to` (two physical devices); an error that
/// says so when the hardware cannot.
fn enable_peer_access(
    from: &Arc<CudaContext>,
    to: &Arc<CudaContext>,
    fd: &DeviceInfo,
    td: &DeviceInfo,
) -> Result<(), GpuError> {
    let mut can = 0i32;
    // SAFETY: out-parameter; ordinals of devices the driver listed.
    let r = unsafe { sys::cuDeviceCanAccessPeer(&mut can, fd.physical as i32, td.physical as i32) };
    if r != sys::cudaError_enum::CUDA_SUCCESS || can == 0 {
        return Err(GpuError::Invalid(format!(
            "GPU {} cannot address GPU {}'s memory (no peer access): a sharded index needs \
             it; serve with knn.placement=replicate",
            fd.physical, td.physical
        )));
    }
    from.bind_to_thread()?;
    // SAFETY: both contexts are live; enabling twice reports a benign error.
    let r = unsafe { sys::cuCtxEnablePeerAccess(to.cu_ctx(), 0) };
    match r {
        sys::cudaError_enum::CUDA_SUCCESS
        | sys::cudaError_enum::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => Ok(()),
        e => Err(GpuError::Invalid(format!(
            "enabling peer access from GPU {} to GPU {}: {e:?}",
            fd.physical, td.physical
        ))),
    }
}

/// One device's engine's view of the sharded index: cohorts formed here run their filter
/// and reduction here and their scans on every device.
pub struct KnnShardedGpu {
    home: usize,
    set: Arc<ShardSet>,
}

impl KnnShardedGpu {
    fn ivf(&self) -> &GpuIvf {
        &self.set.devices[self.home]
    }
}

impl BatchBackend for KnnShardedGpu {
    fn batch_key(&self, payload: &[u8]) -> Result<u64, ErrorPayload> {
        let ivf = self.ivf();
        let h = parse_head(payload, ivf.dim, ivf.nlist, ivf.n)?;
        let nprobe = if h.nprobe == 0 {
            ivf.default_nprobe
        } else {
            h.nprobe
        };
        check_shape(ivf.nlist, h.k, nprobe)
            .and_then(|_| check_devices(self.set.devices.len(), h.k))
            .and_then(|_| {
                if nprobe > super::gpu_ivf::TILED_MAX_PROBE {
                    Err(format!(
                        "a sharded index serves nprobe up to {} on the gpu engines",
                        super::gpu_ivf::TILED_MAX_PROBE
                    ))
                } else {
                    Ok(())
                }
            })
            .map_err(|m| ErrorPayload::new(ErrorCode::BadRequest, m))?;
        Ok(key(h.k, nprobe))
    }
}

impl GpuBackend for KnnShardedGpu {
    fn context(&self) -> &Arc<CudaContext> {
        &self.ivf().ctx
    }

    fn stream_buffers(
        &self,
        stream: &Arc<CudaStream>,
        cap: usize,
    ) -> Result<Box<dyn StreamBuffers>, GpuError> {
        let ivf = self.ivf();
        let ctx = &ivf.ctx;
        let k = super::gpu_ivf::GPU_MAX_K;
        let mut scans = Vec::new();
        for (d, dev) in self.set.devices.iter().enumerate() {
            if d == self.home {
                continue;
            }
            let s = dev.ctx.new_stream()?;
            let share = SCAN_CANDIDATE_FLOATS / self.set.devices.len();
            let bufs = dev.scan_buffers(&s, cap, share)?;
            let done = dev.ctx.new_event(None)?;
            scans.push(Scan { d, s, bufs, done });
        }
        Ok(Box::new(ShardedBuffers {
            set: self.set.clone(),
            home: self.home,
            bufs: ivf.buffers(stream, cap)?,
            filtered: ctx.new_event(None)?,
            scans,
            q: Pinned::for_uploads(ctx, cap * ivf.dim)?,
            ids: Pinned::for_reads(ctx, cap * k)?,
            dist: Pinned::for_reads(ctx, cap * k)?,
            k_out: 0,
        }))
    }

    fn device_bytes(&self) -> usize {
        self.ivf().device_bytes
    }

    /// The cohort waits on other devices' streams: not one stream's graph.
    fn graphable(&self) -> bool {
        false
    }
}

/// A device other than the home scanning this slot's cohorts.
struct Scan {
    d: usize,
    s: Arc<CudaStream>,
    bufs: Buffers,
    done: CudaEvent,
}

struct ShardedBuffers {
    set: Arc<ShardSet>,
    home: usize,
    /// The home's buffers: queries, probes, reducer rows, answers (and its own scan).
    bufs: Buffers,
    /// Recorded on the home's stream once the probes are in.
    filtered: CudaEvent,
    scans: Vec<Scan>,
    q: Pinned<f32>,
    ids: Pinned<u32>,
    dist: Pinned<f32>,
    k_out: usize,
}

impl StreamBuffers for ShardedBuffers {
    fn stage(&mut self, _key: u64, row: usize, payload: &[u8]) -> Result<(), ErrorPayload> {
        let ivf = &self.set.devices[self.home];
        let dim = ivf.dim;
        let head = parse_head(payload, dim, ivf.nlist, ivf.n)?;
        vector_into(
            payload,
            head,
            &mut self.q.as_mut_slice()[row * dim..(row + 1) * dim],
        )
    }

    fn enqueue(&mut self, s: &Arc<CudaStream>, key: u64, rows: usize) -> Result<(), GpuError> {
        let (k, nprobe) = unkey(key);
        let home = &self.set.devices[self.home];
        let devices = self.set.devices.len();
        let dim = home.dim;
        s.memcpy_htod(
            &self.q.as_slice()[..rows * dim],
            &mut self.bufs.q.slice_mut(0..rows * dim),
        )?;
        home.filter_into(s, &mut self.bufs, rows, nprobe)?;
        self.filtered.record(s)?;
        for scan in &mut self.scans {
            let io = home.reducer_io(s, &mut self.bufs, scan.d, devices, k);
            scan.s.wait(&self.filtered)?;
            self.set.devices[scan.d].scan_into(&scan.s, &mut scan.bufs, io, rows, k, nprobe)?;
            scan.done.record(&scan.s)?;
        }
        // The home's own lists, on its stream meanwhile.
        let io = home.reducer_io(s, &mut self.bufs, self.home, devices, k);
        home.scan_into(s, &mut self.bufs, io, rows, k, nprobe)?;
        for scan in &self.scans {
            s.wait(&scan.done)?;
        }
        home.reduce_into(s, &mut self.bufs, rows, devices, k)?;
        s.memcpy_dtoh(
            &self.bufs.out_ids.slice(0..rows * k),
            &mut self.ids.as_mut_slice()[..rows * k],
        )?;
        s.memcpy_dtoh(
            &self.bufs.out_dist.slice(0..rows * k),
            &mut self.dist.as_mut_slice()[..rows * k],
        )?;
        self.k_out = k;
        Ok(())
    }

    fn answer(&mut self, key: u64, row: usize, out: &mut Vec<u8>) -> Result<(), ErrorPayload> {
        let (k, _) = unkey(key);
        debug_assert_eq!(k, self.k_out);
        let ids = &self.ids.as_slice()[row * k..(row + 1) * k];
        let dist = &self.dist.as_slice()[row * k..(row + 1) * k];
        write_answer(ids, dist, out);
        Ok(())
    }
}
