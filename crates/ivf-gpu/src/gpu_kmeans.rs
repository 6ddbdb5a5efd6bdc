//! k-means assignment on a GPU for index builds: the rows stream through the device in chunks
//! over several CUDA streams (copy in, assign, copy out overlap across chunks: Czarnul's
//! pattern), so a base of any size fits; centroids stay resident for the call. The training
//! loop around it (update, empty-cluster splits) is `cohort_ivf::kmeans`, shared with the CPU.

use super::kernels::kmeans::{KmeansAssignArgs, ASSIGN};
use cohort_gpu::engine::Pinned;
use cohort_gpu::launch::{Dev, Kernel, Work};
use cohort_gpu::{load_module, DeviceInfo, GpuError};
use cohort_ivf::assign::{norms, Assigner};
use cohort_ivf::{Metric, Vectors};
use cudarc::driver::{CudaContext, CudaSlice, CudaStream};
use rayon::prelude::*;
use std::sync::Arc;

/// Rows per chunk by default: 64K rows of 128 f32 = 32 MiB per copy, long enough to run at
/// the bus's rate, small enough that the first chunk's kernel starts early.
pub const DEFAULT_CHUNK_ROWS: usize = 1 << 16;
pub const DEFAULT_STREAMS: usize = 4;

/// One stream with its own staging and device buffers for one chunk in flight.
struct Lane {
    stream: Arc<CudaStream>,
    host_in: Pinned<f32>,
    host_out: Pinned<u32>,
    dev_in: CudaSlice<f32>,
    dev_out: CudaSlice<u32>,
    /// The chunk in flight: (first row, rows).
    pending: Option<(usize, usize)>,
}

pub struct GpuAssigner {
    dev: DeviceInfo,
    ctx: Arc<CudaContext>,
    kernel: Kernel<KmeansAssignArgs>,
    streams: usize,
    chunk_rows: usize,
    /// Lanes sized for `dim`; rebuilt when a call brings another dimension.
    lanes: Vec<Lane>,
    dim: usize,
    /// Bytes copied to the device and chunks processed, over the assigner's life.
    pub bytes_in: u64,
    pub chunks: u64,
}

impl GpuAssigner {
    pub fn new(
        dev: &DeviceInfo,
        streams: usize,
        chunk_rows: usize,
    ) -> Result<GpuAssigner, GpuError> {
        if streams == 0 || chunk_rows == 0 {
            return Err(GpuError::Invalid(
                "streams and chunk rows must be at least 1".into(),
            ));
        }
        // Each lane's buffers are used on its own stream only and reused after that stream
        // synchronised (the context tracks no events: typed launches need that).
        let ctx = cohort_gpu::launch::context(dev)?;
        let module = load_module(&ctx, dev, super::kernels::source("kmeans.cu"))?;
        let kernel = Kernel::load(&module, &ASSIGN)?;
        Ok(GpuAssigner {
            dev: dev.clone(),
            ctx,
            kernel,
            streams,
            chunk_rows,
            lanes: Vec::new(),
            dim: 0,
            bytes_in: 0,
            chunks: 0,
        })
    }

    fn lanes_for(&mut self, dim: usize) -> Result<(), GpuError> {
        if self.dim == dim && !self.lanes.is_empty() {
            return Ok(());
        }
        self.lanes.clear();
        for _ in 0..self.streams {
            let stream = self.ctx.new_stream()?;
            self.lanes.push(Lane {
                host_in: Pinned::for_uploads(&self.ctx, self.chunk_rows * dim)?,
                host_out: Pinned::for_reads(&self.ctx, self.chunk_rows)?,
                dev_in: stream.alloc_zeros::<f32>(self.chunk_rows * dim)?,
                dev_out: stream.alloc_zeros::<u32>(self.chunk_rows)?,
                stream,
                pending: None,
            });
        }
        self.dim = dim;
        Ok(())
    }

    fn run(&mut self, data: &Vectors, c: &Vectors, metric: Metric) -> Result<Vec<u32>, GpuError> {
        let dim = data.dim;
        if dim != c.dim || c.n == 0 || c.n > i32::MAX as usize || dim > i32::MAX as usize {
            return Err(GpuError::Invalid(format!(
                "cannot assign {} x {dim} rows to {} x {} centroids",
                data.n, c.n, c.dim
            )));
        }
        self.lanes_for(dim)?;
        let first = self.lanes[0].stream.clone();
        let cd = first.clone_htod(&c.data)?;
        let cn = first.clone_htod(&norms(c))?;
        first.synchronize()?;
        let (k, dim_i, metric_i) = (c.n as i32, dim as i32, metric.code() as i32);
        let mut out = vec![0u32; data.n];
        let nchunks = data.n.div_ceil(self.chunk_rows);
        for chunk in 0..nchunks + self.streams {
            let lane = &mut self.lanes[chunk % self.streams];
            // Collect what this lane did last before reusing its buffers.
            if let Some((start, rows)) = lane.pending.take() {
                lane.stream.synchronize()?;
                out[start..start + rows].copy_from_slice(&lane.host_out.as_slice()[..rows]);
            }
            if chunk >= nchunks {
                continue;
            }
            let start = chunk * self.chunk_rows;
            let rows = self.chunk_rows.min(data.n - start);
            let src = &data.data[start * dim..(start + rows) * dim];
            // Staging is a host copy on the issuing thread's path: spread it over the cores.
            lane.host_in.as_mut_slice()[..rows * dim]
                .par_chunks_mut(1 << 16)
                .zip(src.par_chunks(1 << 16))
                .for_each(|(d, s)| d.copy_from_slice(s));
            lane.stream
                .memcpy_htod(&lane.host_in.as_slice()[..rows * dim], &mut lane.dev_in)?;
            let s = &lane.stream;
            let args = KmeansAssignArgs {
                x: Dev::of(&lane.dev_in, s),
                n: rows as u64,
                c: Dev::of(&cd, s),
                c_norm: Dev::of(&cn, s),
                k,
                dim: dim_i,
                metric: metric_i,
                out: Dev::of_mut(&mut lane.dev_out, s),
            };
            // SAFETY: dev_in holds rows x dim f32 and dev_out rows u32 (chunk_rows each); the
            // centroids (k x dim) and their norms live until the call synchronises below.
            unsafe { self.kernel.launch(s, Work::Items(rows), 0, &args) }?;
            let view = lane.dev_out.slice(..rows);
            lane.stream
                .memcpy_dtoh(&view, &mut lane.host_out.as_mut_slice()[..rows])?;
            lane.pending = Some((start, rows));
            self.bytes_in += (rows * dim * 4) as u64;
            self.chunks += 1;
        }
        Ok(out)
    }
}

impl Assigner for GpuAssigner {
    fn describe(&self) -> String {
        format!(
            "gpu {} {} ({} streams, {} rows a chunk)",
            self.dev.ordinal, self.dev.name, self.streams, self.chunk_rows
        )
    }

    fn assign(
        &mut self,
        data: &Vectors,
        centroids: &Vectors,
        metric: Metric,
    ) -> anyhow::Result<Vec<u32>> {
        Ok(self.run(data, centroids, metric)?)
    }
}

/// Where an index build assigns rows to centroids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuildDevice {
    Auto,
    Cpu,
    Gpu(usize),
}

impl std::str::FromStr for BuildDevice {
    type Err = String;
    fn from_str(s: &str) -> Result<BuildDevice, String> {
        match s {
            "auto" => Ok(BuildDevice::Auto),
            "cpu" => Ok(BuildDevice::Cpu),
            "gpu" => Ok(BuildDevice::Gpu(0)),
            _ => s
                .strip_prefix("gpu:")
                .and_then(|n| n.parse().ok())
                .map(BuildDevice::Gpu)
                .ok_or_else(|| format!("unknown device {s:?} (auto, cpu, gpu, gpu:N)")),
        }
    }
}

/// The assigner for `device`: a GPU one where asked (an error if there is none) or where
/// `auto` finds one; the CPU otherwise, saying why on stderr.
pub fn assigner_for(
    device: BuildDevice,
    streams: usize,
    chunk_rows: usize,
) -> anyhow::Result<Box<dyn Assigner>> {
    let gpu = |ordinal: usize| -> anyhow::Result<Box<dyn Assigner>> {
        let devs = cohort_gpu::probe()?;
        let dev = cohort_gpu::find_device(&devs, ordinal)?;
        Ok(Box::new(GpuAssigner::new(dev, streams, chunk_rows)?))
    };
    match device {
        BuildDevice::Cpu => Ok(Box::new(cohort_ivf::assign::CpuGemm)),
        BuildDevice::Gpu(n) => gpu(n),
        BuildDevice::Auto => gpu(0).or_else(|e| {
            eprintln!("building on the CPU: {e:#}");
            Ok(Box::new(cohort_ivf::assign::CpuGemm))
        }),
    }
}
