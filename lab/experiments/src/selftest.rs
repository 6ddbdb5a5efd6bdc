//! The experiments' kernels against their CPU twins (`cohort selftest gpu` runs these with
//! every service's checks).

use cohort_gpu::GpuError;

/// Every check, one line each, or the first failure.
pub fn run(seed: u64) -> Result<Vec<String>, GpuError> {
    let mut lines = check_streams()?;
    lines.extend(check_numa_calib(seed)?);
    Ok(lines)
}

/// The NUMA calibration kernels (triad, stencil) against their twins, every split of the work,
/// on GPU 0 (both "GPUs" the same one here; `cohort-lab sim numa calibrate` runs them on two).
pub fn check_numa_calib(seed: u64) -> Result<Vec<String>, GpuError> {
    use crate::numa_calib::{Calibration, Kind, SPLITS};
    let devs = cohort_gpu::probe()?;
    let cal = Calibration::open(&devs[..1])?;
    let floats = 64 * crate::CALIB_ROW_FLOATS * crate::CALIB_TILE_ROWS;
    let mut lines = Vec::new();
    for kind in [Kind::Triad, Kind::Stencil] {
        for split in SPLITS {
            let m = cal.run(kind, split, floats, 2, seed)?;
            lines.push(format!(
                "ok   numa calibration {kind:?} {split:?}: {} outputs equal the twin",
                m.checked
            ));
        }
    }
    Ok(lines)
}

/// The multi-stream benchmark's kernel against its twin: every packet checked, in each memory
/// mode, version A and B, with a CPU thread taking packets too.
pub fn check_streams() -> Result<Vec<String>, GpuError> {
    use crate::streams::{run, Inputs, MemoryMode, RunConfig, StreamGpu, Version, OUT_FLOATS};
    let dev = cohort_gpu::probe()?
        .into_iter()
        .next()
        .expect("probe returns a device");
    let gpu = StreamGpu::open(&dev)?;
    let mut lines = Vec::new();
    for mode in [
        MemoryMode::Pinned,
        MemoryMode::Managed,
        MemoryMode::ManagedPrefetch,
    ] {
        let (packets, chunk_floats) = (12, 4_099);
        let inputs = Inputs::new(
            gpu.context(),
            mode,
            packets,
            chunk_floats,
            4 * OUT_FLOATS * 4,
        )?;
        for version in [Version::A, Version::B] {
            let cfg = RunConfig {
                packets,
                chunk_floats,
                inner: 5,
                streams: 3,
                version,
                mode,
                cpu_threads: 1,
                check_every: 1,
            };
            inputs.to_host(&gpu.context().default_stream())?;
            let r = run(std::slice::from_ref(&gpu), &inputs, &cfg)?;
            let gpu_done: u64 = r.gpu_packets.iter().sum();
            if gpu_done + r.cpu_packets != packets as u64 || r.checked != gpu_done {
                return Err(GpuError::Invalid(format!(
                    "streams {mode:?} {version:?}: {gpu_done} GPU + {} CPU packets of {packets}, {} checked",
                    r.cpu_packets, r.checked
                )));
            }
            lines.push(format!(
                "ok   streams {} version {version:?}: {gpu_done} GPU packets equal the twin, {} on the CPU",
                mode.name(),
                r.cpu_packets
            ));
        }
    }
    Ok(lines)
}
