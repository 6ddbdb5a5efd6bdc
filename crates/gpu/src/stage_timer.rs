//! The GPU time of each stage of work queued on one stream: an event recorded before the
//! first stage and after each one, read once the stream has finished. For profiles and
//! kernel benchmarks (a served path never times itself this way: it synchronises).

use crate::GpuError;
use cudarc::driver::{sys::CUevent_flags, CudaEvent, CudaStream};
use std::sync::Arc;

pub struct StageTimer {
    stream: Arc<CudaStream>,
    marks: Vec<(&'static str, CudaEvent)>,
}

impl StageTimer {
    /// Records the start on `stream`.
    pub fn start(stream: &Arc<CudaStream>) -> Result<StageTimer, GpuError> {
        let mut t = StageTimer {
            stream: stream.clone(),
            marks: Vec::new(),
        };
        t.mark("start")?;
        Ok(t)
    }

    /// Records the end of `stage` (everything queued on the stream since the last mark).
    pub fn mark(&mut self, stage: &'static str) -> Result<(), GpuError> {
        // Timing events: the default flags (cudarc's own default disables timing).
        let e = self
            .stream
            .context()
            .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        e.record(&self.stream)?;
        self.marks.push((stage, e));
        Ok(())
    }

    /// Waits for the stream, then each stage's time in milliseconds, in the order marked.
    pub fn finish(self) -> Result<Vec<(&'static str, f32)>, GpuError> {
        self.stream.synchronize()?;
        self.marks
            .windows(2)
            .map(|w| Ok((w[1].0, w[0].1.elapsed_ms(&w[1].1)?)))
            .collect()
    }
}
