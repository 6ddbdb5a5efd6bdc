//! Calibration of the NUMA simulator on real GPUs (kernels in numa_calib.cu): a STREAM triad
//! and a 5-point stencil over arrays split in halves, half h in GPU h's memory, run
//!
//! - on one GPU with every half in its own memory (the single-socket baseline),
//! - on two GPUs, contiguous blocks of work, each GPU on the half it holds (locality),
//! - on two GPUs, contiguous blocks, each on the half its peer holds (all data remote),
//! - on two GPUs, interleaved chunks (CTA-sized, alternating GPUs): half the data remote.
//!
//! Peer halves are read and written through peer access (NVLink on the 2-GPU machine). With
//! one GPU the "two GPUs" are the same one (the selftest's kernel check). [`triad_cpu`] and
//! [`stencil_cpu`] are the kernels' twins; every run's output is compared with them.

use crate::{CALIB_CHUNK_FLOATS, CALIB_ROW_FLOATS, CALIB_THREADS, CALIB_TILE_ROWS};
use cohort_gpu::kernel_args;
use cohort_gpu::launch::{ArgsLayout, Dev, Grid, Kernel, KernelDecl, Work};
use cohort_gpu::{load_module, DeviceInfo, GpuError};
use cudarc::driver::sys::{self, CUdeviceptr};
use cudarc::driver::{result, CudaContext, CudaStream};
use serde::Serialize;
use std::sync::Arc;
use std::time::Instant;

pub const TRIAD_SCALE: f32 = 3.0;

/// How work and data are spread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Split {
    /// GPU 0 alone, all data in its memory.
    Single,
    /// Each GPU the contiguous half of the CTAs whose data it holds.
    ContiguousLocal,
    /// Each GPU the contiguous half whose data its peer holds.
    ContiguousPeer,
    /// CTA-sized chunks alternating between the GPUs; data split in halves.
    Interleaved,
}

pub const SPLITS: [Split; 4] = [
    Split::Single,
    Split::ContiguousLocal,
    Split::ContiguousPeer,
    Split::Interleaved,
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    Triad,
    Stencil,
}

/// The triad's twin: a = b + TRIAD_SCALE c.
pub fn triad_cpu(a: &mut [f32], b: &[f32], c: &[f32]) {
    for ((a, b), c) in a.iter_mut().zip(b).zip(c) {
        *a = b + TRIAD_SCALE * c;
    }
}

/// The stencil's twin over a rows x CALIB_ROW_FLOATS grid (edges copied).
pub fn stencil_cpu(out: &mut [f32], inp: &[f32], rows: usize) {
    let w = CALIB_ROW_FLOATS;
    assert_eq!(inp.len(), rows * w);
    for r in 0..rows {
        for c in 0..w {
            let i = r * w + c;
            let v = inp[i];
            out[i] = if r == 0 || r + 1 == rows || c == 0 || c + 1 == w {
                v
            } else {
                // Same association as the kernel: ((((v + up) + down) + left) + right).
                0.2 * ((((v + inp[i - w]) + inp[i + w]) + inp[i - 1]) + inp[i + 1])
            };
        }
    }
}

/// One device allocation, freed in its context on drop.
struct DevBuf {
    ctx: Arc<CudaContext>,
    ptr: CUdeviceptr,
}

impl DevBuf {
    fn new(ctx: &Arc<CudaContext>, data: &[f32]) -> Result<DevBuf, GpuError> {
        ctx.bind_to_thread()?;
        // SAFETY: a fresh allocation of the slice's size, filled from it.
        let ptr = unsafe { result::malloc_sync(std::mem::size_of_val(data)) }?;
        let b = DevBuf {
            ctx: ctx.clone(),
            ptr,
        };
        // SAFETY: `ptr` holds data.len() floats.
        unsafe { result::memcpy_htod_sync(ptr, data) }?;
        Ok(b)
    }

    fn read(&self, out: &mut [f32]) -> Result<(), GpuError> {
        self.ctx.bind_to_thread()?;
        // SAFETY: the buffer holds out.len() floats (made from a slice that long).
        unsafe { result::memcpy_dtoh_sync(out, self.ptr) }?;
        Ok(())
    }
}

impl Drop for DevBuf {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: allocated by malloc_sync in this context; no kernel uses it any more
            // (every run synchronises before returning).
            let _ = unsafe { result::free_sync(self.ptr) };
        }
    }
}

struct Gpu {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    triad: Kernel<CalibTriadArgs>,
    stencil: Kernel<CalibStencilArgs>,
}

/// An array in two halves; `halves[h]` on GPU `owner[h]`.
struct SplitArray {
    halves: [DevBuf; 2],
}

/// What one (kind, split) run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Measured {
    pub kind: Kind,
    pub split: Split,
    /// Median seconds per iteration (every GPU's launches of one iteration finished).
    pub seconds: f64,
    /// Bytes the kernel moves per iteration (reads + writes of every element once).
    pub bytes: u64,
    pub gb_per_s: f64,
    /// Output elements compared with the CPU twin (all of them).
    pub checked: u64,
}

kernel_args! {
    /// a = b + scale c over arrays split in halves (GPU 0's, GPU 1's).
    pub struct CalibTriadArgs {
        a0: Dev<f32>,
        a1: Dev<f32>,
        b0: Dev<f32>,
        b1: Dev<f32>,
        c0: Dev<f32>,
        c1: Dev<f32>,
        half: u64,
        first: u64,
        step: u64,
        scale: f32,
    }
}

kernel_args! {
    /// A five-point stencil over a grid whose rows are split in halves.
    pub struct CalibStencilArgs {
        out0: Dev<f32>,
        out1: Dev<f32>,
        in0: Dev<f32>,
        in1: Dev<f32>,
        rows: u64,
        first: u64,
        step: u64,
    }
}

/// A block per chunk (triad) or tile (stencil) of the launch's share: chunk first + i x step.
pub const TRIAD: KernelDecl<CalibTriadArgs> =
    KernelDecl::new("calib_triad", CALIB_THREADS as u32, Grid::BlockPerItem);
pub const STENCIL: KernelDecl<CalibStencilArgs> =
    KernelDecl::new("calib_stencil", CALIB_THREADS as u32, Grid::BlockPerItem);

pub(crate) fn checked() -> Vec<(&'static str, ArgsLayout)> {
    vec![TRIAD.checked(), STENCIL.checked()]
}

pub struct Calibration {
    gpus: Vec<Gpu>,
    pub devices: Vec<DeviceInfo>,
}

impl Calibration {
    /// Opens GPUs `devs` (one or two; with two, enables peer access both ways).
    pub fn open(devs: &[DeviceInfo]) -> Result<Calibration, GpuError> {
        if devs.is_empty() || devs.len() > 2 {
            return Err(GpuError::Invalid(format!(
                "calibration takes one or two GPUs, not {}",
                devs.len()
            )));
        }
        let mut gpus = Vec::new();
        for d in devs {
            let ctx = cohort_gpu::launch::context(d)?;
            let m = load_module(&ctx, d, crate::source("numa_calib.cu"))?;
            gpus.push(Gpu {
                stream: ctx.new_stream()?,
                triad: Kernel::load(&m, &TRIAD)?,
                stencil: Kernel::load(&m, &STENCIL)?,
                ctx,
            });
        }
        if gpus.len() == 2 {
            for (a, b) in [(0, 1), (1, 0)] {
                let mut can = 0;
                // SAFETY: plain queries and a context-scoped setting of this process.
                unsafe {
                    sys::cuDeviceCanAccessPeer(
                        &mut can,
                        gpus[a].ctx.cu_device(),
                        gpus[b].ctx.cu_device(),
                    )
                    .result()?;
                    if can == 0 {
                        return Err(GpuError::Invalid(format!(
                            "GPU {} cannot access GPU {}'s memory (no peer access)",
                            devs[a].ordinal, devs[b].ordinal
                        )));
                    }
                    gpus[a].ctx.bind_to_thread()?;
                    let r = sys::cuCtxEnablePeerAccess(gpus[b].ctx.cu_ctx(), 0);
                    if r != sys::CUresult::CUDA_SUCCESS
                        && r != sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
                    {
                        r.result()?;
                    }
                }
            }
        }
        Ok(Calibration {
            gpus,
            devices: devs.to_vec(),
        })
    }

    fn peer(&self) -> usize {
        self.gpus.len() - 1
    }

    fn split_array(&self, data: &[f32], on_one: bool) -> Result<SplitArray, GpuError> {
        let half = data.len() / 2;
        let second = if on_one { 0 } else { self.peer() };
        Ok(SplitArray {
            halves: [
                DevBuf::new(&self.gpus[0].ctx, &data[..half])?,
                DevBuf::new(&self.gpus[second].ctx, &data[half..])?,
            ],
        })
    }

    /// Local device-to-device copy rate of GPU 0 (read + write bytes per second) and the
    /// peer read rate (GPU 0 copying from GPU 1's memory into its own), over `bytes`.
    pub fn copy_rates(&self, bytes: usize, reps: usize) -> Result<(f64, Option<f64>), GpuError> {
        let n = bytes / 4;
        let zeros = vec![0f32; n];
        let a = DevBuf::new(&self.gpus[0].ctx, &zeros)?;
        let b = DevBuf::new(&self.gpus[0].ctx, &zeros)?;
        let far = if self.gpus.len() == 2 {
            Some(DevBuf::new(&self.gpus[1].ctx, &zeros)?)
        } else {
            None
        };
        let g = &self.gpus[0];
        let time = |src: CUdeviceptr| -> Result<f64, GpuError> {
            g.ctx.bind_to_thread()?;
            let mut v = Vec::new();
            for _ in 0..reps + 1 {
                let t = Instant::now();
                // SAFETY: both buffers hold `bytes`; peer access is on (UVA addresses).
                unsafe { result::memcpy_dtod_async(a.ptr, src, n * 4, g.stream.cu_stream()) }?;
                g.stream.synchronize()?;
                v.push(t.elapsed().as_secs_f64());
            }
            Ok(median(&mut v[1..]))
        };
        let local = 2.0 * (n * 4) as f64 / time(b.ptr)?;
        let peer = match &far {
            Some(f) => Some((n * 4) as f64 / time(f.ptr)?),
            None => None,
        };
        Ok((local, peer))
    }

    /// Runs `kind` split as `split` over `floats` floats per array (the stencil: a grid of
    /// floats / CALIB_ROW_FLOATS rows), `reps` timed iterations; checks the output against
    /// the CPU twin.
    pub fn run(
        &self,
        kind: Kind,
        split: Split,
        floats: usize,
        reps: usize,
        seed: u64,
    ) -> Result<Measured, GpuError> {
        let unit = 2 * CALIB_CHUNK_FLOATS.max(CALIB_ROW_FLOATS * CALIB_TILE_ROWS);
        if floats == 0 || !floats.is_multiple_of(unit) {
            return Err(GpuError::Invalid(format!(
                "calibration arrays must be a positive multiple of {unit} floats"
            )));
        }
        let single = split == Split::Single || self.gpus.len() == 1;
        let arrays = match kind {
            Kind::Triad => 3,
            Kind::Stencil => 2,
        };
        let inputs: Vec<Vec<f32>> = (0..arrays)
            .map(|i| random(floats, seed.wrapping_add(i as u64)))
            .collect();
        let bufs: Vec<SplitArray> = inputs
            .iter()
            .map(|d| self.split_array(d, split == Split::Single))
            .collect::<Result<_, _>>()?;
        let chunks = match kind {
            Kind::Triad => floats / CALIB_CHUNK_FLOATS,
            Kind::Stencil => floats / (CALIB_TILE_ROWS * CALIB_CHUNK_FLOATS),
        };
        // (gpu, first chunk, step, chunks) per launch of one iteration.
        let plan: Vec<(usize, usize, usize, usize)> = match split {
            Split::Single => vec![(0, 0, 1, chunks)],
            _ if single => vec![(0, 0, 1, chunks / 2), (0, chunks / 2, 1, chunks / 2)],
            Split::ContiguousLocal => vec![(0, 0, 1, chunks / 2), (1, chunks / 2, 1, chunks / 2)],
            Split::ContiguousPeer => vec![(0, chunks / 2, 1, chunks / 2), (1, 0, 1, chunks / 2)],
            Split::Interleaved => vec![(0, 0, 2, chunks / 2), (1, 1, 2, chunks / 2)],
        };
        let half = (floats / 2) as u64;
        let rows = (floats / CALIB_ROW_FLOATS) as u64;
        let p = |a: usize, h: usize| bufs[a].halves[h].ptr;
        let launch_all = || -> Result<(), GpuError> {
            for &(g, first, step, n) in &plan {
                let gpu = &self.gpus[g];
                gpu.ctx.bind_to_thread()?;
                let (first, step) = (first as u64, step as u64);
                let f = |a: usize, h: usize| Dev::raw(p(a, h));
                match kind {
                    Kind::Triad => {
                        let args = CalibTriadArgs {
                            a0: f(0, 0),
                            a1: f(0, 1),
                            b0: f(1, 0),
                            b1: f(1, 1),
                            c0: f(2, 0),
                            c1: f(2, 1),
                            half,
                            first,
                            step,
                            scale: TRIAD_SCALE,
                        };
                        // SAFETY: every pointer holds its half of `floats` floats; chunks
                        // cover [0, floats) exactly (checked: floats % unit == 0).
                        unsafe { gpu.triad.launch(&gpu.stream, Work::Items(n), 0, &args) }?;
                    }
                    Kind::Stencil => {
                        // Array 0 is the output, 1 the input.
                        let args = CalibStencilArgs {
                            out0: f(0, 0),
                            out1: f(0, 1),
                            in0: f(1, 0),
                            in1: f(1, 1),
                            rows,
                            first,
                            step,
                        };
                        // SAFETY: as above; tiles cover every row and column once.
                        unsafe { gpu.stencil.launch(&gpu.stream, Work::Items(n), 0, &args) }?;
                    }
                }
            }
            Ok(())
        };
        let sync_all = || -> Result<(), GpuError> {
            for g in &self.gpus {
                g.stream.synchronize()?;
            }
            Ok(())
        };
        launch_all()?;
        sync_all()?;
        let mut times = Vec::with_capacity(reps);
        for _ in 0..reps.max(1) {
            let t = Instant::now();
            launch_all()?;
            sync_all()?;
            times.push(t.elapsed().as_secs_f64());
        }
        let seconds = median(&mut times);
        // The output against the twin.
        let mut got = vec![0f32; floats];
        bufs[0].halves[0].read(&mut got[..floats / 2])?;
        bufs[0].halves[1].read(&mut got[floats / 2..])?;
        let mut want = vec![0f32; floats];
        match kind {
            Kind::Triad => triad_cpu(&mut want, &inputs[1], &inputs[2]),
            Kind::Stencil => stencil_cpu(&mut want, &inputs[1], rows as usize),
        }
        if let Some(i) =
            (0..floats).find(|&i| (got[i] - want[i]).abs() > 1e-5 * want[i].abs().max(1.0))
        {
            return Err(GpuError::Invalid(format!(
                "calibration {kind:?} {split:?}: element {i} is {} on the GPU, {} on the CPU twin",
                got[i], want[i]
            )));
        }
        let bytes = (floats * 4 * arrays) as u64;
        Ok(Measured {
            kind,
            split,
            seconds,
            bytes,
            gb_per_s: bytes as f64 / seconds / 1e9,
            checked: floats as u64,
        })
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Deterministic inputs in [-1, 1) (a cheap generator: gigabytes of them are made per run).
fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stencil_twin_averages_the_cross_and_copies_edges() {
        let rows = 4;
        let inp: Vec<f32> = (0..rows * CALIB_ROW_FLOATS)
            .map(|i| (i % 7) as f32)
            .collect();
        let mut out = vec![0f32; inp.len()];
        stencil_cpu(&mut out, &inp, rows);
        let w = CALIB_ROW_FLOATS;
        assert_eq!(out[5], inp[5]); // first row
        assert_eq!(out[w], inp[w]); // first column
        let i = w + 5;
        let want = 0.2 * (inp[i] + inp[i - w] + inp[i + w] + inp[i - 1] + inp[i + 1]);
        assert!((out[i] - want).abs() < 1e-6);
    }

    #[test]
    fn triad_twin_and_inputs() {
        let b = random(1000, 1);
        let c = random(1000, 2);
        assert!(b.iter().all(|v| (-1.0..1.0).contains(v)));
        assert_ne!(b, c);
        let mut a = vec![0.0; 1000];
        triad_cpu(&mut a, &b, &c);
        assert_eq!(a[7], b[7] + 3.0 * c[7]);
    }
}
