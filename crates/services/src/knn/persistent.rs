//! k-NN on the persistent engine: the index already uploaded for the GPU engines
//! (`GpuIvf`), the stage kernels of `cohort_gpu`'s knn_persistent.cu (the per-pair stage
//! functions, so the CPU twins' answers), and per-slot buffers: the query row, the probed
//! cells, and the reserved partial results every search block writes into directly.

use cohort_gpu::consts::{GPU_MAX_CANDIDATES, SEL_MAX};
use cohort_gpu::knn::{GpuIvf, Precision};
use cohort_gpu::persistent::{knn_source, PersistentBackend, Prepared, Stage, SvcArgs};
use cohort_gpu::{load_module, DeviceInfo, GpuError};
use cudarc::driver::{CudaContext, CudaModule, CudaSlice};
use std::sync::Arc;

pub struct KnnPersistent {
    ivf: Arc<GpuIvf>,
    module: Arc<CudaModule>,
    sms: usize,
}

impl KnnPersistent {
    pub fn new(ivf: GpuIvf, dev: &DeviceInfo) -> Result<KnnPersistent, GpuError> {
        let module = load_module(&ivf.ctx, dev, knn_source())?;
        Ok(KnnPersistent {
            ivf: Arc::new(ivf),
            module,
            sms: dev.sms.max(1) as usize,
        })
    }

    /// Default stage blocks: filter and search cost about the same per query at SIFT-like
    /// shapes (nlist x dim vs nprobe x cell x dim); search gets twice the blocks for its
    /// k selection rounds per cell; reducing is light.
    fn default_blocks(&self) -> [usize; 3] {
        [self.sms, 2 * self.sms, (self.sms / 4).max(2)]
    }
}

/// The buffers an argument block points to.
struct Buffers {
    _queries: CudaSlice<f32>,
    _probes: CudaSlice<u32>,
    _part_ids: CudaSlice<u32>,
    _part_dist: CudaSlice<f32>,
    _scratch: CudaSlice<f32>,
}

impl PersistentBackend for KnnPersistent {
    fn context(&self) -> &Arc<CudaContext> {
        &self.ivf.ctx
    }

    fn module(&self) -> &Arc<CudaModule> {
        &self.module
    }

    fn prepare(
        &self,
        slots: usize,
        rx_stride: usize,
        blocks: Option<&[usize]>,
    ) -> Result<Prepared, GpuError> {
        use cohort_gpu::persistent::rt::addr;
        let ivf = &self.ivf;
        let rx_copy = (cohort_mq::SLOT_HEADER_BYTES + 12 + 4 * ivf.dim).next_multiple_of(16);
        if rx_copy > rx_stride {
            return Err(GpuError::Invalid(format!(
                "gpu-persistent carries k-NN vectors of at most {} f32 elements in a ring slot; the index has {}",
                (rx_stride - cohort_mq::SLOT_HEADER_BYTES - 12) / 4,
                ivf.dim
            )));
        }
        let b = match blocks {
            None => self.default_blocks(),
            Some(&[f, s, r]) if f > 0 && s > 0 && r > 0 => [f, s, r],
            Some(other) => {
                return Err(GpuError::Invalid(format!(
                    "k-NN has three stages (filter:search:reduce), each with at least one block; got {other:?}"
                )))
            }
        };
        let max_probe = ivf.nlist.min(SEL_MAX);
        let s = ivf.ctx.new_stream()?;
        let bufs = Buffers {
            _queries: s.alloc_zeros(slots * ivf.dim)?,
            _probes: s.alloc_zeros(slots * max_probe)?,
            _part_ids: s.alloc_zeros(slots * GPU_MAX_CANDIDATES)?,
            _part_dist: s.alloc_zeros(slots * GPU_MAX_CANDIDATES)?,
            _scratch: s.alloc_zeros(b[0] * ivf.nlist)?,
        };
        s.synchronize()?;
        let v = ivf.device_view(&s);
        let args = SvcArgs([
            v.centroids,
            v.vectors,
            v.ids,
            v.offsets,
            ivf.dim as u64,
            ivf.nlist as u64,
            ivf.n as u64,
            v.metric,
            ivf.default_nprobe as u64,
            addr(&bufs._queries, &s),
            addr(&bufs._probes, &s),
            addr(&bufs._part_ids, &s),
            addr(&bufs._part_dist, &s),
            addr(&bufs._scratch, &s),
            max_probe as u64,
            super::MAX_K as u64,
        ]);
        let search = match ivf.precision {
            Precision::F32 => "knn_p_search",
            Precision::F16 => "knn_p_search_f16",
            Precision::U8 => "knn_p_search_u8",
        };
        let block = cohort_gpu::consts::BLOCK as u32;
        Ok(Prepared {
            args,
            stages: vec![
                Stage {
                    kernel: "knn_p_filter",
                    blocks: b[0],
                    threads: block,
                    dyn_smem: 0,
                },
                Stage {
                    kernel: search,
                    blocks: b[1],
                    threads: block,
                    dyn_smem: 0,
                },
                Stage {
                    kernel: "knn_p_reduce",
                    blocks: b[2],
                    threads: block,
                    dyn_smem: (GPU_MAX_CANDIDATES * 8) as u32,
                },
            ],
            // Filter and reduce tasks: one per request at most; search: nprobe per request.
            pipe_caps: [slots, slots * max_probe, slots],
            rx_copy,
            keep: Box::new(bufs),
        })
    }
}
