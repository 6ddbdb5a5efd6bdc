//! What driving a GPU from the host costs, measured (Centaur's O_k and O_q): the host time of
//! one kernel launch enqueued back to back, the time per launch until the stream drains (an
//! empty kernel: what a cohort's fixed kernel count costs at least), and the host time of one
//! completion query (an event that has completed, polled as a control thread
//! polls), and the device memory's copy bandwidth.

use crate::prelude::{KernelSource, Prelude};
use crate::{DeviceInfo, GpuError};
use cudarc::driver::{LaunchConfig, PushKernelArg};
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// Microseconds per operation.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq)]
pub struct Overheads {
    /// O_k: host time to enqueue one kernel launch.
    pub launch_us: f64,
    /// Time per launch of an empty kernel, launches back to back until the stream drains:
    /// the larger of the host's enqueue and the device's per-kernel time (what a fixed kernel
    /// count per cohort costs at least).
    pub device_gap_us: f64,
    /// O_q: host time of one completion query (cuEventQuery of a completed event).
    pub query_us: f64,
    /// Device memory bandwidth, GB/s: a device-to-device copy's bytes read plus written
    /// over its time (what scanning lists is bound by once enough SMs scan).
    pub copy_gbs: f64,
}

const EMPTY: &str =
    r#"extern "C" __global__ void cohort_empty(int x) { if (x < 0) asm volatile("trap;"); }"#;

/// Measures on `dev` (`launches` launches, as many queries).
pub fn measure(dev: &DeviceInfo, launches: usize) -> Result<Overheads, GpuError> {
    assert!(launches > 0, "at least one launch to time");
    let unit = KernelSource::assemble(
        "cohort_empty.cu",
        &Prelude::new("overheads"),
        &[("cohort_empty.cu", EMPTY)],
    );
    let ctx = crate::launch::context(dev)?;
    let f = crate::load_module(&ctx, dev, unit)?.load_function("cohort_empty")?;
    let s = ctx.new_stream()?;
    let cfg = LaunchConfig {
        grid_dim: (1, 1, 1),
        block_dim: (32, 1, 1),
        shared_mem_bytes: 0,
    };
    let launch = |n: usize| -> Result<(), GpuError> {
        for _ in 0..n {
            let x = 1i32;
            let mut b = s.launch_builder(&f);
            b.arg(&x);
            // SAFETY: the kernel takes one int and touches no memory.
            unsafe { b.launch(cfg) }?;
        }
        Ok(())
    };
    launch(launches.min(1000))?;
    s.synchronize()?;
    let t0 = Instant::now();
    launch(launches)?;
    let enqueued = t0.elapsed();
    s.synchronize()?;
    let drained = t0.elapsed();
    let ev = s.record_event(None)?;
    ev.synchronize()?;
    let t1 = Instant::now();
    let mut done = 0usize;
    for _ in 0..launches {
        done += ev.is_complete() as usize;
    }
    let queried = t1.elapsed();
    assert_eq!(done, launches, "a completed event reads complete");
    let bytes = 1usize << 29;
    let src = s.alloc_zeros::<u8>(bytes)?;
    let mut dst = s.alloc_zeros::<u8>(bytes)?;
    s.memcpy_dtod(&src, &mut dst)?;
    s.synchronize()?;
    let t2 = Instant::now();
    let copies = 8;
    for _ in 0..copies {
        s.memcpy_dtod(&src, &mut dst)?;
    }
    s.synchronize()?;
    let copy_gbs = (2 * bytes * copies) as f64 / t2.elapsed().as_secs_f64() / 1e9;
    let per = |d: std::time::Duration| d.as_secs_f64() * 1e6 / launches as f64;
    Ok(Overheads {
        launch_us: per(enqueued),
        device_gap_us: per(drained),
        query_us: per(queried),
        copy_gbs,
    })
}
