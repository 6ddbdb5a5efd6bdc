//! The CPU twin of a GPU slot: a batch slot that runs a service's CPU function on every staged
//! row when the batch launches. The generic batcher runs on it in CI (no GPU there), and it is
//! what a hybrid engine's CPU side would batch onto.

use crate::batch::BatchSlot;
use crate::service::Service;
use cohort_proto::ErrorPayload;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct CpuTwinSlot {
    service: Arc<dyn Service>,
    cap: usize,
    /// Staged payloads end to end, and each row's span in it.
    arena: Vec<u8>,
    spans: Vec<(usize, usize)>,
    /// Per row: its answer bytes (buffers reused between batches) or its error.
    results: Vec<(Vec<u8>, Option<ErrorPayload>)>,
    /// A batch counts as finished this long after its launch at the earliest (a device's
    /// batch time; 0 = as soon as the CPU is done).
    min_batch_time: Duration,
    launched: Option<Instant>,
}

impl CpuTwinSlot {
    pub fn new(service: Arc<dyn Service>, cap: usize, min_batch_time: Duration) -> CpuTwinSlot {
        CpuTwinSlot {
            service,
            cap,
            arena: Vec::new(),
            spans: Vec::with_capacity(cap),
            results: (0..cap).map(|_| (Vec::new(), None)).collect(),
            min_batch_time,
            launched: None,
        }
    }
}

impl BatchSlot for CpuTwinSlot {
    fn capacity(&self) -> usize {
        self.cap
    }

    fn stage(&mut self, _key: u64, row: usize, payload: &[u8]) -> Result<(), ErrorPayload> {
        if row == 0 {
            self.arena.clear();
            self.spans.clear();
        }
        assert_eq!(row, self.spans.len(), "rows are staged in order");
        self.spans.push((self.arena.len(), payload.len()));
        self.arena.extend_from_slice(payload);
        Ok(())
    }

    fn launch(&mut self, _key: u64, rows: usize) -> Result<(), String> {
        assert_eq!(rows, self.spans.len(), "launch of the staged rows");
        for (r, &(off, len)) in self.spans.iter().enumerate() {
            let (out, err) = &mut self.results[r];
            out.clear();
            // A panic here is a backend panic: it ends the lane (its requests get INTERNAL
            // from the ingresses), as a GPU backend's would.
            *err = self
                .service
                .execute_cpu(&self.arena[off..off + len], out)
                .err();
        }
        self.launched = Some(Instant::now());
        Ok(())
    }

    fn poll(&mut self) -> Result<bool, String> {
        Ok(self
            .launched
            .is_none_or(|t| t.elapsed() >= self.min_batch_time))
    }

    fn answer(&mut self, _key: u64, row: usize, out: &mut Vec<u8>) -> Result<(), ErrorPayload> {
        match &self.results[row] {
            (_, Some(e)) => Err(e.clone()),
            (bytes, None) => {
                out.extend_from_slice(bytes);
                Ok(())
            }
        }
    }
}
