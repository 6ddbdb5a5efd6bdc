//! Czarnul's multi-stream CPU+GPU processing, as a runnable benchmark: a stream of packets
//! (two input chunks, one output element per GPU thread) processed by one or more GPUs over
//! S CUDA streams each and by CPU threads, all taking packets from one shared counter (the
//! paper's critical section), so faster workers take more packets.
//!
//! - memory modes: `pinned` (page-locked inputs, async copies into per-stream device buffers),
//!   `managed` (inputs and outputs in cudaMallocManaged memory, migrated on touch) and
//!   `managed-prefetch` (as managed, with the packet's inputs prefetched on its stream before
//!   the kernel and its output prefetched back after);
//! - version A: one host thread per GPU issues packets to its S streams in turn; version B: S
//!   host threads per GPU, one stream each.
//!
//! [`packet_cpu`] is the kernel's twin: the CPU threads compute with it and sampled GPU
//! packets are checked against it.

use cohort_gpu::kernel_args;
use cohort_gpu::launch::{ArgsLayout, Dev, Grid, Kernel, KernelDecl, Work};
use cohort_gpu::{load_module, DeviceInfo, GpuError};
use cudarc::driver::sys::{self, CUdeviceptr};
use cudarc::driver::{result, CudaContext, CudaStream};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// The paper's launch shape.
pub const BLOCKS: usize = 256;
pub const THREADS_PER_BLOCK: usize = 1024;
pub const OUT_FLOATS: usize = BLOCKS * THREADS_PER_BLOCK;
/// The benchmark's default: a packet's output is checked against the CPU twin every this many
/// packets (and the last).
pub const CHECK_EVERY: usize = 61;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryMode {
    Pinned,
    Managed,
    ManagedPrefetch,
}

impl std::str::FromStr for MemoryMode {
    type Err = String;
    fn from_str(s: &str) -> Result<MemoryMode, String> {
        match s {
            "pinned" => Ok(MemoryMode::Pinned),
            "managed" => Ok(MemoryMode::Managed),
            "managed-prefetch" => Ok(MemoryMode::ManagedPrefetch),
            _ => Err(format!(
                "unknown memory mode {s:?} (pinned, managed, managed-prefetch)"
            )),
        }
    }
}

impl MemoryMode {
    pub fn name(self) -> &'static str {
        match self {
            MemoryMode::Pinned => "pinned",
            MemoryMode::Managed => "managed",
            MemoryMode::ManagedPrefetch => "managed-prefetch",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// One host thread per GPU, S streams in turn.
    A,
    /// S host threads per GPU, one stream each.
    B,
}

impl std::str::FromStr for Version {
    type Err = String;
    fn from_str(s: &str) -> Result<Version, String> {
        match s {
            "A" | "a" => Ok(Version::A),
            "B" | "b" => Ok(Version::B),
            _ => Err(format!("unknown version {s:?} (A, B)")),
        }
    }
}

/// Start position of thread `t` in a chunk of `n` elements (the kernel's `stream_start`).
fn start(t: usize, n: usize) -> usize {
    ((t as u32).wrapping_mul(2_654_435_761) % n as u32) as usize
}

/// The kernel's twin: `out[t]` for every thread of the launch.
pub fn packet_cpu(a: &[f32], b: &[f32], out: &mut [f32], inner: usize) {
    let n = a.len();
    assert!(n == b.len() && n >= 128, "chunks of at least 128 elements");
    for (t, o) in out.iter_mut().enumerate() {
        let mut j = start(t, n);
        let mut acc = 0f32;
        for _ in 0..inner {
            let j2 = if j + 1 == n { 0 } else { j + 1 };
            let avg_a = 0.5 * (a[j] + a[j2]);
            let avg_b = 0.5 * (b[j] + b[j2]);
            acc += (avg_a - avg_b).abs();
            j += 97;
            if j >= n {
                j -= n;
            }
        }
        *o = acc;
    }
}

/// What one run asks for.
#[derive(Debug, Clone)]
pub struct RunConfig {
    pub packets: usize,
    /// Elements per input chunk (f32).
    pub chunk_floats: usize,
    pub inner: usize,
    pub streams: usize,
    pub version: Version,
    pub mode: MemoryMode,
    pub cpu_threads: usize,
    /// Every this many GPU packets (and the last) is checked against the CPU twin.
    pub check_every: usize,
}

/// What one run measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunResult {
    pub seconds: f64,
    pub packets_per_s: f64,
    pub input_gb_per_s: f64,
    pub gpu_packets: Vec<u64>,
    pub cpu_packets: u64,
    /// GPU packets compared with the CPU twin (all equal, else the run is an error).
    pub checked: u64,
}

/// GPU outputs kept for the check against the CPU twin: (packet, output).
type Kept = std::sync::Mutex<Vec<(usize, Vec<f32>)>>;

/// The inputs of every packet, in memory of the mode's kind, filled once.
pub struct Inputs {
    ptr: *mut f32,
    len: usize,
    managed: bool,
}

// SAFETY: the buffer is written once at creation and only read afterwards (by host threads
// through slices and by the devices through its address).
unsafe impl Send for Inputs {}
unsafe impl Sync for Inputs {}

impl Inputs {
    /// `packets` x 2 chunks, deterministic values. Pinned memory is portable (every GPU may
    /// copy from it); managed memory is checked against what `ctx`'s GPU has free first.
    pub fn new(
        ctx: &Arc<CudaContext>,
        mode: MemoryMode,
        packets: usize,
        chunk_floats: usize,
        extra_managed_bytes: usize,
    ) -> Result<Inputs, GpuError> {
        let len = packets * 2 * chunk_floats;
        let bytes = len * 4;
        ctx.bind_to_thread()?;
        let (ptr, managed) = match mode {
            MemoryMode::Pinned => {
                // SAFETY: a fresh allocation of `bytes`, filled below before any read.
                let p = unsafe { result::malloc_host(bytes, sys::CU_MEMHOSTALLOC_PORTABLE) }?;
                (p as *mut f32, false)
            }
            MemoryMode::Managed | MemoryMode::ManagedPrefetch => {
                let (free, _) = result::mem_get_info()?;
                if bytes + extra_managed_bytes > free {
                    return Err(GpuError::Invalid(format!(
                        "{} MB of managed memory asked, {} MB free on the GPU",
                        (bytes + extra_managed_bytes) >> 20,
                        free >> 20
                    )));
                }
                // SAFETY: as above.
                let p = unsafe {
                    result::malloc_managed(bytes, sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL)
                }?;
                (p as *mut f32, true)
            }
        };
        let me = Inputs { ptr, len, managed };
        {
            use rand::{Rng, SeedableRng};
            use rayon::prelude::*;
            // SAFETY: ptr holds len f32, host-accessible in both kinds of memory.
            let all = unsafe { std::slice::from_raw_parts_mut(ptr, len) };
            all.par_chunks_mut(chunk_floats)
                .enumerate()
                .for_each(|(i, c)| {
                    let mut rng = rand::rngs::SmallRng::seed_from_u64(i as u64);
                    c.iter_mut().for_each(|v| *v = rng.gen_range(-1.0..1.0));
                });
        }
        Ok(me)
    }

    pub fn chunk(&self, packet: usize, which: usize, chunk_floats: usize) -> &[f32] {
        let at = (packet * 2 + which) * chunk_floats;
        assert!(at + chunk_floats <= self.len);
        // SAFETY: in bounds (asserted); the memory is only read after creation.
        unsafe { std::slice::from_raw_parts(self.ptr.add(at), chunk_floats) }
    }

    fn address(&self, packet: usize, which: usize, chunk_floats: usize) -> CUdeviceptr {
        self.chunk(packet, which, chunk_floats).as_ptr() as CUdeviceptr
    }

    /// Managed inputs back in host memory, so every run starts with the data where a
    /// producer on the host left it (a previous run migrated them to a GPU).
    pub fn to_host(&self, stream: &CudaStream) -> Result<(), GpuError> {
        if self.managed {
            let host = sys::CUmemLocation {
                type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST,
                id: 0,
            };
            // SAFETY: the whole managed range, on a live stream.
            unsafe {
                result::mem_prefetch_async(
                    self.ptr as CUdeviceptr,
                    self.len * 4,
                    host,
                    stream.cu_stream(),
                )
            }?;
            stream.synchronize()?;
        }
        Ok(())
    }
}

impl Drop for Inputs {
    fn drop(&mut self) {
        // SAFETY: allocated by the matching call in `new`, freed once.
        unsafe {
            if self.managed {
                let _ = result::free_sync(self.ptr as CUdeviceptr);
            } else {
                let _ = result::free_host(self.ptr as *mut std::ffi::c_void);
            }
        }
    }
}

kernel_args! {
    /// One packet: out[t] accumulates `inner` rounds over the inputs' n_in floats.
    pub struct StreamPacketArgs {
        a: Dev<f32>,
        b: Dev<f32>,
        out: Dev<f32>,
        n_in: u32,
        inner: i32,
    }
}

/// A fixed grid of BLOCKS x THREADS_PER_BLOCK threads, each owning one output float.
pub const PACKET: KernelDecl<StreamPacketArgs> =
    KernelDecl::new("stream_packet", THREADS_PER_BLOCK as u32, Grid::Sized);

pub(crate) fn checked() -> Vec<(&'static str, ArgsLayout)> {
    vec![PACKET.checked()]
}

/// One GPU: its context and the kernel.
pub struct StreamGpu {
    pub dev: DeviceInfo,
    ctx: Arc<CudaContext>,
    kernel: Kernel<StreamPacketArgs>,
}

/// A stream with the buffers of one packet in flight.
struct Lane {
    stream: Arc<CudaStream>,
    dev_a: CUdeviceptr,
    dev_b: CUdeviceptr,
    /// Device output (pinned mode) or managed output (managed modes).
    out: CUdeviceptr,
    /// Pinned mode: the host copy of the output.
    host_out: *mut f32,
    managed: bool,
    pending: Option<usize>,
}

// SAFETY: a lane is used by one thread at a time (moved into or borrowed by its worker).
unsafe impl Send for Lane {}

impl Drop for Lane {
    fn drop(&mut self) {
        let _ = self.stream.synchronize();
        // SAFETY: each pointer was allocated for this lane and is freed once.
        unsafe {
            if self.managed {
                let _ = result::free_sync(self.out);
            } else {
                let _ = result::free_sync(self.dev_a);
                let _ = result::free_sync(self.dev_b);
                let _ = result::free_sync(self.out);
                let _ = result::free_host(self.host_out as *mut std::ffi::c_void);
            }
        }
    }
}

impl StreamGpu {
    pub fn open(dev: &DeviceInfo) -> Result<StreamGpu, GpuError> {
        let ctx = cohort_gpu::launch::context(dev)?;
        let kernel = Kernel::load(
            &load_module(&ctx, dev, crate::source("streams.cu"))?,
            &PACKET,
        )?;
        Ok(StreamGpu {
            dev: dev.clone(),
            ctx,
            kernel,
        })
    }

    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    fn lane(&self, mode: MemoryMode, chunk_floats: usize) -> Result<Lane, GpuError> {
        self.ctx.bind_to_thread()?;
        let stream = self.ctx.new_stream()?;
        let out_bytes = OUT_FLOATS * 4;
        // SAFETY: fresh allocations, written by copies/kernels before they are read.
        unsafe {
            Ok(match mode {
                MemoryMode::Pinned => Lane {
                    dev_a: result::malloc_sync(chunk_floats * 4)?,
                    dev_b: result::malloc_sync(chunk_floats * 4)?,
                    out: result::malloc_sync(out_bytes)?,
                    host_out: result::malloc_host(out_bytes, 0)? as *mut f32,
                    stream,
                    managed: false,
                    pending: None,
                },
                _ => Lane {
                    dev_a: 0,
                    dev_b: 0,
                    out: result::malloc_managed(
                        out_bytes,
                        sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL,
                    )?,
                    host_out: std::ptr::null_mut(),
                    stream,
                    managed: true,
                    pending: None,
                },
            })
        }
    }

    /// Queues packet `p` on `lane`: inputs in, kernel, output back.
    fn issue(
        &self,
        lane: &mut Lane,
        inputs: &Inputs,
        p: usize,
        cfg: &RunConfig,
    ) -> Result<(), GpuError> {
        let cs = lane.stream.cu_stream();
        let n = cfg.chunk_floats;
        let (a, b) = match cfg.mode {
            MemoryMode::Pinned => {
                // SAFETY: device buffers of n f32; sources are pinned and outlive the run.
                unsafe {
                    result::memcpy_htod_async(lane.dev_a, inputs.chunk(p, 0, n), cs)?;
                    result::memcpy_htod_async(lane.dev_b, inputs.chunk(p, 1, n), cs)?;
                }
                (lane.dev_a, lane.dev_b)
            }
            MemoryMode::Managed => (inputs.address(p, 0, n), inputs.address(p, 1, n)),
            MemoryMode::ManagedPrefetch => {
                let here = sys::CUmemLocation {
                    type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                    id: self.dev.ordinal as i32,
                };
                // SAFETY: both chunks lie inside the managed input allocation.
                unsafe {
                    result::mem_prefetch_async(inputs.address(p, 0, n), 2 * n * 4, here, cs)?;
                }
                (inputs.address(p, 0, n), inputs.address(p, 1, n))
            }
        };
        let args = StreamPacketArgs {
            a: Dev::raw(a),
            b: Dev::raw(b),
            out: Dev::raw(lane.out),
            n_in: n as u32,
            inner: cfg.inner as i32,
        };
        // SAFETY: the inputs hold n floats each, the output OUT_FLOATS.
        unsafe {
            self.kernel
                .launch(&lane.stream, Work::Grid(BLOCKS as u32, 1), 0, &args)
        }?;
        match cfg.mode {
            MemoryMode::Pinned => {
                // SAFETY: host_out holds OUT_FLOATS f32, read only after a synchronize.
                let host = unsafe { std::slice::from_raw_parts_mut(lane.host_out, OUT_FLOATS) };
                unsafe { result::memcpy_dtoh_async(host, lane.out, cs) }?;
            }
            MemoryMode::ManagedPrefetch => {
                let host = sys::CUmemLocation {
                    type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST,
                    id: 0,
                };
                // SAFETY: the lane's whole managed output.
                unsafe { result::mem_prefetch_async(lane.out, OUT_FLOATS * 4, host, cs) }?;
            }
            MemoryMode::Managed => {}
        }
        lane.pending = Some(p);
        Ok(())
    }

    /// Waits for the lane's packet and consumes its output: every `check_every`-th packet
    /// and the last are kept aside, to be compared with the CPU twin after the clock stops
    /// (the twin costs a CPU thread up to 100 ms a packet, which would otherwise be measured
    /// as the issuing thread's time).
    fn settle(lane: &mut Lane, cfg: &RunConfig, kept: &Kept) -> Result<(), GpuError> {
        let Some(p) = lane.pending.take() else {
            return Ok(());
        };
        lane.stream.synchronize()?;
        let out_ptr = if lane.managed {
            lane.out as *const f32
        } else {
            lane.host_out as *const f32
        };
        // SAFETY: the stream finished writing OUT_FLOATS f32 there.
        let out = unsafe { std::slice::from_raw_parts(out_ptr, OUT_FLOATS) };
        if p % cfg.check_every.max(1) == 0 || p + 1 == cfg.packets {
            kept.lock().expect("kept outputs").push((p, out.to_vec()));
        }
        Ok(())
    }

    /// Compares the kept outputs with the CPU twin (in parallel); returns how many.
    fn verify(kept: Kept, inputs: &Inputs, cfg: &RunConfig) -> Result<u64, GpuError> {
        use rayon::prelude::*;
        let kept = kept.into_inner().expect("kept outputs");
        let n = cfg.chunk_floats;
        kept.par_iter().try_for_each(|(p, out)| {
            let mut want = vec![0f32; OUT_FLOATS];
            packet_cpu(
                inputs.chunk(*p, 0, n),
                inputs.chunk(*p, 1, n),
                &mut want,
                cfg.inner,
            );
            match (0..OUT_FLOATS).find(|&t| want[t].to_bits() != out[t].to_bits()) {
                Some(t) => Err(GpuError::Invalid(format!(
                    "packet {p} thread {t}: GPU {} CPU {}",
                    out[t], want[t]
                ))),
                None => Ok(()),
            }
        })?;
        Ok(kept.len() as u64)
    }

    /// Kernel alone on device-resident inputs and the copies alone (pinned), per packet, in
    /// seconds: the measured compute/communication ratio of `inner`.
    pub fn kernel_and_copy_time(
        &self,
        inputs: &Inputs,
        cfg: &RunConfig,
        reps: usize,
    ) -> Result<(f64, f64), GpuError> {
        let mut lane = self.lane(MemoryMode::Pinned, cfg.chunk_floats)?;
        let cs = lane.stream.cu_stream();
        let n = cfg.chunk_floats;
        // SAFETY: the lane's pinned output of OUT_FLOATS f32, used by this thread only.
        let host = unsafe { std::slice::from_raw_parts_mut(lane.host_out, OUT_FLOATS) };
        let copies = |lane: &Lane, host: &mut [f32]| -> Result<(), GpuError> {
            // SAFETY: as in `issue`.
            unsafe {
                result::memcpy_htod_async(lane.dev_a, inputs.chunk(0, 0, n), cs)?;
                result::memcpy_htod_async(lane.dev_b, inputs.chunk(0, 1, n), cs)?;
                result::memcpy_dtoh_async(host, lane.out, cs)?;
            }
            Ok(())
        };
        copies(&lane, host)?;
        lane.stream.synchronize()?;
        let t = Instant::now();
        for _ in 0..reps {
            copies(&lane, host)?;
        }
        lane.stream.synchronize()?;
        let copy = t.elapsed().as_secs_f64() / reps as f64;
        let args = StreamPacketArgs {
            a: Dev::raw(lane.dev_a),
            b: Dev::raw(lane.dev_b),
            out: Dev::raw(lane.out),
            n_in: n as u32,
            inner: cfg.inner as i32,
        };
        let t = Instant::now();
        for _ in 0..reps {
            // SAFETY: as in `issue`.
            unsafe {
                self.kernel
                    .launch(&lane.stream, Work::Grid(BLOCKS as u32, 1), 0, &args)
            }?;
        }
        lane.stream.synchronize()?;
        let kernel = t.elapsed().as_secs_f64() / reps as f64;
        lane.pending = None;
        Ok((kernel, copy))
    }
}

/// Runs `cfg.packets` packets over `gpus` (version A or B each) and `cfg.cpu_threads` CPU
/// threads, all taking packets from one counter.
pub fn run(gpus: &[StreamGpu], inputs: &Inputs, cfg: &RunConfig) -> Result<RunResult, GpuError> {
    if cfg.streams == 0 || (gpus.is_empty() && cfg.cpu_threads == 0) {
        return Err(GpuError::Invalid(
            "nothing to process the packets with".into(),
        ));
    }
    let next = AtomicUsize::new(0);
    let kept: Kept = std::sync::Mutex::new(Vec::new());
    let gpu_done: Vec<AtomicU64> = gpus.iter().map(|_| AtomicU64::new(0)).collect();
    let cpu_done = AtomicU64::new(0);
    // Lanes are made before the clock starts (allocation is not part of the stream).
    let mut lanes: Vec<Vec<Lane>> = Vec::new();
    for g in gpus {
        let mut l = Vec::new();
        for _ in 0..cfg.streams {
            l.push(g.lane(cfg.mode, cfg.chunk_floats)?);
        }
        lanes.push(l);
    }
    let t = Instant::now();
    let outcome: Result<(), GpuError> = std::thread::scope(|sc| {
        let mut handles = Vec::new();
        for ((g, gl), done) in gpus.iter().zip(lanes.iter_mut()).zip(&gpu_done) {
            let (next, kept) = (&next, &kept);
            match cfg.version {
                Version::A => handles.push(sc.spawn(move || -> Result<(), GpuError> {
                    g.ctx.bind_to_thread()?;
                    let mut turn = 0;
                    loop {
                        let p = next.fetch_add(1, Ordering::Relaxed);
                        let lane = &mut gl[turn % cfg.streams];
                        turn += 1;
                        StreamGpu::settle(lane, cfg, kept)?;
                        if p >= cfg.packets {
                            break;
                        }
                        g.issue(lane, inputs, p, cfg)?;
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    for lane in gl.iter_mut() {
                        StreamGpu::settle(lane, cfg, kept)?;
                    }
                    Ok(())
                })),
                Version::B => {
                    for lane in gl.iter_mut() {
                        handles.push(sc.spawn(move || -> Result<(), GpuError> {
                            g.ctx.bind_to_thread()?;
                            loop {
                                let p = next.fetch_add(1, Ordering::Relaxed);
                                if p >= cfg.packets {
                                    return Ok(());
                                }
                                g.issue(lane, inputs, p, cfg)?;
                                StreamGpu::settle(lane, cfg, kept)?;
                                done.fetch_add(1, Ordering::Relaxed);
                            }
                        }));
                    }
                }
            }
        }
        for _ in 0..cfg.cpu_threads {
            let (next, cpu_done) = (&next, &cpu_done);
            handles.push(sc.spawn(move || -> Result<(), GpuError> {
                let mut out = vec![0f32; OUT_FLOATS];
                let n = cfg.chunk_floats;
                loop {
                    let p = next.fetch_add(1, Ordering::Relaxed);
                    if p >= cfg.packets {
                        return Ok(());
                    }
                    packet_cpu(
                        inputs.chunk(p, 0, n),
                        inputs.chunk(p, 1, n),
                        &mut out,
                        cfg.inner,
                    );
                    std::hint::black_box(&out);
                    cpu_done.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
        handles
            .into_iter()
            .try_for_each(|h| h.join().expect("stream worker"))
    });
    outcome?;
    let secs = t.elapsed().as_secs_f64();
    drop(lanes);
    let checked = StreamGpu::verify(kept, inputs, cfg)?;
    let total = cfg.packets as f64;
    Ok(RunResult {
        seconds: secs,
        packets_per_s: total / secs,
        input_gb_per_s: total * (2 * cfg.chunk_floats * 4) as f64 / secs / 1e9,
        gpu_packets: gpu_done.iter().map(|d| d.load(Ordering::Relaxed)).collect(),
        cpu_packets: cpu_done.load(Ordering::Relaxed),
        checked,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_and_versions_parse_and_garbage_is_named() {
        assert_eq!("managed-prefetch".parse(), Ok(MemoryMode::ManagedPrefetch));
        assert_eq!("b".parse(), Ok(Version::B));
        let e = "unified".parse::<MemoryMode>().unwrap_err();
        assert!(
            e.contains("\"unified\"") && e.contains("pinned, managed"),
            "{e}"
        );
        let e = "C".parse::<Version>().unwrap_err();
        assert!(e.contains("\"C\"") && e.contains("A, B"), "{e}");
    }

    #[test]
    fn twin_averages_neighbouring_pairs() {
        let n = 128;
        let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let b = vec![0f32; n];
        let mut out = vec![0f32; 4];
        packet_cpu(&a, &b, &mut out, 1);
        for (t, o) in out.iter().enumerate() {
            let j = start(t, n);
            let j2 = (j + 1) % n;
            assert_eq!(*o, 0.5 * (a[j] + a[j2]));
        }
        // Twice the loop, twice the sum (same pairs one step of 97 on).
        packet_cpu(&a, &b, &mut out, 2);
        let j = (start(0, n) + 97) % n;
        assert_eq!(
            out[0],
            0.5 * (a[start(0, n)] + a[start(0, n) + 1]) + 0.5 * (a[j] + a[(j + 1) % n])
        );
    }
}
