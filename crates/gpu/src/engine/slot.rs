//! One GPU slot of the batching engine: a stream, a service's buffers for it, the completion
//! event of the batch in flight, and the CUDA graphs captured for it.

use super::{Resume, StreamBuffers};
use bytes::Bytes;
use cohort_engine::BatchSlot;
use cohort_proto::ErrorPayload;
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaEvent, CudaGraph, CudaStream};
use std::collections::HashMap;
use std::sync::Arc;

pub(super) struct GpuSlot {
    stream: Arc<CudaStream>,
    bufs: Box<dyn StreamBuffers>,
    cap: usize,
    use_graphs: bool,
    graphs: Graphs,
    done: Option<CudaEvent>,
}

/// Captured graphs (copy in, the kernels, copy out) per (batch key, rows), so a launch costs
/// one driver call instead of about a dozen. CudaGraph is not Send (a graph must not be used
/// from two threads at once); these are created and replayed only by the slot's control
/// thread (the map is empty when the slot moves to that thread).
#[derive(Default)]
struct Graphs(HashMap<(u64, usize), CudaGraph>);
// SAFETY: see above: only ever touched by one thread after the move.
unsafe impl Send for Graphs {}

impl GpuSlot {
    pub fn new(
        stream: Arc<CudaStream>,
        bufs: Box<dyn StreamBuffers>,
        cap: usize,
        use_graphs: bool,
    ) -> GpuSlot {
        GpuSlot {
            stream,
            bufs,
            cap,
            use_graphs,
            graphs: Graphs::default(),
            done: None,
        }
    }

    /// Makes the slot's context current on the calling thread. When it already is, that
    /// costs one `cuCtxGetCurrent` (the driver's thread-local read, no lock), which is why
    /// every launch and poll may call it rather than tracking which context is current.
    fn bind(&self) -> Result<(), String> {
        self.stream
            .context()
            .bind_to_thread()
            .map_err(|e| e.to_string())
    }

    /// Replays (capturing on first use) the graph of `rows` rows of `key`.
    fn launch_graph(&mut self, key: u64, rows: usize) -> Result<(), crate::GpuError> {
        let k = (key, rows);
        if !self.graphs.0.contains_key(&k) {
            let s = self.stream.clone();
            // Relaxed: the staging buffers' host accessors may query their (completed) events.
            s.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)?;
            let queued = self.bufs.enqueue(&s, key, rows);
            // End the capture whatever happened, so the stream is usable again.
            let graph = s.end_capture(CUgraphInstantiate_flags(0))?;
            queued?;
            let graph = graph.ok_or_else(|| {
                crate::GpuError::Invalid("graph capture produced no graph".into())
            })?;
            self.graphs.0.insert(k, graph);
        }
        self.graphs.0[&k].launch()?;
        Ok(())
    }
}

impl BatchSlot for GpuSlot {
    fn capacity(&self) -> usize {
        self.cap
    }

    fn stage(&mut self, key: u64, row: usize, payload: &[u8]) -> Result<(), ErrorPayload> {
        self.bufs.stage(key, row, payload)
    }

    fn launch(&mut self, key: u64, rows: usize) -> Result<(), String> {
        // A control thread serving several GPUs switches contexts between their slots; a
        // backend's enqueue may use driver calls that act on the current one.
        self.bind()?;
        let r = if self.use_graphs {
            self.launch_graph(key, bucket(rows, self.cap))
        } else {
            self.bufs.enqueue(&self.stream, key, rows)
        };
        r.and_then(|()| Ok(self.stream.record_event(None)?))
            .map(|e| self.done = Some(e))
            .map_err(|e| e.to_string())
    }

    fn poll(&mut self) -> Result<bool, String> {
        if !self.done.as_ref().is_none_or(|e| e.is_complete()) {
            return Ok(false);
        }
        self.bind()?;
        match self.bufs.resume(&self.stream).map_err(|e| e.to_string())? {
            Resume::Done => Ok(true),
            Resume::Waiting => Ok(false),
            Resume::Enqueued => {
                let e = self.stream.record_event(None).map_err(|e| e.to_string())?;
                self.done = Some(e);
                Ok(false)
            }
        }
    }

    fn answer(&mut self, key: u64, row: usize, out: &mut Vec<u8>) -> Result<(), ErrorPayload> {
        self.bufs.answer(key, row, out)
    }

    fn answer_shared(&mut self, key: u64, row: usize) -> Option<Result<Bytes, ErrorPayload>> {
        self.bufs.answer_shared(key, row)
    }
}

/// The graph bucket of a batch of `n`: rounded up to a multiple of an eighth of the power of
/// two below it (so padding adds under 12.5% kernel work; measured: power-of-two buckets, up to
/// 2x, cost more than the launches they saved), at most `max` (the staging capacity; full
/// batches are exact). Graphs per key: about 8 log2(max).
pub fn bucket(n: usize, max: usize) -> usize {
    let floor_pow2 = 1usize << (usize::BITS - 1 - n.max(1).leading_zeros());
    let step = (floor_pow2 / 8).max(1);
    n.div_ceil(step).saturating_mul(step).min(max)
}

#[cfg(test)]
mod tests {
    use super::bucket;

    #[test]
    fn buckets_pad_at_most_an_eighth_and_never_past_the_staging() {
        for max in [1usize, 7, 256, 1000, 1024] {
            let mut seen = std::collections::BTreeSet::new();
            for nq in 1..=max {
                let b = bucket(nq, max);
                assert!(b >= nq && b <= max, "nq {nq} max {max} -> {b}");
                assert!((b - nq) * 8 <= nq.max(8), "nq {nq} -> {b}");
                seen.insert(b);
            }
            assert_eq!(bucket(max, max), max);
            assert!(seen.len() <= 8 * (usize::BITS - max.leading_zeros()) as usize + 1);
        }
    }
}
