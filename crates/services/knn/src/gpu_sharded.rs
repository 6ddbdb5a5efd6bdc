//! k-NN on an index sharded over the serving devices (Centaur), on gpu-direct and gpu-cohort.
//!
//! Every device holds every centroid and only its own lists (`ivf::placement`); each device's
//! engine forms its own cohorts, as for a replicated index. A cohort's home device runs the
//! filter, then every device scans its lists of the cohort's probes on its own stream, reading
//! the queries and probes from the home and writing its k nearest per query into the reducer
//! row the home reserved for that query (`gpu_ivf::reducer`); the home waits for every device's
//! event, merges the rows and copies the answers out. No host round trip: one host thread per
//! device drives all of it. The devices address one another's memory directly where they can
//! (`Route::Peer`: the virtual GPUs of one device always, physical GPUs with peer access);
//! otherwise (`Route::Host`, `knn.shard_exchange=host` forces it) the queries, probes and
//! partial rows pass through mapped host memory: the home copies the probes out, each device
//! copies the cohort in and writes its partials there, the home copies the rows back in.

use super::config::Exchange;
use super::gpu::{key, unkey, PinnedAnswers};
use super::gpu_ivf::reducer::check_devices;
use super::gpu_ivf::{check_shape, Buffers, GpuIvf};
use super::{parse_head, vector_into};
use cohort_engine::BatchBackend;
use cohort_gpu::engine::{GpuBackend, Pinned, StreamBuffers};
use cohort_gpu::launch::Dev;
use cohort_gpu::persistent::mapped::{device_address, MappedMemory};
use cohort_gpu::{DeviceInfo, GpuError};
use cohort_ivf::ivf::placement::Placement;
use cohort_proto::{ErrorCode, ErrorPayload};
use cudarc::driver::{sys, CudaContext, CudaEvent, CudaStream};
use std::sync::Arc;

/// Candidate distances one home's slot keeps over all the other devices of its set (each
/// holds its share); a cohort whose rows need more scans in passes. Every device keeps a set
/// for every home's slots, so N devices hold N x (N - 1) x slots of them: split by N, the
/// total grows as N, not N squared (15 virtual GPUs at a fixed 64 MiB each ran out of memory).
pub const SCAN_CANDIDATE_FLOATS: usize = 1 << 24;

/// Largest k a host exchange carries: its partial rows are pinned host memory, sized
/// devices x this per query and slot.
pub const HOST_EXCHANGE_MAX_K: usize = 128;

/// Streams a device scans other homes' cohorts on, at most: they are shared round robin by
/// the homes' slots past this. Each stream beyond the driver's hardware queues
/// (`cohort_gpu::DEVICE_CONNECTIONS`, 32) shares one, and a scan waiting on its home's filter
/// would hold back unrelated work queued behind it there. With a stream per home slot, 15
/// virtual GPUs made 4 + 14 x 4 = 60 streams a device and served a third of 8 devices' rate.
/// 24 leaves room for the device's own engine slots (4 for k-NN's one batch key).
pub const SCAN_STREAMS_PER_DEVICE: usize = 24;

/// A device's scan streams, made on first use up to [`SCAN_STREAMS_PER_DEVICE`], then handed
/// out again in turn. A shared stream runs its homes' scans in the order they were queued:
/// each waits for its own home's filter, and records its own event after it.
struct StreamPool {
    streams: std::sync::Mutex<(Vec<Arc<CudaStream>>, usize)>,
}

impl StreamPool {
    fn new() -> StreamPool {
        StreamPool {
            streams: std::sync::Mutex::new((Vec::new(), 0)),
        }
    }

    fn take(&self, ctx: &Arc<CudaContext>) -> Result<Arc<CudaStream>, GpuError> {
        let mut g = self.streams.lock().expect("stream pool");
        let (streams, next) = &mut *g;
        if streams.len() < SCAN_STREAMS_PER_DEVICE {
            streams.push(ctx.new_stream()?);
            return Ok(streams[streams.len() - 1].clone());
        }
        let s = streams[*next % streams.len()].clone();
        *next += 1;
        Ok(s)
    }
}

/// How a cohort's data reaches the other devices and their partials come back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Kernels address the home's memory directly.
    Peer,
    /// Through mapped host memory.
    Host,
}

/// The devices of one sharded index, in serving order.
pub struct ShardSet {
    pub devices: Vec<Arc<GpuIvf>>,
    pub placement: Placement,
    pub route: Route,
    /// Per device, the streams it scans other homes' cohorts on.
    scan_streams: Vec<StreamPool>,
}

impl ShardSet {
    /// The shards, uploaded (one per device of `devs`, device i holding `placement`'s lists
    /// of i), after making sure each device can address every other's memory.
    pub fn new(
        devs: &[DeviceInfo],
        shards: Vec<GpuIvf>,
        placement: Placement,
        exchange: Exchange,
    ) -> Result<ShardSet, GpuError> {
        assert_eq!(devs.len(), shards.len(), "one shard per device");
        assert_eq!(
            placement.devices,
            devs.len(),
            "a placement for these devices"
        );
        let devices: Vec<Arc<GpuIvf>> = shards.into_iter().map(Arc::new).collect();
        let peers = || -> Result<(), GpuError> {
            for (a, da) in devs.iter().enumerate() {
                for (b, db) in devs.iter().enumerate() {
                    if da.physical != db.physical {
                        enable_peer_access(&devices[a].ctx, &devices[b].ctx, da, db)?;
                    }
                }
            }
            Ok(())
        };
        let route = match exchange {
            Exchange::Host => Route::Host,
            Exchange::Peer => peers().map(|_| Route::Peer)?,
            Exchange::Auto => match peers() {
                Ok(()) => Route::Peer,
                Err(e) => {
                    tracing::info!(why = %e, "knn shards exchange through host memory");
                    Route::Host
                }
            },
        };
        Ok(ShardSet {
            scan_streams: devices.iter().map(|_| StreamPool::new()).collect(),
            devices,
            placement,
            route,
        })
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
pub(super) fn enable_peer_access(
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
            "GPU {} cannot address GPU {}'s memory (no peer access): serve with \
             knn.shard_exchange=host or auto",
            fd.physical, td.physical
        )));
    }
    from.bind_to_thread()?;
    // SAFETY: both contexts are live; enabling twice reports a benign error.
    let r = unsafe { sys::cuCtxEnablePeerAccess(to.cu_ctx(), 0) };
    match r {
        sys::cudaError_enum::CUDA_SUCCESS
        | sys::cudaError_enum::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => {}
        e => {
            return Err(GpuError::Invalid(format!(
                "enabling peer access from GPU {} to GPU {}: {e:?}",
                fd.physical, td.physical
            )))
        }
    }
    pool_access(fd, td)
}

/// Lets kernels of `fd` use `td`'s stream-ordered allocations (every buffer cudarc allocates
/// where the driver has memory pools): peer access covers only ordinary allocations, a pool's
/// memory needs its own grant. Without it, a scan on one H100 reading its home's buffers on
/// the other faulted (measured: two H100s over NVLink, the peer route's run never ended).
fn pool_access(fd: &DeviceInfo, td: &DeviceInfo) -> Result<(), GpuError> {
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    // SAFETY: out-parameter; an ordinal the driver listed.
    let r = unsafe { sys::cuDeviceGetDefaultMemPool(&mut pool, td.physical as i32) };
    if r != sys::cudaError_enum::CUDA_SUCCESS {
        return Err(GpuError::Invalid(format!(
            "GPU {}'s memory pool: {r:?}",
            td.physical
        )));
    }
    let desc = sys::CUmemAccessDesc {
        location: sys::CUmemLocation {
            type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id: fd.physical as i32,
        },
        flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
    };
    // SAFETY: a live pool and one access descriptor.
    let r = unsafe { sys::cuMemPoolSetAccess(pool, &desc, 1) };
    if r != sys::cudaError_enum::CUDA_SUCCESS {
        return Err(GpuError::Invalid(format!(
            "granting GPU {} access to GPU {}'s memory pool: {r:?}",
            fd.physical, td.physical
        )));
    }
    Ok(())
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
                if self.set.route == Route::Host && h.k > HOST_EXCHANGE_MAX_K {
                    Err(format!(
                        "a sharded index exchanging through host memory serves k up to \
                         {HOST_EXCHANGE_MAX_K}"
                    ))
                } else {
                    Ok(())
                }
            })
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
        let mut scans = Vec::new();
        for (d, dev) in self.set.devices.iter().enumerate() {
            if d == self.home {
                continue;
            }
            let s = self.set.scan_streams[d].take(&dev.ctx)?;
            let share = SCAN_CANDIDATE_FLOATS / self.set.devices.len();
            let host = self.set.route == Route::Host;
            let bufs = dev.scan_buffers(&s, cap, share, host)?;
            let done = dev.ctx.new_event(None)?;
            scans.push(Scan { d, s, bufs, done });
        }
        let staging = match self.set.route {
            Route::Peer => Staging::Pinned(Pinned::for_uploads(ctx, cap * ivf.dim)?),
            Route::Host => Staging::Host(HostExchange::new(&self.set, cap)?),
        };
        Ok(Box::new(ShardedBuffers {
            set: self.set.clone(),
            home: self.home,
            staging,
            bufs: ivf.buffers(stream, cap)?,
            filtered: ctx.new_event(None)?,
            scans,
            answers: PinnedAnswers::new(ctx, cap)?,
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

/// One slot's mapped host memory for `Route::Host`: the cohort's queries (staged here
/// directly), its probes, and the reducer rows (devices x k per query).
struct HostExchange {
    mem: MappedMemory,
    /// The allocation's device address in each device's context.
    base: Vec<u64>,
    q: usize,
    probes: usize,
    ids: usize,
    dist: usize,
    end: usize,
}

impl HostExchange {
    fn new(set: &ShardSet, cap: usize) -> Result<HostExchange, GpuError> {
        // Mapped for every context (portable), so any device's may allocate it.
        let first = &set.devices[0];
        let align = |x: usize| x.next_multiple_of(256);
        let q = 0;
        let probes = align(q + 4 * cap * first.dim);
        let rows = cap * set.devices.len() * HOST_EXCHANGE_MAX_K;
        let ids = align(probes + 4 * cap * super::gpu_ivf::TILED_MAX_PROBE);
        let dist = align(ids + 4 * rows);
        let end = align(dist + 4 * rows);
        let mem = MappedMemory::zeroed(&first.ctx, end)?;
        let base = set
            .devices
            .iter()
            .map(|d| device_address(&d.ctx, mem.host_ptr()))
            .collect::<Result<_, _>>()?;
        Ok(HostExchange {
            mem,
            base,
            q,
            probes,
            ids,
            dist,
            end,
        })
    }

    /// `len` `T`s at byte `at`.
    fn host<T>(&mut self, at: usize, len: usize) -> &mut [T] {
        assert!(
            at + len * std::mem::size_of::<T>() <= self.end,
            "exchange bounds"
        );
        // SAFETY: inside the allocation (asserted), 256-aligned offsets of a page-aligned
        // base, plain numbers; GPU work that touches the range is ordered by events around
        // every host-side borrow (enqueue copies from it only on streams).
        unsafe { std::slice::from_raw_parts_mut(self.mem.host_ptr().add(at) as *mut T, len) }
    }
}

/// Where a slot stages its cohort's queries: pinned memory the home uploads from
/// (`Route::Peer`), or the host exchange every device copies from (`Route::Host`).
enum Staging {
    Pinned(Pinned<f32>),
    Host(HostExchange),
}

struct ShardedBuffers {
    set: Arc<ShardSet>,
    home: usize,
    staging: Staging,
    /// The home's buffers: queries, probes, reducer rows, answers (and its own scan).
    bufs: Buffers,
    /// Recorded on the home's stream once the probes are in.
    filtered: CudaEvent,
    scans: Vec<Scan>,
    answers: PinnedAnswers,
}

impl ShardedBuffers {
    /// `enqueue` for `Route::Host`: the same steps, with the cohort's queries and probes
    /// copied to each device and the partial rows written to host memory and copied back.
    fn enqueue_through_host(
        &mut self,
        s: &Arc<CudaStream>,
        key: u64,
        rows: usize,
    ) -> Result<(), GpuError> {
        let (k, nprobe) = unkey(key);
        let home = &self.set.devices[self.home];
        let devices = self.set.devices.len();
        let dim = home.dim;
        assert!(k <= HOST_EXCHANGE_MAX_K, "batch_key refuses larger k");
        let Staging::Host(x) = &mut self.staging else {
            unreachable!("the host route stages in the exchange")
        };
        let (xq, xp, xi, xd) = (x.q, x.probes, x.ids, x.dist);
        s.memcpy_htod(
            &x.host::<f32>(xq, rows * dim)[..],
            &mut self.bufs.q.slice_mut(0..rows * dim),
        )?;
        home.filter_into(s, &mut self.bufs, rows, nprobe)?;
        s.memcpy_dtoh(
            &self.bufs.probes.slice(0..rows * nprobe),
            x.host::<u32>(xp, rows * nprobe),
        )?;
        self.filtered.record(s)?;
        // Device d scans its copy of the cohort into column d of every reducer row, in host
        // memory as its context addresses it.
        let io =
            |base: u64, d: usize, scan: &mut Buffers, ss: &CudaStream| super::gpu_ivf::ScanIo {
                queries: Dev::of(&scan.q, ss),
                probes: Dev::of(&scan.probes, ss),
                out_ids: Dev::raw(base + (xi + d * k * 4) as u64),
                out_dist: Dev::raw(base + (xd + d * k * 4) as u64),
                out_stride: devices * k,
            };
        for scan in &mut self.scans {
            scan.s.wait(&self.filtered)?;
            scan.s.memcpy_htod(
                &x.host::<f32>(xq, rows * dim)[..],
                &mut scan.bufs.q.slice_mut(0..rows * dim),
            )?;
            scan.s.memcpy_htod(
                &x.host::<u32>(xp, rows * nprobe)[..],
                &mut scan.bufs.probes.slice_mut(0..rows * nprobe),
            )?;
            let at = io(x.base[scan.d], scan.d, &mut scan.bufs, &scan.s);
            self.set.devices[scan.d].scan_into(&scan.s, &mut scan.bufs, at, rows, k, nprobe)?;
            scan.done.record(&scan.s)?;
        }
        let at = io(x.base[self.home], self.home, &mut self.bufs, s);
        home.scan_into(s, &mut self.bufs, at, rows, k, nprobe)?;
        for scan in &self.scans {
            s.wait(&scan.done)?;
        }
        let n = rows * devices * k;
        s.memcpy_htod(
            &x.host::<u32>(xi, n)[..],
            &mut self.bufs.part_ids.slice_mut(0..n),
        )?;
        s.memcpy_htod(
            &x.host::<f32>(xd, n)[..],
            &mut self.bufs.part_dist.slice_mut(0..n),
        )?;
        home.reduce_into(s, &mut self.bufs, rows, devices, k)?;
        self.answers.copy_out(s, &self.bufs, rows, k)
    }
}

impl StreamBuffers for ShardedBuffers {
    fn stage(&mut self, _key: u64, row: usize, payload: &[u8]) -> Result<(), ErrorPayload> {
        let ivf = &self.set.devices[self.home];
        let dim = ivf.dim;
        let head = parse_head(payload, dim, ivf.nlist, ivf.n)?;
        let q = match &mut self.staging {
            Staging::Pinned(q) => &mut q.as_mut_slice()[row * dim..(row + 1) * dim],
            // Staged where every device copies it from.
            Staging::Host(x) => {
                let at = x.q;
                &mut x.host::<f32>(at, (row + 1) * dim)[row * dim..]
            }
        };
        vector_into(payload, head, q)
    }

    fn enqueue(&mut self, s: &Arc<CudaStream>, key: u64, rows: usize) -> Result<(), GpuError> {
        let Staging::Pinned(q) = &self.staging else {
            return self.enqueue_through_host(s, key, rows);
        };
        let (k, nprobe) = unkey(key);
        let home = &self.set.devices[self.home];
        let devices = self.set.devices.len();
        let dim = home.dim;
        s.memcpy_htod(
            &q.as_slice()[..rows * dim],
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
        self.answers.copy_out(s, &self.bufs, rows, k)
    }

    fn answer(&mut self, key: u64, row: usize, out: &mut Vec<u8>) -> Result<(), ErrorPayload> {
        self.answers.write(key, row, out);
        Ok(())
    }
}
