//! k-NN's GPU backend: requests batch by (k, nprobe); a request's vector is decoded straight
//! from its message into the slot's pinned staging; a batch runs the IVF kernels of
//! `gpu_ivf` (copy in, filter -> search -> select, copy out); each row's (id, distance)
//! list becomes the same answer payload the CPU twin (`Knn::execute_cpu`) writes.

use super::gpu_ivf::{check_shape, Buffers, GpuIvf, NO_ID};
use super::{parse_head, vector_into, Head};
use cohort_engine::BatchBackend;
use cohort_gpu::engine::{GpuBackend, Pinned, StreamBuffers};
use cohort_gpu::GpuError;
use cohort_proto::{ErrorCode, ErrorPayload};
use cudarc::driver::{CudaContext, CudaStream};
use std::sync::Arc;

pub struct KnnGpu {
    ivf: Arc<GpuIvf>,
}

impl KnnGpu {
    pub fn new(ivf: GpuIvf) -> KnnGpu {
        KnnGpu { ivf: Arc::new(ivf) }
    }

    fn head(&self, p: &[u8]) -> Result<Head, ErrorPayload> {
        parse_head(p, self.ivf.dim, self.ivf.nlist, self.ivf.n)
    }
}

/// The batch key of (k, nprobe), and back.
pub(super) fn key(k: usize, nprobe: usize) -> u64 {
    (k as u64) << 32 | nprobe as u64
}
pub(super) fn unkey(key: u64) -> (usize, usize) {
    ((key >> 32) as usize, (key & 0xFFFF_FFFF) as usize)
}

impl BatchBackend for KnnGpu {
    fn batch_key(&self, payload: &[u8]) -> Result<u64, ErrorPayload> {
        let h = self.head(payload)?;
        let nprobe = if h.nprobe == 0 {
            self.ivf.default_nprobe
        } else {
            h.nprobe
        };
        check_shape(self.ivf.nlist, h.k, nprobe)
            .map_err(|m| ErrorPayload::new(ErrorCode::BadRequest, m))?;
        Ok(key(h.k, nprobe))
    }
}

impl GpuBackend for KnnGpu {
    fn context(&self) -> &Arc<CudaContext> {
        &self.ivf.ctx
    }

    fn stream_buffers(
        &self,
        stream: &Arc<CudaStream>,
        cap: usize,
    ) -> Result<Box<dyn StreamBuffers>, GpuError> {
        let ctx = &self.ivf.ctx;
        // Zeroed: graph buckets copy whole buckets, and rows never staged must be numbers.
        let q = Pinned::for_uploads(ctx, cap * self.ivf.dim)?;
        Ok(Box::new(KnnBuffers {
            ivf: self.ivf.clone(),
            bufs: self.ivf.buffers(stream, cap)?,
            q,
            answers: PinnedAnswers::new(ctx, cap)?,
        }))
    }

    fn device_bytes(&self) -> usize {
        self.ivf.device_bytes
    }
}

struct KnnBuffers {
    ivf: Arc<GpuIvf>,
    bufs: Buffers,
    q: Pinned<f32>,
    answers: PinnedAnswers,
}

impl StreamBuffers for KnnBuffers {
    fn stage(&mut self, _key: u64, row: usize, payload: &[u8]) -> Result<(), ErrorPayload> {
        let dim = self.ivf.dim;
        let head = parse_head(payload, dim, self.ivf.nlist, self.ivf.n)?;
        vector_into(
            payload,
            head,
            &mut self.q.as_mut_slice()[row * dim..(row + 1) * dim],
        )
    }

    fn enqueue(&mut self, s: &Arc<CudaStream>, key: u64, rows: usize) -> Result<(), GpuError> {
        let (k, nprobe) = unkey(key);
        let dim = self.ivf.dim;
        s.memcpy_htod(
            &self.q.as_slice()[..rows * dim],
            &mut self.bufs.q.slice_mut(0..rows * dim),
        )?;
        self.ivf.launch_into(s, &mut self.bufs, rows, k, nprobe)?;
        self.answers.copy_out(s, &self.bufs, rows, k)
    }

    fn answer(&mut self, key: u64, row: usize, out: &mut Vec<u8>) -> Result<(), ErrorPayload> {
        self.answers.write(key, row, out);
        Ok(())
    }
}

/// One row's answer in the layout of `encode_response_into`, skipping padding ids (fewer
/// than k candidates), as `super::gpu_ivf::to_neighbors` does.
fn write_answer(ids: &[u32], dist: &[f32], out: &mut Vec<u8>) {
    let n = ids.iter().filter(|&&id| id != NO_ID).count();
    out.extend_from_slice(&(n as u32).to_le_bytes());
    for (id, d) in ids.iter().zip(dist).filter(|(&id, _)| id != NO_ID) {
        out.extend_from_slice(&id.to_le_bytes());
        out.extend_from_slice(&d.to_le_bytes());
    }
}

/// A slot's answers in pinned host memory: the k nearest of each row of the cohort last
/// enqueued, as its batch backend (whole or sharded index) copied them out.
pub(super) struct PinnedAnswers {
    ids: Pinned<u32>,
    dist: Pinned<f32>,
    /// k of the batch last enqueued (row stride of ids/dist).
    k: usize,
}

impl PinnedAnswers {
    pub(super) fn new(ctx: &Arc<CudaContext>, cap: usize) -> Result<PinnedAnswers, GpuError> {
        let k = super::gpu_ivf::GPU_MAX_K;
        Ok(PinnedAnswers {
            ids: Pinned::for_reads(ctx, cap * k)?,
            dist: Pinned::for_reads(ctx, cap * k)?,
            k: 0,
        })
    }

    /// The k nearest of the first `rows` queries (`b.out_ids` / `b.out_dist`), on `s`.
    pub(super) fn copy_out(
        &mut self,
        s: &Arc<CudaStream>,
        b: &Buffers,
        rows: usize,
        k: usize,
    ) -> Result<(), GpuError> {
        s.memcpy_dtoh(
            &b.out_ids.slice(0..rows * k),
            &mut self.ids.as_mut_slice()[..rows * k],
        )?;
        s.memcpy_dtoh(
            &b.out_dist.slice(0..rows * k),
            &mut self.dist.as_mut_slice()[..rows * k],
        )?;
        self.k = k;
        Ok(())
    }

    /// Row `row`'s answer (after the slot's stream finished), for a batch of `key`.
    pub(super) fn write(&self, key: u64, row: usize, out: &mut Vec<u8>) {
        let (k, _) = unkey(key);
        debug_assert_eq!(k, self.k);
        let ids = &self.ids.as_slice()[row * k..(row + 1) * k];
        let dist = &self.dist.as_slice()[row * k..(row + 1) * k];
        write_answer(ids, dist, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gpu_answer_layout_is_the_cpu_twins() {
        let ids = [4, 9, NO_ID, 2, NO_ID];
        let dist = [0.5, 1.0, 0.0, 2.0, 0.0];
        let mut out = Vec::new();
        write_answer(&ids, &dist, &mut out);
        let rows = crate::gpu_ivf::to_neighbors(&ids, &dist, 1, 5);
        assert_eq!(out, super::super::encode_response(&rows[0]));
    }

    #[test]
    fn batch_keys_round_trip() {
        for (k, np) in [(1, 1), (10, 16), (128, 4096), (1024, 65535)] {
            assert_eq!(unkey(key(k, np)), (k, np));
        }
    }
}
